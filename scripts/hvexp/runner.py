"""Runs an experiment: every variant x repetition in its own guest (scripts/boot.sh),
checks that each guest ran what its variant asked for, then the report."""

import concurrent.futures as cf
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

from . import plan as planmod
from . import report as reportmod
from .plan import ROOT

EXIT_OK, EXIT_EXPECT, EXIT_USAGE, EXIT_RUN = 0, 1, 2, 3


def log(msg):
    print(f"[hvstor {datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


class RunnerError(Exception):
    pass


def cache_dir():
    return os.environ.get("HVSTOR_CACHE") or os.path.join(ROOT, ".cache")


def build_module(variant, kernel, modules, kdir, patch, source=""):
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
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
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


def modinfo(ko, field):
    r = subprocess.run(["modinfo", "-F", field, ko], capture_output=True, text=True)
    if r.returncode != 0:
        raise RunnerError(f"modinfo cannot read {ko}: {r.stderr.strip()}")
    return r.stdout.strip()


def shq(a):
    return a if re.fullmatch(r"[A-Za-z0-9_./=,:+@%-]+", a) else shlex.quote(a)


def boot_args(plan, v, run_dir, qemu):
    var = plan.variants[v]
    args = ["--qemu", qemu, "--kernel", var.kernel]
    if var.modules:
        args += ["--modules", var.modules]
    args += ["--vcpus", str(var.vcpus), "--mem", var.mem, "--timeout", str(var.timeout),
             "--wait-disks", str(var.wait_disks), "--log", os.path.join(run_dir, "console.log"),
             "--results", os.path.join(run_dir, "results")]
    if var.ko:
        args += ["--ko", var.ko]
    if var.append:
        args += ["--append", var.append]
    devs = [a.replace(f"@SCRATCH{i}@", os.path.join(run_dir, f"disk{i}.img")).replace("@RUNDIR@", run_dir)
            for a in var.devices for i in [_scratch_index(a)]]
    return args, devs


def _scratch_index(a):
    m = re.search(r"@SCRATCH([0-9]+)@", a)
    return int(m.group(1)) if m else -1


def dry_run(plan):
    for v in plan.order:
        var = plan.variants[v]
        print(f"== variant {v}: {var.summary}")
        args, devs = boot_args(plan, v, "RUN", "QEMU")
        args = args[2:]                      # no --qemu
        env = "".join(f"{k}={shq(x)} " for k, x in var.env.items())
        print(f"{env}scripts/boot.sh " + " ".join(shq(a) for a in args) + " --cmd SCRIPT -- " +
              " ".join(shq(a) for a in devs))
    print(f"== guest script (variant {plan.order[0]})")
    print(plan.scripts[plan.order[0]], end="")


# --- checks of one run -----------------------------------------------------------------
def check_run(var, res):
    """Why a run's results are not what the variant asked for; None when fine."""
    h = reportmod.header(os.path.join(res, "header"))
    if not h:
        return "the guest wrote no header"
    if var.device == "virtio-scsi":
        pass                                # nothing of ours to check in the guest
    elif var.device == "scsi_debug":
        if h.get("scsi_debug.loaded") != "yes":
            return "scsi_debug is not loaded in the guest"
        for k in ("submit_queues", "host_max_queue", "max_queue", "ndelay"):
            if k in var.scsi_debug and h.get(f"scsi_debug.{k}") != var.scsi_debug[k]:
                return f"scsi_debug parameter {k} is '{h.get('scsi_debug.' + k, '')}' in the guest, the variant sets {var.scsi_debug[k]}"
    else:
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
        for p in var.params:
            k, _, val = p.partition("=")
            if k.startswith("hv_storvsc."):
                k = k[len("hv_storvsc."):]
            elif "." in k:
                continue
            if h.get(f"param.{k}") != val:
                return f"hv_storvsc parameter {k} is '{h.get('param.' + k, '')}' in the guest, the variant sets {val}"
    if not os.path.isfile(os.path.join(res, "fio.json")) or os.path.getsize(os.path.join(res, "fio.json")) == 0:
        return "no fio.json"
    return None


def clean_console(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[A-Za-z]|\r", "", text)
    return text.splitlines()


def failure_text(v, rep, run_dir, why):
    out = [f"", f"[hvstor] error: {v}, repetition {rep}: {why}",
           f"--- boot.sh and the guest command ({run_dir}/output.log) ---"]
    try:
        with open(os.path.join(run_dir, "output.log"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    cut = next((i for i, ln in enumerate(lines) if ln in ("--- QEMU output ---", "--- last 60 lines of the guest console ---")), len(lines))
    out += lines[:cut][-25:]
    if "--- QEMU output ---" in lines:
        i = lines.index("--- QEMU output ---")
        q = []
        for ln in lines[i:]:
            if ln.startswith("--- last 60 lines"):
                break
            q.append(ln)
        out += q[:21]
    console = clean_console(os.path.join(run_dir, "console.log"))
    panic = [ln for ln in console if re.search(r"Kernel panic|BUG:|Oops|general protection|modprobe .* failed|"
                                                r"Unknown symbol|disagrees about version|exec format", ln)][:6]
    if panic:
        out += ["--- the guest console says ---"] + panic
    out += [f"--- last 25 lines of the guest console ({run_dir}/console.log) ---"] + console[-25:]
    hdr = os.path.join(run_dir, "results", "header")
    if os.path.isfile(hdr):
        with open(hdr, encoding="utf-8", errors="replace") as f:
            out += ["--- guest header ---"] + f.read().splitlines()
    out.append("---")
    return "\n".join(out)


# --- one run ---------------------------------------------------------------------------
def run_one(plan, v, rep, out, qemu):
    var = plan.variants[v]
    run_dir = os.path.join(out, "runs", v, f"rep{rep}")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    for i, disk in enumerate(plan.spec.disks):
        if disk.get("file") == "scratch" and var.device == "hv-storvsc":
            size = planmod.size_bytes(disk.get("size")) or 0
            with open(os.path.join(run_dir, f"disk{i}.img"), "wb") as f:
                f.truncate(size)
    args, devs = boot_args(plan, v, run_dir, qemu)
    env = dict(os.environ, HVSTOR_BOOT_QUIET="1", **var.env)
    load = [subprocess.Popen(["nice", "-n", "19", "sh", "-c", "while :; do :; done"]) for _ in range(var.host_load)]
    t0 = time.monotonic()
    try:
        with open(os.path.join(run_dir, "output.log"), "w", encoding="utf-8") as logf:
            rc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "boot.sh")] + args +
                                ["--cmd", plan.scripts[v], "--"] + devs,
                                stdout=logf, stderr=subprocess.STDOUT, env=env).returncode
    finally:
        for p in load:
            p.kill()
            p.wait()
    secs = time.monotonic() - t0
    for f in os.listdir(run_dir):
        if re.fullmatch(r"disk[0-9]+\.img", f):
            os.unlink(os.path.join(run_dir, f))
    res = os.path.join(run_dir, "results")
    why = None
    if rc != 0:
        err = os.path.join(res, "error")
        if os.path.isfile(err) and os.path.getsize(err):
            with open(err, encoding="utf-8", errors="replace") as f:
                why = "the guest command failed: " + f.read().strip()
        else:
            with open(os.path.join(run_dir, "output.log"), encoding="utf-8", errors="replace") as f:
                m = re.search(r"^\[hvstor\] error: (.*)$", f.read(), re.M)
            why = m.group(1) if m else f"the boot failed with status {rc}"
    else:
        why = check_run(var, res)
    rows = None
    if not why:
        try:
            rows = reportmod.load_run_dir(run_dir)
        except reportmod.ResultError as e:
            why = str(e)
    status = {"status": "failed" if why else "ok", "why": why or "", "seconds": secs, "rc": rc}
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as f:
        json.dump(status, f)
    return status, rows, run_dir


def figures_line(rows, scale):
    return "; ".join(f"{r['job']} {r['dir']} {r['iops'] * scale:.0f} IOPS {r['bw_bytes'] * scale / 1e6:.1f} MB/s "
                     f"{r['clat_mean_ns'] / scale / 1e6:.2f} ms" for r in rows)


def hw_queues(run_dir):
    h = reportmod.header(os.path.join(run_dir, "results", "header"))
    return next((val for k, val in h.items() if re.fullmatch(r"disk\.[a-z]+\.hw_queues", k)), "?")


def execute(plan, out, qemu, jobs):
    """Boots every run, at most `jobs` at a time, repetition-major (A B A B ...). Stops
    starting runs at the first failure. Returns the first failure's text or None."""
    order = [(rep, v) for rep in range(1, plan.reps + 1) for v in plan.order]
    total = len(order)
    lock = threading.Lock()
    state = {"done": 0, "failure": None, "started": time.monotonic()}

    def one(k, rep, v):
        with lock:
            if state["failure"] or state.get("stop"):
                return
            done = state["done"]
            eta = ""
            if done:
                per = (time.monotonic() - state["started"]) / done
                eta = f", about {per * (total - done) / jobs:.0f}s left"
        log(f"[{k}/{total}] {v}, repetition {rep}/{plan.reps}: booting{eta}")
        status, rows, run_dir = run_one(plan, v, rep, out, qemu)
        with lock:
            state["done"] += 1
            if status["status"] != "ok":
                if not state["failure"]:
                    state["failure"] = failure_text(v, rep, run_dir, status["why"])
                return
        log(f"[{k}/{total}] {v}, repetition {rep}: {status['seconds']:.0f}s, hw queues {hw_queues(run_dir)}: "
            f"{figures_line(rows, plan.variants[v].scale)}")

    if jobs <= 1:
        for k, (rep, v) in enumerate(order, 1):
            one(k, rep, v)
            if state["failure"]:
                break
    else:
        ex = cf.ThreadPoolExecutor(max_workers=jobs)
        try:
            futs = [ex.submit(one, k, rep, v) for k, (rep, v) in enumerate(order, 1)]
            for f in futs:
                f.result()
        except BaseException:
            # Ctrl-C or an error: start nothing more; the boots under way end with their
            # timeout at the latest (each is its own process group's child).
            with lock:
                state["stop"] = True
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown()
    return state["failure"]


def plan_json(plan):
    vms = sorted({f"{os.path.basename(x.kernel)}, {x.vcpus} vCPUs, {x.mem}" for x in plan.variants.values()})
    return {
        "name": plan.name, "spec": os.path.basename(plan.spec.path),
        "description": plan.spec.experiment.get("description", ""),
        "scale": plan.eff_scale, "scale_note": plan.scale_note, "reps": plan.reps,
        "fio_seconds": plan.fio_seconds, "log_avg": plan.log_avg, "vm": "/".join(vms), "trace": plan.trace,
        "baseline": plan.baseline,
        "all_variants": list(plan.spec.variants),
        "variants": [{"name": v, "summary": x.summary, "device": x.device, "kernel": x.kernel,
                      "ko": x.ko, "want_version": x.want_version, "params": x.params, "scale": x.scale,
                      "scsi_debug": x.scsi_debug, "published": x.published,
                      "published_ratio": x.published_ratio} for v, x in plan.variants.items()],
    }


def prepare_out(out):
    """An empty results folder: a new one, or an earlier experiment's (its runs go, so
    that none of them counts again); any other folder with files in it is refused."""
    if os.path.isdir(out) and os.listdir(out):
        if not os.path.isfile(os.path.join(out, "plan.json")):
            raise RunnerError(f"--out {out}: the folder is not empty and holds no earlier results")
        log(f"{out}: replacing the results of an earlier experiment")
        for name in os.listdir(out):
            p = os.path.join(out, name)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)


