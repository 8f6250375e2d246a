"""Experiments that start from a snapshot (snapshot = on): the variant boots once, up to its
disks being ready, and is saved there; each of its three repetitions goes on from that
snapshot in a QEMU of its own, on a copy of the scratch image as it was at the save, and
runs a fio crc32c write-and-verify job on a disk behind a disk model. Checked: one boot for
the three runs (the guest's boot id is the same in all three, and each run's console starts
with that boot's), every run ok with fio verified, the report's boot-to-first-I/O line, and
QEMU's state and the image copies gone once the experiment is done."""

import json
import re
from pathlib import Path
from typing import List

from conftest import HANG_GUARD, Checks, file_lines, hvstor

SPEC = f"""\
[experiment]
description = repetitions that go on from a snapshot
kernel      = debian-6.12
vcpus       = 2
mem         = 512M
repetitions = 3
snapshot    = on
timeout     = {HANG_GUARD:g}
fio = <<END
[global]
ioengine=libaio
direct=1

[verify]
rw=randwrite
bs=4k
iodepth=8
size=16M
verify=crc32c
END

[disk]
file = scratch
size = 1G
perf = latency=1ms

[variant hv]
"""


def test_repetitions_from_one_snapshot(tmp_path: Path, checks: Checks) -> None:
    spec, res = tmp_path / "snap.exp", tmp_path / "res"
    spec.write_text(SPEC)
    rc, out = hvstor("run", str(spec), "--out", str(res))
    checks.that(rc == 0, "the experiment finished")
    checks.count(out, r"hv: booting once, up to its disks being ready", 1, "the variant booted once")
    checks.count(out, r"hv, repetition [123]/3: going on from its snapshot", 3, "and each repetition went on from it")
    runs = [res / "runs" / "hv" / f"rep{r}" for r in (1, 2, 3)]
    sts = [_json(r / "run.json") for r in runs]
    checks.that(all(st.get("status") == "ok" for st in sts), f"every run counted: {[st.get('why') for st in sts]}")
    checks.that(all(st.get("start") == "snapshot" for st in sts), "each run says it went on from the snapshot")
    checks.that(all(isinstance(st.get("first_io"), float) and isinstance(st.get("snapshot_boot"), float) for st in sts),
                "each run has its time to first I/O and the snapshot's boot time")
    ids = [_facts(r).get("boot.id") for r in runs]
    print(f"  boot ids: {ids}")
    checks.that(len(set(ids)) == 1 and ids[0], "the three runs ran in one guest boot (one boot id)")
    for r in runs:
        console, dmesg = file_lines(str(r / "console.log")), file_lines(str(r / "dmesg.txt"))
        checks.that(_first(console, "HVSTOR-GUEST-READY") < _first(console, "HVSTOR-SNAPSHOT-POINT")
                    < _first(console, "going on from the snapshot"),
                    f"{r.name}'s console starts with the saved boot and goes on after the snapshot point")
        checks.that(_first(dmesg, "Linux version") == 0, f"{r.name}'s kernel log starts with the boot's")
        checks.that(_facts(r).get("fio.exit") == "0", f"{r.name}: fio wrote and verified with no error")
    report = file_lines(str(res / "report.txt"))
    checks.has(report, r"^  hv +from its snapshot [0-9.]+ s \(3 runs\); the boot its snapshot was saved from [0-9.]+ s$",
               "the report gives the boot to first I/O from the snapshot and of the boot")
    snap = res / "runs" / "hv" / "snapshot"
    left = sorted(p.name for p in snap.iterdir()) if snap.is_dir() else []
    checks.that("state" not in left and not any(n.endswith(".img") for n in left) and "boot.txt" in left,
                f"the snapshot's state and images are gone, its logs kept: {left}")


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _facts(run: Path) -> dict:
    out = {}
    for ln in file_lines(str(run / "results" / "verdicts")):
        k, eq, v = ln.partition("=")
        if eq:
            out[k] = v
    return out


def _first(lines: List[str], text: str) -> int:
    """Index of the first line holding text; past the end when none does."""
    return next((i for i, ln in enumerate(lines) if text in ln), len(lines) + 1)
