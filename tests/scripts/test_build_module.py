"""scripts/build-module.sh against Debian's guest kernels, with real downloads and builds.

- --source-only DIR writes exactly the storvsc_drv.c a build for the kernel patches, says
  where it came from, and refuses a DIR that is a file or that holds other edits; a plain
  `diff -u` of that file builds.
- debian-6.12 (trixie's headers, adapted to this bookworm host): headers marked adapted whose
  objtool.real-x86 does not run here (Debian's own build, which wants GLIBC_2.38) are found
  and redone by the next build; a build that fails for a reason the check cannot see prints
  the command that starts over, and that command builds the module.

The builds run in their own cache, $HVSTOR_CACHE/test-build-module (kept between runs, so
the first adaptation is done once), whose guest/ is the main cache's (guest-assets.sh locks
it). They take minutes: downloads, and for 6.12 `make modules_prepare` each time the test
breaks the headers. A run that cannot fetch the packages is skipped.

    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/scripts/test_build_module.py
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-module.sh"
MAIN_CACHE = Path(os.environ.get("HVSTOR_CACHE") or ROOT / ".cache").resolve()
CACHE = MAIN_CACHE / "test-build-module"
KERNELS = ("debian-6.1", "debian-6.12")
# What a failed download or a missing package says (apt, guest-assets.sh, build-module.sh).
UNFETCHABLE = re.compile(
    r"apt-get download .* failed|Failed to fetch|Temporary failure resolving|Could not resolve"
    r"|Unable to locate package|no linux-image-amd64 candidate|has no candidate|is not in the archive")
LOADER_ERROR = re.compile(r"version `GLIBC_[0-9.]+' not found")


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    """The environment of the builds: the test's own cache, sharing the main cache's guest/."""
    (MAIN_CACHE / "guest").mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    guest = CACHE / "guest"
    if not guest.is_symlink():
        if guest.exists():
            shutil.rmtree(guest)
        guest.symlink_to(MAIN_CACHE / "guest")
    e = {k: v for k, v in os.environ.items() if k != "HVSTOR_KMOD_REBUILD"}
    e["HVSTOR_CACHE"] = str(CACHE)
    return e


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """build-module.sh ARGS, niced (another job may share the machine); no time limit."""
    return subprocess.run(["nice", "-n", "10", "bash", str(SCRIPT), *args], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)


def must_succeed(p: subprocess.CompletedProcess[str], what: str) -> Path:
    """The path on p's last stdout line; skips the test when packages could not be fetched."""
    if p.returncode != 0:
        m = UNFETCHABLE.search(p.stderr)
        if m:
            pytest.skip(f"{what}: the packages cannot be fetched here ({m.group(0)})")
        pytest.fail(f"{what} failed (exit status {p.returncode}):\n{p.stderr[-4000:]}")
    lines = p.stdout.strip().splitlines()
    assert lines, f"{what} printed no path:\n{p.stderr[-2000:]}"
    return Path(lines[-1])


