# Helpers for tests/boot/*.sh: boot a guest with our QEMU and check what it printed.
# shellcheck shell=bash
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
: "${QEMU:?QEMU must point at our qemu-system-x86_64 (tests/run-all.sh sets it)}"

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
fails=0

# boot_guest ARGS... : runs scripts/boot.sh; output in $OUT, status in $BOOT_RC.
boot_guest() {
  BOOT_RC=0
  bash "$HVSTOR_ROOT/scripts/boot.sh" --qemu "$QEMU" "$@" >"$OUT" 2>&1 || BOOT_RC=$?
}

check() { # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then echo "  ok: $what"
  else echo "  NOT OK: $what"; fails=$((fails + 1)); fi
}
has() { grep -q -E -- "$1" "$OUT"; }
lacks() { ! grep -q -E -- "$1" "$OUT"; }
count_is() { [ "$(grep -c -E -- "$1" "$OUT")" = "$2" ]; }

finish() {
  if [ "$fails" -gt 0 ]; then
    echo "---- guest output ----"; tail -n 60 "$OUT"; echo "----"
    exit 1
  fi
  exit 0
}
