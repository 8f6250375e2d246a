"""Data integrity through hv-storvsc on stock Debian 6.1 and 6.12 guests.

Two file-backed LUNs on one controller, 8 vCPUs (so subchannels):
  LUN 0: fio with crc32c verify, random and sequential, 8 jobs on 8 CPUs, 1 GiB;
  LUN 1: mkfs.ext4, mount, write, unmount, remount, checksum.
Then the host files must hold exactly what the guest read back."""

import hashlib
import os
from typing import Any

import pytest

from conftest import Checks, Disk, Run, guest, matches, sha256_file, sparse_file

MIB = 1 << 20

GUEST = r"""
set -e
dev_of_lun() { for d in /sys/block/sd*; do a=$(basename "$(readlink "$d/device")"); if [ "${a##*:}" = "$1" ]; then echo "/dev/$(basename "$d")"; fi; done; }
A=$(dev_of_lun 0); B=$(dev_of_lun 1)
echo "VENDOR $(cat /sys/block/${A#/dev/}/device/vendor) MODEL $(cat /sys/block/${A#/dev/}/device/model)"
echo "CHANNELS $(ls -d /sys/bus/vmbus/devices/*/channels/*/ | wc -l)"
echo "NR_HW_QUEUES $(ls -d /sys/block/${A#/dev/}/mq/*/ | wc -l)"
fio --name=rand --filename=$A --direct=1 --ioengine=libaio --iodepth=16 --numjobs=4 \
    --size=128M --offset_increment=128M --rw=randwrite --bs=4k-64k --verify=crc32c --verify_fatal=1 \
    --name=seq --filename=$A --direct=1 --ioengine=libaio --iodepth=8 --numjobs=4 --offset=512M \
    --size=128M --offset_increment=128M --rw=write --bs=128k --verify=crc32c --verify_fatal=1 \
    --cpus_allowed=0-7 --cpus_allowed_policy=split --group_reporting --output-format=normal > /tmp/fio.out 2>&1 \
  || { cat /tmp/fio.out; echo FIO FAILED; exit 1; }
grep -E "WRITE:|READ:|err=" /tmp/fio.out || true
echo "FIO OK"
echo "LUN0SUM $(dd if=$A bs=1M count=1024 2>/dev/null | sha256sum | cut -d' ' -f1)"
mkfs.ext4 -q -F $B
mkdir -p /mnt && mount $B /mnt
dd if=/dev/urandom of=/mnt/data bs=1M count=48 2>/dev/null
S1=$(sha256sum /mnt/data | cut -d' ' -f1)
umount /mnt && mount $B /mnt
S2=$(sha256sum /mnt/data | cut -d' ' -f1)
[ "$S1" = "$S2" ] && echo "EXT4 OK" || echo "EXT4 MISMATCH $S1 $S2"
umount /mnt
sync
echo "LUN1SUM $(sha256sum $B | cut -d' ' -f1)"
"""


def sha256_head(path: str, size: int) -> str:
    """The SHA-256 of a file's first `size` bytes, in hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while size > 0:
            block = f.read(min(size, MIB))
            if not block:
                break
            h.update(block)
            size -= len(block)
    return h.hexdigest()


@pytest.mark.parametrize("kernel", ["debian-6.1", "debian-6.12"])
def test_disk_io(kernel: str, run: Run, checks: Checks, tmp_path: Any) -> None:
    lun0 = sparse_file(tmp_path / "lun0.img", 1100 * MIB)
    lun1 = sparse_file(tmp_path / "lun1.img", 256 * MIB)
    try:
        r = run(guest(kernel=kernel, vcpus=8, mem="1G", cmd=GUEST,
                      disks=[Disk({"file": lun0}), Disk({"file": lun1})]))
        host0, host1 = sha256_head(lun0, 1024 * MIB), sha256_file(lun1)
    finally:  # pytest keeps the folders of the last runs: not these 1.3 GiB
        os.remove(lun0)
        os.remove(lun1)
    checks.boot_ok(r)
    checks.has(r.output, "VENDOR Msft +MODEL Virtual Disk", "Hyper-V identity")
    checks.has(r.output, "^CHANNELS 8$", "primary + 7 subchannels open")
    checks.has(r.output, "^FIO OK", "fio verify passed")
    checks.has(r.output, "^EXT4 OK", "ext4 data survives remount")
    checks.has(r.output, f"^LUN0SUM {host0}", "host file of LUN 0 holds what the guest read")
    checks.has(r.output, f"^LUN1SUM {host1}", "host file of LUN 1 holds what the guest read")
    for line in matches(r.output, "^(CHANNELS|NR_HW_QUEUES|VENDOR)| (WRITE|READ):"):
        print(f"  {line}")
