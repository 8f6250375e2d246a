#!/usr/bin/python3
"""Where shell may be, and what the test lists must hold.

Programs are Python or C++ here; shell stays only where it is the natural tool: the guest's
busybox scripts (guest-scripts/), the thin ./hvstor dispatcher and CI's entry point, and the
build and setup steps that are lists of commands (ALLOWED). Every other file that is a shell
script (by name or by its #! line) is an error, and so is `python3 -c` inside any shell
file. Every boot test file (tests/functional/test_*.py) must be listed in
tests/functional/meson.build, so that none is left out of `meson test`, and every test listed
there must be a file git tracks (a clean clone would not have it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALLOWED = {
    "hvstor", ".ci/run",
    "scripts/lib.sh", "scripts/setup-host.sh", "scripts/build-qemu.sh", "scripts/build-module.sh",
    "scripts/build-fio.sh", "scripts/guest-assets.sh",
    # ClusterFuzzLite's (and OSS-Fuzz's) build script: the builder image runs build.sh.
    ".clusterfuzzlite/build.sh",
}
_SHEBANG = re.compile(rb"^#!\s*\S*(/|env\s+)(ba|da|busybox\s+)?sh\b")


def tracked_files(committed_only: bool = False) -> List[str]:
    """The project's files: what git tracks (and, unless committed_only, new files it
    does not ignore)."""
    more = [] if committed_only else ["--others", "--exclude-standard"]
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", *more],
                       stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:       # not a git checkout: walk the tree
        out = []
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith(".") or x == ".ci"]
            out += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
        return sorted(out)
    return sorted(f for f in r.stdout.splitlines() if os.path.isfile(os.path.join(ROOT, f)))


def is_shell(rel: str) -> bool:
    if rel.endswith(".sh") or rel.endswith(".sh.in"):
        return True
    with open(os.path.join(ROOT, rel), "rb") as f:
        return bool(_SHEBANG.match(f.read(64)))


def problems() -> List[str]:
    out = []
    for rel in tracked_files():
        if not is_shell(rel):
            continue
        if rel not in ALLOWED and not rel.startswith("guest-scripts/"):
            out.append(f"{rel}: a shell program outside guest-scripts/, ./hvstor and the build/setup "
                       "scripts (write it in Python)")
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if re.search(r"\bpython3?\s+-c\b", line):
                    out.append(f"{rel}:{n}: python3 -c in a shell file (write a Python module)")
    with open(os.path.join(ROOT, "tests", "functional", "meson.build"), encoding="utf-8") as f:
        listed = set(re.findall(r"^\s*'([a-z0-9_]+)':", f.read(), re.M))
    files = set(tracked_files(committed_only=True))
    for name in sorted(os.listdir(os.path.join(ROOT, "tests", "functional"))):
        m = re.fullmatch(r"test_(.+)\.py", name)
        if m and m.group(1) not in listed:
            out.append(f"tests/functional/{name}: not listed in tests/functional/meson.build")
    for name in sorted(listed):
        if f"tests/functional/test_{name}.py" not in files:
            out.append(f"tests/functional/meson.build lists '{name}', but tests/functional/test_{name}.py "
                       "is not in the tree (or not tracked by git)")
    return out


def main() -> int:
    found = problems()
    for p in found:
        print(p)
    print(f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
