# A host limited to VMBus 4.1: the guest is refused 5.3..5.0 and settles on 4.1, using
# connection id 1 for contact, as on older Hyper-V hosts.
. "$(dirname "$0")/../boot-lib.sh"
boot_guest --kernel debian-6.12 --vcpus 2 \
  --cmd 'dmesg; ls /sys/bus/vmbus/devices | sed "s/^/DEV /"' \
  -- -device hv-vmbus-bridge,vmbus-version=4.1 -device hv-storvsc
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "VMBus 4.1 negotiated" has 'hv_vmbus: Vmbus version:4.1'
check "controller offered" count_is '^DEV ' 1
finish
