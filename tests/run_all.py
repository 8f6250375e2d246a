#!/usr/bin/python3
"""./hvstor test: builds what the tests need, then runs every test through `meson test`.

    ./hvstor test [--suite NAME]... [--list] [--shard K/N] [-- MESON TEST ARGS]

Builds the main build folder (.cache/build-asan: the project with ASan/UBSan, where
`meson test --list` names every test), the ThreadSanitizer build (.cache/build-tsan, whose
unit tests the tsan suite runs) and QEMU with the device (the boot suite's), then runs
`meson test` there: unit, tsan, lint, python, fuzz and boot suites (tests/meson.build).
Prints meson's progress and summary, then for each failed test what failed and the end of
its log. Each test's whole output is kept in .cache/test-logs/NAME.log. The exit status is
meson's: 0 when every test passed or was skipped (a skip is never counted as a pass).

--shard K/N runs slice K of N of the tests (of --suite's, with --suite): the names of
`meson test --list` in a stable order (by suite, then name) dealt to the N slices in turn,
so that each suite, the long boot tests among them, is split evenly; the slice's JUnit file
is kept as .cache/test-logs/junit-shard-K-of-N.xml.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("HVSTOR_CACHE") or os.path.join(ROOT, ".cache")
MAIN = os.path.join(CACHE, "build-asan")
TSAN = os.path.join(CACHE, "build-tsan")
LOGS = os.path.join(CACHE, "test-logs")
TESTLOG = os.path.join(MAIN, "meson-logs", "testlog.json")
JUNIT = os.path.join(MAIN, "meson-logs", "testlog.junit.xml")
BUILDS: Dict[str, List[str]] = {
    MAIN: ["-Db_sanitize=address,undefined", "-Db_lundef=false"],
    # GCC warns that TSan does not model atomic_thread_fence (the ring protocol uses fences
    # against the guest): not an error here.
    TSAN: ["-Db_sanitize=thread", "-Db_lundef=false", "-Dcpp_args=-Wno-error=tsan"],
}
TSAN_TARGETS = ["tests/unit-tests", "tests/storvsp/storvsp-tests", "tests/capi/capi-tests"]
# Lines of a failed test's log that say what failed.
_WHAT_FAILED = re.compile(r"NOT OK|^\[  FAILED  \]|Failure$|^[^ ]*: error: |ERROR: [A-Za-z]+Sanitizer|"
                          r"runtime error:|^==[0-9]+==|^FAILED |^E  |Error|error:")


def log(msg: str) -> None:
    print(f"[hvstor {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_logged(what: str, logfile: str, cmd: List[str], env: Optional[Dict[str, str]] = None) -> None:
    """Runs cmd with its output in logfile; a line of progress every 20 s; its last lines
    and an error when it fails."""
    log(f"{what} (log: {logfile})")
    start = time.monotonic()
    with open(logfile, "w", encoding="utf-8") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)  # pylint: disable=consider-using-with
        while True:
            try:
                p.wait(timeout=20)
                break
            except subprocess.TimeoutExpired:
                log(f"  ... {what}: {time.monotonic() - start:.0f}s, {_last_line(logfile)}")
    if p.returncode != 0:
        with open(logfile, encoding="utf-8", errors="replace") as f:
            print("".join(f.readlines()[-40:]), file=sys.stderr)
        raise SystemExit(f"[hvstor] error: {what} failed after {time.monotonic() - start:.0f}s (full log: {logfile})")
    log(f"{what} done in {time.monotonic() - start:.0f}s")


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 300))
            lines = f.read().decode(errors="replace").replace("\r", "").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:100] if lines else ""


def prepare_builds() -> None:
    """Configures and builds the main and the TSan build folders."""
    for build, opts in BUILDS.items():
        name = os.path.basename(build)
        if not os.path.isfile(os.path.join(build, "build.ninja")):
            run_logged(f"configuring {name}", os.path.join(CACHE, f"{name}-setup.log"),
                       ["meson", "setup", build, ROOT, *opts])
        targets = TSAN_TARGETS if build == TSAN else []
        run_logged(f"building {name}", os.path.join(CACHE, f"{name}-build.log"), ["ninja", "-C", build, *targets])


def prepare_qemu() -> str:
    """QEMU with the device: $QEMU, else our build (scripts/build-qemu.sh)."""
    qemu = os.environ.get("QEMU")
    if qemu:
        log(f"QEMU={qemu}: the boot tests use it")
        return qemu
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build-qemu.sh")], stdout=subprocess.PIPE,
                       text=True, check=False)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise SystemExit("[hvstor] error: building QEMU failed (its output above)")
    return lines[-1]


def meson_test(args: List[str], qemu: Optional[str]) -> int:
    """meson test in the main build, its output shown as it comes."""
    env = dict(os.environ, HVSTOR_CACHE=CACHE)
    if qemu:
        env["QEMU"] = qemu
    cmd = ["meson", "test", "-C", MAIN, "--num-processes", str(os.cpu_count() or 1), *args]
    # A meson test that runs nothing (no test of that name or suite) writes no testlog.json:
    # the last run's must not pass for this one's.
    for old in (TESTLOG, JUNIT):
        try:
            os.unlink(old)
        except FileNotFoundError:
            pass
    log("running: " + " ".join(cmd[1:]))
    return subprocess.run(cmd, env=env, check=False).returncode


def keep_logs() -> Optional[List[Dict[str, str]]]:
    """Each test's output from meson's log into LOGS/NAME.log; the failed tests (None:
    meson ran no test)."""
    shutil.rmtree(LOGS, ignore_errors=True)
    os.makedirs(LOGS)
    failed = []
    try:
        with open(TESTLOG, encoding="utf-8") as f:
            entries = [json.loads(line) for line in f if line.strip()]
    except OSError:
        return None
    for e in entries:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", e["name"]).strip("-")
        out = os.path.join(LOGS, name + ".log")
        with open(out, "w", encoding="utf-8") as f:
            f.write(e.get("stdout") or "")
            if e.get("stderr"):
                f.write(e["stderr"])
        if e.get("result") in ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"):
            failed.append({"name": e["name"], "log": out, "result": e["result"]})
    return failed


def digest(failed: List[Dict[str, str]]) -> None:
    """For each failed test: the lines that say what failed, then its log's end."""
    for f in failed:
        print(f"\n==== {f['result']}: {f['name']} (whole output: {f['log']})")
        with open(f["log"], encoding="utf-8", errors="replace") as log_file:
            lines = log_file.read().splitlines()
        print("\n".join([ln for ln in lines if _WHAT_FAILED.search(ln)][:30]))
        print("---- its last 40 lines:")
        print("\n".join(lines[-40:]))
    if failed:
        print("\nfailed: " + ", ".join(f["name"] for f in failed))


