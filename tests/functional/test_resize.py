"""Changing a disk's capacity while a stock 6.12 guest runs (docs/fault-injection.md,
"Changing capacity").

A file-backed hv-disk of 64 MiB, a pattern the guest writes at its start and at its end,
then the host grows the disk over QMP (qom-set of hv-disk's "capacity") to 96 MiB and later
to 128 MiB. Between the changes the guest keeps reading one block; the first command after
each change gets UNIT ATTENTION, CAPACITY DATA HAS CHANGED, on which storvsc requeues it and
rescans the disk, until /sys/block/sda/size shows the new size. The guest then checks its
pattern, writes and reads back past the old end, and prints what it logged; the second
change runs with hv_storvsc's logging_level=2, which also logs the sense. Then the host
shrinks it back to 96 MiB. Bad sizes are refused with their reason; once the guest is idle
every request has completed exactly once. Every wait ends on a console marker, a statistic
or the boot's end: the only clock is the hang guard.
HVSTOR_TRACE_LOG=FILE keeps QEMU's trace of every SRB (opcode, status) in FILE."""

import os
import re
from typing import Any, Dict, List, Tuple

from qemu.qmp import ExecuteError

from conftest import Boot, Checks, Disk, Machine, go_on, guest, matches, sparse_file, stats
from guestlib import LUN_HELPERS

MIB = 1 << 20
D0 = "/machine/peripheral/d0"

GUEST = r"""
D=sda
MIB=1048576
OLD=$(cat /sys/block/$D/size)
echo "SIZE-BEFORE $OLD"
head -c $MIB /dev/urandom >/tmp/head
head -c $MIB /dev/urandom >/tmp/tail
head -c $MIB /dev/zero >/tmp/zero
dd if=/tmp/head of=/dev/$D bs=$MIB count=1 oflag=direct 2>/dev/null
dd if=/tmp/tail of=/dev/$D bs=$MIB seek=$((OLD / 2048 - 1)) count=1 oflag=direct 2>/dev/null
echo "PATTERN-WRITTEN"
# Reads a block each round (the command that meets the unit attention) until the size is $1;
# no bound of its own (the hang guard is the only clock), a word every 30 s.
wait_size() {
  n=0
  while [ "$(cat /sys/block/$D/size)" != "$1" ]; do
    dd if=/dev/$D of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null || echo "POLL-READ-FAILED"
    sleep 0.25
    n=$((n + 1))
    [ $((n % 120)) -eq 0 ] && echo "still waiting for size $1 ($((n / 4)) s)" >&2
  done
  echo "SIZE-NOW $(cat /sys/block/$D/size)"
}
same() { # file, MiB offset on the disk: whether that MiB of the disk holds the file
  dd if=/dev/$D of=/tmp/back bs=$MIB skip="$2" count=1 iflag=direct 2>/dev/null && cmp -s "$1" /tmp/back
}
verify() { # $1: the size in sectors before the change, $2: after it
  same /tmp/head 0 && echo "HEAD-KEPT"
  same /tmp/tail $(($1 / 2048 - 1)) && echo "OLD-END-KEPT"
  same /tmp/zero $(($1 / 2048)) && echo "GROWN-RANGE-READS-ZEROS"
  head -c $MIB /dev/urandom >/tmp/new
  dd if=/tmp/new of=/dev/$D bs=$MIB seek=$(($2 / 2048 - 1)) count=1 oflag=direct 2>/dev/null \
    && echo "WRITE-AT-NEW-END-OK"
  same /tmp/new $(($2 / 2048 - 1)) && echo "NEW-END-VERIFIED"
  cp /tmp/new /tmp/tail
}
wait_size 196608
verify "$OLD" 196608
cp /tmp/tail /tmp/at95  # the MiB that ends the disk at 96 MiB
echo "PHASE1-DONE"
dmesg | grep -E 'capacity change|logical blocks|Capacity data|Unit Attention|srb 0x84' | sed 's/^/DMESG1 /'
echo 2 >/sys/module/hv_storvsc/parameters/logging_level
echo "LOGGING-WARN"
wait_size 262144
verify 196608 262144
echo "PHASE2-DONE"
dmesg | grep -E 'capacity change|logical blocks|Capacity data|Unit Attention|srb 0x84' | sed 's/^/DMESG2 /'
wait_size 196608
same /tmp/head 0 && echo "HEAD-KEPT-AFTER-SHRINK"
same /tmp/at95 95 && echo "NEW-END-KEPT-AFTER-SHRINK"
dd if=/dev/$D of=/tmp/past bs=$MIB skip=95 count=2 iflag=direct 2>/dev/null
echo "READ-ACROSS-NEW-END $? $(wc -c </tmp/past) bytes"
echo "PHASE3-DONE"
dmesg | grep -E 'capacity change from 262144|srb 0x84' | sed 's/^/DMESG3 /'
# Idle until the host has counted every request (it then plugs a second disk).
wait_for "the host's second disk" has_disks 2
"""


