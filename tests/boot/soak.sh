# Soak: 100 cycles of rmmod/modprobe hv_storvsc on a stock 6.12 guest (2 vCPUs, so a primary
# channel and a subchannel each time), with a verified write and read after each load. Every
# unload closes both channels and tears down their ring GPADLs, every load opens them again:
# nothing may hang, and QEMU's threads and file descriptors are the same after cycle 100 as
# after cycle 10. The guest pauses twice by writing a block that a stall fault holds (the host
# counts, then releases it), so both counts are taken with the guest idle.
. "$(dirname "$0")/../boot-lib.sh"
PAUSE_LBA=131064 # the last 4 KiB of the 64 MiB disk: only the pauses write there

read -r -d '' GUEST_CMD <<SH
pause() { # held by the host's stall fault until it has counted
  echo "SOAK-PAUSE \$1"
  dd if=/dev/zero of=/dev/sda bs=4096 seek=$((PAUSE_LBA / 8)) count=1 oflag=direct 2>/dev/null
  echo "SOAK-RESUMED \$1"
}
head -c 65536 /dev/urandom >/tmp/pattern
i=1
while [ \$i -le 100 ]; do
  rmmod hv_storvsc || { echo "RMMOD-FAILED \$i"; exit 1; }
  modprobe hv_storvsc || { echo "MODPROBE-FAILED \$i"; exit 1; }
  wait_for "/dev/sda after load \$i" [ -b /dev/sda ]
  dd if=/tmp/pattern of=/dev/sda bs=65536 seek=\$i count=1 oflag=direct 2>/dev/null \\
    && dd if=/dev/sda of=/tmp/back bs=65536 skip=\$i count=1 iflag=direct 2>/dev/null \\
    && cmp -s /tmp/pattern /tmp/back || { echo "IO-FAILED \$i"; exit 1; }
  [ \$i = 10 ] && pause 10
  i=\$((i + 1))
done
echo "CHANNELS \$(ls /sys/block/sda/mq | wc -l)"
pause 100
echo "SOAK-DONE"
SH

read -r -d '' HOST_SIDE <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, qemu_pid, say
sock, console, boot_pid, alive, (fault,) = host_side()

def held(q):
    return json.loads(q.command('qom-get', path='/machine/peripheral/d0', property='stats'))['stalled'] == 1

try:
    q = Qmp.connect(sock, alive)
    pid = qemu_pid(sock)
    counts = {}
    for at in ('10', '100'):
        q.wait_until(lambda: console_has(console, 'SOAK-PAUSE ' + at), alive)
        q.wait_until(lambda: held(q), alive)
        counts[at] = (len(os.listdir('/proc/%d/task' % pid)), len(os.listdir('/proc/%d/fd' % pid)))
        say('COUNTS', at, 'threads', counts[at][0], 'fds', counts[at][1])
        # Setting the fault again releases the held write and holds the next pause.
        q.command('qom-set', path='/machine/peripheral/d0', property='fault', value=fault)
    say('FLAT' if counts['10'] == counts['100'] else 'GREW')
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

FAULT="stall=hold,ops=write,lba=$PAUSE_LBA-$((PAUSE_LBA + 7))"
boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" "$FAULT" -- \
  --kernel debian-6.12 --vcpus 2 --wait-disks 1 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -device hv-storvsc,id=scsi0 \
     -device "hv-disk,id=d0,bus=scsi0.0,lun=0,backend=ram,size=64M,fault=${FAULT//,/,,}"

check_boot_and_host
check "100 unload/load cycles, each with verified I/O" has '^SOAK-DONE$'
check "the driver opened 2 channels at the end" has '^CHANNELS 2$'
check "QEMU's thread and fd counts: the same after 100 cycles as after 10" has '^host: FLAT$'
grep -E '^(CHANNELS|host: (COUNTS|FLAT|GREW))' "$OUT" | sed 's/^/  /'
finish
