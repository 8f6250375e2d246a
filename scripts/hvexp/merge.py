"""./hvstor report --merge DIR... : the results folders of the shards of one plan
(./hvstor run --shard K/N) joined into one folder, whose report is the one of a run made in
one go (docs/experiments.md, "Shards").

Refused, with the reason: a folder that is not a shard's, shards of different project
versions, specs or plans, a run in two shards, a run of the plan in none."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

from . import shards as shardmod
from .report import PlanJson, ReportError, load_plan

# What plan.json says of one shard alone; the merged folder's plan.json is the whole plan's.
SHARD_KEYS = ("shard", "shard_runs")


class MergeError(ReportError):
    pass


@dataclass
class ShardFolder:
    dir: str
    plan: PlanJson
    shard: shardmod.Shard
    runs: list[shardmod.RunId]           # the shard's
    spec: bytes                          # its spec.exp

    def name(self) -> str:
        return f"{self.dir} (shard {self.shard.label()})"


def load(d: str) -> ShardFolder:
    """A shard's results folder, or MergeError saying why it is not one."""
    if not os.path.isdir(d):
        raise MergeError(f"{d}: no such folder")
    try:
        plan = load_plan(d)
    except ReportError as e:
        raise MergeError(f"{e}: not a shard's results folder") from None
    doc = plan.get("shard")
    if not doc or "shard_runs" not in plan or "fingerprint" not in plan or "runs" not in plan:
        raise MergeError(f"{d} is not a shard's results folder: its plan.json records no shard (a run made "
                         "without --shard, or a merged folder)")
    try:
        shard = shardmod.Shard(int(doc["index"]), int(doc["count"]))
        runs = shardmod.run_ids(plan["shard_runs"])
        shardmod.run_ids(plan["runs"])
        with open(os.path.join(d, "spec.exp"), "rb") as f:
            spec = f.read()
    except (KeyError, TypeError, ValueError) as e:
        raise MergeError(f"{d}/plan.json is damaged ({e!r}): not a shard's results folder") from None
    except OSError as e:
        raise MergeError(f"{d}: no spec.exp ({e.strerror}): not a shard's results folder") from None
    return ShardFolder(d, plan, shard, runs, spec)


def check_same_plan(folders: list[ShardFolder]) -> None:
    """One project version, one spec, one plan (fingerprint) across the folders."""
    first = folders[0]
    for f in folders[1:]:
        if f.plan.get("version") != first.plan.get("version"):
            raise MergeError(f"the folders come from different project versions: {first.plan.get('version')} in "
                             f"{first.name()}, {f.plan.get('version')} in {f.name()}")
    for f in folders[1:]:
        if f.plan["name"] != first.plan["name"] or f.spec != first.spec:
            raise MergeError(f"the folders ran different specs: {first.plan.get('spec', first.plan['name'])} in "
                             f"{first.name()}, {f.plan.get('spec', f.plan['name'])} in {f.name()}"
                             + ("" if f.spec == first.spec else " (their spec.exp texts differ)"))
    for f in folders[1:]:
        if f.plan["fingerprint"] != first.plan["fingerprint"]:
            raise MergeError(f"the folders ran different plans of {first.plan.get('spec', first.plan['name'])} "
                             f"(fingerprints differ): {_options_diff(first, f)}")


def _options_diff(a: ShardFolder, b: ShardFolder) -> str:
    oa: dict[str, Any] = dict(a.plan.get("options", {}))
    ob: dict[str, Any] = dict(b.plan.get("options", {}))
    diff = [f"{k} {oa.get(k)!r} in {a.name()}, {ob.get(k)!r} in {b.name()}"
            for k in sorted(set(oa) | set(ob)) if oa.get(k) != ob.get(k)]
    return "; ".join(diff) or f"{a.plan['fingerprint'][:12]} in {a.name()}, {b.plan['fingerprint'][:12]} in {b.name()}"


def owners(folders: list[ShardFolder]) -> dict[shardmod.RunId, ShardFolder]:
    """Each run of the plan and the folder that holds it; a run in two folders, or a run in
    none, is refused."""
    owner: dict[shardmod.RunId, ShardFolder] = {}
    dup: list[str] = []
    for f in folders:
        for run in f.runs:
            if run in owner:
                dup.append(f"{shardmod.describe([run])} in {owner[run].name()} and in {f.name()}")
            else:
                owner[run] = f
    if dup:
        raise MergeError("runs in two shards (duplicated): " + "; ".join(dup))
    plan = shardmod.run_ids(folders[0].plan["runs"])
    missing = [r for r in plan if r not in owner]
    if missing:
        given = ", ".join(f.shard.label() for f in folders)
        counts = {f.shard.count for f in folders}
        absent = sorted(set(range(1, max(counts) + 1)) - {f.shard.index for f in folders}) if len(counts) == 1 else []
        hint = f"; shard(s) {', '.join(f'{k}/{max(counts)}' for k in absent)} not given" if absent else ""
        raise MergeError(f"runs of the plan in none of the folders (missing): {shardmod.describe(missing)} "
                         f"(shards given: {given}{hint})")
    stray = [r for r in owner if r not in plan]
    if stray:
        raise MergeError(f"runs that are not the plan's: {shardmod.describe(stray)}")
    return owner


def _link_or_copy(src: str, dst: str) -> object:
    try:
        os.link(src, dst)
        return dst
    except OSError:                 # another file system, or no hard links there
        return shutil.copy2(src, dst)


def check_out(out: str, folders: list[ShardFolder]) -> None:
    o = os.path.realpath(out)
    for f in folders:
        d = os.path.realpath(f.dir)
        if o == d or o.startswith(d + os.sep) or d.startswith(o + os.sep):
            raise MergeError(f"--out {out}: it is, holds or lies in a folder to merge ({f.dir})")


def write(folders: list[ShardFolder], owner: dict[shardmod.RunId, ShardFolder], out: str) -> None:
    """The merged folder: spec.exp, plan.json of the whole plan, and runs/ of each shard
    (hard links where the file system allows, else copies)."""
    with open(os.path.join(out, "spec.exp"), "wb") as spec:
        spec.write(folders[0].spec)
    plan: dict[str, Any] = {k: v for k, v in folders[0].plan.items() if k not in SHARD_KEYS}
    plan["merged_from"] = [{"dir": os.path.abspath(f.dir), "shard": f.shard.label()} for f in folders]
    with open(os.path.join(out, "plan.json"), "w", encoding="utf-8") as doc:
        json.dump(plan, doc, indent=1)
    for (v, rep), src in sorted(owner.items()):
        run_dir = os.path.join(src.dir, "runs", v, f"rep{rep}")
        if os.path.isdir(run_dir):          # else the shard stopped before it: not run
            shutil.copytree(run_dir, os.path.join(out, "runs", v, f"rep{rep}"), copy_function=_link_or_copy)


def merge(dirs: list[str], out: str | None = None) -> tuple[list[ShardFolder], dict[shardmod.RunId, ShardFolder]]:
    """The shard folders, checked: one plan, every run of it in exactly one of them, and
    none of them the merged folder out."""
    folders = [load(d) for d in dirs]
    check_same_plan(folders)
    owner = owners(folders)
    if out:
        check_out(out, folders)
    return folders, owner