def test_resize(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    image = sparse_file(tmp_path / "disk.img", 64 * MIB)
    trace = os.environ.get("HVSTOR_TRACE_LOG")
    m = boot(guest(kernel="debian-6.12", vcpus=2, cmd=LUN_HELPERS + GUEST,
                   disks=[Disk({"id": "d0", "file": image})],
                   qemu_args=["-trace", "hvstor_storvsp_srb_*", "-D", trace] if trace else []))
    seen = host_side(m, image)
    r = m.finish()
    checks.boot_ok(r)
    host_checks(seen, checks)
    guest_checks(r.output, checks)
    for line in r.output:
        if re.match(r"(SIZE-|DMESG2|DMESG3 .*capacity|READ-ACROSS)", line):
            print(f"  {line}")
    print(f"  host: {seen}")
    print("  guest time from the failed command to the new capacity, per change: "
          f"{rescan_ms(r.output, 'DMESG2')} {rescan_ms(r.output, 'DMESG3')} ms")


def capacity(m: Machine) -> int:
    return int(m.qmp("qom-get", path=D0, property="capacity"))


def unit_attentions(m: Machine) -> int:
    """Capacity changes the disk reported."""
    return int(stats(m, "d0")["unit_attentions"])


def controller(m: Machine) -> Tuple[int, int, int]:
    """The controller's SRBs, completions and requests outstanding on all its channels."""
    c = stats(m, "scsi0")
    return c["srbs"], c["completions"], sum(ch["outstanding"] for ch in c["channels"])


def settled(m: Machine) -> bool:
    """Nothing in flight: every SRB answered."""
    srbs, completions, outstanding = controller(m)
    return srbs == completions and outstanding == 0


def change(m: Machine, image: str, size: int, marker: str) -> Tuple[int, int, int]:
    """qom-set of the capacity, then the guest's marker: (capacity, the file's length, unit
    attentions raised meanwhile)."""
    before = unit_attentions(m)
    m.qmp("qom-set", path=D0, property="capacity", value=size)
    got = (capacity(m), os.path.getsize(image))
    m.wait_console(marker)
    return got[0], got[1], unit_attentions(m) - before


def host_side(m: Machine, image: str) -> Dict[str, Any]:
    """The host's steps, each after the guest's marker; what it saw, for the checks."""
    seen: Dict[str, Any] = {"start": capacity(m), "refused": {}}
    m.wait_console("PATTERN-WRITTEN")
    before = unit_attentions(m)
    for bad in (0, 1000, 1 << 62):
        try:
            m.qmp("qom-set", path=D0, property="capacity", value=bad)
            seen["refused"][bad] = "accepted"
        except ExecuteError as e:
            seen["refused"][bad] = str(e)
    seen["after_refusals"] = (capacity(m), unit_attentions(m) - before)
    seen["grow96"] = change(m, image, 96 * MIB, "PHASE1-DONE")
    m.wait_console("LOGGING-WARN")
    seen["grow128"] = change(m, image, 128 * MIB, "PHASE2-DONE")
    seen["shrink96"] = change(m, image, 96 * MIB, "PHASE3-DONE")  # the file keeps its 128 MiB
    # The guest is idle now: a completion lost or sent twice would show here (or the wait
    # would end only with the boot).
    m.wait_until(lambda: settled(m), "every SRB answered")
    seen["controller"] = controller(m)
    seen["disk"] = stats(m, "d0")
    go_on(m, 1, dev_id="go")
    return seen


def host_checks(seen: Dict[str, Any], checks: Checks) -> None:
    refused = seen["refused"]
    checks.that(seen["start"] == 67108864, "capacity reads the file's size at start")
    checks.that(re.search("size 0 is not a positive multiple of 512", refused[0]),
                "capacity 0 is refused with its reason")
    checks.that(re.search("size 1000 is not a positive multiple of 512", refused[1000]),
                "capacity 1000 is refused with its reason")
    checks.that(re.search("cannot grow the file to 4611686018427387904 bytes", refused[1 << 62]),
                "a size the file system cannot hold is refused")
    checks.that(seen["after_refusals"] == (67108864, 0), "refusals change nothing and raise no unit attention")
    checks.that(seen["grow96"][:2] == (100663296, 100663296), "grow to 96 MiB: the file grew")
    checks.that(seen["grow128"][:2] == (134217728, 134217728), "grow to 128 MiB: the file grew")
    checks.that(seen["shrink96"][:2] == (100663296, 134217728), "shrink to 96 MiB: the file keeps its length")
    ua = [seen[k][2] for k in ("grow96", "grow128", "shrink96")]
    checks.that(ua == [1, 1, 1], "exactly one unit attention per change")
    srbs, completions, outstanding = seen["controller"]
    checks.that(srbs == completions and outstanding == 0, "every request completed exactly once")


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^SIZE-BEFORE 131072$", "the guest saw 64 MiB first")
    checks.has(out, "^SIZE-NOW 196608$", "grow to 96 MiB: the guest's disk grew")
    checks.has(out, "^SIZE-NOW 262144$", "grow to 128 MiB: the guest's disk grew")
    checks.has(out, "^DMESG3 .*sda: detected capacity change from 262144 to 196608",
               "shrink to 96 MiB: the guest's disk shrank")
    checks.has(out, "^HEAD-KEPT-AFTER-SHRINK$", "shrink: the data at the start survived")
    checks.has(out, "^NEW-END-KEPT-AFTER-SHRINK$", "shrink: ... and so did the data at the new end")
    checks.has(out, "^READ-ACROSS-NEW-END 0 1048576 bytes$", "shrink: a read across the new end stops there")
    checks.lacks(out, "^POLL-READ-FAILED$", "the guest's reads never failed")
    checks.count(out, "^HEAD-KEPT$", 2, "the pattern at the start survived both changes")
    checks.count(out, "^OLD-END-KEPT$", 2, "the data at the old end survived")
    checks.count(out, "^GROWN-RANGE-READS-ZEROS$", 2, "what the grow added reads as zeros")
    checks.count(out, "^WRITE-AT-NEW-END-OK$", 2, "writes at the new end succeed")
    checks.count(out, "^NEW-END-VERIFIED$", 2, "... and read back")
    checks.has(out, "^DMESG1 .*cmd 0x28 status: scsi 0x2 srb 0x84",
               "storvsc logged the read that met the unit attention (default logging)")
    checks.has(out, "^DMESG1 .*sda: detected capacity change from 131072 to 196608",
               "the guest logged the capacity change (default logging)")
    checks.has(out, "^DMESG2 .*Add. Sense: Capacity data has changed", "with logging_level=2 storvsc logs the sense")


def rescan_ms(out: List[str], prefix: str) -> str:
    """Guest time from each command storvsc logged failing with SRB status 0x84 (the one
    that met the unit attention) to the capacity change it logged next, in ms."""
    times, t0 = [], None
    for line in matches(out, f"^{prefix} "):
        stamp = re.search(r"\[ *([0-9]+\.[0-9]+)\]", line)
        if stamp is None:
            continue
        t = float(stamp.group(1))
        if "srb 0x84" in line:
            t0 = t
        elif "detected capacity change" in line and t0 is not None:
            times.append(f"{(t - t0) * 1000:.1f}")
            t0 = None
    return " ".join(times)
