# Crash consistency: QEMU is killed with SIGKILL while a stock 6.12 guest writes to a
# file-backed disk. Each write goes with O_DIRECT and is followed by fsync (a cache
# flush, SYNCHRONIZE CACHE); the guest prints "DURABLE n" once both completed. After
# the kill, every block the guest reported durable holds exactly what it wrote, in the host
# file. The kill comes once the guest has reported 40 blocks, and the guest keeps writing
# until then and after, so it lands among writes in flight.
. "$(dirname "$0")/../boot-lib.sh"
IMG=$WORK/disk.img
truncate -s 64M "$IMG"

read -r -d '' GUEST_CMD <<'SH'
i=1
while [ $i -le 4000 ]; do
  yes "hvstor block $i" | head -c 4096 >/tmp/block
  dd if=/tmp/block of=/dev/sda bs=4096 seek=$i count=1 oflag=direct conv=fsync 2>/dev/null \
    || { echo "WRITE-FAILED $i"; exit 1; }
  echo "DURABLE $i"
  i=$((i + 1))
done
echo "NEVER-KILLED"
SH

bash "$HVSTOR_ROOT/scripts/boot.sh" --qemu "$QEMU" --timeout "$HANG_GUARD" --kernel debian-6.12 --vcpus 2 \
  --wait-disks 1 --log "$CONSOLE" --cmd "$GUEST_CMD" \
  -- -device hv-storvsc,id=scsi0 -device "hv-disk,id=d0,bus=scsi0.0,lun=0,file=$IMG" >"$OUT" 2>&1 &
BOOT_PID=$!

# Waits for the guest's 40th report (or the boot's end), then kills this boot's QEMU: the
# one whose command line names our image.
read -r -d '' KILLER <<'PY'
import os, re, sys, time
sys.path.insert(0, sys.argv[4])
from qmp import process_alive, qemu_pid
console, img, boot_pid = sys.argv[1], sys.argv[2], int(sys.argv[3])

def reported(n):  # the serial console ends its lines with \r\n
    try:
        with open(console, 'rb') as f:
            return re.search(rb'^DURABLE %d\r?$' % n, f.read(), re.M) is not None
    except FileNotFoundError:
        return False

while process_alive(boot_pid) and not reported(40):
    time.sleep(0.05)
pid = qemu_pid(img)
if pid:
    os.kill(pid, 9)
    print('KILLED', flush=True)
PY
python3 -c "$KILLER" "$CONSOLE" "$IMG" "$BOOT_PID" "$(dirname "$0")" >"$WORK/killer.out" 2>&1
wait "$BOOT_PID"
cat "$WORK/killer.out" >>"$OUT"

# Every block reported durable holds its pattern.
read -r -d '' VERIFY <<'PY'
import re, sys
console, img = sys.argv[1], sys.argv[2]
with open(console, 'rb') as f:
    done = [int(m) for m in re.findall(rb'^DURABLE (\d+)\r?$', f.read(), re.M)]
bad = []
with open(img, 'rb') as f:
    for n in done:
        f.seek(n * 4096)
        want = (b'hvstor block %d\n' % n) * 4096
        if f.read(4096) != want[:4096]:
            bad.append(n)
print('DURABLE-REPORTED', len(done), 'LAST', max(done) if done else 0)
print('MISSING', len(bad), ' '.join(map(str, bad[:10])))
PY
python3 -c "$VERIFY" "$CONSOLE" "$IMG" >>"$OUT" 2>&1

check "QEMU was killed while the guest wrote" has '^KILLED$'
check "the guest had not finished" lacks '^NEVER-KILLED$'
check "the guest reported at least 40 durable writes" has '^DURABLE-REPORTED ([4-9][0-9]|[0-9]{3,}) '
check "every write reported durable is in the image" has '^MISSING 0 *$'
grep -E '^(KILLED|DURABLE-REPORTED|MISSING)' "$OUT" | sed 's/^/  /'
finish
