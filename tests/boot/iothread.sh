# hv-storvsc,iothread=io0, stock 6.12, 4 vCPUs (a primary and 3 subchannels): every
# channel's worker turns in the IOThread, none has a thread of its own.
#   LUN 0: a file disk; LUN 1: a qcow2 image through drive= in the same IOThread.
# fio crc32c verify on both, 4 jobs on 4 CPUs. The host side then counts QEMU's threads
# named hvstor-ch* (a channel worker's name: there must be none) and reads the channels'
# statistics, and adds a disk on LUN 2 (the rescan runs through the primary in the
# IOThread). Then hv_storvsc is unloaded and loaded again: every channel closes (its watch
# leaves the IOThread) and opens again, and both disks read back what they held. Host and
# guest take turns through console markers (see hotplug.sh); the only clock is the hang
# guard (boot-lib.sh).
. "$(dirname "$0")/../boot-lib.sh"
truncate -s 256M "$WORK/lun0.img"
qemu-img create -q -f qcow2 "$WORK/user.qcow2" 256M

read -r -d '' GUEST_CMD <<'SH'
verify() { # name device fio-args...
  n=$1 dev=$2; shift 2
  fio --name=$n --filename=/dev/$dev --direct=1 --ioengine=libaio --iodepth=16 --numjobs=4 \
      --offset_increment=48M --size=48M --cpus_allowed=0-3 --cpus_allowed_policy=split \
      --verify=crc32c --verify_fatal=1 --group_reporting --output-format=normal "$@" >/tmp/$n.out 2>&1 \
    || { cat /tmp/$n.out; echo "FIO-FAILED $n"; exit 1; }
  grep -E "err=" /tmp/$n.out
}
sums() { echo "$(dd if=/dev/$(lun_dev 0) bs=1M count=192 2>/dev/null | sha256sum | cut -c1-16)" \
              "$(dd if=/dev/$(lun_dev 1) bs=1M count=192 2>/dev/null | sha256sum | cut -c1-16)"; }
A=$(lun_dev 0); B=$(lun_dev 1)
echo "CHANNELS $(ls -d /sys/bus/vmbus/devices/*/channels/*/ | wc -l)"
verify file $A --rw=randwrite --bs=4k-64k
echo "FIO-FILE-OK"
verify drive $B --rw=randwrite --bs=4k-128k
echo "FIO-DRIVE-OK"
echo "SUMS-BEFORE $(sums)"
echo "IOTHREAD-READY-FOR-ADD"
C=$(wait_lun 2)
echo "HOT $(cat /sys/block/$C/size)"
rmmod hv_storvsc || { echo "RMMOD-FAILED"; exit 1; }
echo "UNLOADED $(ls /sys/block | grep -c '^sd')"
modprobe hv_storvsc || { echo "MODPROBE-FAILED"; exit 1; }
wait_lun 0 >/dev/null; wait_lun 1 >/dev/null
echo "RELOADED $(ls -d /sys/bus/vmbus/devices/*/channels/*/ | wc -l)"
echo "SUMS-AFTER $(sums)"
verify again $(lun_dev 1) --rw=write --bs=256k --size=16M --offset_increment=16M
echo "FIO-AGAIN-OK"
SH

read -r -d '' HOST_SIDE <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, qemu_pid, say
sock, console, boot_pid, alive, extra = host_side()

def thread_names(pid):
    names = []
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, t)) as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names

try:
    q = Qmp.connect(sock, alive)
    q.wait_until(lambda: console_has(console, 'IOTHREAD-READY-FOR-ADD'), alive)
    pid = qemu_pid(sock)
    names = thread_names(pid) if pid else []
    say('QEMU-THREADS', len(names))
    say('CHANNEL-THREADS', sum(1 for n in names if n.startswith('hvstor-ch')))
    stats = json.loads(q.command('qom-get', path='/machine/peripheral/scsi0', property='stats'))
    chans = stats['channels']
    say('CHANNELS-OPEN', sum(1 for c in chans if c['open']))
    say('CHANNELS-WITH-SRBS', sum(1 for c in chans if c['srbs'] > 0))
    say('IOTHREADS', ' '.join(sorted(t['id'] for t in q.command('query-iothreads'))))
    q.command('device_add', driver='hv-disk', id='hot', bus='scsi0.0', lun=2, backend='null',
              size=64 << 20)
    say('ADDED hot')
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" -- \
  --kernel debian-6.12 --vcpus 4 --mem 1G --wait-disks 2 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -object iothread,id=io0 \
     -drive if=none,id=user,file="$WORK/user.qcow2",format=qcow2 \
     -device hv-storvsc,id=scsi0,iothread=io0 \
     -device hv-disk,id=d0,bus=scsi0.0,lun=0,file="$WORK/lun0.img" \
     -device hv-disk,id=d1,bus=scsi0.0,lun=1,drive=user,iothread=io0

check_boot_and_host
check "primary + 3 subchannels" has '^CHANNELS 4$'
check "fio verify on the file disk" has '^FIO-FILE-OK'
check "fio verify on the qcow2 disk in the same IOThread" has '^FIO-DRIVE-OK'
check "QEMU's threads were counted" has '^host: QEMU-THREADS [1-9]'
check "no channel has a thread of its own" has '^host: CHANNEL-THREADS 0$'
check "all 4 channels open in the IOThread" has '^host: CHANNELS-OPEN 4$'
check "every one of them took SRBs" has '^host: CHANNELS-WITH-SRBS 4$'
check "a disk added while the guest runs appears" has '^HOT 131072$'
check "every disk gone with the module" has '^UNLOADED 0$'
check "all 4 channels open again after modprobe" has '^RELOADED 4$'
same_sums() { local before; before=$(sed -n 's/^SUMS-BEFORE //p' "$OUT"); [ -n "$before" ] && has "^SUMS-AFTER $before\$"; }
check "both disks read back after the reload what they held before" same_sums
check "fio verify after the reload" has '^FIO-AGAIN-OK'
grep -E "^(CHANNELS|HOT|UNLOADED|RELOADED|SUMS-)|^host: |err=" "$OUT" | sed 's/^/  /'
finish
