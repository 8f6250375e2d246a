#!/usr/bin/python3
"""Pictures for docs/perf-model.md: runs the performance model on its virtual clock
(tests/perf/perf-sim) and plots with gnuplot into docs/img/.

  scripts/plot_perf.py [--sim PATH/TO/perf-sim] [--out DIR]

Without --sim, builds perf-sim in $HVSTOR_CACHE/build-perf (release). Deterministic: the
same sources give the same pictures. About 20 s, most of it simulating an hour of P10.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

# The plots, fed to gnuplot on its stdin; {out} and {data} are the folders of the pictures
# and of the simulator's figures. A line that ends in a backslash goes on in the next one.
GNUPLOT = r"""set terminal pngcairo size 1100,560 font "DejaVu Sans,11" linewidth 1.5
set datafile separator "\t"
set datafile commentschars "#"
set grid lc rgb "#dddddd"
set key outside bottom center horizontal

# 1: a credit burst drains, the disk falls to base; idle time refills the bank.
set output "{out}/perf-burst.png"
set title "Premium SSD P10, credit bursting: saturating 4 KiB reads (QD32), idle from 40 to 50 min, then again"
set xlabel "time (minutes)"
set ylabel "IOPS"
set y2label "credits left (% of bucket)"
set xrange [0:60]
set yrange [0:4000]
set y2range [0:105]
set ytics nomirror
set y2tics 0,20,100
set object 1 rectangle from first 40, graph 0 to first 50, graph 1 behind fillcolor rgb "#f2f2f2" fillstyle solid 1.0 noborder
set label 1 "burst: 3500 IOPS" at 2, 3700
set label 2 "base: 500 IOPS" at 31, 800
set label 3 "idle:\ncredits\nrefill at\nbase rate" at 41, 2600
set label 4 "30 min at burst rate" at 8, 1900
set label 5 "10 min idle\nbought 100 s\nof burst" at 52.2, 2900
set arrow 1 from 0.3, 1700 to 30, 1700 heads size 0.8,20 lc rgb "#555555"
# Each row is the interval ending at t: steps start at the interval's beginning.
plot "{data}/burst.tsv" using (($1-10)/60):2 with steps lw 2 lc rgb "#1f77b4" title "IOPS (10 s average)", \
     "" using ($1/60):4 axes x1y2 with lines lw 2 dt 2 lc rgb "#d62728" title "IOPS credits", \
     "" using ($1/60):5 axes x1y2 with lines lw 2 dt 3 lc rgb "#2ca02c" title "bandwidth credits (unused at 14 MB/s)"
unset object 1
unset label
unset arrow

# 2: the host queue under a saturating load, and what it does to a QD1 writer.
set output "{out}/perf-queue.png"
set terminal pngcairo size 1100,860 font "DejaVu Sans,11" linewidth 1.5
set multiplot layout 2,1 title "Premium SSD P30 (5000 IOPS, lognormal 2 ms / 4 ms p99): read queue depth doubling every 10 s, one 8 KiB writer at QD1"
unset title
set xrange [0:80]
set xlabel "time (s)"
set ylabel "IOs"
set y2label "IOPS"
set logscale y 2
set yrange [0.5:256]
set y2range [0:6000]
set y2tics 0,1000,6000
set ytics nomirror
set label 1 "about 10 IOs in service (5000 IOPS x 2.1 ms):\nbeyond that, IOs wait in the host" at 2, 100
plot "{data}/queue-fifo.tsv" using ($1-1):2 with steps lw 2 lc rgb "#7f7f7f" title "guest read queue depth", \
     "" using ($1-0.5):($4 > 0 ? $4 : 1/0) with linespoints pt 7 ps 0.5 lc rgb "#ff7f0e" title "host queue depth (time average)", \
     "" using ($1-1):3 axes x1y2 with steps lw 2 lc rgb "#1f77b4" title "IOPS (right axis)"
