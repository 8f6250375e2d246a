#!/usr/bin/env bash
# Builds hv_storvsc.ko out of tree for the debian-6.1 guest kernel, optionally patched.
#
#   scripts/build-module.sh [--kernel debian-6.1] PATCH
#
#   PATCH   a patch file (unified diff against the kernel tree, as `git format-patch` or a
#           mailing-list mail writes it: a/drivers/scsi/storvsc_drv.c), the name of a file
#           in guest-patches/ (host-tagset or host-tagset.patch), or `none` for the stock
#           source rebuilt (proves the pipeline; behaves like the stock module).
#
# Prints the module's path on the last line of stdout; progress goes to stderr.
#
# What it uses, all from Debian bookworm and at the exact version of the guest kernel
# (scripts/guest-assets.sh debian-6.1 decides it and records KVER):
#   - drivers/scsi/storvsc_drv.c out of linux-source-6.1 (the kernel's source with Debian's
#     patches applied); only that file is extracted;
#   - linux-headers-<KVER>, linux-headers-<ABI>-common and linux-kbuild-6.1, downloaded and
#     unpacked under the cache (never installed: installing them would also upgrade the
#     host's linux-libc-dev);
#   - gcc-12, the compiler Debian built the 6.1 kernel with.
# The module gets MODULE_VERSION("hvstor-<patch>-<hash>") when its source has none, so the
# guest can tell which build is loaded: /sys/module/hv_storvsc/version (and srcversion,
# which the stock module lacks). The vermagic is checked against the stock module's.
#
# Only drivers/scsi/storvsc_drv.c can be patched: the module is built alone, against
# headers, so a patch that touches anything else is refused.
#
# Cache: $HVSTOR_CACHE/kmod/<KVER>/<key>/hv_storvsc.ko, key = hash of (package version,
# patch content, this script). HVSTOR_KMOD_REBUILD=1 forces a rebuild.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"


KSPEC=debian-6.1
PATCH_ARG=
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) [ $# -ge 2 ] || die "--kernel needs a value"; KSPEC=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$PATCH_ARG" ] || die "one patch at a time (got '$PATCH_ARG' and '$1')"; PATCH_ARG=$1; shift ;;
  esac
done
[ -n "$PATCH_ARG" ] || usage
case $KSPEC in
  debian-6.1) ;;
  *) die "modules are built against Debian bookworm's 6.1 headers only (--kernel debian-6.1), not '$KSPEC'" ;;
esac

KMOD_ROOT=$HVSTOR_CACHE/kmod
mkdir -p "$KMOD_ROOT"

# --- the patch ---------------------------------------------------------------------------
PATCH_FILE='' PATCH_NAME=none
if [ "$PATCH_ARG" != none ]; then
  if [ -f "$PATCH_ARG" ]; then
    PATCH_FILE=$(realpath "$PATCH_ARG")
  elif [ -f "$HVSTOR_ROOT/guest-patches/$PATCH_ARG" ]; then
    PATCH_FILE=$HVSTOR_ROOT/guest-patches/$PATCH_ARG
  elif [ -f "$HVSTOR_ROOT/guest-patches/$PATCH_ARG.patch" ]; then
    PATCH_FILE=$HVSTOR_ROOT/guest-patches/$PATCH_ARG.patch
  else
    die "no patch '$PATCH_ARG' (a file, a name in guest-patches/: $(cd "$HVSTOR_ROOT/guest-patches" 2>/dev/null && ls ./*.patch 2>/dev/null | sed 's#^\./##; s/\.patch$//' | tr '\n' ' '), or none)"
  fi
  PATCH_NAME=$(basename "$PATCH_FILE"); PATCH_NAME=${PATCH_NAME%.patch}; PATCH_NAME=${PATCH_NAME%.diff}
  PATCH_NAME=$(printf '%s' "$PATCH_NAME" | tr -c 'A-Za-z0-9._-' _)
  # Every file the patch touches must be storvsc_drv.c (any -p level).
  bad=$(awk '/^\+\+\+ / { p = $2; sub(/\t.*/, "", p); if (p !~ /(^|\/)storvsc_drv\.c$/) print p }' "$PATCH_FILE" | sort -u)
  [ -z "$bad" ] || die "$PATCH_FILE touches files other than drivers/scsi/storvsc_drv.c (only that file is built out of tree): $(echo "$bad" | tr '\n' ' ')"
  grep -q '^+++ ' "$PATCH_FILE" || die "$PATCH_FILE holds no unified diff (no '+++ ' line)"
fi

