# Fault injection on a stock 6.12 guest (docs/fault-injection.md): a fault given with the
# disk (medium errors on reads of 8 blocks), then faults set over QMP while the guest runs
# (BUSY on every second command 4 times, NOT READY twice, one write held until released). The guest
# sees each as its driver and the SCSI midlayer handle it: the medium error fails the read
# and is logged with its sense, BUSY and NOT READY are retried so fio still verifies, and the
# held write completes once the host clears the fault. The host tells the guest to go on by
# plugging a small disk (the guest counts its disks); every wait ends when its event comes
# or QEMU ends, so the only clock is the hang guard (boot-lib.sh).
. "$(dirname "$0")/../boot-lib.sh"

read -r -d '' GUEST_CMD <<'SH'
wait_disks() { wait_for "$1 disks" has_disks "$1"; }
D=sda
dd if=/dev/$D of=/dev/null bs=4096 skip=256 count=1 iflag=direct 2>/dev/null \
  && echo "MEDIUM-READ-SUCCEEDED" || echo "MEDIUM-READ-FAILED"
dd if=/dev/$D of=/dev/null bs=4096 skip=0 count=1 iflag=direct 2>/dev/null && echo "OTHER-READ-OK"
dd if=/dev/zero of=/dev/$D bs=4096 seek=256 count=1 oflag=direct 2>/dev/null && echo "WRITE-IN-RANGE-OK"
dmesg | grep -m1 -E 'Sense Key : Medium Error' | sed 's/^\[[^]]*\] /DMESG /'
dmesg | grep -m1 -E 'Add. Sense: Unrecovered read error' | sed 's/^\[[^]]*\] /DMESG /'
dmesg | grep -m1 -E 'critical medium error' | sed 's/^\[[^]]*\] /DMESG /'
echo "STEP1-DONE"
wait_disks 2
fio --name=busy --filename=/dev/$D --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite \
    --bs=4k --size=2M --verify=crc32c --verify_fatal=1 >/tmp/fio.out 2>&1 \
  && echo "FIO-WITH-BUSY-OK" || { cat /tmp/fio.out; echo "FIO-WITH-BUSY-FAILED"; }
echo "STEP2-DONE"
wait_disks 3
dd if=/dev/$D of=/dev/null bs=4096 skip=8 count=1 iflag=direct 2>/dev/null \
  && echo "NOT-READY-RETRIED-OK" || echo "NOT-READY-FAILED"
echo "STEP3-DONE"
wait_disks 4
head -c 4096 /dev/urandom >/tmp/block
dd if=/tmp/block of=/dev/$D bs=4096 seek=300 count=1 oflag=direct 2>/dev/null &
echo "WRITE-ISSUED"
wait $! && echo "HELD-WRITE-DONE"
dd if=/dev/$D of=/tmp/back bs=4096 skip=300 count=1 iflag=direct 2>/dev/null
cmp -s /tmp/block /tmp/back && echo "HELD-WRITE-LANDED"
wait_disks 5 # the host's last step: the guest must not end before it
SH

read -r -d '' HOST_SIDE <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, say
sock, console, boot_pid, alive, _ = host_side()

def stats(q):
    return json.loads(q.command('qom-get', path='/machine/peripheral/d0', property='stats'))

def fault(q, value):
    q.command('qom-set', path='/machine/peripheral/d0', property='fault', value=value)
    say('FAULT', q.command('qom-get', path='/machine/peripheral/d0', property='fault'))

def go_on(q, lun):  # the guest goes on once it sees one more disk
    q.command('device_add', driver='hv-disk', id='go%d' % lun, bus='scsi0.0', lun=lun,
              backend='null', size=1 << 20)

try:
    q = Qmp.connect(sock, alive)
    q.wait_until(lambda: console_has(console, 'STEP1-DONE'), alive)
    say('AFTER-MEDIUM', json.dumps(stats(q)))
    try:
        fault(q, 'error=fire')
        say('BAD-FAULT-ACCEPTED')
    except QmpError as e:
        say('BAD-FAULT-REFUSED', e)
    # storvsc turns an SRB error without sense into DID_ERROR, which the SCSI midlayer
    # retries at most 5 times: 4 BUSY answers can never fail a command.
    fault(q, 'error=busy,every=2,count=4')
    go_on(q, 1)
    q.wait_until(lambda: console_has(console, 'STEP2-DONE'), alive)
    say('AFTER-BUSY', json.dumps(stats(q)))
    fault(q, 'error=not-ready,count=2')
    go_on(q, 2)
    q.wait_until(lambda: console_has(console, 'STEP3-DONE'), alive)
    say('AFTER-NOT-READY', json.dumps(stats(q)))
    fault(q, 'stall=hold,ops=write,count=1')
    go_on(q, 3)
    q.wait_until(lambda: console_has(console, 'WRITE-ISSUED'), alive)
    q.wait_until(lambda: stats(q)['stalled'] == 1, alive)
    say('HOST-SAW-STALLED', stats(q)['stalled'])
    fault(q, 'none')
    say('RELEASED', stats(q)['stalled'])
    go_on(q, 4)
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" -- \
  --kernel debian-6.12 --vcpus 2 --wait-disks 1 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -device hv-storvsc,id=scsi0 \
     -device hv-disk,id=d0,bus=scsi0.0,lun=0,backend=ram,size=64M,fault=error=medium,,ops=read,,lba=2048-2055

check_boot_and_host
check "medium error: the read of the faulty blocks fails" has '^MEDIUM-READ-FAILED$'
check "medium error: other blocks read fine" has '^OTHER-READ-OK$'
check "medium error: writes to those blocks are not affected" has '^WRITE-IN-RANGE-OK$'
check "medium error: the guest logs the sense key" has '^DMESG .*Sense Key : Medium Error'
check "medium error: ... and the additional sense" has '^DMESG .*Unrecovered read error'
check "medium error: ... and the block layer reports the sector" has '^DMESG critical medium error, dev sda, sector 2048'
check "medium error: counted as injected faults" has '^host: AFTER-MEDIUM .*"faults": [1-9]'
check "a bad fault is refused with its reason" \
  has '^host: BAD-FAULT-REFUSED .*error=fire is not one of medium, not-ready, unit-attention, busy'
check "BUSY: fio still verifies (the guest retries)" has '^FIO-WITH-BUSY-OK$'
check "BUSY: injected 4 times" has '^host: AFTER-BUSY .*"faults": 5,'
check "NOT READY twice: the read succeeds after retries" has '^NOT-READY-RETRIED-OK$'
check "stall: the host saw the write held" has '^host: HOST-SAW-STALLED 1$'
check "stall: released when the fault was cleared" has '^host: RELEASED 0$'
check "stall: the held write completed" has '^HELD-WRITE-DONE$'
check "stall: and its data is on the disk" has '^HELD-WRITE-LANDED$'
grep -E '^(MEDIUM|OTHER|DMESG|FIO-|NOT-READY|HELD|host: (FAULT|BAD|HOST-SAW|RELEASED))' "$OUT" | sed 's/^/  /'
finish
