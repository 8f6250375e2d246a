#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, docs/fuzzing.md) and runs them.
#
#   tests/fuzz/fuzz.sh [TARGET...] [--time S | --runs N | --ci] [--jobs N] [--seeds-only] [--coverage]
#
#   TARGET        vmbus_messages, ring, storvsp_packets, scsi_cdb, perf_config (default: all)
#   --time S      run each target for S seconds (default 60)
#   --runs N      run each target for N inputs instead (0: none, for --coverage of the corpus)
#   --ci          the fixed number of inputs per target that ./hvstor test runs
#   --jobs N      N processes at once per target on one corpus (default 1), each taking its
#                 share of --runs (or all of --time); a job that finds something stops the rest
#   --seeds-only  start from the checked-in seeds (tests/fuzz/corpus) and keep no new inputs;
#                 otherwise the corpus grows in $HVSTOR_CACHE/fuzz-corpus/TARGET
#   --coverage    then line coverage of each target's sources over its corpus (a second build,
#                 with -fprofile-instr-generate -fcoverage-mapping)
#
# A target (each of its jobs) runs in processes of at most a million inputs each, one after the
# other on the same corpus: ASan keeps about 1 KB per input of storvsp_packets, which in one
# process would reach the RSS limit after about 2 million. Each further process's start is
# shown with the inputs so far.
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

targets=() mode=time value=60 seeds_only=0 coverage=0 jobs=1
while [ $# -gt 0 ]; do
  case $1 in
    --time) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--time wants seconds"; mode=time value=$2; shift 2 ;;
    --runs) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || die "--runs wants a count"; mode=runs value=$2; shift 2 ;;
    --ci) mode=ci; shift ;;
    --jobs) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]?$ ]] || die "--jobs wants a count from 1 to 99"; jobs=$2; shift 2 ;;
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

# One job: processes of at most $SEGMENT inputs one after another until its share of the
# inputs ($1, or the time in $secs) is run, the run is told to stop, or a process finds
# something. $2: job number, $3: its log. Leaves "inputs peak-rss exit-status" in
# $tmp/$t.$2.result. Returns 1 on a finding, 2 when its process was interrupted (libFuzzer's
# exit status 72 on SIGINT or SIGTERM, with nothing saved).
fuzz_job() {
  local runs=$1 k=$2 logf=$3 plog=$tmp/$t.$2.process.log inputs=0 rss=0 proc=0 rc=0 limit left n r pid
  local who=$t
  [ "$jobs" = 1 ] || who="$t (job $k of $jobs)"
  # The fuzzer takes these (and exits with status 72); the job waits for it and reports that.
  local sig
  trap 'sig=1' INT TERM
  : >"$logf"
  while [ ! -e "$tmp/$t.stop" ]; do
    limit=(-runs="$SEGMENT")
    if [ -n "$runs" ]; then
      [ "$inputs" -lt "$runs" ] || break
      [ $((runs - inputs)) -ge "$SEGMENT" ] || limit=(-runs=$((runs - inputs)))
    else
      left=$(awk -v a="$start" -v b="$(date +%s.%N)" -v s="$secs" 'BEGIN { printf "%d", s - (b - a) }')
      [ "$left" -gt 0 ] || break
      limit+=(-max_total_time="$left")
    fi
    [ "$proc" = 0 ] || log "$who: $inputs inputs so far, peak rss $rss MB; process $((proc + 1)) starts"
    proc=$((proc + 1))
    # New inputs go to the first directory; the seeds are only read. -timeout is the targets'
    # only clock (a request never answered hangs the input); -rss_limit_mb catches growth.
    ASAN_OPTIONS=detect_leaks=1 "$BUILD/tests/fuzz/$t" "${limit[@]}" -timeout=60 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$art/" "$work" "$seeds" >"$plog" 2>&1 &
    pid=$!
    echo "$pid" >"$tmp/$t.$k.pid"
    [ ! -e "$tmp/$t.stop" ] || kill "$pid" 2>/dev/null # told to stop while this one started
    # A signal ends wait early (the trap): wait again for the fuzzer's own status. A wait
    # after the one that reported it gives 127, which is then not its status.
    local st
    rc=
    while :; do
      sig=0
      wait "$pid"
      st=$?
      [ "$st" = 127 ] && [ -n "$rc" ] || rc=$st
      [ "$sig" = 1 ] || break
    done
    # Ended by SIGINT or SIGTERM before libFuzzer took them (or by stop_jobs): interrupted.
    # Other signals (a SIGKILL from the kernel's OOM killer, say) stay findings.
    case $rc in 130|143) rc=72 ;; esac
    rm -f "$tmp/$t.$k.pid"
    cat "$plog" >>"$logf"
    n=$(stat number_of_executed_units "$plog")
    [ -n "$n" ] || n=$(last_cov "$plog" | sed -E 's/^#([0-9]+).*/\1/')
    inputs=$((inputs + ${n:-0}))
    r=$(stat peak_rss_mb "$plog")
    [ "${r:-0}" -le "$rss" ] || rss=$r
    [ "$rc" = 0 ] && [ -z "$(new_artifacts)" ] || break
    [ "${n:-0}" -gt 0 ] || { log "$who: process $proc ran no input (log: $logf)"; rc=1; break; }
  done
  echo "$inputs $rss $rc" >"$tmp/$t.$k.result"
  [ -z "$(new_artifacts)" ] || return 1
  case $rc in 0) return 0 ;; 72) return 2 ;; *) return 1 ;; esac
}

