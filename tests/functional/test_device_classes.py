"""The two other VMBus device classes Linux's hv_storvsc binds, on stock 6.12 and 6.1 guests:
one boot per kernel with an IDE accelerator (class=ide) and a Fibre Channel HBA (class=fc),
one RAM disk each.

- IDE: the instance GUID 00000001-0001-8899-... names IDE target 1 (storvsc's
  dev_instance.b[5] << 8 | b[4]); storvsc adds the disk there (scsi_add_device, no scan) at
  LUN 0, with one hardware queue and no subchannel;
- FC: storvsc asks FCHBA_DATA during its handshake; /sys/class/fc_host/hostN shows the
  port-wwn and node-wwn given, a remote port is added, and transfers are capped at 512 KiB
  even though the controller offers 1 MiB;
- on each disk fio writes and verifies (crc32c).

The only clock is the hang guard."""

import pytest

from conftest import Checks, Controller, Disk, Run, guest, matches

PORT_WWN, NODE_WWN = "c003ff0000ff0101", "5001a4b2c3d4e5f6"
IDE_INSTANCE = "00000001-0001-8899-0000-000000000000"

GUEST = r"""
for d in /sys/block/sd*; do
  n=$(basename "$d"); a=$(basename "$(readlink "$d/device")"); h=${a%%:*}
  v=$(readlink -f "/sys/class/scsi_host/host$h/device/..")
  kind=ide; [ -d "/sys/class/fc_host/host$h" ] && kind=fc
  echo "DISK $kind $n ADDR $a CLASS $(cat "$v/class_id") CHANNELS $(ls "$v/channels" | wc -l)" \
       "HWQ $(ls -d "$d"/mq/*/ | wc -l) MAXKB $(cat "$d/queue/max_hw_sectors_kb")"
  eval "DEV_$kind=/dev/$n"
done
for h in /sys/class/fc_host/host*; do
  [ -d "$h" ] && echo "FC_HOST PORT $(cat "$h/port_name") NODE $(cat "$h/node_name")"
done
for r in /sys/class/fc_remote_ports/*; do [ -d "$r" ] && echo "FC_RPORT $(basename "$r")"; done
for kind in ide fc; do
  eval "dev=\${DEV_$kind:-}"
  if [ -z "$dev" ]; then echo "FIO-$kind NO DISK"; continue; fi
  fio --name=v --filename="$dev" --direct=1 --ioengine=libaio --iodepth=8 --size=32M \
      --rw=randwrite --bs=4k-128k --verify=crc32c --verify_fatal=1 > /tmp/fio.out 2>&1 \
    && echo "FIO-$kind OK" || { cat /tmp/fio.out; echo "FIO-$kind FAILED"; }
done
"""


@pytest.mark.parametrize("kernel", ["debian-6.12", "debian-6.1"])
def test_ide_and_fc_controllers(kernel: str, run: Run, checks: Checks) -> None:
    ctls = [Controller("ide0", {"class": "ide", "instance": IDE_INSTANCE}),
            Controller("fc0", {"class": "fc", "port-wwn": PORT_WWN, "node-wwn": NODE_WWN,
                               "max-transfer": 1 << 20})]
    r = run(guest(kernel=kernel, vcpus=2, controllers=ctls, cmd=GUEST,
                  disks=[Disk({"backend": "ram", "size": "64M"}, 0), Disk({"backend": "ram", "size": "64M"}, 1)]))
    checks.boot_ok(r)
    for line in matches(r.output, "^(DISK|FC_|FIO-)"):
        print(f"  {line}")
    checks.has(r.output, r"^DISK ide sd[a-z]+ ADDR \d+:0:1:0 CLASS \{32412632-86cb-44a2-9b5c-50d1417354f5\} "
                         r"CHANNELS 1 HWQ 1 MAXKB 256$",
               "the IDE disk: target 1 (from the instance), LUN 0, one channel, one queue")
    checks.has(r.output, r"^DISK fc sd[a-z]+ ADDR \d+:0:0:0 CLASS \{2f9bcc4a-0069-4af3-b76b-6fd0be528cda\} "
                         r"CHANNELS 2 HWQ 2 MAXKB 512$",
               "the FC disk: a subchannel, a queue per vCPU, transfers capped at 512 KiB")
    checks.count(r.output, "^DISK ", 2, "two disks, no phantom")
    checks.has(r.output, f"^FC_HOST PORT 0x{PORT_WWN} NODE 0x{NODE_WWN}$", "fc_host shows the WWNs given")
    checks.count(r.output, "^FC_HOST ", 1, "one FC host")
    checks.has(r.output, r"^FC_RPORT rport-\d+:0-0$", "storvsc added its remote port")
    checks.has(r.output, "^FIO-ide OK$", "fio verify on the IDE disk")
    checks.has(r.output, "^FIO-fc OK$", "fio verify on the FC disk")
