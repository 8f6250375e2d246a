"""The plots of an experiment's results folder, drawn with gnuplot into its plots/
(docs/experiments.md, "What comes out"). report.Report.plots() calls make().

Per fio job and direction:
  <job>-<dir>-iops.png, <job>-<dir>-clat.png   IOPS and mean completion latency over time: per
      variant the median over repetitions of each log interval, and a band from their
      minimum to their maximum; the expectations' bounds and the published figures about
      that job, direction and metric as horizontal lines; the timeline's host events as
      vertical lines; one time range for every such plot of the run.
  <job>-<dir>-clat-percentiles.png   fio's completion latency percentiles from p50 up: per
      variant the median over repetitions, bars from the minimum to the maximum; log scale.
Per direction, with trace = on: attribution-<dir>.png, the stacked parts of a request's latency.

Each plot's gnuplot script and data are kept in plots/data/ (<plot>.gp, *.dat), so a plot
can be drawn again (gnuplot plots/data/<plot>.gp) and checked without looking at it.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import attrib, expect
from .results import METRICS, ResultError, load_fio_json, median

if TYPE_CHECKING:
    from .report import Report

# Colours of the variants, in their order (a colour-blind safe set first).
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f3c8d", "#8c564b")
NEUTRAL = "#404040"             # lines about every variant
_DIRNUM = {"read": 0, "write": 1, "trim": 2}
# Which plot a metric of an expectation or a published figure is drawn on.
PLOT_OF_METRIC = {"iops": "iops", "lat": "clat", "p50": "percentiles", "p99": "percentiles"}
BOUND_DASH, PUBLISHED_DASH, EVENT_DASH = 2, 3, 4
# The parts of the attribution plot, in stacking order, with their colours.
PART_COLOURS = {"tag": "#9400d3", "sched": "#009e73", "scsi": "#56b4e9", "host": "#e69f00",
                "transport": "#f0e442", "device": "#0072b2", "complete": "#d55e00", "wake": "#404040"}
MIN_PERCENTILE = 50.0

Points = list[tuple[float, float]]
# A band row: seconds, median, min, max, repetitions.
BandRow = tuple[float, float, float, float, int]


class PlotError(Exception):
    pass


@dataclass
class Ref:
    """A horizontal line: an expectation's bound or a published figure."""
    y: float
    text: str
    colour: str
    dash: int


@dataclass
class Mark:
    """A vertical line: a timeline event, at seconds after fio's start (scaled back)."""
    t: float
    text: str
    colour: str


@dataclass
class Context:
    """What every plot of a run shares."""
    rep: Report
    pdir: str
    colours: dict[str, str]
    bands: dict[tuple[str, str, str, str], list[BandRow]] = field(default_factory=dict)  # (job, dir, kind, variant)
    nreps: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)
    xmax: float = 1.0


def make(rep: Report, pdir: str) -> list[str]:
    """Every plot of a results folder into pdir (which holds an empty data/); the PNGs made."""
    ctx = context(rep, pdir)
    made: list[str | None] = []
    for d in sorted({d for a in rep.attribution.values() for d in a.dirs}):
        made.append(attribution_plot(ctx, d))
    for job, d in rep.figures.keys:
        for kind in ("iops", "clat"):
            made.append(time_plot(ctx, job, d, kind))
        made.append(percentile_plot(ctx, job, d))
    return [p for p in made if p]


def context(rep: Report, pdir: str) -> Context:
    """The series of every time plot, the timeline's marks and the run's time range."""
    ctx = Context(rep, pdir, {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(rep.variants)})
    for job, d in rep.figures.keys:
        for kind in ("iops", "clat"):
            for v in rep.variants:
                per_rep = rep_series(rep.dir, v, job, d, kind, rep.plan["log_avg"], rep.scale_of(v))
                if per_rep:
                    ctx.bands[(job, d, kind, v)] = band(per_rep)
                    ctx.nreps[(job, d, kind, v)] = len(per_rep)
    ctx.marks = timeline_marks(rep, ctx.colours)
    ends = [r[0] for b in ctx.bands.values() for r in b] + [m.t for m in ctx.marks]
    ctx.xmax = nice_ceiling(max(ends, default=1.0))
    return ctx


