#!/usr/bin/env bash
# Builds qemu-system-x86_64 with the hv-storvsc device:
#   1. Debian's QEMU 10.0 source package from trixie (apt-get source), once;
#   2. our patch set (hw/qemu/patches), re-applied on a fresh tree when it changes;
#   3. the C++ device model as libhvstor.a (release build of our meson project);
#   4. the C glue (hw/qemu) copied to hw/i386/hvstor; then an incremental ninja build.
# Prints the path of the binary on the last line.
# --source-only: steps 1 and 2 only (QEMU's Python packages, qemu.machine and qemu.qmp,
# come with the source); prints the source folder on the last line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SRC_ROOT=$HVSTOR_CACHE/qemu-src
SRC=$SRC_ROOT/src
BUILD=$HVSTOR_CACHE/qemu-build
LIB_BUILD=$HVSTOR_CACHE/build-release
PATCHES=$HVSTOR_ROOT/hw/qemu/patches
BIN=$BUILD/qemu-system-x86_64
CONFIGURE_ARGS=(--python=/usr/bin/python3 --target-list=x86_64-softmmu
  --without-default-features --enable-tcg --enable-kvm --enable-slirp
  --enable-fdt=system --disable-docs --disable-werror --disable-install-blobs)

# Copy only when the content differs, so unchanged files keep their timestamps.
sync_file() {
  mkdir -p "$(dirname "$2")"
  cmp -s "$1" "$2" 2>/dev/null || cp "$1" "$2"
}

fetch_source() {
  local dsc
  dsc=$(ls "$SRC_ROOT"/qemu_*.dsc 2>/dev/null | head -n 1 || true)
  if [ -z "$dsc" ]; then
    mkdir -p "$SRC_ROOT"
    ( cd "$SRC_ROOT" && run_logged "downloading QEMU source (Debian trixie)" "$SRC_ROOT/download.log" \
        apt-get source -t trixie --download-only qemu )
    dsc=$(ls "$SRC_ROOT"/qemu_*.dsc | head -n 1)
  fi
  echo "$dsc"
}

extract_source() {
  local dsc=$1
  log "unpacking $(basename "$dsc")"
  rm -rf "$SRC.new"
  ( cd "$SRC_ROOT" && dpkg-source -x "$dsc" "$SRC.new" >"$SRC_ROOT/unpack.log" 2>&1 ) \
    || { tail "$SRC_ROOT/unpack.log"; die "dpkg-source failed"; }
  rm -rf "$SRC"
  mv "$SRC.new" "$SRC"
}

# Files a patch set touches, for forcing their rebuild when the set changes.
patched_files() { grep -h '^+++ b/' "$@" 2>/dev/null | sed 's#^+++ b/##; s#\t.*##' | sort -u; }

apply_patches() {
  local dsc=$1 stamp_dir=$SRC_ROOT/applied want have
  want=$(cat "$PATCHES"/*.patch | sha256sum | cut -d' ' -f1)
  have=$(cat "$stamp_dir/sha256" 2>/dev/null || true)
  [ -d "$SRC" ] && [ "$want" = "$have" ] && return 0
  local old=()
  [ -d "$stamp_dir" ] && mapfile -t old < <(patched_files "$stamp_dir"/*.patch)
  extract_source "$dsc"
  local p
  for p in "$PATCHES"/*.patch; do
    log "applying $(basename "$p")"
    patch -d "$SRC" -p1 --quiet --forward < "$p" || die "patch $(basename "$p") does not apply to $(basename "$dsc")"
  done
  # A freshly unpacked file carries the tarball's old mtime; touch everything the old
  # or new patches touched so ninja rebuilds it.
  local f
  for f in "${old[@]}" $(patched_files "$PATCHES"/*.patch); do
    [ -e "$SRC/$f" ] && touch "$SRC/$f"
  done
  rm -rf "$stamp_dir"; mkdir -p "$stamp_dir"
  cp "$PATCHES"/*.patch "$stamp_dir/"
  echo "$want" > "$stamp_dir/sha256"
}

build_core_lib() {
  if [ ! -f "$LIB_BUILD/build.ninja" ]; then
    meson setup "$LIB_BUILD" "$HVSTOR_ROOT" -Dtests=false -Dbuildtype=release >"$HVSTOR_CACHE/lib-setup.log" 2>&1 \
      || { tail -n 30 "$HVSTOR_CACHE/lib-setup.log"; die "meson setup of libhvstor failed"; }
  fi
  ninja -C "$LIB_BUILD" libhvstor.a >"$HVSTOR_CACHE/lib-build.log" 2>&1 \
    || { tail -n 40 "$HVSTOR_CACHE/lib-build.log"; die "building libhvstor.a failed"; }
}

install_glue() {
  local dst=$SRC/hw/i386/hvstor f
  for f in "$HVSTOR_ROOT"/hw/qemu/*.c "$HVSTOR_ROOT"/hw/qemu/*.h "$HVSTOR_ROOT"/hw/qemu/meson.build \
           "$HVSTOR_ROOT"/hw/qemu/trace-events; do
    sync_file "$f" "$dst/$(basename "$f")"
  done
  sync_file "$HVSTOR_ROOT/include/capi/hvstor/capi.h" "$dst/include/hvstor/capi.h"
  sync_file "$HVSTOR_ROOT/include/thread/hvstor/trace_events.h" "$dst/include/hvstor/trace_events.h"
  # ninja does not see link_args inputs: relink by hand when the library changed.
  if ! cmp -s "$LIB_BUILD/libhvstor.a" "$dst/lib/libhvstor.a"; then
    sync_file "$LIB_BUILD/libhvstor.a" "$dst/lib/libhvstor.a"
    rm -f "$BIN"
  fi
}

main() {
  bash "$HVSTOR_ROOT/scripts/setup-host.sh"
  local dsc start=$SECONDS
  # One fetch, unpack or build at a time: boots started together share the cache.
  mkdir -p "$SRC_ROOT"
  exec 8>"$SRC_ROOT/.lock"
  flock 8
  dsc=$(fetch_source)
  apply_patches "$dsc"
  if [ "${1:-}" = --source-only ]; then echo "$SRC"; return 0; fi
  [ $# -eq 0 ] || die "unknown argument: $1 (build-qemu.sh [--source-only])"
  build_core_lib
  install_glue
  if [ ! -f "$BUILD/build.ninja" ]; then
    mkdir -p "$BUILD"
    ( cd "$BUILD" && run_logged "configuring QEMU" "$BUILD/configure.log" "$SRC/configure" "${CONFIGURE_ARGS[@]}" )
  fi
  # Incremental: a second or two when nothing changed.
  run_logged "building QEMU (about 10-15 minutes from scratch on 2 cores)" "$BUILD/build.log" \
    ninja -C "$BUILD" qemu-system-x86_64
  [ -x "$BIN" ] || die "no QEMU binary at $BIN"
  log "QEMU ready in $((SECONDS - start))s"
  echo "$BIN"
}
main "$@"
