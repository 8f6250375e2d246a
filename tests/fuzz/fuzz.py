#!/usr/bin/python3
"""Builds the libFuzzer targets (tests/fuzz, docs/fuzzing.md) and runs them.

  tests/fuzz/fuzz.py [TARGET...] [--time S | --runs N | --ci] [--jobs N] [--seeds-only] [--coverage]

  TARGET        vmbus_messages, ring, storvsp_packets, scsi_cdb, perf_config, saved_state
                (default: all)
  --time S      run each target for S seconds (default 60)
  --runs N      run each target for N inputs instead (0: none, for --coverage of the corpus)
  --ci          the fixed number of inputs per target that ./hvstor test runs
  --jobs N      N processes at once per target on one corpus (default 1), each taking its
                share of --runs (or all of --time); a job that finds something stops the rest
  --seeds-only  start from the checked-in seeds (tests/fuzz/corpus) and keep no new inputs;
                otherwise the corpus grows in $HVSTOR_CACHE/fuzz-corpus/TARGET
  --coverage    then line coverage of each target's sources over its corpus (a second build,
                with -fprofile-instr-generate -fcoverage-mapping)

A target (each of its jobs) runs in processes of at most a million inputs each
($HVSTOR_FUZZ_SEGMENT), one after the other on the same corpus: ASan keeps about 1 KB per
input of storvsp_packets, which in one process would reach the RSS limit after about 2
million. Each further process's start is shown with the inputs so far.

Prints per target the inputs run, exec/s and libFuzzer's cov/ft figures. Crashes, leaks,
timeouts and out-of-memory inputs are saved in $HVSTOR_CACHE/fuzz-artifacts/TARGET/.
Exit status: 1 when a target found anything (or a step failed), 130 on Ctrl-C or SIGTERM
(every fuzzer ended, what was run printed), 2 for --help.
"""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Callable, NoReturn

ALL = ["vmbus_messages", "ring", "storvsp_packets", "scsi_cdb", "perf_config", "saved_state"]
# --ci: about a minute for all six on two cores once built (docs/fuzzing.md).
CI_RUNS = {"vmbus_messages": 15000, "ring": 50000, "storvsp_packets": 10000,
           "scsi_cdb": 30000, "perf_config": 200000, "saved_state": 10000}
# The sources each target is about, for --coverage.
SOURCES = {
    "vmbus_messages": "hw/vmbus/server.cc hw/hyperv/synic.cc hw/hyperv/partition.cc "
                      "hw/hyperv/cpuid.cc",
    "ring": "hw/vmbus/ring.cc",
    "storvsp_packets": "hw/storvsp/queue.cc hw/storvsp/controller.cc hw/vmbus/channel.cc "
                       "hw/vmbus/ring.cc",
    "scsi_cdb": "hw/scsi",
    "perf_config": "backend/perf/config.cc backend/perf/values.cc backend/perf/keys.cc "
                   "backend/perf/profiles.cc",
    "saved_state": "hw/capi/machine.cc hw/hyperv/partition.cc hw/hyperv/synic.cc "
                   "hw/vmbus/server_state.cc hw/storvsp/queue_state.cc backend/perf/model.cc "
                   "backend/perf/limiter.cc",
}
# Inputs per process (see above).
DEFAULT_SEGMENT = 1000000
# libFuzzer's exit status when SIGINT or SIGTERM ended it: no finding.
INTERRUPTED = 72
HEARTBEAT_S = 20
FINDING_LINE = re.compile(r"ERROR: |SUMMARY: |fuzz check failed|Test unit written")
COV_LINE = re.compile(r"^#[0-9]+.*cov: ")

Out = int | IO[bytes] | None


