# hv-storvsc,iothread-vq-mapping=: the channels spread over a list of IOThreads, stock 6.12,
# 4 vCPUs (a primary and 3 subchannels), inline-rounds off so that every ring round runs in
# the channel's IOThread. Channels 0 and 3 go to io0, 1 and 2 to io1; io2 is in the machine
# but not in the list (the control).
#   The host side counts each IOThread's times on a CPU (schedstat) before and after a fio
#   crc32c verify on a RAM disk that it adds for it (LUN 1), 4 jobs on 4 CPUs: io0 and io1 ran,
#   io2 never did. It also counts QEMU's threads named hvstor-ch* (none) and reads the
#   channels' statistics: all 4 open, each with worker rounds and SRBs. Host and guest take
#   turns through console markers and the disk's hot add and removal (see hotplug.sh); the
#   only clock is the hang guard (boot-lib.sh).
. "$(dirname "$0")/../boot-lib.sh"

read -r -d '' GUEST_CMD <<'SH'
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
SH

read -r -d '' HOST_SIDE <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from qmp import Qmp, QmpError, console_has, host_side, qemu_pid, say
sock, console, boot_pid, alive, extra = host_side()

def threads(pid):
    """{name: [times on a CPU (schedstat's third field), ...]} of QEMU's threads."""
    out = {}
    for t in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/comm' % (pid, t)) as f:
                name = f.read().strip()
            with open('/proc/%d/task/%s/schedstat' % (pid, t)) as f:
                slices = int(f.read().split()[2])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(name, []).append(slices)
    return out

def io_slices(pid):
    names = threads(pid)
    return {io: sum(names.get('IO ' + io, [])) for io in ('io0', 'io1', 'io2')}, names

try:
    q = Qmp.connect(sock, alive)
    q.wait_until(lambda: console_has(console, 'MAP-READY'), alive)
    pid = qemu_pid(sock)
    if not pid:
        raise QmpError('no QEMU process for ' + sock)
    before, names = io_slices(pid)
    say('IOTHREADS-FOUND', ' '.join(sorted(n for n in names if n.startswith('IO io'))))
    q.command('device_add', driver='hv-disk', id='map', bus='scsi0.0', lun=1, backend='ram',
              size=64 << 20)
    q.wait_until(lambda: console_has(console, 'MAP-DONE'), alive)
    after, names = io_slices(pid)
    for io in sorted(before):
        say('RAN', io, after[io] - before[io])
    say('CHANNEL-THREADS', sum(len(v) for n, v in names.items() if n.startswith('hvstor-ch')))
    chans = json.loads(q.command('qom-get', path='/machine/peripheral/scsi0', property='stats'))['channels']
    say('CHANNELS-OPEN', sum(1 for c in chans if c['open']))
    say('CHANNELS-WITH-ROUNDS-AND-SRBS', sum(1 for c in chans if c['wakeups'] > 0 and c['srbs'] > 0))
    q.device_del('map')
    q.command('device_add', driver='hv-disk', id='done', bus='scsi0.0', lun=2, backend='null',
              size=1 << 20)
    q.close()
except QmpError as e:
    say('QMP-FAILED', e)
    sys.exit(1)
PY

# JSON, for the list; QEMU creates JSON devices after all the others, so the disk is JSON too.
CONTROLLER='{"driver":"hv-storvsc","id":"scsi0","inline-rounds":false,"iothread-vq-mapping":[{"iothread":"io0","vqs":[0,3]},{"iothread":"io1","vqs":[1,2]}]}'
boot_with_host_side "$HOST_SIDE" "$SOCK" "$CONSOLE" -- \
  --kernel debian-6.12 --vcpus 4 --mem 1G --wait-disks 1 --cmd "$GUEST_LUN_HELPERS$GUEST_CMD" \
  -- -name hvstor,debug-threads=on \
     -object iothread,id=io0 -object iothread,id=io1 -object iothread,id=io2 \
     -device "$CONTROLLER" \
     -device '{"driver":"hv-disk","id":"d0","bus":"scsi0.0","lun":0,"backend":"ram","size":16777216}'

check_boot_and_host
check "primary + 3 subchannels" has '^CHANNELS 4$'
check "QEMU names its IOThreads (debug-threads=on)" has '^host: IOTHREADS-FOUND IO io0 IO io1 IO io2$'
check "fio verify through the mapped channels" has '^FIO-MAP-OK'
check "io0 (channels 0 and 3) ran" has '^host: RAN io0 [1-9]'
check "io1 (channels 1 and 2) ran" has '^host: RAN io1 [1-9]'
check "io2, in no mapping, never ran" has '^host: RAN io2 0$'
check "no channel has a thread of its own" has '^host: CHANNEL-THREADS 0$'
check "all 4 channels open" has '^host: CHANNELS-OPEN 4$'
check "every one of them had worker rounds and SRBs" has '^host: CHANNELS-WITH-ROUNDS-AND-SRBS 4$'
check "the disk went with device_del" has '^MAP-GONE'
grep -E "^(CHANNELS|MAP-)|^host: |err=" "$OUT" | sed 's/^/  /'
finish
