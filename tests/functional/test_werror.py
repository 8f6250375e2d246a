"""rerror= and werror= on a drive= disk, as virtio-blk honours them, on stock 6.12.

The disk's drive is raw over blkdebug over a file: a write of sector 800 fails once, a write
of sector 2400 fails once, every read of sector 1600 fails. With werror=stop the first
failed write stops the VM (BLOCK_IO_ERROR, status io-error) and holds the request; on
`cont` it starts again, succeeds, and the data is there. With rerror=report the failed read
reaches the guest as an I/O error and the VM goes on. The second failed write is held too;
the disk is then unplugged while the VM is stopped: the held write is answered with its
error (the unplug does not wait for a `cont`), and after `cont` the guest sees it fail.
Every wait ends with its event or the boot, and the guest waits for the host (on its console)
before the write that stops the VM again; no clock decides."""

import os
from typing import Any, Dict

from conftest import Boot, Checks, Disk, Machine, guest

GUEST = r"""
D=sda
head -c 4096 /dev/urandom >/tmp/b
dd if=/tmp/b of=/dev/$D bs=4096 seek=100 count=1 oflag=direct 2>/dev/null && echo "WRITE1-OK" || echo "WRITE1-FAILED"
dd if=/dev/$D of=/tmp/r bs=4096 skip=100 count=1 iflag=direct 2>/dev/null
cmp -s /tmp/b /tmp/r && echo "WRITE1-LANDED"
dd if=/dev/$D of=/dev/null bs=4096 skip=200 count=1 iflag=direct 2>/dev/null && echo "READ-OK" || echo "READ-FAILED"
echo "READ-DONE"
# The host looks at the VM's state before the next write can stop it.
read -r go </dev/ttyS0
dd if=/tmp/b of=/dev/$D bs=4096 seek=300 count=1 oflag=direct 2>/dev/null && echo "WRITE2-OK" || echo "WRITE2-FAILED"
echo "ALL-DONE"
"""


def blockdevs(image: str) -> list:
    rules = [{"event": "write_aio", "iotype": "write", "errno": 5, "sector": 800, "once": True},
             {"event": "write_aio", "iotype": "write", "errno": 5, "sector": 2400, "once": True},
             {"event": "read_aio", "iotype": "read", "errno": 5, "sector": 1600}]
    return [{"driver": "file", "node-name": "proto", "filename": image},
            {"driver": "blkdebug", "node-name": "dbg", "image": "proto", "inject-error": rules},
            {"driver": "raw", "node-name": "dev", "file": "dbg"}]


def test_werror_stop_and_rerror_report(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    image = os.path.join(str(tmp_path), "disk.raw")
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    m = boot(guest(kernel="debian-6.12", vcpus=2, blockdevs=blockdevs(image), cmd=GUEST,
                   disks=[Disk({"id": "d0", "drive": "dev", "werror": "stop", "rerror": "report"})]))
    seen = host_side(m)
    r = m.finish()
    checks.boot_ok(r)
    out = r.output
    checks.that(seen["stop1"] == "io-error", f"the failed write stopped the VM ({seen['stop1']})")
    checks.that(seen["event1"].get("operation") == "write" and seen["event1"].get("action") == "stop",
                f"BLOCK_IO_ERROR names the write and the stop ({seen['event1']})")
    checks.that("WRITE1-OK" in out and "WRITE1-LANDED" in out, "after cont the held write ran again and landed")
    checks.that("READ-FAILED" in out, "rerror=report: the failed read reached the guest as an error")
    checks.that(seen["running_after_read"], "the failed read did not stop the VM")
    checks.that(seen["stop2"] == "io-error", f"the second failed write stopped the VM ({seen['stop2']})")
    checks.that(seen["deleted"], "the disk unplugged while its write was held (DEVICE_DELETED, no cont needed)")
    checks.that("WRITE2-FAILED" in out, "the held write of the unplugged disk failed in the guest")


def host_side(m: Machine) -> Dict[str, Any]:
    seen: Dict[str, Any] = {}
    seen["event1"] = m.event_wait("BLOCK_IO_ERROR")["data"]
    m.event_wait("STOP")
    seen["stop1"] = m.qmp("query-status")["status"]
    m.qmp("cont")
    m.wait_console("READ-DONE")
    seen["running_after_read"] = m.qmp("query-status")["status"] == "running"
    m.console_input("go\n")
    m.event_wait("BLOCK_IO_ERROR", match={"data": {"operation": "write"}})
    m.event_wait("STOP")
    seen["stop2"] = m.qmp("query-status")["status"]
    m.device_del("d0")
    seen["deleted"] = True
    m.qmp("cont")
    return seen
