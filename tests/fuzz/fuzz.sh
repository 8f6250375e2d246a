#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, docs/fuzzing.md) and runs them.
#
#   tests/fuzz/fuzz.sh [TARGET...] [--time S | --runs N | --ci] [--seeds-only] [--coverage]
#
#   TARGET        vmbus_messages, ring, storvsp_packets, scsi_cdb, perf_config (default: all)
#   --time S      run each target for S seconds (default 60)
#   --runs N      run each target for N inputs instead (0: none, for --coverage of the corpus)
#   --ci          the fixed number of inputs per target that ./hvstor test runs
#   --seeds-only  start from the checked-in seeds (tests/fuzz/corpus) and keep no new inputs;
#                 otherwise the corpus grows in $HVSTOR_CACHE/fuzz-corpus/TARGET
#   --coverage    then line coverage of each target's sources over its corpus (a second build,
#                 with -fprofile-instr-generate -fcoverage-mapping)
#
# A target runs in processes of at most a million inputs each, one after the other on the same
# corpus: ASan keeps about 1 KB per input of storvsp_packets, which in one process would reach
# the RSS limit after about 2 million. Each further process's start is shown with the inputs
# so far.
#
# Prints per target the inputs run, exec/s and libFuzzer's cov/ft figures. Crashes, leaks,
# timeouts and out-of-memory inputs are saved in $HVSTOR_CACHE/fuzz-artifacts/TARGET/; the
# script exits 1 when a target found anything.
set -uo pipefail
. "$(dirname "$0")/../../scripts/lib.sh"

ALL=(vmbus_messages ring storvsp_packets scsi_cdb perf_config)
# --ci: about 2-3 minutes for all five on two cores (figures in docs/fuzzing.md).
# Inputs per process (see above).
SEGMENT=${HVSTOR_FUZZ_SEGMENT:-1000000}
declare -A CI_RUNS=([vmbus_messages]=15000 [ring]=50000 [storvsp_packets]=10000 [scsi_cdb]=30000 [perf_config]=200000)
# The sources each target is about, for --coverage.
declare -A SOURCES=(
  [vmbus_messages]="hw/vmbus/server.cc hw/hyperv/synic.cc hw/hyperv/partition.cc hw/hyperv/cpuid.cc"
  [ring]="hw/vmbus/ring.cc"
  [storvsp_packets]="hw/storvsp/queue.cc hw/storvsp/controller.cc hw/vmbus/channel.cc hw/vmbus/ring.cc"
  [scsi_cdb]="hw/scsi"
  [perf_config]="backend/perf/config.cc backend/perf/values.cc backend/perf/keys.cc backend/perf/profiles.cc"
)

targets=() mode=time value=60 seeds_only=0 coverage=0
while [ $# -gt 0 ]; do
  case $1 in
    --time) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--time wants seconds"; mode=time value=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || die "--runs wants a count"; mode=runs value=$2; shift 2 ;;
    --ci) mode=ci; shift ;;
    --seeds-only) seeds_only=1; shift ;;
    --coverage) coverage=1; shift ;;
    -h|--help) usage ;;
    -*) die "unknown option '$1' (see tests/fuzz/fuzz.sh --help)" ;;
    *)
      [[ " ${ALL[*]} " == *" $1 "* ]] || die "unknown fuzz target '$1' (targets: ${ALL[*]})"
      targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")

command -v clang++ >/dev/null || die "clang is needed for the fuzz targets: run ./hvstor setup"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A build directory of its own: clang, the sanitizers in every layer, libFuzzer's coverage
# instrumentation (meson.build does that with -Dfuzz=true). $1: directory, then extra options.
configure() {
  local dir=$1; shift
  [ -f "$dir/build.ninja" ] && return 0
  # Meson runs a sanity-check program: with coverage flags it would leave a profile behind.
  LLVM_PROFILE_FILE=$tmp/setup-%p.profraw CC=clang CXX=clang++ meson setup "$dir" "$HVSTOR_ROOT" -Dfuzz=true -Dtests=false \
    -Db_sanitize=address,undefined -Db_lundef=false "$@" >"$dir.setup.log" 2>&1 \
    || { tail -n 30 "$dir.setup.log" >&2; rm -rf "$dir"; die "meson setup of $dir failed (log: $dir.setup.log)"; }
}

BUILD=$HVSTOR_CACHE/build-fuzz
configure "$BUILD"
run_logged "building fuzz targets (${targets[*]})" "$HVSTOR_CACHE/fuzz-build.log" \
  ninja -C "$BUILD" "${targets[@]/#/tests/fuzz/}"

# Field from libFuzzer's output: stat::NAME, or the last "cov: N ft: M" line.
stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }
last_cov() { grep -E '^#[0-9]+.*cov: ' "$1" | tail -n 1; }

