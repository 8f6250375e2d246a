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
from collections.abc import Callable
from dataclasses import dataclass

from . import fiojob, verdicts
from .results import DIRECTIONS, METRICS, Figures, median
from .spec import Spec

_OPS: dict[str, Callable[[float, float], bool]] = {
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

    def bounds(self) -> tuple[float, float]:
        """(low, high) for the = form."""
        t = self.value * self.tol / 100 if self.tol_pct else self.tol
        return self.value - t, self.value + t

    def describe_bound(self) -> str:
        unit = "" if self.ratio else " " + METRICS[self.metric][0]
        if self.op == "=":
            lo, hi = self.bounds()
            return f"{lo:g}..{hi:g}{unit}"
        return f"{self.op} {self.value:g}{unit}"


def parse(text: str, line: int = 0, scope: str = "") -> Expectation:
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
    figure: float | None    # the measured figure compared (a ratio for ratio expectations); None: no data
    detail: str             # how the figure came about
    where: str = ""         # spec file and line

    def line(self) -> str:
        e = self.expectation
        word = "PASS" if self.passed else "FAIL"
        measured = "no data" if self.figure is None else (
            f"x{_fmt(self.figure)}" if e.ratio else f"{_fmt(self.figure)} {METRICS[e.metric][0]}")
        where = f" ({self.where})" if self.where else ""
        return (f"{word} {self.variant}: expect {e.text}{where}: measured {measured}, "
                f"bound {'x' if e.ratio else ''}{e.describe_bound()}; {self.detail}")


def evaluate(e: Expectation, variant: str, baseline: str, figures: Figures, where: str = "") -> Outcome:
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


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    a = abs(x)
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


# --- before the first boot: every expect line against the spec's fio job ------------------
def check(sp: Spec, job: str) -> None:
    """Every expect line of the spec, before anything boots: it reads as an expectation;
    fio reports its job (numjobs clones and group_reporting as report.py reads them: a
    group's jobs under the name of its first); that job does I/O in its direction and
    reports its metric; a ratio is neither in the baseline's own section nor in a spec of
    one variant. job: the fio job as it runs. Raises the spec's SpecError at the line."""
    jobs = fiojob.reported(job)
    names = list(sp.variants)
    baseline = sp.experiment.get("baseline", names[0])
    sections = [("", sp.experiment)] + list(sp.variants.items())
    for scope, sec in sections:
        for text, line in sec.expects:
            if verdicts.is_verdict(text):       # checked by verdicts.check
                continue
            try:
                e = parse(text, line, scope)
            except ExpectError as err:
                raise sp.error(line, str(err)) from None
            why = _job_mistake(e, jobs) or _ratio_mistake(e, scope, baseline, names)
            if why:
                prefix = f"variant {scope}: " if scope else ""
                raise sp.error(line, f"{prefix}expect {e.text}: {why}")


def _job_mistake(e: Expectation, jobs: dict[str, fiojob.Reported] | None) -> str | None:
    """Why fio's output will have no figure for the expectation, or None."""
    if jobs is None:                        # the job includes files: not known
        return None
    r = jobs.get(e.job)
    if r is None:
        owner = next((x for x in jobs.values() if e.job in x.sections), None)
        if owner is None:
            return f"the fio job has no job '{e.job}' (fio reports: {', '.join(jobs)})"
        if len(owner.sections) > 1:
            others = ", ".join(x for x in owner.sections if x != e.job)
            return (f"group_reporting puts job '{e.job}' in one entry with {others}, which fio names after "
                    f"the group's first job: use '{owner.name}'")
        return f"job [{e.job}] sets name={owner.name}: fio reports it as '{owner.name}'"
    if e.dir not in r.dirs:
        return f"job '{e.job}' does no {e.dir} I/O ({', '.join(r.rw)})"
    if e.metric in ("p50", "p99") and r.percentiles is not None:
        want = 50.0 if e.metric == "p50" else 99.0
        if not any(abs(p - want) < 1e-6 for p in r.percentiles):
            return (f"job '{e.job}' reports no {e.metric}: its clat_percentiles, lat_percentiles or "
                    f"percentile_list leave the {want:g}th percentile out")
    if e.metric == "tlat" and not r.total_latency:
        return f"job '{e.job}' reports no tlat: it sets disable_lat"
    return None


def _ratio_mistake(e: Expectation, scope: str, baseline: str, names: list[str]) -> str | None:
    """Why a ratio expectation can never be judged, or None."""
    if not e.ratio:
        return None
    if len(names) == 1:
        return f"a ratio to the baseline, and the spec has only one variant ({names[0]})"
    if scope == baseline:
        return (f"a ratio to the baseline in the baseline's own section ({baseline} is the baseline): "
                "put it in another variant's section, or in [experiment] for every variant but the baseline")
    return None
