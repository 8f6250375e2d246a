"""./hvstor kernel-build: a guest kernel from a kernel tree of your own, configured with the
project's fragment (guest-kernel/hvstor.config, and gcov.config for line coverage) on top of
the tree's defconfig (or a config you give), every line of the fragment checked after
olddefconfig, then built and its modules installed where `--kernel`/`--modules` and a
spec's `kernel =`/`modules =` take them."""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

from .paths import ROOT

FRAGMENT = os.path.join(ROOT, "guest-kernel", "hvstor.config")
GCOV_FRAGMENT = os.path.join(ROOT, "guest-kernel", "gcov.config")
GCOV_MAKE = "GCOV_PROFILE_storvsc_drv.o=y"     # profile storvsc_drv.c alone
_SET = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


class KernelError(Exception):
    """The tree cannot be configured or built as asked."""


def fragment_lines(path: str) -> Dict[str, Optional[str]]:
    """A fragment's settings: symbol -> value, None for "is not set"."""
    out: Dict[str, Optional[str]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            m = _SET.match(line)
            if m:
                out[m.group(1)] = m.group(2)
                continue
            m = _UNSET.match(line)
            if m:
                out[m.group(1)] = None
    return out


def config_values(path: str) -> Dict[str, str]:
    """A .config's set symbols."""
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _SET.match(line.strip())
            if m:
                out[m.group(1)] = m.group(2)
    return out


def dropped(wanted: Dict[str, Optional[str]], have: Dict[str, str]) -> List[str]:
    """The settings of a fragment a configured .config does not carry (a dependency the
    tree lacks, a symbol it does not know), each with what the .config says instead."""
    out = []
    for sym, want in wanted.items():
        got = have.get(sym)
        if want is None and got in ("y", "m"):
            out.append(f"{sym} is not set: the config has {sym}={got} (something selects it)")
        elif want is not None and got != want:
            out.append(f"{sym}={want}: the config has {sym + '=' + got if got is not None else 'it unset'}")
    return out


def _make(tree: str, out: str, *targets: str, jobs: int = 1, log: Optional[str] = None) -> None:
    cmd = ["make", "-C", tree, f"O={out}", f"-j{jobs}"] + list(targets)
    if log is None:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if r.returncode != 0:
            raise KernelError(f"{' '.join(cmd)} failed:\n" + "\n".join(r.stdout.splitlines()[-20:]))
        return
    with open(log, "w", encoding="utf-8") as f:
        r2 = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
    if r2.returncode != 0:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = [ln.rstrip() for ln in f.readlines()[-25:]]
        raise KernelError(f"{' '.join(cmd)} failed (whole log: {log}):\n" + "\n".join(tail))


def configure(tree: str, out: str, base: Optional[str], gcov: bool) -> List[str]:
    """out/.config: base (or the tree's defconfig) with the fragments merged, through
    olddefconfig. Returns the fragment settings that did not survive (empty: all did)."""
    if not os.path.isfile(os.path.join(tree, "Makefile")) or \
            not os.path.isfile(os.path.join(tree, "scripts", "kconfig", "merge_config.sh")):
        raise KernelError(f"{tree} is not a kernel source tree (no Makefile or scripts/kconfig/merge_config.sh)")
    os.makedirs(out, exist_ok=True)
    if base:
        shutil.copyfile(base, os.path.join(out, ".config"))
        _make(tree, out, "olddefconfig")
    else:
        _make(tree, out, "defconfig")
    frags = [FRAGMENT] + ([GCOV_FRAGMENT] if gcov else [])
    r = subprocess.run(["sh", os.path.join(tree, "scripts", "kconfig", "merge_config.sh"), "-m", "-O", out,
                        os.path.join(out, ".config")] + frags,
                       cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if r.returncode != 0:
        raise KernelError("merge_config.sh failed:\n" + "\n".join(r.stdout.splitlines()[-20:]))
    _make(tree, out, "olddefconfig")
    wanted: Dict[str, Optional[str]] = {}
    for f in frags:
        wanted.update(fragment_lines(f))
    return dropped(wanted, config_values(os.path.join(out, ".config")))


def _progress(log: str, stop: List[bool]) -> None:
    """Prints how far the build is every 60 s (objects compiled so far)."""
    start = time.monotonic()
    while not stop[0]:
        for _ in range(60):
            if stop[0]:
                return
            time.sleep(1)
        try:
            with open(log, encoding="utf-8", errors="replace") as f:
                n = sum(1 for ln in f if ln.lstrip().startswith("CC"))
        except OSError:
            n = 0
        print(f"[hvstor] building: {n} objects compiled, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)


def build(tree: str, out: str, gcov: bool, jobs: int) -> Tuple[str, str]:
    """Builds bzImage and modules in out, installs the modules under out/mods. Returns
    (image, lib/modules/<release> folder)."""
    log = os.path.join(out, "build.log")
    stop = [False]
    t = threading.Thread(target=_progress, args=(log, stop), daemon=True)
    t.start()
    try:
        _make(tree, out, "bzImage", "modules", *([GCOV_MAKE] if gcov else []), jobs=jobs, log=log)
    finally:
        stop[0] = True
    mods = os.path.join(out, "mods")
    shutil.rmtree(mods, ignore_errors=True)
    _make(tree, out, "modules_install", f"INSTALL_MOD_PATH={mods}", log=os.path.join(out, "modules_install.log"))
    found = glob.glob(os.path.join(mods, "lib", "modules", "*"))
    if len(found) != 1:
        raise KernelError(f"modules_install left {len(found)} lib/modules folders in {mods}")
    if gcov:
        # The notes file beside the installed module: a CI artifact without the build tree
        # still has it (hvmachine.coverage.find_gcno looks there first).
        for ko in glob.glob(os.path.join(found[0], "kernel", "drivers", "scsi", "hv_storvsc.ko*")):
            shutil.copyfile(os.path.join(out, "drivers", "scsi", "storvsc_drv.gcno"),
                            os.path.join(os.path.dirname(ko), "storvsc_drv.gcno"))
    return os.path.join(out, "arch", "x86", "boot", "bzImage"), found[0]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hvstor kernel-build",
        description="Configure a kernel tree for an hv-storvsc guest (its defconfig, or --config, with "
                    "guest-kernel/hvstor.config merged; every line of it checked) and build it.")
    ap.add_argument("tree", help="the kernel source tree")
    ap.add_argument("--out", required=True, help="the build folder (make O=); the modules go to OUT/mods")
    ap.add_argument("--config", help="start from this .config instead of the tree's defconfig")
    ap.add_argument("--gcov", action="store_true",
                    help="line coverage of storvsc_drv.c (guest-kernel/gcov.config; coverage = lines in a spec)")
    ap.add_argument("--config-only", action="store_true", help="configure and check, build nothing")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="make -j (default: the CPUs)")
    return ap


def main(argv: List[str]) -> int:
    ns = parser().parse_args(argv)
    tree, out = os.path.abspath(ns.tree), os.path.abspath(ns.out)
    try:
        t0 = time.monotonic()
        bad = configure(tree, out, ns.config, ns.gcov)
        if bad:
            print("[hvstor] error: the config lost settings the guest needs:\n  " + "\n  ".join(bad), file=sys.stderr)
            return 1
        print(f"[hvstor] {out}/.config: every line of the fragment{'s' if ns.gcov else ''} holds "
              f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        if ns.config_only:
            return 0
        t1 = time.monotonic()
        image, modules = build(tree, out, ns.gcov, ns.jobs)
        print(f"[hvstor] built in {time.monotonic() - t1:.0f} s; boot it with:", file=sys.stderr)
        print(f"--kernel {image} --modules {modules}")
        return 0
    except (KernelError, OSError) as e:
        print(f"[hvstor] error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