def nice_ceiling(x: float) -> float:
    """x rounded up to a multiple of half its power of ten (9.2 -> 9.5, 1.25 -> 1.5)."""
    if x <= 0:
        return 1.0
    step = 10 ** math.floor(math.log10(x)) / 2
    return round(math.ceil(x / step - 1e-9) * step, 9)


# --- data ----------------------------------------------------------------------------
def rep_series(d: str, variant: str, job: str, direction: str, kind: str, avg_ms: float,
               scale: float) -> dict[str, Points]:
    """Per repetition (rep<N>), (seconds, value) points from fio's logs, one per log
    interval: IOPS summed over a job's clones, or completion latency (ms) averaged over the
    clones' entries. Scaled back: seconds / scale, IOPS x scale, ms / scale."""
    ftype = "iops" if kind == "iops" else "clat"
    files = sorted(glob.glob(os.path.join(glob.escape(d), "runs", glob.escape(variant), "rep*", "results", "logs",
                                          f"{glob.escape(job)}_{ftype}.*.log")))
    want = _DIRNUM[direction]
    sums: dict[str, dict[int, list[float]]] = {}        # rep -> bin -> [sum, entries]
    for path in files:
        rep = os.path.relpath(path, d).split(os.sep)[2]       # runs/<variant>/rep<N>/...
        bins = sums.setdefault(rep, {})
        with open(path, encoding="utf-8", errors="replace") as f:
            for ln in f:
                parts = [x.strip() for x in ln.split(",")]
                if len(parts) < 3 or not parts[2].isdigit() or int(parts[2]) != want:
                    continue
                try:
                    t, val = float(parts[0]), float(parts[1])
                except ValueError:
                    continue
                acc = bins.setdefault(int((t + avg_ms / 2) // avg_ms), [0.0, 0])
                acc[0] += val
                acc[1] += 1
    out: dict[str, Points] = {}
    for rep, bins in sorted(sums.items()):
        if kind == "iops":
            pts = [(b * avg_ms / 1000 / scale, s * scale) for b, (s, _) in sorted(bins.items())]
        else:
            pts = [(b * avg_ms / 1000 / scale, s / n / scale / 1e6) for b, (s, n) in sorted(bins.items())]
        if pts:
            out[rep] = pts
    return out


def band(per_rep: dict[str, Points]) -> list[BandRow]:
    """Per time: the median over the repetitions that have a point there, their minimum
    and maximum, and how many they are."""
    at: dict[float, list[float]] = {}
    for pts in per_rep.values():
        for t, y in pts:
            at.setdefault(t, []).append(y)
    return [(t, median(ys), min(ys), max(ys), len(ys)) for t, ys in sorted(at.items())]


def percentiles(rep: Report, variant: str, job: str, direction: str) -> dict[float, list[float]]:
    """fio's completion latency percentiles (p50 and up) of a job and direction, per
    percentile the value of each repetition (ms, scaled back; numjobs clones: the highest
    clone's, as the table's p50 and p99)."""
    out: dict[float, list[float]] = {}
    scale = rep.scale_of(variant)
    for v, r, st in rep.runs:
        if v != variant or not st or st.get("status") != "ok":
            continue
        try:
            fio = load_fio_json(os.path.join(rep.dir, "runs", v, f"rep{r}", "results", "fio.json"))
        except ResultError:
            continue
        run: dict[float, float] = {}
        for j in fio.get("jobs") or []:
            if j.get("jobname") != job:
                continue
            for p, ns in _job_percentiles(j.get(direction) or {}).items():
                run[p] = max(run.get(p, 0.0), ns / scale / 1e6)
        for p, ms in run.items():
            out.setdefault(p, []).append(ms)
    return dict(sorted(out.items()))


def _job_percentiles(d: dict[str, object]) -> dict[float, float]:
    """A job's percentiles from p50 up (ns), from clat_ns, else lat_ns (as results.py)."""
    for fld in ("clat_ns", "lat_ns"):
        lat = d.get(fld)
        pct = lat.get("percentile") if isinstance(lat, dict) else None
        if not isinstance(pct, dict) or not pct:
            continue
        out: dict[float, float] = {}
        for k, v in pct.items():
            try:
                p, ns = float(k), float(v)
            except (TypeError, ValueError):
                continue
            if p >= MIN_PERCENTILE and ns > 0:
                out[p] = ns
        return out
    return {}


def nines(p: float) -> float:
    """A percentile's place on the percentile axis: 90 -> 1, 99 -> 2, 99.9 -> 3."""
    return -math.log10(max(1 - p / 100, 1e-9))


# --- lines: bounds, published figures, timeline events --------------------------------
def refs(rep: Report, colours: dict[str, str], job: str, direction: str, plot: str) -> list[Ref]:
    """The horizontal lines of a plot: the bounds of every expectation about the job,
    direction and a metric drawn on that plot, then the published figures."""
    return (bound_refs(rep, colours, job, direction, plot)
            + published_refs(rep, colours, job, direction, plot))


def bound_refs(rep: Report, colours: dict[str, str], job: str, direction: str, plot: str) -> list[Ref]:
    """An expect line's bound (both ends of a tolerance) with its text, where in the spec
    and its verdicts; a ratio's bound is the value times the baseline's median."""
    groups: dict[tuple[str, str, str], list[expect.Outcome]] = {}
    for o in rep.outcomes:
        if isinstance(o, expect.Outcome):
            e = o.expectation
            if e.job == job and e.dir == direction and PLOT_OF_METRIC.get(e.metric) == plot:
                groups.setdefault((o.where, e.text, e.scope), []).append(o)
    out: list[Ref] = []
    for (where, _, scope), outs in groups.items():
        e = outs[0].expectation
        unit = METRICS[e.metric][0]
        ys = list(e.bounds()) if e.op == "=" else [e.value]
        how = ""
        if e.ratio:
            base = median(rep.figures.get(rep.baseline, job, direction, e.metric))
            if not base == base or base <= 0:
                continue            # no baseline figure: nothing to draw the ratio against
            how = f" ({rep.baseline}'s median {_num(base)} {unit} x ratio)"
            ys = [y * base for y in ys]
        verdict = ", ".join(f"{o.variant} {'PASS' if o.passed else 'FAIL'}" for o in outs)
        who = f"{scope}: " if scope else ""
        for i, y in enumerate(ys):
            end = ("low end: ", "high end: ")[i] if len(ys) == 2 else ""
            out.append(Ref(y, f"{who}expect {e.text} ({where}){how}: {end}{_num(y)} {unit}; {verdict}",
                           colours.get(scope, NEUTRAL), BOUND_DASH))
    return out


def published_refs(rep: Report, colours: dict[str, str], job: str, direction: str, plot: str) -> list[Ref]:
    """A variant's published figures (`published`) and published ratios (`published-ratio`,
    drawn as the ratio times the baseline's median) about the job, direction and metric."""
    out: list[Ref] = []
    for v in rep.variants:
        info = rep.vinfo[v]
        for (j, d, m), val in published(info.get("published")).items():
            if (j, d) == (job, direction) and PLOT_OF_METRIC.get(m) == plot:
                out.append(Ref(val, f"{v}: published {_num(val)} {METRICS[m][0]}", colours[v], PUBLISHED_DASH))
        for (j, d, m), val in published(info.get("published_ratio")).items():
            if (j, d) != (job, direction) or PLOT_OF_METRIC.get(m) != plot:
                continue
            base = median(rep.figures.get(rep.baseline, job, direction, m))
            if base == base and base > 0:
                out.append(Ref(val * base, f"{v}: published x{_num(val)} of {rep.baseline}'s median {_num(base)} = "
                                           f"{_num(val * base)} {METRICS[m][0]}", colours[v], PUBLISHED_DASH))
    return out


def published(s: str | None) -> dict[tuple[str, str, str], float]:
    """`JOB.DIR.METRIC=VALUE` items of a variant's published or published-ratio."""
    out: dict[tuple[str, str, str], float] = {}
    for item in (s or "").split():
        k, eq, v = item.partition("=")
        m = re.fullmatch(r"(.+)\.([a-z]+)\.([a-z0-9]+)", k)
        try:
            if eq and m and m.group(3) in METRICS:
                out[(m.group(1), m.group(2), m.group(3))] = float(v)
        except ValueError:
            continue
    return out


def timeline_marks(rep: Report, colours: dict[str, str]) -> list[Mark]:
    """The host's timeline events (timeline.json) as vertical lines: per event of a
    variant the median of when it happened over the repetitions (scaled back), or when it
    was planned if it never happened; an event every variant had at the same time is one
    line without a variant's name."""
    at: dict[tuple[float, str], list[str]] = {}        # (seconds, text) -> variants
    for v, reps in rep.timelines().items():
        if v not in colours:
            continue
        events: dict[tuple[object, ...], list[dict[str, object]]] = {}
        for _, evs in sorted(reps.items()):
            for e in evs if isinstance(evs, list) else []:
                if isinstance(e, dict):
                    events.setdefault((e.get("at"), e.get("action"), e.get("target"), e.get("value")), []).append(e)
        for (planned, action, target, _), seen in events.items():
            done = [float(x) for x in (e.get("done_at") for e in seen) if isinstance(x, (int, float))]
            text = f"{action} {target}".strip()
            if not done:
                text += " (not reached)"
            elif any(str(e.get("result", "ok")).startswith("refused") for e in seen):
                text += " (refused)"
            elif len(done) < len(seen):
                text += " (not reached in every repetition)"
            t = median(done) if done else float(planned) if isinstance(planned, (int, float)) else 0.0
            at.setdefault((round(t / rep.scale_of(v), 3), text), []).append(v)
    out = []
    for (t, text), vs in sorted(at.items()):
        if set(vs) == set(rep.variants):
            out.append(Mark(t, text, NEUTRAL))
        else:
            out.append(Mark(t, f"{', '.join(vs)}: {text}", colours[vs[0]] if len(vs) == 1 else NEUTRAL))
    return out


def _num(x: float) -> str:
    """A figure for a label: 4 significant digits, no exponent below a million."""
    return f"{x:.4g}" if abs(x) < 1e6 and (abs(x) >= 1e-3 or x == 0) else f"{x:.3e}"


# --- gnuplot ---------------------------------------------------------------------------
def gq(text: object) -> str:
    """A gnuplot string: single-quoted, or double-quoted with escapes when it spans lines."""
    s = str(text)
    if "\n" not in s:
        return "'" + s.replace("'", "''") + "'"
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def ref_commands(lines: list[Ref], lo: float, hi: float, log: bool) -> list[str]:
    """gnuplot commands for horizontal lines across the plot, each with its text just above
    or below it, at the left or the right: the first of those places where the text crosses
    no other line and meets no other text (else the one that meets the fewest)."""
    def pos(y: float) -> float:
        if log:
            return (math.log10(y) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        return (y - lo) / (hi - lo)
    h = 0.05            # a text's height, as a fraction of the plot's
    slots = [("graph 0.01", "left", 1), ("graph 0.99", "right", 1), ("graph 0.01", "left", -1),
             ("graph 0.99", "right", -1)]
    placed: list[tuple[str, float, float]] = []     # side, span of a text placed
    out = []
    for r in sorted(lines, key=lambda r: r.y):
        u = pos(r.y)

        def clashes(slot: tuple[str, str, int], u: float = u) -> int:
            a, b = (u, u + h) if slot[2] > 0 else (u - h, u)
            crossed = sum(1 for o in lines if a < pos(o.y) < b)
            return crossed + sum(1 for side, c, d in placed if side == slot[1] and c < b and a < d)
        x, just, up = min(slots, key=clashes)           # the first of the best
        placed.append((just, *((u, u + h) if up > 0 else (u - h, u))))
        out += [f"set arrow from graph 0, first {r.y:g} to graph 1, first {r.y:g} nohead front "
                f"lc rgb '{r.colour}' dt {r.dash} lw 1.5",
                f"set label {gq(r.text)} at {x}, first {r.y:g} {just} offset 0,{0.55 if up > 0 else -0.6} front boxed "
                f"font ',9' tc rgb '{r.colour}'"]
    return out


def mark_commands(marks: list[Mark]) -> list[str]:
    """gnuplot commands for vertical lines at the timeline's events, their texts beside them."""
    out = []
    for m in marks:
        out += [f"set arrow from first {m.t:g}, graph 0 to first {m.t:g}, graph 1 nohead front "
                f"lc rgb '{m.colour}' dt {EVENT_DASH} lw 1.5",
                f"set label {gq(m.text)} at first {m.t:g}, graph 0.98 rotate by 90 right offset -0.7,0 front boxed "
                f"font ',9' tc rgb '{m.colour}'"]
    return out


def key_entries(lines: list[Ref], marks: list[Mark]) -> list[str]:
    """Plot elements that only add to the key what the dashed, dotted and dash-dotted lines
    are (those the plot has)."""
    out = []
    for dash, what, there in ((BOUND_DASH, "an expect line's bound", any(r.dash == BOUND_DASH for r in lines)),
                              (PUBLISHED_DASH, "a published figure", any(r.dash == PUBLISHED_DASH for r in lines)),
                              (EVENT_DASH, "a timeline event", bool(marks))):
        if there:
            out.append(f"NaN with lines dt {dash} lw 1.5 lc rgb '{NEUTRAL}' title {gq(what)}")
    return out


def log_tics(lo: float, hi: float) -> str:
    """Tics between lo and hi at powers of ten, or at more of their multiples until there
    are four (gnuplot's own log tics are only the powers of ten)."""
    out: list[float] = []
    for mantissas in ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)):
        out = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
               for m in mantissas if lo <= m * 10.0 ** e <= hi]
        if len(out) >= 4:
            break
    return ", ".join(f"{gq(f'{x:.3g}')} {x:.6g}" for x in out)


