"""fuzz.sh's process handling, with a stand-in for a libFuzzer target.

The stand-in is a shell script where fuzz.sh expects the perf_config binary of a fuzz build
folder. Each call takes a number in order of start; per number it runs its -runs inputs, or
"crashes" (a sanitizer line, a crash- file in -artifact_prefix, exit 1), or fails with
nothing saved (exit 1, as a fuzzer the kernel ended would), or holds until a
SIGINT or SIGTERM (then it reports 4 inputs and exits 72, as libFuzzer does), or with
STANDIN_HOLD=plain holds with no handler (as a fuzzer killed before libFuzzer set its own).
fuzz.sh's jobs start it with SIGINT ignored (bash's background jobs), so it ends on Ctrl-C by
way of fuzz.sh's SIGTERM; libFuzzer takes SIGINT itself.

No test has a clock: a test that waits for the stand-ins to hold waits for their files. A
hang guard (HANG_GUARD_S, far beyond the second or so each test takes) turns a fuzz.sh that
never ends into a failure, and every process a test started is ended afterwards.
"""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUZZ_SH = ROOT / "tests" / "fuzz" / "fuzz.sh"
HANG_GUARD_S = 300
_started = []

STANDIN = r"""#!/bin/bash
dir=$STANDIN_DIR runs=0 art=
for a; do
  case $a in -runs=*) runs=${a#-runs=} ;; -artifact_prefix=*) art=${a#-artifact_prefix=} ;; esac
done
exec 9>"$dir/lock"; flock 9
c=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 )); echo "$c" >"$dir/count"
echo "$c $runs" >>"$dir/calls"
flock -u 9
if [ "$c" = "${STANDIN_CRASH_AT:-0}" ]; then
  # Not before the first call holds (its trap set): the run then has one of each.
  while [ ! -e "$dir/held.1" ]; do sleep 0.05; done
  echo "#3 NEW cov: 11 ft: 21 corp: 4/1b"
  echo "==1==ERROR: AddressSanitizer: stand-in"
  echo x >"${art}crash-standin"
  exit 1
fi
if [ "$c" = "${STANDIN_FAIL_AT:-0}" ]; then
  echo "==1==ERROR: stand-in ends with nothing saved"
  exit 1
fi
if [ "${STANDIN_HOLD:-}" = plain ]; then
  echo $$ >"$dir/held.$c"
  exec sleep 1000000
fi
if [ -n "${STANDIN_HOLD:-}" ]; then
  trap 'echo "#4 DONE cov: 10 ft: 20 corp: 3/1b"; echo "stat::number_of_executed_units: 4";
        echo "stat::peak_rss_mb: 50"; rm -f "$dir/held.$c"; exit 72' INT TERM
  echo $$ >"$dir/held.$c"
  while :; do sleep 0.05; done
fi
echo "#$runs DONE cov: 10 ft: 20 corp: 3/1b"
echo "stat::number_of_executed_units: $runs"
echo "stat::peak_rss_mb: 40"
"""


def _hung(signum, frame):
    raise TimeoutError(f"hung: fuzz.sh still runs after {HANG_GUARD_S} s")


@pytest.fixture(autouse=True)
def guard():
    """The hang guard, and afterwards no process of the test left: fuzz.sh's session (its jobs
    and the stand-ins) is killed."""
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


@pytest.fixture
def cache(tmp_path):
    """An HVSTOR_CACHE whose fuzz build folder holds the stand-in as perf_config."""
    build = tmp_path / "cache" / "build-fuzz"
    (build / "tests" / "fuzz").mkdir(parents=True)
    (build / "build.ninja").write_text(
        "ninja_required_version = 1.5\nbuild tests/fuzz/perf_config: phony\n")
    target = build / "tests" / "fuzz" / "perf_config"
    target.write_text(STANDIN)
    target.chmod(0o755)
    (tmp_path / "standin").mkdir()
    return tmp_path


def _default_signals():
    # A run started in the background (nohup CMD &, some CI runners) ignores SIGINT, and a
    # shell cannot trap what it was started ignoring: fuzz.sh gets it as a terminal would.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(tmp, *args, segment=10, **env):
    e = dict(os.environ, HVSTOR_CACHE=str(tmp / "cache"), STANDIN_DIR=str(tmp / "standin"),
             HVSTOR_FUZZ_SEGMENT=str(segment))
    e.update({k: str(v) for k, v in env.items()})
    p = subprocess.Popen(["bash", str(FUZZ_SH), "perf_config", *args], env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, preexec_fn=_default_signals)
    _started.append(p)
    return p


