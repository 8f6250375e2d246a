"""The experiment harness end to end (./hvstor run): a tiny spec, two variants (stock and
storvsc_max_hw_queues=1) x 1 repetition x 5 s of fio on debian-6.1, results back over the
results port, then the comparison table and PNG plots; the same results judged again
(./hvstor report) by a spec whose expectation cannot hold, then by their own. Then a spec
whose variant asks for a block tunable the guest does not have: the run must stop with a
clear error and the guest's output, not hang."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import List

from conftest import HANG_GUARD, Checks, file_lines, hvstor, is_png

SPEC = f"""\
[experiment]
description = harness smoke test
kernel      = debian-6.1
vcpus       = 2
mem         = 512M
repetitions = 1
timeout     = {HANG_GUARD:g}
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
"""


def test_experiment(tmp_path: Path, checks: Checks) -> None:
    """The run, its report, and the same results judged again by a stricter spec."""
    spec, res = tmp_path / "smoke.exp", tmp_path / "res"
    spec.write_text(SPEC)
    rc, _ = hvstor("run", str(spec), "--out", str(res))
    checks.that(rc == 0, "the experiment finished")
    report = file_lines(str(res / "report.txt"))
    report_checks(report, checks)
    header = {v: file_lines(str(res / "runs" / v / "rep1" / "results" / "header")) for v in ("stock", "hwq1")}
    checks.has(header["hwq1"], r"^disk\.sda\.hw_queues=1$", "the guest ran storvsc_max_hw_queues=1 in hwq1")
    checks.has(header["stock"], r"^disk\.sda\.hw_queues=2$", "and 2 hardware queues in stock")
    checks.has(header["stock"], r"^disk\.sda\.nr_requests=32$", "tunables applied in the guest")
    checks.that(is_png(str(res / "plots" / "logger-write-iops.png")), "IOPS plot (PNG)")
    checks.that(is_png(str(res / "plots" / "reader-read-clat.png")), "latency plot (PNG)")
    checks.has(report, r"^  PASS hwq1: expect logger\.write\.iops > 0 \(smoke\.exp:",
               "expectations met and reported")
    table = "\n".join(report)
    start, end = table.find("reader (read)"), table.find("Plots:")
    print("\n".join("  " + ln for ln in table[start:end].splitlines()) if start >= 0 else "  (no table)")
    judged_again(spec, res, checks)


def report_checks(report: List[str], checks: Checks) -> None:
    """A table per job, a row with numbers per variant, published figures beside them."""
    checks.has(report, r"^reader \(read\)$", "table for the reader job")
    checks.has(report, r"^logger \(write\)$", "table for the logger job")
    checks.count(report, r"^  (stock|hwq1) +1 +[0-9]", 4, "a row per variant")
    checks.has(report, r"^  stock +1 +[0-9]+\.[0-9] ", "the stock row has numbers")
    checks.has(report, r"^  hwq1 +1 +[0-9]+\.[0-9] ", "the hwq1 row has numbers")
    checks.has(report, r"published x1\.76, measured x[0-9]", "published figures beside the measured ones")


def junit_holds_one_failure(path: Path) -> bool:
    """The JUnit file parses, and its one failure is hwq1's impossible ratio."""
    try:
        suite = ET.parse(path).getroot().find("testsuite")
    except (OSError, ET.ParseError) as e:
        print(f"  {path}: {e}")
        return False
    if suite is None:
        return False
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    return failed == ["hwq1: logger.write.iops ratio >= 1000"] and suite.get("failures") == "1"


def summary_passed(path: Path) -> object:
    try:
        return json.loads(path.read_text())["passed"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable: {e!r}"


def judged_again(spec: Path, res: Path, checks: Checks) -> None:
    """The same results judged by a spec whose expectation cannot hold: exit 1, one line
    naming it with the figure and the bound; the JUnit file says the same; summary.json
    agrees. Judged by their own spec again: exit 0."""
    strict = spec.parent / "strict.exp"
    strict.write_text(re.sub(r"^expect = logger\.write\.iops > 0$", "expect = logger.write.iops ratio >= 1000",
                             spec.read_text(), flags=re.M))
    rc, out = hvstor("report", str(res), "--spec", str(strict))
    checks.that(rc == 1, "a failed expectation exits 1")
    checks.has(out, r"^FAIL hwq1: expect logger\.write\.iops ratio >= 1000 \(strict\.exp:[0-9]*\): "
               r"measured x[0-9.]*, bound x>= 1000", "naming it, with the measured figure and the bound")
    checks.that(junit_holds_one_failure(res / "junit.xml"), "the JUnit file parses and holds that failure")
    checks.that(summary_passed(res / "summary.json") is False, "summary.json says it did not pass")
    rc, _ = hvstor("report", str(res))
    checks.that(rc == 0, "judged by its own spec again: exit 0")


def test_broken_variant(tmp_path: Path, checks: Checks) -> None:
    """A variant that cannot run: the harness stops with the reason and the guest's output."""
    broken = tmp_path / "broken.exp"
    text = re.sub(r"^tunables .*", "tunables = nr_requests=32 no_such_tunable=1", SPEC, flags=re.M)
    broken.write_text(re.sub(r"^repetitions .*", "repetitions = 1", text, flags=re.M))
    rc, out = hvstor("run", str(broken), "--variants", "stock", "--out", str(tmp_path / "broken"))
    checks.that(rc != 0, "a broken variant fails the experiment")
    checks.has(out, r"error: stock, repetition 1: .*block tunables refused", "with the reason")
    checks.has(out, r"no tunable 'no_such_tunable'", "and the guest's own message")
