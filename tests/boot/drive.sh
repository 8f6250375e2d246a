# hv-disk on QEMU's block layer (drive=), stock 6.12, 2 vCPUs, one controller:
#   LUN 0: a qcow2 overlay over a raw base image (own IOThread): the guest reads the base
#          through it, and fio writes and verifies over and past the base's end;
#   LUN 1: a user's qcow2 image in a shared IOThread (iothread=io0): fio crc32c verify,
#          a discard, block_resize from 128 to 192 MiB (the guest rescans and writes past
#          the old end), then the image, converted to raw on the host, must hold exactly
#          what the guest read back;
#   LUN 2: the raw base read-only: readable, writes refused;
#   LUN 3: a qcow2 node added while the guest runs (blockdev-add, device_add drive=),
#          written and verified, then removed (device_del), after which blockdev-del must
#          succeed: the disk gave the node back.
# Afterwards qemu-img check finds no errors and the base image is unchanged. The host and
# the guest take turns through console markers (see hotplug.sh); the only clock is the
# hang guard (boot-lib.sh).
. "$(dirname "$0")/../boot-lib.sh"

head -c 64M /dev/urandom >"$WORK/base.raw"
BASE_SUM=$(sha256sum "$WORK/base.raw" | cut -d' ' -f1)
qemu-img create -q -f qcow2 -b "$WORK/base.raw" -F raw "$WORK/overlay.qcow2" 256M
qemu-img create -q -f qcow2 "$WORK/user.qcow2" 128M
qemu-img create -q -f qcow2 "$WORK/hot.qcow2" 32M

read -r -d '' GUEST_CMD <<'SH'
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
SH

read -r -d '' HOST_SIDE <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, say
sock, console, boot_pid, alive, extra = host_side()
hot_image = extra[0]

try:
    q = Qmp.connect(sock, alive)
    q.wait_until(lambda: console_has(console, 'DRIVE-READY-FOR-ADD'), alive)
    q.command('blockdev-add', driver='qcow2', **{'node-name': 'hot'},
              file={'driver': 'file', 'filename': hot_image})
    q.command('device_add', driver='hv-disk', id='hot', bus='scsi0.0', lun=3, drive='hot',
              iothread='io0')
    say('ADDED hot')
    try:
        q.command('blockdev-del', **{'node-name': 'hot'})
        say('BLOCKDEV-DEL-WHILE-IN-USE-ACCEPTED')
    except QmpError as e:
        say('BLOCKDEV-DEL-WHILE-IN-USE-REFUSED', e)
    q.wait_until(lambda: console_has(console, 'DRIVE-READY-FOR-DEL'), alive)
    say('HOT-STATS', q.command('qom-get', path='/machine/peripheral/hot', property='stats'))
    q.device_del('hot')
    say('DELETED hot')
    q.command('blockdev-del', **{'node-name': 'hot'})
    say('BLOCKDEV-DEL-OK')
    say('IOTHREADS', ' '.join(sorted(t['id'] for t in q.command('query-iothreads'))))
    q.wait_until(lambda: console_has(console, 'DRIVE-READY-FOR-RESIZE'), alive)
    try:
        q.command('qom-set', path='/machine/peripheral/d1', property='capacity', value=1 << 30)
        say('CAPACITY-PAST-THE-DRIVE-ACCEPTED')
    except QmpError as e:
        say('CAPACITY-PAST-THE-DRIVE-REFUSED', e)
    q.command('block_resize', device='user', size=192 << 20)
    say('BLOCK-RESIZED', q.command('qom-get', path='/machine/peripheral/d1', property='capacity'))
    say('USER-STATS', q.command('qom-get', path='/machine/peripheral/d1', property='stats'))
    q.command('device_add', driver='hv-disk', id='done', bus='scsi0.0', lun=4, backend='null',
              size=1 << 20)
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" "$WORK/hot.qcow2" -- \
  --kernel debian-6.12 --vcpus 2 --mem 1G --wait-disks 3 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -object iothread,id=io0 \
     -drive if=none,id=overlay,file="$WORK/overlay.qcow2",format=qcow2 \
     -drive if=none,id=user,file="$WORK/user.qcow2",format=qcow2 \
     -drive if=none,id=base,file="$WORK/base.raw",format=raw,readonly=on \
     -device hv-storvsc,id=scsi0 \
     -device hv-disk,id=d0,bus=scsi0.0,lun=0,drive=overlay \
     -device hv-disk,id=d1,bus=scsi0.0,lun=1,drive=user,iothread=io0 \
     -device hv-disk,id=d2,bus=scsi0.0,lun=2,drive=base

