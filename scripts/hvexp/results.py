"""Figures of an experiment: per run from fio's JSON, per variant over repetitions."""

import json
import math
import os
from collections.abc import Sequence
from typing import Any, TypedDict

DIRECTIONS = ("read", "write", "trim")
# metric -> (unit, description); values are reported scaled back by the time scale.
METRICS = {
    "iops": ("IOPS", "I/O per second"),
    "bw": ("MB/s", "10^6 bytes per second"),
    "lat": ("ms", "mean completion latency"),
    "tlat": ("ms", "mean total latency: submission and completion"),
    "p50": ("ms", "median completion latency (the highest among the job's clones)"),
    "p99": ("ms", "99th percentile completion latency (the highest among the job's clones)"),
}
RATE_METRICS = frozenset(["iops", "bw"])


class Row(TypedDict):
    """One job name and direction of one run: numjobs clones added up, as measured (ns,
    bytes/s)."""
    job: str
    dir: str
    ios: int
    iops: float
    bw_bytes: float
    clat_mean_ns: float
    lat_mean_ns: float | None
    clat_p50_ns: float | None
    clat_p99_ns: float | None


class ResultError(Exception):
    pass


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def sd(xs: Sequence[float]) -> float:
    """Sample standard deviation; nan below two values."""
    if len(xs) < 2:
        return float("nan")
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def median(xs: Sequence[float]) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def load_fio_json(path: str) -> dict[str, Any]:
    """fio's JSON output; fio may print warnings before the document."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise ResultError(f"cannot read {path}: {e.strerror}") from None
    start = text.find("\n{") + 1 if not text.startswith("{") else 0
    if not text.startswith("{") and start == 0:
        raise ResultError(f"{path} holds no JSON document")
    try:
        doc: dict[str, Any] = json.JSONDecoder().raw_decode(text[start:])[0]     # text after it is ignored
        return doc
    except json.JSONDecodeError as e:
        raise ResultError(f"{path}: fio's JSON is not whole ({e.msg} at line {e.lineno})") from None


def _pct(d: dict[str, Any], key: float) -> float | None:
    for field in ("clat_ns", "lat_ns"):         # lat_percentiles=1 puts them under lat_ns
        p = (d.get(field) or {}).get("percentile") or {}
        for k, v in p.items():
            try:
                if abs(float(k) - key) < 1e-6:
                    return float(v)
            except (TypeError, ValueError):
                continue
    return None


def summarize(fio: dict[str, Any]) -> list[Row]:
    """Rows of one run: one per job name and direction that did I/O, numjobs clones added
    up (IOPS and bandwidth summed, mean latency weighted by I/O count, percentiles the
    highest clone's). Values are as measured (not scaled): ns, bytes/s."""
    jobs = fio.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ResultError("fio's JSON has no jobs")
    order: list[str] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for j in jobs:
        name = j.get("jobname", "?")
        if name not in groups:
            order.append(name)
            groups[name] = []
        groups[name].append(j)
    rows: list[Row] = []
    for name in order:
        for d in DIRECTIONS:
            parts = [g.get(d) or {} for g in groups[name]]
            ios = sum(int(p.get("total_ios", 0)) for p in parts)
            if ios <= 0:
                continue
            lat = sum(float((p.get("clat_ns") or {}).get("mean", 0)) * int(p.get("total_ios", 0)) for p in parts) / ios
            tlat = sum(float((p.get("lat_ns") or {}).get("mean", 0)) * int(p.get("total_ios", 0)) for p in parts) / ios
            p50 = [v for v in (_pct(p, 50.0) for p in parts) if v is not None]
            p99 = [v for v in (_pct(p, 99.0) for p in parts) if v is not None]
            rows.append({
                "job": name, "dir": d, "ios": ios,
                "iops": sum(float(p.get("iops", 0)) for p in parts),
                "bw_bytes": sum(float(p.get("bw_bytes", 0)) for p in parts),
                "clat_mean_ns": lat, "lat_mean_ns": tlat or None,
                "clat_p50_ns": max(p50) if p50 else None,
                "clat_p99_ns": max(p99) if p99 else None,
            })
    return rows


def metric_value(row: Row, metric: str, scale: float) -> float | None:
    """A row's metric in report units, scaled back by the experiment's time scale."""
    if metric == "iops":
        return row["iops"] * scale
    if metric == "bw":
        return row["bw_bytes"] * scale / 1e6
    if metric == "lat":
        return row["clat_mean_ns"] / scale / 1e6
    if metric == "tlat":
        tlat = row.get("lat_mean_ns")
        return None if not tlat else tlat / scale / 1e6
    pct = {"p50": row.get("clat_p50_ns"), "p99": row.get("clat_p99_ns")}[metric]
    return None if pct is None else pct / scale / 1e6


class Figures:
    """Per variant, job, direction and metric: the values of each repetition."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale          # the default; add_run() may give a variant's own
        self.values: dict[tuple[str, str, str, str], list[float]] = {}    # (variant, job, dir, metric) -> [values]
        self.keys: list[tuple[str, str]] = []     # (job, dir) in first-seen order
        self.runs: dict[str, int] = {}            # variant -> count of runs with data

    def add_run(self, variant: str, rows: list[Row], scale: float | None = None) -> None:
        scale = self.scale if scale is None else scale
        self.runs[variant] = self.runs.get(variant, 0) + 1
        for r in rows:
            key = (r["job"], r["dir"])
            if key not in self.keys:
                self.keys.append(key)
            for m in METRICS:
                v = metric_value(r, m, scale)
                if v is not None:
                    self.values.setdefault((variant, r["job"], r["dir"], m), []).append(v)

    def get(self, variant: str, job: str, d: str, metric: str) -> list[float]:
        return self.values.get((variant, job, d, metric), [])


def load_run_dir(run_dir: str) -> list[Row]:
    """Rows of one run folder (runs/<variant>/rep<N>), or raise ResultError."""
    return summarize(load_fio_json(os.path.join(run_dir, "results", "fio.json")))
