"""hv-storvsc,iothread=io0 on stock 6.12 with 4 vCPUs (a primary and 3 subchannels): every
channel's worker turns in the IOThread, none has a thread of its own.

LUN 0 is a file disk, LUN 1 a qcow2 image through drive= in the same IOThread. fio crc32c
verifies both, 4 jobs on 4 CPUs. The host then counts QEMU's threads named hvstor-ch* (a
channel worker's name: there must be none), reads the channels' statistics and adds a disk on
LUN 2 (the rescan runs through the primary in the IOThread). Then hv_storvsc is unloaded and
loaded again: every channel closes (its watch leaves the IOThread) and opens again, and both
disks read back what they held. Host and guest take turns through console markers; the only
clock is the hang guard."""

import os
import re
import subprocess
from typing import Any, Dict, List

from conftest import Boot, Checks, Controller, Disk, Machine, guest, matches, qemu_threads, stats
from guestlib import LUN_HELPERS

GUEST = r"""
verify() { # name device fio-args...
  n=$1 dev=$2; shift 2
  fio --name=$n --filename=/dev/$dev --direct=1 --ioengine=libaio --iodepth=16 --numjobs=4 \
      --offset_increment=48M --size=48M --cpus_allowed=0-3 --cpus_allowed_policy=split \
      --verify=crc32c --verify_fatal=1 --group_reporting --output-format=normal "$@" >/tmp/$n.out 2>&1 \
    || { cat /tmp/$n.out; echo "FIO-FAILED $n"; exit 1; }
  grep -E "err=" /tmp/$n.out
}
sums() { echo "$(dd if=/dev/$(lun_dev 0) bs=1M count=192 2>/dev/null | sha256sum | cut -c1-16)" \
              "$(dd if=/dev/$(lun_dev 1) bs=1M count=192 2>/dev/null | sha256sum | cut -c1-16)"; }
A=$(lun_dev 0); B=$(lun_dev 1)
echo "CHANNELS $(ls -d /sys/bus/vmbus/devices/*/channels/*/ | wc -l)"
verify file $A --rw=randwrite --bs=4k-64k
echo "FIO-FILE-OK"
verify drive $B --rw=randwrite --bs=4k-128k
echo "FIO-DRIVE-OK"
echo "SUMS-BEFORE $(sums)"
echo "IOTHREAD-READY-FOR-ADD"
C=$(wait_lun 2)
echo "HOT $(cat /sys/block/$C/size)"
rmmod hv_storvsc || { echo "RMMOD-FAILED"; exit 1; }
echo "UNLOADED $(ls /sys/block | grep -c '^sd')"
modprobe hv_storvsc || { echo "MODPROBE-FAILED"; exit 1; }
wait_lun 0 >/dev/null; wait_lun 1 >/dev/null
echo "RELOADED $(ls -d /sys/bus/vmbus/devices/*/channels/*/ | wc -l)"
echo "SUMS-AFTER $(sums)"
verify again $(lun_dev 1) --rw=write --bs=256k --size=16M --offset_increment=16M
echo "FIO-AGAIN-OK"
"""


def test_iothread(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    lun0 = str(tmp_path / "lun0.img")
    user = str(tmp_path / "user.qcow2")
    with open(lun0, "wb") as f:
        f.truncate(256 << 20)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", user, "256M"], check=True)
    m = boot(guest(kernel="debian-6.12", vcpus=4, mem="1G",
                   objects=[{"qom-type": "iothread", "id": "io0"}],
                   qemu_args=["-drive", f"if=none,id=user,file={user},format=qcow2"],
                   controllers=[Controller("scsi0", {"iothread": "io0"})],
                   disks=[Disk({"id": "d0", "file": lun0}, lun=0),
                          Disk({"id": "d1", "drive": "user", "iothread": "io0"}, lun=1)],
                   cmd=LUN_HELPERS + GUEST))
    m.wait_console(re.compile(r"^IOTHREAD-READY-FOR-ADD$"))
    host_checks(m, checks)
    m.qmp("device_add", driver="hv-disk", id="hot", bus="scsi0.0", lun=2, backend="null", size=64 << 20)
    r = m.finish()
    checks.boot_ok(r)
    guest_checks(r.output, checks)


def host_checks(m: Machine, checks: Checks) -> None:
    """With the guest idle after its fio runs: QEMU's threads and the channels' statistics."""
    assert m.pid is not None
    names = [name for name, _ in qemu_threads(m.pid)]
    channel_threads = sum(1 for n in names if n.startswith("hvstor-ch"))
    chans: List[Dict[str, Any]] = stats(m, "scsi0")["channels"]
    opened = sum(1 for c in chans if c["open"])
    with_srbs = sum(1 for c in chans if c["srbs"] > 0)
    iothreads = sorted(t["id"] for t in m.qmp("query-iothreads"))
    print(f"  QEMU threads {len(names)}, channel threads {channel_threads}, channels open {opened}, "
          f"with SRBs {with_srbs}, IOThreads {iothreads}", flush=True)
    checks.that(len(names) > 0 and os.path.isdir(f"/proc/{m.pid}"), "QEMU's threads were counted")
    checks.that(channel_threads == 0, f"no channel has a thread of its own ({channel_threads})")
    checks.that(opened == 4, f"all 4 channels open in the IOThread ({opened})")
    checks.that(with_srbs == 4, f"every one of them took SRBs ({with_srbs})")


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^CHANNELS 4$", "primary + 3 subchannels")
    checks.has(out, "^FIO-FILE-OK", "fio verify on the file disk")
    checks.has(out, "^FIO-DRIVE-OK", "fio verify on the qcow2 disk in the same IOThread")
    checks.has(out, "^HOT 131072$", "a disk added while the guest runs appears")
    checks.has(out, "^UNLOADED 0$", "every disk gone with the module")
    checks.has(out, "^RELOADED 4$", "all 4 channels open again after modprobe")
    before = [ln[len("SUMS-BEFORE "):] for ln in matches(out, "^SUMS-BEFORE ")]
    after = [ln[len("SUMS-AFTER "):] for ln in matches(out, "^SUMS-AFTER ")]
    checks.that(bool(before) and before[0].strip() != "" and before[0] in after,
                f"both disks read back after the reload what they held before ({before} {after})")
    checks.has(out, "^FIO-AGAIN-OK", "fio verify after the reload")
