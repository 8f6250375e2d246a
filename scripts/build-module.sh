#!/usr/bin/env bash
# Builds hv_storvsc.ko out of tree for a guest kernel, optionally patched.
#
#   scripts/build-module.sh [--kernel debian-6.1|debian-6.12] PATCH
#   scripts/build-module.sh --kernel PATH/bzImage --modules PATH/lib/modules/VERSION
#                           [--kdir DIR] [--source FILE] [--cc COMPILER] PATCH
#
#   PATCH   a patch file (unified diff against the kernel tree, as `git format-patch` or a
#           mailing-list mail writes it: a/drivers/scsi/storvsc_drv.c), the name of a file
#           in guest-patches/ (host-tagset or host-tagset.patch), or `none` for the stock
#           source rebuilt (proves the pipeline; behaves like the stock module). For a name,
#           guest-patches/NAME-<series>.patch (e.g. host-tagset-6.12.patch) is taken when it
#           exists for the kernel's series, else guest-patches/NAME.patch.
#
# Prints the module's path on the last line of stdout; progress goes to stderr. Beside the
# module: build-info (kernel=, version=, srcversion=, vermagic=, patch=, kdir=, source=,
# compiler=, ...), the patched storvsc_drv.c and the applied patch.
#
# Debian kernels (debian-6.1: bookworm; debian-6.12: trixie), everything at the exact
# version of the guest kernel (scripts/guest-assets.sh decides it and records KVER):
#   - drivers/scsi/storvsc_drv.c out of linux-source-<series> (the kernel's source with
#     Debian's patches applied);
#   - linux-headers-<KVER>, linux-headers-<ABI>-common and linux-kbuild, downloaded and
#     unpacked under the cache (never installed);
#   - gcc-12, bookworm's compiler (the only one this host runs).
# Debian built 6.12 for trixie with gcc-14 and glibc 2.41, which bookworm lacks. Two things
# are then redone from linux-source-6.12 (same version) with the host's gcc-12, once per
# kernel version (about a minute): (1) the kbuild programs the host cannot run (they need a
# newer glibc; for 6.12 modpost and objtool) are rebuilt (`make modules_prepare` on
# Debian's config) and replace them in the unpacked kbuild; (2) Kconfig's answers about the
# toolchain (symbols CC_*, GCC_*, AS_*, LD_*: e.g. -fmin-function-alignment, which gcc-12
# lacks, and asm goto with outputs, which gcc 12.2 miscompiles) are re-evaluated for gcc-12
# and replace Debian's in include/config/auto.conf and include/generated/autoconf.h (the
# originals stay beside them as *.debian). Any other difference the re-evaluation finds
# stops the build. This is what Debian itself does for bookworm's 6.12 (built by gcc-12).
# The vermagic (release, SMP, preempt, modversions) is unchanged by the compiler and is
# checked against the stock module's.
#
# Your own kernel: --kernel is its bzImage, --modules its lib/modules/<version> (as
# `make modules_install INSTALL_MOD_PATH=...` writes it, or a folder holding
# lib/modules/<version>). The module is built against KDIR, by default MODULES/build (the
# tree the kernel was built in: configured, with Module.symvers); --kdir names it (also an
# O= build folder, or headers). The source is KDIR/drivers/scsi/storvsc_drv.c (or
# KDIR/source/... for O= builds); --source FILE gives it (needed for headers, which carry
# no .c files). The compiler is the one named in the tree's CONFIG_CC_VERSION_TEXT when it
# is on this host (--cc overrides). The vermagic is checked against MODULES' hv_storvsc.
#
# Every build gets MODULE_VERSION("hvstor-<patch>-<hash>") when its source has none, so the
# guest can tell which build is loaded: /sys/module/hv_storvsc/version (and srcversion,
# which the stock module lacks). Module BTF is not generated (only BPF tools use it; the
# kernel loads modules without it).
#
# Only drivers/scsi/storvsc_drv.c can be patched: the module is built alone, against
# headers, so a patch that touches anything else is refused.
#
# Cache: Debian kernels $HVSTOR_CACHE/kmod/<KVER>/<patch>-<key>/, key = hash of (package
# version, patch content, this script); own kernels $HVSTOR_CACHE/kmod/custom/<KVER>-<id>/,
# id = hash of (KDIR path, its config, Module.symvers and release, the source, the compiler).
# HVSTOR_KMOD_REBUILD=1 forces a rebuild.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"