def log(msg: str) -> None:
    print(f"[hvstor {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> NoReturn:
    print(f"[hvstor] error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


class Interrupted(Exception):
    """A SIGINT or SIGTERM came: what runs is ended, the program exits 130."""


def _no_op(signum: int, frame: FrameType | None) -> None:
    pass


class Signals:
    """SIGINT and SIGTERM as a flag, and the main loop's wait: select() on a pipe that the
    signal module writes a byte to on every signal, SIGCHLD included, so that a child's end
    or an interrupt ends the wait. Everything runs in the main thread."""

    def __init__(self) -> None:
        self.interrupted = False
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _no_op)  # a handler, so that SIGCHLD writes its byte
        for signum in (signal.SIGINT, signal.SIGTERM):
            # Started with it ignored (in the background of a shell): it stays ignored, as a
            # shell's trap would leave it.
            if signal.getsignal(signum) != signal.SIG_IGN:
                signal.signal(signum, self._interrupt)

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True

    def check(self) -> None:
        if self.interrupted:
            raise Interrupted("interrupted")

    def wait(self, timeout: float | None = None) -> None:
        """Until a signal came since the last wait (a child ended, an interrupt), or timeout."""
        select.select([self._read], [], [], timeout)
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass


@dataclass
class Options:
    targets: list[str]
    mode: str = "time"
    value: int = 60
    jobs: int = 1
    seeds_only: bool = False
    coverage: bool = False


@dataclass
class Context:
    root: Path
    cache: Path
    tmp: Path
    segment: int
    sig: Signals

    @property
    def build(self) -> Path:
        return self.cache / "build-fuzz"

    def work(self, opts: Options, target: str) -> Path:
        """The corpus new inputs go to: kept in the cache, or thrown away with --seeds-only."""
        if opts.seeds_only:
            return self.tmp / f"corpus-{target}"
        return self.cache / "fuzz-corpus" / target

    def seeds(self, target: str) -> Path:
        return self.root / "tests" / "fuzz" / "corpus" / target


def usage() -> NoReturn:
    sys.stderr.write(__doc__ or "")
    raise SystemExit(2)


def _count(value: str | None, pattern: str, msg: str) -> int:
    if value is None or not re.fullmatch(pattern, value):
        die(msg)
    return int(value)


def parse_args(argv: list[str]) -> Options:
    opts = Options(targets=[])
    i = 0
    while i < len(argv):
        a = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        if a == "--time":
            opts.mode, opts.value = "time", _count(value, "[1-9][0-9]*", "--time wants seconds")
            i += 1
        elif a == "--runs":
            opts.mode, opts.value = "runs", _count(value, "[0-9]+", "--runs wants a count")
            i += 1
        elif a == "--jobs":
            opts.jobs = _count(value, "[1-9][0-9]?", "--jobs wants a count from 1 to 99")
            i += 1
        elif a == "--ci":
            opts.mode = "ci"
        elif a == "--seeds-only":
            opts.seeds_only = True
        elif a == "--coverage":
            opts.coverage = True
        elif a in ("-h", "--help"):
            usage()
        elif a.startswith("-"):
            die(f"unknown option '{a}' (see tests/fuzz/fuzz.py --help)")
        elif a not in ALL:
            die(f"unknown fuzz target '{a}' (targets: {' '.join(ALL)})")
        else:
            opts.targets.append(a)
        i += 1
    opts.targets = opts.targets or list(ALL)
    return opts


def exit_status(returncode: int) -> int:
    """A shell's view of a child's status: 128 + N for one killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def tail(path: Path, n: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "".join(text.splitlines(keepends=True)[-n:])


def run_child(sig: Signals, cmd: list[str], stdout: Out = None, stderr: Out = None,
              env: dict[str, str] | None = None,
              heartbeat: Callable[[], None] | None = None) -> int:
    """Runs cmd to its end and returns its exit status; calls heartbeat every HEARTBEAT_S
    seconds meanwhile. A SIGINT or SIGTERM ends it (SIGTERM) and raises Interrupted."""
    sig.check()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                env=env)
    except OSError as e:
        die(f"cannot run {cmd[0]}: {e.strerror}")
    beat = time.monotonic() + HEARTBEAT_S
    while proc.poll() is None:
        if sig.interrupted:
            proc.terminate()
            proc.wait()
            raise Interrupted("interrupted")
        now = time.monotonic()
        if heartbeat is not None and now >= beat:
            heartbeat()
            beat = now + HEARTBEAT_S
        sig.wait(None if heartbeat is None else max(0.0, beat - now))
    return exit_status(proc.returncode)


def last_line(path: Path) -> str:
    lines = tail(path, 1).split("\n")
    return lines[0].replace("\r", "")[:100]


def run_logged(sig: Signals, what: str, logf: Path, cmd: list[str]) -> None:
    """A long command with its output in logf: a heartbeat every 20 s, the log's tail when
    it fails."""
    log(f"{what} (log: {logf})")
    start = time.monotonic()

    def elapsed() -> int:
        return int(time.monotonic() - start)

    def beat() -> None:
        log(f"  ... {what}: {elapsed()}s, {last_line(logf)}")

    with open(logf, "wb") as out:
        rc = run_child(sig, cmd, stdout=out, stderr=subprocess.STDOUT, heartbeat=beat)
    if rc != 0:
        sys.stderr.write(tail(logf, 40))
        die(f"{what} failed after {elapsed()}s (full log: {logf})")
    log(f"{what} done in {elapsed()}s")


def configure(ctx: Context, build: Path, extra: list[str]) -> None:
    """A build directory of its own: clang, the sanitizers in every layer, libFuzzer's
    coverage instrumentation (meson.build does that with -Dfuzz=true)."""
    if (build / "build.ninja").is_file():
        return
    setup_log = Path(f"{build}.setup.log")
    # Meson runs a sanity-check program: with coverage flags it would leave a profile behind.
    env = dict(os.environ, LLVM_PROFILE_FILE=str(ctx.tmp / "setup-%p.profraw"),
               CC="clang", CXX="clang++")
    cmd = ["meson", "setup", str(build), str(ctx.root), "-Dfuzz=true", "-Dtests=false",
           "-Db_sanitize=address,undefined", "-Db_lundef=false", *extra]
    try:
        with open(setup_log, "wb") as out:
            rc = run_child(ctx.sig, cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    except Interrupted:
        shutil.rmtree(build, ignore_errors=True)  # half set up: the next run starts afresh
        raise
    if rc != 0:
        sys.stderr.write(tail(setup_log, 30))
        shutil.rmtree(build, ignore_errors=True)
        die(f"meson setup of {build} failed (log: {setup_log})")


def last_stat(name: str, text: str) -> int | None:
    found = re.findall(rf"^stat::{name}: *([0-9]+)", text, re.M)
    return int(found[-1]) if found else None


def last_cov(text: str) -> str:
    """libFuzzer's last "#N ... cov: C ft: F corp: K/..." line, or ""."""
    found = [ln for ln in text.splitlines() if COV_LINE.match(ln)]
    return found[-1] if found else ""


def figure(line: str, name: str) -> int:
    """NAME's number in a cov line (its last mention), 0 without one."""
    found = re.findall(rf"{name}: ([0-9]*)", line)
    return int(found[-1]) if found and found[-1] else 0


class Job:
    """One of a target's jobs: processes of at most ctx.segment inputs one after another
    until its share of the inputs (or the time) is run, the run is told to stop, or a
    process finds something. Its figures: inputs, rss (peak, MB), rc (the exit status of
    its last process, INTERRUPTED for one ended by SIGINT or SIGTERM); status once it is
    done: 0, 1 (a finding) or 2 (interrupted)."""

    def __init__(self, run: TargetRun, k: int, runs: int | None, logf: Path) -> None:
        self.run, self.k, self.runs, self.log = run, k, runs, logf
        n = len(run.jobs_logs)
        self.who = run.name if n == 1 else f"{run.name} (job {k} of {n})"
        self.inputs = self.rss = self.rc = self.procs = 0
        self.cov = ""
        self.offset = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.status: int | None = None
        logf.write_bytes(b"")

    def limit(self) -> list[str] | None:
        """The next process's limits, or None when the job is done."""
        if self.run.stopping:
            return None
        segment = self.run.ctx.segment
        if self.runs is not None:
            if self.inputs >= self.runs:
                return None
            return [f"-runs={min(segment, self.runs - self.inputs)}"]
        secs = self.run.secs or 0
        # Whole seconds: the first process gets all of --time, the next ones what is left.
        left = secs if self.procs == 0 else round(secs - (time.monotonic() - self.run.start))
        if left <= 0:
            return None
        return [f"-runs={segment}", f"-max_total_time={left}"]

    def start_next(self) -> None:
        limit = self.limit()
        if limit is None:
            self.finish()
            return
        if self.procs:
            log(f"{self.who}: {self.inputs} inputs so far, peak rss {self.rss} MB; "
                f"process {self.procs + 1} starts")
        self.procs += 1
        run = self.run
        # New inputs go to the first directory; the seeds are only read. -timeout is the
        # targets' only clock (a request never answered hangs the input); -rss_limit_mb
        # catches growth.
        cmd = [str(run.ctx.build / "tests" / "fuzz" / run.name), *limit, "-timeout=60",
               "-rss_limit_mb=2048", "-print_final_stats=1", f"-artifact_prefix={run.art}/",
               str(run.work), str(run.seeds)]
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1")
        self.offset = self.log.stat().st_size
        try:
            with open(self.log, "ab") as out:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, env=env)
        except OSError as e:
            log(f"{self.who}: cannot start {cmd[0]}: {e.strerror}")
            # As a shell reports a command it cannot find, or cannot run.
            self.rc = 127 if isinstance(e, FileNotFoundError) else 126
            self.finish()

    def ended(self) -> None:
        """Its process ended: counts what it ran, then starts the next one or finishes."""
        assert self.proc is not None and self.proc.returncode is not None
        rc = exit_status(self.proc.returncode)
        self.proc = None
        # Ended by SIGINT or SIGTERM before libFuzzer took them (or by stop()): interrupted.
        # Other signals (a SIGKILL from the kernel's OOM killer, say) stay findings.
        self.rc = INTERRUPTED if rc in (130, 143) else rc
        with open(self.log, "rb") as f:
            f.seek(self.offset)
            text = f.read().decode(errors="replace")
        self.cov = last_cov(text) or self.cov
        n = last_stat("number_of_executed_units", text)
        if n is None:
            m = re.match(r"#([0-9]+)", last_cov(text))
            n = int(m.group(1)) if m else 0
        self.inputs += n
        self.rss = max(self.rss, last_stat("peak_rss_mb", text) or 0)
        if self.rc != 0 or self.run.new_artifacts():
            self.finish()
        elif n == 0:
            log(f"{self.who}: process {self.procs} ran no input (log: {self.log})")
            self.rc = 1
            self.finish()
        else:
            self.start_next()

    def finish(self) -> None:
        if self.run.new_artifacts():
            self.status = 1
        else:
            self.status = {0: 0, INTERRUPTED: 2}.get(self.rc, 1)


