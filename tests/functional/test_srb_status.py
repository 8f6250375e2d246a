"""Host events on demand (docs/fault-injection.md, "Transport answers, notices and resets"),
on stock 6.12 and 6.1 guests: what each kernel's storvsc does with them.

One boot per kernel, 2 vCPUs. d0 is a RAM disk holding a pattern the guest wrote; d1 a null
disk without the device's own notices (notices=off); d2 a null disk. Step by step, the
host sets a fault (or a setting) over QMP and then lets the guest go on by typing a line on
its console; the guest does one read and reports it, and the host checks its counters:

- capacity: d1 grows silently, then one read gets SRB ABORTED with sense 6/2A/09, as
  Hyper-V reports a capacity change: storvsc requeues the read and rescans the disk, which
  shows the new size; the disk itself reported no unit attention;
- data-overrun with 2048 bytes on a 4 KiB read: 6.12 retries it 5 times and fails it (6
  answers); 6.1 takes the 2048 bytes and asks for the rest (2 answers, data intact);
- success with half the bytes of a 64 KiB read: both ask for the tail, the data is intact;
- timeout without sense, GOOD status (8 times at most): 6.12 fails the read after 6; 6.1
  sets no host byte and re-issues it as a zero-byte success until the fault runs out (8),
  then reads it;
- SRB 0x81 (success with the autosense flag), 3 times: both zero the length and re-issue;
- success with CHECK CONDITION and no sense: SCSI error handling asks for sense (REQUEST
  SENSE reaches the disk), gets NO SENSE and re-issues the read: no host reset;
- success with an undefined SCSI status (0x01): SCSI error handling ends in storvsc's host
  reset handler (the controller counts a RESET_BUS), the read is retried and succeeds;
  again with reset=fail: the reset fails, storvsc does not look, the guest carries on;
- notify: a disk plugged without its notice stays unseen until notify=enumerate-bus;
  unplugged without its notice, it goes once notify=remove-device;
- invalid-lun on d2: the read fails at once and the guest removes the LUN.

Every wait ends on a console marker, a QMP statistic or the boot's end: the only clock is
the hang guard."""

import json
import os
import re
from typing import Any, Dict, List

import pytest
from qemu.qmp import ExecuteError

from conftest import Boot, Checks, Disk, Machine, guest, set_fault, stats
from guestlib import LUN_HELPERS

D0, D1, D2, CTL = "d0", "d1", "d2", "scsi0"
MIB = 1 << 20

GUEST = r"""
D=$(lun_dev 0); C=$(lun_dev 1); V=$(lun_dev 2)
echo "DISKS $D $C $V"
go() { echo "WAIT-$1"; read -r _go </dev/ttyS0; }
size_is() { [ "$(cat /sys/block/$1/size)" = "$2" ]; }
head -c 1048576 /dev/urandom >/tmp/pat
dd if=/tmp/pat of=/dev/$D bs=1048576 count=1 oflag=direct 2>/dev/null && echo "PATTERN-WRITTEN"
# check NAME BLOCK [BYTES]: one read of BYTES (4096) of d0 at BLOCK (of that size), compared
# with the pattern
check() {
  if dd if=/dev/$D of=/tmp/got bs=${3:-4096} skip=$2 count=1 iflag=direct 2>/dev/null; then
    echo "$1-READ-OK"
    dd if=/tmp/pat of=/tmp/want bs=${3:-4096} skip=$2 count=1 2>/dev/null
    cmp -s /tmp/got /tmp/want && echo "$1-DATA-OK" || echo "$1-DATA-BAD"
  else
    echo "$1-READ-FAILED"
  fi
}
logs() { dmesg | grep -E "$2" | sed "s/^\[[^]]*\] /DMESG-$1 /"; }
go CAPACITY
echo "CAP-SIZE-BEFORE $(cat /sys/block/$C/size)"
dd if=/dev/$C of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null && echo "CAP-READ-OK" || echo "CAP-READ-FAILED"
wait_for "the new size of $C" size_is "$C" 98304
echo "CAP-SIZE-AFTER $(cat /sys/block/$C/size)"
logs CAP "srb 0x82|$C: detected capacity change"
go OVERRUN
check OVERRUN 2
logs OVERRUN "I/O error, dev $D, sector 16 "
go SHORT
check SHORT 1 65536
go TIMEOUT
check TIMEOUT 3
logs TIMEOUT "I/O error, dev $D, sector 24 "
go FLAGGED
check FLAGGED 4
[ -w /proc/sys/dev/scsi/logging_level ] && echo 3 >/proc/sys/dev/scsi/logging_level && echo "EH-LOGGING-ON"
go EH-SENSE
check EH-SENSE 5
go EH-RESET
check EH-RESET 6
go EH-RESET-FAIL
check EH-RESET-FAIL 7
logs EH "requesting sense|Snd Host RST|scsi_eh_[0-9]+: waking up|host reset"
go NOTIFY
lun_present 20 && echo "LUN20-SEEN-BEFORE-NOTIFY" || echo "LUN20-UNSEEN-BEFORE-NOTIFY"
go NOTIFY-ENUMERATE
wait_for "LUN 20" lun_present 20
echo "NOTIFY-FOUND-LUN20"
go NOTIFY-REMOVE
wait_for "LUN 20 to go" lun_gone 20
echo "NOTIFY-LUN20-GONE"
go INVALID-LUN
dd if=/dev/$V of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null && echo "INVALID-LUN-READ-OK" || echo "INVALID-LUN-READ-FAILED"
wait_for "LUN 2 to go" lun_gone 2
echo "LUN2-REMOVED"
go END
"""

