# The patched-driver path on Debian trixie's 6.12 (scripts/build-module.sh --kernel
# debian-6.12), and on a kernel given by paths, as a user's own build would be.
#
# (a) guest-patches/host-tagset.patch built against trixie's 6.12 headers (adapted to gcc-12
#     and bookworm's glibc, see build-module.sh) must load in the debian-6.12 guest in place
#     of the stock module: our version stamp and srcversion, out-of-tree taint, a module
#     parameter from the command line, the hardware queues sharing tags (TAG_HCTX_SHARED),
#     data intact under fio's verify.
# (b) The own-kernel path: Debian's 6.12 vmlinuz and lib/modules tree from the cache given as
#     plain paths (--kernel PATH --modules DIR), KDIR the unpacked headers (--kdir), the
#     pristine source (--source: headers carry no .c), a patch of our own that changes a
#     module parameter's default; the guest booted with --kernel PATH --modules DIR --ko must
#     run that build (version, srcversion, the new default).
# Plus the errors of the own-kernel path: no build tree, a tree for another release or
# without a Makefile, a module tree of another kernel than the image, headers without
# --source, a build whose vermagic differs from the stock module's.
. "$(dirname "$0")/../boot-lib.sh"

KO=$(bash "$HVSTOR_ROOT/scripts/build-module.sh" --kernel debian-6.12 host-tagset 2>"$WORK/build-a.log" | tail -n 1)
check "host-tagset module built for debian-6.12" [ -f "$KO" ]
if [ ! -f "$KO" ]; then tail -n 30 "$WORK/build-a.log"; finish; fi
INFO=$(dirname "$KO")/build-info
info() { sed -n "s/^$2=//p" "$1"; }
KVER=$(info "$INFO" kernel)
KVER_RE=$(sed 's/[][\.*^$+?(){}|]/\\&/g' <<<"$KVER")   # 6.12.117+deb13-amd64 in a regex
PKG=$HVSTOR_CACHE/guest/debian-6.12/pkg
MODS=$PKG/lib/modules/$KVER
KIMG=$PKG/boot/vmlinuz-$KVER
STOCK=$(find "$MODS" -name 'hv_storvsc.ko*' | head -n 1)
check "the 6.12 guest's module tree and image are where expected" [ -f "$STOCK" ] && [ -f "$KIMG" ]
check "vermagic matches the stock 6.12 module's" [ "$(modinfo -F vermagic "$KO")" = "$(modinfo -F vermagic "$STOCK")" ]
check "build-info: vermagic line is the module's" [ "$(info "$INFO" vermagic)" = "$(modinfo -F vermagic "$KO")" ]
WANT_VERSION=$(info "$INFO" version)
WANT_SRC=$(info "$INFO" srcversion)
check "the build carries a version stamp" [ -n "$WANT_VERSION" ]
check "its srcversion differs from the stock module's" [ -n "$WANT_SRC" ] && [ "$WANT_SRC" != "$(modinfo -F srcversion "$STOCK")" ]
check "built by gcc-12 against adapted headers" grep -q '^adapted-config=.*CC_HAS_MIN_FUNCTION_ALIGNMENT' "$INFO"

GUEST_CMD=$MODULE_PROBE
DEVS=(-device hv-storvsc,id=scsi0 -device hv-disk,bus=scsi0.0,lun=0,backend=ram,size=160M)

boot_guest --kernel debian-6.12 --vcpus 4 --wait-disks 1 --ko "$KO" \
  --append hv_storvsc.storvsc_max_hw_queues=2 --cmd "HVSTOR_FIO=1; $GUEST_CMD" -- "${DEVS[@]}"
check "(a) guest command finished" [ "$BOOT_RC" = 0 ]
check "(a) the guest runs $KVER" has "^RELEASE $KVER_RE\$"
check "(a) the loaded hv_storvsc is our build ($WANT_VERSION)" has "^VERSION $WANT_VERSION\$"
check "(a) its srcversion is the build's" has "^SRCVERSION $WANT_SRC\$"
check "(a) the kernel marks it out of tree" has '^TAINT .*O'
check "(a) storvsc_max_hw_queues=2 from the command line reached it" has '^HWQ 2$'
check "(a) hardware queues share one tag set (the patch)" has '^FLAGS .*TAG_HCTX_SHARED'
check "(a) fio verify passed" has '^FIO OK'
grep -E '^(RELEASE|VERSION|SRCVERSION|TAINT|HWQ|FLAGS) ' "$OUT" | sed 's/^/  /'

