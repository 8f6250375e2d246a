"""From a parsed spec to what each variant boots: kernel, module, command line, devices,
the guest script. Nothing here boots or builds; build_module() is passed in."""

import math
import os
import re
from dataclasses import dataclass, field

from . import fiojob

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GUEST_TEMPLATE = os.path.join(ROOT, "guest-scripts", "experiment.sh.in")
DEVICES = ("hv-storvsc", "scsi_debug", "virtio-scsi")
# scsi_debug parameters a control variant may set (modinfo scsi_debug).
SCSI_DEBUG_PARAMS = frozenset("""
    ndelay delay submit_queues host_max_queue max_queue virtual_gb dev_size_mb fake_rw
    sector_size opts every num_tgts max_luns no_uld statistics""".split())
TRACE_KB = 8192
# QEMU's side of trace = on: each SRB's arrival on our ring and its completion, timestamped.
HOST_TRACE = ["-trace", "enable=hvstor_storvsp_srb_submit", "-trace", "enable=hvstor_storvsp_srb_complete",
              "-D", "@RUNDIR@/host-trace.log", "-msg", "timestamp=on"]
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s)?$")
_UNITS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, None: 1}


def duration_ns(text):
    """'24ms' -> 24000000; a bare number is nanoseconds; None when it is no duration."""
    m = _DURATION.match(text.strip())
    if not m:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)]


def size_bytes(text):
    m = re.match(r"^([0-9]+)([KMGT]?)(i?B)?$", text.strip())
    if not m:
        return None
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")


def qemu_escape(v):
    """QEMU's option syntax: a comma inside a property value is written twice."""
    return v.replace(",", ",,")


def fixed_latency_ns(perf):
    """The latency of a perf string that only sets a fixed latency (and maybe time-scale),
    else None."""
    if not perf:
        return None
    lat = None
    for item in perf.split(","):
        k, _, v = item.partition("=")
        if k == "time-scale":
            continue
        if k != "latency":
            return None
        v = v[len("fixed:"):] if v.startswith("fixed:") else v
        lat = duration_ns(v)
        if lat is None or not re.search(r"[a-z]$", v):
            return None
    return lat


@dataclass
class Variant:
    name: str
    device: str
    kernel: str
    modules: str
    kdir: str
    vcpus: int
    mem: str
    patch: str                  # resolved patch argument, or ""
    ko: str                     # module file to load instead of the stock one, or ""
    want_version: str           # what /sys/module/hv_storvsc/version must read ("" = stock)
    want_srcversion: str
    params: list                # hv_storvsc params as given (name=value)
    append: str                 # kernel command line added
    tunables: str
    devices: list               # QEMU arguments
    scsi_debug: dict            # control arm: scsi_debug parameters
    summary: str
    timeout: int
    published: str = ""
    published_ratio: str = ""
    wait_disks: int = 0
    env: dict = field(default_factory=dict)
    host_load: int = 0          # busy processes at nice 19 on the host while the guest runs
    scale: float = 1.0          # its figures are scaled back by this (1: it ran at real speed)


class PlanError(Exception):
    pass


