# Stock trixie 6.12 guest: detects Hyper-V, negotiates VMBus 5.3, sees the controller.
. "$(dirname "$0")/../boot-lib.sh"
boot_guest --kernel debian-6.12 --vcpus 2 \
  --cmd 'dmesg; for d in /sys/bus/vmbus/devices/*; do echo "DEV $(basename $d) $(cat $d/class_id)"; done' \
  -- -device hv-storvsc,id=scsi0
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "Hyper-V detected" has 'Hypervisor detected: Microsoft Hyper-V'
check "paravirtualized on Hyper-V" has 'Booting paravirtualized kernel on Hyper-V'
check "no unchecked MSR access" lacks 'unchecked MSR access'
check "VMBus 5.3 negotiated" has 'hv_vmbus: Vmbus version:5.3'
check "one SCSI controller channel on the bus" count_is '^DEV .* \{ba6163d9-04a1-4d29-b605-72e2ffb1dc7f\}' 1
finish
