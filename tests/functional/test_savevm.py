"""savevm and loadvm while the guest's fio crc32c verify run has requests in flight.

The disk is a qcow2 image on QEMU's block layer (drive=), so QEMU snapshots its data with
the VM; a disk model (100 IOPS, far below what the guest asks) keeps requests queued in the
host. Stock 6.12 with 2 vCPUs opens the primary channel and one subchannel. Three times over:
stop at a moment requests are in flight (the controller's counts say so; a stop that finds
none is undone and tried again), savevm, let fio run on, stop, loadvm, and check that the
loaded machine has both channels open again and the disk's fault the snapshot's (one set
over QMP before the save, on blocks fio never touches, and cleared after it); then cont. fio goes back to the saved moment
each time (its own state and the disk's data are the snapshot's), and must finish its run
and its verification without an error: every request outstanding at the save was answered
after the load, with the right data.

The host waits for progress by asking the controller how many requests it answered; no step
is sized to how long anything takes."""

from typing import Any

from conftest import Boot, Checks, Machine, fault, set_fault
from statelib import DISK, answered_past, controller, end_checks, far_fault, fio_guest, outstanding, stop_with_requests_in_flight

CYCLES = 3
# Requests answered between two steps: enough that the run moves on in between.
STEP = 100


def hmp(m: Machine, line: str) -> str:
    """An HMP command (savevm and loadvm have no plain QMP form); its output, empty when it
    went well."""
    out: str = m.qmp("human-monitor-command", **{"command-line": line})
    return out.strip()


def cycle(m: Machine, i: int, checks: Checks) -> None:
    answered_past(m, STEP)
    set_fault(m, DISK, far_fault(i))
    before = stop_with_requests_in_flight(m)
    saved = hmp(m, f"savevm s{i}")
    checks.that(saved == "", f"cycle {i}: savevm went well ({saved or 'no message'})")
    m.qmp("cont")
    set_fault(m, DISK, "none")
    answered_past(m, STEP)
    m.qmp("stop")
    loaded = hmp(m, f"loadvm s{i}")
    checks.that(loaded == "", f"cycle {i}: loadvm went well ({loaded or 'no message'})")
    after = controller(m)
    status = m.qmp("query-status")["status"]
    print(f"host: cycle {i}: {outstanding(before)} requests outstanding at the save; channels open "
          f"{before['open_channels']} before, {after['open_channels']} after the load; status {status}", flush=True)
    checks.that(before["open_channels"] == 2 and after["open_channels"] == 2,
                f"cycle {i}: the primary and its subchannel are open after the load")
    checks.that(status == "paused", f"cycle {i}: the VM waits for cont after the load ({status})")
    loaded_fault = fault(m, DISK)
    checks.that(loaded_fault == far_fault(i), f"cycle {i}: the disk has the snapshot's fault ({loaded_fault})")
    m.qmp("cont")


def test_savevm(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    m = boot(fio_guest(tmp_path, "snap", "8M", 100))
    for i in range(CYCLES):
        cycle(m, i, checks)
    end_checks(m, tmp_path, "snap", checks)