def find_qemu():
    q = os.environ.get("QEMU")
    if q:
        if not os.access(q, os.X_OK):
            raise RunnerError(f"QEMU={q} is not an executable")
        return q
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build-qemu.sh")], stdout=subprocess.PIPE, text=True)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise RunnerError("building QEMU failed")
    return lines[-1]


def run(args):
    spec = planmod_spec_load(args.spec)
    only = args.variants.split(",") if args.variants else None
    plan = planmod.Plan(spec, reps=args.reps, runtime=args.runtime, only=only,
                        build_module=None if args.dry_run else build_module,
                        modinfo=None if args.dry_run else modinfo, trace=True if args.trace else None)
    if args.dry_run:
        dry_run(plan)
        return EXIT_OK
    cores = os.cpu_count() or 1
    if args.jobs > 1:
        need = args.jobs * max(x.vcpus for x in plan.variants.values())
        if need > cores:
            log(f"--jobs {args.jobs}: {need} vCPUs at once on {cores} host cores: the runs compete for CPUs, "
                "so their figures are not comparable to runs made one at a time")
    qemu = find_qemu()
    default_out = not args.out
    out = args.out or os.path.join(cache_dir(), "results", f"{plan.name}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    prepare_out(out)
    if default_out:
        link = os.path.join(cache_dir(), "results", f"{plan.name}-latest")
        if os.path.islink(link) or os.path.exists(link):
            os.unlink(link)
        os.symlink(out, link)
    shutil.copyfile(args.spec, os.path.join(out, "spec.exp"))
    with open(os.path.join(out, "plan.json"), "w", encoding="utf-8") as f:
        json.dump(plan_json(plan), f, indent=1)
    total = plan.reps * len(plan.order)
    log(f"experiment {plan.name}: {len(plan.order)} variants x {plan.reps} repetitions = {total} boots, "
        f"about {plan.fio_seconds}s of fio each{f', {args.jobs} at a time' if args.jobs > 1 else ''}; results in {out}")
    started = time.monotonic()
    failure = execute(plan, out, qemu, args.jobs)
    rep = reportmod.Report(out)
    text = rep.write(log)
    if failure:
        print(failure, file=sys.stderr)
        log(f"experiment {plan.name} stopped: {failure.splitlines()[1][len('[hvstor] error: '):]}")
        return EXIT_RUN
    print(text, end="")
    return verdict(rep, f"experiment {plan.name} done in {time.monotonic() - started:.0f}s: {out}")


def verdict(rep, done_msg):
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


def planmod_spec_load(path):
    from . import spec
    if not os.path.isfile(path):
        raise RunnerError(f"no such spec file: {path}")
    return spec.load(path)
