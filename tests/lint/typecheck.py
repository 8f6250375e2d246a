#!/usr/bin/python3
"""Type-checks every Python file of the project with mypy (Debian's package): functions
without type hints are errors, and so is every type error. Each folder of tests is checked
on its own (each has its own conftest module); QEMU's Python packages come from the QEMU
source the build downloads. Exits 1 when mypy finds anything, 77 when mypy is missing.

    tests/lint/typecheck.py [GROUP...]   groups: scripts tests/exp tests/machine ...
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FLAGS = ["--disallow-untyped-defs", "--disallow-incomplete-defs", "--check-untyped-defs",
         "--warn-unused-ignores", "--warn-redundant-casts", "--no-implicit-optional",
         "--show-error-codes", "--no-error-summary", "--cache-dir=/dev/null",
         f"--config-file={os.path.join(HERE, 'mypy.ini')}"]


def qemu_python() -> str:
    cache = os.environ.get("HVSTOR_CACHE") or os.path.join(ROOT, ".cache")
    return os.path.join(cache, "qemu-src", "src", "python")


def groups() -> Dict[str, List[str]]:
    """Group -> what mypy gets: packages (-p) or files, each group with its own path."""
    out = {"scripts": ["-p", "hvexp", "-p", "hvmachine"]}
    if _files("scripts", top_only=True):
        out["scripts/*.py"] = _files("scripts", top_only=True)
    for d in sorted(os.listdir(os.path.join(ROOT, "tests"))):
        if _files(os.path.join("tests", d)):
            out[f"tests/{d}"] = _files(os.path.join("tests", d))
    return out


def _files(rel: str, top_only: bool = False) -> List[str]:
    base = os.path.join(ROOT, rel)
    found = []
    for dirpath, dirs, files in os.walk(base):
        dirs[:] = [] if top_only else [d for d in dirs if not d.startswith((".", "__"))]
        found += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(found)


def check(group: str, targets: List[str]) -> bool:
    path = [os.path.join(ROOT, "scripts"), qemu_python()]
    flags = list(FLAGS)
    if group.startswith("tests/"):
        path.insert(0, os.path.join(ROOT, group))
        # The project's packages are checked in their own group, not again in each test's.
        flags.append("--follow-imports=silent")
    env = dict(os.environ, MYPYPATH=os.pathsep.join(path))
    r = subprocess.run([sys.executable, "-m", "mypy", *flags, *targets], env=env, cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    n = len(targets) - targets.count("-p")
    print(f"{group}: {'clean' if r.returncode == 0 else 'errors'} ({n} modules or files)")
    if r.returncode != 0:
        print(r.stdout.rstrip())
    return r.returncode == 0


def main(argv: List[str]) -> int:
    try:
        import mypy  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        print("skip: mypy is not installed (scripts/setup-host.sh installs it)")
        return 77
    all_groups = groups()
    chosen = argv or list(all_groups)
    unknown = [g for g in chosen if g not in all_groups]
    if unknown:
        print(f"unknown group(s) {' '.join(unknown)}; groups: {' '.join(all_groups)}", file=sys.stderr)
        return 2
    ok = [check(g, all_groups[g]) for g in chosen]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
