"""Expectations: the pass/fail lines of a spec (docs/experiments.md, "Expectations").

    expect = JOB.DIR.METRIC OP VALUE              absolute: wal.write.lat <= 20
    expect = JOB.DIR.METRIC ratio OP VALUE        to the baseline: wal.write.iops ratio >= 1.5
    expect = JOB.DIR.METRIC = VALUE +-TOL[%]      within a tolerance: seq.read.bw = 760 +-10%

OP is one of >= <= > <; `±` may stand for `+-`. The figure compared is the median over
repetitions (of the variant, and of the baseline for a ratio), in report units (IOPS, MB/s,
ms), scaled back by the time scale. In a [variant] an expectation is about that variant; in
[experiment] about every variant (ratio expectations skip the baseline itself).
"""

import re
from dataclasses import dataclass

from .results import DIRECTIONS, METRICS, median

_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}
_NUM = r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"
_CMP = re.compile(rf"^(\S+)\s+(ratio\s+)?(>=|<=|>|<)\s*({_NUM})$")
_TOL = re.compile(rf"^(\S+)\s+(ratio\s+)?=\s*({_NUM})\s*(?:\+-|±)\s*({_NUM})(%?)$")


class ExpectError(Exception):
    pass


@dataclass
class Expectation:
    text: str
    job: str
    dir: str
    metric: str
    ratio: bool
    op: str                 # >= <= > < or "="
    value: float
    tol: float = 0.0
    tol_pct: bool = False
    line: int = 0
    scope: str = ""         # a variant's name, or "" for the whole experiment

    def bounds(self):
        """(low, high) for the = form."""
        t = self.value * self.tol / 100 if self.tol_pct else self.tol
        return self.value - t, self.value + t

    def describe_bound(self):
        unit = "" if self.ratio else " " + METRICS[self.metric][0]
        if self.op == "=":
            lo, hi = self.bounds()
            return f"{lo:g}..{hi:g}{unit}"
        return f"{self.op} {self.value:g}{unit}"


def parse(text, line=0, scope=""):
    s = " ".join(text.split())
    m = _CMP.match(s)
    if m:
        target, ratio, op, value = m.group(1), bool(m.group(2)), m.group(3), float(m.group(4))
        tol, pct = 0.0, False
    else:
        m = _TOL.match(s)
        if not m:
            raise ExpectError(
                f"cannot read expectation '{text}': want JOB.DIR.METRIC [ratio] OP VALUE "
                "(OP >= <= > <) or JOB.DIR.METRIC [ratio] = VALUE +-TOL[%]")
        target, ratio, op = m.group(1), bool(m.group(2)), "="
        value, tol, pct = float(m.group(3)), float(m.group(4)), m.group(5) == "%"
    parts = target.rsplit(".", 2)
    if len(parts) != 3 or not parts[0]:
        raise ExpectError(f"'{target}' is not JOB.DIR.METRIC (e.g. wal.write.iops)")
    job, d, metric = parts
    if d not in DIRECTIONS:
        raise ExpectError(f"'{target}': direction '{d}' is not one of {', '.join(DIRECTIONS)}")
    if metric not in METRICS:
        raise ExpectError(f"'{target}': metric '{metric}' is not one of {', '.join(METRICS)}")
    return Expectation(text.strip(), job, d, metric, ratio, op, value, tol, pct, line, scope)


@dataclass
class Outcome:
    expectation: Expectation
    variant: str
    passed: bool
    figure: float           # the measured figure compared (a ratio for ratio expectations)
    detail: str             # how the figure came about
    where: str = ""         # spec file and line

    def line(self):
        e = self.expectation
        word = "PASS" if self.passed else "FAIL"
        measured = "no data" if self.figure is None else (
            f"x{_fmt(self.figure)}" if e.ratio else f"{_fmt(self.figure)} {METRICS[e.metric][0]}")
        where = f" ({self.where})" if self.where else ""
        return (f"{word} {self.variant}: expect {e.text}{where}: measured {measured}, "
                f"bound {'x' if e.ratio else ''}{e.describe_bound()}; {self.detail}")


def evaluate(e, variant, baseline, figures, where=""):
    """One expectation for one variant against a Figures object."""
    vals = figures.get(variant, e.job, e.dir, e.metric)
    unit = METRICS[e.metric][0]
    if not vals:
        return Outcome(e, variant, False, None, f"no {e.job} ({e.dir}) {e.metric} figures for {variant}", where)
    mv = median(vals)
    detail = f"median of {len(vals)} run(s): {_fmt(mv)} {unit}"
    fig = mv
    if e.ratio:
        bvals = figures.get(baseline, e.job, e.dir, e.metric)
        if not bvals:
            return Outcome(e, variant, False, None, f"no {e.job} ({e.dir}) {e.metric} figures for the baseline {baseline}", where)
        bm = median(bvals)
        if bm == 0:
            return Outcome(e, variant, False, None, f"the baseline {baseline}'s {e.metric} is 0", where)
        fig = mv / bm
        detail = f"medians of {len(vals)} and {len(bvals)} run(s): {_fmt(mv)} / {_fmt(bm)} {unit} ({baseline})"
    if e.op == "=":
        lo, hi = e.bounds()
        ok = lo <= fig <= hi
    else:
        ok = _OPS[e.op](fig, e.value)
    return Outcome(e, variant, ok, fig, detail, where)


def _fmt(x):
    if x is None:
        return "-"
    a = abs(x)
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"