KSPEC=debian-6.1
PATCH_ARG='' MODULES_ARG='' KDIR_ARG='' SOURCE_ARG='' CC_ARG=''
need_val() { [ "$2" -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case $1 in
    --kernel)  need_val "$1" $#; KSPEC=$2; shift 2 ;;
    --modules) need_val "$1" $#; MODULES_ARG=$2; shift 2 ;;
    --kdir)    need_val "$1" $#; KDIR_ARG=$2; shift 2 ;;
    --source)  need_val "$1" $#; SOURCE_ARG=$2; shift 2 ;;
    --cc)      need_val "$1" $#; CC_ARG=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$PATCH_ARG" ] || die "one patch at a time (got '$PATCH_ARG' and '$1')"; PATCH_ARG=$1; shift ;;
  esac
done
[ -n "$PATCH_ARG" ] || usage
case $KSPEC in
  debian-6.1|debian-6.12)
    MODE=debian
    [ -z "$MODULES_ARG$KDIR_ARG$SOURCE_ARG$CC_ARG" ] ||
      die "--modules, --kdir, --source and --cc go with a kernel image path (--kernel path/to/bzImage), not $KSPEC" ;;
  debian-*) die "unknown kernel name $KSPEC (known: debian-6.1, debian-6.12, or a bzImage path with --modules)" ;;
  *)
    MODE=custom
    [ -n "$MODULES_ARG" ] ||
      die "--kernel $KSPEC needs --modules DIR: its lib/modules/<version> tree (the stock hv_storvsc there gives the vermagic to match)" ;;
esac

