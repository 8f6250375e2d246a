#!/usr/bin/env bash
# Builds a small static fio for the guest initramfs from Debian's fio source package.
#
#   scripts/build-fio.sh        prints the binary's path on the last line
#
# Debian's fio package pulls in about 80 MB of libraries (rbd, rdma, gluster, pmem, gtk);
# the guest needs none of them. This builds fio from the source of the machine's own Debian
# release (bookworm: fio 3.33) with only the Linux engines (libaio, io_uring, psync, sync,
# null, ...), statically linked against glibc, libaio and zlib, stripped.
#
# The source comes through apt, from a private deb-src list under the cache (derived from the
# machine's own apt configuration, so nothing is added to /etc/apt); when that fails, from the
# deb-src entries already configured (trixie's, added by setup-host.sh).
#
# Cached: $HVSTOR_CACHE/guest/fio is rebuilt only when missing or when this script changed.
# HVSTOR_FIO_REBUILD=1 forces a rebuild.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

SRC_ROOT=$HVSTOR_CACHE/fio-src
SRC=$SRC_ROOT/src
OUT=$HVSTOR_CACHE/guest/fio
STAMP=$OUT.stamp
BUILD_DEPS=(build-essential libaio-dev zlib1g-dev dpkg-dev)

# Engines and features the guest has no use for (or whose libraries would not link
# statically) are disabled explicitly, so a -dev package installed on the host later does
# not change the binary. --disable-native: the guest CPU (TCG -cpu max) is not the host's.
CONFIGURE_ARGS=(--build-static --disable-native
  --disable-numa --disable-rdma --disable-rados --disable-rbd --disable-http --disable-gfapi
  --disable-pmem --disable-libnfs --disable-xnvme --disable-libzbc --disable-dfs
  --disable-tcmalloc --disable-lex)

mkdir -p "$SRC_ROOT" "$(dirname "$OUT")"
exec 8>"$SRC_ROOT/.lock"
flock 8

want_stamp=$(sha256sum "$0" | cut -d' ' -f1)
if [ "${HVSTOR_FIO_REBUILD:-0}" != 1 ] && [ -x "$OUT" ] &&
   [ "$(cat "$STAMP" 2>/dev/null)" = "$want_stamp" ]; then
  echo "$OUT"
  exit 0
fi

