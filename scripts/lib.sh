# Shared helpers for hvstor scripts. Sourced, not executed.
# shellcheck shell=bash

HVSTOR_ROOT=${HVSTOR_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
# Everything downloaded or built lives under one cache folder, outside git.
HVSTOR_CACHE=${HVSTOR_CACHE:-$HVSTOR_ROOT/.cache}
mkdir -p "$HVSTOR_CACHE"
# The project's one default guest kernel, written once in scripts/default-kernel (the
# Python commands read the same file). Empty when the file is missing: a script that needs
# it says so.
# shellcheck disable=SC2034  # read by the scripts that source this file
HVSTOR_DEFAULT_KERNEL=$(tr -d '[:space:]' 2>/dev/null < "$HVSTOR_ROOT/scripts/default-kernel" || true)

log()  { printf '[hvstor %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die()  { printf '[hvstor] error: %s\n' "$*" >&2; exit 1; }

# Run a long command with its output in a log file; print a heartbeat so the user
# sees progress, and the log tail on failure.
run_logged() {
  local what=$1 logf=$2; shift 2
  log "$what (log: $logf)"
  local start=$SECONDS
  ( "$@" ) >"$logf" 2>&1 &
  local pid=$!
  local last=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( SECONDS - last >= 20 )) && kill -0 "$pid" 2>/dev/null; then
      last=$SECONDS
      log "  ... $what: $((SECONDS - start))s, $(tail -n 1 "$logf" | tr -d '\r' | cut -c1-100)"
    fi
  done
  if ! wait "$pid"; then
    tail -n 40 "$logf" >&2
    die "$what failed after $((SECONDS - start))s (full log: $logf)"
  fi
  log "$what done in $((SECONDS - start))s"
}

# Prints the calling script's header comment (its usage text) and exits 2.
usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

need_root() {
  [ "$(id -u)" = 0 ] || die "this step installs Debian packages and needs root (or run it with sudo)"
}
