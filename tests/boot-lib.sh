# Helpers for tests/boot/*.sh: boot a guest with our QEMU and check what it printed.
# shellcheck shell=bash
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
: "${QEMU:?QEMU must point at our qemu-system-x86_64 (tests/run-all.sh sets it)}"

# $OUT: what the boot printed (boot_guest, boot_with_host_side). $WORK: a folder for the
# test's own files, with $SOCK and $CONSOLE there for boot_with_host_side's QMP socket and
# console log. Both go when the test exits.
OUT=$(mktemp)
WORK=$(mktemp -d)
SOCK=$WORK/qmp.sock
CONSOLE=$WORK/console.log
trap 'rm -rf "$OUT" "$WORK"' EXIT
fails=0

# One hang guard for every boot, whatever the test: a deadline that ends a guest whose
# command and host side wait for an event that never comes (scripts/boot.sh --timeout).
# A guest that stops (QEMU or its kernel hung) is ended sooner, by boot.sh's watchdog
# (--silence). The guard measures no speed: the longest boot test takes a few minutes
# even on a busy machine, and no test is sized to how long it takes.
HANG_GUARD=1800

# boot_guest ARGS... : runs scripts/boot.sh; output in $OUT, status in $BOOT_RC.
boot_guest() {
  BOOT_RC=0
  bash "$HVSTOR_ROOT/scripts/boot.sh" --qemu "$QEMU" --timeout "$HANG_GUARD" "$@" >"$OUT" 2>&1 ||
    BOOT_RC=$?
  keep_failed_boot
}

# A test that boots more than once overwrites $OUT: the end of each failed boot's output is
# kept here for finish().
keep_failed_boot() {
  BOOTS=$((${BOOTS:-0} + 1))
  [ "$BOOT_RC" = 0 ] && return 0
  { echo "---- boot $BOOTS of this test ended with status $BOOT_RC; its last 80 lines ----"
    tail -n 80 "$OUT"; } >>"$WORK/failed-boots"
}

