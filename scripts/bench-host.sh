#!/usr/bin/env bash
# ./hvstor bench --host [BENCHMARK ARGS]: the host side of the data path without QEMU
# (tests/bench/host_path.cc): ns per I/O for batches of 1 and 32 on 1, 2, 4 and 8
# channels, medians of 3 repetitions. Extra arguments go to Google Benchmark, e.g.
# --benchmark_filter=/32/ or --benchmark_repetitions=5.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

bash "$HVSTOR_ROOT/scripts/setup-host.sh"
BUILD=$HVSTOR_CACHE/build-bench
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" "$HVSTOR_ROOT" -Dbuildtype=release >"$HVSTOR_CACHE/bench-setup.log" 2>&1 \
    || { tail -n 30 "$HVSTOR_CACHE/bench-setup.log"; die "meson setup of the benchmark build failed"; }
fi
run_logged "building the host benchmark" "$HVSTOR_CACHE/bench-build.log" ninja -C "$BUILD" tests/bench/host-bench
[ -x "$BUILD/tests/bench/host-bench" ] || die "no host-bench: is libbenchmark-dev installed?"
log "$(nproc) host CPUs: with more channels than CPUs / 2, channels share cores (a guest thread and a worker each)"
exec "$BUILD/tests/bench/host-bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_counters_tabular=true "$@"
