"""hv-disk on QEMU's block layer (drive=), stock 6.12, 2 vCPUs, one controller.

  LUN 0: a qcow2 overlay over a raw base image (own IOThread): the guest reads the base
         through it, and fio writes and verifies over and past the base's end;
  LUN 1: a user's qcow2 image in a shared IOThread (iothread=io0): fio crc32c verify, a
         discard, block_resize from 128 to 192 MiB (the guest rescans and writes past the
         old end), query-blockstats counting its reads, writes and unmap, then the
         image, converted to raw on the host, must hold exactly what the guest read back;
  LUN 2: the raw base read-only: readable, writes refused;
  LUN 3: a qcow2 node added while the guest runs (blockdev-add, device_add drive=), written
         and verified, then removed (device_del), after which blockdev-del must succeed: the
         disk gave the node back.
Afterwards qemu-img check finds no errors and the base image is unchanged. Host and guest
take turns through console markers; the only clock is the hang guard."""

import os
import re
import shutil
import subprocess
from typing import Any, List

from qemu.qmp import ExecuteError

from conftest import Boot, Checks, Disk, Machine, go_on, guest, sha256_file, stats
from guestlib import LUN_HELPERS

GUEST = r"""
verify() { # name device fio-args...
  n=$1 dev=$2; shift 2
  fio --name=$n --filename=/dev/$dev --direct=1 --ioengine=libaio --iodepth=16 \
      --verify=crc32c --verify_fatal=1 --output-format=normal "$@" >/tmp/$n.out 2>&1 \
    || { cat /tmp/$n.out; echo "FIO-FAILED $n"; exit 1; }
  grep -E "err=" /tmp/$n.out
}
A=$(lun_dev 0); B=$(lun_dev 1); C=$(lun_dev 2)
echo "SIZES $(cat /sys/block/$A/size) $(cat /sys/block/$B/size) $(cat /sys/block/$C/size)"
echo "READ-ONLY $(cat /sys/block/$A/ro) $(cat /sys/block/$B/ro) $(cat /sys/block/$C/ro)"
echo "BASE-VIA-OVERLAY $(dd if=/dev/$A bs=1M count=64 2>/dev/null | sha256sum | cut -d' ' -f1)"
echo "BASE-VIA-RO $(dd if=/dev/$C bs=1M count=64 2>/dev/null | sha256sum | cut -d' ' -f1)"
if dd if=/dev/zero of=/dev/$C bs=4k count=1 oflag=direct 2>/dev/null; then echo "RO-WRITE-ACCEPTED"
else echo "RO-WRITE-REFUSED"; fi
verify overlay $A --rw=randwrite --bs=4k-64k --offset=32M --size=128M
echo "FIO-OVERLAY-OK"
verify user $B --rw=randwrite --bs=4k-128k --size=64M --name=seq --filename=/dev/$B --offset=64M \
  --size=64M --rw=write --bs=256k --direct=1 --ioengine=libaio --iodepth=8 --verify=crc32c --verify_fatal=1
echo "FIO-USER-OK"
blkdiscard -o 0 -l 1048576 /dev/$B && echo "DISCARD-OK"
echo "OVERLAY-SUM $(sha256sum /dev/$A | cut -d' ' -f1)"
echo "DRIVE-READY-FOR-ADD"
D=$(wait_lun 3)
echo "HOT $(cat /sys/block/$D/size)"
verify hot $D --rw=randwrite --bs=4k-64k --size=16M
echo "FIO-HOT-OK"
echo "DRIVE-READY-FOR-DEL"
wait_for "$D to go" [ ! -e "/sys/block/$D" ]
echo "GONE $D"
echo "DRIVE-READY-FOR-RESIZE"
# Each read gets the UNIT ATTENTION that makes the guest read the capacity again.
grown() { dd if=/dev/$B of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null; [ "$(cat /sys/block/$B/size)" != 262144 ]; }
wait_for "$B to grow" grown
echo "RESIZED $(cat /sys/block/$B/size)"
verify grown $B --rw=randwrite --bs=4k-64k --offset=128M --size=64M
echo "FIO-GROWN-OK"
echo "USER-SUM $(sha256sum /dev/$B | cut -d' ' -f1)"
wait_lun 4 >/dev/null # the host's last step: the guest must not end before it
"""


