"""A spec's timeline and guest verdicts end to end (./hvstor run): medium errors on reads
from 2 s after fio's start until 5 s, a disk plugged at 6 s and grown at 7 s, a guest command
at 3 s. The host drives its events over QMP at their times and records them; the guest sees
the errors (fio fails, the kernel logs them) and the new disk; the verdicts judge all of it
and coverage counts the functions of hv_storvsc that ran. A second run of the same spec
whose verdict cannot hold (no I/O error) must fail with exit status 1, naming it."""

import json
import os
from typing import Any, Dict, List

from conftest import HANG_GUARD, Checks, hvstor

SPEC = """\
[experiment]
description = medium errors on a timeline
vcpus = 2
mem = 512M
repetitions = 1
kernel = debian-6.12
coverage = functions
timeout = {guard}
fio = <<END
[global]
direct=1
time_based=1
runtime=8
[r]
ioengine=libaio
iodepth=4
rw=randread
bs=4k
size=8M
END
timeline = <<END
2s   fault     disk0  error=medium,ops=read,lba=0-16383
5s   fault     disk0  none
3s   guest     cat /sys/block/$DISK0_NAME/device/timeout
6s   hot-add   spare
7s   capacity  spare  2G
END
expect = fio.errors > 0
expect = guest.io_errors > 0
expect = log ~ Medium Error
expect = scsi.timeouts = 0
expect = spare.present = yes
expect = disk0.present = yes
expect = coverage.storvsc_queuecommand = ran
expect = coverage.storvsc_host_reset_handler = not-run
{extra}

[disk]
backend = ram
size = 64M

[disk spare]
backend = null
size = 1G
plug = timeline

[variant hv]
"""


def run_spec(tmp: str, name: str, extra: str) -> "tuple[int, List[str], str]":
    path = os.path.join(tmp, f"{name}.exp")
    with open(path, "w", encoding="utf-8") as f:
        f.write(SPEC.format(guard=int(HANG_GUARD), extra=extra))
    out = os.path.join(tmp, name)
    rc, lines = hvstor("run", path, "--out", out)
    return rc, lines, out


def test_timeline_and_verdicts(tmp_path: Any, checks: Checks) -> None:
    rc, lines, out = run_spec(str(tmp_path), "ok", "")
    checks.that(rc == 0, f"the experiment passed (exit {rc})")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary: Dict[str, Any] = json.load(f)
    events = summary["timeline"].get("hv", {}).get("1", [])
    checks.that([(e["action"], e["target"], e["result"]) for e in events] ==
                [("fault", "disk0", "ok"), ("fault", "disk0", "ok"), ("hot-add", "spare", "ok"),
                 ("capacity", "spare", "ok")], f"every host event happened, in time order ({events})")
    checks.that(all(e["done_at"] >= e["at"] for e in events), "none before its time")
    guest = summary["guest"]["hv"]["1"]
    checks.that(guest["fio_errors"] > 0 and guest["io_errors"] > 0, f"the guest saw the errors ({guest})")
    checks.that(guest["facts"].get("lun.1.present") == "yes", "and the disk plugged at 6 s")
    checks.that(all(e["passed"] for e in summary["expectations"]), "every verdict held")
    cov = summary["coverage"].get("hv", {})
    checks.that("storvsc_probe" in cov.get("ran", []) and "storvsc_remove" in cov.get("not_run", []),
                f"coverage lists the functions that ran and did not ({cov})")
    with open(os.path.join(out, "runs", "hv", "rep1", "results", "timeline-guest.log"), encoding="utf-8") as f:
        checks.that("at 3s" in f.read(), "the guest ran its command")
    with open(os.path.join(out, "report.txt"), encoding="utf-8") as f:
        report = f.read()
    checks.that("Timeline (host events" in report and "Functions of hv_storvsc that ran" in report,
                "the report shows the timeline and the coverage")


def test_a_verdict_that_does_not_hold_fails(tmp_path: Any, checks: Checks) -> None:
    rc, lines, _ = run_spec(str(tmp_path), "bad", "expect = guest.io_errors = 0")
    checks.that(rc == 1, f"the experiment fails its expectation (exit {rc})")
    checks.that(any(ln.startswith("FAIL hv: expect guest.io_errors = 0") for ln in lines),
                "the failed verdict is named with the run that broke it")
