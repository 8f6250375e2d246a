"""Migration while the guest's fio crc32c verify run has requests in flight.

The disk is a qcow2 image on QEMU's block layer (drive=), which both QEMU processes open (the
old one lets go of it when the migration completes); a disk model (a low IOPS cap) keeps
requests queued in the host at each move. Stock 6.12 with 2 vCPUs: the primary channel and a
subchannel are open. The guest moves twice: live, over a UNIX socket, to a second QEMU
process, then through a file the second writes and a third reads. Each new QEMU must have
both channels open and the disk's fault (set over QMP before the first move, on blocks fio
never touches); fio must finish its run and verification without an error, and no QEMU may
log a guest error.

The host waits for progress by asking the controller how many requests it answered; no step
is sized to how long anything takes."""

from typing import Any

from conftest import Boot, Checks, Machine, fault, set_fault
from statelib import DISK, answered_past, controller, end_checks, far_fault, fio_guest, outstanding

# Requests answered before each move: enough that the run is under way.
STEP = 300


def move(m: Machine, via: str, checks: Checks) -> None:
    answered_past(m, STEP)
    info = m.migrate(via)
    after = controller(m)
    status = m.qmp("query-status")["status"]
    print(f"host: migrated via {via} ({info.get('status')}, {info.get('total-time')} ms); "
          f"channels open {after['open_channels']}, {outstanding(after)} requests outstanding; status {status}",
          flush=True)
    checks.that(after["open_channels"] == 2, f"via {via}: the primary and its subchannel are open in the new QEMU")
    checks.that(status == "running", f"via {via}: the new QEMU runs the guest ({status})")
    moved_fault = fault(m, DISK)
    checks.that(moved_fault == far_fault(0), f"via {via}: the new QEMU's disk has the fault set before ({moved_fault})")


def test_migrate(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    m = boot(fio_guest(tmp_path, "move", "16M", 400))
    set_fault(m, DISK, far_fault(0))
    move(m, "socket", checks)
    move(m, "file", checks)
    end_checks(m, tmp_path, "move", checks)
