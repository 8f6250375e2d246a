"""Stock Debian guests find Hyper-V and VMBus: versions, offers, controllers, LUNs."""

from conftest import Checks, Controller, Disk, Run, guest

SCSI_CLASS = r"^DEV .* \{ba6163d9-04a1-4d29-b605-72e2ffb1dc7f\}"
LIST_DEVICES = 'dmesg; for d in /sys/bus/vmbus/devices/*; do echo "DEV $(basename $d) $(cat $d/class_id)"; done'


def test_vmbus_6_1_two_controllers(run: Run, checks: Checks) -> None:
    """Stock bookworm 6.1, 4 vCPUs, two controllers."""
    r = run(guest(kernel="debian-6.1", vcpus=4, cmd=LIST_DEVICES,
                  controllers=[Controller("scsi0"), Controller("scsi1")]))
    checks.boot_ok(r)
    checks.has(r.output, "Hypervisor detected: Microsoft Hyper-V", "Hyper-V detected")
    checks.lacks(r.output, "Marking TSC unstable", "TSC trusted (invariant TSC offered)")
    checks.lacks(r.output, "unchecked MSR access", "no unchecked MSR access")
    checks.has(r.output, "hv_vmbus: Vmbus version:5.3", "VMBus 5.3 negotiated")
    checks.count(r.output, SCSI_CLASS, 2, "two SCSI controller channels on the bus")


def test_vmbus_6_12(run: Run, checks: Checks) -> None:
    """Stock trixie 6.12: detects Hyper-V, negotiates VMBus 5.3, sees the controller."""
    r = run(guest(kernel="debian-6.12", vcpus=2, cmd=LIST_DEVICES))
    checks.boot_ok(r)
    checks.has(r.output, "Hypervisor detected: Microsoft Hyper-V", "Hyper-V detected")
    checks.has(r.output, "Booting paravirtualized kernel on Hyper-V", "paravirtualized on Hyper-V")
    checks.lacks(r.output, "unchecked MSR access", "no unchecked MSR access")
    checks.has(r.output, "hv_vmbus: Vmbus version:5.3", "VMBus 5.3 negotiated")
    checks.count(r.output, SCSI_CLASS, 1, "one SCSI controller channel on the bus")


def test_vmbus_older_version(run: Run, checks: Checks) -> None:
    """A host limited to VMBus 4.1: the guest is refused 5.3..5.0 and settles on 4.1, using
    connection id 1 for contact, as on older Hyper-V hosts."""
    r = run(guest(vcpus=2, bridge={"vmbus-version": "4.1"},
                  cmd='dmesg; ls /sys/bus/vmbus/devices | sed "s/^/DEV /"'))
    checks.boot_ok(r)
    checks.has(r.output, "hv_vmbus: Vmbus version:4.1", "VMBus 4.1 negotiated")
    checks.count(r.output, "^DEV ", 1, "controller offered")


def test_two_controllers_and_a_lun_gap(run: Run, checks: Checks) -> None:
    """Two controllers with two and one LUNs, RAM and null backends, plus an absent LUN gap:
    the guest sees exactly three disks of the right sizes and no phantom ones."""
    r = run(guest(vcpus=2, controllers=[Controller("scsi0"), Controller("scsi1")],
                  disks=[Disk({"backend": "ram", "size": "64M"}, 0, 0),
                         Disk({"backend": "null", "size": "8G"}, 0, 3),
                         Disk({"backend": "null", "size": "1T"}, 1, 0)],
                  cmd='for d in /sys/block/sd*; do echo "DISK $(basename $(readlink $d/device)) $(cat $d/size)"; done\n'
                      'dd if=/dev/zero of=/dev/sda bs=64k count=16 2>/dev/null && echo WRITE-OK'))
    checks.boot_ok(r)
    checks.count(r.output, "^DISK ", 3, "three disks, no phantoms")
    checks.has(r.output, "^DISK [0-9]+:0:0:0 131072$", "64 MiB RAM disk at LUN 0")
    checks.has(r.output, "^DISK [0-9]+:0:0:3 16777216$", "8 GiB null disk at LUN 3")
    checks.has(r.output, "^DISK [0-9]+:0:0:0 2147483648$", "1 TiB null disk on the second controller")
    checks.has(r.output, "^WRITE-OK", "writes complete")


def test_no_device_is_upstream(run: Run, checks: Checks) -> None:
    """Without our device QEMU behaves as upstream: no Hyper-V in the guest."""
    r = run(guest(vcpus=1, controllers=[], cmd="dmesg"))
    checks.boot_ok(r)
    checks.lacks(r.output, "Microsoft Hyper-V", "no Hyper-V detected")
    checks.lacks(r.output, "Vmbus version", "hv_vmbus finds no VMBus device")
