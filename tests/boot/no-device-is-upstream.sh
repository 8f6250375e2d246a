# Without our device QEMU behaves as upstream: no Hyper-V in the guest.
. "$(dirname "$0")/../boot-lib.sh"
boot_guest --kernel debian-6.12 --vcpus 1 --cmd 'dmesg'
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "no Hyper-V detected" lacks 'Microsoft Hyper-V'
check "hv_vmbus finds no VMBus device" lacks 'Vmbus version'
finish
