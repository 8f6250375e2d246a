#!/usr/bin/env bash
# Builds hv_storvsc.ko out of tree for a guest kernel, optionally patched.
#
#   scripts/build-module.sh [--kernel debian-6.12|debian-6.1] PATCH
#   scripts/build-module.sh --kernel PATH/bzImage --modules PATH/lib/modules/VERSION
#                           [--kdir DIR] [--source FILE] [--cc COMPILER] PATCH
#   scripts/build-module.sh [--kernel K] [--modules D] [--kdir D] [--source F] --source-only DIR
#
# Without --kernel: the project's default guest kernel (scripts/default-kernel).
#
#   PATCH   a patch file (unified diff against the kernel tree, as `git format-patch` or a
#           mailing-list mail writes it: a/drivers/scsi/storvsc_drv.c), the name of a file
#           in guest-patches/ (host-tagset or host-tagset.patch), or `none` for the stock
#           source rebuilt (proves the pipeline; behaves like the stock module). For a name,
#           guest-patches/NAME-<series>.patch (e.g. host-tagset-6.12.patch) is taken when it
#           exists for the kernel's series, else guest-patches/NAME.patch. A diff of the
#           file alone (`diff -u storvsc_drv.c.orig storvsc_drv.c`) applies too.
#
# Prints the module's path on the last line of stdout; progress goes to stderr. Beside the
# module: build-info (kernel=, version=, srcversion=, vermagic=, patch=, kdir=, source=,
# compiler=, ...), the patched storvsc_drv.c and the applied patch. A build that fails
# prints the command that starts it over (HVSTOR_KMOD_REBUILD=1, below).
#
# --source-only DIR builds nothing: it writes DIR/storvsc_drv.c, exactly the file a build
# for that kernel patches (the source= of its build-info), and DIR/source-info, which names
# where it came from (for Debian kernels the linux-source package and its version), then
# prints the file's path. DIR is created when missing; an existing file that is not a folder,
# or a DIR/storvsc_drv.c that differs from the source (your edits), is refused.
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
# kernel version (1.5-2 minutes): (1) the kbuild programs the host cannot run (they need a
# newer glibc; for 6.12 modpost and objtool) are rebuilt (`make modules_prepare` on
# Debian's config) and replace them in the unpacked kbuild; (2) Kconfig's answers about the
# toolchain (symbols CC_*, GCC_*, AS_*, LD_*: e.g. -fmin-function-alignment, which gcc-12
# lacks, and asm goto with outputs, which gcc 12.2 miscompiles) are re-evaluated for gcc-12
# and replace Debian's in include/config/auto.conf and include/generated/autoconf.h (the
# originals stay beside them as *.debian). Any other difference the re-evaluation finds
# stops the build. This is what Debian itself does for bookworm's 6.12 (built by gcc-12).
# The vermagic (release, SMP, preempt, modversions) is unchanged by the compiler and is
# checked against the stock module's.
# Whether a kbuild program runs here is found by running it (no arguments, stdin empty):
# one the loader cannot start (a glibc version or library missing, no loader, a wrong
# executable format) does not run; one that starts and complains about its arguments does.
# Every host program the module build may run (fixdep, modpost, objtool and their real-*
# binaries for x86-64, genksyms, ...; not resolve_btfids, which only module BTF needs) must
# run before the headers are marked ready (.done); else the adaptation starts over once,
# then the build stops. Headers marked ready are checked the same way before each build,
# and redone when a program there does not run.
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
# HVSTOR_KMOD_REBUILD=1 starts over: for a Debian kernel the headers and the source are
# fetched, unpacked and adapted again, then the module is built (also with --source-only:
# the source is extracted again). One build or --source-only at a time per cache
# ($HVSTOR_CACHE/kmod/.lock); others wait.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"


KSPEC=$HVSTOR_DEFAULT_KERNEL
PATCH_ARG='' MODULES_ARG='' KDIR_ARG='' SOURCE_ARG='' CC_ARG='' SOURCE_ONLY=''
# The command as given, for the line a failed build prints to start it over.
ORIG_ARGS=("$@")
need_val() { [ "$2" -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case $1 in
    --kernel)  need_val "$1" $#; KSPEC=$2; shift 2 ;;
    --modules) need_val "$1" $#; MODULES_ARG=$2; shift 2 ;;
    --kdir)    need_val "$1" $#; KDIR_ARG=$2; shift 2 ;;
    --source)  need_val "$1" $#; SOURCE_ARG=$2; shift 2 ;;
    --cc)      need_val "$1" $#; CC_ARG=$2; shift 2 ;;
    --source-only) need_val "$1" $#; SOURCE_ONLY=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$PATCH_ARG" ] || die "one patch at a time (got '$PATCH_ARG' and '$1')"; PATCH_ARG=$1; shift ;;
  esac
