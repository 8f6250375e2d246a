import math

import pytest

from hvexp import expect
from hvexp.results import Figures


def figures(stock: list[float], shared: list[float], metric: str = "iops") -> Figures:
    f = Figures()
    for v, vals in (("stock", stock), ("shared", shared)):
        for x in vals:
            f.values.setdefault((v, "wal", "write", metric), []).append(x)
    return f


@pytest.mark.parametrize("text,ratio,op,value,tol,pct", [
    ("wal.write.iops >= 150", False, ">=", 150, 0, False),
    ("wal.write.iops ratio >= 1.5", True, ">=", 1.5, 0, False),
    ("wal.write.lat < 2.5e1", False, "<", 25, 0, False),
    ("wal.write.bw = 760 +-10%", False, "=", 760, 10, True),
    ("wal.write.bw = 760 ± 20", False, "=", 760, 20, False),
    ("wal.write.iops ratio = 3.2 +- 0.5", True, "=", 3.2, 0.5, False),
    ("my.job.name.write.p99 <= 40", False, "<=", 40, 0, False),
])
def test_parse(text: str, ratio: bool, op: str, value: float, tol: float, pct: bool) -> None:
    e = expect.parse(text)
    assert (e.ratio, e.op, e.value, e.tol, e.tol_pct) == (ratio, op, value, tol, pct)


def test_parse_job_with_dots() -> None:
    e = expect.parse("my.job.name.write.p99 <= 40")
    assert (e.job, e.dir, e.metric) == ("my.job.name", "write", "p99")


@pytest.mark.parametrize("text,message", [
    ("wal.write.iops", "cannot read expectation"),
    ("wal.write.iops => 3", "cannot read expectation"),
    ("wal.sideways.iops >= 3", "direction 'sideways'"),
    ("wal.write.speed >= 3", "metric 'speed'"),
    ("write.iops >= 3", "is not JOB.DIR.METRIC"),
    ("wal.write.iops = 3", "cannot read expectation"),
])
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(expect.ExpectError, match=message):
        expect.parse(text)


def test_absolute_uses_the_median_and_can_fail() -> None:
    f = figures([100, 1000, 110], [0])
    ok = expect.evaluate(expect.parse("wal.write.iops >= 105"), "stock", "stock", f)
    assert ok.passed and ok.figure == 110
    bad = expect.evaluate(expect.parse("wal.write.iops >= 120"), "stock", "stock", f)
    assert not bad.passed
    line = bad.line()
    assert line.startswith("FAIL stock: expect wal.write.iops >= 120")
    assert "measured 110.0 IOPS" in line and "bound >= 120 IOPS" in line


def test_ratio_against_the_baseline() -> None:
    f = figures([100, 100, 100], [150, 160, 140])
    e = expect.parse("wal.write.iops ratio >= 1.5")
    o = expect.evaluate(e, "shared", "stock", f)
    assert o.passed and o.figure is not None and math.isclose(o.figure, 1.5)
    o = expect.evaluate(expect.parse("wal.write.iops ratio > 1.5"), "shared", "stock", f)
    assert not o.passed
    assert "x1.50" in o.line() and "bound x> 1.5" in o.line()


def test_tolerance_both_ways() -> None:
    f = figures([100], [0])
    assert expect.evaluate(expect.parse("wal.write.iops = 95 +-10%"), "stock", "stock", f).passed
    assert not expect.evaluate(expect.parse("wal.write.iops = 80 +-10%"), "stock", "stock", f).passed
    assert not expect.evaluate(expect.parse("wal.write.iops = 120 +-10"), "stock", "stock", f).passed
    assert expect.evaluate(expect.parse("wal.write.iops = 109 +-10"), "stock", "stock", f).passed


def test_missing_figures_fail_with_a_reason() -> None:
    f = figures([100], [])
    o = expect.evaluate(expect.parse("wal.write.iops ratio >= 1"), "shared", "stock", f)
    assert not o.passed and o.figure is None and "no wal (write) iops figures for shared" in o.detail
    o = expect.evaluate(expect.parse("hogs.read.iops >= 1"), "stock", "stock", f)
    assert not o.passed
    o = expect.evaluate(expect.parse("wal.write.iops ratio >= 1"), "stock", "shared", f)
    assert not o.passed and "baseline" in o.detail