class TargetRun:
    """A target's jobs on one corpus. The first job that finds something, or is interrupted
    (its fuzzer ended by someone else's SIGINT or SIGTERM), stops the others: their current
    process is ended (its inputs still count) and no further one starts. So does a SIGINT or
    SIGTERM to this program."""

    def __init__(self, ctx: Context, opts: Options, name: str, runs: int | None,
                 secs: int | None, logs: list[Path]) -> None:
        self.ctx, self.name, self.secs, self.jobs_logs = ctx, name, secs, logs
        self.art = ctx.cache / "fuzz-artifacts" / name
        self.work = ctx.work(opts, name)
        self.seeds = ctx.seeds(name)
        self.before = set(os.listdir(self.art))
        self.stopping = False
        self.interrupted = False
        self.start = time.monotonic()
        n = len(logs)
        # Each job's share of the inputs: an equal part, the remainder over the first jobs.
        self.jobs = [Job(self, k, None if runs is None else runs // n + (k <= runs % n),
                         logs[k - 1]) for k in range(1, n + 1)]

    def new_artifacts(self) -> list[str]:
        """The artifacts written since this target started."""
        return sorted(set(os.listdir(self.art)) - self.before)

    def stop(self) -> None:
        """Ends the current process of every job and starts no further one."""
        self.stopping = True
        for job in self.jobs:
            if job.proc is not None:
                job.proc.terminate()

    def job_done(self, job: Job) -> None:
        if job.status == 0 or self.stopping:
            return
        if job.status == 2:
            self.interrupted = True
        elif len(self.jobs) > 1:
            log(f"{self.name}: job {job.k} found something; the other jobs stop")
        self.stop()

    def run(self) -> None:
        """Starts every job and waits until all are done."""
        try:
            for job in self.jobs:
                job.start_next()
            waiting = list(self.jobs)
            while waiting:
                if self.ctx.sig.interrupted and not self.stopping:
                    self.interrupted = True
                    self.stop()
                for job in list(waiting):
                    if job.proc is not None and job.proc.poll() is not None:
                        job.ended()
                    if job.status is not None:
                        waiting.remove(job)
                        self.job_done(job)
                if waiting:
                    self.ctx.sig.wait()
        except BaseException:
            self.stop()  # no fuzzer left behind by an error here
            raise

    def summary(self) -> None:
        """Inputs of all jobs added up; cov, ft, corpus and peak RSS the highest any reached."""
        wall = f"{time.monotonic() - self.start:.1f}"
        inputs = sum(j.inputs for j in self.jobs)
        rate = int(inputs / float(wall)) if float(wall) > 0 else 0
        cov, ft, corp = (max(figure(j.cov, v) for j in self.jobs) for v in ("cov", "ft", "corp"))
        rss = max(j.rss for j in self.jobs)
        print(f"{self.name:<16} {inputs:>9} inputs {rate:>7} exec/s  cov {cov:>5}  ft {ft:>6}  "
              f"corpus {corp:>5}  rss {rss} MB  {wall:>5} s", flush=True)

    def report_findings(self) -> bool:
        """Prints what was found (the saved inputs with the command that replays each, or a
        failure that saved none); True when something was."""
        bad = [j.rc for j in self.jobs if j.rc not in (0, INTERRUPTED)]
        new = self.new_artifacts()
        if not bad and not new:
            return False
        lines = [ln for logf in self.jobs_logs
                 for ln in logf.read_text(errors="replace").splitlines(keepends=True)
                 if FINDING_LINE.search(ln)]
        sys.stderr.write("".join(lines[:8]))
        sys.stderr.flush()
        target = self.ctx.build / "tests" / "fuzz" / self.name
        for f in new:
            log(f"FINDING {self.name}: {self.art}/{f}  (reproduce: {target} {self.art}/{f})")
        if not new:
            logs = " ".join(str(p) for p in self.jobs_logs)
            log(f"FINDING {self.name}: exit status {bad[0]}, no input saved (log: {logs})")
        return True


