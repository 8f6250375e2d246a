"""Which functions of a guest kernel module ran during a boot, on a stock kernel.

Every function the module's symbol table has (what the kernel's function tracer would see;
functions GCC inlined have no symbol of their own and are counted in their caller) gets a
kprobe event (p:hvcov/fN MODULE:FUNCTION) before the module loads: the kernel arms probes on
a module that is not loaded yet when it loads. The events are filtered out (nothing is
written to the trace buffer) but each probe still counts its hits, and at the end of the
command the guest's init sends /sys/kernel/tracing/kprobe_profile with the results. Both
Debian kernels (6.1, 6.12) have CONFIG_KPROBE_EVENTS.

Line coverage (below) reads the counts gcov keeps in a kernel built with CONFIG_GCOV_KERNEL.
"""

from __future__ import annotations

import difflib
import json
import lzma
import os
import re
import shutil
import subprocess
import tempfile
from typing import Dict, List, Optional

PROFILE = "coverage-profile"          # the file in the results folder
FUNCTIONS = "cov-functions"           # the list the init reads, in /hvstor of the initramfs
# Symbols that are no function of the source: the padding before each function (6.12's
# __pfx_), the module's entry aliases (init_module is the module_init function under its
# own name), split-off cold parts.
_NOT_A_FUNCTION = re.compile(r"^(__pfx_|__cfi_|__UNIQUE_ID|__kstrtab|__ksymtab)|\.(cold|part|constprop|isra)")
_ALIASES = ("init_module", "cleanup_module")


class CoverageError(Exception):
    """The module's functions could not be read."""


def module_functions(ko: str) -> List[str]:
    """The functions in a module file's symbol table (.ko or .ko.xz), by address order."""
    path = ko
    tmp = None
    if ko.endswith(".xz"):
        with lzma.open(ko) as src, tempfile.NamedTemporaryFile(suffix=".ko", delete=False) as out:
            out.write(src.read())
            tmp = path = out.name
    try:
        r = subprocess.run(["nm", "--defined-only", "-n", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, check=False)
    finally:
        if tmp:
            os.unlink(tmp)
    if r.returncode != 0:
        raise CoverageError(f"nm cannot read {ko}: {r.stderr.strip()}")
    names: List[str] = []
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tT" and not _NOT_A_FUNCTION.search(parts[2]) \
                and parts[2] not in _ALIASES and parts[2] not in names:
            names.append(parts[2])
    if not names:
        raise CoverageError(f"{ko} has no functions in its symbol table")
    return names


def find_module(modules_dir: str, name: str) -> str:
    """The file of module `name` under a lib/modules/<version> tree."""
    for d, _, files in os.walk(modules_dir):
        for f in files:
            if re.fullmatch(re.escape(name) + r"\.ko(\.xz|\.zst|\.gz)?", f.replace("-", "_")):
                return os.path.join(d, f)
    raise CoverageError(f"no {name} module under {modules_dir}")


def list_file(functions: List[str]) -> bytes:
    return "".join(f + "\n" for f in functions).encode()


def refused(kernel_log: str, functions: List[str]) -> List[str]:
    """The functions whose probe the kernel refused when the module loaded (notrace ones,
    such as __exit functions), from its log."""
    out = re.findall(r"trace_kprobe: Could not probe notrace function (\S+)", kernel_log)
    for n in re.findall(r"Failed to re-register probe f([0-9]+) ", kernel_log):
        if int(n) < len(functions):
            out.append(functions[int(n)])
    return out


def parse_profile(text: str, functions: List[str]) -> Dict[str, int]:
    """Hits per function from kprobe_profile ("  fN   HITS   MISSED" per event); a
    function whose probe the kernel refused is missing from the result."""
    hits: Dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and re.fullmatch(r"f[0-9]+", parts[0].split("/")[-1]) and parts[1].isdigit():
            i = int(parts[0].split("/")[-1][1:])
            if i < len(functions):
                hits[functions[i]] = int(parts[1])
    return hits


# --- line coverage (gcov) --------------------------------------------------------------------
# A kernel built with CONFIG_GCOV_KERNEL and a source file profiled (GCOV_PROFILE_<name>.o)
# counts the runs of each line of that file; the guest's init sends the counts (the .gcda
# file debugfs shows) with the results, and gcov reads them with the notes file (.gcno) the
# compiler wrote beside the object.

GCDA_DIR = "gcov"        # the folder of the results the .gcda lands in


def find_gcno(name: str, module: str, ko: Optional[str], modules: Optional[str]) -> str:
    """The notes file of NAME.c, compiled into `module`: beside a module built by
    scripts/build-module.sh (`ko`); else beside the module in the modules tree (where a CI
    artifact without the build tree puts it), or in the kernel's build tree (the `build`
    link `make modules_install` leaves) at the module's path. CoverageError says where it
    looked."""
    looked = []
    places = [os.path.dirname(os.path.abspath(ko))] if ko else []
    if modules and not ko:
        mod = find_module(modules, module)
        places.append(os.path.dirname(mod))
        # lib/modules/<version>/kernel/drivers/scsi/x.ko -> lib/modules/<version>/build/drivers/scsi
        tree, sep, rel = mod.rpartition(os.sep + "kernel" + os.sep)
        if sep:
            places.append(os.path.join(tree, "build", os.path.dirname(rel)))
    for d in places:
        p = os.path.join(d, name + ".gcno")
        if os.path.isfile(p):
            return p
        looked.append(p)
    raise CoverageError(
        f"no {name}.gcno ({', '.join(looked) or 'no module file or modules tree to look in'}): "
        "line coverage needs a kernel built with CONFIG_GCOV_KERNEL and "
        f"GCOV_PROFILE_{name}.o=y (guest-kernel/gcov.config), and its notes file")


def gcov_lines(gcno: str, gcda: str, source: str) -> Dict[int, int]:
    """Runs per executable line of `source` (a file name such as storvsc_drv.c) from a
    notes and a data file, read by the gcov of the host's compiler. CoverageError when
    gcov cannot read them (a data file of another build, another compiler version)."""
    stem = os.path.splitext(os.path.basename(gcno))[0]
    with tempfile.TemporaryDirectory(prefix="hvgcov-") as tmp:
        shutil.copyfile(gcno, os.path.join(tmp, stem + ".gcno"))
        shutil.copyfile(gcda, os.path.join(tmp, stem + ".gcda"))
        r = subprocess.run([os.environ.get("GCOV", "gcov"), "--json-format", "--stdout", stem + ".gcda"],
                           cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    problems = [ln for ln in r.stderr.splitlines() if "mismatch" in ln or "version" in ln or "cannot" in ln]
    if r.returncode != 0 or problems:
        raise CoverageError(f"gcov cannot read {gcda} with {gcno}: "
                            f"{'; '.join(problems or r.stderr.strip().splitlines()[-3:]) or 'exit status %d' % r.returncode}")
    lines: Dict[int, int] = {}
    for doc in r.stdout.splitlines():
        if not doc.startswith("{"):
            continue
        for f in json.loads(doc).get("files", []):
            if os.path.basename(f.get("file", "")) != source:
                continue
            for ln in f.get("lines", []):
                n = int(ln["line_number"])
                lines[n] = lines.get(n, 0) + int(ln["count"])
    if not lines:
        raise CoverageError(f"gcov found no lines of {source} in {gcno}")
    return lines


def changed_lines(old: str, new: str) -> List[int]:
    """The lines of `new` (1-based) a change added or altered, against `old` (file texts)."""
    a, b = old.splitlines(), new.splitlines()
    out: List[int] = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out.extend(range(j1 + 1, j2 + 1))
    return out
