#!/usr/bin/env bash
# Everything `./hvstor test` runs: unit tests (ASan + UBSan, then TSan), lints, the fuzz
# targets for a fixed number of inputs, then boot tests against stock Debian kernels under
# our QEMU. Ends with "N passed, M failed".
set -uo pipefail
. "$(dirname "$0")/../scripts/lib.sh"

bash "$HVSTOR_ROOT/scripts/setup-host.sh" || die "host setup failed"

# Every test's whole output goes to a file in $LOGS; what the run prints of it is shortened.
LOGS=$HVSTOR_CACHE/test-logs
mkdir -p "$LOGS"
passed=0 failed=0 skipped=0 failures=() failure_logs=()
# record NAME RC ID: counts the test NAME, whose whole output is in $LOGS/ID.log (RC 77: the
# test could not run here; not counted as passed).
record() {
  if [ "$2" = 0 ]; then passed=$((passed + 1)); log "PASS $1"
  elif [ "$2" = 77 ]; then skipped=$((skipped + 1)); log "SKIP $1"
  else failed=$((failed + 1)); failures+=("$1"); failure_logs+=("$LOGS/$3.log"); log "FAIL $1"; fi
}
# step ID LINES NAME CMD...: runs CMD with its whole output in $LOGS/ID.log, shows the log's
# last LINES lines and records the test as NAME.
step() {
  local id=$1 lines=$2 name=$3 rc=0
  shift 3
  "$@" >"$LOGS/$id.log" 2>&1 || rc=$?
  tail -n "$lines" "$LOGS/$id.log"
  record "$name" "$rc" "$id"
}
# shown_step ID NAME CMD...: as step, with the whole output shown as it comes (boot tests).
shown_step() {
  local id=$1 name=$2 rc
  shift 2
  "$@" 2>&1 | tee "$LOGS/$id.log"
  rc=${PIPESTATUS[0]}
  record "$name" "$rc" "$id"
}
# What failed, from each failed test's log, at the end of the run where a reader of its last
# lines finds it: the checks that failed (boot tests), gtest's failures and sanitizer
# reports, then the log's last lines.
failure_digest() {
  local i log
  for i in "${!failures[@]}"; do
    log=${failure_logs[$i]}
    echo
    echo "==== FAILED: ${failures[$i]} (whole output: $log)"
    [ -f "$log" ] || continue
    grep -E 'NOT OK|^\[  FAILED  \]|Failure$|^[^ ]*: error: |ERROR: [A-Za-z]+Sanitizer|runtime error:|^==[0-9]+==|^hung:' \
      "$log" | head -n 30
    echo "---- its last 40 lines:"
    tail -n 40 "$log"
  done
}

# gtest_step ID LINES GUARD NAME CMD...: as step, for a gtest binary under its hang guard (the
# unit tests' only clock). Shown are its last LINES lines without the per-test RUN/OK lines
# and, when the guard ended it, the test that hung (the last one started).
gtest_step() {
  local id=$1 lines=$2 guard=$3 name=$4 log=$LOGS/$1.log rc=0
  shift 4
  timeout -k 10 "$guard" "$@" >"$log" 2>&1 || rc=$?
  grep -v -E '^\[ +(RUN|OK) +\]|^\[-+\]' "$log" | tail -n "$lines"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "hung: ended after ${guard}s in $(grep -E '^\[ RUN +\]' "$log" | tail -n 1 | sed -E 's/^\[ RUN +\] //') (log: $log)"
  fi
  record "$name" "$rc" "$id"
}

# Unit tests, sanitized. UBSan findings abort so that they fail the run.
UNIT=$HVSTOR_CACHE/build-asan
if [ ! -f "$UNIT/build.ninja" ]; then
  meson setup "$UNIT" "$HVSTOR_ROOT" -Db_sanitize=address,undefined -Db_lundef=false \
    >"$HVSTOR_CACHE/asan-setup.log" 2>&1 || { tail -n 30 "$HVSTOR_CACHE/asan-setup.log"; die "meson setup failed"; }