# --- tools -------------------------------------------------------------------------------
ensure_tools() {
  local p miss=()
  # gcc-12 builds the module; the unpacked linux-kbuild programs need libelf1 and libssl3.
  for p in gcc-12 make libelf1 libssl3 xz-utils kmod patch; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || miss+=("$p")
  done
  [ ${#miss[@]} -gt 0 ] || return 0
  need_root
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends "${miss[@]}" >"$KMOD_ROOT/apt-install.log" 2>&1; then
    run_logged "apt-get update" "$KMOD_ROOT/apt-update.log" apt-get update
    run_logged "installing ${miss[*]}" "$KMOD_ROOT/apt-install.log" \
      apt-get install -y --no-install-recommends "${miss[@]}"
  fi
}

# --- the guest kernel --------------------------------------------------------------------
assets=$("$HVSTOR_ROOT/scripts/guest-assets.sh" "$KSPEC") || die "could not prepare the $KSPEC guest"
KVER='' MODULES=''
eval "$(grep -E '^(KVER|MODULES)=' <<<"$assets")"
[ -n "$KVER" ] && [ -d "$MODULES" ] || die "guest-assets.sh gave no KVER/MODULES for $KSPEC"
PKG_VERSION=$(cat "$HVSTOR_CACHE/guest/$KSPEC/package-version" 2>/dev/null) ||
  die "no package-version for $KSPEC under $HVSTOR_CACHE/guest (guest-assets.sh records it)"
SERIES=${KVER%%-*}            # 6.1.0
SERIES=${SERIES%.*}           # 6.1
ABI=${KVER%-*}                # 6.1.0-57
STOCK_KO=$(find "$MODULES" -name 'hv_storvsc.ko*' | head -n 1)
[ -n "$STOCK_KO" ] || die "the $KSPEC module tree has no hv_storvsc"

PATCH_HASH=none
[ -z "$PATCH_FILE" ] || PATCH_HASH=$(sha256sum "$PATCH_FILE" | cut -c1-16)
KEY=$( { echo "$PKG_VERSION"; echo "$PATCH_HASH"; sha256sum < "$0"; } | sha256sum | cut -c1-16)
OUT_DIR=$KMOD_ROOT/$KVER/$PATCH_NAME-$KEY
KO=$OUT_DIR/hv_storvsc.ko
if [ -s "$KO" ] && [ "${HVSTOR_KMOD_REBUILD:-0}" != 1 ]; then
  log "hv_storvsc ($PATCH_NAME) for $KVER: cached"
  echo "$KO"
  exit 0
fi

exec 8>"$KMOD_ROOT/.lock"
flock 8
ensure_tools

# Downloads package=version into $2 (unless there); prints the .deb path.
download() {
  local pkg=$1 dest=$2 deb
  mkdir -p "$dest"
  deb=$(find "$dest" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)
  if [ -z "$deb" ]; then
    log "downloading $pkg=$PKG_VERSION"
    local -a o=()
    [ "$(id -u)" != 0 ] || o=(-o APT::Sandbox::User=root)
    if ! (cd "$dest" && apt-get -q "${o[@]}" download "$pkg=$PKG_VERSION" >"$KMOD_ROOT/download.log" 2>&1); then
      tail -n 5 "$KMOD_ROOT/download.log" >&2
      die "apt-get download $pkg=$PKG_VERSION failed: the guest kernel's version must still be in the archive (HVSTOR_GUEST_REFRESH=1 scripts/guest-assets.sh debian-6.1 moves the guest to the current one)"
    fi
    deb=$(find "$dest" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)
  fi
  [ -n "$deb" ] || die "no .deb for $pkg in $dest"
  echo "$deb"
}

# --- headers: unpacked, with the one absolute include made relative to the unpacked tree --
HDR_ROOT=$KMOD_ROOT/$KVER/headers-$PKG_VERSION
KDIR=$HDR_ROOT/usr/src/linux-headers-$KVER
if [ ! -f "$HDR_ROOT/.done" ]; then
  rm -rf "$HDR_ROOT" "$HDR_ROOT.debs"
  for p in "linux-headers-$KVER" "linux-headers-$ABI-common" "linux-kbuild-$SERIES"; do
    deb=$(download "$p" "$HDR_ROOT.debs")
    dpkg-deb -x "$deb" "$HDR_ROOT"
  done
  [ -f "$KDIR/Makefile" ] || die "linux-headers-$KVER has no Makefile"
  sed -i "s#^include /usr/src/#include $HDR_ROOT/usr/src/#" "$KDIR/Makefile"
  grep -q "^include $HDR_ROOT/" "$KDIR/Makefile" ||
    die "unexpected $KDIR/Makefile (no include of the common headers): $(head -c 200 "$KDIR/Makefile")"
  rm -rf "$HDR_ROOT.debs"
  touch "$HDR_ROOT/.done"
fi

# --- source: only drivers/scsi/storvsc_drv.c of linux-source-<series> ---------------------
SRC_C=$KMOD_ROOT/$KVER/src-$PKG_VERSION/storvsc_drv.c
if [ ! -s "$SRC_C" ]; then
  tmp=$KMOD_ROOT/$KVER/src-$PKG_VERSION.debs
  deb=$(download "linux-source-$SERIES" "$tmp")
  log "extracting drivers/scsi/storvsc_drv.c from $(basename "$deb")"
  mkdir -p "$(dirname "$SRC_C")"
  # tar stops at the first match (--occurrence); the producers then see a broken pipe.
  set +o pipefail
  dpkg-deb --fsys-tarfile "$deb" 2>/dev/null |
    tar -xO --wildcards './usr/src/linux-source-*.tar.xz' 2>/dev/null |
    tar -xJO --occurrence=1 --wildcards '*/drivers/scsi/storvsc_drv.c' > "$SRC_C.tmp" 2>/dev/null
  set -o pipefail
  grep -q 'storvsc_probe' "$SRC_C.tmp" 2>/dev/null ||
    { rm -f "$SRC_C.tmp"; die "could not extract drivers/scsi/storvsc_drv.c from $deb"; }
  mv "$SRC_C.tmp" "$SRC_C"
  rm -rf "$tmp"
fi

# --- patch and build ---------------------------------------------------------------------
BUILD=$(mktemp -d "$KMOD_ROOT/.build.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
mkdir -p "$BUILD/tree/drivers/scsi"
cp "$SRC_C" "$BUILD/tree/drivers/scsi/storvsc_drv.c"
if [ -n "$PATCH_FILE" ]; then
  applied=
  for p in 1 0 2 3 4; do
    if (cd "$BUILD/tree" && patch -p"$p" --dry-run --batch --forward -s < "$PATCH_FILE" >/dev/null 2>&1); then
      (cd "$BUILD/tree" && patch -p"$p" --batch --forward -s < "$PATCH_FILE" >&2) ||
        die "applying $PATCH_FILE failed"
      applied=$p; break
    fi
  done
  if [ -z "$applied" ]; then
    (cd "$BUILD/tree" && patch -p1 --dry-run --batch --forward < "$PATCH_FILE" >&2) || true
    die "$PATCH_FILE does not apply to drivers/scsi/storvsc_drv.c of Debian's linux $PKG_VERSION (output above)"
  fi
  log "applied $(basename "$PATCH_FILE") (-p$applied)"
fi
MOD_DIR=$BUILD/tree/drivers/scsi
VERSION_TAG="hvstor-$PATCH_NAME-$PATCH_HASH"
if ! grep -q 'MODULE_VERSION(' "$MOD_DIR/storvsc_drv.c"; then
  printf '\nMODULE_VERSION("%s");\n' "$VERSION_TAG" >> "$MOD_DIR/storvsc_drv.c"
fi
printf 'obj-m := hv_storvsc.o\nhv_storvsc-y := storvsc_drv.o\n' > "$MOD_DIR/Kbuild"
log "building hv_storvsc ($PATCH_NAME) for $KVER with gcc-12"
if ! make -C "$KDIR" M="$MOD_DIR" CC=gcc-12 modules >"$BUILD/build.log" 2>&1; then
  grep -E 'error|warning' "$BUILD/build.log" | head -n 30 >&2 || true
  tail -n 20 "$BUILD/build.log" >&2
  cp "$BUILD/build.log" "$KMOD_ROOT/build-failed.log"
  die "building hv_storvsc with $PATCH_NAME failed (log: $KMOD_ROOT/build-failed.log)"
fi
grep -E 'warning:' "$BUILD/build.log" >&2 || true
[ -f "$MOD_DIR/hv_storvsc.ko" ] || die "the build left no hv_storvsc.ko"

want=$(modinfo -F vermagic "$STOCK_KO")
got=$(modinfo -F vermagic "$MOD_DIR/hv_storvsc.ko")
[ "$got" = "$want" ] || die "vermagic '$got' of the built module differs from the stock module's '$want'"

mkdir -p "$OUT_DIR.tmp"
cp "$MOD_DIR/hv_storvsc.ko" "$OUT_DIR.tmp/"
cp "$MOD_DIR/storvsc_drv.c" "$OUT_DIR.tmp/storvsc_drv.c"
[ -z "$PATCH_FILE" ] || cp "$PATCH_FILE" "$OUT_DIR.tmp/applied.patch"
{
  echo "kernel=$KVER"
  echo "package-version=$PKG_VERSION"
  echo "patch=${PATCH_FILE:-none}"
  echo "patch-sha256=$PATCH_HASH"
  echo "version=$(modinfo -F version "$MOD_DIR/hv_storvsc.ko")"
  echo "srcversion=$(modinfo -F srcversion "$MOD_DIR/hv_storvsc.ko")"
  echo "vermagic=$got"
} > "$OUT_DIR.tmp/build-info"
rm -rf "$OUT_DIR"
mv "$OUT_DIR.tmp" "$OUT_DIR"
log "hv_storvsc ($PATCH_NAME): $(modinfo -F version "$KO"), vermagic $got"
echo "$KO"