KMOD_ROOT=$HVSTOR_CACHE/kmod
mkdir -p "$KMOD_ROOT"
# Temporary folders, removed on exit.
CLEANUP=()
cleanup() { [ ${#CLEANUP[@]} -eq 0 ] || rm -rf "${CLEANUP[@]}"; }
trap cleanup EXIT

# --- tools -------------------------------------------------------------------------------
# Installs missing Debian packages (from the host's own release).
ensure_packages() {
  local p miss=()
  for p in "$@"; do
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
# gcc-12 builds the module; the unpacked linux-kbuild programs need libelf1 and libssl3.
ensure_tools() { ensure_packages gcc-12 make libelf1 libssl3 xz-utils kmod patch; }

# --- the kernel --------------------------------------------------------------------------
# Accepts lib/modules/<ver>, or a folder holding lib/modules/<ver> (an INSTALL_MOD_PATH).
find_mod_tree() {
  local d=$1 sub
  [ -d "$d" ] || die "--modules: no folder $d"
  if [ -f "$d/modules.dep" ] || [ -f "$d/modules.order" ]; then (cd "$d" && pwd); return; fi
  for sub in "$d"/lib/modules/*/ "$d"/usr/lib/modules/*/; do
    if [ -f "$sub/modules.dep" ] || [ -f "$sub/modules.order" ]; then (cd "$sub" && pwd); return; fi
  done
  die "--modules $d: not a lib/modules/<version> tree (no modules.dep or modules.order there or in lib/modules/*/)"
}

# The release string of an x86 boot image (the header's kernel_version field).
image_release() {
  local img=$1 off
  [ "$(dd if="$img" bs=1 skip=514 count=4 2>/dev/null)" = HdrS ] ||
    die "$img is not an x86 Linux boot image (bzImage/vmlinuz)"
  off=$(od -An -tu2 -j526 -N2 "$img" | tr -d ' ')
  [ -n "$off" ] && [ "$off" -gt 0 ] || return 0
  dd if="$img" bs=1 skip=$((off + 512)) count=200 2>/dev/null | tr '\0' '\n' | head -n 1 | cut -d' ' -f1
}

# Sets STOCK_KO: the stock hv_storvsc of module tree $1.
find_stock_ko() {
  STOCK_KO=$(find "$1" -name 'hv_storvsc.ko*' -not -path '*/updates/*' | head -n 1)
  [ -n "$STOCK_KO" ] || STOCK_KO=$(find "$1" -name 'hv_storvsc.ko*' | head -n 1)
  [ -n "$STOCK_KO" ] && return 0
  if grep -qs '/hv_storvsc\.ko' "$1/modules.builtin"; then
    die "hv_storvsc is built into this kernel ($1/modules.builtin): a module cannot replace it (build the kernel with CONFIG_HYPERV_STORAGE=m)"
  fi
  die "$1 has no hv_storvsc module (CONFIG_HYPERV_STORAGE=m is needed)"
}

KVER='' MODULES='' KIMG='' PKG_VERSION='' STOCK_KO=''
if [ "$MODE" = debian ]; then
  assets=$("$HVSTOR_ROOT/scripts/guest-assets.sh" "$KSPEC") || die "could not prepare the $KSPEC guest"
  eval "$(grep -E '^(KVER|MODULES|KERNEL)=' <<<"$assets")"
  KIMG=$KERNEL
  [ -n "$KVER" ] && [ -d "$MODULES" ] || die "guest-assets.sh gave no KVER/MODULES for $KSPEC"
  PKG_VERSION=$(cat "$HVSTOR_CACHE/guest/$KSPEC/package-version" 2>/dev/null) ||
    die "no package-version for $KSPEC under $HVSTOR_CACHE/guest (guest-assets.sh records it)"
else
  [ -f "$KSPEC" ] || die "--kernel: no file $KSPEC (a bzImage, or debian-6.1 / debian-6.12)"
  KIMG=$(realpath "$KSPEC")
  MODULES=$(find_mod_tree "$MODULES_ARG")
  KVER=$(basename "$MODULES")
  rel=$(image_release "$KIMG")
  [ -z "$rel" ] || [ "$rel" = "$KVER" ] ||
    die "the kernel image $KIMG is release $rel, but --modules is for $KVER"
fi
SERIES=$(grep -oE '^[0-9]+\.[0-9]+' <<<"$KVER") || die "cannot read a kernel series from '$KVER'"
find_stock_ko "$MODULES"

# --- the patch ---------------------------------------------------------------------------
PATCH_FILE='' PATCH_NAME=none
if [ "$PATCH_ARG" != none ]; then
  base=${PATCH_ARG%.patch}
  if [ -f "$PATCH_ARG" ]; then
    PATCH_FILE=$(realpath "$PATCH_ARG")
  elif [[ $PATCH_ARG != */* ]] && [ -f "$HVSTOR_ROOT/guest-patches/$base-$SERIES.patch" ]; then
    PATCH_FILE=$HVSTOR_ROOT/guest-patches/$base-$SERIES.patch
  elif [[ $PATCH_ARG != */* ]] && [ -f "$HVSTOR_ROOT/guest-patches/$base.patch" ]; then
    PATCH_FILE=$HVSTOR_ROOT/guest-patches/$base.patch
  elif [[ $PATCH_ARG != */* ]] && [ -f "$HVSTOR_ROOT/guest-patches/$PATCH_ARG" ]; then
    PATCH_FILE=$HVSTOR_ROOT/guest-patches/$PATCH_ARG
  else
    die "no patch '$PATCH_ARG' (a file, a name in guest-patches/: $(cd "$HVSTOR_ROOT/guest-patches" 2>/dev/null && ls ./*.patch 2>/dev/null | sed 's#^\./##; s/\.patch$//' | tr '\n' ' '), or none)"
  fi
  PATCH_NAME=$(basename "$PATCH_FILE"); PATCH_NAME=${PATCH_NAME%.patch}; PATCH_NAME=${PATCH_NAME%.diff}
  PATCH_NAME=$(printf '%s' "$PATCH_NAME" | tr -c 'A-Za-z0-9._-' _)
  grep -q '^+++ ' "$PATCH_FILE" || die "$PATCH_FILE holds no unified diff (no '+++ ' line)"
  # Every file the patch touches must be storvsc_drv.c (any -p level).
  bad=$(awk '/^\+\+\+ / { p = $2; sub(/\t.*/, "", p); if (p !~ /(^|\/)storvsc_drv\.c$/) print p }' "$PATCH_FILE" | sort -u)
  [ -z "$bad" ] || die "$PATCH_FILE touches files other than drivers/scsi/storvsc_drv.c (only that file is built out of tree): $(echo "$bad" | tr '\n' ' ')"
fi
PATCH_HASH=none
[ -z "$PATCH_FILE" ] || PATCH_HASH=$(sha256sum "$PATCH_FILE" | cut -c1-16)

# --- Debian: packages at the guest kernel's version --------------------------------------
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
      die "apt-get download $pkg=$PKG_VERSION failed: the guest kernel's version must still be in the archive (HVSTOR_GUEST_REFRESH=1 scripts/guest-assets.sh $KSPEC moves the guest to the current one)"
    fi
    deb=$(find "$dest" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)
  fi
  [ -n "$deb" ] || die "no .deb for $pkg in $dest"
  echo "$deb"
}

# The kbuild package: linux-kbuild-<ABI> (trixie: linux-kbuild-6.12.117+deb13), or
# linux-kbuild-<series> (bookworm: linux-kbuild-6.1).
kbuild_package() {
  local p
  for p in "linux-kbuild-$ABI" "linux-kbuild-$SERIES"; do
    if apt-cache show "$p=$PKG_VERSION" >/dev/null 2>&1; then echo "$p"; return; fi
  done
  die "neither linux-kbuild-$ABI nor linux-kbuild-$SERIES is in the archive at $PKG_VERSION"
}

# The linux-source .deb (downloaded once, into SRC_DEBS, removed at the end).
source_deb() { download "linux-source-$SERIES" "$SRC_DEBS"; }

# Programs of the unpacked kbuild the host's dynamic loader cannot run (newer glibc).
unrunnable_programs() {
  local f
  while IFS= read -r f; do
    if LC_ALL=C ldd "$f" 2>&1 | grep -q 'not found'; then echo "$f"; fi
  done < <(find "$1" -type f -perm -u+x | sort)
}

# Symbols whose values Kconfig learns from the toolchain.
TOOLCHAIN_SYMS='^CONFIG_(CC|GCC|AS|LD)_'
# Symbols that describe other tools of Debian's build machine (pahole, rustc): left as
# Debian set them (module BTF is skipped; there is no Rust here).
IGNORED_SYMS='^CONFIG_(PAHOLE_|DEBUG_INFO_BTF|MODULE_ALLOW_BTF_MISMATCH|PROBE_EVENTS_BTF_ARGS|RUSTC_|RUST_)'

# Names of the symbols that differ between two auto.conf files matching regex $3.
differing_syms() {
  { diff <(grep -E "$3" "$1" | sort) <(grep -E "$3" "$2" | sort) || true; } |
    sed -n 's/^[<>] \(CONFIG_[A-Za-z0-9_]*\)=.*/\1/p' | sort -u
}

# Rebuilds the unrunnable kbuild programs and re-evaluates the toolchain symbols for gcc-12,
# from the full linux-source tree (see the header). $1: kbuild folder, $2: "programs"
# and/or "config" (what is needed).
adapt_headers() {
  local kbuild=$1 need=$2 work tree hp f rel built syms other s deb
  ensure_packages flex bison bc libelf-dev libssl-dev
  work=$(mktemp -d "$KMOD_ROOT/$KVER/.adapt.XXXXXX")
  CLEANUP+=("$work")
  mkdir -p "$work/src" "$work/hp"
  deb=$(source_deb)
  # Configuring and modules_prepare read every Kconfig and Makefile but no driver, file
  # system, network or other architecture's code: those are left out (240 MB, not 1.7 GB).
  local -a skip=()
  local x
  for x in '*/Documentation/[!K]*' '*/drivers/*.[chS]' '*/sound/*.[ch]' '*/net/*.[ch]' '*/fs/*.[ch]' \
      '*/arch/[!x]*/*.[chS]' '*.dts' '*.dtsi' '*/LICENSES/*' '*/samples/*.[ch]' '*/rust/*.rs'; do
    skip+=("--exclude=$x")
  done
  run_logged "unpacking linux-source-$SERIES (for the host programs and gcc-12's config)" "$work/unpack.log" \
    bash -c 'set -o pipefail; dpkg-deb --fsys-tarfile "$1" | tar -xO --wildcards "./usr/src/linux-source-*.tar.xz" |
      tar -xJ -C "$2" "${@:3}"' _ "$deb" "$work/src" "${skip[@]}"
  tree=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  [ -f "$tree/Makefile" ] || die "linux-source-$SERIES holds no kernel tree"
  [ -f "$KDIR/.config" ] || die "linux-headers-$KVER has no .config"
  cp "$KDIR/.config" "$work/hp/.config"
  hp=$work/hp
  run_logged "configuring Debian's $KVER config for gcc-12" "$work/config.log" \
    make -C "$tree" O="$hp" CC=gcc-12 HOSTCC=gcc-12 KERNELRELEASE="$KVER" olddefconfig
  run_logged "building the kbuild host programs with gcc-12 (make modules_prepare)" "$work/prepare.log" \
    make -C "$tree" O="$hp" CC=gcc-12 HOSTCC=gcc-12 KERNELRELEASE="$KVER" -j"$(nproc)" modules_prepare
  : > "$HDR_ROOT/hvstor-adapted"
  if [[ $need == *programs* ]]; then
    while IFS= read -r f; do
      rel=${f#"$kbuild"/}
      # Debian's wrappers pick modpost.real-<endianness>-<bits> and objtool.real-<arch>;
      # x86-64 modules need the lsb-64 and x86 ones, the others stay as they are.
      case $rel in
        *.real-lsb-64|*.real-x86) built=$hp/${rel%.real-*} ;;
        *.real-*) continue ;;
        *) built=$hp/$rel ;;
      esac
      if [ -x "$built" ]; then
        cp "$f" "$f.debian"
        cp "$built" "$f"
        log "kbuild: $rel rebuilt with gcc-12"
        echo "programs=$rel" >> "$HDR_ROOT/hvstor-adapted"
      else
        log "kbuild: $rel does not run here and is not rebuilt (not used for this module without BTF)"
      fi
    done < <(unrunnable_programs "$kbuild")
  fi
  if [[ $need == *config* ]]; then
    local conf=$KDIR/include/config/auto.conf hdr=$KDIR/include/generated/autoconf.h
    local gconf=$hp/include/config/auto.conf ghdr=$hp/include/generated/autoconf.h
    [ -f "$gconf" ] && [ -f "$ghdr" ] || die "make modules_prepare left no auto.conf/autoconf.h"
    other=$(differing_syms "$conf" "$gconf" '^CONFIG_' | grep -Ev "$TOOLCHAIN_SYMS|$IGNORED_SYMS|^CONFIG_BUILD_SALT$" || true)
    if [ -n "$other" ]; then
      for s in $other; do grep -h "^$s=" "$conf" "$gconf" | sed 's/^/  /' >&2 || true; done
      die "with gcc-12, Debian's $KVER config changes in more than the toolchain: $(echo "$other" | tr '\n' ' ')(first line: Debian's, second: gcc-12's); the module would not match the kernel"
    fi
    syms=$(differing_syms "$conf" "$gconf" "$TOOLCHAIN_SYMS")
    cp "$conf" "$conf.debian"; cp "$hdr" "$hdr.debian"
    {
      grep -vE "^($(echo "$syms" | paste -sd'|'))=" "$conf.debian"
      grep -E "^($(echo "$syms" | paste -sd'|'))=" "$gconf" || true
    } > "$conf"
    {
      grep -vE "^#define ($(echo "$syms" | sed 's/$/(_MODULE)?/' | paste -sd'|')) " "$hdr.debian"
      grep -E "^#define ($(echo "$syms" | sed 's/$/(_MODULE)?/' | paste -sd'|')) " "$ghdr" || true
    } > "$hdr"
    log "config: toolchain symbols re-evaluated for gcc-12: $(echo "$syms" | sed 's/^CONFIG_//' | tr '\n' ' ')"
    echo "config=$(echo "$syms" | sed 's/^CONFIG_//' | paste -sd' ')" >> "$HDR_ROOT/hvstor-adapted"
  fi
}

HEADERS_FORMAT=hvstor-headers-2   # 2: kbuild programs and toolchain config adapted to the host
# Unpacks headers and kbuild into HDR_ROOT and makes them usable here; sets KDIR.
prepare_debian_headers() {
  ABI=${KVER%-*}                # 6.1.0-57, 6.12.117+deb13
  HDR_ROOT=$KMOD_ROOT/$KVER/headers-$PKG_VERSION
  KDIR=$HDR_ROOT/usr/src/linux-headers-$KVER
  # .done holds the preparation's format: a change to how headers are prepared redoes them.
  [ "$(cat "$HDR_ROOT/.done" 2>/dev/null)" != "$HEADERS_FORMAT" ] || return 0
  local p deb kbuild need='' gccv
  rm -rf "$HDR_ROOT" "$HDR_ROOT.debs"
  for p in "linux-headers-$KVER" "linux-headers-$ABI-common" "$(kbuild_package)"; do
    deb=$(download "$p" "$HDR_ROOT.debs")
    dpkg-deb -x "$deb" "$HDR_ROOT"
  done
  [ -f "$KDIR/Makefile" ] || die "linux-headers-$KVER has no Makefile"
  sed -i "s#^include /usr/src/#include $HDR_ROOT/usr/src/#" "$KDIR/Makefile"
  grep -q "^include $HDR_ROOT/" "$KDIR/Makefile" ||
    die "unexpected $KDIR/Makefile (no include of the common headers): $(head -c 200 "$KDIR/Makefile")"
  kbuild=$(find "$HDR_ROOT/usr/lib" -maxdepth 1 -type d -name 'linux-kbuild-*' | head -n 1)
  [ -n "$kbuild" ] || die "no linux-kbuild folder under $HDR_ROOT/usr/lib"
  [ -z "$(unrunnable_programs "$kbuild")" ] || need=programs
  gccv=$(gcc-12 -dumpfullversion | awk -F. '{ printf "%d%02d%02d", $1, $2, $3 }')
  [ "$(sed -n 's/^CONFIG_GCC_VERSION=//p' "$KDIR/include/config/auto.conf")" = "$gccv" ] || need="$need config"
  if [ -n "$need" ]; then
    log "Debian built $KVER with $(sed -n 's/^CONFIG_CC_VERSION_TEXT=//p' "$KDIR/include/config/auto.conf" | tr -d '"'); adapting its headers to this host (${need# })"
    adapt_headers "$kbuild" "$need"
  fi
  rm -rf "$HDR_ROOT.debs"
  echo "$HEADERS_FORMAT" > "$HDR_ROOT/.done"
}

# Extracts only drivers/scsi/storvsc_drv.c of linux-source-<series> into SRC_C.
extract_debian_source() {
  [ ! -s "$SRC_C" ] || return 0
  local deb
  deb=$(source_deb)
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
}

# --- own kernel: KDIR, source, compiler ----------------------------------------------------
check_custom_tree() {
  if [ -n "$KDIR_ARG" ]; then
    [ -d "$KDIR_ARG" ] || die "--kdir: no folder $KDIR_ARG"
    KDIR=$(cd "$KDIR_ARG" && pwd)
  else
    KDIR=$MODULES/build
    if [ ! -d "$KDIR" ]; then
      if [ -L "$KDIR" ]; then
        die "$KDIR links to $(readlink "$KDIR"), which does not exist here: give --kdir DIR (the tree the kernel was built in, or its headers)"
      fi
      die "$MODULES has no build link: give --kdir DIR (the tree the kernel was built in, or its headers)"
    fi
    KDIR=$(cd "$KDIR" && pwd -P)
  fi
  [ -f "$KDIR/Makefile" ] || die "$KDIR has no Makefile: not a kernel build tree (give --kdir the folder you ran make in, or its O= folder)"
  [ -f "$KDIR/include/config/auto.conf" ] && [ -f "$KDIR/include/generated/autoconf.h" ] ||
    die "$KDIR is not configured and prepared (no include/config/auto.conf or include/generated/autoconf.h): build the kernel there, or run make modules_prepare"
  [ -f "$KDIR/Module.symvers" ] ||
    die "$KDIR has no Module.symvers (the kernel's exported symbols and their versions): build the kernel there first (make modules_prepare is not enough)"
  local krel
  krel=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null || true)
  [ -z "$krel" ] || [ "$krel" = "$KVER" ] ||
    die "$KDIR is configured for release $krel, but the kernel and --modules are $KVER"
  grep -q '^CONFIG_MODULES=y' "$KDIR/include/config/auto.conf" || die "$KDIR is configured without module support (CONFIG_MODULES)"
  if [ -n "$SOURCE_ARG" ]; then
    [ -f "$SOURCE_ARG" ] || die "--source: no file $SOURCE_ARG"
    SRC_C=$(realpath "$SOURCE_ARG")
  elif [ -f "$KDIR/drivers/scsi/storvsc_drv.c" ]; then
    SRC_C=$KDIR/drivers/scsi/storvsc_drv.c
  elif [ -f "$KDIR/source/drivers/scsi/storvsc_drv.c" ]; then
    SRC_C=$(realpath "$KDIR/source/drivers/scsi/storvsc_drv.c")
  else
    die "no drivers/scsi/storvsc_drv.c in $KDIR (or $KDIR/source): give --source FILE (headers carry no .c files)"
  fi
  grep -q 'storvsc_probe' "$SRC_C" || die "$SRC_C is not storvsc_drv.c (no storvsc_probe)"
  local text
  text=$(sed -n 's/^CONFIG_CC_VERSION_TEXT=//p' "$KDIR/include/config/auto.conf" | tr -d '"')
  if [ -n "$CC_ARG" ]; then
    CC=$CC_ARG
  elif grep -q '^CONFIG_CC_IS_CLANG=y' "$KDIR/include/config/auto.conf"; then
    CC=clang      # its version text starts with the vendor ("Debian clang version 16...")
  else
    CC=${text%% *}
    [ -n "$CC" ] || die "$KDIR names no compiler (CONFIG_CC_VERSION_TEXT): give --cc"
  fi
  command -v "$CC" >/dev/null || die "the compiler $CC (the tree was built with: ${text:-unknown}) is not on this host: install it or give --cc"
  if grep -q '^CONFIG_CC_IS_CLANG=y' "$KDIR/include/config/auto.conf"; then MAKE_EXTRA+=(LLVM=1); fi
}

