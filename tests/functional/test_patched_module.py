"""The patched-driver path on stock bookworm 6.1: hv_storvsc built out of tree with
guest-patches/host-tagset.patch (scripts/build-module.sh --kernel debian-6.1) and booted in
place of the stock module. The guest must run our build (its version stamp, srcversion,
out-of-tree taint), the patch must show (blk-mq marks the hardware queues TAG_HCTX_SHARED),
a module parameter from the kernel command line must reach it, and data must survive fio's
verify. The same source rebuilt without a patch must load too and must not share tags."""

import os
import re
from typing import Dict, List

import pytest

from conftest import (Checks, Disk, ModuleBuild, Run, build_module, guest, matches, modinfo,
                      stock_module)
from guestlib import MODULE_PROBE
from hvmachine.paths import cache_dir

GUEST_CMD = "HVSTOR_FIO=1; " + MODULE_PROBE
PATCHES = ("host-tagset", "none")


def disks() -> List[Disk]:
    return [Disk({"backend": "ram", "size": "160M"})]


@pytest.fixture(scope="module")
def builds() -> Dict[str, ModuleBuild]:
    """The host-tagset build and the stock source rebuilt (patch none), for debian-6.1."""
    return {p: build_module("--kernel", "debian-6.1", p) for p in PATCHES}


def built(b: ModuleBuild, what: str) -> str:
    """The module's path; the test fails with the build's log when there is none."""
    if b.ko is None:
        pytest.fail(f"{what} was not built (status {b.rc}):\n{b.tail()}", pytrace=False)
    return b.ko


def test_builds(builds: Dict[str, ModuleBuild], checks: Checks) -> None:
    """Both builds exist, match the stock module's vermagic and carry their own stamps."""
    ko, none = builds["host-tagset"], builds["none"]
    checks.that(ko.ko is not None, "host-tagset module built")
    checks.that(none.ko is not None, "stock source rebuilt (patch none)")
    if ko.ko is None or none.ko is None:
        print("\n".join(b.tail(20) for b in (ko, none)))
        return
    stock = stock_module(os.path.join(cache_dir(), "guest", "debian-6.1", "pkg"))
    checks.that(stock is not None, "the 6.1 guest's stock hv_storvsc is where expected")
    stock = stock or ""
    checks.that(modinfo(ko.ko, "vermagic") != "" and modinfo(ko.ko, "vermagic") == modinfo(stock, "vermagic"),
                "vermagic matches the stock module's")
    checks.that(ko.info.get("version", "") != "", "the build carries a version stamp")
    checks.that(ko.info.get("srcversion", "") != "", "the build carries a srcversion")
    checks.that(ko.info.get("srcversion") != modinfo(stock, "srcversion"),
                "its srcversion differs from the stock module's")


def test_host_tagset(builds: Dict[str, ModuleBuild], run: Run, checks: Checks) -> None:
    """The patched build in a 4-vCPU guest with storvsc_max_hw_queues=2."""
    b = builds["host-tagset"]
    ko = built(b, "the host-tagset module")
    version, src = b.info.get("version", ""), b.info.get("srcversion", "")
    r = run(guest(kernel="debian-6.1", vcpus=4, ko=[ko], disks=disks(),
                  append=["hv_storvsc.storvsc_max_hw_queues=2"], cmd=GUEST_CMD))
    checks.boot_ok(r)
    checks.has(r.output, f"^VERSION {re.escape(version)}$", f"the loaded hv_storvsc is our build ({version})")
    checks.has(r.output, f"^SRCVERSION {re.escape(src)}$", "its srcversion is the build's")
    checks.has(r.output, "^TAINT .*O", "the kernel marks it out of tree")
    checks.has(r.output, "^HWQ 2$", "storvsc_max_hw_queues=2 from the command line reached it")
    checks.has(r.output, "^FLAGS .*TAG_HCTX_SHARED", "hardware queues share one tag set (the patch)")
    checks.has(r.output, "^FIO OK", "fio verify passed")
    print("\n".join("  " + ln for ln in matches(r.output, "^(VERSION|SRCVERSION|TAINT|HWQ|FLAGS) ")))


def test_stock_source_rebuilt(builds: Dict[str, ModuleBuild], run: Run, checks: Checks) -> None:
    """The unpatched rebuild: loaded, one hardware queue per vCPU, no shared tags."""
    b = builds["none"]
    ko = built(b, "the rebuilt stock source (patch none)")
    r = run(guest(kernel="debian-6.1", vcpus=4, ko=[ko], disks=disks(), cmd=GUEST_CMD))
    checks.boot_ok(r, "rebuilt stock source: guest command finished")
    checks.has(r.output, f"^VERSION {re.escape(b.info.get('version', ''))}$", "rebuilt stock source is loaded")
    checks.has(r.output, "^HWQ 4$", "rebuilt stock source: one hardware queue per vCPU")
    # The FLAGS line must be there for its lack of the flag to mean anything.
    checks.that(matches(r.output, "^FLAGS ") and not matches(r.output, "TAG_HCTX_SHARED"),
                "rebuilt stock source: tags not shared")
    checks.has(r.output, "^FIO OK", "rebuilt stock source: fio verify passed")
