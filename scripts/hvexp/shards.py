"""Shards of an experiment: which runs (variant x repetition) a shard K of N boots, the
plan's fingerprint and the project's version, recorded in plan.json so that the shards'
folders can be joined again (merge.py, ./hvstor report --merge; docs/experiments.md,
"Shards")."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Optional, TypedDict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RunId = tuple[str, int]          # (variant, repetition)


class RunDoc(TypedDict):
    """A run of the plan in plan.json."""
    variant: str
    rep: int


class ShardDoc(TypedDict):
    """plan.json's "shard": this folder is shard `index` of `count`."""
    index: int
    count: int


@dataclass(frozen=True)
class Shard:
    index: int                   # K: 1 to count
    count: int                   # N

    def label(self) -> str:
        return f"{self.index}/{self.count}"

    def as_json(self) -> ShardDoc:
        return {"index": self.index, "count": self.count}


class ShardError(ValueError):
    pass


def parse(text: str) -> Shard:
    """'K/N' -> Shard; K from 1 to N."""
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", text.strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ShardError(f"wants K/N with 1 <= K <= N (shard K of N), got '{text}'")
    return Shard(int(m.group(1)), int(m.group(2)))


def plan_runs(order: list[str], reps: int) -> list[RunId]:
    """Every run of a plan in the order an experiment boots them: repetition-major, the
    baseline first (A1 B1 A2 B2 ...)."""
    return [(v, rep) for rep in range(1, reps + 1) for v in order]


def assignment(order: list[str], reps: int, count: int) -> dict[RunId, int]:
    """The shard (1 to count) of each run: the runs taken variant by variant (A1 A2 A3 B1
    B2 B3 ...) are dealt to the shards in turn. Each variant's repetitions land on
    min(reps, count) different shards, so every shard holds every variant when there are
    at least as many repetitions as shards, and shard sizes differ by one at most. (Dealing
    the repetition-major order A1 B1 A2 B2 ... instead would give each shard one variant
    whenever the count of variants is a multiple of the count of shards.)"""
    variant_major = [(v, rep) for v in order for rep in range(1, reps + 1)]
    return {run: i % count + 1 for i, run in enumerate(variant_major)}


def shard_runs(order: list[str], reps: int, shard: Shard) -> list[RunId]:
    """The runs of shard K of N, in the order they boot (repetition-major)."""
    where = assignment(order, reps, shard.count)
    return [r for r in plan_runs(order, reps) if where[r] == shard.index]


def run_docs(runs: list[RunId]) -> list[RunDoc]:
    return [{"variant": v, "rep": r} for v, r in runs]


def run_ids(docs: list[RunDoc]) -> list[RunId]:
    return [(d["variant"], int(d["rep"])) for d in docs]


def describe(runs: list[RunId]) -> str:
    """'stock rep 1, shared rep 2'."""
    return ", ".join(f"{v} rep {r}" for v, r in runs)


def project_version(root: str = ROOT) -> str:
    """`git describe --always --dirty` of the project when it is a git checkout of its own,
    else its VERSION file, else meson.build's project version."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=False)
        if top.returncode == 0 and os.path.realpath(top.stdout.strip()) == os.path.realpath(root):
            r = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty"], capture_output=True,
                               text=True, check=False)
            if r.returncode == 0 and r.stdout.strip():
                return r.stdout.strip()
    except OSError:                 # no git
        pass
    try:
        with open(os.path.join(root, "VERSION"), encoding="utf-8") as f:
            v = f.read().strip()
        if v:
            return v
    except OSError:
        pass
    try:
        with open(os.path.join(root, "meson.build"), encoding="utf-8") as f:
            m = re.search(r"project\([^)]*?version\s*:\s*'([^']+)'", f.read(), re.S)
        if m:
            return m.group(1)
    except OSError:
        pass
    return "unknown"


def file_digest(path: Optional[str]) -> Optional[str]:
    """The SHA-256 of a file given on the command line (a patch, a kernel), None for a name."""
    if not path or not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fingerprint(spec_text: str, options: dict[str, object], version: str) -> str:
    """A hash of what decides a plan: the spec's text as run, the options that change the
    plan (plan.json's "options") and the project's version."""
    doc = json.dumps({"spec": spec_text, "options": options, "version": version}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