# --- where the build goes, and the cache ---------------------------------------------------
KDIR='' SRC_C='' CC=gcc-12 MAKE_EXTRA=()
if [ "$MODE" = debian ]; then
  SRC_C=$KMOD_ROOT/$KVER/src-$PKG_VERSION/storvsc_drv.c
  KEY=$( { echo "$PKG_VERSION"; echo "$PATCH_HASH"; sha256sum < "$0"; } | sha256sum | cut -c1-16)
  OUT_DIR=$KMOD_ROOT/$KVER/$PATCH_NAME-$KEY
else
  check_custom_tree
  tree_id=$( { echo "$KDIR"; echo "$KVER"; sha256sum "$KDIR/include/config/auto.conf" "$KDIR/Module.symvers" \
    "$KDIR/include/generated/utsrelease.h" "$SRC_C" 2>/dev/null | cut -d' ' -f1; "$CC" --version | head -n 1; } |
    sha256sum | cut -c1-12)
  KEY=$( { echo "$tree_id"; echo "$PATCH_HASH"; sha256sum < "$0"; } | sha256sum | cut -c1-16)
  OUT_DIR=$KMOD_ROOT/custom/$KVER-$tree_id/$PATCH_NAME-$KEY
fi
KO=$OUT_DIR/hv_storvsc.ko
if [ -s "$KO" ] && [ "${HVSTOR_KMOD_REBUILD:-0}" != 1 ]; then
  log "hv_storvsc ($PATCH_NAME) for $KVER: cached"
  echo "$KO"
  exit 0