# --- build dependencies ------------------------------------------------------------------
missing_deps() {
  local p
  for p in "${BUILD_DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

apt_updated=
apt_update_once() {
  [ -z "$apt_updated" ] || return 0
  apt_updated=1
  need_root
  run_logged "apt-get update" "$SRC_ROOT/apt-update.log" apt-get update
}

install_deps() {
  local miss
  miss=$(missing_deps | tr '\n' ' ')
  [ -n "${miss// }" ] || return 0
  need_root
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  if ! try_logged "installing fio build dependencies: $miss" "$SRC_ROOT/apt-install.log" \
       apt-get install -y --no-install-recommends $miss; then
    # Stale package lists: refresh once and retry.
    apt_update_once
    # shellcheck disable=SC2086
    run_logged "installing fio build dependencies: $miss" "$SRC_ROOT/apt-install.log" \
      apt-get install -y --no-install-recommends $miss
  fi
}

# A short step whose failure the caller handles: output to a log, status returned.
try_logged() {
  local what=$1 logf=$2; shift 2
  log "$what (log: $logf)"
  "$@" >"$logf" 2>&1
}

# --- source ------------------------------------------------------------------------------
# Prints "URI KEYRING" of the main archive entry for suite $1 in the apt configuration.
mirror_for_suite() {
  local suite=$1 f found=
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822 stanzas are separated by blank lines; an inline Signed-By key block is ignored.
    found=$(awk -v s="$suite" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") && uri != "" && !done) {
          print uri, (key ~ /^\// ? key : "-"); done = 1
        }
        types = suites = uri = key = ""
      }
      /^[ \t]*$/     { flush(); next }
      /^Types:/      { sub(/^Types:[ \t]*/, "");  types = $0 }
      /^Suites:/     { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      /^URIs:/       { uri = $2 }
      /^Signed-By:/  { key = $2 }
      END { flush() }
    ' "$f")
    [ -z "$found" ] || break
  done
  if [ -z "$found" ] && [ -f /etc/apt/sources.list ]; then
    found=$(awk -v s="$suite" '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s) { print $i, "-"; exit }
      }' /etc/apt/sources.list)
  fi
  [ -n "$found" ] && echo "$found"
}

# Downloads the fio source of the machine's release through a private source list.
fetch_release_source() {
  local codename uri key dir=$SRC_ROOT/apt
  local -a opts
  # shellcheck source=/dev/null
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || { log "cannot tell this machine's Debian release"; return 1; }
  read -r uri key < <(mirror_for_suite "$codename") ||
    { log "no '$codename' entry in the apt configuration"; return 1; }
  [ "$key" != - ] || key=/usr/share/keyrings/debian-archive-keyring.gpg
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/parts"
  printf 'deb-src [signed-by=%s] %s %s main\n' "$key" "$uri" "$codename" > "$dir/sources.list"
  opts=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/parts"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
  [ "$(id -u)" != 0 ] || opts+=(-o APT::Sandbox::User=root)
  local rc=0
  try_logged "fetching the $codename source index" "$SRC_ROOT/apt-src-update.log" \
    apt-get "${opts[@]}" update || rc=$?
  [ "$rc" != 0 ] ||
    ( cd "$SRC_ROOT" && try_logged "downloading fio source ($codename)" "$SRC_ROOT/download.log" \
        apt-get "${opts[@]}" source --download-only fio ) || rc=$?
  # The index (about 10 MB unpacked) is only needed for this download.
  rm -rf "$dir"
  return "$rc"
}

fetch_configured_source() {
  local -a opts=()
  [ "$(id -u)" != 0 ] || opts=(-o APT::Sandbox::User=root)
  ( cd "$SRC_ROOT" && try_logged "downloading fio source (trixie)" "$SRC_ROOT/download.log" \
      apt-get "${opts[@]}" source -t trixie --download-only fio )
}

find_dsc() { find "$SRC_ROOT" -maxdepth 1 -name 'fio_*.dsc' | sort | tail -n 1; }

fetch_source() {
  local dsc
  dsc=$(find_dsc)
  if [ -z "$dsc" ]; then
    fetch_release_source || {
      log "falling back to the configured deb-src entries"
      fetch_configured_source || {
        tail -n 5 "$SRC_ROOT/download.log" >&2 || true
        die "could not download Debian's fio source package (logs in $SRC_ROOT)"
      }
    }
    dsc=$(find_dsc)
  fi
  [ -n "$dsc" ] || die "no fio .dsc in $SRC_ROOT after the download"
  echo "$dsc"
}

extract_source() {
  local dsc=$1
  if [ -f "$SRC/.hvstor-dsc" ] && [ "$(cat "$SRC/.hvstor-dsc")" = "$(basename "$dsc")" ]; then
    return 0
  fi
  log "unpacking $(basename "$dsc")"
  rm -rf "$SRC" "$SRC.new"
  ( cd "$SRC_ROOT" && dpkg-source -x "$dsc" "$SRC.new" ) >"$SRC_ROOT/unpack.log" 2>&1 ||
    { tail "$SRC_ROOT/unpack.log" >&2; die "dpkg-source -x $(basename "$dsc") failed"; }
  basename "$dsc" > "$SRC.new/.hvstor-dsc"
  mv "$SRC.new" "$SRC"
}

# --- build -------------------------------------------------------------------------------
check_static() {
  local bin=$1 ver
  if LC_ALL=C readelf -d "$bin" 2>/dev/null | grep -q '(NEEDED)'; then
    die "$bin is dynamically linked: $(LC_ALL=C readelf -d "$bin" | grep '(NEEDED)' | tr -s ' ' | tr '\n' ' ')"
  fi
  ! LC_ALL=C readelf -l "$bin" 2>/dev/null | grep -q 'INTERP' ||
    die "$bin asks for a program interpreter: not static"
  ver=$("$bin" --version) || die "$bin --version failed"
  log "fio: $ver, $(stat -c %s "$bin") bytes, $(command -v file >/dev/null && file -b "$bin" | cut -d, -f1-4 || echo static)"
}

main() {
  local start=$SECONDS dsc
  install_deps
  dsc=$(fetch_source)
  extract_source "$dsc"
  local f
  for f in libaio.a libz.a libc.a; do
    [ -n "$(find /usr/lib /lib -name "$f" -print -quit 2>/dev/null)" ] ||
      die "static $f not found (libaio-dev, zlib1g-dev and libc6-dev provide it)"
  done
  # A configure with other options leaves objects from the old ones: start clean.
  ( cd "$SRC" && make clean ) >/dev/null 2>&1 || true
  ( cd "$SRC" && run_logged "configuring fio" "$SRC_ROOT/configure.log" \
      ./configure "${CONFIGURE_ARGS[@]}" )
  grep -q '^Linux AIO support *yes' "$SRC_ROOT/configure.log" ||
    die "fio's configure found no static libaio (see $SRC_ROOT/configure.log)"
  ( cd "$SRC" && run_logged "building fio (under a minute on 2 cores)" "$SRC_ROOT/build.log" \
      make -j"$(nproc)" fio )
  strip -o "$OUT.new" "$SRC/fio"
  check_static "$OUT.new"
  local eng engines
  engines=$("$OUT.new" --enghelp | tail -n +2 | tr -d ' \t')
  for eng in libaio io_uring psync sync null; do
    grep -qx "$eng" <<<"$engines" || die "the fio build lacks the $eng engine"
  done
  mv -f "$OUT.new" "$OUT"
  echo "$want_stamp" > "$STAMP"
  log "fio ready in $((SECONDS - start))s"
  echo "$OUT"
}
main "$@"
