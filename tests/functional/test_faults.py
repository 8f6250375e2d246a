"""Fault injection on a stock 6.12 guest (docs/fault-injection.md).

A fault given with the disk (medium errors on reads of 8 blocks), then faults set over QMP
while the guest runs (BUSY on every second command 4 times, NOT READY twice, one write held
until released). The guest sees each as its driver and the SCSI midlayer handle it: the
medium error fails the read and is logged with its sense, BUSY and NOT READY are retried so
fio still verifies, and the held write completes once the host clears the fault. The host
tells the guest to go on by plugging a small disk (the guest counts its disks); every wait
ends when its event comes or the boot ends, so the only clock is the hang guard."""

import json
from typing import Any, Dict, List

from qemu.qmp import ExecuteError

from conftest import Boot, Checks, Disk, Machine, fault, go_on, guest, set_fault, stats
from guestlib import LUN_HELPERS

GUEST = r"""
wait_disks() { wait_for "$1 disks" has_disks "$1"; }
D=sda
dd if=/dev/$D of=/dev/null bs=4096 skip=256 count=1 iflag=direct 2>/dev/null \
  && echo "MEDIUM-READ-SUCCEEDED" || echo "MEDIUM-READ-FAILED"
dd if=/dev/$D of=/dev/null bs=4096 skip=0 count=1 iflag=direct 2>/dev/null && echo "OTHER-READ-OK"
dd if=/dev/zero of=/dev/$D bs=4096 seek=256 count=1 oflag=direct 2>/dev/null && echo "WRITE-IN-RANGE-OK"
dmesg | grep -m1 -E 'Sense Key : Medium Error' | sed 's/^\[[^]]*\] /DMESG /'
dmesg | grep -m1 -E 'Add. Sense: Unrecovered read error' | sed 's/^\[[^]]*\] /DMESG /'
dmesg | grep -m1 -E 'critical medium error' | sed 's/^\[[^]]*\] /DMESG /'
echo "STEP1-DONE"
wait_disks 2
fio --name=busy --filename=/dev/$D --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite \
    --bs=4k --size=2M --verify=crc32c --verify_fatal=1 >/tmp/fio.out 2>&1 \
  && echo "FIO-WITH-BUSY-OK" || { cat /tmp/fio.out; echo "FIO-WITH-BUSY-FAILED"; }
echo "STEP2-DONE"
wait_disks 3
dd if=/dev/$D of=/dev/null bs=4096 skip=8 count=1 iflag=direct 2>/dev/null \
  && echo "NOT-READY-RETRIED-OK" || echo "NOT-READY-FAILED"
echo "STEP3-DONE"
wait_disks 4
head -c 4096 /dev/urandom >/tmp/block
dd if=/tmp/block of=/dev/$D bs=4096 seek=300 count=1 oflag=direct 2>/dev/null &
echo "WRITE-ISSUED"
wait $! && echo "HELD-WRITE-DONE"
dd if=/dev/$D of=/tmp/back bs=4096 skip=300 count=1 iflag=direct 2>/dev/null
cmp -s /tmp/block /tmp/back && echo "HELD-WRITE-LANDED"
wait_disks 5 # the host's last step: the guest must not end before it
"""

D0 = "/machine/peripheral/d0"
BAD_FAULT = "error=fire is not one of medium, not-ready, unit-attention, busy"


def set_d0_fault(m: Machine, value: str) -> None:
    set_fault(m, D0, value)
    print(f"host: FAULT {fault(m, D0)}", flush=True)


def test_faults(boot: Boot, checks: Checks) -> None:
    m = boot(guest(kernel="debian-6.12", vcpus=2, cmd=LUN_HELPERS + GUEST,
                   disks=[Disk({"id": "d0", "backend": "ram", "size": "64M",
                                "fault": "error=medium,ops=read,lba=2048-2055"})]))
    host = host_side(m)
    r = m.finish()
    checks.boot_ok(r)
    host_checks(host, checks)
    guest_checks(r.output, checks)
    for line in r.output:
        if line.startswith(("MEDIUM", "OTHER", "DMESG", "FIO-", "NOT-READY", "HELD")):
            print(f"  {line}")


def host_side(m: Machine) -> Dict[str, Any]:
    """The host's steps, each after the guest's marker; what it saw, for the checks."""
    seen: Dict[str, Any] = {}
    m.wait_console("STEP1-DONE")
    seen["after_medium"] = stats(m, "d0")
    try:
        set_d0_fault(m, "error=fire")
        seen["bad_fault"] = "accepted"
    except ExecuteError as e:
        seen["bad_fault"] = str(e)
    # storvsc turns an SRB error without sense into DID_ERROR, which the SCSI midlayer
    # retries at most 5 times: 4 BUSY answers can never fail a command.
    set_d0_fault(m, "error=busy,every=2,count=4")
    go_on(m, 1)
    m.wait_console("STEP2-DONE")
    seen["after_busy"] = stats(m, "d0")
    set_d0_fault(m, "error=not-ready,count=2")
    go_on(m, 2)
    m.wait_console("STEP3-DONE")
    seen["after_not_ready"] = stats(m, "d0")
    set_d0_fault(m, "stall=hold,ops=write,count=1")
    go_on(m, 3)
    m.wait_console("WRITE-ISSUED")
    m.wait_until(lambda: stats(m, "d0")["stalled"] == 1, "the write held by the stall fault")
    seen["stalled"] = stats(m, "d0")["stalled"]
    set_d0_fault(m, "none")
    seen["released"] = stats(m, "d0")["stalled"]
    go_on(m, 4)
    for k, v in seen.items():
        print(f"host: {k} {json.dumps(v)}", flush=True)
    return seen


def host_checks(seen: Dict[str, Any], checks: Checks) -> None:
    checks.that(seen["after_medium"]["faults"] >= 1, "medium error: counted as injected faults")
    checks.that(BAD_FAULT in seen["bad_fault"], "a bad fault is refused with its reason")
    checks.that(seen["after_busy"]["faults"] == 5, "BUSY: injected 4 times")
    checks.that(seen["stalled"] == 1, "stall: the host saw the write held")
    checks.that(seen["released"] == 0, "stall: released when the fault was cleared")


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^MEDIUM-READ-FAILED$", "medium error: the read of the faulty blocks fails")
    checks.has(out, "^OTHER-READ-OK$", "medium error: other blocks read fine")
    checks.has(out, "^WRITE-IN-RANGE-OK$", "medium error: writes to those blocks are not affected")
    checks.has(out, "^DMESG .*Sense Key : Medium Error", "medium error: the guest logs the sense key")
    checks.has(out, "^DMESG .*Unrecovered read error", "medium error: ... and the additional sense")
    checks.has(out, "^DMESG critical medium error, dev sda, sector 2048",
               "medium error: ... and the block layer reports the sector")
    checks.has(out, "^FIO-WITH-BUSY-OK$", "BUSY: fio still verifies (the guest retries)")
    checks.has(out, "^NOT-READY-RETRIED-OK$", "NOT READY twice: the read succeeds after retries")
    checks.has(out, "^HELD-WRITE-DONE$", "stall: the held write completed")
    checks.has(out, "^HELD-WRITE-LANDED$", "stall: and its data is on the disk")
