"""Which functions of a guest kernel module ran during a boot, on a stock kernel.

Every function the module's symbol table has (what the kernel's function tracer would see;
functions GCC inlined have no symbol of their own and are counted in their caller) gets a
kprobe event (p:hvcov/fN MODULE:FUNCTION) before the module loads: the kernel arms probes on
a module that is not loaded yet when it loads. The events are filtered out (nothing is
written to the trace buffer) but each probe still counts its hits, and at the end of the
command the guest's init sends /sys/kernel/tracing/kprobe_profile with the results. Both
Debian kernels (6.1, 6.12) have CONFIG_KPROBE_EVENTS.
"""

from __future__ import annotations

import lzma
import os
import re
import subprocess
import tempfile
from typing import Dict, List

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