# What each kernel's storvsc does: the guest's markers and the host's count of answers.
EXPECT: Dict[str, Dict[str, Any]] = {
    "debian-6.12": {"overrun": ("FAILED", 6), "timeout": ("FAILED", 6)},
    "debian-6.1": {"overrun": ("OK", 2), "timeout": ("OK", 8)},
}


@pytest.mark.parametrize("kernel", ["debian-6.12", "debian-6.1"])
def test_srb_status(boot: Boot, checks: Checks, tmp_path: Any, kernel: str) -> None:
    trace = str(tmp_path / f"trace-{kernel}.log")
    m = boot(guest(kernel=kernel, vcpus=2, cmd=LUN_HELPERS + GUEST,
                   disks=[Disk({"id": D0, "backend": "ram", "size": "64M"}, lun=0),
                          Disk({"id": D1, "backend": "null", "size": "32M", "notices": False}, lun=1),
                          Disk({"id": D2, "backend": "null", "size": "16M"}, lun=2)],
                   qemu_args=["-trace", "hvstor_storvsp_srb_submit", "-trace", "hvstor_storvsp_control",
                              "-D", trace]))
    seen = host_side(m, trace)
    r = m.finish()
    checks.boot_ok(r)
    refusal_checks(seen, checks)
    data_checks(seen, r.output, checks, EXPECT[kernel])
    eh_checks(seen, r.output, checks)
    notify_checks(seen, r.output, checks)
    for line in r.output:
        if re.match(r"(DMESG-|CAP-SIZE|EH-LOGGING)", line):
            print(f"  {line}")
    print(f"  host: {json.dumps(seen)}")


def faults(m: Machine, disk: str) -> int:
    return int(stats(m, disk)["faults"])


def go(m: Machine, step: str) -> None:
    """Waits for the guest's WAIT-STEP, then lets it go on."""
    m.wait_console(re.compile(rf"WAIT-{re.escape(step)}(?![-\w])"))
    m.console_input("go\n")


def refused(m: Machine, path: str, prop: str, value: str) -> str:
    try:
        m.qmp("qom-set", path=path, property=prop, value=value)
    except ExecuteError as e:
        return str(e)
    return "accepted"


def read_step(m: Machine, step: str, fault: str, marker: str) -> int:
    """One fault on d0 for the guest's read of `step`: the injections it took."""
    before = faults(m, D0)
    set_fault(m, D0, fault)
    go(m, step)
    m.wait_console(re.compile(rf"(?<![-\w]){re.escape(marker)}-READ-(OK|FAILED)"))
    n = faults(m, D0) - before
    set_fault(m, D0, "none")
    return n


