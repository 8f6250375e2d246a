# Bad device settings are refused at startup with a clear message, not a crash.
. "$(dirname "$0")/../boot-lib.sh"
# QEMU with these arguments, its vCPUs stopped: settings it accepts get it to the monitor,
# which reads "quit" (exit 0), so no clock decides; the hang guard ends a QEMU that hangs
# on its way there (status 124). Output in $out, status in $rc.
start_qemu() {
  rc=0
  out=$(timeout -k 10 "$HANG_GUARD" "$QEMU" -machine q35 -accel tcg -nodefaults -display none \
        -S -monitor stdio -L /usr/share/seabios -L /usr/share/qemu "$@" 2>&1 <<<quit) || rc=$?
  [ "$rc" != 124 ] || out="QEMU hung with these settings (ended after ${HANG_GUARD}s): $out"
}
expect_refusal() { # message regex, qemu args...
  local re=$1; shift
  start_qemu "$@"
  if [ "$rc" = 1 ] && grep -q -E -- "$re" <<<"$out"; then echo "  ok: refused: $re"
  else echo "  NOT OK: expected exit 1 and '$re', got rc=$rc: $out"; fails=$((fails + 1)); fi
}
# The control: good settings are accepted.
start_qemu -device hv-storvsc,id=s -device hv-disk,bus=s.0,backend=null,size=1M
check "good settings start QEMU (exit 0 at the monitor's quit)" [ "$rc" = 0 ]
expect_refusal "vmbus-version '9.9' is not one of" -device hv-vmbus-bridge,vmbus-version=9.9
expect_refusal "hypercall-port must be" -device hv-vmbus-bridge,hypercall-port=0
expect_refusal "only one hv-vmbus-bridge" -device hv-vmbus-bridge -device hv-vmbus-bridge
expect_refusal "instance.* doesn.t take value" -device hv-storvsc,instance=not-a-uuid
expect_refusal "max-transfer must be" -device hv-storvsc,max-transfer=1000
expect_refusal "hv-disk lun 0: .*nonexistent" -device hv-storvsc,id=s -device hv-disk,bus=s.0,file=/nonexistent/disk.img
expect_refusal "backend=ram needs size=" -device hv-storvsc,id=s -device hv-disk,bus=s.0,backend=ram
expect_refusal "backend must be file, ram, null or drive" -device hv-storvsc,id=s -device hv-disk,bus=s.0,backend=tape,size=1M
expect_refusal "give file=PATH, drive=ID" -device hv-storvsc,id=s -device hv-disk,bus=s.0
expect_refusal "drive= takes the place of file= and backend=" -drive if=none,id=d,driver=null-co \
  -device hv-storvsc,id=s -device hv-disk,bus=s.0,drive=d,backend=null,size=1M
expect_refusal "iothread= goes with drive=" -object iothread,id=io0 \
  -device hv-storvsc,id=s -device hv-disk,bus=s.0,backend=null,size=1M,iothread=io0
expect_refusal "iothread= and iothread-vq-mapping= cannot both be set" -object iothread,id=io0 \
  -device '{"driver":"hv-storvsc","iothread":"io0","iothread-vq-mapping":[{"iothread":"io0"}]}'
expect_refusal 'iothread-vq-mapping \(vq N is channel N, 3 channels\): IOThread "nosuch" object does not exist' \
  -device '{"driver":"hv-storvsc","max-subchannels":2,"iothread-vq-mapping":[{"iothread":"nosuch"}]}'
expect_refusal "missing vq 2 IOThread assignment" -object iothread,id=io0 -object iothread,id=io1 \
  -device '{"driver":"hv-storvsc","max-subchannels":2,"iothread-vq-mapping":[{"iothread":"io0","vqs":[0]},{"iothread":"io1","vqs":[1]}]}'
expect_refusal "max-subchannels must be at most 256, not 300" -object iothread,id=io0 \
  -device '{"driver":"hv-storvsc","max-subchannels":300,"iothread-vq-mapping":[{"iothread":"io0"}]}'
expect_refusal "vq index 3 .* must be less than num_queues 3" -object iothread,id=io0 \
  -device '{"driver":"hv-storvsc","max-subchannels":2,"iothread-vq-mapping":[{"iothread":"io0","vqs":[0,1,2,3]}]}'
expect_refusal "Property 'hv-disk.drive' can't find value 'nosuch'" \
  -device hv-storvsc,id=s -device hv-disk,bus=s.0,drive=nosuch
expect_refusal "lun 2 is already in use" -device hv-storvsc,id=s \
  -device hv-disk,bus=s.0,lun=2,backend=null,size=1M -device hv-disk,bus=s.0,lun=2,backend=null,size=1M
expect_refusal "lun must be below" -device hv-storvsc,id=s -device hv-disk,bus=s.0,lun=200,backend=null,size=1M
finish
