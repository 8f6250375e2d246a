"""Shards with real boots (./hvstor run --shard K/N, ./hvstor report --merge): a small spec,
two variants (stock, storvsc_max_hw_queues=1) x 2 repetitions x 3 s of fio, run as 2 shards
side by side (as two CI runners would) and merged, against the same spec run in one go. The
figures differ from run to run; what must agree is the structure: the same runs, the same
table (jobs, columns, a row per variant with its count of runs), the same expectations with
the same verdicts, the same summary.json keys and runs, the same JUnit test cases, and the
same exit status. Each shard's own report says which shard it is and where the other runs
are, and its verdict is its runs'."""

import json
import os
import re
import threading
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Tuple

from conftest import HANG_GUARD, Checks, file_lines, hvstor

SPEC = f"""\
[experiment]
description = shards of one plan
vcpus = 2
mem = 512M
repetitions = 2
kernel = debian-6.12
coverage = functions
timeout = {HANG_GUARD:g}
fio = <<END
[global]
direct=1
time_based=1
runtime=3
[r]
ioengine=libaio
iodepth=4
rw=randread
bs=4k
size=8M
END
expect = fio.errors = 0
expect = guest.io_errors = 0
expect = scsi.timeouts = 0
expect = disk0.present = yes
expect = coverage.storvsc_queuecommand = ran
expect = r.read.iops > 0

[disk]
backend = ram
size = 64M

[variant stock]

[variant hwq1]
params = storvsc_max_hw_queues=1
expect = r.read.iops ratio > 0
"""


def run_shards(spec: str, tmp: str) -> List[Tuple[int, List[str]]]:
    """./hvstor run --shard k/2 for k = 1, 2 at once, each into tmp/s<k>."""
    got: List[Tuple[int, List[str]]] = [(-1, []), (-1, [])]

    def one(k: int) -> None:
        got[k - 1] = hvstor("run", spec, "--out", os.path.join(tmp, f"s{k}"), "--shard", f"{k}/2")

    threads = [threading.Thread(target=one, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def tables(report: List[str]) -> List[str]:
    """The report's tables, a job's each: its title, its column header, and per row the
    variant, its count of runs and its count of columns (the figures left out)."""
    out: List[str] = []
    inside = False
    for ln in report:
        if re.match(r"^\S.* \((read|write|trim)\)$", ln):
            inside = True
            out.append(ln)
        elif not ln.strip():
            inside = False
        elif inside:
            cells = ln.split()
            out.append(ln if cells[0] == "variant" else f"{cells[0]} {cells[1]} ({len(cells)} columns)")
    return out


def structure(d: str) -> Dict[str, Any]:
    """What a report must share with another of the same plan, whatever the figures."""
    report = file_lines(os.path.join(d, "report.txt"))
    with open(os.path.join(d, "summary.json"), encoding="utf-8") as f:
        summary: Dict[str, Any] = json.load(f)
    suite = ET.parse(os.path.join(d, "junit.xml")).getroot().find("testsuite")
    return {
        "tables": tables(report),
        "expectations": [m.group(1, 2, 3) for m in (re.match(r"^  (PASS|FAIL|SKIP) (\S+): expect (.*?) \(", ln)
                                                    for ln in report) if m],
        "summary keys": sorted(summary),
        "runs": [(r["variant"], r["rep"], r["status"]) for r in summary["runs"]],
        "verdicts": [(e["variant"], e["expect"], e["passed"]) for e in summary["expectations"]],
        "passed": summary["passed"],
        "coverage": sorted(summary["coverage"]),
        "guest": {v: sorted(reps) for v, reps in summary["guest"].items()},
        "junit": [(c.get("name"), c.find("failure") is not None) for c in suite.iter("testcase")] if suite else None,
        "run folders": sorted(os.path.relpath(os.path.join(p, n), d) for p, dirs, _ in os.walk(os.path.join(d, "runs"))
                              for n in dirs if n.startswith("rep")),
    }


def test_two_shards_merged_are_the_run_in_one_go(tmp_path: Any, checks: Checks) -> None:
    tmp = str(tmp_path)
    spec = os.path.join(tmp, "shards.exp")
    with open(spec, "w", encoding="utf-8") as f:
        f.write(SPEC)
    for k, (rc, _) in enumerate(run_shards(spec, tmp), 1):
        checks.that(rc == 0, f"shard {k} of 2 ran its runs (exit {rc})")
    shard_report(tmp, checks)
    rc_merge, out = hvstor("report", "--merge", os.path.join(tmp, "s1"), os.path.join(tmp, "s2"),
                           "--out", os.path.join(tmp, "merged"))
    checks.has(out, r"merged 2 shard\(s\) \(1/2, 2/2\) of shards: 4 runs in ", "the merge joined both shards")
    rc_one, _ = hvstor("run", spec, "--out", os.path.join(tmp, "one"))
    checks.that(rc_one == 0, f"the spec run in one go passed (exit {rc_one})")
    checks.that(rc_merge == rc_one, f"the merged shards' verdict is the one of the run in one go "
                                    f"(exit {rc_merge} and {rc_one})")
    merged, one = structure(os.path.join(tmp, "merged")), structure(os.path.join(tmp, "one"))
    for key, value in one.items():
        checks.that(merged[key] == value, f"the same {key}: {merged[key]} against {value}")
    checks.that(len(one["runs"]) == 4 and len(one["tables"]) == 4 and len(one["verdicts"]) == 13,
                f"the report has the runs, the rows and the verdicts of the plan ({len(one['runs'])} runs, "
                f"{len(one['tables'])} table lines, {len(one['verdicts'])} verdicts)")


def shard_report(tmp: str, checks: Checks) -> None:
    """Each shard's report says which shard it is and where the plan's other runs are."""
    for k, elsewhere in ((1, "shard 2 of 2: stock rep 2, hwq1 rep 2"), (2, "shard 1 of 2: stock rep 1, hwq1 rep 1")):
        report = file_lines(os.path.join(tmp, f"s{k}", "report.txt"))
        checks.has(report, rf"^Shard {k} of 2: 2 of the plan's 4 runs are in this folder", f"shard {k} says so")
        checks.has(report, rf"^  {elsewhere}$", f"and names the runs in the other shard ({elsewhere})")
        checks.lacks(report, r"^Runs that did not count|repetition [0-9]+: not run",
                     f"shard {k} counts none of them as missing")
        with open(os.path.join(tmp, f"s{k}", "plan.json"), encoding="utf-8") as f:
            plan = json.load(f)
        checks.that(plan.get("shard") == {"index": k, "count": 2} and len(plan.get("runs", [])) == 4,
                    f"shard {k}'s plan.json records the shard and the whole plan's runs")