# The artifacts written since this target started.
new_artifacts() { ls -A "$art" | grep -vxF -f "$tmp/$t.before"; }

# The job's share of $1 inputs: an equal part, the remainder spread over the first jobs.
share() { echo $(($1 / jobs + ($2 <= $1 % jobs ? 1 : 0))); }

# Ends the current process of every job of $t and starts no further one.
stop_jobs() {
  touch "$tmp/$t.stop"
  for f in "$tmp/$t".*.pid; do kill "$(cat "$f" 2>/dev/null)" 2>/dev/null; done
}

# Ctrl-C or a SIGTERM ends the fuzzers (libFuzzer then exits with status 72): the script prints
# what was run and exits 130.
interrupted=0
trap 'interrupted=1; [ -z "${t:-}" ] || stop_jobs' INT TERM
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
  # One log per job: TARGET.log, or TARGET.1.log ... TARGET.N.log with --jobs N.
  logs=()
  if [ "$jobs" = 1 ]; then logs=("$HVSTOR_CACHE/fuzz-logs/$t.log")
  else for k in $(seq "$jobs"); do logs+=("$HVSTOR_CACHE/fuzz-logs/$t.$k.log"); done; fi
  rm -f "$HVSTOR_CACHE/fuzz-logs/$t".[0-9]*.log "$tmp/$t.stop" # an earlier run's jobs
  ls -A "$art" >"$tmp/$t.before"
  log "fuzzing $t (${runs:+$runs inputs}${secs:+$secs s}$([ "$jobs" = 1 ] || echo " in $jobs jobs on one corpus");" \
    "log: $([ "$jobs" = 1 ] && echo "${logs[0]}" || echo "$HVSTOR_CACHE/fuzz-logs/$t.K.log"))"
  start=$(date +%s.%N)
  declare -A job_of=()
  for k in $(seq "$jobs"); do
    fuzz_job "$([ -z "$runs" ] || share "$runs" "$k")" "$k" "${logs[k - 1]}" &
    job_of[$!]=$k
  done
  # The first job that finds something, or is interrupted (Ctrl-C), stops the others: their
  # current process is ended (its inputs still count) and no further one starts. Whether the
  # target found something is read afterwards from the jobs' results and the artifacts.
  while [ ${#job_of[@]} -gt 0 ]; do
    done_pid=
    wait -n -p done_pid
    st=$?
    [ -n "${done_pid:-}" ] || continue # a signal came (the trap above): the jobs end by themselves
    k=${job_of[$done_pid]}
    unset "job_of[$done_pid]"
    case $st in
      0) continue ;;
      2) [ -e "$tmp/$t.stop" ] && continue; interrupted=1 ;;
      *) [ -e "$tmp/$t.stop" ] && continue
         [ "$jobs" = 1 ] || log "$t: job $k found something; the other jobs stop" ;;
    esac
    stop_jobs
  done
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  inputs=0 rss=0 rc=0 cov=0 ft=0 corp=0 bad=0
  for k in $(seq "$jobs"); do
    read -r n r c <"$tmp/$t.$k.result" || n=0 r=0 c=1
    case $c in 0|72) ;; *) bad=1 ;; esac # 72: interrupted (by us or Ctrl-C), no finding
    inputs=$((inputs + n))
    [ "$r" -le "$rss" ] || rss=$r
    [ "$rc" != 0 ] && [ "$rc" != 72 ] || rc=$c # a finding's status before an interrupted one's
    # cov, ft and corpus: the highest any job reached.
    line=$(last_cov "${logs[k - 1]}")
    for v in cov ft corp; do
      x=$(sed -n "s/.*$v: \([0-9]*\).*/\1/p" <<<"$line")
      [ "${x:-0}" -le "${!v}" ] || printf -v "$v" %s "$x"
    done
  done
  printf '%-16s %9s inputs %7s exec/s  cov %5s  ft %6s  corpus %5s  rss %s MB  %5s s\n' "$t" \
    "$inputs" "$(awk -v n="$inputs" -v w="$wall" 'BEGIN { printf "%d", (w > 0 ? n / w : 0) }')" \
    "$cov" "$ft" "$corp" "$rss" "$wall"
  new=$(new_artifacts)
  if [ "$bad" = 1 ] || [ -n "$new" ]; then
    failed+=("$t")
    grep -hE 'ERROR: |SUMMARY: |fuzz check failed|Test unit written' "${logs[@]}" | head -n 8 >&2
    for f in $new; do
      log "FINDING $t: $art/$f  (reproduce: $BUILD/tests/fuzz/$t $art/$f)"
    done
    [ -n "$new" ] || log "FINDING $t: exit status $rc, no input saved (log: ${logs[*]})"
  fi
  if [ "$interrupted" = 1 ]; then
    [ ${#failed[@]} = 0 ] || log "findings in: ${failed[*]} (inputs in $HVSTOR_CACHE/fuzz-artifacts/)"
    log "interrupted during $t"
    exit 130
  fi
done
trap - INT TERM

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
