# The experiment harness end to end (./hvstor run): a tiny spec, two variants (stock and
# storvsc_max_hw_queues=1) x 1 repetition x 5 s of fio on debian-6.1, results back over the
# results port, then the comparison table and PNG plots. Then a spec whose variant asks for
# a block tunable the guest does not have: the run must stop with a clear error and the
# guest's output, not hang.
. "$(dirname "$0")/../boot-lib.sh"

cat > "$WORK/smoke.exp" <<EOF
[experiment]
description = harness smoke test
kernel      = debian-6.1
vcpus       = 2
mem         = 512M
repetitions = 1
timeout     = $HANG_GUARD
tunables    = nr_requests=32 scheduler=mq-deadline
fio = <<END
[global]
ioengine=libaio
direct=1
time_based=1
runtime=5

[reader]
rw=randread
bs=4k
iodepth=16
size=1G

[logger]
rw=write
bs=8k
iodepth=1
size=1G
END

[disk]
backend = null
size    = 4G

[variant stock]
published = logger.write.iops=153

[variant hwq1]
params = storvsc_max_hw_queues=1
published-ratio = logger.write.iops=1.76
expect = logger.write.iops > 0
expect = reader.read.lat > 0
EOF

start=$SECONDS
bash "$HVSTOR_ROOT/scripts/run-experiment.sh" "$WORK/smoke.exp" --out "$WORK/res" >"$OUT" 2>&1
rc=$?
log "experiment: ${rc}, $((SECONDS - start))s"
check "the experiment finished" [ "$rc" = 0 ]
row() { grep -qE "^  $1 +1 +[0-9]+\.[0-9] " "$WORK/res/report.txt" 2>/dev/null; }
check "table for the reader job" grep -q '^reader (read)$' "$WORK/res/report.txt"
check "table for the logger job" grep -q '^logger (write)$' "$WORK/res/report.txt"
check "a row per variant" [ "$(grep -cE '^  (stock|hwq1) +1 +[0-9]' "$WORK/res/report.txt" 2>/dev/null)" = 4 ]
check "the stock row has numbers" row stock
check "the hwq1 row has numbers" row hwq1
check "published figures beside the measured ones" grep -q 'published x1.76, measured x[0-9]' "$WORK/res/report.txt"
check "the guest ran storvsc_max_hw_queues=1 in hwq1" grep -qx 'disk.sda.hw_queues=1' "$WORK/res/runs/hwq1/rep1/results/header"
check "and 2 hardware queues in stock" grep -qx 'disk.sda.hw_queues=2' "$WORK/res/runs/stock/rep1/results/header"
check "tunables applied in the guest" grep -qx 'disk.sda.nr_requests=32' "$WORK/res/runs/stock/rep1/results/header"
is_png() { [ "$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
check "IOPS plot (PNG)" is_png "$WORK/res/plots/logger-write-iops.png"
check "latency plot (PNG)" is_png "$WORK/res/plots/reader-read-clat.png"
check "expectations met and reported" grep -q '^  PASS hwq1: expect logger.write.iops > 0 (smoke.exp:' "$WORK/res/report.txt"
sed -n '/^reader (read)/,/^Plots:/p' "$WORK/res/report.txt" 2>/dev/null | sed 's/^/  /'

# The same results judged by a spec whose expectation cannot hold: exit 1, one line naming
# it with the figure and the bound; the JUnit file says the same; summary.json agrees.
sed 's/^expect = logger.write.iops > 0$/expect = logger.write.iops ratio >= 1000/' "$WORK/smoke.exp" > "$WORK/strict.exp"
bash "$HVSTOR_ROOT/scripts/exp-report.sh" "$WORK/res" --spec "$WORK/strict.exp" >"$OUT" 2>&1
rc=$?
check "a failed expectation exits 1" [ "$rc" = 1 ]
check "naming it, with the measured figure and the bound" \
  has '^FAIL hwq1: expect logger.write.iops ratio >= 1000 \(strict.exp:[0-9]*\): measured x[0-9.]*, bound x>= 1000'
junit_ok() {
  /usr/bin/python3 -c '
import sys, xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot().find("testsuite")
failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
sys.exit(0 if failed == ["hwq1: logger.write.iops ratio >= 1000"] and suite.get("failures") == "1" else 1)' "$1"
}
check "the JUnit file parses and holds that failure" junit_ok "$WORK/res/junit.xml"
check "summary.json says it did not pass" /usr/bin/python3 -c '
import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["passed"] is False else 1)' "$WORK/res/summary.json"
bash "$HVSTOR_ROOT/scripts/exp-report.sh" "$WORK/res" >"$OUT" 2>&1
check "judged by its own spec again: exit 0" [ $? = 0 ]

# A variant that cannot run: the harness must stop with the reason and the guest's output.
sed -e 's/^tunables .*/tunables = nr_requests=32 no_such_tunable=1/' -e 's/^repetitions .*/repetitions = 1/' \
  "$WORK/smoke.exp" > "$WORK/broken.exp"
start=$SECONDS
bash "$HVSTOR_ROOT/scripts/run-experiment.sh" "$WORK/broken.exp" --variants stock --out "$WORK/broken" >"$OUT" 2>&1
rc=$?
log "broken experiment: ${rc}, $((SECONDS - start))s"
check "a broken variant fails the experiment" [ "$rc" != 0 ]
check "with the reason" has 'error: stock, repetition 1: .*block tunables refused'
check "and the guest's own message" has "no tunable 'no_such_tunable'"
finish