user_raw_sum=$(qemu-img convert -O raw "$WORK/user.qcow2" "$WORK/user.raw" && sha256sum "$WORK/user.raw" | cut -d' ' -f1)
overlay_raw_sum=$(qemu-img convert -O raw "$WORK/overlay.qcow2" "$WORK/overlay.raw" && sha256sum "$WORK/overlay.raw" | cut -d' ' -f1)
for img in overlay user hot; do
  qemu-img check -q "$WORK/$img.qcow2" >"$WORK/check-$img.txt" 2>&1 && echo "host: CHECK-OK $img" >>"$OUT"
done

check_boot_and_host
check "the guest sees each image's virtual size" has '^SIZES 524288 262144 131072$'
check "only the read-only drive is read-only in the guest" has '^READ-ONLY 0 0 1$'
check "the base reads back through the qcow2 overlay" has "^BASE-VIA-OVERLAY $BASE_SUM\$"
check "the base reads back through the read-only drive" has "^BASE-VIA-RO $BASE_SUM\$"
check "a write to the read-only drive is refused" has '^RO-WRITE-REFUSED$'
check "fio verifies over and past the base, on the overlay" has '^FIO-OVERLAY-OK$'
check "fio verifies on the user's qcow2 image (shared IOThread)" has '^FIO-USER-OK$'
check "a discard succeeds" has '^DISCARD-OK$'
check "the user image holds what the guest read back" has "^USER-SUM $user_raw_sum\$"
check "the overlay holds what the guest read back" has "^OVERLAY-SUM $overlay_raw_sum\$"
check "the base image is unchanged" [ "$(sha256sum "$WORK/base.raw" | cut -d' ' -f1)" = "$BASE_SUM" ]
check "qemu-img check: overlay clean" has '^host: CHECK-OK overlay$'
check "qemu-img check: user image clean" has '^host: CHECK-OK user$'
check "qemu-img check: hot-added image clean" has '^host: CHECK-OK hot$'
check "device_add with drive= and iothread= accepted" has '^host: ADDED hot$'
check "the node cannot be deleted while the disk uses it" has '^host: BLOCKDEV-DEL-WHILE-IN-USE-REFUSED'
check "the guest sees the hot-added 32 MiB disk" has '^HOT 65536$'
check "fio verifies on it" has '^FIO-HOT-OK$'
check "its statistics count the writes" has '^host: HOT-STATS .*"writes":[1-9]'
check "device_del completes (DEVICE_DELETED)" has '^host: DELETED hot$'
check "the disk disappears from the guest" has '^GONE sd[a-z]+$'
check "the removed disk gave its node back (blockdev-del)" has '^host: BLOCKDEV-DEL-OK$'
check "the user's IOThread is still there" has '^host: IOTHREADS io0$'
check "capacity past the drive's length is refused" \
  has '^host: CAPACITY-PAST-THE-DRIVE-REFUSED .*grow the drive with block_resize'
check "block_resize grows the disk with its drive" has '^host: BLOCK-RESIZED 201326592$'
check "the guest sees the new size (UNIT ATTENTION, rescan)" has '^RESIZED 393216$'
check "fio verifies past the old end" has '^FIO-GROWN-OK$'
grep -E '^(SIZES|READ-ONLY|HOT|GONE|RESIZED|host: (ADDED|BLOCKDEV|DELETED|CHECK|IOTHREADS|CAPACITY|BLOCK-RESIZED))' "$OUT" | sed 's/^/  /'
finish
