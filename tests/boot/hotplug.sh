# Hot plug over QMP on a running stock 6.12 guest (2 vCPUs, one controller, one disk):
# device_add of a second hv-disk shows up in the guest as a new sd device, fio writes and
# verifies it, device_del takes it away again, and QEMU stays up and answers QMP. Then a
# disk is removed with a write in flight: a stall fault holds the write until device_del
# releases it into a backend that takes 10 s per write; device_del returns and QMP answers
# while the write is still there, DEVICE_DELETED follows once it is done, and the guest's
# write ends. (The 10 s cover only two QMP commands in a row on the host.) Guest lines are matched from their start only: a
# kernel message (the removed LUN's failed SYNCHRONIZE CACHE) may run on at their end. The host
# and the guest take turns through markers on the console; every wait ends when its event
# comes or QEMU ends (the guest's waits have no bound of their own: boot-lib.sh's
# wait_for), so the only clock is the hang guard (boot-lib.sh).
. "$(dirname "$0")/../boot-lib.sh"

read -r -d '' GUEST_CMD <<'SH'
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
wait_for "$C to go" [ ! -e "/sys/block/$C" ]
echo "SLOW-GONE $C"
# The host's last QMP steps need QEMU: the guest ends once it has plugged one more disk.
wait_lun 3 >/dev/null
echo "HOST-DONE"
SH

# The host's side: waits for the guest's markers on the console, drives QMP, prints what
# it saw. Ends with status 0 when every step was answered as expected.
read -r -d '' HOST_SIDE <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, say
sock, console, boot_pid, alive, _ = host_side()

try:
    q = Qmp.connect(sock, alive)
    say('QMP-UP', q.command('query-status')['status'])
    q.wait_until(lambda: console_has(console, 'HOTPLUG-READY-FOR-ADD'), alive)
    q.command('device_add', driver='hv-disk', id='hot1', bus='scsi0.0', lun=1,
              backend='ram', size=64 << 20)
    say('ADDED hot1')
    try:
        q.command('device_add', driver='hv-disk', id='hot2', bus='scsi0.0', lun=1,
                  backend='ram', size=64 << 20)
        say('BAD-ADD-ACCEPTED')
    except QmpError as e:
        say('BAD-ADD-REFUSED', e)
    q.wait_until(lambda: console_has(console, 'HOTPLUG-READY-FOR-DEL'), alive)
    say('HOT1-STATS', q.command('qom-get', path='/machine/peripheral/hot1', property='stats'))
    q.device_del('hot1')
    say('DELETED hot1')
    say('QMP-ALIVE', q.command('query-status')['status'])
    disks = [p['name'] for p in q.command('qom-list', path='/machine/peripheral')
             if p['type'] == 'child<hv-disk>']
    say('HV-DISKS', ' '.join(sorted(disks)))
    say('D0-STATS', q.command('qom-get', path='/machine/peripheral/d0', property='stats'))
    # device_del does not wait for the disk's requests: it releases the held write into the
    # backend (10 s a write), QMP answers meanwhile, and DEVICE_DELETED comes once it is done.
    q.wait_until(lambda: console_has(console, 'HOTPLUG-READY-FOR-SLOW'), alive)
    q.command('device_add', driver='hv-disk', id='slow', bus='scsi0.0', lun=2,
              backend='ram', size=16 << 20, perf='latency.write=10s',
              fault='stall=hold,ops=write')
    q.wait_until(lambda: console_has(console, 'HOTPLUG-READY-FOR-SLOW-DEL'), alive)
    q.command('device_del', id='slow')
    try:
        q.command('qom-get', path='/machine/peripheral/slow', property='stats')
        say('SLOW-DURING-REMOVAL', 'stats answered')
    except QmpError as e:
        say('SLOW-DURING-REMOVAL', e)
    q.wait_event('DEVICE_DELETED', lambda e: e['data'].get('device') == 'slow')
    say('DELETED slow')
    say('QMP-ALIVE-AFTER-SLOW', q.command('query-status')['status'])
    q.command('device_add', driver='hv-disk', id='done', bus='scsi0.0', lun=3, backend='null',
              size=1 << 20)
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" -- \
  --kernel debian-6.12 --vcpus 2 --wait-disks 1 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -device hv-storvsc,id=scsi0 \
     -device hv-disk,id=d0,bus=scsi0.0,lun=0,backend=ram,size=32M

check_boot_and_host
check "QMP answers while the guest runs" has '^host: QMP-UP running$'
check "the guest starts with one disk" has '^FIRST sd[a-z]+$'
check "device_add of hv-disk accepted" has '^host: ADDED hot1$'
check "a second disk on the same LUN is refused with a message" \
  has '^host: BAD-ADD-REFUSED .*lun 1 is already in use'
check "the guest sees the new 64 MiB disk" has '^NEW sd[a-z]+ 131072$'
check "fio writes and verifies it" has '^FIO-OK$'
check "its statistics count the writes" has '^host: HOT1-STATS .*"writes":[1-9]'
check "device_del completes (DEVICE_DELETED)" has '^host: DELETED hot1$'
check "the disk disappears from the guest" has '^GONE sd[a-z]+'
check "QEMU still answers QMP after the removal" has '^host: QMP-ALIVE running$'
check "hot1 is gone from QEMU, d0 stays" has '^host: HV-DISKS d0$'
check "the first disk still works" has '^FIRST-STILL-WRITABLE$'
check "one disk left in the guest" has '^LEFT sd[a-z]+ $'
check "a write is in flight on the slow disk" has '^WRITE-IN-FLIGHT sd[a-z]+ 1'
check "device_del returns while its write is in the backend; QMP answers meanwhile" \
  has '^host: SLOW-DURING-REMOVAL .*hv-disk is being removed'
check "DEVICE_DELETED once the write is done" has '^host: DELETED slow$'
check "the guest's write ended (answered once, not lost)" has '^SLOW-WRITE-ENDED rc=[0-9]+'
check "the slow disk disappears from the guest" has '^SLOW-GONE sd[a-z]+'
check "QEMU answers QMP after it" has '^host: QMP-ALIVE-AFTER-SLOW running$'
grep -E '^(NEW|GONE|LEFT|WRITE-IN-FLIGHT|SLOW-|host: (BAD-ADD|HOT1-STATS|DELETED|HV-DISKS|SLOW-))' "$OUT" | sed 's/^/  /'
finish
