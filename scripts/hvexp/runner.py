"""Runs an experiment: every variant x repetition in its own guest (the machine layer,
scripts/hvmachine), checks that each guest ran what its variant asked for, then the report.

With snapshot = on each variant boots once, up to the moment its disks are ready, and is
saved there (runs/<variant>/snapshot/); every repetition then goes on from that snapshot in
a QEMU of its own, on copies of the scratch images as they were at the save. Each run says
how long it took from its start to fio's start (boot to first I/O)."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from hvmachine.assets import AssetError
from hvmachine.coverage import CoverageError
from hvmachine.guest import GuestError
from hvmachine.machine import BootError, BootFailed, BootResult, Machine, RESULTS_PORT, KMSG_PORT
from hvmachine.qemu import QemuError, qemu_binary

from . import plan as planmod
from . import report as reportmod
from . import shards as shardmod
from . import timeline as timelinemod
from . import verdicts
from .params import param_matches
from .plan import ROOT
from .results import Row
from .timeline import FIO_START

EXIT_OK, EXIT_EXPECT, EXIT_USAGE, EXIT_RUN = 0, 1, 2, 3
SNAPSHOT_POINT = "HVSTOR-SNAPSHOT-POINT"   # guest-scripts/experiment.sh.in


def log(msg: str) -> None:
    print(f"[hvstor {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


class RunnerError(Exception):
    pass


def cache_dir() -> str:
    return os.environ.get("HVSTOR_CACHE") or os.path.join(ROOT, ".cache")


def build_module(variant: str, kernel: str, modules: str, kdir: str, patch: str,
                 source: str = "") -> tuple[str, dict[str, str]]:
    """scripts/build-module.sh; returns (ko path, build-info as a dict)."""
    cmd = ["bash", os.path.join(ROOT, "scripts", "build-module.sh"), "--kernel", kernel]
    if modules:
        cmd += ["--modules", modules]
    if kdir:
        cmd += ["--kdir", kdir]
    if source:
        cmd += ["--source", source]
    cmd.append(patch)
    log(f"variant {variant}: building hv_storvsc with {patch} for {os.path.basename(kernel)}")
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise RunnerError(f"variant {variant}: building the module failed (scripts/build-module.sh, output above)")
    ko = lines[-1]
    info = {}
    try:
        with open(os.path.join(os.path.dirname(ko), "build-info"), encoding="utf-8") as f:
            for ln in f:
                k, eq, v = ln.rstrip("\n").partition("=")
                if eq:
                    info[k] = v
    except OSError:
        raise RunnerError(f"variant {variant}: {ko} has no build-info beside it") from None
    return ko, info


def modinfo(ko: str, field: str) -> str:
    r = subprocess.run(["modinfo", "-F", field, ko], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RunnerError(f"modinfo cannot read {ko}: {r.stderr.strip()}")
    return r.stdout.strip()


def shq(a: str) -> str:
    return a if re.fullmatch(r"[A-Za-z0-9_./=,:+@%-]+", a) else shlex.quote(a)


def dry_run(plan: planmod.Plan) -> None:
    """What each variant would boot: its guest as the machine layer describes it, QEMU's
    device arguments, and the guest script."""
    for v in plan.order:
        var = plan.variants[v]
        g = plan.guest(v, "RUN")
        print(f"== variant {v}: {var.summary}")
        print(f"kernel {g.kernel}" + (f" (modules {g.modules})" if g.modules else "") +
              f", {g.vcpus} vCPUs, {g.mem}" + (f", module {g.ko[0]}" if g.ko else "") +
              f", deadline {g.timeout:g}s" + (f", initramfs adds {' '.join(g.initramfs_modules)}" if g.initramfs_modules else ""))
        print(f"kernel command line: {g.kernel_cmdline(RESULTS_PORT, KMSG_PORT)}")
        print("QEMU: " + " ".join(shq(a) for a in g.device_args() + g.qemu_args))
    print(f"== guest script (variant {plan.order[0]})")
    print(plan.scripts[plan.order[0]], end="")


# --- checks of one run -----------------------------------------------------------------
def check_run(var: planmod.Variant, res: str) -> Optional[str]:
    """Why a run's results are not what the variant asked for; None when fine."""
    h = reportmod.header(os.path.join(res, "header"))
    if not h:
        return "the guest wrote no header"
    if var.device == "scsi_debug":
        why = _check_scsi_debug(var, h)
    elif var.device == "hv-storvsc":
        why = _check_module(var, h) or _check_params(var, h)
    else:
        why = None                          # virtio-scsi: nothing of ours to check in the guest
    if why:
        return why
    why = _check_verdict_facts(var, res)
    if why:
        return why
    fio = os.path.join(res, "fio.json")
    if not os.path.isfile(fio) or os.path.getsize(fio) == 0:
        return "no fio.json"
    return None