def host_side(m: Machine, trace: str) -> Dict[str, Any]:
    """The host's steps, each before the guest's; what it saw, for the checks."""
    seen: Dict[str, Any] = {}
    ctl = f"/machine/peripheral/{CTL}"
    seen["bad_notify"] = refused(m, ctl, "notify", "hello")
    seen["bad_reset"] = refused(m, ctl, "reset", "sometimes")
    seen["bad_fault"] = refused(m, f"/machine/peripheral/{D0}", "fault", "srb=fine")
    m.wait_console("PATTERN-WRITTEN")
    capacity_step(m, seen)
    seen["overrun"] = read_step(m, "OVERRUN", "srb=data-overrun,data=2048,ops=read,lba=16-23", "OVERRUN")
    seen["short"] = read_step(m, "SHORT", "srb=success,data=32768,ops=read,lba=128-255", "SHORT")
    seen["timeout"] = read_step(m, "TIMEOUT", "srb=timeout,ops=read,lba=24-31,count=8", "TIMEOUT")
    seen["flagged"] = read_step(m, "FLAGGED", "srb=0x81,ops=read,lba=32-39,count=3", "FLAGGED")
    eh_steps(m, seen, trace)
    notify_steps(m, seen)
    set_fault(m, D2, "srb=invalid-lun,ops=read,count=1")
    go(m, "INVALID-LUN")
    m.wait_console("LUN2-REMOVED")
    seen["invalid_lun"] = faults(m, D2)
    c = stats(m, CTL)
    seen["end"] = {k: c[k] for k in ("srbs", "completions", "resets_held")}
    seen["outstanding"] = sum(ch["outstanding"] for ch in c["channels"])
    go(m, "END")
    return seen


def capacity_step(m: Machine, seen: Dict[str, Any]) -> None:
    """d1 grows without its unit attention; a fault reports it as Hyper-V does."""
    m.qmp("qom-set", path=f"/machine/peripheral/{D1}", property="capacity", value=48 * MIB)
    set_fault(m, D1, "srb=aborted,scsi=check-condition,sense=6/2a/09,ops=read,count=1")
    go(m, "CAPACITY")
    m.wait_console("CAP-SIZE-AFTER")
    d1 = stats(m, D1)
    seen["capacity"] = {"faults": d1["faults"], "unit_attentions": d1["unit_attentions"]}


def trace_lines(path: str, start: int) -> List[str]:
    """The trace file's lines from byte `start` on."""
    with open(path, encoding="utf-8", errors="replace") as f:
        f.seek(start)
        return f.read().splitlines()


def eh_steps(m: Machine, seen: Dict[str, Any], trace: str) -> None:
    """CHECK CONDITION without sense, then an undefined status, with reset=answer and fail."""
    resets = [int(stats(m, CTL)["reset_bus"])]
    at = os.path.getsize(trace)
    seen["eh_sense"] = read_step(m, "EH-SENSE", "srb=success,scsi=check-condition,ops=read,lba=40-47,count=1",
                                 "EH-SENSE")
    seen["eh_sense_request_sense"] = sum(1 for ln in trace_lines(trace, at) if "opcode 0x03 " in ln)
    resets.append(int(stats(m, CTL)["reset_bus"]))
    seen["eh_reset"] = read_step(m, "EH-RESET", "srb=success,scsi=0x01,ops=read,lba=48-55,count=1", "EH-RESET")
    resets.append(int(stats(m, CTL)["reset_bus"]))
    m.qmp("qom-set", path=f"/machine/peripheral/{CTL}", property="reset", value="fail")
    seen["reset_setting"] = m.qmp("qom-get", path=f"/machine/peripheral/{CTL}", property="reset")
    seen["eh_reset_fail"] = read_step(m, "EH-RESET-FAIL", "srb=success,scsi=0x01,ops=read,lba=56-63,count=1",
                                      "EH-RESET-FAIL")
    resets.append(int(stats(m, CTL)["reset_bus"]))
    m.qmp("qom-set", path=f"/machine/peripheral/{CTL}", property="reset", value="answer")
    seen["resets"] = resets
    # The answers, as the trace has them (RESET_BUS is operation 6).
    seen["reset_answers"] = [ln.split("operation 6 ")[1] for ln in trace_lines(trace, at) if "operation 6 " in ln]


