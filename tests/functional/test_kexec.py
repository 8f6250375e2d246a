"""A second kernel started with kexec, and a kdump capture kernel after a crash, find the
disks of our controller and read what the first kernel wrote.

Stage 1 writes 4 MiB of random data to LUN 0, packs its root file system (the initramfs
with the same command) as the next kernel's initramfs, and loads the same kernel with
hvstor.stage=2 added to its command line (guest-scripts/src/hvstor-kexec.cc, through
kexec_file_load). Then:
- kexec: `hvstor-kexec exec`. The kernel shuts its devices down first: hv_vmbus sends
  UNLOAD and waits for its answer, and turns the hypercall page off (hyperv_cleanup()).
- kdump: the kernel is loaded as the capture kernel (crashkernel= reserves its memory), and
  a sysrq crash panics the first kernel. Linux's crash path sends UNLOAD and polls the
  message page for the answer with interrupts off, then starts the capture kernel.
Stage 2, in the new kernel, connects to VMBus afresh (a new INITIATE_CONTACT on a server
whose last connection was unloaded), waits for LUN 0, reads the 4 MiB back and writes to
the disk. The host checks the data against its file, and that QEMU logged no guest error:
nothing of the old connection reached the new one, and the new one broke no rule.

Both again without UNLOAD: Linux sends none when it negotiated a VMBus version older than
3.0 (Windows Server 2012 R2, "Pre-Win2012R2 hosts don't support reconnect" in
vmbus_initiate_unload), so with the bridge's vmbus-version=2.4 the second kernel's
INITIATE_CONTACT finds the first kernel's connection still there, its channels open: the
server drops it (the channels close, their I/O is answered, their GPADLs go) and the new
kernel's offers and opens must work on the same relids while that runs.

The log of each kernel is kept (the guest's reader names the boot each time it starts;
BootResult.kernel_log holds both, one after the other)."""

import hashlib
import os
import re
import subprocess
from typing import Any, List

import pytest

from conftest import Checks, Disk, Run, guest
from guestlib import LUN_HELPERS
from hvmachine import assets as assetsmod

PATTERN_MIB = 4
STAGES = r"""
if grep -q 'hvstor.stage=2' /proc/cmdline; then
  D=$(wait_lun 0)
  echo "STAGE2 $(cat /proc/sys/kernel/random/boot_id) VMCORE $([ -e /proc/vmcore ] && echo yes || echo no)"
  echo "READ $(dd if=/dev/$D bs=1M count=%(mib)d iflag=direct 2>/dev/null | sha256sum | cut -c1-16)"
  dd if=/dev/zero of=/dev/$D bs=4k count=16 seek=4096 oflag=direct 2>/dev/null && echo WRITE-OK
  exit 0
fi
D=$(wait_lun 0)
echo "STAGE1 $(cat /proc/sys/kernel/random/boot_id)"
dd if=/dev/urandom of=/tmp/pattern bs=1M count=%(mib)d 2>/dev/null
dd if=/tmp/pattern of=/dev/$D bs=1M oflag=direct 2>/dev/null && sync
echo "WROTE $(sha256sum </tmp/pattern | cut -c1-16)"
# The next kernel's initramfs: this root file system (the mounts on it are the init's to
# make again), without the kernel image.
( cd / && { find . -xdev ! -path ./hvstor/vmlinuz; printf './%%s\n' proc sys dev tmp run; } |
  cpio -o -H newc 2>/dev/null | gzip ) >/tmp/next.cpio.gz
next="$(sed 's/crashkernel=[^ ]*//' /proc/cmdline) hvstor.stage=2"
%(go)s
echo "STILL-IN-STAGE1"
exit 1
"""
KEXEC = r"""
hvstor-kexec load /hvstor/vmlinuz /tmp/next.cpio.gz "$next" && echo LOADED
hvstor-kexec exec
"""
KDUMP = r"""
hvstor-kexec crash /hvstor/vmlinuz /tmp/next.cpio.gz "$next nr_cpus=1 reset_devices" && echo LOADED
echo c >/proc/sysrq-trigger
"""
TRACED = ("hvstor_vmbus_connect", "hvstor_vmbus_unload")
SYSRQ_PANIC = r"Kernel panic - not syncing: sysrq triggered crash"


