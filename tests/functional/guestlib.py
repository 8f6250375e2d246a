"""Shell for the guest's commands (busybox sh), written once for the boot tests."""

# Put before a guest command (LUN_HELPERS + cmd):
#   wait_for WHAT CMD...  runs CMD every 0.5 s until it succeeds. It has no bound of its own:
#                the hang guard is the test's only clock. Every 30 s it says on stderr (the
#                console) that it is still waiting for WHAT, so a hung run shows what for.
#   lun_dev N    the sdX of LUN N on the guest's SCSI hosts, if there is one
#   wait_lun N   waits for LUN N to appear (wait_for), prints its sdX; lun_present N and
#                lun_gone N for wait_for
#   disks        how many sd disks the guest has; has_disks N: at least N (for wait_for)
LUN_HELPERS = r"""
lun_dev() {
  for d in /sys/block/sd*; do
    [ -e "$d" ] || continue
    a=$(basename "$(readlink "$d/device")")
    [ "${a##*:}" = "$1" ] && basename "$d"
  done
}
wait_for() {
  _wf_what=$1; shift; _wf_n=0
  until "$@"; do
    sleep 0.5; _wf_n=$((_wf_n + 1))
    [ $((_wf_n % 60)) -eq 0 ] && echo "still waiting for $_wf_what ($((_wf_n / 2)) s)" >&2
  done
  return 0
}
lun_present() { [ -n "$(lun_dev "$1")" ]; }
lun_gone() { [ -z "$(lun_dev "$1")" ]; }
wait_lun() { wait_for "LUN $1" lun_present "$1"; lun_dev "$1"; }
disks() { ls /sys/block | grep -c '^sd'; }
has_disks() { [ "$(disks)" -ge "$1" ]; }
"""

# A guest command that lives across a machine reset (LUN_HELPERS + reads_across_a_reset()):
# before the reset it marks LUN 1, keeps `queued` random 4 KiB reads in flight on LUN 0 with
# fio, prints FIO-STARTS and runs `then` (which should end in the reset); after it, the same
# command finds the mark and reads LUN 0 once: READ-AFTER-RESET-OK. STILL-IN-STAGE1 means
# `then` came back.
def reads_across_a_reset(queued: int, then: str) -> str:
    return r"""
M=$(wait_lun 1)
if [ "$(dd if=/dev/$M bs=512 count=1 2>/dev/null | head -c 6)" = STAGE1 ]; then
  D=$(wait_lun 0)
  dd if=/dev/$D of=/dev/null bs=4096 count=16 iflag=direct 2>/dev/null && echo READ-AFTER-RESET-OK
  exit 0
fi
printf STAGE1 | dd of=/dev/$M bs=512 conv=sync oflag=direct 2>/dev/null
D=$(wait_lun 0)
fio --name=q --filename=/dev/$D --direct=1 --ioengine=libaio --iodepth=%d --rw=randread --bs=4k \
    --time_based --runtime=3600 >/dev/null 2>&1 &
echo FIO-STARTS
%s
echo STILL-IN-STAGE1
""" % (queued, then)


# What the patched-module tests read in the guest: the running kernel, the loaded
# hv_storvsc's version, srcversion, taint and storvsc_vcpus_per_sub_channel, the hardware
# queues and the tag flags of sda; with HVSTOR_FIO=1 before it, also a fio crc32c verify
# ("FIO OK").
MODULE_PROBE = r"""
m=/sys/module/hv_storvsc
echo "RELEASE $(uname -r)"
echo "VERSION $(cat $m/version 2>/dev/null)"
echo "SRCVERSION $(cat $m/srcversion 2>/dev/null)"
echo "TAINT $(cat $m/taint 2>/dev/null)"
echo "VPSC $(cat $m/parameters/storvsc_vcpus_per_sub_channel 2>/dev/null)"
echo "HWQ $(ls -d /sys/block/sda/mq/*/ | wc -l)"
echo "FLAGS $(cat /sys/kernel/debug/block/sda/hctx0/flags)"
if [ -n "$HVSTOR_FIO" ]; then
fio --name=v --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=16 --numjobs=2 \
    --size=48M --offset_increment=64M --rw=randwrite --bs=4k-64k --verify=crc32c \
    --verify_fatal=1 --group_reporting > /tmp/fio.out 2>&1 && echo "FIO OK" || { cat /tmp/fio.out; echo "FIO FAILED"; }
fi
"""
