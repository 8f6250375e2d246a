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
record() { # name rc log (rc 77: the test could not run here; not counted as passed)
  if [ "$2" = 0 ]; then passed=$((passed + 1)); log "PASS $1"
  elif [ "$2" = 77 ]; then skipped=$((skipped + 1)); log "SKIP $1"
  else failed=$((failed + 1)); failures+=("$1"); failure_logs+=("$3"); log "FAIL $1"; fi
}
# logged NAME CMD...: runs CMD with its output in $LOGS/NAME.log and on stdout; its status.
logged() {
  local log=$LOGS/$1.log
  shift
  "$@" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
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

# gtest_run LINES NAME GUARD CMD...: a gtest binary under its hang guard, the unit tests'
# only clock. Its whole output goes to $HVSTOR_CACHE/test-logs/NAME.log; shown are its last
# LINES lines without the per-test RUN/OK lines and, when the guard ended it, the test
# that hung (the last one started).
gtest_run() {
  local lines=$1 log=$HVSTOR_CACHE/test-logs/$2.log guard=$3 rc=0
  shift 3
  mkdir -p "$HVSTOR_CACHE/test-logs"
  timeout -k 10 "$guard" "$@" >"$log" 2>&1 || rc=$?
  grep -v -E '^\[ +(RUN|OK) +\]|^\[-+\]' "$log" | tail -n "$lines"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "hung: ended after ${guard}s in $(grep -E '^\[ RUN +\]' "$log" | tail -n 1 | sed -E 's/^\[ RUN +\] //') (log: $log)"
  fi
  return "$rc"
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
  gtest_run 25 "asan-$(basename "$bin")" 900 env "${ASAN_ENV[@]}" "$UNIT/tests/$bin"
  record "$(basename "$bin") (gtest, ASan/UBSan)" $? "$LOGS/asan-$(basename "$bin").log"
done
# The storage protocol suite again with every channel turning in an event loop (iothread=).
gtest_run 25 asan-unit-tests-event-loop 900 env HVSTOR_TEST_EVENT_LOOP=1 "${ASAN_ENV[@]}" \
  "$UNIT/tests/unit-tests" --gtest_filter='StorvspTest.*'
record "unit-tests, channels in an event loop (gtest, ASan/UBSan)" $? "$LOGS/asan-unit-tests-event-loop.log"

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
  gtest_run 40 "tsan-$(basename "$bin")" 1800 env TSAN_OPTIONS=halt_on_error=1:exitcode=66 "$TSAN/tests/$bin"
  record "$(basename "$bin") (gtest, TSan)" $? "$LOGS/tsan-$(basename "$bin").log"
done
gtest_run 40 tsan-unit-tests-event-loop 1800 env HVSTOR_TEST_EVENT_LOOP=1 TSAN_OPTIONS=halt_on_error=1:exitcode=66 \
  "$TSAN/tests/unit-tests" --gtest_filter='StorvspTest.*'
record "unit-tests, channels in an event loop (gtest, TSan)" $? "$LOGS/tsan-unit-tests-event-loop.log"

# House rule: no function over 80 lines in the device without a "Long:" reason above it.
python3 "$HVSTOR_ROOT/tests/lint/function_length.py" --max 80 "$HVSTOR_ROOT/hw" "$HVSTOR_ROOT/backend" \
  >"$LOGS/lint-function-length.log" 2>&1
rc=$?
tail -n 20 "$LOGS/lint-function-length.log"
record "lint: function length" "$rc" "$LOGS/lint-function-length.log"

# The experiment runner (scripts/hvexp): spec parser, statistics, expectations, report,
# JSON summary and JUnit file, on results folders built by the tests.
PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider "$HVSTOR_ROOT/tests/exp" \
  >"$LOGS/pytest-exp.log" 2>&1
rc=$?
tail -n 15 "$LOGS/pytest-exp.log"
record "pytest: experiment runner" "$rc" "$LOGS/pytest-exp.log"

# Each libFuzzer target (tests/fuzz, docs/fuzzing.md) for a fixed number of inputs, starting
# from its checked-in seeds: about 2-3 minutes in all on two cores, once built. A finding fails
# its step; the input is kept in .cache/fuzz-artifacts/TARGET/ with the command to replay it.
for t in vmbus_messages ring storvsp_packets scsi_cdb perf_config; do
  bash "$HVSTOR_ROOT/tests/fuzz/fuzz.sh" --ci --seeds-only "$t" >"$LOGS/fuzz-$t.log" 2>&1
  rc=$?
  tail -n 12 "$LOGS/fuzz-$t.log"
  record "fuzz: $t (libFuzzer, ASan/UBSan)" "$rc" "$LOGS/fuzz-$t.log"
done

QEMU=$(bash "$HVSTOR_ROOT/scripts/build-qemu.sh" | tail -n 1) || die "QEMU build failed"
export QEMU
for t in "$HVSTOR_ROOT"/tests/boot/*.sh; do
  name="boot: $(basename "$t" .sh)"
  log "running $name"
  logged "boot-$(basename "$t" .sh)" bash "$t"
  record "$name" $? "$LOGS/boot-$(basename "$t" .sh).log"
done

failure_digest
echo
if [ "$failed" -gt 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
