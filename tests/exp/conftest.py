"""Shared pieces of the experiment runner's tests: scripts/ on the import path, and a
builder of results folders as ./hvstor run leaves them (plan.json, spec.exp, runs/), of a
whole plan or of one shard of it (./hvstor run --shard K/N)."""

import json
import os
import sys
from pathlib import Path
from typing import Protocol

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from hvexp import shards  # noqa: E402  pylint: disable=wrong-import-position

SPEC = """\
[experiment]
description = test experiment
repetitions = 3
{exp_extra}
fio = <<END
[global]
runtime=5
[wal]
rw=write
[hogs]
rw=randread
END

[disk]
backend = null
size = 4G

[variant stock]
{stock_extra}

[variant shared]
patch = none
{shared_extra}
"""


# A job's figures in a run: (job, dir, iops, clat_mean_ms, p99_ms).
JobFigures = tuple[str, str, float, float, float]
# {variant: [rows per repetition]}; None: the repetition failed.
RunFigures = dict[str, list[list[JobFigures] | None]]


class MakeResults(Protocol):
    def __call__(self, figures: RunFigures, spec: str | None = None, reps: int = 3, scale: float = 1.0,
                 baseline: str = "stock", name: str = "res", shard: tuple[int, int] | None = None,
                 version: str = "v1") -> str: ...


def spec_text(exp_extra: str = "", stock_extra: str = "", shared_extra: str = "") -> str:
    return SPEC.format(exp_extra=exp_extra, stock_extra=stock_extra, shared_extra=shared_extra)


def fio_json(jobs: list[JobFigures]) -> str:
    """jobs: list of (name, dir, iops, clat_mean_ms, p99_ms) -> fio's JSON text."""
    out = []
    for name, d, iops, lat, p99 in jobs:
        j: dict[str, object] = {"jobname": name}
        for dd in ("read", "write", "trim"):
            j[dd] = {"total_ios": 0, "iops": 0, "bw_bytes": 0, "clat_ns": {"mean": 0}}
        j[d] = {"total_ios": int(iops * 5), "iops": iops, "bw_bytes": iops * 8192,
                "clat_ns": {"mean": lat * 1e6, "percentile": {"50.000000": lat * 1e6, "99.000000": p99 * 1e6}}}
        out.append(j)
    return "fio: a warning before the document\n" + json.dumps({"fio version": "fio-3.33", "jobs": out})


def plan_doc(variants: list[str], spec: str, reps: int, scale: float, baseline: str, version: str,
             shard: tuple[int, int] | None) -> dict[str, object]:
    """plan.json as the runner writes it (runner.plan_json and plan_identity), of the whole
    plan or of shard (K, N) of it."""
    options: dict[str, object] = {"reps": reps, "runtime": None, "variants": variants, "trace": False}
    plan: dict[str, object] = {
        "name": "t", "description": "test", "scale": scale, "scale_note": "n", "reps": reps,
        "fio_seconds": 5, "log_avg": 1000, "vm": "debian-6.1, 2 vCPUs, 1G", "baseline": baseline,
        "variants": [{"name": v, "summary": f"{v} summary", "device": "hv-storvsc", "published": "",
                      "published_ratio": ""} for v in variants],
        "version": version, "spec_sha256": shards.text_digest(spec), "options": options,
        "fingerprint": shards.fingerprint(spec, options, version),
        "runs": shards.run_docs(shards.plan_runs(variants, reps))}
    if shard:
        plan["shard"] = {"index": shard[0], "count": shard[1]}
        plan["shard_runs"] = shards.run_docs(shards.shard_runs(variants, reps, shards.Shard(*shard)))
    return plan


@pytest.fixture
def results_dir(tmp_path: Path) -> MakeResults:
    """make(figures, spec=...) -> a results folder (tmp_path/name). figures: {variant:
    [[(job, dir, iops, lat, p99), ...] per repetition]}; a repetition given as None failed,
    one missing was not run. shard=(K, N): the folder of shard K of N, with the runs of
    figures that are that shard's."""

    def make(figures: RunFigures, spec: str | None = None, reps: int = 3, scale: float = 1.0,
             baseline: str = "stock", name: str = "res", shard: tuple[int, int] | None = None,
             version: str = "v1") -> str:
        d = tmp_path / name
        d.mkdir()
        text = spec or spec_text()
        (d / "spec.exp").write_text(text)
        variants = list(figures)
        plan = plan_doc(variants, text, reps, scale, baseline, version, shard)
        mine = set(shards.shard_runs(variants, reps, shards.Shard(*shard))) if shard else None
        (d / "plan.json").write_text(json.dumps(plan))
        for v, runs in figures.items():
            for rep, rows in enumerate(runs, 1):
                if mine is not None and (v, rep) not in mine:
                    continue
                rd = d / "runs" / v / f"rep{rep}"
                (rd / "results").mkdir(parents=True)
                if rows is None:
                    (rd / "run.json").write_text(json.dumps({"status": "failed", "why": "the boot failed with status 124", "seconds": 3}))
                    continue
                (rd / "results" / "fio.json").write_text(fio_json(rows))
                (rd / "results" / "header").write_text("device=hv-storvsc\nkernel=6.1.0-57-amd64\ndisk.sda.hw_queues=2\n")
                (rd / "run.json").write_text(json.dumps({"status": "ok", "why": "", "seconds": 42.0}))
        return str(d)

    return make
