"""savevm and loadvm while the guest's fio crc32c verify run has requests in flight.

The disk is a qcow2 image on QEMU's block layer (drive=), so QEMU snapshots its data with
the VM; a disk model (100 IOPS, far below what the guest asks) keeps requests queued in the
host at every save. Stock 6.12 with 2 vCPUs opens the primary channel and one subchannel.
Three times over: stop, take the controller's counts (requests outstanding), savevm, let fio
run on, stop, loadvm, and check that requests were in flight at the save and that the loaded
machine has both channels open again; then cont. fio goes back to the saved moment each time
(its own state and the disk's data are the snapshot's), and must finish its run and its
verification without an error: every request outstanding at the save was answered after the
load, with the right data.

The host waits for progress by asking the controller how many requests it answered; no step
is sized to how long anything takes."""

import glob
import shutil
import subprocess
from typing import Any, Dict, List

from conftest import Boot, Checks, Disk, Machine, guest

GUEST = r"""
fio --name=snap --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite \
    --bs=4k --size=8M --verify=crc32c --verify_fatal=1 >/tmp/fio.out 2>&1 \
  && echo "FIO-OK" || echo "FIO-FAILED"
sed 's/^/FIO: /' /tmp/fio.out
"""

CYCLES = 3
# Requests answered between two steps: enough that the run moves on in between.
STEP = 100


def controller(m: Machine) -> Dict[str, Any]:
    out: Dict[str, Any] = m.qmp("qom-get", path="/machine/peripheral/scsi0", property="stats")
    return out


def hmp(m: Machine, line: str) -> str:
    """An HMP command (savevm and loadvm have no plain QMP form); its output, empty when it
    went well."""
    out: str = m.qmp("human-monitor-command", **{"command-line": line})
    return out.strip()


def writes_past(m: Machine, n: int) -> None:
    target = controller(m)["completions"] + n
    m.wait_until(lambda: controller(m)["completions"] >= target, f"{n} more requests answered")


def cycle(m: Machine, i: int, checks: Checks) -> None:
    writes_past(m, STEP)
    m.qmp("stop")
    before = controller(m)
    outstanding = sum(c["outstanding"] for c in before["channels"])
    saved = hmp(m, f"savevm s{i}")
    checks.that(saved == "", f"cycle {i}: savevm went well ({saved or 'no message'})")
    m.qmp("cont")
    writes_past(m, STEP)
    m.qmp("stop")
    loaded = hmp(m, f"loadvm s{i}")
    checks.that(loaded == "", f"cycle {i}: loadvm went well ({loaded or 'no message'})")
    after = controller(m)
    status = m.qmp("query-status")["status"]
    print(f"host: cycle {i}: {outstanding} requests outstanding at the save; channels open "
          f"{before['open_channels']} before, {after['open_channels']} after the load; status {status}", flush=True)
    checks.that(outstanding > 0, f"cycle {i}: requests were in flight at the save ({outstanding})")
    checks.that(before["open_channels"] == 2 and after["open_channels"] == 2,
                f"cycle {i}: the primary and its subchannel are open after the load")
    checks.that(status == "paused", f"cycle {i}: the VM waits for cont after the load ({status})")
    m.qmp("cont")


def test_savevm(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    image = str(tmp_path / "disk.qcow2")
    tool = shutil.which("qemu-img")
    assert tool is not None, "qemu-img is not installed"
    subprocess.run([tool, "create", "-q", "-f", "qcow2", image, "64M"], check=True)
    log = str(tmp_path / "guest-errors-%d.log")  # one per QEMU process (%d: its pid)
    m = boot(guest(kernel="debian-6.12", vcpus=2, mem="512M", cmd=GUEST,
                   qemu_args=["-drive", f"if=none,id=img,file={image},format=qcow2",
                              "-d", "guest_errors", "-D", log],
                   disks=[Disk({"id": "d0", "drive": "img", "perf": "iops=100,burst=off"})]))
    for i in range(CYCLES):
        cycle(m, i, checks)
    r = m.finish()
    checks.boot_ok(r)
    guest_checks(r.output, checks)
    logged = []
    for path in glob.glob(str(tmp_path / "guest-errors-*.log")):
        with open(path, encoding="utf-8", errors="replace") as f:
            logged += [ln.rstrip() for ln in f if ln.strip()]
    checks.that(not logged, f"QEMU logged no guest error ({logged[:3]})")


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^FIO-OK$", "fio finished after the loads")
    checks.has(out, r"^FIO: snap: \(groupid=0, jobs=1\): err= 0", "fio: no error")
    checks.lacks(out, r"^FIO: .*(verify failed|bad magic|bad header)", "fio: no verification failure")