def _check_verdict_facts(var: planmod.Variant, res: str) -> Optional[str]:
    """A run fails when fio failed and no guest verdict judges fio's errors, or when a
    disk is gone at the end that the timeline did not remove and no verdict judges."""
    facts = reportmod.header(os.path.join(res, "verdicts"))
    if not facts:
        return None                         # an older guest script: nothing to judge
    st = facts.get("fio.exit", "0")
    if st != "0" and not var.fio_judged:
        return f"fio exited with status {st} (no expect line judges fio's errors: see fio.out)"
    for k, val in sorted(facts.items()):
        m = re.fullmatch(r"lun\.([0-9]+)\.present", k)
        if m and val == "no" and int(m.group(1)) not in var.may_go | var.presence_judged:
            return (f"the guest lost its disk at LUN {m.group(1)}: it is gone at the end, and neither the "
                    "timeline removed it nor an expect line expects it gone")
    return None


def _check_scsi_debug(var: planmod.Variant, h: dict[str, str]) -> Optional[str]:
    if h.get("scsi_debug.loaded") != "yes":
        return "scsi_debug is not loaded in the guest"
    for k in ("submit_queues", "host_max_queue", "max_queue", "ndelay"):
        if k in var.scsi_debug and h.get(f"scsi_debug.{k}") != var.scsi_debug[k]:
            return f"scsi_debug parameter {k} is '{h.get('scsi_debug.' + k, '')}' in the guest, the variant sets {var.scsi_debug[k]}"
    return None


def _check_module(var: planmod.Variant, h: dict[str, str]) -> Optional[str]:
    if h.get("module.loaded") != "yes":
        return "hv_storvsc is not loaded in the guest"
    got = h.get("module.version", "")
    if var.want_version:
        if got != var.want_version:
            return f"the guest loaded hv_storvsc '{got or 'stock'}', not the module built for this variant ({var.want_version})"
    elif var.ko:
        if var.want_srcversion and h.get("module.srcversion") != var.want_srcversion:
            return (f"the guest loaded hv_storvsc with srcversion '{h.get('module.srcversion', '')}', "
                    f"not {var.ko} ({var.want_srcversion})")
        if not var.want_srcversion and "O" not in h.get("module.taint", ""):
            return f"the guest's hv_storvsc is not out of tree: {var.ko} was not loaded"
    elif got:
        return f"the guest loaded an out-of-tree hv_storvsc ({got}), the variant wants the stock one"
    return None


def _check_params(var: planmod.Variant, h: dict[str, str]) -> Optional[str]:
    """Each hv_storvsc parameter reads back as the kernel parsed what the variant set (a
    bool set as 1 reads Y)."""
    for p in var.params:
        k, _, val = p.partition("=")
        if k.startswith("hv_storvsc."):
            k = k[len("hv_storvsc."):]
        elif "." in k:
            continue
        got = h.get(f"param.{k}")
        if got is None or not param_matches(val, got):
            return f"hv_storvsc parameter {k} is '{got or ''}' in the guest, the variant sets {val}"
    return None


def failure_text(v: str, rep: int, run_dir: str, why: str) -> str:
    """What a person needs of a failed run: the reason, then what the machine layer saw
    (boot.txt: QEMU's output, the kernel's report, the console's end), the guest header."""
    which = f"repetition {rep}" if rep else "the boot its repetitions go on from (snapshot = on)"
    out = ["", f"[hvstor] error: {v}, {which}: {why}"]
    for name, title in (("boot.txt", "the boot"), ("output.log", "the guest command's last lines")):
        path = os.path.join(run_dir, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        if name == "output.log":
            lines = lines[-25:]
        out += [f"--- {title} ({path}) ---"] + lines
    hdr = os.path.join(run_dir, "results", "header")
    if os.path.isfile(hdr):
        with open(hdr, encoding="utf-8", errors="replace") as f:
            out += ["--- guest header ---"] + f.read().splitlines()
    out.append("---")
    return "\n".join(out)


# --- one run ---------------------------------------------------------------------------
@dataclass
class RunStatus:
    status: str                  # ok or failed
    why: str
    seconds: float
    rc: int
    start: str = "boot"          # boot, or snapshot: the run went on from its variant's snapshot
    first_io: Optional[float] = None   # seconds from the run's start to fio's start
    snapshot_boot: Optional[float] = None  # snapshot: seconds the variant's one boot took to its snapshot point

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "why": self.why, "seconds": self.seconds, "rc": self.rc,
                "start": self.start, "first_io": self.first_io, "snapshot_boot": self.snapshot_boot}


