"""The performance model in a real guest (stock 6.12, TCG), Premium SSD P10 without
bursting: 500 IOPS, lognormal read/write latency with p50 2 ms.

 1. 4 KiB random read at QD32 measures 500 IOPS within 3%. The depth keeps a backlog of
    about 60 ms at the cap, so a guest slowed by a busy host still keeps the disk saturated
    (at QD8 one run measured 479 with two other processes on the two cores).
 2. QD1 p50 latency within 10% of the profile's 2 ms as the model drew it (the timeline's
    model_lat_ms: lat_ms less the time the host's timer thread woke late, which grows on a
    busy host), with the profile's bursting left on: without it a QD1 reader at 2 ms sits
    right at P10's 500 IOPS and the cap, not the latency, sets the pace (as on Azure). The
    guest sees more: under TCG, waking the idle guest for each completion adds 0.15-1 ms,
    more on a busy host. That is printed here and checked only for its sign; its size
    depends on the machine's speed and belongs to ./hvstor bench.
 3. A QD1 write behind a QD64 random-read load: with one FIFO it waits behind the queued
    reads (Little's law: about 64 / 500 IOPS = 128 ms); with per-direction queues far less.
Every boot has "quiet" on the kernel command line: the guest's time goes to fio."""

import json
import re
import statistics
from typing import Any, Dict, Iterator, List, Optional, Tuple

from conftest import Checks, Controller, Disk, Guest, Run, file_lines, guest

P10 = "profile=premium-p10,burst=off"
FIO_COMMON = "--filename=/dev/sda --direct=1 --ioengine=libaio --bs=4k --size=1G --output-format=json"
QD32 = f"""echo FIO-JSON-BEGIN qd32
fio --name=qd32 {FIO_COMMON} --rw=randread --iodepth=32 --time_based --runtime=20 --ramp_time=3
echo FIO-JSON-END"""
QD1 = f"""echo FIO-JSON-BEGIN qd1
fio --name=qd1 {FIO_COMMON} --rw=randread --iodepth=1 --time_based --runtime=15
echo FIO-JSON-END"""
HOL = f"""echo FIO-JSON-BEGIN hol
fio --name=hogs {FIO_COMMON} --rw=randread --iodepth=64 --time_based --runtime=15 --ramp_time=3 \\
    --name=wal {FIO_COMMON} --offset=2G --rw=write --iodepth=1 --time_based --runtime=15 --ramp_time=3
echo FIO-JSON-END"""
# A kernel message logged while fio ran comes as a whole line of its own, maybe inside a
# block: it is not part of the JSON.
KERNEL_LINE = re.compile(r"^\[ *[0-9]+\.[0-9]{6}\] ")


def fio_blocks(lines: List[str]) -> Iterator[Tuple[str, Any]]:
    """(name, fio's JSON) of each block between 'FIO-JSON-BEGIN name' and 'FIO-JSON-END'."""
    cur: Optional[List[str]] = None
    name = ""
    for line in lines:
        if line.startswith("FIO-JSON-BEGIN "):
            cur, name = [], line.split(" ", 1)[1]
        elif line == "FIO-JSON-END" and cur is not None:
            yield name, json.loads("\n".join(cur))
            cur = None
        elif cur is not None and not KERNEL_LINE.match(line):
            cur.append(line)


def figure(lines: List[str], block: str, job: str, field: str) -> float:
    """One figure of a fio job in the output (0 when it is not there, which no check
    takes): read.iops, write.clat_mean_us, read.clat_p50_us..."""
    direction, what = field.split(".", 1)
    for name, doc in fio_blocks(lines):
        for j in doc["jobs"] if name == block else []:
            if j["jobname"] != job:
                continue
            d = j[direction]
            if what == "iops":
                return float(d["iops"])
            if what == "clat_mean_us":
                return float(d["clat_ns"]["mean"]) / 1000
            if what == "clat_p50_us":
                return float(d["clat_ns"]["percentile"]["50.000000"]) / 1000
            raise ValueError(f"unknown field {field}")
    return 0.0