def notify_steps(m: Machine, seen: Dict[str, Any]) -> None:
    """A disk plugged and unplugged without its notices; the notices sent by notify."""
    ctl = f"/machine/peripheral/{CTL}"
    before = stats(m, CTL)
    m.qmp("device_add", driver="hv-disk", id="n20", bus=f"{CTL}.0", lun=20, backend="null", size=MIB,
          notices=False)
    go(m, "NOTIFY")
    m.qmp("qom-set", path=ctl, property="notify", value="enumerate-bus")
    seen["notify_read_back"] = m.qmp("qom-get", path=ctl, property="notify")
    go(m, "NOTIFY-ENUMERATE")
    m.wait_console("NOTIFY-FOUND-LUN20")
    found = stats(m, CTL)
    m.device_del("n20")
    m.qmp("qom-set", path=ctl, property="notify", value="remove-device")
    go(m, "NOTIFY-REMOVE")
    m.wait_console("NOTIFY-LUN20-GONE")
    gone = stats(m, CTL)
    seen["notices"] = {
        "enumerate_at_found": found["enumerate_bus_sent"] - before["enumerate_bus_sent"],
        "enumerate_at_gone": gone["enumerate_bus_sent"] - before["enumerate_bus_sent"],
        "remove_at_gone": gone["remove_device_sent"] - before["remove_device_sent"],
    }


def refusal_checks(seen: Dict[str, Any], checks: Checks) -> None:
    checks.that("notify=hello is not one of enumerate-bus, remove-device" in seen["bad_notify"],
                "notify: a bad value is refused with its reason")
    checks.that("reset=sometimes is not one of answer, ignore, fail" in seen["bad_reset"],
                "reset: a bad value is refused with its reason")
    checks.that("fault: srb=fine is not one of success, aborted" in seen["bad_fault"],
                "fault: a bad srb= is refused with its reason")


def data_checks(seen: Dict[str, Any], out: List[str], checks: Checks, expect: Dict[str, Any]) -> None:
    cap = seen["capacity"]
    checks.has(out, "^CAP-SIZE-BEFORE 65536$", "capacity: the silent change left the guest's size alone")
    checks.has(out, "^CAP-READ-OK$", "capacity: the read that met ABORTED + 2A/09 was requeued and succeeded")
    checks.has(out, "^CAP-SIZE-AFTER 98304$", "capacity: storvsc rescanned the disk and took the new size")
    checks.has(out, r"^DMESG-CAP .*srb 0x82", "capacity: storvsc logged the SRB status 0x82")
    checks.has(out, r"^DMESG-CAP .*detected capacity change from 65536 to 98304",
               "capacity: the block layer logged the change")
    checks.that(cap == {"faults": 1, "unit_attentions": 0},
                f"capacity: one fault answered, no unit attention of the disk's own ({cap})")
    verdict, n = expect["overrun"]
    checks.has(out, f"^OVERRUN-READ-{verdict}$", f"data-overrun, 2048 bytes: the read ends {verdict}")
    checks.that(seen["overrun"] == n, f"data-overrun: {n} answers ({seen['overrun']})")
    if verdict == "OK":
        checks.has(out, "^OVERRUN-DATA-OK$", "data-overrun: the partial reads put together the right data")
    else:
        checks.has(out, "^DMESG-OVERRUN .*I/O error", "data-overrun: the guest logged the I/O error")
    checks.has(out, "^SHORT-READ-OK$", "short read: the read succeeds")
    checks.has(out, "^SHORT-DATA-OK$", "short read: the guest asked for the tail and the data is right")
    checks.that(seen["short"] == 2, f"short read: two answers, the second for the tail ({seen['short']})")
    verdict, n = expect["timeout"]
    checks.has(out, f"^TIMEOUT-READ-{verdict}$", f"timeout without sense: the read ends {verdict}")
    checks.that(seen["timeout"] == n, f"timeout without sense: {n} answers ({seen['timeout']})")
    if verdict == "OK":
        checks.has(out, "^TIMEOUT-DATA-OK$", "timeout without sense: the data read at last is right")
    checks.has(out, "^FLAGGED-READ-OK$", "SRB 0x81: the read succeeds once the fault runs out")
    checks.has(out, "^FLAGGED-DATA-OK$", "SRB 0x81: with the right data")
    checks.that(seen["flagged"] == 3, f"SRB 0x81: every answer was a zero-byte success, re-issued ({seen['flagged']})")


