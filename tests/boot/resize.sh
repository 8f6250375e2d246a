# Changing a disk's capacity while a stock 6.12 guest runs (docs/fault-injection.md,
# "Changing capacity"): a file-backed hv-disk of 64 MiB, a pattern the guest writes at its
# start and at its end, then the host grows the disk over QMP (qom-set of hv-disk's
# "capacity") to 96 MiB and later to 128 MiB. Between the changes the guest keeps reading
# one block; the first command after each change gets UNIT ATTENTION, CAPACITY DATA HAS
# CHANGED, on which storvsc requeues it and rescans the disk, until /sys/block/sda/size
# shows the new size. The guest then checks its pattern, writes and reads back past the
# old end, and prints what it logged; the second change runs with hv_storvsc's
# logging_level=2, which also logs the sense. Then the host shrinks it back to 96 MiB. Bad
# sizes are refused with their reason.
# Every wait ends on a console marker or when QEMU ends: the only clock is the hang guard
# (boot-lib.sh).
# HVSTOR_TRACE_LOG=FILE keeps QEMU's trace of every SRB (opcode, status) in FILE.
. "$(dirname "$0")/../boot-lib.sh"
IMAGE=$WORK/disk.img
truncate -s 64M "$IMAGE"

read -r -d '' GUEST_CMD <<'SH'
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
# Reads a block each round (the command that meets the unit attention) until the size is $1.
wait_size() {
  n=0
  while [ "$n" -lt 2400 ] && [ "$(cat /sys/block/$D/size)" != "$1" ]; do
    dd if=/dev/$D of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null || echo "POLL-READ-FAILED"
    sleep 0.25
    n=$((n + 1))
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
SH

read -r -d '' HOST_SIDE <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, say
sock, console, boot_pid, alive, extra = host_side()
image = extra[0]
D0, MIB = '/machine/peripheral/d0', 1 << 20

def get(q, prop, path=D0):
    return q.command('qom-get', path=path, property=prop)

def unit_attentions(q):  # capacity changes the disk reported
    return json.loads(get(q, 'stats'))['unit_attentions']

def grow(q, size, marker):
    before = unit_attentions(q)
    q.command('qom-set', path=D0, property='capacity', value=size)
    say('CAPACITY', get(q, 'capacity'), 'FILE', os.path.getsize(image))
    q.wait_until(lambda: console_has(console, marker), alive)
    say('UNIT-ATTENTIONS', unit_attentions(q) - before)

def controller(q):
    c = json.loads(get(q, 'stats', '/machine/peripheral/scsi0'))
    return c['srbs'], c['completions'], sum(ch['outstanding'] for ch in c['channels'])

def settled(q):  # nothing in flight: every SRB answered
    srbs, completions, outstanding = controller(q)
    return srbs == completions and outstanding == 0

try:
    q = Qmp.connect(sock, alive)
    say('CAPACITY-AT-START', get(q, 'capacity'))
    q.wait_until(lambda: console_has(console, 'PATTERN-WRITTEN'), alive)
    before = unit_attentions(q)
    for bad in (0, 1000, 1 << 62):
        try:
            q.command('qom-set', path=D0, property='capacity', value=bad)
            say('BAD-SIZE-ACCEPTED', bad)
        except QmpError as e:
            say('BAD-SIZE-REFUSED', bad, e)
    say('AFTER-REFUSALS', get(q, 'capacity'), unit_attentions(q) - before)
    grow(q, 96 * MIB, 'PHASE1-DONE')
    q.wait_until(lambda: console_has(console, 'LOGGING-WARN'), alive)
    grow(q, 128 * MIB, 'PHASE2-DONE')
    grow(q, 96 * MIB, 'PHASE3-DONE')  # a shrink: the file keeps its 128 MiB
    # The guest is idle now: a completion lost or sent twice would show here (or the
    # wait would end only with QEMU).
    q.wait_until(lambda: settled(q), alive)
    say('CONTROLLER srbs=%d completions=%d outstanding=%d' % controller(q))
    say('DISK', get(q, 'stats'))
    q.command('device_add', driver='hv-disk', id='go', bus='scsi0.0', lun=1, backend='null', size=MIB)
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" "$IMAGE" -- \
  --kernel debian-6.12 --vcpus 2 --wait-disks 1 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -device hv-storvsc,id=scsi0 -device hv-disk,id=d0,bus=scsi0.0,lun=0,file="$IMAGE" \
     ${HVSTOR_TRACE_LOG:+-trace "hvstor_storvsp_srb_*" -D "$HVSTOR_TRACE_LOG"}

# Guest time from each command storvsc logged failing with SRB status 0x84 (the one that
# met the unit attention) to the capacity change it logged next, in ms.
rescan_ms() { # $1: the DMESG prefix to read
  awk -v p="^$1 " '$0 ~ p && match($0, /\[ *[0-9]+\.[0-9]+\]/) {
         t = substr($0, RSTART + 1, RLENGTH - 2) + 0
         if ($0 ~ /srb 0x84/) t0 = t
         else if ($0 ~ /detected capacity change/ && t0 != "") { printf "%s%.1f", sep, (t - t0) * 1000; sep = " "; t0 = "" }
       }' "$OUT"
}

