"""Hibernation to a swap disk and a later boot that resumes it, with hv_storvsc's disks
attached: storvsc's suspend (freeze) and resume (restore) paths run against our VMBus
(UNLOAD, then a new connection that finds the same offers and instance ids), and the data
written before the hibernation reads back after it, in the command that hibernated.

Boot 1 swaps on LUN 1, writes a pattern to LUN 0 and hibernates (the kernel writes its image
and powers off: BootResult.hibernated). Boot 2 has the same disks and Guest.resume_lun=1: its
init finds the image and the kernel restores it, so boot 1's command goes on in boot 2 and
reports there. A boot 3 with resume_lun on a swap that holds no image runs its own command."""

import os
import subprocess
from typing import Any

import pytest

from conftest import Checks, Disk, Run, guest

HIBERNATE = r"""
lun_dev() { for x in /sys/block/sd*; do a=$(basename "$(readlink "$x/device")"); [ "${a##*:}" = "$1" ] && basename "$x"; done; }
DATA=$(lun_dev 0); SWAP=$(lun_dev 1)
mkswap /dev/$SWAP >/dev/null && swapon /dev/$SWAP && echo SWAP-ON
dd if=/dev/urandom of=/tmp/pattern bs=1M count=4 2>/dev/null
dd if=/tmp/pattern of=/dev/$DATA bs=1M oflag=direct 2>/dev/null
echo "BEFORE $(sha256sum < /tmp/pattern | cut -c1-16)"
echo shutdown > /sys/power/disk
echo disk > /sys/power/state
echo "RESUMED $?"
echo "AFTER $(dd if=/dev/$DATA bs=1M count=4 iflag=direct 2>/dev/null | sha256sum | cut -c1-16) $(sha256sum < /tmp/pattern | cut -c1-16)"
dd if=/dev/zero of=/dev/$DATA bs=4k count=16 seek=2048 oflag=direct 2>/dev/null && echo "WRITE-AFTER-RESUME"
"""


@pytest.mark.parametrize("kernel", ["debian-6.12", "debian-6.1"])
def test_hibernate_and_resume(run: Run, checks: Checks, kernel: str, tmp_path: Any) -> None:
    data, swap = os.path.join(str(tmp_path), "data.img"), os.path.join(str(tmp_path), "swap.img")
    subprocess.run(["truncate", "-s", "64M", data], check=True)
    subprocess.run(["truncate", "-s", "1G", swap], check=True)
    disks = [Disk({"file": data}), Disk({"file": swap})]
    r1 = run(guest(kernel=kernel, vcpus=2, mem="512M", disks=disks, cmd=HIBERNATE))
    checks.that(r1.failure is None and r1.hibernated and r1.status is None,
                f"boot 1 hibernated and powered off ({r1.describe().splitlines()[0]})")
    checks.has(r1.output, "^SWAP-ON$", "on its swap disk")
    before = [ln.split()[1] for ln in r1.output if ln.startswith("BEFORE ")]
    r2 = run(guest(kernel=kernel, vcpus=2, mem="512M", disks=disks, cmd="echo NOT-RESUMED", resume_lun=1))
    checks.boot_ok(r2, "boot 2 resumed boot 1's command, which finished")
    checks.lacks(r2.output, "^NOT-RESUMED$", "boot 2's own command never ran")
    checks.has(r2.output, "^RESUMED 0$", "the hibernation returned in the command")
    checks.that(before and any(ln == f"AFTER {before[0]} {before[0]}" for ln in r2.output),
                "the data on the disk and in memory read back as written before")
    checks.has(r2.output, "^WRITE-AFTER-RESUME$", "the disk takes writes after the resume")
    checks.that("PM: hibernation: resume from hibernation" in r2.kernel_log or
                "resume from hibernation" in "\n".join(r2.console), "boot 2's kernel restored the image")
    r3 = run(guest(kernel=kernel, vcpus=2, mem="512M", disks=disks, cmd="echo OWN-COMMAND", resume_lun=1))
    checks.boot_ok(r3, "boot 3 (the image is used up) booted on its own")
    checks.has(r3.output, "^OWN-COMMAND$", "and ran its own command")