@dataclass
class Booted:
    """How one run's boot went: its result (None: it did not start), why it failed to start,
    and the seconds from its start to fio's start (None: fio did not start)."""
    result: Optional[BootResult]
    why: str = ""
    first_io: Optional[float] = None


def boot_run(plan: planmod.Plan, v: str, run_dir: str, qemu: str, snap: Optional[str] = None) -> Booted:
    """Boots one run of variant v, or goes on from its snapshot in `snap`; its files in run_dir."""
    var = plan.variants[v]
    load = [subprocess.Popen(["nice", "-n", "19", "sh", "-c", "while :; do :; done"])  # pylint: disable=consider-using-with
            for _ in range(var.host_load)]
    try:
        _scratch_images(var, run_dir, snap)
        with open(os.path.join(run_dir, "output.log"), "w", encoding="utf-8") as out:
            t0 = time.monotonic()
            m = Machine(plan.guest(v, run_dir), run_dir, qemu=qemu, name=f"{v}-rep",
                        console_log=os.path.join(run_dir, "console.log"),
                        results_dir=os.path.join(run_dir, "results"), restore=snap,
                        on_output=lambda line: print(line, file=out, flush=True))
            with m:
                if snap:
                    m.console_input("go\n")   # the guest waits at its snapshot point
                first_io = _first_io(m, t0)
                done = _drive_timeline(m, plan, v)
                r = m.finish()
            _save(run_dir, "timeline.json", [d.as_json() for d in done] if done else None)
            _save(run_dir, "coverage.json", r.coverage)
            _save(run_dir, "lines.json", verdicts.Lines("storvsc_drv.c", r.lines, var.changed).as_json()
                  if r.lines is not None else None)
            return Booted(r, "", first_io)
    except (BootError, AssetError, QemuError, GuestError, CoverageError, RunnerError) as e:
        return Booted(None, str(e))
    finally:
        for p in load:
            p.kill()
            p.wait()
        for i in var.hw.scratch:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(run_dir, f"disk{i}.img"))


def _scratch_images(var: planmod.Variant, run_dir: str, snap: Optional[str]) -> None:
    """The run's scratch images: empty ones of the disks' sizes, or copies of those its
    snapshot saved (sparse: only what the guest wrote before the save takes room)."""
    for i, size in var.hw.scratch.items():
        img = os.path.join(run_dir, f"disk{i}.img")
        if snap:
            r = subprocess.run(["cp", "--sparse=always", os.path.join(snap, f"disk{i}.img"), img],
                               capture_output=True, text=True, check=False)
            if r.returncode != 0:
                raise RunnerError(f"copying the snapshot's scratch image of disk {i}: {r.stderr.strip()}")
        else:
            with open(img, "wb") as f:
                f.truncate(size)


def _first_io(m: Machine, t0: float) -> Optional[float]:
    """Seconds from t0 to the guest's word that fio starts; None when the boot ended before."""
    try:
        m.wait_console(FIO_START)
    except BootFailed:
        return None
    return time.monotonic() - t0


# --- the snapshot a variant's runs go on from (snapshot = on) --------------------------
def snapshot_dir(out: str, v: str) -> str:
    return os.path.join(out, "runs", v, "snapshot")


