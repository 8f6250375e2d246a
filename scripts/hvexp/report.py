"""The report of an experiment's results folder: the table (report.txt), a JSON summary
(summary.json), a JUnit file (junit.xml), the expectations' verdicts and PNG plots.

The folder holds plan.json (written before the first boot), spec.exp, and per run
runs/<variant>/rep<N>/run.json (its status) with results/ (what the guest sent back).
"""

import glob
import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Required, TypedDict

from . import attrib, expect, plots as plotting, shards as shardmod, spec as specmod, verdicts
from .results import METRICS, Figures, ResultError, load_run_dir, mean, median, sd

Log = Callable[[str], object]
# storvsc's own messages: those it logs against its device, and its host's.
_DRIVER_LINE = re.compile(r"hv_storvsc [0-9a-f]{8}-")
Outcome = expect.Outcome | verdicts.VerdictOutcome


class VariantDoc(TypedDict, total=False):
    """A variant in plan.json (runner.py writes it; older folders lack some keys)."""
    name: Required[str]
    summary: Required[str]
    device: Required[str]
    kernel: str
    ko: str
    want_version: str
    params: list[str]
    scale: float
    scsi_debug: dict[str, str]
    published: str
    published_ratio: str
    coverage: bool
    timeline: list[str]


class PlanJson(TypedDict, total=False):
    """plan.json: what the runner decided before the first boot."""
    name: Required[str]
    description: Required[str]
    scale: Required[float]
    scale_note: Required[str]
    reps: Required[int]
    fio_seconds: Required[int]
    log_avg: Required[int]
    vm: Required[str]
    baseline: Required[str]
    variants: Required[list[VariantDoc]]
    spec: str
    trace: bool
    all_variants: list[str]
    # What identifies the plan across shards (runner.plan_identity), and the shard's own.
    version: str
    spec_sha256: str
    options: dict[str, object]
    fingerprint: str
    runs: list[shardmod.RunDoc]
    shard: shardmod.ShardDoc
    shard_runs: list[shardmod.RunDoc]
    merged_from: list[dict[str, str]]


class RunStatus(TypedDict, total=False):
    """A run's run.json."""
    status: str             # ok, failed
    why: str
    seconds: float
    rc: int
    start: str              # boot, or snapshot: the run went on from its variant's snapshot
    first_io: float | None  # seconds from the run's start to fio's start
    snapshot_boot: float | None  # snapshot: seconds the variant's one boot took to its snapshot point


class ReportError(Exception):
    pass


@dataclass
class Attribution:
    """A variant's latency attribution over its runs: per direction the mean parts per
    request (ms, scaled back) and "n", the requests; what was left out."""
    dirs: dict[str, attrib.Parts] = field(default_factory=dict)
    partial: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        """summary.json's form: the directions, then "partial", "lost" and any "errors"."""
        out: dict[str, object] = dict(self.dirs)
        out["partial"], out["lost"] = self.partial, self.lost
        if self.errors:
            out["errors"] = self.errors
        return out


def load_plan(d: str) -> PlanJson:
    try:
        with open(os.path.join(d, "plan.json"), encoding="utf-8") as f:
            plan: PlanJson = json.load(f)
            return plan
    except FileNotFoundError:
        raise ReportError(f"{d} holds no experiment results (no plan.json)") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{d}/plan.json is damaged: {e}") from None


def run_status(d: str, v: str, rep: int) -> RunStatus | None:
    p = os.path.join(d, "runs", v, f"rep{rep}", "run.json")
    try:
        with open(p, encoding="utf-8") as f:
            st: RunStatus = json.load(f)
            return st
    except (OSError, json.JSONDecodeError):
        return None