def p10_guest(cmd: str, perf: str) -> Guest:
    """Stock 6.12, 2 vCPUs, an 8 GiB null disk with the disk model `perf` on controller s."""
    return guest(kernel="debian-6.12", vcpus=2, quiet=True, controllers=[Controller("s")],
                 disks=[Disk({"id": "d0", "backend": "null", "size": "8G", "perf": perf}, lun=0)],
                 cmd=cmd)


def timeline_medians(path: str) -> Tuple[float, float, float]:
    """From the model's timeline, over the full intervals of the QD1 run (200 IOPS or more;
    the last line is cut short): the medians of the p50 as drawn and as served, and of how
    late the host's timer woke on average, in us. One interval holds about 450 draws, whose
    p50 alone strays by 2% (one standard deviation); the median over the run's intervals far
    less."""
    lines: List[Dict[str, Any]] = [json.loads(x) for x in file_lines(path) if x.strip()][:-1]
    full = [ln for ln in lines if ln["iops"] >= 200]

    def med(values: List[float]) -> float:
        return round(statistics.median(values) * 1000, 1) if values else 0.0
    return (med([ln["model_lat_ms"]["p50"] for ln in full]), med([ln["lat_ms"]["p50"] for ln in full]),
            med([ln["late_ms"]["mean"] for ln in full]))


def test_qd32_iops_and_qd1_latency(run: Run, checks: Checks, tmp_path: Any) -> None:
    r = run(p10_guest(QD32, P10))
    checks.boot_ok(r)
    iops = figure(r.output, "qd32", "qd32", "read.iops")
    timeline = str(tmp_path / "timeline.jsonl")
    r = run(p10_guest(QD1, f"profile=premium-p10,timeline={timeline}"))
    checks.boot_ok(r, "guest command finished (QD1)")
    p50 = figure(r.output, "qd1", "qd1", "read.clat_p50_us")
    model_p50, served_p50, late = timeline_medians(timeline)
    print(f"  measured: QD32 {iops:.1f} IOPS (want 500 +- 3%); QD1 p50: model {model_p50} us (want 2000 +- 10%), "
          f"served {served_p50} us (timer {late} us late on average), guest {p50:.1f} us", flush=True)
    checks.that(485 <= iops <= 515, f"QD32 IOPS within 3% of 500 ({iops:.1f})")
    checks.that(1800 <= model_p50 <= 2200,
                f"QD1 p50 as the model drew it within 10% of the profile's 2 ms ({model_p50} us)")
    checks.that(p50 > 0 and p50 >= served_p50,
                f"QD1 p50 in the guest: at least what the disk served ({p50:.1f} >= {served_p50} us)")


def test_head_of_line_blocking(run: Run, checks: Checks) -> None:
    """The QD1 writer's mean completion latency behind the QD64 readers, per queue discipline."""
    wal: Dict[str, float] = {}
    for queue in ("fifo", "per-direction"):
        r = run(p10_guest(HOL, f"{P10},queue={queue}"))
        checks.boot_ok(r, f"guest command finished ({queue})")
        wal[queue] = figure(r.output, "hol", "wal", "write.clat_mean_us")
    fifo, perdir = wal["fifo"], wal["per-direction"]
    print(f"  measured: QD1 write behind QD64 reads: FIFO {fifo:.1f} us, per-direction {perdir:.1f} us "
          "(Little: ~128000 us)", flush=True)
    checks.that(0.75 * 130000 <= fifo <= 1.25 * 130000,
                f"FIFO: the write waits behind the reads (Little's law within 25%) ({fifo:.1f} us)")
    checks.that(0 < perdir < fifo / 5, f"per-direction: far less (under a fifth of FIFO) ({perdir:.1f} us)")