# --- (b) the kernel given by paths ---------------------------------------------------------
KDIR=$(info "$INFO" kdir)
SRC=$(info "$INFO" source)
check "build-info names the headers and the pristine source" [ -f "$KDIR/Makefile" ] && [ -f "$SRC" ]
cat > "$WORK/vcpus-per-channel.patch" <<'EOF'
Test patch: one subchannel per 2 vCPUs instead of 4 (visible as the parameter's default).

--- a/drivers/scsi/storvsc_drv.c
+++ b/drivers/scsi/storvsc_drv.c
@@ -342,7 +342,7 @@
 static u32 max_outstanding_req_per_channel;
 static int storvsc_change_queue_depth(struct scsi_device *sdev, int queue_depth);
 
-static int storvsc_vcpus_per_sub_channel = 4;
+static int storvsc_vcpus_per_sub_channel = 2;
 static unsigned int storvsc_max_hw_queues;
 
 module_param(storvsc_ringbuffer_size, int, S_IRUGO);
EOF
bm() { bash "$HVSTOR_ROOT/scripts/build-module.sh" "$@"; }
KO_B=$(bm --kernel "$KIMG" --modules "$MODS" --kdir "$KDIR" --source "$SRC" \
  "$WORK/vcpus-per-channel.patch" 2>"$WORK/build-b.log" | tail -n 1)
check "(b) module built for the kernel given by paths" [ -f "$KO_B" ]
if [ ! -f "$KO_B" ]; then tail -n 30 "$WORK/build-b.log"; finish; fi
INFO_B=$(dirname "$KO_B")/build-info
B_VERSION=$(info "$INFO_B" version)
B_SRC=$(info "$INFO_B" srcversion)
check "(b) it is cached apart from the Debian builds" [ "$(dirname "$(dirname "$KO_B")")" != "$(dirname "$(dirname "$KO")")" ]
check "(b) build-info: kernel, version, srcversion, vermagic" \
  [ "$(info "$INFO_B" kernel)" = "$KVER" ] && [ -n "$B_VERSION" ] && [ -n "$B_SRC" ] &&
  [ "$(info "$INFO_B" vermagic)" = "$(modinfo -F vermagic "$STOCK")" ]
check "(b) the build is not (a)'s" [ "$B_SRC" != "$WANT_SRC" ]
check "(b) a second call is answered from the cache" \
  [ "$(bm --kernel "$KIMG" --modules "$MODS" --kdir "$KDIR" --source "$SRC" "$WORK/vcpus-per-channel.patch" 2>/dev/null | tail -n 1)" = "$KO_B" ]

boot_guest --kernel "$KIMG" --modules "$MODS" --vcpus 2 --wait-disks 1 --ko "$KO_B" \
  --cmd "$GUEST_CMD" -- "${DEVS[@]}"
check "(b) guest command finished" [ "$BOOT_RC" = 0 ]
check "(b) the guest runs $KVER from the image path" has "^RELEASE $KVER_RE\$"
check "(b) the loaded hv_storvsc is the path build ($B_VERSION)" has "^VERSION $B_VERSION\$"
check "(b) its srcversion is the build's" has "^SRCVERSION $B_SRC\$"
check "(b) the patch is in: storvsc_vcpus_per_sub_channel defaults to 2" has '^VPSC 2$'
check "(b) stock tagging (no host-tagset patch)" lacks 'TAG_HCTX_SHARED'
grep -E '^(RELEASE|VERSION|SRCVERSION|VPSC|FLAGS) ' "$OUT" | sed 's/^/  /'

# --- errors of the own-kernel path ------------------------------------------------------------
fails_with() { # message regex, then build-module.sh arguments
  local want=$1; shift
  ! bm "$@" >"$WORK/err.out" 2>"$WORK/err.log" && grep -q -E -- "$want" "$WORK/err.log"
}
# Debian's module tree links build to /usr/src/linux-headers-..., absent on this host.
check "error: no build tree (dangling MODULES/build) names --kdir" \
  fails_with 'give --kdir' --kernel "$KIMG" --modules "$MODS" none
# A prepared tree of another release, and a module tree of another kernel than the image.
mkdir -p "$WORK/other/include/config" "$WORK/other/include/generated" "$WORK/lib/modules/9.9.9-other"
touch "$WORK/other/Makefile" "$WORK/other/Module.symvers" "$WORK/other/include/generated/autoconf.h" \
  "$WORK/lib/modules/9.9.9-other/modules.dep"
cp "$KDIR/include/config/auto.conf" "$WORK/other/include/config/auto.conf"
echo 9.9.9-other > "$WORK/other/include/config/kernel.release"
check "error: KDIR of another release" \
  fails_with 'configured for release 9.9.9-other, but the kernel and --modules are' \
  --kernel "$KIMG" --modules "$MODS" --kdir "$WORK/other" none
check "error: KDIR without a Makefile" \
  fails_with 'has no Makefile' --kernel "$KIMG" --modules "$MODS" --kdir "$WORK/lib" none
check "error: module tree of another kernel than the image" \
  fails_with "is release $KVER_RE, but --modules is for 9.9.9-other" --kernel "$KIMG" --modules "$WORK" none
# The headers under another release name (a symlinked copy): the build runs, its vermagic
# cannot match the stock module's.
cp -as "$KDIR" "$WORK/renamed"
rm -f "$WORK/renamed/include/config/kernel.release" "$WORK/renamed/include/generated/utsrelease.h"
echo '#define UTS_RELEASE "9.9.9-other"' > "$WORK/renamed/include/generated/utsrelease.h"
check "error: vermagic of the build differs from the stock module's" \
  fails_with "vermagic '9.9.9-other .*differs from the stock module's" --kernel "$KIMG" --modules "$MODS" \
  --kdir "$WORK/renamed" --source "$SRC" none
check "error: headers without --source" \
  fails_with 'give --source' --kernel "$KIMG" --modules "$MODS" --kdir "$KDIR" none
check "error: --modules without a kernel image path" \
  fails_with 'go with a kernel image path' --kernel debian-6.12 --modules "$MODS" none
finish
