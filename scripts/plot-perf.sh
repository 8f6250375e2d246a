#!/usr/bin/env bash
# Pictures for docs/perf-model.md: runs the performance model on its virtual clock
# (tests/perf/perf-sim) and plots with gnuplot into docs/img/.
#
#   scripts/plot-perf.sh [--sim PATH/TO/perf-sim] [--out DIR]
#
# Without --sim, builds perf-sim in $HVSTOR_CACHE/build-perf (release). Deterministic: the
# same sources give the same pictures. About 20 s, most of it simulating an hour of P10.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SIM="" OUT="$HVSTOR_ROOT/docs/img"
while [ $# -gt 0 ]; do
  case $1 in
    --sim) SIM=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
command -v gnuplot >/dev/null || die "gnuplot is missing (apt-get install gnuplot-nox)"

if [ -z "$SIM" ]; then
  B=$HVSTOR_CACHE/build-perf
  if [ ! -f "$B/build.ninja" ]; then
    meson setup "$B" "$HVSTOR_ROOT" -Dbuildtype=release >"$HVSTOR_CACHE/perf-setup.log" 2>&1 \
      || { tail -n 30 "$HVSTOR_CACHE/perf-setup.log"; die "meson setup failed"; }
  fi
  ninja -C "$B" tests/perf/perf-sim >"$HVSTOR_CACHE/perf-build.log" 2>&1 \
    || { tail -n 30 "$HVSTOR_CACHE/perf-build.log"; die "building perf-sim failed"; }
  SIM=$B/tests/perf/perf-sim
fi
[ -x "$SIM" ] || die "no simulator at $SIM"

DATA=$HVSTOR_CACHE/perf-plots
mkdir -p "$DATA" "$OUT"
log "simulating: P10 credit burst over an hour"
"$SIM" burst >"$DATA/burst.tsv"
log "simulating: P30 under a growing queue depth, FIFO and per-direction host queues"
"$SIM" queue queue=fifo >"$DATA/queue-fifo.tsv"
"$SIM" queue queue=per-direction >"$DATA/queue-perdir.tsv"

gnuplot <<GP
set terminal pngcairo size 1100,560 font "DejaVu Sans,11" linewidth 1.5
set datafile separator "\t"
set datafile commentschars "#"
set grid lc rgb "#dddddd"
set key outside bottom center horizontal

# 1: a credit burst drains, the disk falls to base; idle time refills the bank.
set output "$OUT/perf-burst.png"
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
plot "$DATA/burst.tsv" using ((\$1-10)/60):2 with steps lw 2 lc rgb "#1f77b4" title "IOPS (10 s average)", \
     "" using (\$1/60):4 axes x1y2 with lines lw 2 dt 2 lc rgb "#d62728" title "IOPS credits", \
     "" using (\$1/60):5 axes x1y2 with lines lw 2 dt 3 lc rgb "#2ca02c" title "bandwidth credits (unused at 14 MB/s)"
unset object 1
unset label
unset arrow

# 2: the host queue under a saturating load, and what it does to a QD1 writer.
set output "$OUT/perf-queue.png"
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
plot "$DATA/queue-fifo.tsv" using (\$1-1):2 with steps lw 2 lc rgb "#7f7f7f" title "guest read queue depth", \
     "" using (\$1-0.5):(\$4 > 0 ? \$4 : 1/0) with linespoints pt 7 ps 0.5 lc rgb "#ff7f0e" title "host queue depth (time average)", \
     "" using (\$1-1):3 axes x1y2 with steps lw 2 lc rgb "#1f77b4" title "IOPS (right axis)"
unset label 1
unset y2label
unset y2tics
set ylabel "latency (ms)"
set logscale y 2
set yrange [1:64]
set ytics mirror
set label 2 "one FIFO: the write waits behind the queued reads" at 42, 40
set label 3 "per-direction queues: it does not" at 50, 2.8
plot "$DATA/queue-fifo.tsv" using (\$1-1):7 with steps lw 5 lc rgb "#f4a3a3" title "QD1 write p50, one FIFO (default)", \
     "$DATA/queue-perdir.tsv" using (\$1-1):7 with steps lw 2 lc rgb "#2ca02c" title "QD1 write p50, per-direction queues", \
     "$DATA/queue-fifo.tsv" using (\$1-1):5 with steps lw 1.5 lc rgb "#1f77b4" title "read p50", \
     "" using (\$1-1):6 with steps lw 1 dt 2 lc rgb "#1f77b4" title "read p99"
unset label
unset multiplot
GP
log "wrote $OUT/perf-burst.png and $OUT/perf-queue.png (data: $DATA)"