# --- shards: a slice of the tests for each of N CI runners -------------------------------
def parse_shard(text: str) -> Tuple[int, int]:
    """'K/N' -> (K, N), 1 <= K <= N."""
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"wants K/N with 1 <= K <= N (slice K of N), got '{text}'")
    return int(m.group(1)), int(m.group(2))


def list_tests(suites: List[str]) -> List[str]:
    """meson test --list of the main build (of these suites): a line per test,
    'project:suite / name'."""
    r = subprocess.run(["meson", "test", "-C", MAIN, "--list", *[a for s in suites for a in ("--suite", s)]],
                       stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"[hvstor] error: meson test --list failed (exit {r.returncode})")
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]


def test_name(line: str) -> str:
    """A test's name in a line of meson test --list."""
    return line.split(" / ", 1)[1] if " / " in line else line


def shard_tests(lines: List[str], k: int, n: int) -> List[str]:
    """Slice k of n of the tests listed: their names sorted by suite, then name, dealt to the
    n slices in turn, so that each suite is split evenly (a name in two suites counts once)."""
    names = list(dict.fromkeys(test_name(ln) for ln in sorted(lines)))
    return [name for i, name in enumerate(names) if i % n == k - 1]


def name_pattern(name: str) -> str:
    """meson test's argument that selects the test NAME alone: meson matches names with
    fnmatch, and splits project:name at the first colon."""
    return "*:" + re.sub(r"([*?\[\]])", r"[\1]", name)


