"""Migration while the guest's fio crc32c verify run has requests in flight.

The disk is a qcow2 image on QEMU's block layer (drive=), which both QEMU processes open (the
old one lets go of it when the migration completes); a disk model (a low IOPS cap) keeps
requests queued in the host at each move. Stock 6.12 with 2 vCPUs: the primary channel and a
subchannel are open. The guest moves twice: live, over a UNIX socket, to a second QEMU
process, then through a file the second writes and a third reads. Each new QEMU must have
both channels open; fio must finish its run and verification without an error, and no QEMU
may log a guest error.

The host waits for progress by asking the controller how many requests it answered; no step
is sized to how long anything takes."""

import glob
import shutil
import subprocess
from typing import Any, Dict, List

from conftest import Boot, Checks, Disk, Machine, guest

GUEST = r"""
fio --name=move --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite \
    --bs=4k --size=16M --verify=crc32c --verify_fatal=1 >/tmp/fio.out 2>&1 \
  && echo "FIO-OK" || echo "FIO-FAILED"
sed 's/^/FIO: /' /tmp/fio.out
"""

# Requests answered before each move: enough that the run is under way.
STEP = 300


def controller(m: Machine) -> Dict[str, Any]:
    out: Dict[str, Any] = m.qmp("qom-get", path="/machine/peripheral/scsi0", property="stats")
    return out


def answered_past(m: Machine, n: int) -> None:
    target = controller(m)["completions"] + n
    m.wait_until(lambda: controller(m)["completions"] >= target, f"{n} more requests answered")


def move(m: Machine, via: str, checks: Checks) -> None:
    answered_past(m, STEP)
    info = m.migrate(via)
    after = controller(m)
    status = m.qmp("query-status")["status"]
    print(f"host: migrated via {via} ({info.get('status')}, {info.get('total-time')} ms); "
          f"channels open {after['open_channels']}, {sum(c['outstanding'] for c in after['channels'])} "
          f"requests outstanding; status {status}", flush=True)
    checks.that(after["open_channels"] == 2, f"via {via}: the primary and its subchannel are open in the new QEMU")
    checks.that(status == "running", f"via {via}: the new QEMU runs the guest ({status})")


def test_migrate(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    image = str(tmp_path / "disk.qcow2")
    tool = shutil.which("qemu-img")
    assert tool is not None, "qemu-img is not installed"
    subprocess.run([tool, "create", "-q", "-f", "qcow2", image, "64M"], check=True)
    log = str(tmp_path / "guest-errors-%d.log")  # one per QEMU process (%d: its pid)
    m = boot(guest(kernel="debian-6.12", vcpus=2, mem="512M", cmd=GUEST,
                   qemu_args=["-drive", f"if=none,id=img,file={image},format=qcow2",
                              "-d", "guest_errors", "-D", log],
                   disks=[Disk({"id": "d0", "drive": "img", "perf": "iops=400,burst=off"})]))
    move(m, "socket", checks)
    move(m, "file", checks)
    r = m.finish()
    checks.boot_ok(r)
    guest_checks(r.output, checks)
    logged = []
    for path in glob.glob(str(tmp_path / "guest-errors-*.log")):
        with open(path, encoding="utf-8", errors="replace") as f:
            logged += [ln.rstrip() for ln in f if ln.strip()]
    checks.that(not logged, f"no QEMU logged a guest error ({logged[:3]})")


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^FIO-OK$", "fio finished after the moves")
    checks.has(out, r"^FIO: move: \(groupid=0, jobs=1\): err= 0", "fio: no error")
    checks.lacks(out, r"^FIO: .*(verify failed|bad magic|bad header)", "fio: no verification failure")