fi
run_logged "building unit tests (ASan/UBSan)" "$HVSTOR_CACHE/asan-build.log" ninja -C "$UNIT"
ASAN_ENV=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
for bin in unit-tests storvsp/storvsp-tests capi/capi-tests scsi/scsi-tests perf/perf-tests; do
  gtest_step "asan-${bin#*/}" 25 900 "${bin#*/} (gtest, ASan/UBSan)" env "${ASAN_ENV[@]}" "$UNIT/tests/$bin"
done
# The storage protocol suite again with every channel turning in an event loop (iothread=).
gtest_step asan-unit-tests-event-loop 25 900 "unit-tests, channels in an event loop (gtest, ASan/UBSan)" \
  env HVSTOR_TEST_EVENT_LOOP=1 "${ASAN_ENV[@]}" "$UNIT/tests/unit-tests" --gtest_filter='StorvspTest.*'

# The threaded tests again under ThreadSanitizer: channel workers, completions from backend
# threads, vCPUs racing on the control path. Any report fails the run. GCC warns that TSan
# does not model atomic_thread_fence (the ring protocol uses fences against the guest);
# that warning is not an error here.
TSAN=$HVSTOR_CACHE/build-tsan
if [ ! -f "$TSAN/build.ninja" ]; then
  meson setup "$TSAN" "$HVSTOR_ROOT" -Db_sanitize=thread -Db_lundef=false -Dcpp_args=-Wno-error=tsan \
    >"$HVSTOR_CACHE/tsan-setup.log" 2>&1 || { tail -n 30 "$HVSTOR_CACHE/tsan-setup.log"; die "meson setup (TSan) failed"; }
fi
run_logged "building threaded tests (TSan)" "$HVSTOR_CACHE/tsan-build.log" \
  ninja -C "$TSAN" tests/unit-tests tests/storvsp/storvsp-tests tests/capi/capi-tests
for bin in unit-tests storvsp/storvsp-tests capi/capi-tests; do
  gtest_step "tsan-${bin#*/}" 40 1800 "${bin#*/} (gtest, TSan)" \
    env TSAN_OPTIONS=halt_on_error=1:exitcode=66 "$TSAN/tests/$bin"
done
gtest_step tsan-unit-tests-event-loop 40 1800 "unit-tests, channels in an event loop (gtest, TSan)" \
  env HVSTOR_TEST_EVENT_LOOP=1 TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
  "$TSAN/tests/unit-tests" --gtest_filter='StorvspTest.*'

# House rule: no function over 80 lines in the device without a "Long:" reason above it.
step lint-function-length 20 "lint: function length" \
  python3 "$HVSTOR_ROOT/tests/lint/function_length.py" --max 80 "$HVSTOR_ROOT/hw" "$HVSTOR_ROOT/backend"

# The experiment runner (scripts/hvexp): spec parser, statistics, expectations, report,
# JSON summary and JUnit file, on results folders built by the tests.
step pytest-exp 15 "pytest: experiment runner" \
  env PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider "$HVSTOR_ROOT/tests/exp"

# Each libFuzzer target (tests/fuzz, docs/fuzzing.md) for a fixed number of inputs, starting
# from its checked-in seeds: about 2-3 minutes in all on two cores, once built. A finding fails
# its step; the input is kept in .cache/fuzz-artifacts/TARGET/ with the command to replay it.
for t in vmbus_messages ring storvsp_packets scsi_cdb perf_config; do
  step "fuzz-$t" 12 "fuzz: $t (libFuzzer, ASan/UBSan)" /usr/bin/python3 "$HVSTOR_ROOT/tests/fuzz/fuzz.py" --ci --seeds-only "$t"
done
# fuzz.py's own process handling (--jobs, a finding ending the other jobs, Ctrl-C), with a
# stand-in target.
step pytest-fuzz 15 "pytest: fuzz.py jobs and interrupts" \
  env PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  --basetemp "$HVSTOR_CACHE/pytest-fuzz" "$HVSTOR_ROOT/tests/fuzz/test_fuzz.py"

QEMU=$(bash "$HVSTOR_ROOT/scripts/build-qemu.sh" | tail -n 1) || die "QEMU build failed"
export QEMU
for t in "$HVSTOR_ROOT"/tests/boot/*.sh; do
  t_name=$(basename "$t" .sh)
  log "running boot: $t_name"
  shown_step "boot-$t_name" "boot: $t_name" bash "$t"
done

failure_digest
echo
if [ "$failed" -gt 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