def _shard_plan(shard: Tuple[int, int], suites: List[str]) -> Tuple[List[str], bool]:
    """The slice's tests, and whether it has boot tests (which need QEMU)."""
    lines = list_tests(suites)
    names = shard_tests(lines, *shard)
    if not names:
        raise SystemExit(f"[hvstor] error: --shard {shard[0]}/{shard[1]}: only {len(set(map(test_name, lines)))} "
                         "test(s) to share: this slice has none (use fewer slices)")
    boot = {test_name(ln) for ln in lines if "boot" in ln.split(" / ", 1)[0].split(":")[-1].split("+")}
    log(f"slice {shard[0]} of {shard[1]}: {len(names)} of {len(set(map(test_name, lines)))} tests: {', '.join(names)}")
    return names, any(n in boot for n in names)


def keep_junit(shard: Tuple[int, int]) -> None:
    """Meson's JUnit file of this slice, kept as test-logs/junit-shard-K-of-N.xml."""
    dst = os.path.join(LOGS, f"junit-shard-{shard[0]}-of-{shard[1]}.xml")
    try:
        shutil.copyfile(JUNIT, dst)
        log(f"JUnit of slice {shard[0]} of {shard[1]}: {dst}")
    except OSError as e:
        log(f"no JUnit file for slice {shard[0]} of {shard[1]} ({JUNIT}: {e.strerror})")


def _list(ns: argparse.Namespace) -> int:
    """--list: every test (of the suites; with --shard, the slice's)."""
    if not os.path.isfile(os.path.join(MAIN, "build.ninja")):
        run_logged("configuring build-asan", os.path.join(CACHE, "build-asan-setup.log"),
                   ["meson", "setup", MAIN, ROOT, *BUILDS[MAIN]])
    if ns.shard:
        lines = list_tests(ns.suite)
        names = set(shard_tests(lines, *ns.shard))
        print("\n".join(ln for ln in lines if test_name(ln) in names))
        return 0
    suites = [a for s in ns.suite for a in ("--suite", s)]
    return subprocess.run(["meson", "test", "-C", MAIN, "--list", *suites], check=False).returncode


def main(argv: List[str]) -> int:
    extra: List[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    ap = argparse.ArgumentParser(prog="hvstor test", description=__doc__.split("\n\n")[1])
    ap.add_argument("--suite", action="append", default=[], help="only this meson suite (repeatable): "
                    "unit, tsan, lint, python, fuzz, boot")
    ap.add_argument("--list", action="store_true", help="list the tests (meson test --list) and exit")
    ap.add_argument("--shard", type=parse_shard, metavar="K/N",
                    help="run slice K of N of the tests (for N CI runners); its JUnit file is kept as "
                         ".cache/test-logs/junit-shard-K-of-N.xml")
    ns = ap.parse_args(argv)
    started = time.monotonic()
    os.makedirs(CACHE, exist_ok=True)
    needs_qemu = not ns.suite or "boot" in ns.suite
    if ns.list:
        return _list(ns)
    prepare_builds()
    names: List[str] = []
    if ns.shard:
        names, needs_qemu = _shard_plan(ns.shard, ns.suite)
    qemu = prepare_qemu() if needs_qemu else None
    rc = meson_test([a for s in ns.suite for a in ("--suite", s)] + [name_pattern(n) for n in names] + extra, qemu)
    failed = keep_logs()
    if failed is None:
        log("meson test ran no test (a --suite or test name that matches none?)")
        return rc or 2
    if ns.shard:
        keep_junit(ns.shard)
    digest(failed)
    log(f"./hvstor test {'passed' if rc == 0 else 'failed'} in {time.monotonic() - started:.0f}s "
        f"(each test's output: {LOGS})")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