def take_snapshot(plan: planmod.Plan, v: str, out: str, qemu: str) -> tuple[Optional[float], str]:
    """Boots variant v once up to its snapshot point and saves it, with its scratch images,
    in snapshot_dir(); (seconds from the start to the snapshot point, why it failed)."""
    folder = snapshot_dir(out, v)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    ok, took, failed = False, 0.0, ""
    try:
        _scratch_images(plan.variants[v], folder, None)
        with open(os.path.join(folder, "output.log"), "w", encoding="utf-8") as o:
            t0 = time.monotonic()
            m = Machine(plan.guest(v, folder), folder, qemu=qemu, name=f"{v}-snapshot",
                        console_log=os.path.join(folder, "boot-console.log"),
                        results_dir=os.path.join(folder, "results"),
                        on_output=lambda line: print(line, file=o, flush=True))
            with m:
                try:
                    m.wait_console(SNAPSHOT_POINT)
                    took = time.monotonic() - t0
                    m.snapshot(folder)
                except BootFailed as e:
                    failed = str(e)
                r = m.finish()
        with open(os.path.join(folder, "boot.txt"), "w", encoding="utf-8") as f:
            f.write(r.describe() + "\n")
        if failed or not r.ok:
            # The boot's end (with the guest command's reason), else why the wait or save failed.
            why = None if r.ok else _why_failed(r, os.path.join(folder, "results"))
            return None, why or failed or "the boot did not end in a snapshot"
        ok = True
        return took, ""
    except (BootError, AssetError, QemuError, GuestError, CoverageError, OSError) as e:
        return None, str(e)
    finally:
        if not ok:
            discard_snapshot(folder)


def discard_snapshot(folder: str) -> None:
    """Frees what a snapshot holds beside its logs: QEMU's state and the scratch images."""
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if name == "state" or re.fullmatch(r"disk[0-9]+\.img", name):
            os.unlink(os.path.join(folder, name))


def _drive_timeline(m: Machine, plan: planmod.Plan, v: str) -> list[timelinemod.Done]:
    """The timeline's host events on the running guest (none without a timeline); a boot
    that ends before they are done is judged by finish()."""
    events = plan.variants[v].timeline
    if not events:
        return []
    try:
        return timelinemod.drive(m, events, plan.targets(v), log)
    except BootFailed as e:
        log(f"{v}: timeline stopped: {e}")
        return []


def _save(run_dir: str, name: str, data: object) -> None:
    if data is not None:
        with open(os.path.join(run_dir, name), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)


def run_one(plan: planmod.Plan, v: str, rep: int, out: str, qemu: str,
            snap_boot: Optional[float] = None) -> tuple[dict[str, Any], Optional[list[Row]], str]:
    """One run; snap_boot (the seconds its variant's snapshot took): it goes on from that snapshot."""
    var = plan.variants[v]
    run_dir = os.path.join(out, "runs", v, f"rep{rep}")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    t0 = time.monotonic()
    booted = boot_run(plan, v, run_dir, qemu, snapshot_dir(out, v) if snap_boot is not None else None)
    r, why = booted.result, booted.why
    res = os.path.join(run_dir, "results")
    rc = 125 if r is None else r.exit_code
    if r is not None:
        with open(os.path.join(run_dir, "boot.txt"), "w", encoding="utf-8") as f:
            f.write(r.describe() + "\n")
        for note in r.notes():
            log(f"{v}, repetition {rep}: note: {note}")
        why = _why_failed(r, res) or check_run(var, res) or ""
    rows = None
    if not why:
        try:
            rows = reportmod.load_run_dir(run_dir)
        except reportmod.ResultError as e:
            why = str(e)
    status = RunStatus("failed" if why else "ok", why, time.monotonic() - t0, rc,
                       "snapshot" if snap_boot is not None else "boot", booted.first_io, snap_boot)
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as f:
        json.dump(status.as_json(), f)
    return status.as_json(), rows, run_dir


def _why_failed(r: BootResult, res: str) -> Optional[str]:
    """Why a boot did not give a run: the machine layer's reason, or the guest command's."""
    if r.failure is not None:
        return r.failure.message
    if r.status == 0:
        return None
    err = os.path.join(res, "error")
    if os.path.isfile(err) and os.path.getsize(err):
        with open(err, encoding="utf-8", errors="replace") as f:
            return "the guest command failed: " + f.read().strip()
    return f"the guest command exited with status {r.status}"


def figures_line(rows: list[Row], scale: float) -> str:
    return "; ".join(f"{r['job']} {r['dir']} {r['iops'] * scale:.0f} IOPS {r['bw_bytes'] * scale / 1e6:.1f} MB/s "
                     f"{r['clat_mean_ns'] / scale / 1e6:.2f} ms" for r in rows)


