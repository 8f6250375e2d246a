"""hv-storvsc,iothread-vq-mapping=: the channels spread over a list of IOThreads, on stock
6.12 with 4 vCPUs (a primary and 3 subchannels), inline-rounds off so that every ring round
runs in the channel's IOThread.

Channels 0 and 3 go to io0, 1 and 2 to io1; io2 is in the machine but not in the list (the
control). The host counts each IOThread's times on a CPU (schedstat) before and after a fio
crc32c verify on a RAM disk that it adds for it (LUN 1), 4 jobs on 4 CPUs: io0 and io1 ran,
io2 never did. It also counts QEMU's threads named hvstor-ch* (none) and reads the channels'
statistics: all 4 open, each with worker rounds and SRBs. The list makes every -device JSON
(guest.py), so sizes and LUNs are numbers. Host and guest take turns through console markers
and the disk's hot add and removal; the only clock is the hang guard."""

import re
from typing import Any, Dict, List

from conftest import Boot, Checks, Controller, Disk, Machine, go_on, guest, qemu_threads, stats
from guestlib import LUN_HELPERS

GUEST = r"""
echo "CHANNELS $(ls -d /sys/bus/vmbus/devices/*/channels/*/ | wc -l)"
echo "MAP-READY"
D=$(wait_lun 1)
fio --name=map --filename=/dev/$D --direct=1 --ioengine=libaio --iodepth=8 --numjobs=4 \
    --offset_increment=16M --size=16M --cpus_allowed=0-3 --cpus_allowed_policy=split \
    --rw=randwrite --bs=4k-64k --verify=crc32c --verify_fatal=1 --group_reporting >/tmp/map.out 2>&1 \
  && echo "FIO-MAP-OK" || { cat /tmp/map.out; echo "FIO-MAP-FAILED"; }
grep -E "err=" /tmp/map.out
echo "MAP-DONE"
wait_for "LUN 1 to go" lun_gone 1
echo "MAP-GONE"
wait_lun 2 >/dev/null # the host's last step: the guest must not end before it
"""
IOTHREADS = ("io0", "io1", "io2")
MAPPING: List[object] = [{"iothread": "io0", "vqs": [0, 3]}, {"iothread": "io1", "vqs": [1, 2]}]


def io_slices(pid: int) -> Dict[str, int]:
    """Times each of our IOThreads ran on a CPU (QEMU names them "IO <id>")."""
    threads = qemu_threads(pid)
    return {io: sum(s for name, s in threads if name == "IO " + io) for io in IOTHREADS}


def test_iothread_mapping(boot: Boot, checks: Checks) -> None:
    m = boot(guest(kernel="debian-6.12", vcpus=4, mem="1G",
                   objects=[{"qom-type": "iothread", "id": io} for io in IOTHREADS],
                   qemu_args=["-name", "hvstor,debug-threads=on"],
                   controllers=[Controller("scsi0", {"inline-rounds": False, "iothread-vq-mapping": MAPPING})],
                   disks=[Disk({"id": "d0", "backend": "ram", "size": 16 << 20}, lun=0)],
                   cmd=LUN_HELPERS + GUEST))
    m.wait_console(re.compile(r"^MAP-READY$"))
    assert m.pid is not None
    found = sorted(name for name, _ in qemu_threads(m.pid) if name.startswith("IO io"))
    checks.that(found == ["IO io0", "IO io1", "IO io2"], f"QEMU names its IOThreads (debug-threads=on) ({found})")
    before = io_slices(m.pid)
    m.qmp("device_add", driver="hv-disk", id="map", bus="scsi0.0", lun=1, backend="ram", size=64 << 20)
    m.wait_console(re.compile(r"^MAP-DONE$"))
    after = io_slices(m.pid)
    host_checks(m, checks, {io: after[io] - before[io] for io in IOTHREADS})
    m.device_del("map")
    go_on(m, 2, dev_id="done")
    r = m.finish()
    checks.boot_ok(r)
    checks.has(r.output, "^CHANNELS 4$", "primary + 3 subchannels")
    checks.has(r.output, "^FIO-MAP-OK", "fio verify through the mapped channels")
    checks.has(r.output, "^MAP-GONE", "the disk went with device_del")


def host_checks(m: Machine, checks: Checks, ran: Dict[str, int]) -> None:
    """What ran during the fio verify, QEMU's channel threads and the channels' statistics."""
    assert m.pid is not None
    channel_threads = sum(1 for name, _ in qemu_threads(m.pid) if name.startswith("hvstor-ch"))
    chans: List[Dict[str, Any]] = stats(m, "scsi0")["channels"]
    opened = sum(1 for c in chans if c["open"])
    busy = sum(1 for c in chans if c["wakeups"] > 0 and c["srbs"] > 0)
    print(f"  ran {ran}, channel threads {channel_threads}, channels open {opened}, "
          f"with rounds and SRBs {busy}", flush=True)
    checks.that(ran["io0"] > 0, f"io0 (channels 0 and 3) ran ({ran['io0']})")
    checks.that(ran["io1"] > 0, f"io1 (channels 1 and 2) ran ({ran['io1']})")
    checks.that(ran["io2"] == 0, f"io2, in no mapping, never ran ({ran['io2']})")
    checks.that(channel_threads == 0, f"no channel has a thread of its own ({channel_threads})")
    checks.that(opened == 4, f"all 4 channels open ({opened})")
    checks.that(busy == 4, f"every one of them had worker rounds and SRBs ({busy})")