done
[ -n "$KSPEC" ] || die "no --kernel given and no default in $HVSTOR_ROOT/scripts/default-kernel"
if [ -n "$SOURCE_ONLY" ]; then
  [ -z "$PATCH_ARG" ] || die "--source-only writes the source to patch and builds nothing: no patch with it (got '$PATCH_ARG')"
  [ ! -e "$SOURCE_ONLY" ] || [ -d "$SOURCE_ONLY" ] ||
    die "--source-only $SOURCE_ONLY: exists and is not a folder (give a folder to write storvsc_drv.c into, or a path to create)"
else
  [ -n "$PATCH_ARG" ] || usage
fi
case $KSPEC in
  debian-6.1|debian-6.12)
    MODE=debian
    [ -z "$MODULES_ARG$KDIR_ARG$SOURCE_ARG$CC_ARG" ] ||
      die "--modules, --kdir, --source and --cc go with a kernel image path (--kernel path/to/bzImage), not $KSPEC" ;;
  debian-*) die "unknown kernel name $KSPEC (known: debian-6.1, debian-6.12, or a bzImage path with --modules)" ;;
  *)
    MODE=custom
    # The source alone comes from --source, --kdir or MODULES/build: --modules is needed
    # only for the last.
    if [ -n "$SOURCE_ONLY" ]; then
      [ -n "$MODULES_ARG$SOURCE_ARG$KDIR_ARG" ] ||
        die "--kernel $KSPEC --source-only needs --source FILE, --kdir DIR or --modules DIR (whose build link names the tree)"
    else
      [ -n "$MODULES_ARG" ] ||
        die "--kernel $KSPEC needs --modules DIR: its lib/modules/<version> tree (the stock hv_storvsc there gives the vermagic to match)"
    fi ;;
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
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = 'install ok installed' ] || miss+=("$p")
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
  dd if="$img" bs=1 skip=$((off + 512)) count=200 2>/dev/null | tr '\0' '\n' | sed -n 1p | cut -d' ' -f1
}

# Sets STOCK_KO: the stock hv_storvsc of module tree $1.
find_stock_ko() {
  STOCK_KO=$(find "$1" -name 'hv_storvsc.ko*' -not -path '*/updates/*' | sed -n 1p)
  [ -n "$STOCK_KO" ] || STOCK_KO=$(find "$1" -name 'hv_storvsc.ko*' | sed -n 1p)
  [ -n "$STOCK_KO" ] && return 0
  if grep -qs '/hv_storvsc\.ko' "$1/modules.builtin"; then
    die "hv_storvsc is built into this kernel ($1/modules.builtin): a module cannot replace it (build the kernel with CONFIG_HYPERV_STORAGE=m)"
  fi
  die "$1 has no hv_storvsc module (CONFIG_HYPERV_STORAGE=m is needed)"
}

KVER='' MODULES='' KIMG='' PKG_VERSION='' STOCK_KO='' SERIES=''
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
  if [ -n "$MODULES_ARG" ]; then
    MODULES=$(find_mod_tree "$MODULES_ARG")
    KVER=$(basename "$MODULES")
    rel=$(image_release "$KIMG")
    [ -z "$rel" ] || [ "$rel" = "$KVER" ] ||
      die "the kernel image $KIMG is release $rel, but --modules is for $KVER"
  fi
fi
if [ -n "$KVER" ]; then
  SERIES=$(grep -oE '^[0-9]+\.[0-9]+' <<<"$KVER") || die "cannot read a kernel series from '$KVER'"
fi
[ -n "$SOURCE_ONLY" ] || find_stock_ko "$MODULES"

