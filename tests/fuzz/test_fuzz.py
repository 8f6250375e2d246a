"""fuzz.py's process handling, with a stand-in for a libFuzzer target.

The stand-in is a Python script where fuzz.py expects the perf_config binary of a fuzz build
folder. Each call takes a number in order of start and records its command line; per number
it runs its -runs inputs, or "crashes" (a sanitizer line, a crash- file in -artifact_prefix,
exit 1), or fails with nothing saved (exit 1, as a fuzzer the kernel ended would), or holds
until a SIGINT or SIGTERM (then it reports 4 inputs and exits 72, as libFuzzer does), or with
STANDIN_HOLD=plain holds with no handler (as a fuzzer killed before libFuzzer set its own).

No test has a clock: a test that waits for the stand-ins to hold waits for their files. A
hang guard (HANG_GUARD_S, far beyond the second or so each test takes) turns a fuzz.py that
never ends into a failure, and every process a test started is ended afterwards.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUZZ_PY = ROOT / "tests" / "fuzz" / "fuzz.py"
HANG_GUARD_S = 300
_started: list[subprocess.Popen[str]] = []
_pids: list[int] = []  # processes outside fuzz.py's group (ninja's commands)

STANDIN = r'''#!{python}
import fcntl, json, os, signal, sys, time
from pathlib import Path

d = Path(os.environ["STANDIN_DIR"])
opts = dict(a[1:].split("=", 1) for a in sys.argv[1:] if a.startswith("-") and "=" in a)
runs = int(opts.get("runs", "0"))
with open(d / "lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    count = d / "count"
    c = int(count.read_text()) + 1 if count.exists() else 1
    count.write_text(str(c))
    with open(d / "calls", "a") as f:
        f.write(json.dumps({{"c": c, "runs": runs, "argv": sys.argv[1:],
                            "asan": os.environ.get("ASAN_OPTIONS")}}) + "\n")


def say(*lines):
    print(*lines, sep="\n", flush=True)


def at(name):
    return os.environ.get(name) == str(c)


def hold():
    tmp = d / f"held.{{c}}.tmp"
    tmp.write_text(str(os.getpid()))
    tmp.rename(d / f"held.{{c}}")
    while True:
        signal.pause()


def done(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    say("#4 DONE cov: 10 ft: 20 corp: 3/1b", "stat::number_of_executed_units: 4",
        "stat::peak_rss_mb: 50")
    (d / f"held.{{c}}").unlink()
    os._exit(72)


say(f"INFO: Seed: {{c}}")
if "LLVM_PROFILE_FILE" in os.environ and not os.environ.get("STANDIN_NO_PROFILE"):
    Path(os.environ["LLVM_PROFILE_FILE"].replace("%p", str(os.getpid()))).write_text("p")
if at("STANDIN_CRASH_AT"):
    # Not before the first call holds (its handler set): the run then has one of each.
    while not (d / "held.1").exists():
        time.sleep(0.05)
    say("#3 NEW cov: 11 ft: 21 corp: 4/1b", "==1==ERROR: AddressSanitizer: stand-in")
    Path(opts["artifact_prefix"] + "crash-standin").write_text("x")
    sys.exit(1)
if at("STANDIN_FAIL_AT"):
    say("==1==ERROR: stand-in ends with nothing saved")
    sys.exit(1)
if os.environ.get("STANDIN_HOLD") == "plain":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    hold()
if os.environ.get("STANDIN_HOLD"):
    signal.signal(signal.SIGINT, done)
    signal.signal(signal.SIGTERM, done)
    hold()
n = 0 if os.environ.get("STANDIN_NO_INPUT") else runs
say(f"#{{n}} DONE cov: 10 ft: 20 corp: 3/1b", f"stat::number_of_executed_units: {{n}}",
    "stat::peak_rss_mb: 40")
'''

# The llvm tools of --coverage: llvm-profdata writes its -o file, llvm-cov prints a report.
PROFDATA = r'''#!{python}
import sys
from pathlib import Path
Path(sys.argv[sys.argv.index("-o") + 1]).write_text("merged")
'''
COV_REPORT = """\
Filename                      Regions    Missed Regions     Cover   Functions  Missed Functions  Executed       Lines      Missed Lines     Cover    Branches   Missed Branches     Cover
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
backend/perf/config.cc            400                20    95.00%          30                 1    96.67%         600                30    95.00%         200                10    95.00%
backend/perf/keys.cc              100                50    50.00%          10                 5    50.00%         200                50    75.00%          40                20    50.00%
hw/scsi/disk.cc                   300                30    90.00%          20                 2    90.00%         500                10    98.00%         100                10    90.00%
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
TOTAL                             800               100    87.50%          60                 8    86.67%        1300                90    93.08%         340                40    88.24%
"""
LLVM_COV = r'''#!{python}
import sys
sys.stderr.write("warning: a stand-in\n")
sys.stdout.write({report!r})
'''
# A command that holds (in place of a build step), its pid in a file.
HOLDER = r'''#!{python}
import os, signal, sys
from pathlib import Path
Path(sys.argv[1] + ".tmp").write_text(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    signal.pause()
'''


def _hung(signum: int, frame: FrameType | None) -> None:
    raise TimeoutError(f"hung: fuzz.py still runs after {HANG_GUARD_S} s")


@pytest.fixture(autouse=True)
def guard() -> Iterator[None]:
    """The hang guard, and afterwards no process of the test left: fuzz.py's session (the
    stand-ins) is killed, and any process a test noted."""
    old = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(HANG_GUARD_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
    while _started:
        p = _started.pop()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    while _pids:
        try:
            os.kill(_pids.pop(), signal.SIGKILL)
        except ProcessLookupError:
            pass


def script(path: Path, text: str, **fmt: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.format(python=sys.executable, **fmt))
    path.chmod(0o755)


def build_dir(path: Path, ninja_extra: str = "") -> None:
    """A fuzz build folder whose perf_config is the stand-in."""
    path.mkdir(parents=True)
    (path / "build.ninja").write_text(
        "ninja_required_version = 1.5\n" +
        (ninja_extra or "build tests/fuzz/perf_config: phony\n"))
    script(path / "tests" / "fuzz" / "perf_config", STANDIN)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """An HVSTOR_CACHE whose fuzz build folder holds the stand-in as perf_config."""
    build_dir(tmp_path / "cache" / "build-fuzz")
    (tmp_path / "standin").mkdir()
    return tmp_path


def _default_signals() -> None:
    # A run started in the background (nohup CMD &, some CI runners) ignores SIGINT, and
    # fuzz.py leaves ignored what it was started ignoring: it gets it as a terminal would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(tmp: Path, *args: str, segment: int | str = 10,
          path: Path | None = None, **env: Any) -> subprocess.Popen[str]:
    e = dict(os.environ, HVSTOR_CACHE=str(tmp / "cache"), STANDIN_DIR=str(tmp / "standin"),
             HVSTOR_FUZZ_SEGMENT=str(segment))
    if path is not None:
        e["PATH"] = f"{path}{os.pathsep}{e['PATH']}"
    e.update({k: str(v) for k, v in env.items()})
    p = subprocess.Popen([sys.executable, str(FUZZ_PY), "perf_config", *args], env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, preexec_fn=_default_signals)
    _started.append(p)
    return p


def finish(p: subprocess.Popen[str]) -> str:
    out, _ = p.communicate()
    return out


def call_records(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "standin" / "calls"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def calls(tmp: Path) -> list[tuple[int, int]]:
    return [(r["c"], r["runs"]) for r in call_records(tmp)]


def held(tmp: Path) -> list[Path]:
    return sorted(p for p in (tmp / "standin").iterdir() if re.fullmatch(r"held\.[0-9]+", p.name))


def wait_for_file(path: Path, proc: subprocess.Popen[str]) -> int:
    """Waits until path exists (it holds a pid), or fails if fuzz.py ends first."""
    while not path.exists():
        assert proc.poll() is None, finish(proc)
        time.sleep(0.05)
    return int(path.read_text())


def wait_until_held(tmp: Path, proc: subprocess.Popen[str], n: int) -> list[int]:
    """Waits until n stand-ins hold (their pids), or fails if fuzz.py ends first."""
    while len(held(tmp)) < n:
        assert proc.poll() is None, finish(proc)
        time.sleep(0.05)
    return [int(p.read_text()) for p in held(tmp)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def summary_inputs(out: str) -> int:
    m = re.search(r"^perf_config\s+(\d+) inputs", out, re.M)
    assert m, out
    return int(m.group(1))


def test_jobs_share_the_inputs_in_segments(cache: Path) -> None:
    logs = cache / "cache" / "fuzz-logs"
    logs.mkdir(parents=True)
    (logs / "perf_config.3.log").write_text("an earlier run's third job")
    p = start(cache, "--runs", "51", "--jobs", "2")
    out = finish(p)
    assert p.returncode == 0, out
    assert summary_inputs(out) == 51
    # 26 and 25 inputs, each in processes of at most 10.
    assert sorted(r for _, r in calls(cache)) == [5, 6, 10, 10, 10, 10]
    assert (logs / "perf_config.1.log").exists() and (logs / "perf_config.2.log").exists()
    assert not (logs / "perf_config.3.log").exists()
    assert re.search(r"perf_config \(job 1 of 2\): 10 inputs so far, peak rss 40 MB; "
                     r"process 2 starts", out), out


def test_one_job_is_one_log_and_the_whole_count(cache: Path) -> None:
    p = start(cache, "--runs", "25")
    out = finish(p)
    assert p.returncode == 0, out
    assert summary_inputs(out) == 25
    assert calls(cache) == [(1, 10), (2, 10), (3, 5)]
    logf = cache / "cache" / "fuzz-logs" / "perf_config.log"
    assert logf.read_text().count("INFO: Seed:") == 3
    assert "perf_config: 20 inputs so far, peak rss 40 MB; process 3 starts" in out
    assert re.search(r"^perf_config\s+25 inputs\s+\d+ exec/s  cov    10  ft     20  "
                     r"corpus     3  rss 40 MB\s+[0-9.]+ s$", out, re.M), out


def test_the_fuzzer_command_line(cache: Path) -> None:
    art = cache / "cache" / "fuzz-artifacts" / "perf_config"
    seeds = ROOT / "tests" / "fuzz" / "corpus" / "perf_config"
    p = start(cache, "--runs", "5")
    out = finish(p)
    assert p.returncode == 0, out
    p = start(cache, "--runs", "5", "--seeds-only")
    out = finish(p)
    assert p.returncode == 0, out
    kept, seeds_only = call_records(cache)
    assert kept["argv"] == ["-runs=5", "-timeout=60", "-rss_limit_mb=2048",
                            "-print_final_stats=1", f"-artifact_prefix={art}/",
                            str(cache / "cache" / "fuzz-corpus" / "perf_config"), str(seeds)]
    assert kept["asan"] == "detect_leaks=1"
    # --seeds-only: a corpus of its own, gone afterwards.
    work = Path(seeds_only["argv"][-2])
    assert seeds_only["argv"][-1] == str(seeds)
    assert work.name == "corpus-perf_config" and not work.exists()


def test_ci_runs_the_fixed_count(cache: Path) -> None:
    p = start(cache, "--ci", segment=1000000)
    out = finish(p)
    assert p.returncode == 0, out
    assert calls(cache) == [(1, 200000)]


def test_time_gives_the_first_process_all_of_it(cache: Path) -> None:
    # (Taking off the fraction of a second already gone would give the first process 6 s of
    # --time 7, and run nothing for --time 1.)
    p = start(cache, "--time", "7", STANDIN_FAIL_AT=1)
    out = finish(p)
    assert p.returncode == 1, out
    assert call_records(cache)[0]["argv"][:2] == ["-runs=10", "-max_total_time=7"]


def test_runs_0_fuzzes_nothing(cache: Path) -> None:
    p = start(cache, "--runs", "0")
    out = finish(p)
    assert p.returncode == 0, out
    assert "perf_config: --runs 0, nothing fuzzed" in out
    assert calls(cache) == []


def test_a_finding_ends_the_other_jobs(cache: Path) -> None:
    # The first process holds; the second finds something. The first is ended, its inputs
    # counted, and no further process starts.
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD=1, STANDIN_CRASH_AT=2)
    out = finish(p)
    assert p.returncode == 1, out
    assert "FINDING perf_config" in out and "crash-standin" in out, out
    art = cache / "cache" / "fuzz-artifacts" / "perf_config" / "crash-standin"
    target = cache / "cache" / "build-fuzz" / "tests" / "fuzz" / "perf_config"
    assert f"(reproduce: {target} {art})" in out
    assert "==1==ERROR: AddressSanitizer: stand-in" in out
    assert re.search(r"perf_config: job [12] found something; the other jobs stop", out), out
    assert summary_inputs(out) == 3 + 4
    assert len(calls(cache)) == 2
    assert held(cache) == []


def test_an_earlier_artifact_is_no_new_finding(cache: Path) -> None:
    art = cache / "cache" / "fuzz-artifacts" / "perf_config"
    art.mkdir(parents=True)
    (art / "crash-earlier").write_text("x")
    p = start(cache, "--runs", "20")
    out = finish(p)
    assert p.returncode == 0, out
    assert "FINDING" not in out


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failure_with_nothing_saved_is_a_finding(cache: Path, jobs: int) -> None:
    p = start(cache, "--runs", "40", "--jobs", str(jobs), STANDIN_FAIL_AT=2)
    out = finish(p)
    assert p.returncode == 1, out
    assert "FINDING perf_config: exit status 1, no input saved" in out, out
    assert "findings in: perf_config" in out


def test_a_process_that_ran_no_input_is_a_finding(cache: Path) -> None:
    p = start(cache, "--runs", "40", STANDIN_NO_INPUT=1)
    out = finish(p)
    assert p.returncode == 1, out
    assert "perf_config: process 1 ran no input" in out, out
    assert "FINDING perf_config: exit status 1, no input saved" in out, out
    assert len(calls(cache)) == 1


def test_a_target_that_cannot_run_is_a_finding(cache: Path) -> None:
    (cache / "cache" / "build-fuzz" / "tests" / "fuzz" / "perf_config").chmod(0o644)
    p = start(cache, "--runs", "40")
    out = finish(p)
    assert p.returncode == 1, out
    assert "perf_config: cannot start " in out, out
    assert "FINDING perf_config: exit status 126, no input saved" in out, out


def test_a_fuzzer_killed_by_another_signal_is_a_finding(cache: Path) -> None:
    # SIGKILL, as from the kernel's OOM killer: a finding, and the other job stops.
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD="plain")
    pids = wait_until_held(cache, p, 2)
    os.kill(pids[0], signal.SIGKILL)
    out = finish(p)
    assert p.returncode == 1, out
    assert "FINDING perf_config: exit status 137, no input saved" in out, out
    assert not alive(pids[1])
    assert len(calls(cache)) == 2


def test_a_fuzzer_ended_by_someone_else_interrupts_the_run(cache: Path) -> None:
    # One fuzzer takes a SIGTERM from elsewhere (libFuzzer's 72): no finding, but the run
    # stops as on Ctrl-C.
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD=1)
    pids = wait_until_held(cache, p, 2)
    os.kill(pids[0], signal.SIGTERM)
    out = finish(p)
    assert p.returncode == 130, out
    assert "interrupted during perf_config" in out
    assert "FINDING" not in out
    assert summary_inputs(out) == 8
    assert not any(alive(pid) for pid in pids)


def test_the_log_grows_while_the_fuzzer_runs(cache: Path) -> None:
    # (Not copied into the log once the process has ended.)
    p = start(cache, "--runs", "1000", STANDIN_HOLD=1)
    wait_until_held(cache, p, 1)
    assert "INFO: Seed: 1" in (cache / "cache" / "fuzz-logs" / "perf_config.log").read_text()
    p.terminate()
    out = finish(p)
    assert p.returncode == 130, out


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_ends_every_fuzzer_and_reports_what_ran(cache: Path, jobs: int) -> None:
    p = start(cache, "--runs", "1000", "--jobs", str(jobs), STANDIN_HOLD=1)
    pids = wait_until_held(cache, p, jobs)
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    out = finish(p)
    assert p.returncode == 130, out
    assert "interrupted during perf_config" in out
    assert "FINDING" not in out
    assert summary_inputs(out) == 4 * jobs
    assert not any(alive(pid) for pid in pids)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_fuzzer_ended_before_its_handler_is_no_finding(cache: Path, how: str) -> None:
    # Killed by the signal itself (by Ctrl-C's SIGINT, or by the SIGTERM that fuzz.py sends
    # its fuzzers), not ended by libFuzzer (72): still an interrupt.
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD="plain")
    pids = wait_until_held(cache, p, 2)
    if how == "ctrl-c":
        os.killpg(p.pid, signal.SIGINT)
    else:
        p.terminate()
    out = finish(p)
    assert p.returncode == 130, out
    assert "FINDING" not in out, out
    assert not any(alive(pid) for pid in pids)


def test_sigterm_to_the_script_alone_ends_every_fuzzer(cache: Path) -> None:
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD=1)
    pids = wait_until_held(cache, p, 2)
    p.terminate()
    out = finish(p)
    assert p.returncode == 130, out
    assert summary_inputs(out) == 8
    assert len(calls(cache)) == 2
    assert not any(alive(pid) for pid in pids)


def test_sigterm_while_building_ends_the_build(tmp_path: Path) -> None:
    # (Dying of it would leave ninja running.)
    pidfile = tmp_path / "building"
    script(tmp_path / "holder", HOLDER)
    build_dir(tmp_path / "cache" / "build-fuzz",
              f"rule hold\n  command = {tmp_path / 'holder'} {pidfile}\n"
              "build tests/fuzz/perf_config: hold\n")
    (tmp_path / "standin").mkdir()
    p = start(tmp_path, "--runs", "10")
    pid = wait_for_file(pidfile, p)
    _pids.append(pid)
    p.terminate()
    out = finish(p)
    assert p.returncode == 130, out
    assert "interrupted" in out
    # ninja passes the SIGTERM on to its command's process group before it exits.
    while alive(pid):
        time.sleep(0.05)
    assert calls(tmp_path) == []


def coverage_cache(tmp: Path) -> Path:
    """The coverage build folder with the stand-in, and llvm tools in a folder for PATH."""
    build_dir(tmp / "cache" / "build-fuzz-cov")
    tools = tmp / "tools"
    script(tools / "llvm-profdata", PROFDATA)
    script(tools / "llvm-cov", LLVM_COV, report=COV_REPORT)
    return tools


def test_coverage_reports_the_targets_sources(cache: Path) -> None:
    p = start(cache, "--runs", "0", "--seeds-only", "--coverage", path=coverage_cache(cache))
    out = finish(p)
    assert p.returncode == 0, out
    assert out.count("line coverage of perf_config's sources over its corpus:") == 1
    rows = [ln for ln in out.splitlines() if ln.startswith("  ")]
    assert rows == [
        "  backend/perf/config.cc           lines   570 of   600  (95.00%)",
        "  backend/perf/keys.cc             lines   150 of   200  (75.00%)",
        "  all of the above                 lines   720 of   800  (90.0%)",
    ]
    assert calls(cache) == [(1, 0)]  # the corpus once, in the coverage build
    assert "warning: a stand-in" not in out


def test_coverage_without_a_profile(cache: Path) -> None:
    p = start(cache, "--runs", "0", "--coverage", path=coverage_cache(cache),
              STANDIN_NO_PROFILE=1)
    out = finish(p)
    assert p.returncode == 0, out
    assert "no profile for perf_config" in out
    assert "line coverage" not in out


def test_sigterm_during_coverage_ends_it(cache: Path) -> None:
    p = start(cache, "--runs", "0", "--coverage", path=coverage_cache(cache), STANDIN_HOLD=1)
    pids = wait_until_held(cache, p, 1)
    p.terminate()
    out = finish(p)
    assert p.returncode == 130, out
    assert "interrupted" in out and "line coverage" not in out
    assert not any(alive(pid) for pid in pids)


@pytest.mark.parametrize("bad", ["0", "100", "two"])
def test_bad_job_counts_are_refused(cache: Path, bad: str) -> None:
    p = start(cache, "--jobs", bad)
    out = finish(p)
    assert p.returncode != 0
    assert "--jobs wants a count from 1 to 99" in out
    assert not (cache / "standin" / "calls").exists()


@pytest.mark.parametrize("args,msg", [
    (["--time", "0"], "--time wants seconds"),
    (["--time"], "--time wants seconds"),
    (["--runs", "-1"], "--runs wants a count"),
    (["--runs", "1e3"], "--runs wants a count"),
    (["--fast"], "unknown option '--fast'"),
    (["disk"], "unknown fuzz target 'disk' (targets: vmbus_messages ring storvsp_packets "
               "scsi_cdb perf_config saved_state)"),
])
def test_bad_arguments_are_refused(cache: Path, args: list[str], msg: str) -> None:
    p = start(cache, *args)
    out = finish(p)
    assert p.returncode == 1, out
    assert f"[hvstor] error: {msg}" in out, out
    assert calls(cache) == []


def test_a_bad_segment_size_is_refused(cache: Path) -> None:
    p = start(cache, "--runs", "10", segment="0")
    out = finish(p)
    assert p.returncode == 1, out
    assert "HVSTOR_FUZZ_SEGMENT wants a count of inputs" in out
    assert calls(cache) == []


def test_help_prints_the_usage(cache: Path) -> None:
    p = start(cache, "--help")
    out = finish(p)
    assert p.returncode == 2, out
    assert "tests/fuzz/fuzz.py [TARGET...] [--time S | --runs N | --ci]" in out
    assert calls(cache) == []
