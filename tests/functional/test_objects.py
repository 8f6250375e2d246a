"""Settings as objects (-object hv-disk-model, hv-fault, hv-vm-caps) behave as the same
settings given as text, on stock 6.12.

One boot, two disks on one controller with the same model and fault: d0 names objects (the
machine layer turns a Guest's perf=, fault= and the bridge's vm-perf= into objects), d1 gives
the same settings as text on its -device. The guest runs the same I/O on each: 1 MiB
written and read back, then a read of a block the fault covers. Then the host compares the
two disks' statistics, which qom-get returns as JSON objects: the same I/Os, bytes and
errors, the same burst setting (off: no credits) and time scale, both behind the VM's caps.
The guest waits for a disk the host plugs after reading them, so no clock decides."""

from typing import Any, Dict, List

from qemu.qmp import ExecuteError

from conftest import Boot, Checks, Disk, go_on, guest, stats
from guestlib import LUN_HELPERS

MODEL = "profile=premium-p10,burst=off,latency=2ms,time-scale=8"
FAULT = "error=medium,ops=read,lba=2048-2055"
VM = "profile=Standard_D16s_v3,time-scale=8"

GUEST = r"""
for D in sda sdb; do
  head -c 1048576 /dev/urandom >/tmp/data
  dd if=/tmp/data of=/dev/$D bs=65536 count=16 oflag=direct 2>/dev/null || echo "WRITE-FAILED $D"
  dd if=/dev/$D of=/tmp/back bs=65536 count=16 iflag=direct 2>/dev/null || echo "READ-FAILED $D"
  cmp -s /tmp/data /tmp/back && echo "DATA-OK $D"
  dd if=/dev/$D of=/dev/null bs=4096 skip=256 count=1 iflag=direct 2>/dev/null \
    && echo "FAULTED-READ-SUCCEEDED $D" || echo "FAULTED-READ-FAILED $D"
done
echo "IO-DONE"
wait_for "3 disks" has_disks 3
"""


def text_disk() -> List[str]:
    """d1 with the settings as text on its -device (commas doubled, as QEMU wants them)."""
    model, fault = MODEL.replace(",", ",,"), FAULT.replace(",", ",,")
    return ["-device", f"hv-disk,bus=scsi0.0,lun=1,id=d1,backend=ram,size=64M,perf={model},fault={fault}"]


def test_objects_match_text(boot: Boot, checks: Checks) -> None:
    g = guest(kernel="debian-6.12", vcpus=2, cmd=LUN_HELPERS + GUEST, wait_disks=2, bridge={"vm-perf": VM},
              disks=[Disk({"id": "d0", "backend": "ram", "size": "64M", "perf": MODEL, "fault": FAULT})],
              qemu_args=text_disk())
    args = g.device_args()
    checks.that(any('"qom-type": "hv-disk-model"' in a for a in args) and "perf=hvstor-d0-model" in " ".join(args),
                "the machine layer gives d0's model as an -object it names by id")
    m = boot(g)
    m.wait_console("IO-DONE")
    seen: Dict[str, Any] = {"d0": stats(m, "d0"), "d1": stats(m, "d1"),
                            "perf": m.qmp("qom-get", path="/machine/peripheral/d0", property="perf"),
                            "profile": m.qmp("qom-get", path="/objects/hvstor-d0-model", property="profile"),
                            "vm": m.qmp("qom-get", path="/objects/hvstor-vm-caps", property="profile")}
    try:
        m.qmp("object-del", id="hvstor-d0-model")
        seen["del"] = "deleted"
    except ExecuteError as e:
        seen["del"] = str(e)
    go_on(m, 2)
    r = m.finish()
    checks.boot_ok(r)
    for d in ("sda", "sdb"):
        checks.that(f"DATA-OK {d}" in r.output, f"{d}: 1 MiB written and read back intact")
        checks.that(f"FAULTED-READ-FAILED {d}" in r.output, f"{d}: the fault fails the read of block 2048")
    compare(seen, checks)


def compare(seen: Dict[str, Any], checks: Checks) -> None:
    a, b = seen["d0"], seen["d1"]
    print(f"  d0 (objects): {a}\n  d1 (text):    {b}")
    checks.that("is in use, can not be deleted" in seen["del"], f"object-del of a model its disk uses is refused ({seen['del']})")
    checks.that(seen["perf"] == "hvstor-d0-model" and seen["profile"] == "premium-p10" and seen["vm"] == "Standard_D16s_v3",
                f"d0 names its model object, which reads back its settings ({seen['perf']}, {seen['profile']}, {seen['vm']})")
    checks.that(a["total"]["ios"] > 32 and a["total"] == b["total"],
                f"the same I/Os, bytes and errors through both models ({a['total']} and {b['total']})")
    checks.that(a["credits"] is None and b["credits"] is None, "burst=off in both: no burst credits")
    checks.that(a["scale"] == b["scale"] == 8, f"time-scale=8 in both ({a['scale']}, {b['scale']})")
    checks.that(a["vm_credits"] is not None and b["vm_credits"] is not None,
                "both pass the VM's caps (D16s_v3 bursts on credits)")