# --- the patch ---------------------------------------------------------------------------
PATCH_FILE='' PATCH_NAME=none
if [ -n "$PATCH_ARG" ] && [ "$PATCH_ARG" != none ]; then
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
  deb=$(find "$dest" -maxdepth 1 -name "${pkg}_*.deb" | sed -n 1p)
  if [ -z "$deb" ]; then
    log "downloading $pkg=$PKG_VERSION"
    local -a o=()
    [ "$(id -u)" != 0 ] || o=(-o APT::Sandbox::User=root)
    if ! (cd "$dest" && apt-get -q "${o[@]}" download "$pkg=$PKG_VERSION" >"$KMOD_ROOT/download.log" 2>&1); then
      tail -n 5 "$KMOD_ROOT/download.log" >&2
      die "apt-get download $pkg=$PKG_VERSION failed: the guest kernel's version must still be in the archive (HVSTOR_GUEST_REFRESH=1 scripts/guest-assets.sh $KSPEC moves the guest to the current one)"
    fi
    deb=$(find "$dest" -maxdepth 1 -name "${pkg}_*.deb" | sed -n 1p)
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

# --- which kbuild programs run here --------------------------------------------------------
# Whether a program runs on this host is found by running it, not by asking ldd: ldd piped
# into `grep -q` under pipefail reports a program as fine whenever grep, done at the first
# match, exits before ldd has written its other lines (ldd then fails on the closed pipe,
# and that failure is the pipeline's status). On a busy machine that happens often: the
# adaptation then skipped programs it should have rebuilt (objtool.real-x86) and marked the
# headers ready.

# The host programs under kbuild folder $1 that building a module may run, one a line: every
# ELF executable, less Debian's modpost and objtool for other targets (x86-64 modules need
# modpost.real-lsb-64 and objtool.real-x86), resolve_btfids (module BTF only, which is not
# generated) and the originals kept as *.debian. Scripts are left out: their interpreters
# are the host's own.
kbuild_programs() {
  local f magic
  while IFS= read -r f; do
    case ${f#"$1"/} in
      *.debian|*/resolve_btfids) continue ;;
      *.real-lsb-64|*.real-x86) ;;
      *.real-*) continue ;;
    esac
    magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
    if [ "$magic" = 7f454c46 ]; then echo "$f"; fi
  done < <(find "$1" -type f -perm -u+x | sort)
}

# Runs program $1 with no arguments, stdin empty, in a scratch folder (SRCARCH=x86: Debian's
# objtool wrapper then starts objtool.real-x86). Returns 0 when it ran, whatever it said about
# its arguments; else prints why it could not run (one line) and returns 1: the loader found
# no glibc version or library it needs, there is no loader or interpreter, or the file is no
# executable for this machine.
program_runs() {
  local prog=$1 out rc=0
  [[ $prog == /* ]] || prog=$PWD/$prog
  out=$(cd "$RUNCHECK_DIR" && SRCARCH=x86 LC_ALL=C "$prog" </dev/null 2>&1) || rc=$?
  if grep -qE "version \`[^']+' not found|error while loading shared libraries|cannot execute|[Ee]xec format error|required file not found|bad ELF interpreter" <<<"$out" ||
     [ "$rc" = 126 ] || [ "$rc" = 127 ]; then
    out=$(grep -m 1 . <<<"$out" || true)
    printf 'exit status %s: %s\n' "$rc" "${out//"$prog"/${prog##*/}}"
    return 1
  fi
  return 0
}

# Prints "PATH<TAB>why" for each program of kbuild folder $1 (kbuild_programs) that does not
# run here. Dies when the folder holds no fixdep or modpost: not a kbuild tree. RUNCHECK_DIR
# must exist (new_runcheck_dir).
unrunnable_programs() {
  local f why progs
  progs=$(kbuild_programs "$1")
  grep -q '/scripts/basic/fixdep$' <<<"$progs" && grep -q '/scripts/mod/modpost' <<<"$progs" ||
    die "$1 holds no scripts/basic/fixdep or scripts/mod/modpost: not an unpacked linux-kbuild"
  while IFS= read -r f; do
    if ! why=$(program_runs "$f"); then printf '%s\t%s\n' "$f" "$why"; fi
  done <<<"$progs"
}
RUNCHECK_DIR=''
new_runcheck_dir() {
  [ -z "$RUNCHECK_DIR" ] || return 0
  RUNCHECK_DIR=$(mktemp -d "$KMOD_ROOT/.runcheck.XXXXXX")
  CLEANUP+=("$RUNCHECK_DIR")
}

