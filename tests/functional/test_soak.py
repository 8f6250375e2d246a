"""Soak: 100 cycles of rmmod/modprobe hv_storvsc on stock 6.12 with 2 vCPUs (a primary
channel and a subchannel each time), with a verified write and read after each load.

Every unload closes both channels and tears down their ring GPADLs, every load opens them
again: nothing may hang, and QEMU's threads and file descriptors are the same after cycle 100
as after cycle 10. The guest pauses twice by writing a block that a stall fault holds; the
host waits until the disk's statistics show the write held, counts, then releases it by
setting the fault again (which holds the next pause), so both counts are taken with the guest
idle. The only clock is the hang guard."""

import os
import re
from typing import Dict, Tuple

from conftest import Boot, Checks, Disk, Machine, guest, qemu_threads, set_fault, stats
from guestlib import LUN_HELPERS

PAUSE_LBA = 131064  # the last 4 KiB of the 64 MiB disk: only the pauses write there
FAULT = f"stall=hold,ops=write,lba={PAUSE_LBA}-{PAUSE_LBA + 7}"

GUEST = r"""
pause() { # held by the host's stall fault until it has counted
  echo "SOAK-PAUSE $1"
  dd if=/dev/zero of=/dev/sda bs=4096 seek=PAUSE_BLOCK count=1 oflag=direct 2>/dev/null
  echo "SOAK-RESUMED $1"
}
# The disk's probe (its partition scan opens /dev/sda) may still hold the module after
# /dev/sda appeared: rmmod waits until nothing does.
unused() { [ "$(cat /sys/module/hv_storvsc/refcnt)" = 0 ]; }
head -c 65536 /dev/urandom >/tmp/pattern
i=1
while [ $i -le 100 ]; do
  wait_for "hv_storvsc to be unused before unload $i" unused
  rmmod hv_storvsc || { echo "RMMOD-FAILED $i"; exit 1; }
  modprobe hv_storvsc || { echo "MODPROBE-FAILED $i"; exit 1; }
  wait_for "/dev/sda after load $i" [ -b /dev/sda ]
  dd if=/tmp/pattern of=/dev/sda bs=65536 seek=$i count=1 oflag=direct 2>/dev/null \
    && dd if=/dev/sda of=/tmp/back bs=65536 skip=$i count=1 iflag=direct 2>/dev/null \
    && cmp -s /tmp/pattern /tmp/back || { echo "IO-FAILED $i"; exit 1; }
  [ $i = 10 ] && pause 10
  i=$((i + 1))
done
echo "CHANNELS $(ls /sys/block/sda/mq | wc -l)"
pause 100
echo "SOAK-DONE"
""".replace("PAUSE_BLOCK", str(PAUSE_LBA // 8))


def counts_at_pause(m: Machine, at: int) -> Tuple[int, int]:
    """QEMU's threads and open file descriptors once the guest's pause `at` is held; then
    releases it (setting the fault again holds the next pause)."""
    m.wait_console(re.compile(f"^SOAK-PAUSE {at}$"))
    m.wait_until(lambda: stats(m, "d0")["stalled"] == 1, f"the write of pause {at} to be held")
    assert m.pid is not None
    counted = (len(qemu_threads(m.pid)), len(os.listdir(f"/proc/{m.pid}/fd")))
    print(f"  counts at {at}: threads {counted[0]}, fds {counted[1]}", flush=True)
    set_fault(m, "d0", FAULT)
    return counted


def test_soak(boot: Boot, checks: Checks) -> None:
    m = boot(guest(kernel="debian-6.12", vcpus=2,
                   disks=[Disk({"id": "d0", "backend": "ram", "size": "64M", "fault": FAULT}, lun=0)],
                   cmd=LUN_HELPERS + GUEST))
    counts: Dict[int, Tuple[int, int]] = {at: counts_at_pause(m, at) for at in (10, 100)}
    r = m.finish()
    checks.boot_ok(r)
    checks.has(r.output, "^SOAK-DONE$", "100 unload/load cycles, each with verified I/O")
    checks.has(r.output, "^CHANNELS 2$", "the driver opened 2 channels at the end")
    checks.that(counts[10] == counts[100],
                "QEMU's thread and fd counts: the same after 100 cycles as after 10 "
                f"(threads, fds: {counts[10]} and {counts[100]})")