fi

[ "$MODE" != debian ] || mkdir -p "$KMOD_ROOT/$KVER"
exec 8>"$KMOD_ROOT/.lock"
flock 8
ensure_tools
if [ "$MODE" = debian ]; then
  SRC_DEBS=$KMOD_ROOT/$KVER/src-$PKG_VERSION.debs
  CLEANUP+=("$SRC_DEBS")
  prepare_debian_headers
  extract_debian_source
fi

# --- patch and build ---------------------------------------------------------------------
BUILD=$(mktemp -d "$KMOD_ROOT/.build.XXXXXX")
CLEANUP+=("$BUILD")
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
    die "$PATCH_FILE does not apply to $SRC_C ($KVER; output above)"
  fi
  log "applied $(basename "$PATCH_FILE") (-p$applied)"
fi
MOD_DIR=$BUILD/tree/drivers/scsi
VERSION_TAG="hvstor-$PATCH_NAME-$PATCH_HASH"
if ! grep -q 'MODULE_VERSION(' "$MOD_DIR/storvsc_drv.c"; then
  printf '\nMODULE_VERSION("%s");\n' "$VERSION_TAG" >> "$MOD_DIR/storvsc_drv.c"
fi
printf 'obj-m := hv_storvsc.o\nhv_storvsc-y := storvsc_drv.o\n' > "$MOD_DIR/Kbuild"
CC_TEXT=$("$CC" --version | head -n 1)
log "building hv_storvsc ($PATCH_NAME) for $KVER with $CC against $KDIR"
# CONFIG_DEBUG_INFO_BTF_MODULES= on the command line skips module BTF (it needs the pahole
# the kernel was built with); the C side (struct module) keeps the kernel's config.
if ! make -C "$KDIR" M="$MOD_DIR" CC="$CC" "${MAKE_EXTRA[@]}" CONFIG_DEBUG_INFO_BTF_MODULES= \
    modules >"$BUILD/build.log" 2>&1; then
  grep -E 'error|warning' "$BUILD/build.log" | head -n 30 >&2 || true
  tail -n 20 "$BUILD/build.log" >&2
  cp "$BUILD/build.log" "$KMOD_ROOT/build-failed.log"
  die "building hv_storvsc with $PATCH_NAME failed (log: $KMOD_ROOT/build-failed.log)"
