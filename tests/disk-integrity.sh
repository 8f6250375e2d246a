# Data integrity through hv-storvsc on a stock guest; sourced by tests/boot/disk-*.sh
# with KERNEL set. Two file-backed LUNs on one controller, 8 vCPUs (so subchannels):
#   LUN 0: fio with crc32c verify, random and sequential, 8 jobs on 8 CPUs, 1 GiB;
#   LUN 1: mkfs.ext4, mount, write, unmount, remount, checksum.
# Then the host files must hold exactly what the guest read back.
. "$(dirname "${BASH_SOURCE[0]}")/boot-lib.sh"
: "${KERNEL:?}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK" "$OUT"' EXIT
truncate -s 1100M "$WORK/lun0.img"
truncate -s 256M "$WORK/lun1.img"

read -r -d '' GUEST_CMD <<'SH'
set -e
dev_of_lun() { for d in /sys/block/sd*; do a=$(basename "$(readlink "$d/device")"); if [ "${a##*:}" = "$1" ]; then echo "/dev/$(basename "$d")"; fi; done; }
A=$(dev_of_lun 0); B=$(dev_of_lun 1)
echo "VENDOR $(cat /sys/block/${A#/dev/}/device/vendor) MODEL $(cat /sys/block/${A#/dev/}/device/model)"
echo "CHANNELS $(ls -d /sys/bus/vmbus/devices/*/channels/*/ | wc -l)"
echo "NR_HW_QUEUES $(ls -d /sys/block/${A#/dev/}/mq/*/ | wc -l)"
fio --name=rand --filename=$A --direct=1 --ioengine=libaio --iodepth=16 --numjobs=4 \
    --size=128M --offset_increment=128M --rw=randwrite --bs=4k-64k --verify=crc32c --verify_fatal=1 \
    --name=seq --filename=$A --direct=1 --ioengine=libaio --iodepth=8 --numjobs=4 --offset=512M \
    --size=128M --offset_increment=128M --rw=write --bs=128k --verify=crc32c --verify_fatal=1 \
    --cpus_allowed=0-7 --cpus_allowed_policy=split --group_reporting --output-format=normal > /tmp/fio.out 2>&1 \
  || { cat /tmp/fio.out; echo FIO FAILED; exit 1; }
grep -E "WRITE:|READ:|err=" /tmp/fio.out || true
echo "FIO OK"
echo "LUN0SUM $(dd if=$A bs=1M count=1024 2>/dev/null | sha256sum | cut -d' ' -f1)"
mkfs.ext4 -q -F $B
mkdir -p /mnt && mount $B /mnt
dd if=/dev/urandom of=/mnt/data bs=1M count=48 2>/dev/null
S1=$(sha256sum /mnt/data | cut -d' ' -f1)
umount /mnt && mount $B /mnt
S2=$(sha256sum /mnt/data | cut -d' ' -f1)
[ "$S1" = "$S2" ] && echo "EXT4 OK" || echo "EXT4 MISMATCH $S1 $S2"
umount /mnt
sync
echo "LUN1SUM $(sha256sum $B | cut -d' ' -f1)"
SH

boot_guest --log "${DISK_TEST_LOG:-$WORK/console.log}" --kernel "$KERNEL" --vcpus 8 --mem 1G --wait-disks 2 --cmd "$GUEST_CMD" \
  -- -device hv-storvsc,id=scsi0 \
     -device hv-disk,bus=scsi0.0,lun=0,file="$WORK/lun0.img" \
     -device hv-disk,bus=scsi0.0,lun=1,file="$WORK/lun1.img"
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "Hyper-V identity" has 'VENDOR Msft +MODEL Virtual Disk'
check "primary + 7 subchannels open" has '^CHANNELS 8$'
check "fio verify passed" has '^FIO OK'
check "ext4 data survives remount" has '^EXT4 OK'
host0=$(head -c 1024M "$WORK/lun0.img" | sha256sum | cut -d' ' -f1)
host1=$(sha256sum < "$WORK/lun1.img" | cut -d' ' -f1)
check "host file of LUN 0 holds what the guest read" has "^LUN0SUM $host0"
check "host file of LUN 1 holds what the guest read" has "^LUN1SUM $host1"
grep -E "^(CHANNELS|NR_HW_QUEUES|VENDOR)| (WRITE|READ):" "$OUT" | sed 's/^/  /'
finish
