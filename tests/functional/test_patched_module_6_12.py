"""The patched-driver path on Debian trixie's 6.12 (scripts/build-module.sh --kernel
debian-6.12), and on a kernel given by paths, as a user's own build would be.

(a) guest-patches/host-tagset.patch built against trixie's 6.12 headers (adapted to gcc-12 and
    bookworm's glibc, see build-module.sh) loads in the debian-6.12 guest in place of the
    stock module: our version stamp and srcversion, out-of-tree taint, a module parameter
    from the command line, the hardware queues sharing tags (TAG_HCTX_SHARED), data intact
    under fio's verify.
(b) The own-kernel path: Debian's 6.12 vmlinuz and lib/modules tree from the cache given as
    plain paths (--kernel PATH --modules DIR), KDIR the unpacked headers (--kdir), the
    pristine source (--source: headers carry no .c), a patch of our own that changes a module
    parameter's default; the guest booted with that kernel, module tree and build runs that
    build (version, srcversion, the new default).
Plus the errors of the own-kernel path: no build tree, a tree for another release or without
a Makefile, a module tree of another kernel than the image, headers without --source, a build
whose vermagic differs from the stock module's."""

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List

import pytest

from conftest import (Checks, Disk, ModuleBuild, Run, build_module, guest, matches, modinfo,
                      stock_module)
from guestlib import MODULE_PROBE
from hvmachine.paths import cache_dir

VCPUS_PATCH = """\
Test patch: one subchannel per 2 vCPUs instead of 4 (visible as the parameter's default).

--- a/drivers/scsi/storvsc_drv.c
+++ b/drivers/scsi/storvsc_drv.c
@@ -342,7 +342,7 @@
 static u32 max_outstanding_req_per_channel;
 static int storvsc_change_queue_depth(struct scsi_device *sdev, int queue_depth);
 
-static int storvsc_vcpus_per_sub_channel = 4;
+static int storvsc_vcpus_per_sub_channel = 2;
 static unsigned int storvsc_max_hw_queues;
 
 module_param(storvsc_ringbuffer_size, int, S_IRUGO);
"""


@dataclass
class Build612:
    """The host-tagset build for debian-6.12 and where that kernel's files are."""
    build: ModuleBuild
    kver: str      # 6.12.117+deb13-amd64
    mods: str      # its lib/modules/<kver> in the cache
    kimg: str      # its vmlinuz in the cache
    stock: str     # the stock hv_storvsc there ('' when missing)

    @property
    def ko(self) -> str:
        if self.build.ko is None:
            pytest.fail(f"the host-tagset module for debian-6.12 was not built (status "
                        f"{self.build.rc}):\n{self.build.tail()}", pytrace=False)
        return self.build.ko


def disks() -> List[Disk]:
    return [Disk({"backend": "ram", "size": "160M"})]


@pytest.fixture(scope="module")
def a() -> Build612:
    """(a)'s build (scripts/build-module.sh --kernel debian-6.12 host-tagset) and the 6.12 files."""
    b = build_module("--kernel", "debian-6.12", "host-tagset")
    kver = b.info.get("kernel", "")
    pkg = os.path.join(cache_dir(), "guest", "debian-6.12", "pkg")
    mods = os.path.join(pkg, "lib", "modules", kver)
    return Build612(b, kver, mods, os.path.join(pkg, "boot", f"vmlinuz-{kver}"), stock_module(mods) or "")


def test_build(a: Build612, checks: Checks) -> None:
    """(a)'s build: built, for the guest's kernel, by gcc-12 against adapted headers."""
    if not checks.that(a.build.ko is not None, "host-tagset module built for debian-6.12"):
        print(a.build.tail())
        return
    ko, info = a.ko, a.build.info
    checks.that(os.path.isfile(a.stock) and os.path.isfile(a.kimg),
                "the 6.12 guest's module tree and image are where expected")
    checks.that(modinfo(ko, "vermagic") != "" and modinfo(ko, "vermagic") == modinfo(a.stock, "vermagic"),
                "vermagic matches the stock 6.12 module's")
    checks.that(info.get("vermagic") == modinfo(ko, "vermagic"), "build-info: vermagic line is the module's")
    checks.that(info.get("version", "") != "", "the build carries a version stamp")
    checks.that(info.get("srcversion", "") != "" and info.get("srcversion") != modinfo(a.stock, "srcversion"),
                "its srcversion differs from the stock module's")
    checks.that("CC_HAS_MIN_FUNCTION_ALIGNMENT" in info.get("adapted-config", ""),
                "built by gcc-12 against adapted headers")


