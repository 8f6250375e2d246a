"""Our QEMU: the binary (QEMU=, or built by scripts/build-qemu.sh) and QEMU's own Python
packages (qemu.qmp, qemu.machine) from the QEMU source the build downloads."""

from __future__ import annotations

import os
import subprocess
import sys

from .paths import ROOT, cache_dir


class QemuError(Exception):
    """No QEMU to boot with, and why."""


def python_dir() -> str:
    """The folder holding QEMU's Python packages (python/ of the QEMU source)."""
    return os.path.join(cache_dir(), "qemu-src", "src", "python")


def _build_script(*args: str) -> str:
    """Runs scripts/build-qemu.sh (its progress on stderr); its last line of output."""
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build-qemu.sh"), *args],
                       stdout=subprocess.PIPE, text=True, check=False)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise QemuError(f"scripts/build-qemu.sh {' '.join(args)} failed (its output above)")
    return lines[-1]


def import_qemu_python() -> None:
    """Makes qemu.machine and qemu.qmp importable, fetching the QEMU source (without
    building) when it is not here yet."""
    d = python_dir()
    if not os.path.isdir(os.path.join(d, "qemu", "machine")):
        _build_script("--source-only")
        if not os.path.isdir(os.path.join(d, "qemu", "machine")):
            raise QemuError(f"QEMU's Python packages are not in {d} after fetching the source")
    if d not in sys.path:
        sys.path.insert(0, d)


def qemu_binary() -> str:
    """$QEMU when it is set (it must be an executable), else our build (built when it is
    missing or out of date: minutes the first time)."""
    q = os.environ.get("QEMU")
    if q:
        if not (os.path.isfile(q) and os.access(q, os.X_OK)):
            raise QemuError(f"QEMU={q} is not an executable file")
        return q
    return _build_script()