class Plan:
    """Everything about an experiment that is decided before the first boot."""

    def __init__(self, spec, reps=None, runtime=None, only=None, build_module=None, modinfo=None, trace=None):
        self.spec = spec
        self.name = os.path.splitext(os.path.basename(spec.path))[0]
        self.dir = os.path.dirname(os.path.abspath(spec.path))
        ex = spec.experiment
        names = list(spec.variants)
        if only:
            for v in only:
                if v not in spec.variants:
                    raise PlanError(f"--variants: no variant '{v}' in {spec.path} (has: {' '.join(names)})")
            names = list(only)
        self.baseline = ex.get("baseline", names[0])
        if self.baseline not in spec.variants:
            raise spec.error(ex.lines.get("baseline", 0), f"baseline '{self.baseline}' is not a variant")
        if only:
            self.baseline = names[0]        # --variants A,B: the first one given
        self.order = [self.baseline] + [v for v in names if v != self.baseline]
        self.reps = reps if reps is not None else self._posint(ex, "repetitions", 3)
        self.scale = self._scale(ex)
        self.log_avg = self._posint(ex, "log-avg-msec", 1000)
        t = ex.get("trace", "off")
        if t not in ("on", "off"):
            raise spec.error(ex.lines["trace"], f"trace is on or off, got '{t}'")
        self.trace = trace if trace is not None else t == "on"
        # Per-CPU trace buffer in the guest: about 60 bytes per event, 7 events per I/O.
        self.trace_kb = TRACE_KB if self.trace else 0
        try:
            self.job = fiojob.prepare(ex.values["fio"], self.log_avg, runtime)
            self.fio_seconds = fiojob.seconds(self.job)
        except fiojob.JobError as e:
            raise spec.error(ex.lines["fio"], str(e)) from None
        self.variants, slowed = {}, []
        for v in self.order:
            self._slowed = False            # set when the variant's device is slowed by time-scale
            var = self.variants[v] = self._variant(v, build_module, modinfo)
            var.scale = self.scale if self._slowed else 1.0
            if self._slowed:
                slowed.append(v)
        self.perf_used = bool(slowed)
        self.eff_scale = self.scale if self.perf_used else 1.0
        # Rendered once: a change to the template while an experiment runs does not reach it.
        self.scripts = {v: self.guest_script(v) for v in self.order}
        if self.perf_used:
            self.scale_note = (f"time-scale {_num(self.scale)}: rates x{_num(self.scale)}, latencies and times /{_num(self.scale)}"
                               if self.scale != 1 else "time-scale 1")
            unscaled = [v for v in self.order if v not in slowed]
            if self.scale != 1 and unscaled:
                self.scale_note += f" for variants with a performance model; {', '.join(unscaled)} as measured"
        else:
            self.scale_note = "no perf model in the spec: results as measured"
            if self.scale != 1:
                self.scale_note += f" (time-scale {_num(self.scale)} ignored: it only applies to perf strings)"

    # --- helpers ---------------------------------------------------------------------
    def _posint(self, sec, key, default):
        v = sec.get(key)
        if v is None:
            return default
        if not re.fullmatch(r"[1-9][0-9]*", v):
            raise self.spec.error(sec.lines[key], f"{key} must be a positive number, got '{v}'")
        return int(v)

    def _scale(self, ex):
        v = ex.get("time-scale", "1")
        try:
            s = float(v)
        except ValueError:
            s = -1
        if not (s > 0 and math.isfinite(s)):
            raise self.spec.error(ex.lines.get("time-scale", 0), f"time-scale must be a positive number, got '{v}'")
        return s

    def _val(self, v, key, default=None):
        return self.spec.value(v, key, default)

    def _err(self, v, key, msg):
        return self.spec.error(self.spec.where(v, key), f"variant {v}: {msg}")

    def resolve_path(self, p):
        """A path in the spec is relative to the spec's folder, then to the current one."""
        for cand in (os.path.join(self.dir, p), p):
            if os.path.exists(cand):
                return os.path.abspath(cand)
        return None

    def _check_scale(self, v, key, perf):
        own = re.search(r"(?:^|,)time-scale=([^,]*)", perf)
        try:
            own_scale = float(own.group(1)) if own else None
        except ValueError:
            raise self._err(v, key, f"'{perf}': time-scale={own.group(1)} is not a number") from None
        if own and own_scale != self.scale:
            raise self._err(v, key, f"'{perf}' sets time-scale={own.group(1)}, the experiment's time-scale is "
                            f"{_num(self.scale)}: set it once, in [experiment]")

    def _with_scale(self, perf):
        if self.scale != 1 and not re.search(r"(?:^|,)time-scale=", perf):
            perf += f",time-scale={_num(self.scale)}"
        return perf

    # --- one variant -----------------------------------------------------------------
    def _variant(self, v, build_module, modinfo):
        device = self._val(v, "device", "hv-storvsc")
        if device not in DEVICES:
            raise self._err(v, "device", f"device must be one of {', '.join(DEVICES)}, got '{device}'")
        kernel = self._val(v, "kernel", "debian-6.1")
        modules = self._val(v, "modules", "")
        kdir = self._val(v, "kdir", "")
        if kernel not in ("debian-6.1", "debian-6.12"):
            path = self.resolve_path(kernel)
            if not path:
                raise self._err(v, "kernel", f"kernel '{kernel}' is neither debian-6.1, debian-6.12 nor a file")
            kernel = path
            if modules:
                m = self.resolve_path(modules)
                if not m or not os.path.isdir(m):
                    raise self._err(v, "modules", f"modules: no folder {modules}")
                modules = m
        elif modules:
            raise self._err(v, "modules", f"modules is for a kernel given as a path, not {kernel}")
        if kdir:
            k = self.resolve_path(kdir)
            if not k or not os.path.isdir(k):
                raise self._err(v, "kdir", f"kdir: no folder {kdir}")
            kdir = k
        src = self._val(v, "storvsc-source", "")
        if src:
            f = self.resolve_path(src)
            if not f or not os.path.isfile(f):
                raise self._err(v, "storvsc-source", f"storvsc-source: no file {src}")
            src = f
        if (kdir or src) and kernel.startswith("debian-"):
            raise self._err(v, "kdir" if kdir else "storvsc-source",
                            f"kdir and storvsc-source are for a kernel given as a path, not {kernel}")
        vcpus = self._val(v, "vcpus", "2")
        if not re.fullmatch(r"[1-9][0-9]*", vcpus):
            raise self._err(v, "vcpus", f"vcpus must be a positive number, got '{vcpus}'")
        vcpus = int(vcpus)
        mem = self._val(v, "mem", "1G")
        desc = self.spec.variants[v].get("description", "")     # the experiment's describes it
        kname = kernel if kernel.startswith("debian-") else os.path.basename(kernel)
        summary = (desc + ": " if desc else "") + kname

        params = self._val(v, "params", "").split()
        append = []
        for p in params:
            if "=" not in p:
                raise self._err(v, "params", f"params wants name=value items, got '{p}'")
            append.append(p if "." in p.split("=", 1)[0] else "hv_storvsc." + p)
        tunables = self._val(v, "tunables", "")
        for t in tunables.split():
            if "=" not in t:
                raise self._err(v, "tunables", f"tunables wants key=value items, got '{t}'")

        patch, ko, want_version, want_src = "", "", "", ""
        if self._val(v, "patch") and self._val(v, "ko"):
            raise self._err(v, "ko", "give a patch or a prebuilt ko, not both")
        if self._val(v, "patch"):
            raw = self._val(v, "patch")
            patch = self.resolve_path(raw) or raw
            if build_module:
                ko, info = build_module(v, kernel, modules, kdir, patch, src)
                want_version, want_src = info.get("version", ""), info.get("srcversion", "")
                if not want_version:
                    raise self._err(v, "patch", f"the module built for it ({ko}) has no version stamp")
            else:
                ko = f"(scripts/build-module.sh --kernel {kernel} {patch})"
            summary += f", hv_storvsc built with {os.path.basename(patch)}"
        elif self._val(v, "ko"):
            raw = self._val(v, "ko")
            ko = self.resolve_path(raw)
            if not ko or not os.path.isfile(ko):
                raise self._err(v, "ko", f"ko: no such module file {raw}")
            if modinfo:
                want_version, want_src = modinfo(ko, "version"), modinfo(ko, "srcversion")
            summary += f", prebuilt {os.path.basename(ko)}"
        elif device == "hv-storvsc":
            summary += ", stock hv_storvsc"
        if params:
            summary += ", " + " ".join(params)
        if tunables:
            summary += ", " + tunables

        devices, scsi_debug, env = [], {}, {}
        wait = 0
        if device == "hv-storvsc":
            if not self.spec.disks:
                raise self.spec.error(0, f"variant {v} runs on hv-storvsc but the spec has no [disk] section")
            devices = self._hv_devices(v) + (HOST_TRACE if self.trace else [])
            wait = len(self.spec.disks)
        elif device == "virtio-scsi":
            devices, what = self._virtio_devices(v)
            append.append("hvstor.modules=virtio_pci,virtio_scsi")
            wait = len(self.spec.disks)
            summary += f", comparison: {what}"
        else:
            scsi_debug = self._scsi_debug(v, vcpus, params)
            append.append("hvstor.modules=scsi_debug")
            append += [f"scsi_debug.{k}={x}" for k, x in scsi_debug.items()]
            env["HVSTOR_GUEST_EXTRA_MODULES"] = "scsi_debug"
            summary += ", control: scsi_debug " + " ".join(f"{k}={x}" for k, x in scsi_debug.items())
        extra = self._val(v, "append", "")
        if extra:
            append.append(extra)
        timeout = self._val(v, "timeout")
        if timeout:
            if not re.fullmatch(r"[1-9][0-9]*s?", timeout):
                raise self._err(v, "timeout", f"timeout is seconds per boot (300 or 300s), got '{timeout}'")
            timeout = int(timeout.rstrip("s"))
        else:
            timeout = 150 + 2 * self.fio_seconds
        load = self._val(v, "host-load", "0")
        if not load.isdigit() or int(load) > 64:
            raise self._err(v, "host-load", f"host-load is a number of busy host processes (0-64), got '{load}'")
        if int(load):
            summary += f", {load} busy host process(es)"
        var = Variant(v, device, kernel, modules, kdir, vcpus, mem, patch, ko, want_version, want_src,
                       params, " ".join(append), tunables, devices, scsi_debug, summary, timeout,
                       self.spec.variants[v].get("published", ""), self.spec.variants[v].get("published-ratio", ""),
                       wait, env, int(load))
        return var

    def _virtio_devices(self, v):
        """virtio-scsi for comparison: each [disk] a null-aio block node, with the fixed
        latency of the perf string when there is one; `virtio-scsi = iothread=on` gives the
        controller an IOThread."""
        opts = {}
        for item in self._val(v, "virtio-scsi", "").split():
            k, eq, x = item.partition("=")
            if k != "iothread" or x not in ("on", "off"):
                raise self._err(v, "virtio-scsi", f"virtio-scsi takes iothread=on|off, got '{item}'")
            opts[k] = x
        out, what = [], "virtio-scsi"
        ctl = "virtio-scsi-pci,id=vscsi0"
        if opts.get("iothread") == "on":
            out += ["-object", "iothread,id=vio0"]
            ctl += ",iothread=vio0"
            what += " with an IOThread"
        out += ["-device", ctl]
        for i, disk in enumerate(self.spec.disks):
            size = size_bytes(disk.get("size", "") or "")
            if not size:
                raise self.spec.error(disk.line, f"variant {v}: virtio-scsi needs the [disk] size (as 64G)")
            node = f"driver=null-aio,node-name=vd{i},size={size}"
            perf = self._perf_of(v, disk)
            if perf:
                ns = fixed_latency_ns(perf)
                if ns is None:
                    raise self._err(v, "perf", f"virtio-scsi variants take a fixed latency only (latency=2ms), not '{perf}'")
                self._slowed = True
                node += f",latency-ns={int(round(ns * self.scale))}"
                what += f", {int(round(ns))} ns latency"
            out += ["-blockdev", node, "-device", f"scsi-hd,bus=vscsi0.0,drive=vd{i},lun={i}"]
        return out, what

    def _perf_of(self, v, disk):
        """The perf string for a disk: the variant's, else the experiment's, else the disk's."""
        p = self._val(v, "perf")
        return p if p else disk.get("perf", "")

    def _hv_devices(self, v):
        out = []
        vmperf = self._val(v, "vm-perf")
        if vmperf:
            self._check_scale(v, "vm-perf", vmperf)
            self._slowed = True
            out += ["-device", "hv-vmbus-bridge,vm-perf=" + qemu_escape(self._with_scale(vmperf))]
        sc = self._val(v, "storvsc", "")
        # iothread=ID: the IOThread the channels run in, created here.
        for item in sc.split(","):
            if item.startswith("iothread="):
                out += ["-object", "iothread,id=" + item.split("=", 1)[1]]
        out += ["-device", "hv-storvsc,id=scsi0" + ("," + sc if sc else "")]
        for i, disk in enumerate(self.spec.disks):
            props = [f"id=disk{i}", "bus=scsi0.0", f"lun={i}"]
            for key in sorted(disk.values):
                val = disk.values[key]
                if key in ("lun", "bus", "id"):
                    raise self.spec.error(disk.lines[key], f"[disk] sets '{key}'; the runner assigns it "
                                          "(LUNs count from 0, ids are disk0, disk1, ...)")
                if key == "perf":
                    continue
                if key == "file":
                    if val == "scratch":
                        if "size" not in disk.values:
                            raise self.spec.error(disk.lines[key], "[disk] file = scratch needs a size")
                        props.append(f"file=@SCRATCH{i}@")
                        continue
                    val = self.resolve_path(val) or val
                if key == "size" and disk.get("file") == "scratch":
                    continue
                props.append(f"{key}={qemu_escape(val)}")
            perf = self._perf_of(v, disk)
            if perf:
                self._check_scale(v, "perf", perf)
                self._slowed = True
                props.append("perf=" + qemu_escape(self._with_scale(perf)))
            out += ["-device", "hv-disk," + ",".join(props)]
        return out

    def _scsi_debug(self, v, vcpus, params):
        """scsi_debug parameters of a control variant: the spec's `scsi-debug` items, and
        what the experiment implies for the rest (docs/experiments.md, "Control variants")."""
        given = {}
        for item in self._val(v, "scsi-debug", "").split():
            k, eq, x = item.partition("=")
            if not eq:
                raise self._err(v, "scsi-debug", f"scsi-debug wants name=value items, got '{item}'")
            if k not in SCSI_DEBUG_PARAMS:
                raise self._err(v, "scsi-debug", f"unknown scsi_debug parameter '{k}' (known: {' '.join(sorted(SCSI_DEBUG_PARAMS))})")
            given[k] = x
        out = {}
        hwq = vcpus
        for p in params:
            k, _, x = p.partition("=")
            if k in ("storvsc_max_hw_queues", "hv_storvsc.storvsc_max_hw_queues") and x.isdigit() and int(x) > 0:
                hwq = min(hwq, int(x))
        out["submit_queues"] = given.pop("submit_queues", str(hwq))
        if "ndelay" in given:
            ns = duration_ns(given.pop("ndelay"))
            if ns is None:
                raise self._err(v, "scsi-debug", "ndelay must be a duration (24ms, 500us, 2000000)")
            self._slowed = True           # a modelled latency, scaled like the perf strings
        elif "delay" in given:
            ns = None
        else:
            disk = self.spec.disks[0] if self.spec.disks else None
            perf = self._perf_of(v, disk) if disk else self._val(v, "perf", "")
            ns = fixed_latency_ns(perf)
            if ns is None:
                raise self._err(v, "scsi-debug", "a control variant needs its service latency: scsi-debug = ndelay=X, "
                                f"or a perf string that only sets a fixed latency (perf is '{perf}')")
            self._slowed = True
        if ns is not None:
            ns = int(round(ns * self.scale))
            if not 0 < ns < 1_000_000_000:
                raise self._err(v, "scsi-debug", f"ndelay x time-scale is {ns} ns; scsi_debug takes 1 ns to just under 1 s")
            out["ndelay"] = str(ns)
        if "virtual_gb" not in given and self.spec.disks and self.spec.disks[0].get("size"):
            b = size_bytes(self.spec.disks[0].get("size"))
            if b:
                out["virtual_gb"] = str(max(1, math.ceil(b / 2 ** 30)))
        out.setdefault("dev_size_mb", given.pop("dev_size_mb", "64"))
        out.setdefault("fake_rw", given.pop("fake_rw", "1"))
        out.update(given)
        return out

    # --- the guest script -----------------------------------------------------------
    def guest_script(self, v):
        var = self.variants[v]
        with open(GUEST_TEMPLATE, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
        while lines and lines[0].startswith("#"):      # the template's own header
            lines.pop(0)
        text = "".join(lines)
        ndisks = 1 if var.device == "scsi_debug" else len(self.spec.disks)
        fields = {"DEVICE": var.device, "NDISKS": str(ndisks), "TUNABLES": var.tunables,
                  "TRACE_KB": str(self.trace_kb), "JOB": self.job.rstrip("\n")}
        for k, x in fields.items():
            text = text.replace(f"@@{k}@@", x)
        left = re.findall(r"@@[A-Z_]+@@", text)
        if left:
            raise PlanError(f"{GUEST_TEMPLATE}: unknown fields {' '.join(sorted(set(left)))}")
        return text


def _num(x):
    return f"{x:g}"
