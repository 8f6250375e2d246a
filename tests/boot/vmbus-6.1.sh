# Stock bookworm 6.1 guest, 4 vCPUs, two controllers.
. "$(dirname "$0")/../boot-lib.sh"
boot_guest --kernel debian-6.1 --vcpus 4 \
  --cmd 'dmesg; for d in /sys/bus/vmbus/devices/*; do echo "DEV $(basename $d) $(cat $d/class_id)"; done' \
  -- -device hv-storvsc,id=scsi0 -device hv-storvsc,id=scsi1
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "Hyper-V detected" has 'Hypervisor detected: Microsoft Hyper-V'
check "TSC trusted (invariant TSC offered)" lacks 'Marking TSC unstable'
check "no unchecked MSR access" lacks 'unchecked MSR access'
check "VMBus 5.3 negotiated" has 'hv_vmbus: Vmbus version:5.3'
check "two SCSI controller channels on the bus" count_is '^DEV .* \{ba6163d9-04a1-4d29-b605-72e2ffb1dc7f\}' 2
finish
