# The KVM path as far as a host can check it without running a stock guest: with
# -accel kvm the bridge installs its MSR filter range and replaces the CPUID leaves of
# every vCPU (KVM must accept both ioctls), then the guest runs. Hosts whose KVM cannot
# run stock kernels stop there with an emulation failure, as they do without the device.
# Skipped (exit 77) where /dev/kvm is missing or unusable.
. "$(dirname "$0")/../boot-lib.sh"
[ -r /dev/kvm ] && [ -w /dev/kvm ] || { echo "  skip: no usable /dev/kvm"; exit 77; }
eval "$(bash "$HVSTOR_ROOT/scripts/guest-assets.sh" debian-6.12 | tail -n 2)"
"$QEMU" -machine q35 -accel kvm -cpu qemu64 -smp 2 -m 512M -nographic -no-reboot \
  -nodefaults -serial stdio -L /usr/share/seabios -L /usr/share/qemu \
  -kernel "$KERNEL" -initrd "$INITRD" -append "console=ttyS0 panic=-1" \
  -device hv-storvsc,id=s -device hv-disk,bus=s.0,backend=null,size=1G </dev/null >"$OUT" 2>&1 &
QPID=$!
trap 'kill -KILL "$QPID" 2>/dev/null; rm -rf "$OUT" "$WORK"' EXIT
# The guest runs until it has connected to VMBus, failed, or reached its init's shell, or
# QEMU ends. No clock decides how far it gets: a guest that printed nothing for 600 s has
# stopped, and the hang guard ends one that keeps printing without getting anywhere.
ended() {
  grep -aq -E 'Vmbus version|KVM internal error|emulation failure|Kernel panic|hvstor-init: no /hvstor/cmd' \
    "$OUT" || ! kill -0 "$QPID" 2>/dev/null
}
size=-1 quiet=0 began=$SECONDS
until ended; do
  sleep 1
  now=$(stat -c %s "$OUT")
  if [ "$now" = "$size" ]; then quiet=$((quiet + 1)); else size=$now quiet=0; fi
  [ "$quiet" -lt 600 ] || { echo "  note: the guest printed nothing for 600 s"; break; }
  [ $((SECONDS - began)) -lt "$HANG_GUARD" ] || { echo "  note: the hang guard ended the guest"; break; }
done
kill -TERM "$QPID" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$QPID" 2>/dev/null || break; sleep 1; done
kill -KILL "$QPID" 2>/dev/null
wait "$QPID" 2>/dev/null
if grep -aq "Could not access KVM\|failed to initialize kvm" "$OUT"; then
  echo "  skip: KVM cannot be initialized here"; exit 77
fi
check "bridge set up under KVM (MSR filter range and CPUID leaves accepted)" \
  has 'hv-vmbus-bridge: the KVM path is unverified'
check "no setup error from the bridge" lacks 'hv-vmbus-bridge: (KVM refused|setting the Hyper-V CPUID)'
if has 'Hypervisor detected: Microsoft Hyper-V'; then
  check "guest connects to VMBus under KVM" has 'Vmbus version'
else
  echo "  note: the guest did not get far under this KVM: $(grep -a -m1 -E 'KVM internal error|emulation failure|panic' "$OUT" || echo 'no output')"
fi
finish
