"""The KVM path as far as a host can check it without running a stock guest.

With -accel kvm the bridge installs its MSR filter range and replaces the CPUID leaves of
every vCPU (KVM must accept both ioctls), then the guest runs. Hosts whose KVM cannot run
stock kernels stop there with an emulation failure, as they do without the device: that is
only noted. Skipped where /dev/kvm is missing or KVM cannot be initialized. The guest has no
command (the init's shell, on the serial console), so QEMU is driven here directly; it runs
until the guest has connected to VMBus, failed, or reached its init's shell, or QEMU ends.
No clock decides how far it gets: a guest that printed nothing for the machine layer's
silence (600 s) has stopped, and the hang guard ends one that keeps printing without
getting anywhere."""

import os
import re
import select
import subprocess
import time
from typing import List

import pytest

from conftest import Checks, Controller, Disk, Guest, guest
from hvmachine import assets
from hvmachine.machine import base_args

ENDED = re.compile(r"Vmbus version|KVM internal error|emulation failure|Kernel panic|hvstor-init: no /hvstor/cmd")
NO_KVM = re.compile(r"Could not access KVM|failed to initialize kvm")


def kvm_guest() -> Guest:
    """2 vCPUs, 512 MiB, qemu64 CPU, one controller with a 1 GiB null disk; no command."""
    return guest(kernel="debian-6.12", accel="kvm", cpu="qemu64", vcpus=2, mem="512M",
                 controllers=[Controller("s")], disks=[Disk({"backend": "null", "size": "1G"})],
                 wait_disks=0)


def test_kvm_setup(checks: Checks) -> None:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("no usable /dev/kvm")
    g = kvm_guest()
    g.validate()
    a = assets.prepare(g)
    args = [os.environ["QEMU"]] + base_args(g, a.kernel, a.initrd, "console=ttyS0 panic=-1")
    args += ["-nographic", "-serial", "stdio"] + g.device_args()
    out = run_until_ended(args, g)
    print(out)
    if NO_KVM.search(out):
        pytest.skip("KVM cannot be initialized here")
    checks.that("hv-vmbus-bridge: the KVM path is unverified" in out,
                "bridge set up under KVM (MSR filter range and CPUID leaves accepted)")
    checks.that(not re.search(r"hv-vmbus-bridge: (KVM refused|setting the Hyper-V CPUID)", out),
                "no setup error from the bridge")
    if "Hypervisor detected: Microsoft Hyper-V" in out:
        checks.that("Vmbus version" in out, "guest connects to VMBus under KVM")
    else:
        first = re.search(r"^.*(KVM internal error|emulation failure|panic).*$", out, re.M)
        print(f"  note: the guest did not get far under this KVM: {first.group(0) if first else 'no output'}")


def run_until_ended(args: List[str], g: Guest) -> str:
    """Runs QEMU until its output shows how far the guest got (ENDED) or QEMU ends, then
    ends it (TERM, KILL 10 s later); all it printed."""
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=consider-using-with
                         stderr=subprocess.STDOUT)
    assert p.stdout is not None
    fd = p.stdout.fileno()
    chunks: List[bytes] = []
    began = last = time.monotonic()
    deadline = g.timeout or float("inf")
    while True:
        now = time.monotonic()
        if now - last >= g.silence:
            print(f"  note: the guest printed nothing for {g.silence:g} s")
            break
        if now - began >= deadline:
            print("  note: the hang guard ended the guest")
            break
        ready, _, _ = select.select([fd], [], [], min(g.silence - (now - last), deadline - (now - began)))
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
        last = time.monotonic()
        if ENDED.search(b"".join(chunks).decode(errors="replace")):
            break
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    chunks.append(p.stdout.read())
    p.stdout.close()
    return b"".join(chunks).decode(errors="replace")