# The unpacked linux-kbuild folder of HDR_ROOT (empty when there is none).
kbuild_dir() { find "$HDR_ROOT/usr/lib" -maxdepth 1 -type d -name 'linux-kbuild-*' -print -quit 2>/dev/null || true; }

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
# and/or "config" (what is needed), $3: the programs that do not run (unrunnable_programs).
adapt_headers() {
  local kbuild=$1 need=$2 work tree hp deb
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
  tree=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d -print -quit)
  [ -f "$tree/Makefile" ] || die "linux-source-$SERIES holds no kernel tree"
  [ -f "$KDIR/.config" ] || die "linux-headers-$KVER has no .config"
  cp "$KDIR/.config" "$work/hp/.config"
  hp=$work/hp
  run_logged "configuring Debian's $KVER config for gcc-12" "$work/config.log" \
    make -C "$tree" O="$hp" CC=gcc-12 HOSTCC=gcc-12 KERNELRELEASE="$KVER" olddefconfig
  run_logged "building the kbuild host programs with gcc-12 (make modules_prepare)" "$work/prepare.log" \
    make -C "$tree" O="$hp" CC=gcc-12 HOSTCC=gcc-12 KERNELRELEASE="$KVER" -j"$(nproc)" modules_prepare
  : > "$HDR_ROOT/hvstor-adapted"
  if [[ $need == *programs* ]]; then replace_programs "$kbuild" "$3" "$hp"; fi
  if [[ $need == *config* ]]; then adapt_config "$hp"; fi
}

# Replaces each program listed in $2 (unrunnable_programs' lines) under kbuild folder $1 by
# its build in $3 (make modules_prepare's output folder). Debian's wrappers (modpost and
# objtool, which start NAME.real-*) stay: they run once what they start runs. One that was
# not built stays as it is, and the check after the adaptation names it.
replace_programs() {
  local kbuild=$1 hp=$3 f rel built
  while IFS=$'\t' read -r f _; do
    [ -n "$f" ] || continue
    if compgen -G "$f.real-*" >/dev/null; then continue; fi
    rel=${f#"$kbuild"/}
    # Debian's wrappers pick modpost.real-<endianness>-<bits> and objtool.real-<arch>;
    # x86-64 modules need the lsb-64 and x86 ones (kbuild_programs lists no others).
    case $rel in
      *.real-lsb-64|*.real-x86) built=$hp/${rel%.real-*} ;;
      *) built=$hp/$rel ;;
    esac
    if [ -x "$built" ]; then
      cp "$f" "$f.debian"
      cp "$built" "$f"
      log "kbuild: $rel rebuilt with gcc-12"
      echo "programs=$rel" >> "$HDR_ROOT/hvstor-adapted"
    else
      log "kbuild: $rel does not run here, and make modules_prepare did not build it"
    fi
  done <<<"$2"
}

# Puts the toolchain symbols of gcc-12's configuration (in $1, make modules_prepare's output
# folder) in place of Debian's in the headers' auto.conf and autoconf.h.
adapt_config() {
  local hp=$1 syms other s
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
}

# Logs unrunnable_programs' lines ($1), paths relative to HDR_ROOT.
log_unrunnable() {
  local f why
  while IFS=$'\t' read -r f why; do
    [ -z "$f" ] || log "  ${f#"$HDR_ROOT"/}: $why"
  done <<<"$1"
}