# boot_with_host_side PROGRAM SOCK CONSOLE [HOST_ARG...] -- BOOT_ARG...
#   A guest boot and a host-side program that drives it, side by side: runs scripts/boot.sh
#   --qemu "$QEMU" --log CONSOLE --qmp SOCK BOOT_ARG... in the background (its output in
#   $OUT) and meanwhile the Python program PROGRAM (usually built on tests/boot/qmp.py) as
#     python3 -c PROGRAM "$(dirname "$0")" SOCK CONSOLE BOOT_PID [HOST_ARG...]
#   (the first argument is the test script's directory, tests/boot, where qmp.py is).
#   If the host side fails, the boot is ended (a client that gave up leaves the guest waiting
#   for it; QEMU goes with the boot). Then waits for the boot and appends the host side's
#   output to $OUT, each line prefixed "host: ", and after a failed host side the console's
#   last 40 lines ("console: "). Sets HOST_RC and BOOT_RC to their statuses.
#   The guest powers off when its command ends, and QEMU with it: a guest command must not
#   end before the host side's last QMP step, so its last line waits for something that step
#   does (a disk the host plugs last, say).
boot_with_host_side() {
  local program=$1 sock=$2 console=$3 host_args=() host_out boot_pid
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do host_args+=("$1"); shift; done
  [ $# -gt 0 ] || die "boot_with_host_side: no -- before the boot arguments"
  shift
  host_out=$(mktemp)
  bash "$HVSTOR_ROOT/scripts/boot.sh" --qemu "$QEMU" --timeout "$HANG_GUARD" --log "$console" \
    --qmp "$sock" "$@" >"$OUT" 2>&1 &
  boot_pid=$!
  python3 -c "$program" "$(dirname "$0")" "$sock" "$console" "$boot_pid" \
    "${host_args[@]}" >"$host_out" 2>&1
  HOST_RC=$?
  [ "$HOST_RC" = 0 ] || kill "$boot_pid" 2>/dev/null
  BOOT_RC=0
  wait "$boot_pid" || BOOT_RC=$?
  sed 's/^/host: /' "$host_out" >>"$OUT"
  rm -f "$host_out"
  keep_failed_boot
  # The boot was ended with its output: keep what the guest got to (did it end, or QEMU?).
  if [ "$HOST_RC" != 0 ] && [ -f "$console" ]; then
    tail -n 40 "$console" | tr -d '\r' | sed 's/^/console: /' >>"$OUT"
  fi
}

check() { # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then echo "  ok: $what"
  else echo "  NOT OK: $what"; fails=$((fails + 1)); fi
}
# After boot_with_host_side: both sides ended well.
check_boot_and_host() {
  check "guest command finished" [ "$BOOT_RC" = 0 ]
  check "the QMP client got through every step" [ "$HOST_RC" = 0 ]
}
has() { grep -q -E -- "$1" "$OUT"; }
lacks() { ! grep -q -E -- "$1" "$OUT"; }
count_is() { [ "$(grep -c -E -- "$1" "$OUT")" = "$2" ]; }

finish() {
  if [ "$fails" -gt 0 ]; then
    echo "---- guest output ----"; tail -n 60 "$OUT"; echo "----"
    [ "${BOOTS:-0}" -le 1 ] || [ ! -f "$WORK/failed-boots" ] || cat "$WORK/failed-boots"
    exit 1
  fi
  exit 0
}

# Shell functions for guest commands that wait for disks; put them before the command
# (--cmd "$GUEST_LUN_HELPERS$GUEST_CMD").
#   wait_for WHAT CMD...  runs CMD every 0.5 s until it succeeds. It has no bound of its
#                own: the hang guard is the test's only clock. Every 30 s it says on
#                stderr (the console) that it is still waiting for WHAT, so a hung run
#                shows what for.
#   lun_dev N    the sdX of LUN N on the guest's SCSI hosts, if there is one
#   wait_lun N   waits for LUN N to appear (wait_for), prints its sdX; lun_present N and
#                lun_gone N for wait_for
#   disks        how many sd disks the guest has; has_disks N: at least N (for wait_for)
#   (CMD's arguments are expanded once, by the caller: put a $(...) that must be read again
#   each time in a function.)
read -r -d '' GUEST_LUN_HELPERS <<'SH' || true
lun_dev() {
  for d in /sys/block/sd*; do
    [ -e "$d" ] || continue
    a=$(basename "$(readlink "$d/device")")
    [ "${a##*:}" = "$1" ] && basename "$d"
  done
}
wait_for() {
  _wf_what=$1; shift; _wf_n=0
  until "$@"; do
    sleep 0.5; _wf_n=$((_wf_n + 1))
    [ $((_wf_n % 60)) -eq 0 ] && echo "still waiting for $_wf_what ($((_wf_n / 2)) s)" >&2
  done
  return 0
}
lun_present() { [ -n "$(lun_dev "$1")" ]; }
lun_gone() { [ -z "$(lun_dev "$1")" ]; }
wait_lun() { wait_for "LUN $1" lun_present "$1"; lun_dev "$1"; }
disks() { ls /sys/block | grep -c '^sd'; }
has_disks() { [ "$(disks)" -ge "$1" ]; }
SH
GUEST_LUN_HELPERS+=$'\n'

# The guest command of the patched-module tests: the running kernel, the loaded hv_storvsc's
# version, srcversion, taint and storvsc_vcpus_per_sub_channel, the hardware queues and the
# tag flags of sda; with HVSTOR_FIO=1 before it, also a fio crc32c verify ("FIO OK").
read -r -d '' MODULE_PROBE <<'SH' || true
m=/sys/module/hv_storvsc
echo "RELEASE $(uname -r)"
echo "VERSION $(cat $m/version 2>/dev/null)"
echo "SRCVERSION $(cat $m/srcversion 2>/dev/null)"
echo "TAINT $(cat $m/taint 2>/dev/null)"
echo "VPSC $(cat $m/parameters/storvsc_vcpus_per_sub_channel 2>/dev/null)"
echo "HWQ $(ls -d /sys/block/sda/mq/*/ | wc -l)"
echo "FLAGS $(cat /sys/kernel/debug/block/sda/hctx0/flags)"
if [ -n "$HVSTOR_FIO" ]; then
fio --name=v --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=16 --numjobs=2 \
    --size=48M --offset_increment=64M --rw=randwrite --bs=4k-64k --verify=crc32c \
    --verify_fatal=1 --group_reporting > /tmp/fio.out 2>&1 && echo "FIO OK" || { cat /tmp/fio.out; echo "FIO FAILED"; }
fi
SH