check_boot_and_host
check "capacity reads the file's size at start" has '^host: CAPACITY-AT-START 67108864$'
check "capacity 0 is refused with its reason" \
  has '^host: BAD-SIZE-REFUSED 0 .*size 0 is not a positive multiple of 512'
check "capacity 1000 is refused with its reason" \
  has '^host: BAD-SIZE-REFUSED 1000 .*size 1000 is not a positive multiple of 512'
check "a size the file system cannot hold is refused" \
  has '^host: BAD-SIZE-REFUSED 4611686018427387904 .*cannot grow the file to 4611686018427387904 bytes'
check "refusals change nothing and raise no unit attention" has '^host: AFTER-REFUSALS 67108864 0$'
check "the guest saw 64 MiB first" has '^SIZE-BEFORE 131072$'
check "grow to 96 MiB: the file grew" has '^host: CAPACITY 100663296 FILE 100663296$'
check "grow to 96 MiB: the guest's disk grew" has '^SIZE-NOW 196608$'
check "grow to 128 MiB: the file grew" has '^host: CAPACITY 134217728 FILE 134217728$'
check "grow to 128 MiB: the guest's disk grew" has '^SIZE-NOW 262144$'
check "shrink to 96 MiB: the file keeps its length" has '^host: CAPACITY 100663296 FILE 134217728$'
check "shrink to 96 MiB: the guest's disk shrank" has '^DMESG3 .*sda: detected capacity change from 262144 to 196608'
check "shrink: the data at the start survived" has '^HEAD-KEPT-AFTER-SHRINK$'
check "shrink: ... and so did the data at the new end" has '^NEW-END-KEPT-AFTER-SHRINK$'
check "shrink: a read across the new end stops there" has '^READ-ACROSS-NEW-END 0 1048576 bytes$'
check "exactly one unit attention per change" count_is '^host: UNIT-ATTENTIONS 1$' 3
check "the guest's reads never failed" lacks '^POLL-READ-FAILED$'
check "the pattern at the start survived both changes" count_is '^HEAD-KEPT$' 2
check "the data at the old end survived" count_is '^OLD-END-KEPT$' 2
check "what the grow added reads as zeros" count_is '^GROWN-RANGE-READS-ZEROS$' 2
check "writes at the new end succeed" count_is '^WRITE-AT-NEW-END-OK$' 2
check "... and read back" count_is '^NEW-END-VERIFIED$' 2
check "storvsc logged the read that met the unit attention (default logging)" \
  has '^DMESG1 .*cmd 0x28 status: scsi 0x2 srb 0x84'
check "the guest logged the capacity change (default logging)" \
  has '^DMESG1 .*sda: detected capacity change from 131072 to 196608'
check "with logging_level=2 storvsc logs the sense" has '^DMESG2 .*Add. Sense: Capacity data has changed'
check "every request completed exactly once" \
  has '^host: CONTROLLER srbs=([0-9]+) completions=\1 outstanding=0$'
grep -E '^(SIZE-|DMESG2|DMESG3 .*capacity|READ-ACROSS|host: (CAPACITY|BAD|AFTER|UNIT|CONTROLLER|DISK))' "$OUT" | sed 's/^/  /'
echo "  guest time from the failed command to the new capacity, per change: $(rescan_ms DMESG2) $(rescan_ms DMESG3) ms"
finish