def scaled_words(rep: Report, op: str) -> str:
    """How an axis's figures were scaled back by the time scale ("" when nothing was):
    op "x" for rates, "/" for times and latencies."""
    scaled = [v for v in rep.variants if rep.scale_of(v) != 1]
    if not scaled:
        return ""
    how = ", ".join(f"{op}{s:g}" for s in dict.fromkeys(rep.scale_of(v) for v in scaled))
    if len(scaled) == len(rep.variants):
        return f", scaled back by the time scale ({how})"
    return f", scaled back by the time scale ({how}) for {', '.join(scaled)}"


def time_label(rep: Report) -> str:
    return "seconds after fio's start" + scaled_words(rep, "/")


def run_gnuplot(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gnuplot"], input=script, text=True, capture_output=True, check=False)


def render(ctx: Context, name: str, lines: list[str]) -> str:
    """Writes plots/data/<name>.gp and runs it: plots/<name>.png (with gnuplot's plain png
    terminal when it has no cairo)."""
    png = os.path.join(ctx.pdir, f"{name}.png")
    script = "\n".join(lines[:1] + [f"set output {gq(os.path.abspath(png))}"] + lines[1:]) + "\n"
    with open(os.path.join(ctx.pdir, "data", f"{name}.gp"), "w", encoding="utf-8") as f:
        f.write(script)
    r = run_gnuplot(script)
    if r.returncode != 0 and "pngcairo" in r.stderr:
        r = run_gnuplot(script.replace("pngcairo", "png"))
    if r.returncode != 0:
        raise PlotError(f"gnuplot failed on {name}: {r.stderr.strip()[:400]}")
    return png


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _header(ctx: Context, size: str, title: str, sub: str) -> list[str]:
    """The terminal and the title: what is drawn, how, and the run's time scale."""
    text = "\n".join([f"{ctx.rep.plan['name']}: {title}", sub, ctx.rep.plan["scale_note"]])
    return [f"set terminal pngcairo size {size} noenhanced font ',11'", f"set title {gq(text)} font ',11'",
            "set style textbox opaque fillcolor rgb '#90ffffff' noborder margins 1,1"]


# --- the plots -------------------------------------------------------------------------
def time_plot(ctx: Context, job: str, direction: str, kind: str) -> str | None:
    """IOPS or mean completion latency over time, per variant the median over repetitions
    and a min-max band; bounds, published figures and timeline events; the run's time range."""
    rep = ctx.rep
    name = f"{safe(job)}-{direction}-{kind}"
    cmds, top = [], 0.0
    for v in rep.variants:
        rows = ctx.bands.get((job, direction, kind, v))
        if not rows:
            continue
        n = ctx.nreps[(job, direction, kind, v)]
        dat = os.path.join(ctx.pdir, "data", f"{name}-{safe(v)}.dat")
        with open(dat, "w", encoding="utf-8") as f:
            f.write(f"# {v}: seconds, median, min, max over repetitions, repetitions with a point there\n")
            f.writelines(f"{t:g} {m:g} {lo:g} {hi:g} {k}\n" for t, m, lo, hi, k in rows)
        c, src = ctx.colours[v], gq(os.path.abspath(dat))
        if n > 1:
            cmds.append(f"{src} using 1:3:4 with filledcurves fc rgb '{c}' fs transparent solid 0.2 noborder notitle")
        cmds.append(f"{src} using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc rgb '{c}' "
                    f"title {gq(f'{v}: median of {n} repetitions' if n > 1 else f'{v}: 1 repetition')}")
        top = max([top] + [r[3] for r in rows])
    if not cmds:
        return None
    lines = refs(rep, ctx.colours, job, direction, kind)
    top = max([top] + [r.y for r in lines]) * 1.1 or 1.0
    what = "IOPS" if kind == "iops" else "mean completion latency"
    ylabel = ("IOPS" + scaled_words(rep, "x")) if kind == "iops" else ("mean completion latency (ms)" + scaled_words(rep, "/"))
    script = _header(ctx, "1100,640", f"{job} ({direction}), {what} over time",
                     f"per fio log interval ({rep.plan['log_avg']} ms as run): line the median over repetitions, band their min to max")
    script += [f"set xlabel {gq(time_label(rep))}", f"set ylabel {gq(ylabel)}",
               f"set xrange [0:{ctx.xmax:g}]", f"set yrange [0:{top:g}]", "set grid", "set key below"]
    script += ref_commands(lines, 0.0, top, False) + mark_commands(ctx.marks)
    script.append("plot " + ", ".join(cmds + key_entries(lines, ctx.marks)))
    return render(ctx, name, script)


def percentile_plot(ctx: Context, job: str, direction: str) -> str | None:
    """fio's completion latency percentiles from p50 up, per variant the median over
    repetitions with min-max bars, on a log latency axis; the p50/p99 bounds."""
    rep = ctx.rep
    name = f"{safe(job)}-{direction}-clat-percentiles"
    cmds, values, ps = [], [], set()
    for v in rep.variants:
        pct = percentiles(rep, v, job, direction)
        if not pct:
            continue
        dat = os.path.join(ctx.pdir, "data", f"{name}-{safe(v)}.dat")
        with open(dat, "w", encoding="utf-8") as f:
            f.write(f"# {v}: percentile, its place (nines), median, min, max over repetitions (ms), repetitions\n")
            f.writelines(f"{p:g} {nines(p):.4f} {median(xs):g} {min(xs):g} {max(xs):g} {len(xs)}\n" for p, xs in pct.items())
        n = max(len(xs) for xs in pct.values())
        style = "yerrorlines" if n > 1 else "linespoints"
        using = "2:3:4:5" if n > 1 else "2:3"
        cmds.append(f"{gq(os.path.abspath(dat))} using {using} with {style} lw 2 pt 7 ps 0.6 lc rgb '{ctx.colours[v]}' "
                    f"title {gq(f'{v}: median of {n} repetitions, bars min to max' if n > 1 else f'{v}: 1 repetition')}")
        values += [x for xs in pct.values() for x in xs]
        ps |= set(pct)
    if not cmds:
        return None
    lines = refs(rep, ctx.colours, job, direction, "percentiles")
    ys = values + [r.y for r in lines if r.y > 0]
    lo, hi = min(ys) / 1.5, max(ys) * 1.5
    script = _header(ctx, "1100,640", f"{job} ({direction}), completion latency percentiles",
                     "fio's clat percentiles of each run (numjobs clones: the highest clone's): the median over "
                     "repetitions, bars their min to max")
    script += [f"set xlabel {gq('percentile (spaced by nines: p90, p99, p99.9 evenly)')}",
               f"set ylabel {gq('completion latency (ms, log scale)' + scaled_words(rep, '/'))}",
               f"set xtics ({_percentile_tics(sorted(ps))})", f"set xrange [{nines(min(ps)) - 0.15:.4f}:{nines(max(ps)) + 0.15:.4f}]",
               "set logscale y", f"set yrange [{lo:g}:{hi:g}]", f"set ytics ({log_tics(lo, hi)})", "set grid", "set key below"]
    script += ref_commands([r for r in lines if r.y > 0], lo, hi, True)
    script.append("plot " + ", ".join(cmds + key_entries(lines, [])))
    return render(ctx, name, script)


def _percentile_tics(ps: list[float]) -> str:
    """Tic labels p50 ... p99.99, leaving out a label too close to the one before (its tic stays)."""
    out, last = [], -1.0
    for p in ps:
        x = nines(p)
        label = f"p{p:g}" if x - last >= 0.2 else ""
        if label:
            last = x
        out.append(f"{gq(label)} {x:.4f}")
    return ", ".join(out)


def attribution_plot(ctx: Context, d: str) -> str | None:
    """Stacked bars: one per variant, the traced parts of a request's latency in one
    direction (parts no variant has are left out), each bar's total above it, and fio's
    mean completion latency as a diamond beside the parts."""
    rep = ctx.rep
    rows = [(v, rep.attribution[v].dirs[d]) for v in rep.variants if v in rep.attribution and d in rep.attribution[v].dirs]
    if not rows:
        return None
    parts = [k for k in PART_COLOURS if any(p.get(k, 0.0) for _, p in rows)] or ["host"]
    dat = os.path.join(ctx.pdir, "data", f"attribution-{d}.dat")
    with open(dat, "w", encoding="utf-8") as f:
        f.write("# variant " + " ".join(parts) + " traced fio_clat (ms per request)\n")
        for v, p in rows:
            clat = rep.fio_clat(v, d)
            f.write(json.dumps(v) + " " + " ".join(f"{p.get(k, 0.0):g}" for k in parts)
                    + f" {sum(p.get(k, 0.0) for k in parts):g} {'?' if clat is None else format(clat, 'g')}\n")
    tot, clat_col = len(parts) + 2, len(parts) + 3
    cols = [f"{gq(os.path.abspath(dat))} using {i + 2}{':xtic(1)' if i == 0 else ''} lc rgb '{PART_COLOURS[k]}' "
            f"title {gq(attrib.PART_NAMES[k])}" for i, k in enumerate(parts)]
    cols += [f"'' using 0:{tot}:(sprintf('%.3g ms', column({tot}))) with labels offset 0,0.8 font ',10' notitle",
             f"'' using ($0 + 0.42):{clat_col} with points pt 13 ps 1.6 lc rgb '#000000' "
             "title \"fio's mean completion latency (clat)\"",
             f"'' using ($0 + 0.42):{clat_col}:(sprintf('%.3g', column({clat_col}))) with labels offset 0,1 "
             "font ',9' notitle"]
    top = max([r for _, p in rows for r in [sum(p.get(k, 0.0) for k in parts)]]
              + [c for c in (rep.fio_clat(v, d) for v, _ in rows) if c is not None])
    script = _header(ctx, "1100,700", f"where a {d} request's latency goes",
                     "mean ms per request over the traced requests, the parts stacked")
    script += [f"set ylabel {gq('ms per request' + scaled_words(rep, '/'))}", "set style data histograms",
               "set style histogram rowstacked", "set style fill solid 0.85 border -1", "set boxwidth 0.6",
               "set key outside below center horizontal maxcols 3 font ',10'", "set grid ytics",
               f"set yrange [0:{top * 1.15 or 1:g}]", f"set xrange [-0.6:{len(rows) - 0.4:g}]",
               "set xtics rotate by -25" if len(rows) > 5 else "set xtics norotate", "plot " + ", ".join(cols)]
    return render(ctx, f"attribution-{d}", script)