def hw_queues(run_dir: str) -> str:
    h = reportmod.header(os.path.join(run_dir, "results", "header"))
    return next((val for k, val in h.items() if re.fullmatch(r"disk\.[a-z]+\.hw_queues", k)), "?")


@dataclass
class _Progress:
    """What the runs of an experiment share: how many are done, the first failure."""
    total: int
    started: float
    done: int = 0
    failure: Optional[str] = None
    stop: bool = False


def execute(plan: planmod.Plan, out: str, qemu: str, jobs: int,
            runs: Optional[list[shardmod.RunId]] = None) -> Optional[str]:
    """Boots every run (or those given: a shard's), at most `jobs` at a time,
    repetition-major (A B A B ...). Stops starting runs at the first failure. Returns the
    first failure's text or None."""
    if runs is None:
        runs = shardmod.plan_runs(plan.order, plan.reps)
    order = [(rep, v) for v, rep in runs]
    snaps: dict[str, float] = {}
    if plan.snapshot:
        failure = _take_snapshots(plan, [v for v in plan.order if any(x == v for x, _ in runs)], out, qemu, snaps)
        if failure:
            return failure
    lock = threading.Lock()
    state = _Progress(len(order), time.monotonic())

    def one(k: int, rep: int, v: str) -> None:
        with lock:
            if state.failure or state.stop:
                return
            eta = ""
            if state.done:
                per = (time.monotonic() - state.started) / state.done
                eta = f", about {per * (state.total - state.done) / jobs:.0f}s left"
        how = "going on from its snapshot" if v in snaps else "booting"
        log(f"[{k}/{state.total}] {v}, repetition {rep}/{plan.reps}: {how}{eta}")
        status, rows, run_dir = run_one(plan, v, rep, out, qemu, snaps.get(v))
        with lock:
            state.done += 1
            if status["status"] != "ok" or rows is None:
                if not state.failure:
                    state.failure = failure_text(v, rep, run_dir, status["why"])
                return
        first = f", first I/O after {status['first_io']:.1f}s" if status.get("first_io") is not None else ""
        log(f"[{k}/{state.total}] {v}, repetition {rep}: {status['seconds']:.0f}s{first}, hw queues {hw_queues(run_dir)}: "
            f"{figures_line(rows, plan.variants[v].scale)}")

    if jobs <= 1:
        for k, (rep, v) in enumerate(order, 1):
            one(k, rep, v)
            if state.failure:
                break
        return state.failure
    ex = cf.ThreadPoolExecutor(max_workers=jobs)
    try:
        futs = [ex.submit(one, k, rep, v) for k, (rep, v) in enumerate(order, 1)]
        for fut in futs:
            fut.result()
    except BaseException:
        # Ctrl-C or an error: start nothing more; the boots under way end with their
        # deadline at the latest.
        with lock:
            state.stop = True
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown()
    return state.failure


def _take_snapshots(plan: planmod.Plan, variants: list[str], out: str, qemu: str,
                    snaps: dict[str, float]) -> Optional[str]:
    """Each variant's one boot, saved at its snapshot point (one at a time: the figure of
    each is its boot's own); snaps gets the seconds each took. The first failure's text."""
    for v in variants:
        log(f"{v}: booting once, up to its disks being ready, for the snapshot its repetitions go on from")
        took, why = take_snapshot(plan, v, out, qemu)
        if took is None:
            return failure_text(v, 0, snapshot_dir(out, v), why)
        snaps[v] = took
        try:
            size = f" ({os.path.getsize(os.path.join(snapshot_dir(out, v), 'state')) / 2 ** 20:.0f} MiB of state)"
        except OSError:
            size = ""
        log(f"{v}: saved after {took:.1f}s{size}")
    return None


def discard_snapshots(plan: planmod.Plan, out: str) -> None:
    for v in plan.order:
        discard_snapshot(snapshot_dir(out, v))


