import gzip
import os
from pathlib import Path

import pytest

from hvexp import attrib

SCSI = ("host_no=0 channel=0 id=0 lun=0 data_sgl=1 prot_sgl=0 prot_op=SCSI_PROT_NORMAL driver_tag=0 "
        "scheduler_tag=-1 cmnd=({op} lba={lba} txlen={n} protect=0 raw=2a 00)")
DONE = " result=(driver=DRIVER_OK host=DID_OK message=COMMAND_COMPLETE status=SAM_STAT_GOOD)"


def line(ts: float, event: str, body: str, cpu: int = 0) -> str:
    return f"             fio-187     [00{cpu}] .N...     {ts:.6f}: {event}: {body}"


def chain(t: float, rw: str, sector: int, n: int, op: str, insert: bool = True, ioprio: str = "") -> list[str]:
    """A request's events, 6.1's format (6.12's adds the I/O priority)."""
    b = f"8,0 {rw} {sector} + {n} [fio]"
    rq = f"8,0 {rw} {n * 512} () {sector} + {n}{ioprio} [fio]"
    out = [line(t, "block_bio_queue", b), line(t + 0.0001, "block_getrq", b)]
    if insert:
        out.append(line(t + 0.0002, "block_rq_insert", rq))
    out += [line(t + 0.0010, "block_rq_issue", rq),
            line(t + 0.0011, "scsi_dispatch_cmd_start", SCSI.format(op=op, lba=sector, n=n)),
            line(t + 0.0041, "scsi_dispatch_cmd_done", SCSI.format(op=op, lba=sector, n=n) + DONE, cpu=1),
            line(t + 0.0042, "block_rq_complete", f"8,0 {rw} () {sector} + {n}{ioprio} [0]", cpu=1)]
    return out


def test_parts_of_complete_requests() -> None:
    lines = chain(10.0, "WS", 0, 16, "WRITE_10") + chain(10.1, "R", 4096, 8, "READ_10", insert=False,
                                                              ioprio=" none,0,0")
    lines.append(line(10.2, "block_bio_queue", "8,0 R 99 + 8 [fio]"))      # merged away: never completes
    reqs, partial = attrib.parse_guest(lines)
    assert partial == 1
    got = attrib.attribute(reqs)
    for d in ("write", "read"):
        p = got[d]
        assert p["n"] == 1
        assert p["tag"] == pytest.approx(0.1)
        assert p["sched"] == pytest.approx(0.9)
        assert p["scsi"] == pytest.approx(0.1)
        assert p["device"] == pytest.approx(3.0)
        assert p["complete"] == pytest.approx(0.1)


def test_interleaved_requests_on_one_sector_pair_in_order() -> None:
    a, b = chain(1.0, "W", 8, 8, "WRITE_10"), chain(1.002, "W", 8, 8, "WRITE_10")
    merged = sorted(a + b, key=lambda ln: float(ln.split(":")[0].split()[-1]))
    reqs, partial = attrib.parse_guest(merged)
    assert partial == 0 and len(reqs) == 2
    assert all(attrib.parts_of(r)["device"] == pytest.approx(0.003) for _, r in reqs)


def test_host_records_split_the_device_time() -> None:
    host = ["18876@100.000000:hvstor_storvsp_srb_submit relid 1 id 0x10081 lun 0 opcode 0x2a 8192 bytes",
            "18876@100.000500:hvstor_storvsp_srb_submit relid 2 id 0x10081 lun 0 opcode 0x28 4096 bytes",
            "18876@100.002000:hvstor_storvsp_srb_complete relid 1 id 0x10081 srb status 0x01 scsi status 0x00 8192 bytes",
            "18876@100.003000:hvstor_storvsp_srb_complete relid 2 id 0x10081 srb status 0x01 scsi status 0x00 4096 bytes",
            "18876@100.004000:hvstor_storvsp_srb_submit relid 1 id 0x10082 lun 0 opcode 0x12 36 bytes",
            "18876@100.004100:hvstor_storvsp_srb_complete relid 1 id 0x10082 srb status 0x01 scsi status 0x00 36 bytes"]
    h = attrib.parse_host(host)
    assert h["write"] == [pytest.approx(0.002)] and h["read"] == [pytest.approx(0.0025)]
    reqs, _ = attrib.parse_guest(chain(10.0, "WS", 0, 16, "WRITE_10"))
    p = attrib.attribute(reqs, h)["write"]
    assert p["host"] == pytest.approx(2.0) and p["transport"] == pytest.approx(1.0) and "device" not in p


def test_run_folder(tmp_path: Path) -> None:
    r = tmp_path / "results"
    r.mkdir()
    with gzip.open(r / "trace.txt.gz", "wt") as f:
        f.write("# tracer: nop\n" + "\n".join(chain(5.0, "W", 0, 8, "WRITE_10")) + "\n")
    (r / "trace-stats").write_text("cpu0 overrun: 3 dropped events: 0 \ncpu1 overrun: 0 dropped events: 2 \n")
    a = attrib.run_attribution(str(tmp_path))
    assert a is not None
    assert a["lost"] == 5 and a["partial"] == 0 and a["parts"]["write"]["n"] == 1
    assert attrib.run_attribution(str(tmp_path / "nothing")) is None


def test_two_jobs_reading_the_same_sectors_are_told_apart_by_task() -> None:
    a = chain(1.0, "R", 64, 8, "READ_10")
    # A second job queues the same sector 5 ms later; its request is allocated at once.
    b = [line(1.00005, "block_bio_queue", "8,0 R 64 + 8 [fio]").replace("fio-187", "fio-188"),
         line(1.00006, "block_getrq", "8,0 R 64 + 8 [fio]").replace("fio-187", "fio-188")]
    lines = sorted(a + b, key=lambda ln: float(ln.split(":")[0].split()[-1]))
    reqs, partial = attrib.parse_guest(lines)
    assert len(reqs) == 1 and partial == 1
    assert attrib.parts_of(reqs[0][1])["tag"] == pytest.approx(0.0001)