unset label 1
unset y2label
unset y2tics
set ylabel "latency (ms)"
set logscale y 2
set yrange [1:64]
set ytics mirror
set label 2 "one FIFO: the write waits behind the queued reads" at 42, 40
set label 3 "per-direction queues: it does not" at 50, 2.8
plot "{data}/queue-fifo.tsv" using ($1-1):7 with steps lw 5 lc rgb "#f4a3a3" title "QD1 write p50, one FIFO (default)", \
     "{data}/queue-perdir.tsv" using ($1-1):7 with steps lw 2 lc rgb "#2ca02c" title "QD1 write p50, per-direction queues", \
     "{data}/queue-fifo.tsv" using ($1-1):5 with steps lw 1.5 lc rgb "#1f77b4" title "read p50", \
     "" using ($1-1):6 with steps lw 1 dt 2 lc rgb "#1f77b4" title "read p99"
unset label
unset multiplot
"""


def log(msg: str) -> None:
    print(f"[hvstor {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def die(msg: str, status: int = 1) -> NoReturn:
    print(f"[hvstor] error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(status)


def exit_status(returncode: int) -> int:
    """A shell's view of a child's status: 128 + N for one killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def parse_args(argv: list[str], root: Path) -> tuple[str, Path]:
    """(--sim, or "" to build it; --out)"""
    sim, out = "", root / "docs" / "img"
    i = 0
    while i < len(argv):
        if argv[i] not in ("--sim", "--out"):
            die(f"unknown argument {argv[i]}")
        if i + 1 == len(argv):
            die(f"{argv[i]} wants a path")
        if argv[i] == "--sim":
            sim = argv[i + 1]
        else:
            out = Path(argv[i + 1])
        i += 2
    return sim, out


def logged(cmd: list[str], logf: Path, what: str) -> None:
    """cmd with its output in logf; on failure the log's tail and an error."""
    with open(logf, "wb") as f:
        rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=f,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0:
        lines = logf.read_text(errors="replace").splitlines(keepends=True)
        sys.stdout.write("".join(lines[-30:]))
        sys.stdout.flush()
        die(what)


def build_sim(root: Path, cache: Path) -> Path:
    """perf-sim from a release build folder of its own."""
    build = cache / "build-perf"
    if not (build / "build.ninja").is_file():
        logged(["meson", "setup", str(build), str(root), "-Dbuildtype=release"],
               cache / "perf-setup.log", "meson setup failed")
    logged(["ninja", "-C", str(build), "tests/perf/perf-sim"], cache / "perf-build.log",
           "building perf-sim failed")
    return build / "tests" / "perf" / "perf-sim"


def simulate(sim: str, args: list[str], out: Path) -> None:
    with open(out, "wb") as f:
        rc = subprocess.run([sim, *args], stdin=subprocess.DEVNULL, stdout=f).returncode
    if rc != 0:
        die(f"{sim} {' '.join(args)} failed (exit status {exit_status(rc)})", exit_status(rc))


def main(argv: list[str]) -> int:
    root = Path(os.environ.get("HVSTOR_ROOT") or Path(__file__).resolve().parents[1])
    cache = Path(os.environ.get("HVSTOR_CACHE") or root / ".cache")
    cache.mkdir(parents=True, exist_ok=True)
    sim, out = parse_args(argv, root)
    if not shutil.which("gnuplot"):
        die("gnuplot is missing (apt-get install gnuplot-nox)")
    sim = sim or str(build_sim(root, cache))
    if not os.access(sim, os.X_OK):
        die(f"no simulator at {sim}")
    data = cache / "perf-plots"
    data.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    log("simulating: P10 credit burst over an hour")
    simulate(sim, ["burst"], data / "burst.tsv")
    log("simulating: P30 under a growing queue depth, FIFO and per-direction host queues")
    simulate(sim, ["queue", "queue=fifo"], data / "queue-fifo.tsv")
    simulate(sim, ["queue", "queue=per-direction"], data / "queue-perdir.tsv")
    script = GNUPLOT.replace("\\\n", "").format(out=out, data=data)
    rc = subprocess.run(["gnuplot"], input=script.encode()).returncode
    if rc != 0:
        die(f"gnuplot failed (exit status {exit_status(rc)})", exit_status(rc))
    log(f"wrote {out}/perf-burst.png and {out}/perf-queue.png (data: {data})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
