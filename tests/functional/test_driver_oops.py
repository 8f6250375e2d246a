"""A patched hv_storvsc that dereferences NULL in storvsc_probe ends its boot at the Oops,
with the Oops quoted, whatever the deadline: through `./hvstor run` (the run fails with the
kernel's report as its reason, not at the runner's deadline) and through `./hvstor boot`
(exit status 125, no --timeout given). Before the machine layer watched the kernel's log,
the guest's init kept its heartbeat and waited for disks, and both waited for their
deadline (or for ever)."""

import json
import os
import subprocess
import sys

from conftest import ROOT, Checks

PATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patches", "null-deref-in-probe.patch")
OOPS = "BUG: kernel NULL pointer dereference"

SPEC = """\
[experiment]
description = a driver that oopses in its probe
vcpus = 2
mem = 512M
repetitions = 1
kernel = debian-6.12
fio = <<END
[global]
direct=1
time_based=1
runtime=5
[r]
ioengine=libaio
iodepth=4
rw=randread
bs=4k
size=64M
END

[disk]
backend = null
size = 1G

[variant oops]
patch = {patch}
"""


def hvstor(*args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([os.path.join(ROOT, "hvstor"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=False)


def test_a_run_ends_at_the_oops(tmp_path: "os.PathLike[str]", checks: Checks) -> None:
    spec = os.path.join(str(tmp_path), "oops.exp")
    with open(spec, "w", encoding="utf-8") as f:
        f.write(SPEC.format(patch=PATCH))
    out = os.path.join(str(tmp_path), "res")
    r = hvstor("run", spec, "--out", out)
    print(r.stderr[-6000:], file=sys.stderr)
    checks.that(r.returncode == 3, f"the run failed (exit 3, got {r.returncode})")
    with open(os.path.join(out, "runs", "oops", "rep1", "run.json"), encoding="utf-8") as f:
        run = json.load(f)
    checks.that(run["why"].startswith("the guest kernel reported a BUG: " + OOPS),
                f"the run's reason is the kernel's report, not a deadline ({run['why']})")
    checks.that(OOPS in r.stderr and "storvsc_probe" in r.stderr, "the report quotes the Oops and where it was")
    with open(os.path.join(out, "runs", "oops", "rep1", "dmesg.txt"), encoding="utf-8") as f:
        checks.that(OOPS in f.read(), "the run keeps the guest kernel's whole log, the Oops in it")


def test_a_boot_ends_at_the_oops(checks: Checks) -> None:
    build = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build-module.sh"), "--kernel", "debian-6.12",
                            PATCH], stdout=subprocess.PIPE, text=True, check=False)
    ko = build.stdout.strip().splitlines()[-1] if build.stdout.strip() else ""
    checks.that(build.returncode == 0 and os.path.isfile(ko), "the patched module builds")
    r = hvstor("boot", "--kernel", "debian-6.12", "--ko", ko, "--disk", "backend=null,size=1G",
               "--cmd", "echo NEVER-REACHED")
    print(r.stderr[-6000:], file=sys.stderr)
    checks.that(r.returncode == 125, f"./hvstor boot exits 125 (got {r.returncode})")
    checks.that("the guest kernel reported a BUG: " + OOPS in r.stderr, "it says the kernel reported a BUG")
    checks.that("storvsc_probe" in r.stderr, "it quotes the report's lines")
    checks.that("NEVER-REACHED" not in r.stdout, "the command never ran")