def fuzz_target(ctx: Context, opts: Options, name: str) -> tuple[bool, bool]:
    """Runs one target: (found something, interrupted)."""
    art = ctx.cache / "fuzz-artifacts" / name
    logs_dir = ctx.cache / "fuzz-logs"
    for d in (art, logs_dir, ctx.work(opts, name)):
        d.mkdir(parents=True, exist_ok=True)
    runs = {"ci": CI_RUNS[name], "runs": opts.value}.get(opts.mode)
    secs = opts.value if opts.mode == "time" else None
    if runs == 0:
        log(f"{name}: --runs 0, nothing fuzzed")
        return False, False
    # One log per job: TARGET.log, or TARGET.1.log ... TARGET.N.log with --jobs N.
    if opts.jobs == 1:
        logs = [logs_dir / f"{name}.log"]
    else:
        logs = [logs_dir / f"{name}.{k}.log" for k in range(1, opts.jobs + 1)]
    for old in logs_dir.glob(f"{name}.[0-9]*.log"):  # an earlier run's jobs
        old.unlink(missing_ok=True)
    amount = f"{runs} inputs" if runs is not None else f"{secs} s"
    if opts.jobs > 1:
        amount += f" in {opts.jobs} jobs on one corpus"
    shown = logs[0] if opts.jobs == 1 else logs_dir / f"{name}.K.log"
    log(f"fuzzing {name} ({amount}; log: {shown})")
    run = TargetRun(ctx, opts, name, runs, secs, logs)
    run.run()
    run.summary()
    return run.report_findings(), run.interrupted


