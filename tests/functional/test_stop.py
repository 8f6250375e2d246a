"""Stopped means stopped: QMP `stop` while the guest's fio verify run has I/O in flight.

fio writes with crc32c verification on a RAM disk and reads it all back; a stall fault
holds its 1000th read, so the run waits for that read and a completion is owed when the
host stops the VM. While the VM is stopped the host takes a snapshot of all guest RAM,
releases the held read over QMP, waits for the disk to let go of it, and takes a second
snapshot: the two must be byte-identical. The released read must not reach the storage
(which would copy the data into the guest's buffer) before the VM runs, and its completion
may reach the ring and the guest's interrupt only then. A disk plugged and unplugged while
stopped (QMP device_add, device_del) changes nothing either: a third snapshot is the same.
After `cont` the read completes and fio finishes its run and its verification without an
error.

No step is sized to how long anything takes: the host waits for the read to be held, and
for it to be released, by asking the disk; the pause between the snapshots only gives a
device that ignores the stop time to write, and a slow machine only lengthens it."""

import hashlib
import os
import time
from typing import Any, List

from conftest import Boot, Checks, Disk, Machine, guest, set_fault, stats

GUEST = r"""
fio --name=stop --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite \
    --bs=4k --size=32M --verify=crc32c --verify_fatal=1 >/tmp/fio.out 2>&1 \
  && echo "FIO-OK" || echo "FIO-FAILED"
sed 's/^/FIO: /' /tmp/fio.out
"""

D0 = "/machine/peripheral/d0"
MEM = 512 << 20
# Guest RAM as pmemsave reads it, without the legacy VGA and BIOS window (devices' MMIO).
RANGES = [(0, 0xA0000), (0x100000, MEM - 0x100000)]
# Between the snapshots, after the held read was released: time for a device that ignores
# the stop to write its completion. Not a bound: nothing waits for it to be enough.
SETTLE = 3.0


def snapshot(m: Machine, path: Any) -> str:
    """SHA-256 of guest RAM (RANGES), saved by QMP pmemsave into `path` and removed."""
    h = hashlib.sha256()
    for i, (start, size) in enumerate(RANGES):
        f = f"{path}.{i}"
        m.qmp("pmemsave", val=start, size=size, filename=f)
        with open(f, "rb") as data:
            for chunk in iter(lambda: data.read(1 << 20), b""):
                h.update(chunk)
        os.unlink(f)
    return h.hexdigest()


def test_stop(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    m = boot(guest(vcpus=2, mem="512M", cmd=GUEST,
                   disks=[Disk({"id": "d0", "backend": "ram", "size": "64M",
                                "fault": "stall=hold,ops=read,every=1000,count=1"})]))
    m.wait_until(lambda: stats(m, "d0")["stalled"] == 1, "the 1000th read (fio's verification), held by the stall fault")
    m.qmp("stop")
    status = m.qmp("query-status")["status"]
    first = snapshot(m, tmp_path / "ram1")
    set_fault(m, D0, "none")
    m.wait_until(lambda: stats(m, "d0")["stalled"] == 0, "the held read released")
    time.sleep(SETTLE)
    second = snapshot(m, tmp_path / "ram2")
    plug_and_unplug(m)
    third = snapshot(m, tmp_path / "ram3")
    still = m.qmp("query-status")["status"]
    m.qmp("cont")
    r = m.finish()
    print(f"host: status {status}, then {still}; RAM {first[:16]}, {second[:16]}, {third[:16]}", flush=True)
    checks.that(status == "paused" and still == "paused", "the VM stayed stopped for the snapshots")
    checks.that(first == second, "guest RAM did not change while the VM was stopped")
    checks.that(first == third, "guest RAM did not change when a disk was plugged and unplugged while stopped")
    checks.boot_ok(r)
    guest_checks(r.output, checks)


def plug_and_unplug(m: Machine) -> None:
    """device_add and device_del of a disk while stopped: both return (the removal's
    DEVICE_DELETED comes), and the guest's rescan notices wait for cont."""
    m.qmp("device_add", driver="hv-disk", id="d1", bus="scsi0.0", lun=1, backend="null", size=1 << 20)
    m.qmp("device_del", id="d1")
    m.event_wait("DEVICE_DELETED", {"data": {"device": "d1"}})


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^FIO-OK$", "fio finished after cont")
    checks.has(out, r"^FIO: stop: \(groupid=0, jobs=1\): err= 0", "fio: no error")
    checks.lacks(out, r"^FIO: .*(verify failed|bad magic|bad header)", "fio: no verification failure")
