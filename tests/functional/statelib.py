"""What the saved-state boot tests (savevm, migrate) share: a guest running fio crc32c
verify on a qcow2 image (drive=) behind a disk model's low IOPS cap, stock 6.12 with 2 vCPUs
(the primary channel and a subchannel open), the controller's counts, and QEMU's guest-error
logs, one file per QEMU process."""

import glob
import shutil
import subprocess
from typing import Any, Dict, List

from conftest import Checks, Disk, Guest, Machine, guest, stats


def fio_guest(tmp_path: Any, name: str, size: str, iops: int) -> Guest:
    """The guest: fio randwrite with verification on /dev/sda (`size`), its output prefixed
    "FIO: " and FIO-OK or FIO-FAILED; the disk a fresh 64 MiB qcow2 image in tmp_path, capped
    at `iops`; QEMU logs guest errors to guest-errors-PID.log there."""
    image = str(tmp_path / "disk.qcow2")
    tool = shutil.which("qemu-img")
    assert tool is not None, "qemu-img is not installed"
    subprocess.run([tool, "create", "-q", "-f", "qcow2", image, "64M"], check=True)
    cmd = rf"""
fio --name={name} --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=16 --rw=randwrite \
    --bs=4k --size={size} --verify=crc32c --verify_fatal=1 >/tmp/fio.out 2>&1 \
  && echo "FIO-OK" || echo "FIO-FAILED"
sed 's/^/FIO: /' /tmp/fio.out
"""
    log = str(tmp_path / "guest-errors-%d.log")  # one per QEMU process (%d: its pid)
    return guest(kernel="debian-6.12", vcpus=2, mem="512M", cmd=cmd,
                 qemu_args=["-drive", f"if=none,id=img,file={image},format=qcow2", "-d", "guest_errors", "-D", log],
                 disks=[Disk({"id": "d0", "drive": "img", "perf": f"iops={iops},burst=off"})])


DISK = "d0"


def far_fault(i: int) -> str:
    """A fault on blocks fio never touches (its run stays in the image's first 16 MiB), one
    for each i: it fails nothing, and reading it back tells which one the disk has."""
    first = 120000 + 8 * i
    return f"error=medium,ops=read,lba={first}-{first + 7}"


def controller(m: Machine) -> Dict[str, Any]:
    """The controller's statistics."""
    return stats(m, "scsi0")


def outstanding(stats: Dict[str, Any]) -> int:
    return sum(c["outstanding"] for c in stats["channels"])


def stop_with_requests_in_flight(m: Machine) -> Dict[str, Any]:
    """Stops the VM at a moment the guest has requests outstanding, and returns the
    controller's statistics then. A stop that finds none (fio between its phases) is undone
    and tried again once more requests were answered: a wait, never a verdict."""
    while True:
        m.qmp("stop")
        s = controller(m)
        if outstanding(s) > 0:
            return s
        m.qmp("cont")
        answered_past(m, 1)


def answered_past(m: Machine, n: int) -> None:
    """Waits until the controller answered `n` more requests."""
    target = controller(m)["completions"] + n
    m.wait_until(lambda: controller(m)["completions"] >= target, f"{n} more requests answered")


def end_checks(m: Machine, tmp_path: Any, name: str, checks: Checks) -> None:
    """The boot ends well, fio finished its run and verification, no QEMU logged a guest error."""
    r = m.finish()
    checks.boot_ok(r)
    out: List[str] = r.output
    checks.has(out, "^FIO-OK$", "fio finished")
    checks.has(out, rf"^FIO: {name}: \(groupid=0, jobs=1\): err= 0", "fio: no error")
    checks.lacks(out, r"^FIO: .*(verify failed|bad magic|bad header)", "fio: no verification failure")
    logged: List[str] = []
    for path in glob.glob(str(tmp_path / "guest-errors-*.log")):
        with open(path, encoding="utf-8", errors="replace") as f:
            logged += [ln.rstrip() for ln in f if ln.strip()]
    checks.that(not logged, f"no QEMU logged a guest error ({logged[:3]})")
