"""Which functions of hv_storvsc ran, on stock kernels: kprobe events armed before the module
loads count each function's hits (scripts/hvmachine/coverage.py). A boot that writes to the
disk and unloads the driver must show probe, queuecommand and remove as run, and the host
reset handler (nothing provokes one) as not run."""

import os
from typing import Any

import pytest

from conftest import Checks, Disk, Run, guest

CMD = ("dd if=/dev/zero of=/dev/sda bs=4k count=16 oflag=direct 2>/dev/null && echo WROTE\n"
       "rmmod hv_storvsc && echo UNLOADED")


@pytest.mark.parametrize("kernel", ["debian-6.12", "debian-6.1"])
def test_functions_that_ran(run: Run, checks: Checks, kernel: str, tmp_path: Any) -> None:
    r = run(guest(kernel=kernel, disks=[Disk({"backend": "ram", "size": "64M"})], cmd=CMD, results=True,
                  coverage="hv_storvsc"), results_dir=os.path.join(str(tmp_path), "res"))
    checks.boot_ok(r)
    checks.has(r.output, "^WROTE$", "the guest wrote to the disk")
    checks.has(r.output, "^UNLOADED$", "and unloaded the driver")
    cov = r.coverage or {}
    print({f: h for f, h in cov.items()})
    checks.that(len(cov) >= 15, f"the module's functions are listed ({len(cov)})")
    lost = [f for f, h in cov.items() if h == -2]
    refused = [f for f, h in cov.items() if h == -1]
    checks.that(not lost, f"every function has a count or a refusal the kernel logged (no count: {lost})")
    checks.that(len(refused) <= 2, f"few refusals: __exit and notrace helpers ({refused})")
    for fn in ("storvsc_probe", "storvsc_queuecommand", "storvsc_on_channel_callback", "storvsc_remove"):
        checks.that(cov.get(fn, 0) > 0, f"{fn} ran")
    checks.that(cov.get("storvsc_queuecommand", 0) >= 16, "queuecommand ran once per write at least")
    checks.that(cov.get("storvsc_host_reset_handler") == 0, "the host reset handler did not run")
