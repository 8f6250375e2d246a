"""A machine reset while the VM is stopped (QMP stop, then system_reset), on stock 6.12.

QEMU resets a stopped machine at once and leaves it stopped. The guest has 32 reads queued
behind a disk model's 5 IOPS cap when the host stops the VM; the model's timer goes on
releasing reads to the storage, which holds them for the VM to run (hw/capi/storage_gate.h),
so the model counts them as in service and the guest's memory is left alone. The reset must
then answer every one of them without the VM running: the model cancels what it queued, the
storage's gate what it held. A reset that waited for them would wait for ever, since the VM
does not run until the reset is over.

After `cont` the machine boots again; the same command finds the mark stage 1 left on a
second disk and reads the capped one. No step waits for a time: the host waits for the
reads to be queued and for the held one by asking the disk."""

import os
from typing import Any

from conftest import Boot, Checks, Disk, guest, stats
from guestlib import LUN_HELPERS, reads_across_a_reset

QUEUED = 32
GUEST = reads_across_a_reset(QUEUED, 'sleep 3600')


def test_stop_reset(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    # -action reboot=reset: the machine layer's -no-reboot would make system_reset a shutdown.
    log = os.path.join(str(tmp_path), "qemu-d.log")
    g = guest(kernel="debian-6.12", vcpus=2, cmd=LUN_HELPERS + GUEST,
              disks=[Disk({"id": "d0", "backend": "ram", "size": "64M", "perf": "iops=5,burst=off"}),
                     Disk({"id": "d1", "backend": "ram", "size": "1M"}, lun=1)],
              qemu_args=["-action", "reboot=reset", "-trace", "hvstor_storage_*", "-D", log])
    m = boot(g)
    m.wait_console("FIO-STARTS")
    m.wait_until(lambda: stats(m, "d0")["queue"]["now"] >= QUEUED - 4, f"{QUEUED} reads behind the cap")
    m.qmp("stop")
    m.wait_until(lambda: stats(m, "d0")["in_service"] >= 1,
                 "a read the model released while the VM is stopped, held for it to run")
    before = stats(m, "d0")
    m.qmp("system_reset")
    m.event_wait("RESET")
    status = m.qmp("query-status")
    after = stats(m, "d0")
    print(f"  host: {before['queue']['now']} queued and {before['in_service']} held at the reset; after it "
          f"{after['queue']['now']} queued, {after['in_service']} in service, {after['total']['cancelled']} "
          f"cancelled; status {status['status']}", flush=True)
    checks.that(not status["running"], f"the VM is still stopped after the reset ({status['status']})")
    checks.that(after["queue"]["now"] == 0 and after["in_service"] == 0,
                "the reset answered every read, the held ones included, without the VM running")
    checks.that(after["total"]["cancelled"] > 0, "it cancelled the queued reads")
    m.qmp("cont")
    r = m.finish()
    checks.boot_ok(r, "the guest booted again after cont and its command finished")
    checks.has(r.output, "^READ-AFTER-RESET-OK$", "and read the capped disk")
    checks.lacks(r.output, "^STILL-IN-STAGE1$", "stage 1 ended in the reset")
    with open(log, encoding="utf-8", errors="replace") as f:
        traced = [ln.split()[0].split(":")[-1] for ln in f if "hvstor_storage_" in ln]
    checks.that("hvstor_storage_held" in traced and "hvstor_storage_cancelled" in traced,
                f"QEMU's trace shows the storage's gate holding reads and the reset cancelling them "
                f"({sorted(set(traced))})")