def eh_checks(seen: Dict[str, Any], out: List[str], checks: Checks) -> None:
    r = seen["resets"]
    checks.has(out, "^EH-SENSE-READ-OK$", "CHECK CONDITION without sense: the read succeeds")
    checks.has(out, "^EH-SENSE-DATA-OK$", "CHECK CONDITION without sense: with the right data")
    checks.that(seen["eh_sense_request_sense"] == 1,
                f"CHECK CONDITION without sense: error handling sent one REQUEST SENSE "
                f"({seen['eh_sense_request_sense']})")
    checks.that(r[1] == r[0], f"CHECK CONDITION without sense: NO SENSE back, no host reset ({r})")
    checks.has(out, "^EH-RESET-READ-OK$", "undefined SCSI status: the read succeeds after the reset")
    checks.that(r[2] == r[1] + 1, f"undefined SCSI status: storvsc's host reset ran (RESET_BUS counted, {r})")
    checks.that(seen["reset_setting"] == "fail", "reset: qom-get reads the setting back")
    checks.has(out, "^EH-RESET-FAIL-READ-OK$", "reset=fail: the guest carries on, the read succeeds")
    checks.has(out, "^EH-RESET-FAIL-DATA-OK$", "reset=fail: with the right data")
    checks.that(r[3] == r[2] + 1, f"reset=fail: the host reset ran again ({r})")
    checks.that(seen["reset_answers"] == ["status 0x0", "status 0xc0000001"],
                f"the RESET_BUS answers: success, then 0xC0000001 under reset=fail ({seen['reset_answers']})")
    checks.that(seen["eh_reset"] == 1 and seen["eh_reset_fail"] == 1, "error handling: one injection each")
    checks.has(out, "^EH-LOGGING-ON$", "error handling: the guest logs it (SCSI logging, error recovery level 3)")
    checks.count(out, r"^DMESG-EH .*scsi_eh_\d+: waking up", 3, "error handling ran once per injection")
    checks.count(out, r"^DMESG-EH .*requesting sense", 1, "error handling asked for sense for the CHECK CONDITION only")


def notify_checks(seen: Dict[str, Any], out: List[str], checks: Checks) -> None:
    n = seen["notices"]
    checks.has(out, "^LUN20-UNSEEN-BEFORE-NOTIFY$", "notify: a disk plugged without its notice is not seen")
    checks.has(out, "^NOTIFY-FOUND-LUN20$", "notify=enumerate-bus: the guest scanned and found it")
    checks.that(n["enumerate_at_found"] == 1, f"notify: one ENUMERATE_BUS, none of the device's own ({n})")
    checks.that(seen["notify_read_back"] == "enumerate-bus", "notify: qom-get reads the last notice")
    checks.has(out, "^NOTIFY-LUN20-GONE$", "notify=remove-device: the guest scanned and dropped the unplugged disk")
    checks.that(n["remove_at_gone"] == 1 and n["enumerate_at_gone"] == 1,
                f"notify: one REMOVE_DEVICE, and no notice of the unplug's own ({n})")
    checks.has(out, "^INVALID-LUN-READ-FAILED$", "invalid-lun: the read fails at once")
    checks.has(out, "^LUN2-REMOVED$", "invalid-lun: the guest removed the LUN")
    checks.that(seen["invalid_lun"] == 1, f"invalid-lun: one answer, no retry ({seen['invalid_lun']})")
    e = seen["end"]
    checks.that(e["srbs"] == e["completions"] and seen["outstanding"] == 0 and e["resets_held"] == 0,
                f"every request answered once, nothing held ({e}, outstanding {seen['outstanding']})")
