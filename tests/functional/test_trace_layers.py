"""`-trace 'hvstor_*'` on a boot shows events from every layer of the device model.

A stock 6.12 guest writes a little through a modelled disk (Premium SSD P10 without bursting,
time-scale=8: about 62 IOPS, so fio at queue depth 8 is held by the cap) on a RAM backend.
QEMU's trace log (-D) must then hold at least one event of each layer: the VMBus server,
storvsp, the SCSI disk, the backend and the disk model, each failure naming the layer that
stayed silent. The disk's events carry one disk id (include/thread/hvstor/trace_events.h),
the same in the SCSI, backend and model layers."""

import re
from typing import Any, Dict, List, Optional

from conftest import Checks, Disk, Run, count, file_lines, guest, matches

PERF = "profile=premium-p10,burst=off,time-scale=8"

GUEST = r"""
D=$(ls /sys/block | grep '^sd' | head -n 1)
fio --name=trace --filename=/dev/$D --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite \
    --bs=4k --size=4M --io_size=256k --verify=crc32c --verify_fatal=1 --output-format=normal >/tmp/fio.out 2>&1 \
  || { cat /tmp/fio.out; echo "FIO-FAILED"; exit 1; }
echo "FIO-OK"
"""

# Each layer, and what in the trace log is one of its events.
LAYERS: Dict[str, str] = {
    "vmbus (the VMBus server)": r"hvstor_vmbus_\w+ ",
    "storvsp (the storage protocol)": r"hvstor_storvsp_\w+ ",
    "scsi (the SCSI disk)": r"hvstor_scsi_\w+ ",
    "backend (the RAM backend)": r"hvstor_backend_\w+ ",
    "perf (the disk model)": r"hvstor_perf_\w+ ",
}


def test_trace_layers(run: Run, checks: Checks, tmp_path: Any) -> None:
    trace = str(tmp_path / "trace.log")
    r = run(guest(kernel="debian-6.12", vcpus=2,
                  disks=[Disk({"id": "d0", "backend": "ram", "size": "64M", "perf": PERF}, lun=0)],
                  qemu_args=["-trace", "hvstor_*", "-D", trace], cmd=GUEST))
    checks.boot_ok(r)
    checks.has(r.output, "^FIO-OK$", "fio wrote and verified its data")
    lines = file_lines(trace)
    print(f"  trace: {len(lines)} lines", flush=True)
    layer_checks(lines, checks)
    event_checks(lines, checks)


def layer_checks(lines: List[str], checks: Checks) -> None:
    """At least one event of every layer; the silent ones named."""
    counts = {layer: count(lines, pattern) for layer, pattern in LAYERS.items()}
    for layer, n in counts.items():
        print(f"  {layer}: {n} events", flush=True)
    silent = [layer for layer, n in counts.items() if n == 0]
    checks.that(not silent, "trace: every layer traced" + (f"; no event from {', '.join(silent)}" if silent else ""))


def disk_ids(lines: List[str], event: str) -> List[str]:
    """The disk ids of every `event` line."""
    rx = re.compile(rf"hvstor_{event} disk (\d+)")
    return [m.group(1) for m in (rx.search(ln) for ln in lines) if m]


def event_checks(lines: List[str], checks: Checks) -> None:
    """The guest's writes in each layer below storvsp, with one disk id for all of them."""
    checks.that(matches(lines, r"hvstor_scsi_command disk \d+ lun 0 opcode 0x2a "),
                "trace: the SCSI disk's WRITE commands (opcode 0x2a, LUN 0)")
    checks.that(matches(lines, r"hvstor_scsi_status disk \d+ opcode 0x2a status 0x00 "),
                "trace: their GOOD status")
    checks.that(matches(lines, r"hvstor_backend_submit disk \d+ op 1 offset \d+ 4096 bytes"),
                "trace: 4 KiB writes submitted to the RAM backend")
    checks.that(matches(lines, r"hvstor_backend_complete disk \d+ op 1 result 0"), "trace: the writes completed")
    checks.that(matches(lines, r"hvstor_perf_queued disk \d+: queued \d+ ns"), "trace: the model's time queued")
    checks.that(matches(lines, r"hvstor_perf_throttled disk \d+ held by limiter 1 for [1-9]\d* ns"),
                "trace: writes held by the disk's IOPS cap")
    scsi: Optional[str] = next(iter(disk_ids(lines, "scsi_command")), None)
    others = set(disk_ids(lines, "backend_submit") + disk_ids(lines, "perf_queued"))
    checks.that(scsi is not None and others == {scsi},
                f"trace: one disk id in the SCSI, backend and model layers (scsi {scsi}, others {sorted(others)})")