def test_debian_6_12(a: Build612, run: Run, checks: Checks) -> None:
    """(a) the host-tagset build in a 4-vCPU debian-6.12 guest with storvsc_max_hw_queues=2."""
    version, src = a.build.info.get("version", ""), a.build.info.get("srcversion", "")
    r = run(guest(kernel="debian-6.12", vcpus=4, ko=[a.ko], disks=disks(),
                  append=["hv_storvsc.storvsc_max_hw_queues=2"], cmd="HVSTOR_FIO=1; " + MODULE_PROBE))
    checks.boot_ok(r, "(a) guest command finished")
    checks.has(r.output, f"^RELEASE {re.escape(a.kver)}$", f"(a) the guest runs {a.kver}")
    checks.has(r.output, f"^VERSION {re.escape(version)}$", f"(a) the loaded hv_storvsc is our build ({version})")
    checks.has(r.output, f"^SRCVERSION {re.escape(src)}$", "(a) its srcversion is the build's")
    checks.has(r.output, "^TAINT .*O", "(a) the kernel marks it out of tree")
    checks.has(r.output, "^HWQ 2$", "(a) storvsc_max_hw_queues=2 from the command line reached it")
    checks.has(r.output, "^FLAGS .*TAG_HCTX_SHARED", "(a) hardware queues share one tag set (the patch)")
    checks.has(r.output, "^FIO OK", "(a) fio verify passed")
    print("\n".join("  " + ln for ln in matches(r.output, "^(RELEASE|VERSION|SRCVERSION|TAINT|HWQ|FLAGS) ")))


def path_build_args(a: Build612, patch: str) -> List[str]:
    """build-module.sh's arguments for the kernel given by paths, with (a)'s headers and source."""
    return ["--kernel", a.kimg, "--modules", a.mods, "--kdir", a.build.info.get("kdir", ""),
            "--source", a.build.info.get("source", ""), patch]


def test_kernel_by_paths(a: Build612, run: Run, checks: Checks, tmp_path: Path) -> None:
    """(b) a patch of our own built for the kernel given by paths, and booted that way."""
    assert a.ko  # (a)'s build gives the headers and the source
    kdir, src = a.build.info.get("kdir", ""), a.build.info.get("source", "")
    checks.that(os.path.isfile(os.path.join(kdir, "Makefile")) and os.path.isfile(src),
                "build-info names the headers and the pristine source")
    patch = tmp_path / "vcpus-per-channel.patch"
    patch.write_text(VCPUS_PATCH)
    b = build_module(*path_build_args(a, str(patch)))
    if not checks.that(b.ko is not None, "(b) module built for the kernel given by paths"):
        print(b.tail())
        return
    assert b.ko is not None
    check_path_build(a, b, str(patch), checks)
    version = b.info.get("version", "")
    r = run(guest(kernel=a.kimg, modules=a.mods, vcpus=2, ko=[b.ko], disks=disks(), cmd=MODULE_PROBE))
    checks.boot_ok(r, "(b) guest command finished")
    checks.has(r.output, f"^RELEASE {re.escape(a.kver)}$", f"(b) the guest runs {a.kver} from the image path")
    checks.has(r.output, f"^VERSION {re.escape(version)}$", f"(b) the loaded hv_storvsc is the path build ({version})")
    checks.has(r.output, f"^SRCVERSION {re.escape(b.info.get('srcversion', ''))}$", "(b) its srcversion is the build's")
    checks.has(r.output, "^VPSC 2$", "(b) the patch is in: storvsc_vcpus_per_sub_channel defaults to 2")
    # The FLAGS line must be there for its lack of the flag to mean anything.
    checks.that(matches(r.output, "^FLAGS ") and not matches(r.output, "TAG_HCTX_SHARED"),
                "(b) stock tagging (no host-tagset patch)")
    print("\n".join("  " + ln for ln in matches(r.output, "^(RELEASE|VERSION|SRCVERSION|VPSC|FLAGS) ")))