def build(kernel: str, patch: str, env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A module for KERNEL with PATCH: its path and its build-info."""
    ko = must_succeed(run(["--kernel", kernel, patch], env), f"building {patch} for {kernel}")
    assert ko.is_file(), f"no module at {ko}"
    return ko, read_info(ko.parent / "build-info")


def read_info(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (build-info, source-info), comments left out."""
    info: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        k, eq, v = line.partition("=")
        if eq and not line.startswith("#"):
            info[k] = v
    return info


def harmless_patch(source: Path, out: Path, paths: tuple[str, str]) -> Path:
    """A unified diff of SOURCE that adds a comment holding a new token (a new cache key each
    run), with the given ---/+++ names."""
    old = source.read_text(encoding="utf-8").splitlines(keepends=True)
    i = next((n for n, ln in enumerate(old) if ln.startswith("static int storvsc_vcpus_per_sub_channel")),
             next(n for n, ln in enumerate(old) if ln.startswith("static ")))
    new = old[:i] + [f"/* test-build-module {uuid.uuid4().hex} */\n"] + old[i:]
    out.write_text("".join(difflib.unified_diff(old, new, *paths)), encoding="utf-8")
    return out


def stamp(info: dict[str, str]) -> bytes:
    """What the build appends to a source without MODULE_VERSION (its version= in build-info)."""
    return f'\nMODULE_VERSION("{info["version"]}");\n'.encode()


def vermagic(ko: Path) -> str:
    """The module's vermagic (modinfo)."""
    return subprocess.run(["modinfo", "-F", "vermagic", str(ko)], stdout=subprocess.PIPE, text=True,
                          check=True).stdout.rstrip("\n")


def loads_in_guest(ko: Path) -> bool:
    """Whether KO's vermagic is the guest kernel's: that of the stock hv_storvsc in the module
    tree its build-info names."""
    info = read_info(ko.parent / "build-info")
    stock = sorted(Path(info["modules"]).rglob("hv_storvsc.ko*"))
    assert stock, f"no stock hv_storvsc under {info['modules']}"
    return vermagic(ko) == vermagic(stock[0]) == info["vermagic"]


def kbuild_of(info: dict[str, str]) -> tuple[Path, Path]:
    """The headers' root (HDR_ROOT) and unpacked linux-kbuild folder of a Debian build."""
    kdir = Path(info["kdir"])
    root = kdir.parents[2]            # HDR_ROOT/usr/src/linux-headers-KVER
    kbuilds = sorted((root / "usr" / "lib").glob("linux-kbuild-*"))
    assert kbuilds, f"no linux-kbuild under {root}"
    return root, kbuilds[0]


def start(program: Path) -> subprocess.CompletedProcess[str]:
    """PROGRAM run with no arguments, as the build script's check runs it."""
    return subprocess.run([str(program)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False, cwd="/")


@pytest.mark.parametrize("kernel", KERNELS)
def test_source_only_is_the_file_the_build_patches(kernel: str, env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "src"
    src = must_succeed(run(["--kernel", kernel, "--source-only", str(out)], env), f"--source-only for {kernel}")
    assert src == out / "storvsc_drv.c"
    text = src.read_bytes()
    assert b"storvsc_probe" in text
    series = kernel.removeprefix("debian-")
    origin = read_info(out / "source-info")
    guest_version = (MAIN_CACHE / "guest" / kernel / "package-version").read_text(encoding="utf-8").strip()
    assert origin["package"] == f"linux-source-{series}"
    assert origin["package-version"] == guest_version
    assert origin["path"] == "drivers/scsi/storvsc_drv.c"

    # The stock source rebuilt: the build's copy is that file plus the version stamp.
    ko, info = build(kernel, "none", env)
    assert Path(info["source"]).read_bytes() == text
    assert (ko.parent / "storvsc_drv.c").read_bytes() == text + stamp(info)

    # A plain diff of the file written (no tree path in it) is what a developer makes.
    edited = tmp_path / "storvsc_drv.c"
    patch = harmless_patch(src, tmp_path / "plain.patch", ("storvsc_drv.c.orig", "storvsc_drv.c"))
    subprocess.run(["patch", "-s", "-o", str(edited), str(src), str(patch)], check=True)
    ko, info = build(kernel, str(patch), env)
    assert info["source"] == origin["source"]
    assert (ko.parent / "storvsc_drv.c").read_bytes() == edited.read_bytes() + stamp(info)
    assert loads_in_guest(ko)

    # ./hvstor driver-source is this mode, by its user-facing name.
    via = tmp_path / "via-hvstor"
    p = subprocess.run([str(ROOT / "hvstor"), "driver-source", "--kernel", kernel, str(via)], cwd=ROOT, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (via / "storvsc_drv.c").read_bytes() == text

    # Run again: the same file is fine, another one (edits) is kept and refused.
    assert run(["--kernel", kernel, "--source-only", str(out)], env).returncode == 0
    src.write_bytes(text + b"/* my edit */\n")
    p = run(["--kernel", kernel, "--source-only", str(out)], env)
    assert p.returncode != 0
    assert "exists and differs" in p.stderr
    assert src.read_bytes() == text + b"/* my edit */\n"


def test_source_only_refuses_a_file(env: dict[str, str], tmp_path: Path) -> None:
    f = tmp_path / "not-a-folder"
    f.write_text("keep me\n", encoding="utf-8")
    for kernel in KERNELS:
        p = run(["--kernel", kernel, "--source-only", str(f)], env)
        assert p.returncode != 0
        assert f"--source-only {f}: exists and is not a folder" in p.stderr
        assert f.read_text(encoding="utf-8") == "keep me\n"
    p = run(["--kernel", "debian-6.12", "--source-only", str(tmp_path / "d"), "none"], env)
    assert p.returncode != 0 and "no patch with it" in p.stderr


def test_6_12_headers_whose_objtool_does_not_run_are_redone(env: dict[str, str], tmp_path: Path) -> None:
    """Headers marked adapted, objtool.real-x86 back to Debian's (needs GLIBC_2.38) and left
    out of hvstor-adapted, as a user found them: the next build must redo them by itself."""
    _, info = build("debian-6.12", "none", env)
    root, kbuild = kbuild_of(info)
    objtool = kbuild / "tools" / "objtool" / "objtool.real-x86"
    debian = objtool.with_name("objtool.real-x86.debian")
    if not debian.exists() or not LOADER_ERROR.search(start(debian).stdout):
        pytest.skip("trixie's objtool runs on this host: its headers need no adaptation here")
    assert (root / ".done").is_file(), "the headers are not marked adapted after a build"
    shutil.copy2(debian, objtool)
    adapted = root / "hvstor-adapted"
    adapted.write_text("".join(ln for ln in adapted.read_text(encoding="utf-8").splitlines(keepends=True)
                               if "objtool" not in ln), encoding="utf-8")
    assert LOADER_ERROR.search(start(objtool).stdout), "the broken objtool runs"

    patch = harmless_patch(Path(info["source"]), tmp_path / "a.patch",
                           ("a/drivers/scsi/storvsc_drv.c", "b/drivers/scsi/storvsc_drv.c"))
    p = run(["--kernel", "debian-6.12", str(patch)], env)
    ko = must_succeed(p, "the build after objtool.real-x86 was broken")
    assert "do not run on this host" in p.stderr
    assert re.search(r"objtool\.real-x86: exit status \d+: .*GLIBC_2\.38", p.stderr), p.stderr[-3000:]
    assert ko.is_file()
    assert not LOADER_ERROR.search(start(objtool).stdout), "objtool.real-x86 still does not run"
    assert "programs=tools/objtool/objtool.real-x86" in adapted.read_text(encoding="utf-8").splitlines()
    info = read_info(ko.parent / "build-info")
    assert "tools/objtool/objtool.real-x86" in info["adapted-programs"].split()
    assert loads_in_guest(ko)


def test_failed_build_prints_the_command_that_starts_over(env: dict[str, str], tmp_path: Path) -> None:
    """A modpost that starts (so the check passes) but fails: the build fails and prints the
    command that starts over; that command, run as printed, fetches and adapts the headers
    again and builds the module."""
    _, info = build("debian-6.12", "none", env)
    _, kbuild = kbuild_of(info)
    modpost = kbuild / "scripts" / "mod" / "modpost.real-lsb-64"
    modpost.write_text("#!/bin/sh\necho 'modpost: broken on purpose' >&2\nexit 1\n", encoding="utf-8")

    patch = harmless_patch(Path(info["source"]), tmp_path / "b.patch",
                           ("a/drivers/scsi/storvsc_drv.c", "b/drivers/scsi/storvsc_drv.c"))
    p = run(["--kernel", "debian-6.12", str(patch)], env)
    assert p.returncode != 0, "the build with a broken modpost succeeded"
    m = re.search(r"^\s+(HVSTOR_KMOD_REBUILD=1 .*build-module\.sh .*)$", p.stderr, re.M)
    assert m, f"no command to start over in:\n{p.stderr[-3000:]}"
    cmd = m.group(1)
    assert str(patch) in cmd and "--kernel debian-6.12" in cmd

    # As a user would paste it: the cache comes from the command itself.
    plain = {k: v for k, v in env.items() if k != "HVSTOR_CACHE"}
    r = subprocess.run(["nice", "-n", "10", "bash", "-c", cmd], cwd=ROOT, env=plain, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, check=False)
    ko = must_succeed(r, f"the printed command ({cmd})")
    assert ko.is_file() and ko.is_relative_to(CACHE)
    assert "HVSTOR_KMOD_REBUILD=1: the" in r.stderr
    assert modpost.read_bytes()[:4] == b"\x7fELF", "modpost.real-lsb-64 was not rebuilt"
    assert loads_in_guest(ko)
