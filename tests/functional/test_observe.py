"""What the host saw, on a stock 6.12 guest with 4 vCPUs (so a primary and 3 subchannels).

`-trace 'hvstor_*'` records the VMBus handshake, the ring GPADLs, the channel opens, the
subchannel offers and every SRB's submission and completion; qom-get of hv-storvsc's and the
bridge's "stats" over QMP, while the guest runs (after fio on every vCPU), counts SRBs on more
than one channel. The guest waits for the host's reading through a marker on the console and
goes on once the host plugs a second disk; every wait ends when its event comes or the boot
ends, so the only clock is the hang guard."""

import re
from typing import Any, Dict, List

from conftest import Boot, Checks, Disk, Machine, count, file_lines, go_on, guest, has, stats
from guestlib import LUN_HELPERS

GUEST = r"""
D=$(ls /sys/block | grep '^sd' | head -n 1)
echo "CHANNELS $(ls /sys/block/$D/mq | wc -l)"
fio --name=obs --filename=/dev/$D --direct=1 --ioengine=libaio --iodepth=4 --rw=randwrite \
    --bs=4k --size=8M --offset_increment=8M --numjobs=4 --cpus_allowed_policy=split --cpus_allowed=0-3 \
    --verify=crc32c --verify_fatal=1 --group_reporting --output-format=normal >/tmp/fio.out 2>&1 \
  || { cat /tmp/fio.out; echo "FIO-FAILED"; exit 1; }
echo "FIO-OK"
echo "OBSERVE-READY-FOR-STATS"
# The host answers by plugging a second disk once it has read the statistics.
wait_for "the host's second disk" has_disks 2
echo "RESUMED with $(disks) disks"
"""


def test_observe(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    trace = str(tmp_path / "trace.log")
    m = boot(guest(kernel="debian-6.12", vcpus=4,
                   disks=[Disk({"id": "d0", "backend": "ram", "size": "64M"}, lun=0)],
                   qemu_args=["-trace", "hvstor_*", "-D", trace], cmd=LUN_HELPERS + GUEST))
    m.wait_console(re.compile(r"^OBSERVE-READY-FOR-STATS$"))
    srbs = stats_checks(m, checks)
    go_on(m, 1, dev_id="go")
    r = m.finish()
    checks.boot_ok(r)
    checks.has(r.output, "^CHANNELS 4$", "the guest's disk has 4 hardware queues")
    checks.has(r.output, "^FIO-OK$", "fio verified its data")
    checks.has(r.output, "^RESUMED with 2 disks", "the guest resumed when the host plugged the second disk")
    trace_checks(file_lines(trace), srbs, checks)


def stats_checks(m: Machine, checks: Checks) -> int:
    """The controller's and the bus's statistics with the guest idle; the SRBs counted."""
    ctl: Dict[str, Any] = stats(m, "scsi0")
    bus: Dict[str, Any] = stats(m, "/machine/hv-vmbus")
    print(f"  controller: {ctl}\n  bus: {bus}", flush=True)
    chans: List[Dict[str, Any]] = ctl["channels"]
    busy = sum(1 for c in chans if c["srbs"] > 0)
    inline = sum(c["inline_rounds"] for c in chans)
    print(f"  channels with SRBs {busy}, open {ctl['open_channels']} {bus['open_channels']}, "
          f"bus version {bus['version']} gpadls {bus['gpadls']}, SRBs {ctl['srbs']}, "
          f"inline rounds {inline}", flush=True)
    checks.that(isinstance(ctl, dict) and "channels" in ctl, "stats: read over QMP while the guest ran")
    checks.that(2 <= busy <= 4, f"stats: SRBs on more than one channel ({busy})")
    checks.that(ctl["open_channels"] == 4 and bus["open_channels"] == 4,
                "stats: the controller and the bus agree on 4 open channels "
                f"({ctl['open_channels']}, {bus['open_channels']})")
    checks.that(all(c["completions"] == c["srbs"] and c["outstanding"] == 0 for c in chans),
                "stats: every SRB answered")
    checks.that(inline >= 1, f"stats: guest signals ran rounds on their vCPU threads (inline rounds) ({inline})")
    checks.that(str(bus["version"]) == "5.3" and bus["gpadls"] >= 4,
                f"stats: the bus negotiated 5.3 and holds the ring GPADLs ({bus['version']}, {bus['gpadls']})")
    return int(ctl["srbs"])


def trace_has(lines: List[str], event: str, text: str = "") -> bool:
    """The trace log has the event, its text matching `text`."""
    return has(lines, f"hvstor_{event} .*{text}")


def trace_checks(lines: List[str], srbs: int, checks: Checks) -> None:
    submits, completes = count(lines, "hvstor_storvsp_srb_submit "), count(lines, "hvstor_storvsp_srb_complete ")
    print(f"  trace: {len(lines)} lines, {submits} SRBs submitted, {completes} completed", flush=True)
    checks.that(trace_has(lines, "vmbus_connect", "version 0x50003"), "trace: VMBus 5.3 connection")
    checks.that(trace_has(lines, "vmbus_msg_in", "vp [0-9]+ message type 14,"), "trace: the guest's messages")
    checks.that(trace_has(lines, "vmbus_gpadl_create", "relid [0-9]+ gpadl [0-9]+: [0-9]+ pages"),
                "trace: ring GPADLs created")
    checks.that(trace_has(lines, "storvsp_subchannels", "asked for 3, offered 3"),
                "trace: subchannels asked for and offered")
    checks.that(trace_has(lines, "vmbus_offer", "subchannel index 3"), "trace: subchannel offers")
    opened = count(lines, "hvstor_vmbus_open_result relid [0-9]+ status 0x0")
    checks.that(opened >= 4, f"trace: four channels opened ({opened})")
    checks.that(trace_has(lines, "storvsp_control", "operation 7 status 0x0"),
                "trace: the storvsp handshake (BEGIN_INITIALIZATION answered)")
    checks.that(trace_has(lines, "storvsp_srb_submit", "lun 0 opcode 0x2a 4096 bytes"), "trace: SRB submissions")
    checks.that(trace_has(lines, "storvsp_srb_complete", "srb status 0x01 scsi status 0x00 4096 bytes"),
                "trace: SRB completions with status")
    # The statistics were read with the guest idle: the trace has at least those SRBs, each
    # with its completion (the disk plugged afterwards adds a few of its own).
    checks.that(srbs > 1000 and submits >= srbs and completes >= srbs,
                f"trace: every SRB the statistics counted, submitted and completed "
                f"({srbs} counted, {submits} submitted, {completes} completed)")