def check_path_build(a: Build612, b: ModuleBuild, patch: str, checks: Checks) -> None:
    """(b)'s build: cached apart, its build-info right, not (a)'s, a second call cached."""
    assert b.ko is not None
    info = b.info
    checks.that(os.path.dirname(os.path.dirname(b.ko)) != os.path.dirname(os.path.dirname(a.ko)),
                "(b) it is cached apart from the Debian builds")
    checks.that(info.get("kernel") == a.kver and info.get("version", "") != "" and info.get("srcversion", "") != ""
                and info.get("vermagic") == modinfo(a.stock, "vermagic"),
                "(b) build-info: kernel, version, srcversion, vermagic")
    checks.that(info.get("srcversion") != a.build.info.get("srcversion"), "(b) the build is not (a)'s")
    checks.that(build_module(*path_build_args(a, patch)).ko == b.ko, "(b) a second call is answered from the cache")


def fails_with(want: str, *args: str) -> bool:
    """build-module.sh ARGS fails and says `want` (a regular expression) on stderr."""
    b = build_module(*args)
    ok = b.rc != 0 and re.search(want, b.log) is not None
    if not ok:
        print(f"build-module.sh {' '.join(args)}: status {b.rc}\n{b.tail(10)}")
    return ok


def fake_trees(a: Build612, work: Path) -> None:
    """A prepared tree of release 9.9.9-other (other/), a module tree of that release
    (lib/modules/9.9.9-other), and (a)'s headers as a symlinked copy renamed to it (renamed/)."""
    for d in ("other/include/config", "other/include/generated", "lib/modules/9.9.9-other"):
        (work / d).mkdir(parents=True)
    for f in ("other/Makefile", "other/Module.symvers", "other/include/generated/autoconf.h",
              "lib/modules/9.9.9-other/modules.dep"):
        (work / f).touch()
    kdir = a.build.info.get("kdir", "")
    shutil.copyfile(os.path.join(kdir, "include/config/auto.conf"), work / "other/include/config/auto.conf")
    (work / "other/include/config/kernel.release").write_text("9.9.9-other\n")
    subprocess.run(["cp", "-as", kdir, str(work / "renamed")], check=True)
    (work / "renamed/include/config/kernel.release").unlink(missing_ok=True)
    (work / "renamed/include/generated/utsrelease.h").unlink(missing_ok=True)
    (work / "renamed/include/generated/utsrelease.h").write_text('#define UTS_RELEASE "9.9.9-other"\n')


def test_own_kernel_errors(a: Build612, checks: Checks, tmp_path: Path) -> None:
    """Each mistake of the own-kernel path is refused with a message that names it."""
    assert a.ko  # (a)'s build gives the headers and the source
    kimg, mods, info = a.kimg, a.mods, a.build.info
    kdir, src = info.get("kdir", ""), info.get("source", "")
    # Debian's module tree links build to /usr/src/linux-headers-..., absent on this host.
    checks.that(fails_with("give --kdir", "--kernel", kimg, "--modules", mods, "none"),
                "error: no build tree (dangling MODULES/build) names --kdir")
    fake_trees(a, tmp_path)
    checks.that(fails_with("configured for release 9.9.9-other, but the kernel and --modules are",
                           "--kernel", kimg, "--modules", mods, "--kdir", str(tmp_path / "other"), "none"),
                "error: KDIR of another release")
    checks.that(fails_with("has no Makefile", "--kernel", kimg, "--modules", mods, "--kdir", str(tmp_path / "lib"),
                           "none"), "error: KDIR without a Makefile")
    checks.that(fails_with(f"is release {re.escape(a.kver)}, but --modules is for 9.9.9-other",
                           "--kernel", kimg, "--modules", str(tmp_path), "none"),
                "error: module tree of another kernel than the image")
    # The headers under another release name: the build runs, its vermagic cannot match.
    checks.that(fails_with("vermagic '9.9.9-other .*differs from the stock module's", "--kernel", kimg,
                           "--modules", mods, "--kdir", str(tmp_path / "renamed"), "--source", src, "none"),
                "error: vermagic of the build differs from the stock module's")
    checks.that(fails_with("give --source", "--kernel", kimg, "--modules", mods, "--kdir", kdir, "none"),
                "error: headers without --source")
    checks.that(fails_with("go with a kernel image path", "--kernel", "debian-6.12", "--modules", mods, "none"),
                "error: --modules without a kernel image path")