def plan_json(plan: planmod.Plan) -> dict[str, Any]:
    vms = sorted({f"{os.path.basename(x.kernel)}, {x.vcpus} vCPUs, {x.mem}" for x in plan.variants.values()})
    return {
        "name": plan.name, "spec": os.path.basename(plan.spec.path),
        "description": plan.spec.experiment.get("description", ""),
        "scale": plan.eff_scale, "scale_note": plan.scale_note, "reps": plan.reps,
        "fio_seconds": plan.fio_seconds, "log_avg": plan.log_avg, "vm": "/".join(vms), "trace": plan.trace,
        "snapshot": plan.snapshot,
        "baseline": plan.baseline,
        "all_variants": list(plan.spec.variants),
        "variants": [{"name": v, "summary": x.summary, "device": x.device, "kernel": x.kernel,
                      "ko": x.ko, "want_version": x.want_version, "params": x.params, "scale": x.scale,
                      "scsi_debug": x.scsi_debug, "published": x.published,
                      "published_ratio": x.published_ratio, "coverage": x.coverage, "lines": x.lines,
                      "timeline": [e.text for e in x.timeline]} for v, x in plan.variants.items()],
    }


def prepare_out(out: str) -> None:
    """An empty results folder: a new one, or an earlier experiment's (its runs go, so
    that none of them counts again); any other folder with files in it is refused."""
    if os.path.isdir(out) and os.listdir(out):
        if not os.path.isfile(os.path.join(out, "plan.json")):
            raise RunnerError(f"--out {out}: the folder is not empty and holds no earlier results")
        log(f"{out}: replacing the results of an earlier experiment")
        for name in os.listdir(out):
            p = os.path.join(out, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)