def header(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for ln in f:
                k, eq, v = ln.rstrip("\n").partition("=")
                if eq and k not in out:
                    out[k] = v
    except OSError:
        pass
    return out


def guest_facts(h: dict[str, str]) -> str:
    """One line on what a guest ran, from its header."""
    disk = next((k.split(".")[1] for k in h if re.fullmatch(r"disk\.[a-z]+\.hw_queues", k)), None)
    if not disk:
        return "no disk facts"

    def g(k: str) -> str:
        return h.get(k, "")
    can = next((h[k] for k in h if re.fullmatch(r"host\.host[0-9]+\.can_queue", k)), "")
    sched = re.search(r"\[(.*)\]", g(f"disk.{disk}.scheduler"))
    shared = "yes" if "TAG_HCTX_SHARED" in g(f"disk.{disk}.hctx_flags") else "no"
    facts = (f"{g(f'disk.{disk}.hw_queues')} hw queues, can_queue {can}, queue_depth {g(f'disk.{disk}.queue_depth')}, "
             f"nr_requests {g(f'disk.{disk}.nr_requests')}, scheduler {sched.group(1) if sched else 'none'}, shared tags {shared}")
    if h.get("device") == "virtio-scsi":
        return f"virtio-scsi, {facts}, kernel {g('kernel')}"
    if h.get("device") == "scsi_debug":
        sd_p = " ".join(f"{k}={h.get('scsi_debug.' + k, '?')}" for k in ("submit_queues", "host_max_queue", "ndelay"))
        return f"scsi_debug ({sd_p}), {facts}, kernel {g('kernel')}"
    ver = g("module.version") or "stock"
    return (f"{facts}, {g('vmbus.channels')} channels, storvsc_max_hw_queues={g('param.storvsc_max_hw_queues')}, "
            f"hv_storvsc {ver}, kernel {g('kernel')}")


def _parse_published(s: str | None) -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for item in (s or "").split():
        k, eq, v = item.partition("=")
        m = re.fullmatch(r"(.+)\.([a-z]+)\.([a-z0-9]+)", k)
        if eq and m:
            out[(m.group(1), m.group(2), m.group(3))] = v
    return out


def _f(x: float | None, d: int) -> str:
    return "-" if x is None or x != x else f"{x:.{d}f}"


class Report:
    def __init__(self, d: str, spec_path: str | None = None) -> None:
        self.dir = d
        self.plan = load_plan(d)
        self.spec_path = spec_path or os.path.join(d, "spec.exp")
        # Verdicts name the spec the user wrote, not the folder's copy of it.
        self.spec_name: str = os.path.basename(spec_path) if spec_path else self.plan.get("spec", "spec.exp")
        self.variants: list[str] = [v["name"] for v in self.plan["variants"]]
        self.vinfo: dict[str, VariantDoc] = {v["name"]: v for v in self.plan["variants"]}
        self.vinfo_all: list[str] = self.plan.get("all_variants", self.variants)     # the spec's, with --variants
        self.baseline: str = self.plan["baseline"]
        self.figures = Figures(self.plan["scale"])
        # A shard's folder (./hvstor run --shard K/N) holds some of the plan's runs; the
        # others are elsewhere, in other shards, and not missing.
        self.shard: shardmod.ShardDoc | None = self.plan.get("shard")
        self.elsewhere: list[tuple[str, int]] = []
        self.runs: list[tuple[str, int, RunStatus | None]] = self._load_runs()  # (variant, rep, status dict or None)
        # Variants of which this shard has no run: their expectations are not judged here.
        self.away = set(self.variants) - {v for v, _, _ in self.runs} if self.shard else set()
        self.not_here: list[tuple[str, str, str]] = []     # (variant, expectation text, where)
        self.w = max([14] + [len(v) for v in self.variants])       # the variant column
        self.facts: dict[str, str] = {}
        for v in self.variants:
            hs = sorted(glob.glob(os.path.join(d, "runs", v, "rep*", "results", "header")))
            if hs:
                self.facts[v] = guest_facts(header(hs[0]))
        self.run_facts: dict[str, list[verdicts.RunFacts]] = {
            v: [verdicts.run_facts(os.path.join(d, "runs", v, f"rep{r}"), r) for vv, r, st in self.runs
                if vv == v and st and st.get("status") == "ok"] for v in self.variants}
        self.outcomes: list[Outcome] = self._expectations()
        self.attribution: dict[str, Attribution] = self._attribution() if self.plan.get("trace") else {}

    def _load_runs(self) -> list[tuple[str, int, RunStatus | None]]:
        """The runs of the plan (of a shard's folder: the shard's), with their figures."""
        here = set(shardmod.run_ids(self.plan.get("shard_runs", []))) if self.shard else None
        runs: list[tuple[str, int, RunStatus | None]] = []
        for rep in range(1, self.plan["reps"] + 1):
            for v in self.variants:
                if here is not None and (v, rep) not in here:
                    self.elsewhere.append((v, rep))
                    continue
                st = run_status(self.dir, v, rep)
                runs.append((v, rep, st))
                if st and st.get("status") == "ok":
                    try:
                        self.figures.add_run(v, load_run_dir(os.path.join(self.dir, "runs", v, f"rep{rep}")),
                                             self.scale_of(v))
                    except ResultError as e:
                        st["status"], st["why"] = "failed", str(e)
        return runs

    def scale_of(self, v: str) -> float:
        """What a variant's figures are scaled back by (older folders: one for all)."""
        scale: float = self.vinfo[v].get("scale", self.plan["scale"])
        return scale

    def _attribution(self) -> dict[str, Attribution]:
        """Per variant, over its runs (weighted by the requests each traced), scaled back:
        {dir: {part: ms, "n": ios}}, and the "partial"/"lost" counts."""
        out: dict[str, Attribution] = {}
        for v in self.variants:
            scale = self.scale_of(v)
            acc: dict[str, dict[str, list[float]]] = {}     # dir -> part -> [sum of ms x weight, weight]
            n: dict[str, float] = {}        # dir -> requests (ints, in attrib.Parts' float type)
            extra = Attribution()
            for _, r, st in (x for x in self.runs if x[0] == v):
                if not st or st.get("status") != "ok":
                    continue
                a = attrib.run_attribution(os.path.join(self.dir, "runs", v, f"rep{r}"))
                if not a:
                    continue
                extra.partial += a["partial"]
                extra.lost += a["lost"]
                if a.get("error"):
                    extra.errors.append(a["error"])
                for d, parts in a["parts"].items():
                    k = parts["n"]
                    n[d] = n.get(d, 0) + k
                    for p, ms in parts.items():
                        if p in ("n", "host_n"):
                            continue
                        # The host part is a mean over the SRBs QEMU recorded: weight it by them.
                        w = parts.get("host_n", k) if p == "host" else k
                        acc.setdefault(d, {}).setdefault(p, [0.0, 0])
                        acc[d][p][0] += ms * w
                        acc[d][p][1] += w
            if acc or extra.errors:
                extra.dirs = {d: dict({p: s / w / scale for p, (s, w) in ps.items() if w}, n=n[d]) for d, ps in acc.items()}
                out[v] = extra
        return out

    def attribution_text(self) -> list[str]:
        if not self.attribution:
            return []
        L = ["", "Latency attribution (trace = on): mean ms per request, guest tracepoints and host records",
             "(docs/experiments.md, \"Latency attribution\"); fio clat = fio's mean completion latency, fio = fio clat",
             "minus the traced parts, fio lat = fio's submission and completion latency (with libaio, waits for a tag",
             "happen inside io_submit, in fio's submission latency)."]
        dirs = []
        for job, d in self.figures.keys:
            if d not in dirs:
                dirs.append(d)
        for d in dirs:
            jobs = [j for j, dd in self.figures.keys if dd == d]
            L += ["", f"{d} (fio jobs: {', '.join(jobs)})",
                  f"  {'variant':<{self.w}} {'requests':>8} {'tag':>8} {'sched':>8} {'scsi':>8} {'host':>8} {'transprt':>8} "
                  f"{'device':>8} {'complete':>8} {'wake':>8} {'traced':>8} {'fio clat':>8} {'fio':>8} {'fio lat':>8}"]
            for v in self.variants:
                a = self.attribution.get(v)
                p = a.dirs.get(d) if a else None
                if not p:
                    continue
                traced = sum(p.get(k, 0.0) for k in attrib.PARTS + ("device",))
                clat = self.fio_clat(v, d)
                cells = [p.get(k) for k in ("tag", "sched", "scsi", "host", "transport", "device", "complete", "wake")]
                L.append(f"  {v:<{self.w}} {p['n']:>8} " + " ".join(f"{_f(c, 3):>8}" for c in cells) +
                         f" {_f(traced, 3):>8} {_f(clat, 3):>8} {_f(None if clat is None else clat - traced, 3):>8}"
                         f" {_f(self.fio_clat(v, d, 'tlat'), 3):>8}")
        bad = [(v, a.partial, a.lost) for v, a in self.attribution.items() if a.partial or a.lost]
        if bad:
            L.append("  left out: " + "; ".join(f"{v}: {p} requests seen in part, {l} events lost" for v, p, l in bad))
        for v, a in self.attribution.items():
            for e in a.errors:
                L.append(f"  {v}: a trace could not be read: {e}")
        return L

    def medians_text(self) -> list[str]:
        """Medians over repetitions and their ratios to the baseline's (what expectations
        and benchmarks compare: robust to one slow run)."""
        fig = self.figures
        if max((len(fig.get(v, j, d, "iops")) for v in self.variants for j, d in fig.keys), default=0) < 2:
            return []
        L = ["", f"Medians over repetitions (x = ratio to {self.baseline}'s median):"]
        for job, d in fig.keys:
            L.append(f"  {job} ({d})")
            base = {m: median(fig.get(self.baseline, job, d, m)) for m in ("iops", "lat", "p50", "p99")}
            for v in self.variants:
                cells = []
                for m, unit in (("iops", "IOPS"), ("lat", "ms clat"), ("p50", "ms p50"), ("p99", "ms p99")):
                    vals = fig.get(v, job, d, m)
                    if not vals:
                        continue
                    x = median(vals)
                    r = f" x{x / base[m]:.2f}" if base[m] and base[m] == base[m] and v != self.baseline else ""
                    cells.append(f"{_f(x, 1 if m == 'iops' else 3)} {unit}{r}")
                L.append(f"    {v:<{self.w}} " + ", ".join(cells))
        return L

    def first_io_text(self) -> list[str]:
        """Per variant, the median time from a run's start to fio's start: booted, or gone on
        from a snapshot (then with the one boot that made it)."""
        L = []
        for v in self.variants:
            sts = [st for vv, _, st in self.runs if vv == v and st and st.get("status") == "ok"]
            cells = []
            for start, what in (("boot", "boot"), ("snapshot", "from its snapshot")):
                vals = [float(x) for st in sts if st.get("start", "boot") == start
                        for x in [st.get("first_io")] if x is not None]
                if vals:
                    cells.append(f"{what} {median(vals):.1f} s ({len(vals)} run{'s' if len(vals) > 1 else ''})")
            boots = [float(x) for st in sts for x in [st.get("snapshot_boot")] if x is not None]
            if boots:
                cells.append(f"the boot its snapshot was saved from {boots[0]:.1f} s")
            if cells:
                L.append(f"  {v:<{self.w}} " + "; ".join(cells))
        return ["", "Boot to first I/O (seconds from a run's start to fio's start, median):"] + L if L else []

    def fio_clat(self, v: str, d: str, metric: str = "lat") -> float | None:
        """fio's mean completion latency (metric "lat"; "tlat": submission and completion) of
        a direction over its jobs, weighted by I/O, ms."""
        tot = n = 0.0
        for job, dd in self.figures.keys:
            if dd != d:
                continue
            lat = self.figures.get(v, job, d, metric)
            io = self.figures.get(v, job, d, "iops")
            if lat and io:
                tot += mean(lat) * mean(io)
                n += mean(io)
        return tot / n if n else None

    def _expectations(self) -> list[Outcome]:
        try:
            sp = specmod.load(self.spec_path)
            expect.check(sp, self._job(sp))
            verdicts.check(sp, list(verdicts.disk_luns(sp)),
                           {v: bool(self.vinfo[v].get("coverage")) if v in self.vinfo else True for v in sp.variants},
                           {v: bool(self.vinfo[v].get("lines")) if v in self.vinfo else True for v in sp.variants})
        except specmod.SpecError as err:
            raise ReportError(str(err)) from None
        out: list[Outcome] = []
        self.left_out: list[tuple[str, str, str]] = []      # (variant, expectation text, where): variants not run (--variants)
        sections = [("", sp.experiment)] + [(n, s) for n, s in sp.variants.items()]
        luns = verdicts.disk_luns(sp)
        for scope, sec in sections:
            for text, line in sec.expects:
                if verdicts.is_verdict(text):
                    out += self._verdict_outcomes(verdicts.parse(text, line, scope), luns, f"{self.spec_name}:{line}")
                    continue
                try:
                    e = expect.parse(text, line, scope)
                except expect.ExpectError as err:
                    raise ReportError(f"{sp.path}:{line}: {err}") from None
                targets = [scope] if scope else [v for v in self.variants if not (e.ratio and v == self.baseline)]
                for v in targets:
                    if v not in self.variants:
                        if v not in self.vinfo_all:
                            raise ReportError(f"{sp.path}:{line}: expectation about variant '{v}', which this "
                                              f"experiment does not have (it has: {' '.join(self.vinfo_all)})")
                        self.left_out.append((v, e.text, f"{self.spec_name}:{line}"))
                        continue
                    if v in self.away or (e.ratio and self.baseline in self.away):
                        self.not_here.append((v, e.text, f"{self.spec_name}:{line}"))
                        continue
                    out.append(expect.evaluate(e, v, self.baseline, self.figures,
                                               f"{self.spec_name}:{line}"))
        return out

    def _verdict_outcomes(self, vd: verdicts.Verdict, luns: dict[str, int], where: str) -> list[Outcome]:
        """A guest verdict judged in every run of each variant it is about (coverage.all:
        once, over every run of the experiment)."""
        if vd.key in verdicts.ALL_KEYS:
            if set(self.variants) != set(self.vinfo_all):
                self.left_out.append(("all variants", vd.text, where))   # judged on the whole suite only
                return []
            if self.away:
                self.not_here.append(("all variants", vd.text, where))
                return []
            every = [f for v in self.variants for f in self.run_facts[v]]
            return [verdicts.evaluate(vd, "all variants", every, luns, where)]
        targets = [vd.scope] if vd.scope else list(self.variants)
        out: list[Outcome] = []
        for v in targets:
            if v not in self.variants:
                self.left_out.append((v, vd.text, where))
                continue
            if v in self.away:
                self.not_here.append((v, vd.text, where))
                continue
            out.append(verdicts.evaluate(vd, v, self.run_facts[v], luns, where))
        return out

    def _job(self, sp: specmod.Spec) -> str:
        """The fio job the runs ran: the one of the folder's copy of the spec (a spec given
        with --spec judges the same runs), else the given spec's."""
        ran = os.path.join(self.dir, "spec.exp")
        if ran != self.spec_path and os.path.isfile(ran):
            try:
                return specmod.load(ran).experiment.get("fio", "")
            except specmod.SpecError:
                pass
        return sp.experiment.get("fio", "")

    # --- verdicts --------------------------------------------------------------------
    def failed_runs(self) -> list[tuple[str, int, RunStatus]]:
        return [(v, r, st) for v, r, st in self.runs if st and st.get("status") != "ok"]

    def missing_runs(self) -> list[tuple[str, int]]:
        return [(v, r) for v, r, st in self.runs if st is None]

    def failed_expectations(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.passed]

    def ok(self) -> bool:
        """Every run counted and every expectation holds; of a shard: every run of the
        shard counted (its expectations are judged once the shards are merged)."""
        if self.shard:
            return not self.failed_runs() and not self.missing_runs()
        return not self.failed_runs() and not self.missing_runs() and not self.failed_expectations()

    # --- the table -------------------------------------------------------------------
    def text(self) -> str:
        p = self.plan
        L = [f"Experiment {p['name']}: {p['description']}",
             f"{p['vm']}; {p['reps']} repetition(s) of about {p['fio_seconds']} s of fio; {p['scale_note']}"]
        L += self.shard_text()
        L.append("variants:")
        for v in self.variants:
            L.append(f"  {v:<{self.w}} {self.vinfo[v]['summary']}{'  (baseline)' if v == self.baseline else ''}")
        if self.facts:
            L.append("in the guest:")
            for v in self.variants:
                if v in self.facts:
                    L.append(f"  {v:<{self.w}} {self.facts[v]}")
        L.append(f"Mean over repetitions and its sample standard deviation; x = ratio to {self.baseline}'s mean.")
        L.append("clat = mean completion latency, p99 = its 99th percentile (median over repetitions); "
                 "MB/s = 10^6 bytes per second.")
        fig = self.figures
        for job, d in fig.keys:
            L.append("")
            L.append(f"{job} ({d})")
            L.append(f"  {'variant':<{self.w}} {'runs':>4} {'IOPS':>10} {'sd':>9} {'MB/s':>10} {'sd':>9} {'clat ms':>9} "
                     f"{'sd':>9} {'p99 ms':>9} {'IOPS x':>7} {'clat x':>7}   published")
            bi = mean(fig.get(self.baseline, job, d, "iops"))
            bl = mean(fig.get(self.baseline, job, d, "lat"))
            for v in self.variants:
                io, bw, lat = (fig.get(v, job, d, m) for m in ("iops", "bw", "lat"))
                if not io:
                    L.append(f"  {v:<{self.w}} {0:>4}   (no data)")
                    continue
                mi, mb, ml = mean(io), mean(bw), mean(lat)
                pub = []
                pa, pr = _parse_published(self.vinfo[v].get("published")), _parse_published(self.vinfo[v].get("published_ratio"))
                for met, name, unit in (("iops", "IOPS", " IOPS"), ("bw", "MB/s", " MB/s"), ("lat", "clat", " ms")):
                    if (job, d, met) in pa:
                        pub.append(pa[(job, d, met)] + unit)
                    if (job, d, met) in pr:
                        pub.append(f"{name} x{pr[(job, d, met)]}")
                L.append(f"  {v:<{self.w}} {len(io):>4} {_f(mi, 1):>10} {_f(sd(io), 1):>9} {_f(mb, 2):>10} {_f(sd(bw), 2):>9} "
                         f"{_f(ml, 3):>9} {_f(sd(lat), 3):>9} {_f(median(fig.get(v, job, d, 'p99')), 3):>9} "
                         f"{_f(mi / bi, 2) if bi > 0 else '-':>7} {_f(ml / bl, 2) if bl > 0 else '-':>7}   {', '.join(pub)}".rstrip())
        pubs = []
        for v in self.variants:
            for (job, d, met), val in _parse_published(self.vinfo[v].get("published_ratio")).items():
                if met not in ("iops", "bw", "lat"):
                    continue
                a, b = fig.get(v, job, d, met), fig.get(self.baseline, job, d, met)
                name = {"iops": "IOPS", "bw": "MB/s", "lat": "clat"}[met]
                meas = f"x{mean(a) / mean(b):.2f}" if a and b and mean(b) > 0 else "no data"
                pubs.append(f"  {job} ({d}) {name}, {v} / {self.baseline}: published x{val}, measured {meas}")
        if pubs:
            L += ["", f"Published against measured (ratio to {self.baseline}):"] + pubs
        L += self.medians_text()
        L += self.first_io_text()
        L += self.attribution_text()
        L += self.timeline_text() + self.coverage_text() + self.lines_text() + self.kernel_log_text()
        L += self.expectations_text()
        bad = self.failed_runs()
        if bad or self.missing_runs():
            L += ["", "Runs that did not count:"]
            L += [f"  {v}, repetition {r}: {st.get('why', 'failed')}" for v, r, st in bad]
            L += [f"  {v}, repetition {r}: not run (the experiment stopped before it)" for v, r in self.missing_runs()]
        return "\n".join(L) + "\n"

    def expectations_text(self) -> list[str]:
        if not (self.outcomes or self.left_out or self.not_here):
            return []
        if self.shard:
            L = ["", f"Expectations on the runs of this shard only (not its verdict: the merged report judges every "
                     "run of the plan; figures: medians over this shard's repetitions; guest verdicts: in each of its "
                     "runs):"]
        else:
            L = ["", "Expectations (figures: medians over repetitions; guest verdicts: in every run):"]
        L += ["  " + o.line() for o in self.outcomes]
        L += [f"  SKIP {v}: expect {t} ({w}): not judged: it is about variants this run left out (--variants)"
              for v, t, w in self.left_out]
        L += [f"  SKIP {v}: expect {t} ({w}): not judged in this shard: the runs it needs are in other shards"
              for v, t, w in self.not_here]
        return L

    def shard_text(self) -> list[str]:
        """Of a shard's folder: which shard, and where the plan's other runs are."""
        if not self.shard:
            return []
        k, n = self.shard["index"], self.shard["count"]
        total = len(self.runs) + len(self.elsewhere)
        if not self.elsewhere:
            return [f"Shard {k} of {n}: all {total} runs of the plan are in this folder"]
        L = [f"Shard {k} of {n}: {len(self.runs)} of the plan's {total} runs are in this folder; the others are "
             "elsewhere, in other shards (not missing):"]
        where = shardmod.assignment(self.variants, self.plan["reps"], n)
        others: dict[int, list[tuple[str, int]]] = {}
        for run in self.elsewhere:
            others.setdefault(where.get(run, 0), []).append(run)
        for s, runs in sorted(others.items()):
            L.append(f"  {f'shard {s} of {n}' if s else 'another shard'}: {shardmod.describe(runs)}")
        L.append("  (./hvstor report --merge joins the shards' folders into the report of the whole plan)")
        return L

    # --- timeline, coverage, the guest's log -------------------------------------------
    def timelines(self) -> dict[str, dict[int, list[dict[str, object]]]]:
        """Per variant and repetition, the host's timeline events as they happened."""
        out: dict[str, dict[int, list[dict[str, object]]]] = {}
        for v, r, st in self.runs:
            path = os.path.join(self.dir, "runs", v, f"rep{r}", "timeline.json")
            try:
                with open(path, encoding="utf-8") as f:
                    out.setdefault(v, {})[r] = json.load(f)
            except (OSError, ValueError):
                continue
        return out

    def timeline_text(self) -> list[str]:
        tl = self.timelines()
        if not tl:
            return []
        L = ["", "Timeline (host events, seconds after fio's start: planned -> done):"]
        for v, reps in tl.items():
            for r, events in sorted(reps.items()):
                done = ", ".join(f"{e['action']} {e['target']} {e['at']:g}->"
                                 f"{'-' if e['done_at'] is None else format(e['done_at'], '.1f')}"
                                 + ("" if e["result"] == "ok" else f" ({e['result']})") for e in events)
                L.append(f"  {v:<{self.w}} rep {r}: {done}")
        return L

    def coverage(self) -> dict[str, dict[str, list[str]]]:
        """Per variant (and "all variants"), hv_storvsc's functions that ran and did not."""
        out: dict[str, dict[str, list[str]]] = {}
        every: list[verdicts.RunFacts] = []
        for v in self.variants:
            runs = [f for f in self.run_facts[v] if f.coverage is not None]
            if runs:
                ran, missed = verdicts.coverage_union(runs)
                out[v] = {"ran": ran, "not_run": missed}
                every += runs
        if len(out) > 1:
            ran, missed = verdicts.coverage_union(every)
            out["all variants"] = {"ran": ran, "not_run": missed}
        return out

    def coverage_text(self) -> list[str]:
        cov = self.coverage()
        if not cov:
            return []
        L = ["", "Functions of hv_storvsc that ran (from the module's symbol table: inlined functions count in their callers):"]
        for v, c in cov.items():
            n = len(c["ran"]) + len(c["not_run"])
            L.append(f"  {v:<{self.w}} {len(c['ran'])} of {n} ({100 * len(c['ran']) / max(n, 1):.0f}%); "
                     f"not run: {', '.join(c['not_run']) or 'none'}")
        return L

    def _lines_unions(self) -> dict[str, verdicts.Lines]:
        """Per variant that counted lines (coverage = lines) its runs' counts, and over
        every run when more than one variant counted."""
        out: dict[str, verdicts.Lines] = {}
        for v in self.variants:
            u = verdicts.lines_union(self.run_facts[v])
            if u is not None:
                out[v] = u
        every = verdicts.lines_union([f for v in out for f in self.run_facts[v]])
        if len(out) > 1 and every is not None:
            out["all variants"] = every
        return out

    def lines(self) -> dict[str, dict[str, object]]:
        """Per variant that counted lines (and all variants), storvsc_drv.c's executable
        lines that ran in its runs, and those of its change."""
        out: dict[str, dict[str, object]] = {}
        for v, u in self._lines_unions().items():
            ran, missed = u.change()
            out[v] = {"file": u.file, "executable": len(u.counts), "ran": len(u.ran()),
                      "not_run": sorted(set(u.counts) - set(u.ran())),
                      "change": {"lines": len(ran) + len(missed), "ran": ran,
                                 "not_run": [[n, u.changed[n]] for n in missed]} if u.changed else None}
        return out

    def lines_text(self) -> list[str]:
        L: list[str] = []
        for v, u in self._lines_unions().items():
            n, got = len(u.counts), len(u.ran())
            L.append(f"  {v:<{self.w}} {got} of {n} lines ({100 * got / max(n, 1):.0f}%)")
            if u.changed:
                L.append(f"  {'':<{self.w}} {verdicts.describe_change(u)}")
        return (["", "Lines of storvsc_drv.c that ran (gcov; coverage = lines; runs' counts in runs/*/rep*/lines.json):"]
                + L) if L else []

    def kernel_log_text(self) -> list[str]:
        """What the guest kernel said that matters, per run: its I/O errors and storvsc's
        lines (the whole log is each run's dmesg.txt)."""
        L: list[str] = []
        for v in self.variants:
            for f in self.run_facts[v]:
                lines = [ln for ln in f.kernel_log if verdicts.IO_ERROR.search(ln) or _DRIVER_LINE.search(ln)]
                if lines:
                    L.append(f"  {v}, repetition {f.rep}: {len(lines)} line(s), e.g. " + " | ".join(lines[:3]))
        return (["", "The guest kernel's log (I/O errors and storvsc's lines; whole logs in runs/*/rep*/dmesg.txt):"]
                + L) if L else []

    # --- machine-readable ------------------------------------------------------------
    def summary(self) -> dict[str, object]:
        fig = self.figures
        figures: list[dict[str, object]] = []
        for job, d in fig.keys:
            for v in self.variants:
                for m in METRICS:
                    vals = fig.get(v, job, d, m)
                    if not vals:
                        continue
                    b = fig.get(self.baseline, job, d, m)
                    figures.append({
                        "job": job, "dir": d, "metric": m, "unit": METRICS[m][0], "variant": v,
                        "values": vals, "mean": mean(vals), "sd": _nan_none(sd(vals)), "median": median(vals),
                        "ratio_of_means": mean(vals) / mean(b) if b and mean(b) > 0 else None,
                    })
        return {
            "experiment": self.plan["name"], "description": self.plan["description"],
            "scale": self.plan["scale"], "repetitions": self.plan["reps"], "baseline": self.baseline,
            "variants": [{"name": v, "summary": self.vinfo[v]["summary"], "device": self.vinfo[v]["device"],
                          "guest": self.facts.get(v, ""), "runs_ok": fig.runs.get(v, 0)} for v in self.variants],
            "runs": [{"variant": v, "rep": r, "status": (st or {}).get("status", "not run"),
                      "why": (st or {}).get("why", ""), "seconds": (st or {}).get("seconds"),
                      "start": (st or {}).get("start", "boot"), "first_io": (st or {}).get("first_io"),
                      "snapshot_boot": (st or {}).get("snapshot_boot")} for v, r, st in self.runs],
            "figures": figures,
            "attribution": {v: a.as_json() for v, a in self.attribution.items()},
            "timeline": {v: {str(r): ev for r, ev in reps.items()} for v, reps in self.timelines().items()},
            "coverage": self.coverage(),
            "lines": self.lines(),
            "guest": {v: {str(f.rep): {"fio_errors": f.fio_errors, "fio_verify_failed": f.fio_verify_failed,
                                       "io_errors": len(f.io_error_lines()), "scsi_timeouts": f.counter("iotmo"),
                                       "scsi_errors": f.counter("ioerr"), "facts": f.values}
                          for f in self.run_facts[v]} for v in self.variants},
            "expectations": [{"variant": o.variant, "expect": o.expectation.text, "where": o.where,
                              "passed": o.passed, "figure": o.figure, "bound": o.expectation.describe_bound(),
                              "ratio": o.expectation.ratio, "detail": o.detail} for o in self.outcomes],
            "passed": self.ok(),
        } | self.shard_summary()

    def shard_summary(self) -> dict[str, object]:
        """summary.json's "shard" of a shard's folder (nothing otherwise)."""
        if not self.shard:
            return {}
        where = shardmod.assignment(self.variants, self.plan["reps"], self.shard["count"])
        return {"shard": {
            "index": self.shard["index"], "count": self.shard["count"],
            "runs": shardmod.run_docs([(v, r) for v, r, _ in self.runs]),
            "elsewhere": [{"variant": v, "rep": r, "shard": where.get((v, r))} for v, r in self.elsewhere],
            "expectations": "judged on this shard's runs only; the verdict is the merged report's",
            "not_judged_here": [{"variant": v, "expect": t, "where": w} for v, t, w in self.not_here]}}

    def junit(self) -> str:
        name = f"hvstor.{self.plan['name']}"
        suite = ET.Element("testsuite", name=name)
        tests = failures = skipped = 0
        for v, r, st in self.runs:
            tests += 1
            tc = ET.SubElement(suite, "testcase", classname=f"{name}.runs", name=f"{v} repetition {r}")
            if st is None:
                skipped += 1
                ET.SubElement(tc, "skipped", message="not run: the experiment stopped before it")
                continue
            if st.get("seconds") is not None:
                tc.set("time", f"{st['seconds']:.0f}")
            if st.get("status") != "ok":
                failures += 1
                f = ET.SubElement(tc, "failure", message=st.get("why", "failed"))
                f.text = st.get("why", "")
        for v, text, where in self.left_out:
            tests += 1
            skipped += 1
            tc = ET.SubElement(suite, "testcase", classname=f"{name}.expect", name=f"{v}: {text}")
            ET.SubElement(tc, "skipped", message=f"{where}: not judged: it is about variants this run left out (--variants)")
        for v, text, where in self.not_here:
            tests += 1
            skipped += 1
            tc = ET.SubElement(suite, "testcase", classname=f"{name}.expect", name=f"{v}: {text}")
            ET.SubElement(tc, "skipped", message=f"{where}: not judged in this shard: the runs it needs are in other shards")
        for o in self.outcomes:
            tests += 1
            tc = ET.SubElement(suite, "testcase", classname=f"{name}.expect", name=f"{o.variant}: {o.expectation.text}")
            out = ET.SubElement(tc, "system-out")
            out.text = o.line()
            if self.shard:          # judged once the shards are merged
                skipped += 1
                ET.SubElement(tc, "skipped", message="judged on the merged results of every shard; on this "
                              f"shard's runs only: {o.line()}")
            elif not o.passed:
                failures += 1
                f = ET.SubElement(tc, "failure", message=o.line())
                f.text = o.detail
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suite.set("skipped", str(skipped))
        root = ET.Element("testsuites", name="hvstor", tests=str(tests), failures=str(failures))
        root.append(suite)
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

    # --- plots -----------------------------------------------------------------------
    def plots(self, log: Log = print) -> list[str]:
        """The PNG plots (plots.py) in plots/, their scripts and data in plots/data/."""
        pdir = os.path.join(self.dir, "plots")
        shutil.rmtree(pdir, ignore_errors=True)
        os.makedirs(os.path.join(pdir, "data"))
        if not shutil.which("gnuplot"):
            log("gnuplot is missing: no plots (apt-get install gnuplot-nox)")
            return []
        try:
            return plotting.make(self, pdir)
        except plotting.PlotError as e:
            raise ReportError(str(e)) from None

    def write(self, log: Log = print) -> str:
        try:
            pngs = self.plots(log)
        except (ReportError, OSError) as e:      # no plots is no reason to lose the verdict
            log(f"no plots: {e}")
            pngs = []
        text = self.text()
        text += "\nPlots:\n" + "".join(f"  {p}\n" for p in sorted(pngs))
        text += f"Runs (header, fio.json, fio logs, console): {os.path.join(self.dir, 'runs')}\n"
        text += f"Summary: {os.path.join(self.dir, 'summary.json')}; JUnit: {os.path.join(self.dir, 'junit.xml')}\n"
        for fname, content in (("report.txt", text), ("summary.json", json.dumps(self.summary(), indent=1) + "\n"),
                               ("junit.xml", self.junit())):
            with open(os.path.join(self.dir, fname), "w", encoding="utf-8") as f:
                f.write(content)
        return text


def _nan_none(x: float) -> float | None:
    return None if x != x else x

