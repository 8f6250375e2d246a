"""A machine reset while the guest's reads wait behind a disk model's caps, on stock 6.12.

QEMU resets the machine on its main thread, under its big lock, and the controller waits for
every request the guest sent before the reset ends: behind a 5 IOPS cap with 32 reads
queued that was 6 s of a frozen main loop (QMP included), and a 1 MB/s cap with thousands
queued made it minutes. Now the reset cancels what no storage has started
(perf::ModelBackend::abandon): the disk's statistics count those reads as cancelled, and the
guest boots again and reads the disk.

Stage 1 marks a second, unthrottled disk and keeps 32 reads queued on the capped one with
fio; the host waits until the model holds them and tells the guest (on its console) to
reset itself (sysrq b: the kernel writes the reset port at once, as a crashing or hung guest's
watchdog would). The machine layer's -no-reboot is overridden so that QEMU resets rather
than exits. After the reset the same command runs again, finds the mark and reads the
capped disk. The time from the go to QEMU's RESET event is printed as a figure; nothing is
asserted on it."""

import time

from conftest import Boot, Checks, Disk, guest, stats
from guestlib import LUN_HELPERS, reads_across_a_reset

QUEUED = 32
GUEST = reads_across_a_reset(QUEUED, 'read -r go </dev/ttyS0\necho b >/proc/sysrq-trigger')


def test_reset_capped(boot: Boot, checks: Checks) -> None:
    g = guest(kernel="debian-6.12", vcpus=2, cmd=LUN_HELPERS + GUEST,
              disks=[Disk({"id": "d0", "backend": "ram", "size": "64M", "perf": "iops=5,burst=off"}),
                     Disk({"id": "d1", "backend": "ram", "size": "1M"}, lun=1)],
              qemu_args=["-action", "reboot=reset"])
    m = boot(g)
    m.wait_console("FIO-STARTS")
    m.wait_until(lambda: stats(m, "d0")["queue"]["now"] >= QUEUED - 4, f"{QUEUED} reads behind the cap")
    before = stats(m, "d0")
    t0 = time.monotonic()
    m.console_input("go\n")
    m.event_wait("RESET")
    took = time.monotonic() - t0
    after = stats(m, "d0")
    print(f"  figure: the guest's reset to RESET with {before['queue']['now']} reads queued behind 5 IOPS: "
          f"{took * 1000:.0f} ms (waiting them out: {before['queue']['now'] / 5:.1f} s)", flush=True)
    # A read the cap let through meanwhile completed instead (and fio may have sent more).
    cancelled, ran = after["total"]["cancelled"], after["total"]["ios"] - before["total"]["ios"]
    checks.that(cancelled > 0 and cancelled + ran >= before["queue"]["now"],
                f"the reset cancelled the queued reads ({cancelled} cancelled, {ran} completed since "
                f"{before['queue']['now']} were queued)")
    r = m.finish()
    checks.boot_ok(r, "the guest booted again after the reset and its command finished")
    checks.has(r.output, "^READ-AFTER-RESET-OK$", "and read the capped disk")
    checks.lacks(r.output, "^STILL-IN-STAGE1$", "stage 1 ended in the reset")