def calls(tmp):
    path = tmp / "standin" / "calls"
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]


def held(tmp):
    return sorted((tmp / "standin").glob("held.*"))


def wait_until_held(tmp, proc, n):
    """Waits until n stand-ins hold (their pids), or fails if fuzz.sh ends first."""
    while len(held(tmp)) < n:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    return [int(p.read_text()) for p in held(tmp)]


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def summary_inputs(out):
    m = re.search(r"^perf_config\s+(\d+) inputs", out, re.M)
    assert m, out
    return int(m.group(1))


def test_jobs_share_the_inputs_in_segments(cache):
    p = start(cache, "--runs", "51", "--jobs", "2")
    out, _ = p.communicate()
    assert p.returncode == 0, out
    assert summary_inputs(out) == 51
    # 26 and 25 inputs, each in processes of at most 10.
    assert sorted(r for _, r in calls(cache)) == [5, 6, 10, 10, 10, 10]
    logs = cache / "cache" / "fuzz-logs"
    assert (logs / "perf_config.1.log").exists() and (logs / "perf_config.2.log").exists()


def test_one_job_is_one_log_and_the_whole_count(cache):
    p = start(cache, "--runs", "25")
    out, _ = p.communicate()
    assert p.returncode == 0, out
    assert summary_inputs(out) == 25
    assert sorted(r for _, r in calls(cache)) == [5, 10, 10]
    assert (cache / "cache" / "fuzz-logs" / "perf_config.log").exists()


def test_a_finding_ends_the_other_jobs(cache):
    # The first process holds; the second finds something. The first is ended, its inputs
    # counted, and no further process starts.
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD=1, STANDIN_CRASH_AT=2)
    out, _ = p.communicate()
    assert p.returncode == 1, out
    assert "FINDING perf_config" in out and "crash-standin" in out, out
    assert summary_inputs(out) == 3 + 4
    assert len(calls(cache)) == 2
    assert held(cache) == []


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failure_with_nothing_saved_is_a_finding(cache, jobs):
    p = start(cache, "--runs", "40", "--jobs", str(jobs), STANDIN_FAIL_AT=2)
    out, _ = p.communicate()
    assert p.returncode == 1, out
    assert "FINDING perf_config: exit status 1, no input saved" in out, out
    assert "findings in: perf_config" in out


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_ends_every_fuzzer_and_reports_what_ran(cache, jobs):
    p = start(cache, "--runs", "1000", "--jobs", str(jobs), STANDIN_HOLD=1)
    pids = wait_until_held(cache, p, jobs)
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    out, _ = p.communicate()
    assert p.returncode == 130, out
    assert "interrupted during perf_config" in out
    assert "FINDING" not in out
    assert summary_inputs(out) == 4 * jobs
    assert not any(alive(pid) for pid in pids)


def test_a_fuzzer_ended_before_its_handler_is_no_finding(cache):
    # Killed by the signal itself (status 143), not ended by libFuzzer (72): still Ctrl-C.
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD="plain")
    pids = wait_until_held(cache, p, 2)
    os.killpg(p.pid, signal.SIGINT)
    out, _ = p.communicate()
    assert p.returncode == 130, out
    assert "FINDING" not in out, out
    assert not any(alive(pid) for pid in pids)


def test_sigterm_to_the_script_alone_ends_every_fuzzer(cache):
    p = start(cache, "--runs", "1000", "--jobs", "2", STANDIN_HOLD=1)
    pids = wait_until_held(cache, p, 2)
    p.terminate()
    out, _ = p.communicate()
    assert p.returncode == 130, out
    assert summary_inputs(out) == 8
    assert len(calls(cache)) == 2
    assert not any(alive(pid) for pid in pids)


@pytest.mark.parametrize("bad", ["0", "100", "two"])
def test_bad_job_counts_are_refused(cache, bad):
    p = start(cache, "--jobs", bad)
    out, _ = p.communicate()
    assert p.returncode != 0
    assert "--jobs wants a count from 1 to 99" in out
    assert not (cache / "standin" / "calls").exists()