def coverage_lines(report: str, sources: str) -> list[str]:
    """The rows of `llvm-cov report` for the target's sources, and their sum."""
    wants = sources.split()
    out: list[str] = []
    lines = missed = 0
    for row in report.splitlines():
        f = row.split()
        if len(f) < 10:
            continue
        for w in wants:
            if f[0].startswith(w):
                n, m = _number(f[7]), _number(f[8])
                out.append(f"  {f[0]:<32} lines {n - m:>5} of {n:>5}  ({f[9]})")
                lines += n
                missed += m
    if lines:
        out.append(f"  {'all of the above':<32} lines {lines - missed:>5} of {lines:>5}  "
                   f"({100 * (lines - missed) / lines:.1f}%)")
    return out


def _number(s: str) -> int:
    m = re.match(r"[0-9]+", s)
    return int(m.group(0)) if m else 0


def coverage_of(ctx: Context, opts: Options, cov_build: Path, name: str) -> None:
    prof = ctx.tmp / f"prof-{name}"
    prof.mkdir(parents=True, exist_ok=True)
    binary = str(cov_build / "tests" / "fuzz" / name)
    env = dict(os.environ, LLVM_PROFILE_FILE=f"{prof}/%p.profraw")
    # -runs=0: each input of the corpus once, nothing new.
    with open(ctx.cache / "fuzz-logs" / f"{name}.cov.log", "wb") as out:
        run_child(ctx.sig, [binary, "-runs=0", str(ctx.work(opts, name)), str(ctx.seeds(name))],
                  stdout=out, stderr=subprocess.STDOUT, env=env)
    raws = [str(p) for p in sorted(prof.glob("*.profraw"))]
    merged = str(prof / "merged.profdata")
    if not raws or run_child(ctx.sig, ["llvm-profdata", "merge", "-sparse", *raws,
                                       "-o", merged]) != 0:
        log(f"no profile for {name}")
        return
    print(f"line coverage of {name}'s sources over its corpus:", flush=True)
    report = prof / "report.txt"
    with open(report, "wb") as out:
        run_child(ctx.sig, ["llvm-cov", "report", binary, f"-instr-profile={merged}"],
                  stdout=out, stderr=subprocess.DEVNULL)
    for line in coverage_lines(report.read_text(errors="replace"), SOURCES[name]):
        print(line, flush=True)


