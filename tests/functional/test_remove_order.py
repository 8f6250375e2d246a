"""A bug of the stock driver the device reproduces, and its fix: storvsc_remove() destroys
its error-handling workqueue before it removes the disks, so a capacity change the guest has
not seen yet, met by the SYNCHRONIZE CACHE that removing the disk sends, queues a rescan on
a destroyed workqueue (guest-patches/storvsc-remove-order.patch says more).

Per kernel (6.12 and 6.1), two boots with one file disk: the guest writes to it, the host
grows it over QMP while the guest sends it nothing, and the guest unloads hv_storvsc.
- The stock driver: the guest kernel reports a WARNING in __queue_work, or at times a NULL
  pointer dereference, with storvsc_on_channel_callback queueing work in the call trace
  (both kernels); the machine layer ends the boot at the report.
- The driver built with the patch: the unload is clean, the guest logs no report, and the
  disk's capacity change reached the guest (the unit attention was met: the host counted
  it).
Every wait ends on a console marker or the boot's end: the only clock is the hang guard."""

import os
from typing import Any, Optional, Tuple

import pytest

from conftest import Checks, Disk, Machine, Boot, build_module, guest, sparse_file, stats
from hvmachine.machine import BootResult

MIB = 1 << 20
PATCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "guest-patches", "storvsc-remove-order.patch")
CMD = r"""
dd if=/dev/zero of=/dev/sda bs=4k count=4 oflag=direct 2>/dev/null && echo WROTE
echo "WAIT-grow"; read -r _go </dev/ttyS0
rmmod hv_storvsc; echo "RMMOD-STATUS $?"
echo "WAIT-counted"; read -r _go </dev/ttyS0
"""


def unload_after_growth(boot: Boot, kernel: str, image: str, ko: Optional[str]) -> Tuple[BootResult, int]:
    """The boot, and the unit attentions the disk reported up to the unload (-1 when the
    boot ended before the guest unloaded the driver)."""
    m: Machine = boot(guest(kernel=kernel, vcpus=2, ko=[ko] if ko else [], cmd=CMD,
                            disks=[Disk({"id": "d0", "file": image})]))
    m.wait_console("WAIT-grow")
    m.qmp("qom-set", path="/machine/peripheral/d0", property="capacity", value=96 * MIB)
    m.console_input("go\n")
    attentions = -1
    if ko:
        m.wait_console("WAIT-counted")
        attentions = int(stats(m, "d0")["unit_attentions"])
        m.console_input("go\n")
    return m.finish(), attentions


@pytest.mark.parametrize("kernel", ["debian-6.12", "debian-6.1"])
def test_stock_driver_queues_on_a_destroyed_workqueue(boot: Boot, checks: Checks, kernel: str, tmp_path: Any) -> None:
    r, _ = unload_after_growth(boot, kernel, sparse_file(tmp_path / "d.img", 64 * MIB), None)
    checks.has(r.output, "^WROTE$", "the guest wrote to the disk")
    checks.that(r.failure is not None and r.failure.kind == "kernel",
                f"the boot ended at a guest kernel report ({r.failure.kind if r.failure else 'none'})")
    # The report with its call trace, from the guest's log or its console (the boot may end
    # before the log channel brought the whole report: an Oops reaches the console first).
    log = r.kernel_log + "\n" + "\n".join(r.console)
    start = min((i for i in (log.find("WARNING:"), log.find("BUG:")) if i >= 0), default=-1)
    report = log[start:] if start >= 0 else ""
    checks.that("queue_work" in report and "storvsc_on_channel_callback" in report,
                "its call trace is storvsc's completion queueing work (queue_work from "
                "storvsc_on_channel_callback)")
    print("\n".join("  " + ln for ln in report.splitlines()[:60]))


@pytest.mark.parametrize("kernel", ["debian-6.12", "debian-6.1"])
def test_patched_driver_unloads_cleanly(boot: Boot, checks: Checks, kernel: str, tmp_path: Any) -> None:
    b = build_module("--kernel", kernel, PATCH)
    checks.that(b.ko is not None, f"the patched module built for {kernel} (status {b.rc})")
    if b.ko is None:
        print(b.tail())
        return
    r, attentions = unload_after_growth(boot, kernel, sparse_file(tmp_path / "d.img", 64 * MIB), b.ko)
    checks.boot_ok(r)
    checks.that(attentions >= 1, f"the removal met the capacity change (unit attentions: {attentions})")
    checks.has(r.output, "^RMMOD-STATUS 0$", "hv_storvsc unloaded")
    checks.that(not r.noted, f"the guest kernel reported nothing ({r.noted[:3]})")
    checks.has(r.kernel_log.splitlines(), r"\[sda\] Synchronizing SCSI cache", "the disk's cache was flushed on removal")
