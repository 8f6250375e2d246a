#!/usr/bin/python3
"""Runs a test program of one of the project's other build folders, for `meson test` in
the main one: the unit tests under ThreadSanitizer live in .cache/build-tsan, a build of
the same sources with -Db_sanitize=thread (./hvstor test configures it).

    tests/other_build.py NAME TARGET [ARGS...]

brings TARGET of .cache/build-NAME up to date (ninja, one at a time) and runs it with
ARGS; exits 77 (a skip for meson) when that folder is not configured.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: List[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    name, target, args = argv[0], argv[1], argv[2:]
    cache = os.environ.get("HVSTOR_CACHE") or os.path.join(ROOT, ".cache")
    build = os.path.join(cache, f"build-{name}")
    if not os.path.isfile(os.path.join(build, "build.ninja")):
        print(f"skip: {build} is not configured (./hvstor test configures it)")
        return 77
    with open(os.path.join(build, ".hvstor-lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(["ninja", "-C", build, target], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, check=False)
    if r.returncode != 0:
        print(r.stdout[-4000:])
        print(f"building {target} in {build} failed")
        return 1
    sys.stdout.flush()
    os.execv(os.path.join(build, target), [os.path.join(build, target), *args])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