HEADERS_FORMAT=hvstor-headers-2   # 2: kbuild programs and toolchain config adapted to the host
# Sets ABI, HDR_ROOT and KDIR, and makes the headers usable here: unpacked and adapted once
# (unpack_headers), with every kbuild program the build runs checked to run before .done
# marks them ready, and checked again before each build (see the header).
prepare_debian_headers() {
  ABI=${KVER%-*}                # 6.1.0-57, 6.12.117+deb13
  HDR_ROOT=$KMOD_ROOT/$KVER/headers-$PKG_VERSION
  KDIR=$HDR_ROOT/usr/src/linux-headers-$KVER
  new_runcheck_dir
  local kbuild bad attempt
  # .done holds the preparation's format: a change to how headers are prepared redoes them.
  if [ "$(cat "$HDR_ROOT/.done" 2>/dev/null)" = "$HEADERS_FORMAT" ]; then
    kbuild=$(kbuild_dir)
    if [ "${HVSTOR_KMOD_REBUILD:-0}" = 1 ]; then
      log "HVSTOR_KMOD_REBUILD=1: the $KVER headers are fetched and prepared again"
    elif [ -z "$kbuild" ]; then
      log "the $KVER headers in $HDR_ROOT have no linux-kbuild folder: fetching and preparing them again"
    else
      bad=$(unrunnable_programs "$kbuild")
      [ -n "$bad" ] || return 0
      log "kbuild programs of the $KVER headers in $HDR_ROOT do not run on this host; fetching and adapting the headers again:"
      log_unrunnable "$bad"
    fi
  fi
  for attempt in 1 2; do
    unpack_headers
    if [ -z "$HDR_BAD" ]; then
      rm -rf "$HDR_ROOT.debs"
      echo "$HEADERS_FORMAT" > "$HDR_ROOT/.done"
      return 0
    fi
    log "after adapting the $KVER headers, kbuild programs there still do not run on this host:"
    log_unrunnable "$HDR_BAD"
    [ "$attempt" = 2 ] || log "starting the adaptation over"
  done
  die "the $KVER headers in $HDR_ROOT are not usable on this host: the kbuild programs above do not run even after adapting them twice (they stay unmarked: the next build starts over)"
}

# Unpacks headers and kbuild into a new HDR_ROOT, adapts them when the host needs it (see the
# header), and sets HDR_BAD to the kbuild programs that still do not run (unrunnable_programs'
# lines; empty: all run).
unpack_headers() {
  local p deb kbuild need='' gccv before
  rm -rf "$HDR_ROOT" "$HDR_ROOT.debs"
  for p in "linux-headers-$KVER" "linux-headers-$ABI-common" "$(kbuild_package)"; do
    deb=$(download "$p" "$HDR_ROOT.debs")
    dpkg-deb -x "$deb" "$HDR_ROOT"
  done
  [ -f "$KDIR/Makefile" ] || die "linux-headers-$KVER has no Makefile"
  sed -i "s#^include /usr/src/#include $HDR_ROOT/usr/src/#" "$KDIR/Makefile"
  grep -q "^include $HDR_ROOT/" "$KDIR/Makefile" ||
    die "unexpected $KDIR/Makefile (no include of the common headers): $(head -c 200 "$KDIR/Makefile")"
  kbuild=$(kbuild_dir)
  [ -n "$kbuild" ] || die "no linux-kbuild folder under $HDR_ROOT/usr/lib"
  before=$(unrunnable_programs "$kbuild")
  [ -z "$before" ] || need=programs
  gccv=$(gcc-12 -dumpfullversion | awk -F. '{ printf "%d%02d%02d", $1, $2, $3 }')
  [ "$(sed -n 's/^CONFIG_GCC_VERSION=//p' "$KDIR/include/config/auto.conf")" = "$gccv" ] || need="$need config"
  if [ -n "$need" ]; then
    log "Debian built $KVER with $(sed -n 's/^CONFIG_CC_VERSION_TEXT=//p' "$KDIR/include/config/auto.conf" | tr -d '"'); adapting its headers to this host (${need# })"
    [ -z "$before" ] || log_unrunnable "$before"
    adapt_headers "$kbuild" "$need" "$before"
  fi
  HDR_BAD=$(unrunnable_programs "$kbuild")
}
HDR_BAD=''

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
# Sets KDIR: --kdir, else MODULES/build (the link make modules_install leaves).
custom_kdir() {
  if [ -n "$KDIR_ARG" ]; then
    [ -d "$KDIR_ARG" ] || die "--kdir: no folder $KDIR_ARG"
    KDIR=$(cd "$KDIR_ARG" && pwd)
    return 0
  fi
  [ -n "$MODULES" ] || die "--kernel $KSPEC: give --source FILE, --kdir DIR or --modules DIR (whose build link names the tree)"
  KDIR=$MODULES/build
  if [ ! -d "$KDIR" ]; then
    if [ -L "$KDIR" ]; then
      die "$KDIR links to $(readlink "$KDIR"), which does not exist here: give --kdir DIR (the tree the kernel was built in, or its headers)"
    fi
    die "$MODULES has no build link: give --kdir DIR (the tree the kernel was built in, or its headers)"
  fi
  KDIR=$(cd "$KDIR" && pwd -P)
}

