# Two controllers with two and one LUNs, RAM and null backends, plus an absent LUN gap:
# the guest sees exactly three disks of the right sizes and no phantom ones.
. "$(dirname "$0")/../boot-lib.sh"
boot_guest --kernel debian-6.12 --vcpus 2 --wait-disks 3 \
  --cmd 'for d in /sys/block/sd*; do echo "DISK $(basename $(readlink $d/device)) $(cat $d/size)"; done
         dd if=/dev/zero of=/dev/sda bs=64k count=16 2>/dev/null && echo WRITE-OK' \
  -- -device hv-storvsc,id=scsi0 -device hv-storvsc,id=scsi1 \
     -device hv-disk,bus=scsi0.0,lun=0,backend=ram,size=64M \
     -device hv-disk,bus=scsi0.0,lun=3,backend=null,size=8G \
     -device hv-disk,bus=scsi1.0,lun=0,backend=null,size=1T
check "guest command finished" [ "$BOOT_RC" = 0 ]
check "three disks, no phantoms" count_is '^DISK ' 3
check "64 MiB RAM disk at LUN 0" has '^DISK [0-9]+:0:0:0 131072$'
check "8 GiB null disk at LUN 3" has '^DISK [0-9]+:0:0:3 16777216$'
check "1 TiB null disk on the second controller" has '^DISK [0-9]+:0:0:0 2147483648$'
check "writes complete" has '^WRITE-OK'
finish
