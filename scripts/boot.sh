#!/usr/bin/env bash
# Boots a guest kernel under QEMU with the hvstor busybox initramfs and runs one command in it.
#
#   scripts/boot.sh --qemu PATH [--kernel NAME|PATH] [--modules DIR] [--vcpus N] [--mem SIZE]
#                   [--cmd 'shell command'] [--timeout SECONDS] [--silence SECONDS] [--log FILE]
#                   [--append 'kernel args'] [--wait-disks N] [--ko FILE]...
#                   [--results DIR] [--qmp PATH] [-- extra qemu args...]
#
#   --kernel      debian-6.12 (default), debian-6.1, or a bzImage path (see guest-assets.sh)
#   --modules     lib/modules/<version> tree for a bzImage path
#   --vcpus       guest CPUs (default 2); --mem guest memory (default 1G)
#   --cmd         shell command run in the guest (busybox sh -c); its console output is
#                 printed and its exit status is this script's. Kernel messages from while
#                 it ran come in the same output as whole lines ("[  12.345678] text"), a
#                 little after the moment they were logged (the guest's init forwards them
#                 from /dev/kmsg so that they never cut a line of the command's in two).
#                 Without --cmd the guest starts an interactive shell on this terminal
#                 (Ctrl-A X quits QEMU).
#   --timeout     a deadline: seconds before QEMU is ended (default: none)
#   --silence     with --cmd, seconds a guest may show no sign of life before QEMU is ended
#                 (default 600). Signs of life are console output and the heartbeat the
#                 guest's init writes every 5 s to the debug port (0x402). This ends a guest
#                 that has stopped (QEMU or the guest kernel hung), never one that is slow:
#                 without --timeout a command may take as long as it needs.
#   --log         keep the whole serial console log in FILE
#   --append      more kernel command line arguments
#   --wait-disks  in the guest, wait until N SCSI disks exist before the command (no bound
#                 of its own; the console says every 30 s what it has)
#   --ko          a module built for the guest kernel (scripts/build-module.sh) that replaces
#                 the stock one of the same name (repeatable; see guest-assets.sh)
#   --results     results channel: a second serial port (guest /dev/ttyS1) backed by a file;
#                 the command writes files under $HVSTOR_RESULTS in the guest and they are
#                 unpacked into DIR after QEMU exits (with .exit-status). With --cmd only.
#   --qmp         a QMP server on the unix socket PATH while the guest runs (QEMU does not
#                 wait for a client): e.g. qom-get path=/machine/peripheral/ID property=stats
#                 for an hv-disk's statistics, or device_add/device_del of hv-disk. PATH
#                 must not exist, or be a stale socket; it is removed when QEMU ends.
#   -- ...        passed to QEMU as they are (for example -device hv-storvsc,...)
#
# Exit status: the guest command's; 124 when the deadline passed or the guest fell silent;
# 125 when the guest panicked,
# QEMU ended without reporting the command's status, or the command succeeded but its
# results did not arrive whole; 1/2 for errors before the boot.
# HVSTOR_BOOT_QUIET=1 adds "quiet" to the kernel command line.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"


QEMU=''
KERNEL_SPEC=debian-6.12
MODULES_DIR=''
VCPUS=2
MEM=1G
CMD=''
HAVE_CMD=0
TIMEOUT=''
SILENCE=600
LOG=''
APPEND=''
WAIT_DISKS=0
KO_ARGS=()
RESULTS=''
QMP=''
EXTRA=()

need_arg() { [ "$2" -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case $1 in
    --qemu)       need_arg "$1" $#; QEMU=$2; shift 2 ;;
    --kernel)     need_arg "$1" $#; KERNEL_SPEC=$2; shift 2 ;;
    --modules)    need_arg "$1" $#; MODULES_DIR=$2; shift 2 ;;
    --vcpus)      need_arg "$1" $#; VCPUS=$2; shift 2 ;;
    --mem)        need_arg "$1" $#; MEM=$2; shift 2 ;;
    --cmd)        need_arg "$1" $#; CMD=$2; HAVE_CMD=1; shift 2 ;;
    --timeout)    need_arg "$1" $#; [ -z "$TIMEOUT" ] || die "--timeout given twice"
                  TIMEOUT=$2; shift 2 ;;
    --silence)    need_arg "$1" $#; SILENCE=$2; shift 2 ;;
    --log)        need_arg "$1" $#; LOG=$2; shift 2 ;;
    --append)     need_arg "$1" $#; APPEND="$APPEND $2"; shift 2 ;;
    --wait-disks) need_arg "$1" $#; WAIT_DISKS=$2; shift 2 ;;
    --ko)         need_arg "$1" $#; KO_ARGS+=(--ko "$2"); shift 2 ;;
    --results)    need_arg "$1" $#; RESULTS=$2; shift 2 ;;
    --qmp)        need_arg "$1" $#; QMP=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage ;;
    *) printf '[hvstor] error: unknown argument: %s\n' "$1" >&2; usage ;;
  esac
