# What the host saw, on a stock 6.12 guest with 4 vCPUs (so a primary and 3 subchannels):
# `-trace 'hvstor_*'` records the VMBus handshake, the ring GPADLs, the channel opens, the
# subchannel offers and every SRB's submission and completion; qom-get of hv-storvsc's and
# the bridge's "stats" over QMP, while fio runs on every vCPU, counts SRBs on more than one
# channel. The guest waits for the host's reading through a marker on the console; every
# wait ends when its event comes or QEMU ends, so the only clock is the hang guard
# (boot-lib.sh).
. "$(dirname "$0")/../boot-lib.sh"
TRACE=$WORK/trace.log

read -r -d '' GUEST_CMD <<'SH'
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
SH

# The host's side: reads both statistics once the guest's I/O is done, and lets it finish.
read -r -d '' HOST_SIDE <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, say
sock, console, boot_pid, alive, _ = host_side()

try:
    q = Qmp.connect(sock, alive)
    q.wait_until(lambda: console_has(console, 'OBSERVE-READY-FOR-STATS'), alive)
    ctl = json.loads(q.command('qom-get', path='/machine/peripheral/scsi0', property='stats'))
    bus = json.loads(q.command('qom-get', path='/machine/hv-vmbus', property='stats'))
    say('CONTROLLER', json.dumps(ctl))
    say('BUS', json.dumps(bus))
    busy = [c['index'] for c in ctl['channels'] if c['srbs'] > 0]
    say('CHANNELS-WITH-SRBS', len(busy))
    say('OPEN-CHANNELS', ctl['open_channels'], bus['open_channels'])
    say('ANSWERED', 'all' if all(c['completions'] == c['srbs'] and c['outstanding'] == 0
                                 for c in ctl['channels']) else 'not all')
    say('BUS-VERSION', bus['version'], 'GPADLS', bus['gpadls'])
    say('SRBS', ctl['srbs'])
    say('INLINE-ROUNDS', sum(c['inline_rounds'] for c in ctl['channels']))
    q.command('device_add', driver='hv-disk', id='go', bus='scsi0.0', lun=1, backend='null', size=1 << 20)
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" -- \
  --kernel debian-6.12 --vcpus 4 --wait-disks 1 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -trace 'hvstor_*' -D "$TRACE" \
     -device hv-storvsc,id=scsi0 \
     -device hv-disk,id=d0,bus=scsi0.0,lun=0,backend=ram,size=64M

# trace_has EVENT [REGEX]: the trace log has the event, its text matching REGEX.
trace_has() { grep -q -E "hvstor_$1 .*${2:-}" "$TRACE"; }
trace_count() { grep -c -E "hvstor_$1 " "$TRACE"; }
submits=$(trace_count storvsp_srb_submit) completes=$(trace_count storvsp_srb_complete)
echo "  trace: $(wc -l <"$TRACE") lines, $submits SRBs submitted, $completes completed"

check_boot_and_host
check "the guest's disk has 4 hardware queues" has '^CHANNELS 4$'
check "fio verified its data" has '^FIO-OK$'
check "trace: VMBus 5.3 connection" trace_has vmbus_connect 'version 0x50003'
check "trace: the guest's messages" trace_has vmbus_msg_in 'vp [0-9]+ message type 14,'
check "trace: ring GPADLs created" trace_has vmbus_gpadl_create 'relid [0-9]+ gpadl [0-9]+: [0-9]+ pages'
check "trace: subchannels asked for and offered" trace_has storvsp_subchannels 'asked for 3, offered 3'
check "trace: subchannel offers" trace_has vmbus_offer 'subchannel index 3'
check "trace: four channels opened" [ "$(grep -c -E 'hvstor_vmbus_open_result relid [0-9]+ status 0x0' "$TRACE")" -ge 4 ]
check "trace: the storvsp handshake (BEGIN_INITIALIZATION answered)" trace_has storvsp_control 'operation 7 status 0x0'
check "trace: SRB submissions" trace_has storvsp_srb_submit 'lun 0 opcode 0x2a 4096 bytes'
check "trace: SRB completions with status" trace_has storvsp_srb_complete 'srb status 0x01 scsi status 0x00 4096 bytes'
# The statistics were read with the guest idle: the trace has at least those SRBs, each
# with its completion (the disk plugged afterwards adds a few of its own).
srbs=$(sed -n 's/^host: SRBS //p' "$OUT")
all_traced() { [ "${srbs:-0}" -gt 1000 ] && [ "$submits" -ge "$srbs" ] && [ "$completes" -ge "$srbs" ]; }
check "trace: every SRB the statistics counted, submitted and completed" all_traced
check "stats: read over QMP while the guest ran" has '^host: CONTROLLER \{'
check "stats: SRBs on more than one channel" has '^host: CHANNELS-WITH-SRBS [2-4]$'
check "stats: the controller and the bus agree on 4 open channels" has '^host: OPEN-CHANNELS 4 4$'
check "stats: every SRB answered" has '^host: ANSWERED all$'
check "stats: guest signals ran rounds on their vCPU threads (inline rounds)" has '^host: INLINE-ROUNDS [1-9][0-9]*$'
check "stats: the bus negotiated 5.3 and holds the ring GPADLs" has '^host: BUS-VERSION 5.3 GPADLS [4-9]'
check "the guest resumed when the host plugged the second disk" has '^RESUMED with 2 disks'
grep -E '^(CHANNELS|host: (CHANNELS-WITH|OPEN|ANSWERED|BUS-VERSION|SRBS|INLINE))' "$OUT" | sed 's/^/  /'
finish