def qemu_img(*args: str) -> subprocess.CompletedProcess[str]:
    """qemu-img ARGS (the host's, from PATH), its output kept."""
    tool = shutil.which("qemu-img")
    assert tool is not None, "qemu-img is not installed"
    return subprocess.run([tool, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)


def make_images(work: str) -> str:
    """A 64 MiB random raw base, a qcow2 overlay over it, a user's and a hot-plug image;
    the base's SHA-256."""
    base = os.path.join(work, "base.raw")
    with open(base, "wb") as f:
        f.write(os.urandom(64 << 20))
    for args in (["-b", base, "-F", "raw", os.path.join(work, "overlay.qcow2"), "256M"],
                 [os.path.join(work, "user.qcow2"), "128M"], [os.path.join(work, "hot.qcow2"), "32M"]):
        r = qemu_img("create", "-q", "-f", "qcow2", *args)
        assert r.returncode == 0, r.stdout
    return sha256_file(base)


def test_drive(boot: Boot, checks: Checks, tmp_path: Any) -> None:
    work = str(tmp_path)
    base_sum = make_images(work)
    drives = [f"if=none,id=overlay,file={work}/overlay.qcow2,format=qcow2",
              f"if=none,id=user,file={work}/user.qcow2,format=qcow2",
              f"if=none,id=base,file={work}/base.raw,format=raw,readonly=on"]
    m = boot(guest(kernel="debian-6.12", vcpus=2, mem="1G",
                   objects=[{"qom-type": "iothread", "id": "io0"}],
                   qemu_args=[a for d in drives for a in ("-drive", d)],
                   disks=[Disk({"id": "d0", "drive": "overlay"}, lun=0),
                          Disk({"id": "d1", "drive": "user", "iothread": "io0"}, lun=1),
                          Disk({"id": "d2", "drive": "base"}, lun=2)],
                   cmd=LUN_HELPERS + GUEST))
    hot_plug(m, checks, os.path.join(work, "hot.qcow2"))
    resize(m, checks)
    go_on(m, 4, dev_id="done")
    r = m.finish()
    checks.boot_ok(r)
    guest_checks(r.output, checks)
    image_checks(work, base_sum, r.output, checks)


def hot_plug(m: Machine, checks: Checks, image: str) -> None:
    """A qcow2 node added while the guest runs, used by a disk, then given back."""
    m.wait_console(re.compile(r"^DRIVE-READY-FOR-ADD$"))
    m.qmp("blockdev-add", driver="qcow2", **{"node-name": "hot"}, file={"driver": "file", "filename": image})
    m.qmp("device_add", driver="hv-disk", id="hot", bus="scsi0.0", lun=3, drive="hot", iothread="io0")
    refusal = ""
    try:
        m.qmp("blockdev-del", **{"node-name": "hot"})
    except ExecuteError as e:
        refusal = str(e)
    checks.that(refusal != "", f"the node cannot be deleted while the disk uses it ({refusal or 'deleted'})")
    m.wait_console(re.compile(r"^DRIVE-READY-FOR-DEL$"))
    writes = stats(m, "hot")["writes"]
    checks.that(writes > 0, f"its statistics count the writes ({writes})")
    m.device_del("hot")   # returns with DEVICE_DELETED
    given_back = "deleted"
    try:
        m.qmp("blockdev-del", **{"node-name": "hot"})
    except ExecuteError as e:
        given_back = str(e)
    checks.that(given_back == "deleted", f"the removed disk gave its node back (blockdev-del) ({given_back})")
    iothreads = sorted(t["id"] for t in m.qmp("query-iothreads"))
    checks.that(iothreads == ["io0"], f"the user's IOThread is still there ({iothreads})")


def resize(m: Machine, checks: Checks) -> None:
    """capacity cannot pass the drive; block_resize grows the disk with it."""
    m.wait_console(re.compile(r"^DRIVE-READY-FOR-RESIZE$"))
    refusal = ""
    try:
        m.qmp("qom-set", path="/machine/peripheral/d1", property="capacity", value=1 << 30)
    except ExecuteError as e:
        refusal = str(e)
    checks.that("grow the drive with block_resize" in refusal,
                f"capacity past the drive's length is refused ({refusal or 'accepted'})")
    m.qmp("block_resize", device="user", size=192 << 20)
    capacity = m.qmp("qom-get", path="/machine/peripheral/d1", property="capacity")
    checks.that(capacity == 201326592, f"block_resize grows the disk with its drive ({capacity})")
    print(f"  user disk's statistics: {stats(m, 'd1')}", flush=True)
    blockstats(m, checks)


def blockstats(m: Machine, checks: Checks) -> None:
    """query-blockstats counts the guest's I/O on the user's drive: fio's reads and writes,
    blkdiscard's unmap."""
    entry = [e for e in m.qmp("query-blockstats") if e.get("device") == "user"]
    checks.that(len(entry) == 1, f"query-blockstats lists the drive once ({len(entry)})")
    if entry:
        st = entry[0]["stats"]
        ops = {k: st[f"{k}_operations"] for k in ("rd", "wr", "unmap")}
        checks.that(ops["rd"] > 0 and ops["wr"] > 0 and ops["unmap"] >= 1 and st["wr_bytes"] >= 64 << 20,
                    f"query-blockstats counts its reads, writes and unmaps ({ops}, {st['wr_bytes']} bytes written)")


def guest_checks(out: List[str], checks: Checks) -> None:
    checks.has(out, "^SIZES 524288 262144 131072$", "the guest sees each image's virtual size")
    checks.has(out, "^READ-ONLY 0 0 1$", "only the read-only drive is read-only in the guest")
    checks.has(out, "^RO-WRITE-REFUSED$", "a write to the read-only drive is refused")
    checks.has(out, "^FIO-OVERLAY-OK$", "fio verifies over and past the base, on the overlay")
    checks.has(out, "^FIO-USER-OK$", "fio verifies on the user's qcow2 image (shared IOThread)")
    checks.has(out, "^DISCARD-OK$", "a discard succeeds")
    checks.has(out, "^HOT 65536$", "the guest sees the hot-added 32 MiB disk")
    checks.has(out, "^FIO-HOT-OK$", "fio verifies on it")
    checks.has(out, "^GONE sd[a-z]+$", "the disk disappears from the guest")
    checks.has(out, "^RESIZED 393216$", "the guest sees the new size (UNIT ATTENTION, rescan)")
    checks.has(out, "^FIO-GROWN-OK$", "fio verifies past the old end")


def raw_sum(work: str, name: str) -> str:
    """The SHA-256 of image NAME.qcow2 converted to raw ("CONVERT-FAILED" when it cannot be)."""
    raw = os.path.join(work, f"{name}.raw")
    r = qemu_img("convert", "-O", "raw", os.path.join(work, f"{name}.qcow2"), raw)
    if r.returncode != 0:
        print(f"  qemu-img convert of {name}.qcow2 failed: {r.stdout.strip()}", flush=True)
        return "CONVERT-FAILED"
    return sha256_file(raw)


def image_checks(work: str, base_sum: str, out: List[str], checks: Checks) -> None:
    """The images on the host after QEMU has exited."""
    checks.has(out, f"^BASE-VIA-OVERLAY {base_sum}$", "the base reads back through the qcow2 overlay")
    checks.has(out, f"^BASE-VIA-RO {base_sum}$", "the base reads back through the read-only drive")
    checks.has(out, f"^USER-SUM {raw_sum(work, 'user')}$", "the user image holds what the guest read back")
    checks.has(out, f"^OVERLAY-SUM {raw_sum(work, 'overlay')}$", "the overlay holds what the guest read back")
    checks.that(sha256_file(os.path.join(work, "base.raw")) == base_sum, "the base image is unchanged")
    for img, what in (("overlay", "overlay clean"), ("user", "user image clean"), ("hot", "hot-added image clean")):
        r = qemu_img("check", "-q", os.path.join(work, f"{img}.qcow2"))
        checks.that(r.returncode == 0, f"qemu-img check: {what}" + (f" ({r.stdout.strip()})" if r.returncode else ""))