failed=()
for t in "${targets[@]}"; do
  seeds=$HVSTOR_ROOT/tests/fuzz/corpus/$t
  art=$HVSTOR_CACHE/fuzz-artifacts/$t
  mkdir -p "$art" "$HVSTOR_CACHE/fuzz-logs"
  if [ "$seeds_only" = 1 ]; then work=$tmp/corpus-$t; else work=$HVSTOR_CACHE/fuzz-corpus/$t; fi
  mkdir -p "$work"
  case $mode in
    ci) runs=${CI_RUNS[$t]} secs= ;;
    runs) runs=$value secs= ;;
    time) runs= secs=$value ;;
  esac
  [ "$runs" != 0 ] || { log "$t: --runs 0, nothing fuzzed"; continue; }
  logf=$HVSTOR_CACHE/fuzz-logs/$t.log
  : >"$logf"
  ls -A "$art" >"$tmp/before"
  log "fuzzing $t (${runs:+$runs inputs}${secs:+$secs s}; log: $logf)"
  start=$(date +%s.%N) inputs=0 rss=0 proc=0 rc=0 new=
  while :; do
    limit=(-runs="$SEGMENT")
    if [ -n "$runs" ]; then
      [ "$inputs" -lt "$runs" ] || break
      [ $((runs - inputs)) -ge "$SEGMENT" ] || limit=(-runs=$((runs - inputs)))
    else
      left=$(awk -v a="$start" -v b="$(date +%s.%N)" -v s="$secs" 'BEGIN { printf "%d", s - (b - a) }')
      [ "$left" -gt 0 ] || break
      limit+=(-max_total_time="$left")
    fi
    [ "$proc" = 0 ] || log "$t: $inputs inputs so far, peak rss $rss MB; process $((proc + 1)) starts"
    proc=$((proc + 1))
    # New inputs go to the first directory; the seeds are only read. -timeout is the targets'
    # only clock (a request never answered hangs the input); -rss_limit_mb catches growth.
    ASAN_OPTIONS=detect_leaks=1 "$BUILD/tests/fuzz/$t" "${limit[@]}" -timeout=60 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$art/" "$work" "$seeds" >"$tmp/process.log" 2>&1
    rc=$?
    cat "$tmp/process.log" >>"$logf"
    n=$(stat number_of_executed_units "$tmp/process.log")
    [ -n "$n" ] || n=$(last_cov "$tmp/process.log" | sed -E 's/^#([0-9]+).*/\1/')
    inputs=$((inputs + ${n:-0}))
    r=$(stat peak_rss_mb "$tmp/process.log")
    [ "${r:-0}" -le "$rss" ] || rss=$r
    new=$(ls -A "$art" | grep -vxF -f "$tmp/before")
    [ "$rc" = 0 ] && [ -z "$new" ] || break
    [ "${n:-0}" -gt 0 ] || { log "$t: process $proc ran no input (log: $logf)"; rc=1; break; }
  done
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  cov=$(last_cov "$logf")
  printf '%-16s %9s inputs %7s exec/s  cov %5s  ft %6s  corpus %5s  rss %s MB  %5s s\n' "$t" \
    "$inputs" "$(awk -v n="$inputs" -v w="$wall" 'BEGIN { printf "%d", (w > 0 ? n / w : 0) }')" \
    "$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$cov")" "$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$cov")" \
    "$(sed -n 's/.*corp: \([0-9]*\).*/\1/p' <<<"$cov")" "$rss" "$wall"
  if [ "$rc" != 0 ] || [ -n "$new" ]; then
    failed+=("$t")
    grep -E 'ERROR: |SUMMARY: |fuzz check failed|Test unit written' "$logf" | head -n 8 >&2
    for f in $new; do
      log "FINDING $t: $art/$f  (reproduce: $BUILD/tests/fuzz/$t $art/$f)"
    done
    [ -n "$new" ] || log "FINDING $t: exit status $rc, no input saved (log: $logf)"
  fi
done

if [ "$coverage" = 1 ]; then
  command -v llvm-profdata >/dev/null && command -v llvm-cov >/dev/null || die "--coverage needs llvm-profdata and llvm-cov: run ./hvstor setup"
  COV=$HVSTOR_CACHE/build-fuzz-cov
  configure "$COV" '-Dcpp_args=-fprofile-instr-generate -fcoverage-mapping' '-Dcpp_link_args=-fprofile-instr-generate'
  run_logged "building fuzz targets with coverage mapping" "$HVSTOR_CACHE/fuzz-cov-build.log" \
    ninja -C "$COV" "${targets[@]/#/tests/fuzz/}"
  for t in "${targets[@]}"; do
    if [ "$seeds_only" = 1 ]; then work=$tmp/corpus-$t; else work=$HVSTOR_CACHE/fuzz-corpus/$t; fi
    prof=$tmp/prof-$t
    mkdir -p "$prof"
    # -runs=0: each input of the corpus once, nothing new.
    LLVM_PROFILE_FILE="$prof/%p.profraw" "$COV/tests/fuzz/$t" -runs=0 "$work" "$HVSTOR_ROOT/tests/fuzz/corpus/$t" \
      >"$HVSTOR_CACHE/fuzz-logs/$t.cov.log" 2>&1
    llvm-profdata merge -sparse "$prof"/*.profraw -o "$prof/merged.profdata" || { log "no profile for $t"; continue; }
    echo "line coverage of $t's sources over its corpus:"
    llvm-cov report "$COV/tests/fuzz/$t" -instr-profile="$prof/merged.profdata" 2>/dev/null |
      awk -v srcs="${SOURCES[$t]}" '
        BEGIN { n = split(srcs, want, " ") }
        NF >= 10 { for (i = 1; i <= n; i++) if (index($1, want[i]) == 1) {
          printf "  %-32s lines %5d of %5d  (%s)\n", $1, $8 - $9, $8, $10; lines += $8; missed += $9 } }
        END { if (lines) printf "  %-32s lines %5d of %5d  (%.1f%%)\n", "all of the above", lines - missed, lines, 100 * (lines - missed) / lines }'
  done
fi

if [ ${#failed[@]} -gt 0 ]; then
  log "findings in: ${failed[*]} (inputs in $HVSTOR_CACHE/fuzz-artifacts/)"
  exit 1
fi