def stage_ids(lines: List[str], stage: int) -> List[str]:
    return [ln.split()[1] for ln in lines if ln.startswith(f"STAGE{stage} ")]


@pytest.mark.parametrize("unload", [True, False], ids=["unload", "no-unload"])
@pytest.mark.parametrize("how", ["kexec", "kdump"])
def test_kexec(run: Run, checks: Checks, tmp_path: Any, how: str, unload: bool) -> None:
    img = os.path.join(str(tmp_path), "data.img")
    subprocess.run(["truncate", "-s", "64M", img], check=True)
    log = os.path.join(str(tmp_path), "qemu-d.log")
    g = guest(kernel="debian-6.12", vcpus=2, mem="1G", disks=[Disk({"file": img})],
              bridge=None if unload else {"vmbus-version": "2.4"},
              qemu_args=["-d", "guest_errors", "-D", log] + [a for e in TRACED for a in ("-trace", e)],
              cmd=LUN_HELPERS + STAGES % {"mib": PATTERN_MIB, "go": KEXEC if how == "kexec" else KDUMP})
    if how == "kdump":
        g.append = ["crashkernel=256M"]
        g.tolerate = [re.escape(SYSRQ_PANIC)]
    with open(assetsmod.prepare(g).kernel, "rb") as f:
        g.files = {"vmlinuz": f.read()}
    r = run(g)
    checks.boot_ok(r, f"the {how} boot ended with stage 2's status")
    checks.has(r.output, "^LOADED$", f"stage 1 loaded the next kernel ({how})")
    checks.lacks(r.output, "^STILL-IN-STAGE1$", "and did not come back from starting it")
    one, two = stage_ids(r.output, 1), stage_ids(r.output, 2)
    checks.that(len(one) == 1 and len(two) == 1 and one != two,
                f"stage 2 ran in another kernel (boot ids {one} then {two})")
    if how == "kdump":
        checks.has(r.output, "^STAGE2 .* VMCORE yes$", "stage 2 is a capture kernel (/proc/vmcore)")
        # On the console: the kernel prints a panic there itself, and its reader of the log
        # for the kmsg channel never runs again.
        checks.that(any(SYSRQ_PANIC in ln for ln in r.console), "stage 1 panicked (the crash was tolerated)")
    wrote = [ln.split()[1] for ln in r.output if ln.startswith("WROTE ")]
    with open(img, "rb") as f:
        host = hashlib.sha256(f.read(PATTERN_MIB << 20)).hexdigest()[:16]
    checks.that(wrote == [host], f"the host file holds what stage 1 wrote ({wrote} vs {host})")
    checks.has(r.output, f"^READ {host}$", "stage 2 read it back through a new VMBus connection")
    checks.has(r.output, "^WRITE-OK$", "and wrote to the disk")
    checks.that(r.kernel_log.count("Linux version") >= 2, "the kernel log holds both kernels")
    with open(log, encoding="utf-8", errors="replace") as f:
        logged = f.read().splitlines()
    events = [e for ln in logged for e in TRACED if e in ln]
    if unload:
        checks.that(events == ["hvstor_vmbus_connect", "hvstor_vmbus_unload", "hvstor_vmbus_connect"],
                    f"the first kernel connected and sent UNLOAD, the second connected ({events})")
    else:
        checks.that(events == ["hvstor_vmbus_connect", "hvstor_vmbus_connect"],
                    f"the first kernel connected (VMBus 2.4) and sent no UNLOAD, the second connected ({events})")
    guest_errors = [ln for ln in logged if not any(e in ln for e in TRACED)]
    checks.that(not guest_errors, f"QEMU logged no guest error ({guest_errors[:3]})")
