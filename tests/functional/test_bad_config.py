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
# (message pattern, QEMU arguments) of each refusal.
REFUSALS: List[Tuple[str, List[str]]] = [
    ("vmbus-version '9.9' is not one of", ["-device", "hv-vmbus-bridge,vmbus-version=9.9"]),
    ("hypercall-port must be", ["-device", "hv-vmbus-bridge,hypercall-port=0"]),
    ("only one hv-vmbus-bridge", ["-device", "hv-vmbus-bridge", "-device", "hv-vmbus-bridge"]),
    ("instance.* doesn.t take value", ["-device", "hv-storvsc,instance=not-a-uuid"]),
    ("max-transfer must be", ["-device", "hv-storvsc,max-transfer=1000"]),
    ("hv-disk lun 0: .*nonexistent",
     ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,file=/nonexistent/disk.img"]),
    ("backend=ram needs size=", ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=ram"]),
    ("backend must be file, ram, null or drive",
     ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=tape,size=1M"]),
    ("give file=PATH, drive=ID", ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0"]),
    ("drive= takes the place of file= and backend=",
     ["-drive", "if=none,id=d,driver=null-co",
      "-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,drive=d,backend=null,size=1M"]),
    ("iothread= goes with drive=",
     ["-object", "iothread,id=io0",
      "-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=null,size=1M,iothread=io0"]),
    ("iothread= and iothread-vq-mapping= cannot both be set",
     ["-object", "iothread,id=io0",
      "-device", '{"driver":"hv-storvsc","iothread":"io0","%s":[{"iothread":"io0"}]}' % MAP]),
    (r'iothread-vq-mapping \(vq N is channel N, 3 channels\): IOThread "nosuch" object does not exist',
     ["-device", '{"driver":"hv-storvsc","max-subchannels":2,"%s":[{"iothread":"nosuch"}]}' % MAP]),
    ("missing vq 2 IOThread assignment",
     ["-object", "iothread,id=io0", "-object", "iothread,id=io1",
      "-device", '{"driver":"hv-storvsc","max-subchannels":2,"%s":'
                 '[{"iothread":"io0","vqs":[0]},{"iothread":"io1","vqs":[1]}]}' % MAP]),
    ("max-subchannels must be at most 256, not 300",
     ["-object", "iothread,id=io0",
      "-device", '{"driver":"hv-storvsc","max-subchannels":300,"%s":[{"iothread":"io0"}]}' % MAP]),
    ("vq index 3 .* must be less than num_queues 3",
     ["-object", "iothread,id=io0",
      "-device", '{"driver":"hv-storvsc","max-subchannels":2,"%s":[{"iothread":"io0","vqs":[0,1,2,3]}]}' % MAP]),
    ("Property 'hv-disk.drive' can't find value 'nosuch'",
     ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,drive=nosuch"]),
    ("lun 2 is already in use",
     ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,lun=2,backend=null,size=1M",
      "-device", "hv-disk,bus=s.0,lun=2,backend=null,size=1M"]),
    ("lun must be below", ["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,lun=200,backend=null,size=1M"]),
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
    rc, out = start_stopped(["-device", "hv-storvsc,id=s", "-device", "hv-disk,bus=s.0,backend=null,size=1M"])
    checks.that(rc == 0, "good settings start QEMU (exit 0 at the monitor's quit)")
    if rc != 0:
        print(f"  got rc={rc}: {out}")


@pytest.mark.parametrize("pattern,args", REFUSALS, ids=[p for p, _ in REFUSALS])
def test_refused(pattern: str, args: List[str], checks: Checks) -> None:
    rc, out = start_stopped(args)
    refused = rc == 1 and re.search(pattern, out) is not None
    checks.that(refused, f"refused: {pattern}")
    if not refused:
        print(f"  expected exit 1 and '{pattern}', got rc={rc}: {out}")