def find_qemu() -> str:
    try:
        return qemu_binary()
    except QemuError as e:
        raise RunnerError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    spec = planmod_spec_load(args.spec)
    with open(args.spec, "rb") as f:
        spec_bytes = f.read()        # the text as run: spec.exp and the plan's fingerprint
    only = args.variants.split(",") if args.variants else None
    plan = planmod.Plan(spec, reps=args.reps, runtime=args.runtime, only=only,
                        build_module=None if args.dry_run else build_module,
                        modinfo=None if args.dry_run else modinfo, trace=True if args.trace else None,
                        overrides=overrides(args), snapshot=_on_off(getattr(args, "snapshot", None)))
    shard: Optional[shardmod.Shard] = getattr(args, "shard", None)
    runs = shardmod.plan_runs(plan.order, plan.reps)
    mine = shardmod.shard_runs(plan.order, plan.reps, shard) if shard else runs
    if not mine:
        raise planmod.PlanError(f"--shard {shard.label() if shard else ''}: the plan has {len(runs)} run(s) "
                                f"({len(plan.order)} variant(s) x {plan.reps} repetition(s)), fewer than "
                                "shards: give at most that many shards")
    if args.dry_run:
        dry_run(plan)
        if shard:
            print(f"== shard {shard.index} of {shard.count}: boots {shardmod.describe(mine)}")
        return EXIT_OK
    _warn_jobs(plan, args.jobs)
    qemu = find_qemu()
    out = results_folder(plan.name, args.out)
    with open(os.path.join(out, "spec.exp"), "wb") as f:
        f.write(spec_bytes)
    doc = plan_json(plan)
    doc.update(plan_identity(plan, args, spec_bytes.decode("utf-8", errors="replace")))
    if shard:
        doc["shard"], doc["shard_runs"] = shard.as_json(), shardmod.run_docs(mine)
    with open(os.path.join(out, "plan.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    what = f"{len(plan.order)} variants x {plan.reps} repetitions = {len(runs)} boots"
    if plan.snapshot:
        what = (f"{len(plan.order)} variants x {plan.reps} repetitions = {len(runs)} runs, each going on from its "
                "variant's snapshot (one boot per variant)")
    if shard:
        what = (f"shard {shard.index} of {shard.count}: {len(mine)} of the {len(runs)} runs "
                f"({len(plan.order)} variants x {plan.reps} repetitions"
                f"{'; each variant this shard runs boots once, for its snapshot' if plan.snapshot else ''})")
    log(f"experiment {plan.name}: {what}, about {plan.fio_seconds}s of fio each"
        f"{f', {args.jobs} at a time' if args.jobs > 1 else ''}; results in {out}")
    started = time.monotonic()
    try:
        failure = execute(plan, out, qemu, args.jobs, mine)
    finally:
        discard_snapshots(plan, out)
    rep = reportmod.Report(out)
    text = rep.write(log)
    if failure:
        print(failure, file=sys.stderr)
        log(f"experiment {plan.name} stopped: {failure.splitlines()[1][len('[hvstor] error: '):]}")
        return EXIT_RUN
    print(text, end="")
    return verdict(rep, f"experiment {plan.name} done in {time.monotonic() - started:.0f}s: {out}")


def _on_off(x: Optional[str]) -> Optional[bool]:
    return None if x is None else x == "on"


def _warn_jobs(plan: planmod.Plan, jobs: int) -> None:
    cores = os.cpu_count() or 1
    if jobs > 1:
        need = jobs * max(x.vcpus for x in plan.variants.values())
        if need > cores:
            log(f"--jobs {jobs}: {need} vCPUs at once on {cores} host cores: the runs compete for CPUs, "
                "so their figures are not comparable to runs made one at a time")


def plan_identity(plan: planmod.Plan, args: argparse.Namespace, spec_text: str) -> dict[str, Any]:
    """What identifies a plan across shards (plan.json): the options that change the plan,
    the project's version, the spec's digest, the fingerprint of all of these, and every run
    of the plan."""
    kernel, patch = getattr(args, "kernel", None), getattr(args, "patch", None)
    options: dict[str, object] = {
        "reps": plan.reps, "runtime": args.runtime, "variants": list(plan.order), "trace": plan.trace,
        "snapshot": plan.snapshot,
        "kernel": kernel, "kernel_sha256": shardmod.file_digest(kernel),
        "modules": getattr(args, "modules", None), "patch": patch, "patch_sha256": shardmod.file_digest(patch)}
    version = shardmod.project_version()
    return {"version": version, "spec_sha256": shardmod.text_digest(spec_text), "options": options,
            "fingerprint": shardmod.fingerprint(spec_text, options, version),
            "runs": shardmod.run_docs(shardmod.plan_runs(plan.order, plan.reps))}


def results_folder(name: str, given: Optional[str]) -> str:
    """--out, or a new dated folder under the cache with a -latest link to it."""
    out = given or os.path.join(cache_dir(), "results", f"{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    prepare_out(out)
    if not given:
        link = os.path.join(cache_dir(), "results", f"{name}-latest")
        tmp = f"{link}.{os.getpid()}"         # replaced at once: shards may end side by side
        os.symlink(out, tmp)
        os.replace(tmp, link)
    return out


def overrides(args: argparse.Namespace) -> dict[str, str]:
    """What the command line sets for every variant: --kernel (and --modules), --patch
    (which takes the place of a spec's ko), --coverage."""
    out: dict[str, str] = {}
    if getattr(args, "kernel", None):
        out["kernel"] = args.kernel
        out["modules"] = getattr(args, "modules", None) or ""
    elif getattr(args, "modules", None):
        raise RunnerError("--modules goes with --kernel PATH")
    if getattr(args, "patch", None):
        patch = os.path.abspath(args.patch) if os.path.exists(args.patch) else args.patch
        out["patch"], out["ko"] = patch, ""
    if getattr(args, "coverage", None):
        out["coverage"] = args.coverage
    return out


def verdict(rep: reportmod.Report, done_msg: str) -> int:
    if rep.shard:
        # A shard's verdict is its runs'; its expectations are judged on the merged results.
        if rep.failed_runs() or rep.missing_runs():
            log(f"{done_msg}; shard {rep.shard['index']} of {rep.shard['count']}: some runs did not count")
            return EXIT_RUN
        log(f"{done_msg}; shard {rep.shard['index']} of {rep.shard['count']}: every run counted; the expectations "
            "are judged once the shards are merged (./hvstor report --merge)")
        return EXIT_OK
    bad = rep.failed_expectations()
    for o in bad:
        print(o.line(), file=sys.stderr)
    if rep.failed_runs() or rep.missing_runs():
        log(f"{done_msg}; some runs did not count")
        return EXIT_RUN
    if bad:
        log(f"{done_msg}; {len(bad)} of {len(rep.outcomes)} expectation(s) failed")
        return EXIT_EXPECT
    log(f"{done_msg}" + (f"; all {len(rep.outcomes)} expectation(s) met" if rep.outcomes else ""))
    return EXIT_OK


def planmod_spec_load(path: str) -> Any:
    from . import spec  # pylint: disable=import-outside-toplevel
    if not os.path.isfile(path):
        raise RunnerError(f"no such spec file: {path}")
    return spec.load(path)