def coverage(ctx: Context, opts: Options) -> None:
    if not (shutil.which("llvm-profdata") and shutil.which("llvm-cov")):
        die("--coverage needs llvm-profdata and llvm-cov: run ./hvstor setup")
    cov_build = ctx.cache / "build-fuzz-cov"
    configure(ctx, cov_build, ["-Dcpp_args=-fprofile-instr-generate -fcoverage-mapping",
                               "-Dcpp_link_args=-fprofile-instr-generate"])
    run_logged(ctx.sig, "building fuzz targets with coverage mapping",
               ctx.cache / "fuzz-cov-build.log",
               ["ninja", "-C", str(cov_build), *[f"tests/fuzz/{t}" for t in opts.targets]])
    for name in opts.targets:
        coverage_of(ctx, opts, cov_build, name)


def fuzz_all(ctx: Context, opts: Options, failed: list[str]) -> int:
    """The build, each target, then --coverage; the exit status. Targets that found
    something are added to failed as they end."""
    configure(ctx, ctx.build, [])
    run_logged(ctx.sig, f"building fuzz targets ({' '.join(opts.targets)})",
               ctx.cache / "fuzz-build.log",
               ["ninja", "-C", str(ctx.build), *[f"tests/fuzz/{t}" for t in opts.targets]])
    for name in opts.targets:
        if ctx.sig.interrupted:
            raise Interrupted(f"interrupted before {name}")
        found, interrupted = fuzz_target(ctx, opts, name)
        if found:
            failed.append(name)
        if interrupted or ctx.sig.interrupted:
            raise Interrupted(f"interrupted during {name}")
    if opts.coverage:
        coverage(ctx, opts)
    ctx.sig.check()
    if failed:
        log(f"findings in: {' '.join(failed)} (inputs in {ctx.cache}/fuzz-artifacts/)")
        return 1
    return 0


def segment_size() -> int:
    value = os.environ.get("HVSTOR_FUZZ_SEGMENT") or str(DEFAULT_SEGMENT)
    if not re.fullmatch("[1-9][0-9]*", value):
        die(f"HVSTOR_FUZZ_SEGMENT wants a count of inputs, not '{value}'")
    return int(value)


def main(argv: list[str]) -> int:
    root = Path(os.environ.get("HVSTOR_ROOT") or Path(__file__).resolve().parents[2])
    # Everything downloaded or built lives under one cache folder, outside git.
    cache = Path(os.environ.get("HVSTOR_CACHE") or root / ".cache")
    cache.mkdir(parents=True, exist_ok=True)
    opts = parse_args(argv)
    segment = segment_size()
    if not shutil.which("clang++"):
        die("clang is needed for the fuzz targets: run ./hvstor setup")
    sig = Signals()
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hvstor-fuzz.") as tmp:
        ctx = Context(root=root, cache=cache, tmp=Path(tmp), segment=segment, sig=sig)
        try:
            return fuzz_all(ctx, opts, failed)
        except Interrupted as e:
            if failed:
                log(f"findings in: {' '.join(failed)} (inputs in {cache}/fuzz-artifacts/)")
            log(str(e))
            return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
