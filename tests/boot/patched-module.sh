# The patched-driver path: hv_storvsc built out of tree with guest-patches/host-tagset.patch
# (scripts/build-module.sh), booted on stock bookworm 6.1 in place of the stock module.
# The guest must run our build (its version stamp, srcversion, out-of-tree taint), the
# patch must show (blk-mq marks the hardware queues TAG_HCTX_SHARED), a module parameter
# from the kernel command line must reach it, and data must survive fio's verify. The same
# source rebuilt without a patch must load too and must not share tags.
. "$(dirname "$0")/../boot-lib.sh"

build() { # PATCH -> path of the module, or empty
  bash "$HVSTOR_ROOT/scripts/build-module.sh" --kernel debian-6.1 "$1" 2>"$WORK/build-$1.log" | tail -n 1
}
KO=$(build host-tagset)
KO_NONE=$(build none)
check "host-tagset module built" [ -f "$KO" ]
check "stock source rebuilt (patch none)" [ -f "$KO_NONE" ]
if [ ! -f "$KO" ] || [ ! -f "$KO_NONE" ]; then
  tail -n 20 "$WORK"/build-*.log
  finish
fi
info() { sed -n "s/^$2=//p" "$(dirname "$1")/build-info"; }
STOCK=$(find "$HVSTOR_CACHE/guest/debian-6.1/pkg" -name 'hv_storvsc.ko*' | head -n 1)
check "vermagic matches the stock module's" [ "$(modinfo -F vermagic "$KO")" = "$(modinfo -F vermagic "$STOCK")" ]
WANT_VERSION=$(info "$KO" version)
WANT_SRC=$(info "$KO" srcversion)
check "the build carries a version stamp" [ -n "$WANT_VERSION" ]
check "the build carries a srcversion" [ -n "$WANT_SRC" ]
check "its srcversion differs from the stock module's" [ "$WANT_SRC" != "$(modinfo -F srcversion "$STOCK")" ]

GUEST_CMD="HVSTOR_FIO=1; $MODULE_PROBE"
DEVS=(-device hv-storvsc,id=scsi0 -device hv-disk,bus=scsi0.0,lun=0,backend=ram,size=160M)

boot_guest --kernel debian-6.1 --vcpus 4 --wait-disks 1 --ko "$KO" \
  --append hv_storvsc.storvsc_max_hw_queues=2 --cmd "$GUEST_CMD" -- "${DEVS[@]}"
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "the loaded hv_storvsc is our build ($WANT_VERSION)" has "^VERSION $WANT_VERSION\$"
check "its srcversion is the build's" has "^SRCVERSION $WANT_SRC\$"
check "the kernel marks it out of tree" has '^TAINT .*O'
check "storvsc_max_hw_queues=2 from the command line reached it" has '^HWQ 2$'
check "hardware queues share one tag set (the patch)" has '^FLAGS .*TAG_HCTX_SHARED'
check "fio verify passed" has '^FIO OK'
grep -E '^(VERSION|SRCVERSION|TAINT|HWQ|FLAGS) ' "$OUT" | sed 's/^/  /'

boot_guest --kernel debian-6.1 --vcpus 4 --wait-disks 1 --ko "$KO_NONE" \
  --cmd "$GUEST_CMD" -- "${DEVS[@]}"
check "rebuilt stock source: guest command finished" [ "$BOOT_RC" = 0 ]
check "rebuilt stock source is loaded" has "^VERSION $(info "$KO_NONE" version)\$"
check "rebuilt stock source: one hardware queue per vCPU" has '^HWQ 4$'
check "rebuilt stock source: tags not shared" lacks 'TAG_HCTX_SHARED'
check "rebuilt stock source: fio verify passed" has '^FIO OK'
finish