# Sets SRC_C: --source, else KDIR/drivers/scsi/storvsc_drv.c or KDIR/source/... (O= builds).
custom_source() {
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
}

check_custom_tree() {
  custom_kdir
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
  custom_source
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
  # A kernel with gcov: the module's lines are counted too (coverage = lines), its notes
  # file (storvsc_drv.gcno) kept beside it.
  if grep -q '^CONFIG_GCOV_KERNEL=y' "$KDIR/include/config/auto.conf"; then MAKE_EXTRA+=(GCOV_PROFILE_storvsc_drv.o=y); fi
}

# --- the cache lock, and starting over -------------------------------------------------------
# One build or --source-only at a time per cache: they share downloads, unpacked headers and
# logs. Held until the script exits.
take_lock() {
  exec 8>"$KMOD_ROOT/.lock"
  flock -n 8 || { log "waiting for another build-module.sh on $HVSTOR_CACHE (lock $KMOD_ROOT/.lock)"; flock 8; }
}

# The command that runs this build again from the start (HVSTOR_KMOD_REBUILD=1): this
# script's arguments as given, the cache when it is not the default one.
rebuild_command() {
  local self=$0
  [[ $self == */* ]] || self=./$self
  printf 'HVSTOR_KMOD_REBUILD=1'
  [ "$HVSTOR_CACHE" = "$HVSTOR_ROOT/.cache" ] || printf ' HVSTOR_CACHE=%q' "$HVSTOR_CACHE"
  printf ' %q' "$self" "${ORIG_ARGS[@]}"
  printf '\n'
}

# --- the source alone (--source-only DIR) --------------------------------------------------
# Writes SRC_C to $1/storvsc_drv.c and where it came from to $1/source-info; prints the
# file's path.
write_source_only() {
  local dir=$1 dest
  [ ! -e "$dir" ] || [ -d "$dir" ] || die "--source-only $dir: exists and is not a folder"
  mkdir -p "$dir"
  dest=$dir/storvsc_drv.c
  if [ -e "$dest" ] && ! cmp -s "$SRC_C" "$dest"; then
    die "--source-only: $dest exists and differs from the source ($SRC_C); it may hold your edits: move it away or give another folder"
  fi
  cp "$SRC_C" "$dest.tmp"
  mv -f "$dest.tmp" "$dest"
  {
    if [ "$MODE" = debian ]; then
      echo "# drivers/scsi/storvsc_drv.c of Debian's linux-source-$SERIES $PKG_VERSION (kernel $KVER): the file scripts/build-module.sh --kernel $KSPEC patches"
      echo "kernel=$KSPEC"
      echo "release=$KVER"
      echo "package=linux-source-$SERIES"
      echo "package-version=$PKG_VERSION"
      echo "path=drivers/scsi/storvsc_drv.c"
    else
      echo "# storvsc_drv.c of the kernel $KIMG: the file scripts/build-module.sh --kernel $KIMG patches with these options"
      echo "kernel=$KIMG"
      [ -z "$KVER" ] || echo "release=$KVER"
      [ -z "$KDIR" ] || echo "kdir=$KDIR"
    fi
    echo "source=$SRC_C"
    echo "sha256=$(sha256sum < "$SRC_C" | cut -d' ' -f1)"
  } > "$dir/source-info"
  log "storvsc_drv.c for $KSPEC${KVER:+ ($KVER)} written to $dest (where it came from: $dir/source-info)"
  realpath "$dest"
}

KDIR='' SRC_C='' CC=gcc-12 MAKE_EXTRA=()
if [ -n "$SOURCE_ONLY" ]; then
  if [ "$MODE" = debian ]; then
    SRC_C=$KMOD_ROOT/$KVER/src-$PKG_VERSION/storvsc_drv.c
    mkdir -p "$KMOD_ROOT/$KVER"
    take_lock
    ensure_packages xz-utils
    SRC_DEBS=$KMOD_ROOT/$KVER/src-$PKG_VERSION.debs
    CLEANUP+=("$SRC_DEBS")
    [ "${HVSTOR_KMOD_REBUILD:-0}" != 1 ] || rm -f "$SRC_C"
    extract_debian_source
  else
    [ -n "$SOURCE_ARG" ] || custom_kdir
    custom_source
  fi
  write_source_only "$SOURCE_ONLY"
  exit 0
fi

# --- where the build goes, and the cache ---------------------------------------------------
if [ "$MODE" = debian ]; then
  SRC_C=$KMOD_ROOT/$KVER/src-$PKG_VERSION/storvsc_drv.c
  KEY=$( { echo "$PKG_VERSION"; echo "$PATCH_HASH"; sha256sum < "$0"; } | sha256sum | cut -c1-16)
  OUT_DIR=$KMOD_ROOT/$KVER/$PATCH_NAME-$KEY
else
  check_custom_tree
  tree_id=$( { echo "$KDIR"; echo "$KVER"; sha256sum "$KDIR/include/config/auto.conf" "$KDIR/Module.symvers" \
    "$KDIR/include/generated/utsrelease.h" "$SRC_C" 2>/dev/null | cut -d' ' -f1; "$CC" --version | sed -n 1p; } |
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
take_lock
ensure_tools
if [ "$MODE" = debian ]; then
  SRC_DEBS=$KMOD_ROOT/$KVER/src-$PKG_VERSION.debs
  CLEANUP+=("$SRC_DEBS")
  [ "${HVSTOR_KMOD_REBUILD:-0}" != 1 ] || rm -f "$SRC_C"
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
      applied=-p$p; break
    fi
  done
  # A diff of the file alone (diff -u storvsc_drv.c.orig storvsc_drv.c) names no tree path:
  # it is applied to the file by name.
  f=$BUILD/tree/drivers/scsi/storvsc_drv.c
  if [ -z "$applied" ] && patch --dry-run --batch --forward -s "$f" < "$PATCH_FILE" >/dev/null 2>&1; then
    patch --batch --forward -s "$f" < "$PATCH_FILE" >&2 || die "applying $PATCH_FILE failed"
    applied="to storvsc_drv.c by name"
  fi
  if [ -z "$applied" ]; then
    (cd "$BUILD/tree" && patch -p1 --dry-run --batch --forward < "$PATCH_FILE" >&2) || true
    die "$PATCH_FILE does not apply to $SRC_C ($KVER; output above)"
  fi
  log "applied $(basename "$PATCH_FILE") ($applied)"
fi
MOD_DIR=$BUILD/tree/drivers/scsi
VERSION_TAG="hvstor-$PATCH_NAME-$PATCH_HASH"
if ! grep -q 'MODULE_VERSION(' "$MOD_DIR/storvsc_drv.c"; then
  printf '\nMODULE_VERSION("%s");\n' "$VERSION_TAG" >> "$MOD_DIR/storvsc_drv.c"
fi
printf 'obj-m := hv_storvsc.o\nhv_storvsc-y := storvsc_drv.o\n' > "$MOD_DIR/Kbuild"
CC_TEXT=$("$CC" --version | sed -n 1p)
log "building hv_storvsc ($PATCH_NAME) for $KVER with $CC against $KDIR"
# CONFIG_DEBUG_INFO_BTF_MODULES= on the command line skips module BTF (it needs the pahole
# the kernel was built with); the C side (struct module) keeps the kernel's config.
if ! make -C "$KDIR" M="$MOD_DIR" CC="$CC" "${MAKE_EXTRA[@]}" CONFIG_DEBUG_INFO_BTF_MODULES= \
    modules >"$BUILD/build.log" 2>&1; then
  grep -E 'error|warning' "$BUILD/build.log" | head -n 30 >&2 || true
  tail -n 20 "$BUILD/build.log" >&2
  cp "$BUILD/build.log" "$KMOD_ROOT/build-failed.log"
  if grep -qE "version \`[^']+' not found|error while loading shared libraries|cannot execute binary file" "$BUILD/build.log"; then
    log "a kbuild program of $KDIR did not run on this host (above)"
  fi
  printf '[hvstor] error: building hv_storvsc with %s failed (log: %s)\n' "$PATCH_NAME" "$KMOD_ROOT/build-failed.log" >&2
  printf '[hvstor] unless the error is in the patch, start over (%s), with:\n  %s\n' \
    "$([ "$MODE" = debian ] && echo "the headers and the source fetched and prepared again, then the build" || echo "the build again")" \
    "$(rebuild_command)" >&2
  exit 1
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
[ ! -f "$MOD_DIR/storvsc_drv.gcno" ] || cp "$MOD_DIR/storvsc_drv.gcno" "$OUT_DIR.tmp/"
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
