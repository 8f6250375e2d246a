"""Hot plug over QMP on a running stock 6.12 guest (2 vCPUs, one controller, one disk).

device_add of a second hv-disk shows up in the guest as a new sd device, fio writes and
verifies it, device_del takes it away again, and QEMU stays up and answers QMP. Then a disk
is removed with a write in flight: a stall fault holds the write until device_del releases
it into a disk model whose writes take 10 s. The unplug does not wait that out (it abandons
the model's requests: docs/perf-model.md, "Resets and unplugs"): device_del returns, QMP
answers, DEVICE_DELETED follows, and the guest's write is answered once. Guest lines are
matched from their start only: a kernel message (the removed LUN's failed SYNCHRONIZE CACHE)
may run on at their end. Host and guest take turns through console markers; every wait ends
when its event comes or the boot ends, so the only clock is the hang guard."""

from typing import List

from qemu.qmp import ExecuteError

from conftest import Boot, Checks, Disk, Machine, go_on, guest, stats
from guestlib import LUN_HELPERS

GUEST = r"""
A=$(lun_dev 0)
echo "FIRST ${A:-none}"
echo "HOTPLUG-READY-FOR-ADD"
B=$(wait_lun 1)
echo "NEW $B $(cat /sys/block/$B/size)"
fio --name=hot --filename=/dev/$B --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite \
    --bs=4k-64k --size=16M --verify=crc32c --verify_fatal=1 --output-format=normal >/tmp/fio.out 2>&1 \
  || { cat /tmp/fio.out; echo "FIO-FAILED"; exit 1; }
grep -E "err=|WRITE:" /tmp/fio.out
echo "FIO-OK"
echo "HOTPLUG-READY-FOR-DEL"
wait_for "$B to go" [ ! -e "/sys/block/$B" ]
echo "GONE $B"
dd if=/dev/zero of=/dev/$A bs=64k count=16 oflag=direct 2>/dev/null && echo "FIRST-STILL-WRITABLE"
echo "LEFT $(ls /sys/block | grep '^sd' | tr '\n' ' ')"
# Removal under I/O: a disk whose write is held (then takes 10 s) is removed while it is in flight.
echo "HOTPLUG-READY-FOR-SLOW"
C=$(wait_lun 2)
dd if=/dev/zero of=/dev/$C bs=4k count=1 oflag=direct 2>/dev/null &
DD=$!
# The fault holds the write until the removal: it stays in flight.
write_in_flight() { set -- $(cat /sys/block/$C/inflight); [ "$2" -gt 0 ]; }
wait_for "the write to $C in flight" write_in_flight
set -- $(cat /sys/block/$C/inflight)
echo "WRITE-IN-FLIGHT $C $2"
echo "HOTPLUG-READY-FOR-SLOW-DEL"
wait $DD
echo "SLOW-WRITE-ENDED rc=$?"
# By its LUN: once it is gone the host plugs LUN 3, which may take the same name.
wait_for "LUN 2 to go" lun_gone 2
echo "SLOW-GONE $C"
# The host's last QMP steps need QEMU: the guest ends once it has plugged one more disk.
wait_lun 3 >/dev/null
echo "HOST-DONE"
"""


def test_hotplug(boot: Boot, checks: Checks) -> None:
    m = boot(guest(vcpus=2, disks=[Disk({"id": "d0", "backend": "ram", "size": "32M"})],
                   cmd=LUN_HELPERS + GUEST))
    checks.that(m.qmp("query-status")["status"] == "running", "QMP answers while the guest runs")
    m.wait_console("HOTPLUG-READY-FOR-ADD")
    m.qmp("device_add", driver="hv-disk", id="hot1", bus="scsi0.0", lun=1, backend="ram", size=64 << 20)
    refusal = ""
    try:
        m.qmp("device_add", driver="hv-disk", id="hot2", bus="scsi0.0", lun=1, backend="ram", size=64 << 20)
    except ExecuteError as e:
        refusal = str(e)
    checks.that("lun 1 is already in use" in refusal,
                f"a second disk on the same LUN is refused with a message ({refusal or 'accepted'})")
    m.wait_console("HOTPLUG-READY-FOR-DEL")
    checks.that(stats(m, "hot1")["writes"] > 0, "its statistics count the writes")
    m.device_del("hot1")   # returns with DEVICE_DELETED
    checks.that(m.qmp("query-status")["status"] == "running", "QEMU still answers QMP after the removal")
    disks = sorted(p["name"] for p in m.qmp("qom-list", path="/machine/peripheral")
                   if p["type"] == "child<hv-disk>")
    checks.that(disks == ["d0"], f"hot1 is gone from QEMU, d0 stays ({disks})")
    slow_removal(m, checks)
    r = m.finish()
    checks.boot_ok(r)
    guest_checks(r.output, checks)


def slow_removal(m: Machine, checks: Checks) -> None:
    """device_del does not wait for the disk's requests: it releases the held write into the
    model (10 s a write, which the unplug does not wait out), QMP answers, and DEVICE_DELETED
    comes once the write is done."""
    m.wait_console("HOTPLUG-READY-FOR-SLOW")
    m.qmp("device_add", driver="hv-disk", id="slow", bus="scsi0.0", lun=2, backend="ram",
          size=16 << 20, perf="latency.write=10s", fault="stall=hold,ops=write")
    m.wait_console("HOTPLUG-READY-FOR-SLOW-DEL")
    m.qmp("device_del", id="slow")
    during = ""
    try:
        m.qmp("qom-get", path="/machine/peripheral/slow", property="stats")
        during = "stats answered"
    except ExecuteError as e:
        during = str(e)
    # Being removed, or already gone: the removal runs off the main loop, and QMP answers.
    checks.that("hv-disk is being removed" in during or "not found" in during,
                f"device_del returns and QMP answers about the disk ({during})")
    m.event_wait("DEVICE_DELETED", match={"data": {"device": "slow"}})
    checks.that(m.qmp("query-status")["status"] == "running", "QEMU answers QMP after it")
    go_on(m, 3, dev_id="done")


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^FIRST sd[a-z]+$", "the guest starts with one disk")
    checks.has(out, "^NEW sd[a-z]+ 131072$", "the guest sees the new 64 MiB disk")
    checks.has(out, "^FIO-OK$", "fio writes and verifies it")
    checks.has(out, "^GONE sd[a-z]+", "the disk disappears from the guest")
    checks.has(out, "^FIRST-STILL-WRITABLE$", "the first disk still works")
    checks.has(out, "^LEFT sd[a-z]+ $", "one disk left in the guest")
    checks.has(out, "^WRITE-IN-FLIGHT sd[a-z]+ 1", "a write is in flight on the slow disk")
    checks.has(out, "^SLOW-WRITE-ENDED rc=[0-9]+", "the guest's write ended (answered once, not lost)")
    checks.has(out, "^SLOW-GONE sd[a-z]+", "the slow disk disappears from the guest")
