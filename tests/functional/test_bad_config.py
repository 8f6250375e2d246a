"""Bad device settings are refused at startup with a clear message, not a crash.

No guest boots: QEMU starts with its vCPUs stopped (-S) and a monitor on stdin that reads
"quit". Settings it accepts get it to the monitor (exit 0), so no clock decides; settings it
refuses end it with exit status 1 and the message. The hang guard ends a QEMU that hangs on
its way there."""

import os
import re
import subprocess
from typing import List, Optional, Tuple

import pytest

from conftest import HANG_GUARD, Checks
from hvmachine.machine import FIRMWARE_DIRS

MAP = "iothread-vq-mapping"
B = ["-device", "hv-vmbus-bridge"]  # the bus every controller plugs into
CTL = ["-device", "hv-storvsc,id=s"]
DISK = "hv-disk,bus=s.0,backend=null,size=1M"
# (message pattern, QEMU arguments) of each refusal.
REFUSALS: List[Tuple[str, List[str]]] = [
    ("vmbus-version '9.9' is not one of", ["-device", "hv-vmbus-bridge,vmbus-version=9.9"]),
    ("hypercall-port must be", ["-device", "hv-vmbus-bridge,hypercall-port=0"]),
    ("only one hv-vmbus-bridge", ["-device", "hv-vmbus-bridge", "-device", "hv-vmbus-bridge"]),
    ("instance.* doesn.t take value", B + ["-device", "hv-storvsc,instance=not-a-uuid"]),
    ("max-transfer must be", B + ["-device", "hv-storvsc,max-transfer=1000"]),
    ("hv-disk lun 0: .*nonexistent",
     B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,file=/nonexistent/disk.img"]),
    ("backend=ram needs size=", B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=ram"]),
    ("backend must be file, ram, null or drive",
     B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=tape,size=1M"]),
    ("give file=PATH, drive=ID", B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0"]),
    ("drive= takes the place of file= and backend=",
     B + ["-drive", "if=none,id=d,driver=null-co",
      "-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,drive=d,backend=null,size=1M"]),
    ("iothread= goes with drive=",
     B + ["-object", "iothread,id=io0",
      "-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=null,size=1M,iothread=io0"]),
    ("iothread= and iothread-vq-mapping= cannot both be set",
     B + ["-object", "iothread,id=io0",
      "-device", '{"driver":"hv-storvsc","iothread":"io0","%s":[{"iothread":"io0"}]}' % MAP]),
    (r'iothread-vq-mapping \(vq N is channel N, 3 channels\): IOThread "nosuch" object does not exist',
     B + ["-device", '{"driver":"hv-storvsc","max-subchannels":2,"%s":[{"iothread":"nosuch"}]}' % MAP]),
    ("missing vq 2 IOThread assignment",
     B + ["-object", "iothread,id=io0", "-object", "iothread,id=io1",
      "-device", '{"driver":"hv-storvsc","max-subchannels":2,"%s":'
                 '[{"iothread":"io0","vqs":[0]},{"iothread":"io1","vqs":[1]}]}' % MAP]),
    ("max-subchannels must be at most 256, not 300",
     B + ["-object", "iothread,id=io0",
      "-device", '{"driver":"hv-storvsc","max-subchannels":300,"%s":[{"iothread":"io0"}]}' % MAP]),
    ("vq index 3 .* must be less than num_queues 3",
     B + ["-object", "iothread,id=io0",
      "-device", '{"driver":"hv-storvsc","max-subchannels":2,"%s":[{"iothread":"io0","vqs":[0,1,2,3]}]}' % MAP]),
    ("Property 'hv-disk.drive' can't find value 'nosuch'",
     B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,drive=nosuch"]),
    ("lun 2 is already in use",
     B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,lun=2,backend=null,size=1M",
      "-device", "hv-disk,bus=s.0,lun=2,backend=null,size=1M"]),
    ("lun must be below", B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,lun=200,backend=null,size=1M"]),
    ("No 'hv-vmbus' bus found for device 'hv-storvsc'", ["-device", "hv-storvsc"]),
    ("perf=nosuch: no -object hv-disk-model with id 'nosuch'", B + CTL + ["-device", f"{DISK},perf=nosuch"]),
    ("perf=f0: no -object hv-disk-model with id 'f0'",
     ["-object", "hv-fault,id=f0,error=busy"] + B + CTL + ["-device", f"{DISK},perf=f0"]),
    ("fault=nosuch: no -object hv-fault with id 'nosuch'", B + CTL + ["-device", f"{DISK},fault=nosuch"]),
    ("vm-perf=nosuch: no -object hv-vm-caps with id 'nosuch'", ["-device", "hv-vmbus-bridge,vm-perf=nosuch"]),
    ("hv-disk-model: .*iops=lots", ["-object", "hv-disk-model,id=m,iops=lots"]),
    ("hv-disk-model: name and timeline are a disk's own", ["-object", "hv-disk-model,id=m,iops=9,timeline=/tmp/t"]),
    ("hv-disk-model: the id 'none' is taken", ["-object", "hv-disk-model,id=none,iops=9"]),
    ("rerror= and werror= go with drive=", B + CTL + ["-device", f"{DISK},werror=stop"]),
    ("hv-fault: fault: error=fire is not one of", ["-object", "hv-fault,id=f,error=fire"]),
    ("-object hv-vm-caps,id=v,max-outstanding=4: Invalid parameter 'max-outstanding'", ["-object", "hv-vm-caps,id=v,max-outstanding=4"]),
]


def start_stopped(args: List[str]) -> Tuple[Optional[int], str]:
    """QEMU with `args`, its vCPUs stopped, its monitor reading "quit": its exit status
    (None when the hang guard ended it) and its output."""
    cmd = [os.environ["QEMU"], "-machine", "q35", "-accel", "tcg", "-nodefaults", "-display", "none",
           "-S", "-monitor", "stdio"]
    for fw in FIRMWARE_DIRS:
        if os.path.isdir(fw):
            cmd += ["-L", fw]
    try:
        r = subprocess.run(cmd + args, input="quit\n", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", timeout=HANG_GUARD, check=False)
    except subprocess.TimeoutExpired as e:
        out = e.output if isinstance(e.output, str) else (e.output or b"").decode(errors="replace")
        return None, f"QEMU hung with these settings (ended after {HANG_GUARD:g}s): {out}"
    return r.returncode, r.stdout


def test_good_settings_start(checks: Checks) -> None:
    """The control: good settings are accepted."""
    rc, out = start_stopped(B + ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=null,size=1M"])
    checks.that(rc == 0, "good settings start QEMU (exit 0 at the monitor's quit)")
    if rc != 0:
        print(f"  got rc={rc}: {out}")
    # The same with every setting given as objects, two disks sharing one model.
    rc, out = start_stopped(["-object", "hv-vm-caps,id=vm,profile=Standard_D16s_v3",
                             "-object", "hv-disk-model,id=p10,profile=premium-p10,burst=off,latency-read=2ms",
                             "-object", "hv-fault,id=f0,error=medium,ops=read,lba=0-99",
                             "-device", "hv-vmbus-bridge,vm-perf=vm"] + CTL +
                            ["-device", f"{DISK},perf=p10,fault=f0", "-device", f"{DISK},lun=1,perf=p10"])
    checks.that(rc == 0, "settings as objects start QEMU")
    if rc != 0:
        print(f"  got rc={rc}: {out}")


@pytest.mark.parametrize("pattern,args", REFUSALS, ids=[p for p, _ in REFUSALS])
def test_refused(pattern: str, args: List[str], checks: Checks) -> None:
    rc, out = start_stopped(args)
    refused = rc == 1 and re.search(pattern, out) is not None
    checks.that(refused, f"refused: {pattern}")
    if not refused:
        print(f"  expected exit 1 and '{pattern}', got rc={rc}: {out}")