fi
grep -E 'warning:' "$BUILD/build.log" >&2 || true
[ -f "$MOD_DIR/hv_storvsc.ko" ] || die "the build left no hv_storvsc.ko"

want=$(modinfo -F vermagic "$STOCK_KO")
got=$(modinfo -F vermagic "$MOD_DIR/hv_storvsc.ko")
[ "$got" = "$want" ] || die "vermagic '$got' of the built module differs from the stock module's '$want' ($STOCK_KO): KDIR $KDIR is not the tree this kernel was built from"

mkdir -p "$(dirname "$OUT_DIR")"
rm -rf "$OUT_DIR.tmp"
mkdir -p "$OUT_DIR.tmp"
cp "$MOD_DIR/hv_storvsc.ko" "$OUT_DIR.tmp/"
cp "$MOD_DIR/storvsc_drv.c" "$OUT_DIR.tmp/storvsc_drv.c"
[ -z "$PATCH_FILE" ] || cp "$PATCH_FILE" "$OUT_DIR.tmp/applied.patch"
{
  echo "kernel=$KVER"
  echo "kernel-image=$KIMG"
  echo "modules=$MODULES"
  [ -z "$PKG_VERSION" ] || echo "package-version=$PKG_VERSION"
  echo "kdir=$KDIR"
  echo "source=$SRC_C"
  echo "compiler=$CC_TEXT"
  # What was redone for this host (see the header): adapted-programs=, adapted-config=.
  if [ "$MODE" = debian ] && [ -s "$HDR_ROOT/hvstor-adapted" ]; then
    for k in programs config; do
      v=$(sed -n "s/^$k=//p" "$HDR_ROOT/hvstor-adapted" | paste -sd' ')
      [ -z "$v" ] || echo "adapted-$k=$v"
    done
  fi
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