done

[ -n "$QEMU" ] || die "--qemu PATH is required"
if [[ $QEMU != */* ]]; then QEMU=$(command -v "$QEMU" || true); fi
if [ -z "$QEMU" ] || [ ! -x "$QEMU" ]; then
  die "QEMU binary not found or not executable: ${QEMU:-(none)}"
fi
[[ $VCPUS =~ ^[1-9][0-9]*$ ]] || die "--vcpus wants a positive number, got '$VCPUS'"
[[ $WAIT_DISKS =~ ^[0-9]+$ ]] || die "--wait-disks wants a number, got '$WAIT_DISKS'"
[[ $MEM =~ ^[1-9][0-9]*[MGmg]?$ ]] || die "--mem wants a size such as 1G or 512M, got '$MEM'"
if [ -n "$QMP" ]; then
  # QEMU removes whatever is at the path before it listens: never a file of the user's.
  [ ! -e "$QMP" ] || [ -S "$QMP" ] || die "--qmp: $QMP exists and is not a socket"
  [ -d "$(dirname "$QMP")" ] || die "--qmp: no directory $(dirname "$QMP")"
  [ "${#QMP}" -le 107 ] || die "--qmp: socket paths are limited to 107 bytes: $QMP"
  [[ $QMP != *,* ]] || die "--qmp: the path must not contain a comma: $QMP"
fi
if [ -n "$TIMEOUT" ]; then
  [[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout wants a positive number of seconds, got '$TIMEOUT'"
fi
[[ $SILENCE =~ ^[1-9][0-9]*$ ]] || die "--silence wants a positive number of seconds, got '$SILENCE'"

# --- guest assets ---------------------------------------------------------------------------
asset_args=("$KERNEL_SPEC")
[ -z "$MODULES_DIR" ] || asset_args+=(--modules "$MODULES_DIR")
asset_args+=("${KO_ARGS[@]}")
if [ -n "$RESULTS" ]; then
  [ "$HAVE_CMD" = 1 ] || die "--results goes with --cmd"
  mkdir -p "$RESULTS" || die "--results: cannot create $RESULTS"
fi
assets=$("$HVSTOR_ROOT/scripts/guest-assets.sh" "${asset_args[@]}") ||
  die "could not prepare guest assets for '$KERNEL_SPEC'"
KERNEL='' INITRD=''
eval "$assets"
if [ ! -f "$KERNEL" ] || [ ! -f "$INITRD" ]; then
  die "guest-assets.sh returned no kernel/initramfs"
fi

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/hvstor-boot.XXXXXX")
QPID=''
# Ends QEMU: TERM, then KILL if it is still there 10 s later (a hung main loop ignores TERM).
end_qemu() {
  kill -TERM "$QPID" 2>/dev/null || return 0
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$QPID" 2>/dev/null || return 0; sleep 1; done
  kill -KILL "$QPID" 2>/dev/null || true
}
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [ -n "$QPID" ]; then end_qemu; fi
  if [ -n "$QMP" ] && [ -S "$QMP" ]; then rm -f "$QMP"; fi
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- per-run initramfs: the base archive plus one holding /hvstor/cmd --------------------------
RUN_INITRD=$RUN_DIR/initrd.cpio.gz
if [ "$HAVE_CMD" = 1 ]; then
  mkdir -p "$RUN_DIR/extra/hvstor"
  printf '%s\n' "$CMD" > "$RUN_DIR/extra/hvstor/cmd"
  (cd "$RUN_DIR/extra" && printf '%s\n' hvstor hvstor/cmd | cpio -o -H newc -R 0:0 --quiet) |
    gzip -n > "$RUN_DIR/extra.cpio.gz"
  cat "$INITRD" "$RUN_DIR/extra.cpio.gz" > "$RUN_INITRD"
else
  RUN_INITRD=$INITRD
fi

# --- QEMU command line ----------------------------------------------------------------------
CMDLINE="console=ttyS0 panic=-1"
[ "${HVSTOR_BOOT_QUIET:-0}" != 1 ] || CMDLINE="$CMDLINE quiet"
[ "$WAIT_DISKS" = 0 ] || CMDLINE="$CMDLINE hvstor.wait_disks=$WAIT_DISKS"
[ -z "$RESULTS" ] || CMDLINE="$CMDLINE hvstor.results=ttyS1"
CMDLINE="$CMDLINE${APPEND}"

QARGS=(-machine q35 -accel tcg -cpu max -smp "$VCPUS" -m "$MEM"
       -nographic -nodefaults -no-reboot
       -kernel "$KERNEL" -initrd "$RUN_INITRD" -append "$CMDLINE")
for fw in /usr/share/seabios /usr/share/qemu; do
  [ ! -d "$fw" ] || QARGS+=(-L "$fw")
done
[ -z "$QMP" ] || QARGS+=(-qmp "unix:$QMP,server=on,wait=off")

if [ "$HAVE_CMD" = 0 ]; then
  # Interactive: the console on this terminal, with QEMU's monitor muxed in (Ctrl-A C).
  chardev=stdio,id=con0,mux=on,signal=off
  [ -z "$LOG" ] || chardev="$chardev,logfile=$LOG"
  QARGS+=(-chardev "$chardev" -serial chardev:con0 -mon "chardev=con0,mode=readline")
  log "booting $(basename "$KERNEL") interactively (Ctrl-A X quits)"
  rc=0
  if [ -n "$TIMEOUT" ]; then
    timeout --foreground "$TIMEOUT" "$QEMU" "${QARGS[@]}" "${EXTRA[@]}" || rc=$?
  else
    "$QEMU" "${QARGS[@]}" "${EXTRA[@]}" || rc=$?
  fi
  exit "$rc"
fi

CONSOLE=${LOG:-$RUN_DIR/console.log}
mkdir -p "$(dirname "$CONSOLE")"
: > "$CONSOLE"
QARGS+=(-serial "file:$CONSOLE" -monitor none)
HEARTBEAT=$RUN_DIR/heartbeat
: > "$HEARTBEAT"
QARGS+=(-chardev "file,id=hvhb,path=$HEARTBEAT" -device isa-debugcon,iobase=0x402,chardev=hvhb)
if [ -n "$RESULTS" ]; then
  # The console is the first serial port (ttyS0); this one is the second (ttyS1).
  : > "$RUN_DIR/results.tar"
  QARGS+=(-chardev "file,id=hvres,path=$RUN_DIR/results.tar" -device isa-serial,chardev=hvres)
fi

# Prints the command's console lines (between the markers, \r stripped) as they arrive;
# writes the exit status to $RUN_DIR/status and the time the guest got ready to $RUN_DIR/ready.
# shellcheck disable=SC2016
FILTER='
  { gsub(/\r/, "") }
  state == 0 {
    if (index($0, "HVSTOR-GUEST-READY")) { state = 1; system("date +%s.%N > " dir "/ready") }
    next
  }
  state == 1 {
    # The status may share its line with output before it (no newline yet) and with a
    # kernel message after it (a late printk on the console).
    if (match($0, /HVSTOR-EXIT-STATUS=[0-9]+/)) {
      if (RSTART > 1) { print substr($0, 1, RSTART - 1); fflush() }
      print substr($0, RSTART + 19, RLENGTH - 19) > (dir "/status"); close(dir "/status")
      state = 2; next
    }
    print; fflush()
  }
'

log "booting $(basename "$KERNEL") ($VCPUS vCPUs, $MEM, ${TIMEOUT:+deadline ${TIMEOUT}s, }ended after ${SILENCE}s without a sign of life)"
start=$(date +%s.%N)
"$QEMU" "${QARGS[@]}" "${EXTRA[@]}" </dev/null >"$RUN_DIR/qemu.out" 2>&1 &
QPID=$!
# tail reads the file once more after QEMU is gone, so nothing at the end is lost.
tail -n +1 -f --pid="$QPID" -s 0.2 "$CONSOLE" 2>/dev/null | awk -v dir="$RUN_DIR" "$FILTER" &
TPID=$!

# The watchdog. Ends QEMU (why=...) when the deadline passes, when the guest has shown no
# sign of life for $SILENCE s, or when the guest reported its status and has not powered
# off 60 s later (its status stands; a warning says so).
life() { { stat -c %s "$CONSOLE" "$HEARTBEAT" 2>/dev/null || true; } | tr '\n' ' '; }
why='' seen=$(life) seen_at=$SECONDS began=$SECONDS reported_at=''
while kill -0 "$QPID" 2>/dev/null; do
  sleep 1
  now=$(life)
  [ "$now" = "$seen" ] || { seen=$now; seen_at=$SECONDS; }
  if [ -n "$TIMEOUT" ] && [ $((SECONDS - began)) -ge "$TIMEOUT" ]; then why=deadline; break; fi
  if [ $((SECONDS - seen_at)) -ge "$SILENCE" ]; then why=silence; break; fi
  if [ -s "$RUN_DIR/status" ]; then
    [ -n "$reported_at" ] || reported_at=$SECONDS
    if [ $((SECONDS - reported_at)) -ge 60 ]; then why=poweroff; break; fi
  fi
done
[ -z "$why" ] || end_qemu
rc=0
wait "$QPID" || rc=$?
QPID=''
[ -z "$why" ] || rc=124
wait "$TPID" || true
end=$(date +%s.%N)

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
fail() {
  local code=$1; shift
  printf '[hvstor] error: %s\n' "$*" >&2
  if [ -s "$RUN_DIR/qemu.out" ]; then
    printf -- '--- QEMU output ---\n' >&2
    tail -n 20 "$RUN_DIR/qemu.out" >&2
  fi
  printf -- '--- last 60 lines of the guest console ---\n' >&2
  if [ -s "$CONSOLE" ]; then tail -n 60 "$CONSOLE" | tr -d '\r' >&2; else echo '(empty)' >&2; fi
  printf -- '---\n' >&2
  if [ -z "$LOG" ]; then
    cp "$CONSOLE" "$HVSTOR_CACHE/boot-failed-console.log"
    printf '[hvstor] full console log: %s\n' "$HVSTOR_CACHE/boot-failed-console.log" >&2
  else
    printf '[hvstor] full console log: %s\n' "$LOG" >&2
  fi
  exit "$code"
}

# Unpacks the results archive into $RESULTS; returns 1 when it is missing or truncated.
unpack_results() {
  [ -n "$RESULTS" ] || return 0
  [ -s "$RUN_DIR/results.tar" ] || return 1
  tar -x -f "$RUN_DIR/results.tar" -C "$RESULTS" 2>"$RUN_DIR/results.err" || return 1
  [ -f "$RESULTS/.exit-status" ]
}
results_ok=1
unpack_results || results_ok=0

if [ -s "$RUN_DIR/status" ]; then
  status=$(cat "$RUN_DIR/status")
  if [ "$results_ok" = 0 ] && [ "$status" = 0 ]; then
    fail 125 "the command succeeded but its results did not arrive whole on the results port ($(head -c 200 "$RUN_DIR/results.err" 2>/dev/null))"
  fi
  if [ -n "$why" ]; then
    log "warning: the guest reported its status but did not power off ($why): QEMU was ended"
  fi
  log "guest ready after $(elapsed "$start" "$(cat "$RUN_DIR/ready")")s, command exited with status $status, total $(elapsed "$start" "$end")s"
  if [ -s "$RUN_DIR/qemu.out" ] && [ "${HVSTOR_BOOT_QUIET:-0}" != 1 ]; then
    sed 's/^/[qemu] /' "$RUN_DIR/qemu.out" >&2
  fi
  exit "$status"
fi

if [ -n "$why" ]; then
  if [ "$why" = deadline ]; then what="the deadline of ${TIMEOUT}s passed"
  else what="the guest showed no sign of life for ${SILENCE}s (no console output, no heartbeat)"; fi
  if [ -s "$RUN_DIR/ready" ]; then fail 124 "$what: the guest command did not finish"; fi
  fail 124 "$what before the guest was ready"
fi
if grep -q 'Kernel panic' "$CONSOLE"; then
  fail 125 "the guest kernel panicked (QEMU exit status $rc)"
fi
if [ -s "$RUN_DIR/ready" ]; then
  fail 125 "QEMU exited (status $rc) while the guest command ran, without its exit status"
fi
fail 125 "QEMU exited (status $rc) before the guest was ready"
