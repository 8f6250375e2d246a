"""From a parsed spec to what each variant boots: kernel, module, command line, devices,
the guest script. Nothing here boots or builds; build_module() is passed in."""

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import overload

from hvmachine import coverage as machine_coverage, paths as machine_paths
from hvmachine.guest import Controller, Device, Disk, Guest, GuestError, Props, parse_props

from . import expect, fiojob, timeline as timelinemod, verdicts
from .spec import Section, Spec, SpecError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GUEST_TEMPLATE = os.path.join(ROOT, "guest-scripts", "experiment.sh.in")
DEBIAN_KERNELS = ("debian-6.1", "debian-6.12")
DEVICES = ("hv-storvsc", "scsi_debug", "virtio-scsi")
# scsi_debug parameters a control variant may set (modinfo scsi_debug).
SCSI_DEBUG_PARAMS = frozenset("""
    ndelay delay submit_queues host_max_queue max_queue virtual_gb dev_size_mb fake_rw
    sector_size opts every num_tgts max_luns no_uld statistics""".split())
TRACE_KB = 8192
# QEMU's side of trace = on: each SRB's arrival on our ring and its completion, timestamped
# (host-trace.log in the run's folder).
HOST_TRACE = ["-trace", "enable=hvstor_storvsp_srb_submit", "-trace", "enable=hvstor_storvsp_srb_complete",
              "-msg", "timestamp=on"]
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s)?$")
_UNITS: dict[str | None, float] = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, None: 1}

# build_module(variant, kernel, modules, kdir, patch, storvsc source) -> (ko, build-info)
BuildModule = Callable[[str, str, str, str, str, str], tuple[str, dict[str, str]]]
# modinfo(ko, field) -> its value
ModInfo = Callable[[str, str], str]


class PlanError(Exception):
    pass


def default_kernel() -> str:
    """The project's default guest kernel (scripts/default-kernel, read by the machine layer)."""
    try:
        return machine_paths.default_kernel()
    except (OSError, ValueError) as e:
        raise PlanError(str(e)) from None


@dataclass
class Hardware:
    """What QEMU gets for a variant, as values: the machine layer's description
    (hvmachine.guest) without the per-run paths, which Plan.guest() fills in."""
    controllers: list[Controller] = field(default_factory=list)
    disks: list[Disk] = field(default_factory=list)
    bridge: Props | None = None
    objects: list[Props] = field(default_factory=list)
    blockdevs: list[Props] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    scratch: dict[int, int] = field(default_factory=dict)   # disk index -> bytes of a scratch image
    plug_later: dict[int, Disk] = field(default_factory=dict)  # disk index -> a disk the timeline plugs


def duration_ns(text: str) -> float | None:
    """'24ms' -> 24000000; a bare number is nanoseconds; None when it is no duration."""
    m = _DURATION.match(text.strip())
    if not m:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)]


def size_bytes(text: str) -> int | None:
    m = re.match(r"^([0-9]+)([KMGT]?)(i?B)?$", text.strip())
    if not m:
        return None
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")


def fixed_latency_ns(perf: str | None) -> float | None:
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
    params: list[str]           # hv_storvsc params as given (name=value)
    append: str                 # kernel command line added
    tunables: str
    hw: Hardware                # what QEMU gets
    scsi_debug: dict[str, str]  # control arm: scsi_debug parameters
    summary: str
    timeout: int
    published: str = ""
    published_ratio: str = ""
    wait_disks: int = 0
    initramfs_modules: list[str] = field(default_factory=list)  # modules the guest needs beyond ours
    host_load: int = 0          # busy processes at nice 19 on the host while the guest runs
    timeline: list[timelinemod.Event] = field(default_factory=list)
    coverage: bool = False      # count which functions of hv_storvsc ran
    lines: bool = False         # coverage = lines: count which lines of storvsc_drv.c ran (gcov)
    gcno: str = ""              # coverage = lines: storvsc_drv.gcno of the variant's module
    changed: dict[int, str] = field(default_factory=dict)  # ... the lines its patch adds or changes
    fio_judged: bool = False    # a guest verdict judges fio's errors: its failing is no failed run
    may_go: set[int] = field(default_factory=set)   # LUNs whose disk may be gone at the end
    presence_judged: set[int] = field(default_factory=set)  # LUNs a DISK.present verdict judges
    scale: float = 1.0          # its figures are scaled back by this (1: it ran at real speed)


@dataclass
class _Kernel:
    """A variant's kernel and what a kernel given as paths comes with ("" when unset)."""
    kernel: str                 # debian-6.1, debian-6.12 or a bzImage's absolute path
    modules: str
    kdir: str
    source: str                 # storvsc-source


@dataclass
class _Module:
    """The hv_storvsc a variant loads instead of the kernel's own ("" everywhere: the stock one)."""
    patch: str = ""
    ko: str = ""
    want_version: str = ""
    want_srcversion: str = ""
    summary: str = ""           # what the variant's summary says of it


@dataclass
class _Setup:
    """What a variant's device kind adds: QEMU's hardware, the guest's command line, ..."""
    hw: Hardware = field(default_factory=Hardware)
    append: list[str] = field(default_factory=list)
    scsi_debug: dict[str, str] = field(default_factory=dict)
    initramfs_modules: list[str] = field(default_factory=list)
    wait_disks: int = 0
    summary: str = ""


class Plan:
    """Everything about an experiment that is decided before the first boot."""

    def __init__(self, spec: Spec, reps: int | None = None, runtime: int | None = None, only: list[str] | None = None,
                 build_module: BuildModule | None = None, modinfo: ModInfo | None = None,
                 trace: bool | None = None, overrides: dict[str, str] | None = None,
                 snapshot: bool | None = None) -> None:
        self.spec = spec
        # Values given on the command line for every variant (--kernel, --patch).
        self.overrides = dict(overrides or {})
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
        self.disk_names = verdicts.disk_luns(spec)     # a disk's names (diskN, [disk NAME]) -> LUN
        self.order = [self.baseline] + [v for v in names if v != self.baseline]
        self.reps = reps if reps is not None else self._posint(ex, "repetitions", 3)
        self.scale = self._scale(ex)
        self.log_avg = self._posint(ex, "log-avg-msec", 1000)
        t = ex.get("trace", "off")
        if t not in ("on", "off"):
            raise spec.error(ex.lines["trace"], f"trace is on or off, got '{t}'")
        self.trace = trace if trace is not None else t == "on"
        s = ex.get("snapshot", "off")
        if s not in ("on", "off"):
            raise spec.error(ex.lines["snapshot"], f"snapshot is on or off, got '{s}'")
        # Each variant boots once, up to its disks being ready, and every repetition goes on
        # from a snapshot of that moment (hvexp/runner.py).
        self.snapshot = snapshot if snapshot is not None else s == "on"
        # Per-CPU trace buffer in the guest: about 60 bytes per event, 7 events per I/O.
        self.trace_kb = TRACE_KB if self.trace else 0
        try:
            self.job = fiojob.prepare(ex.values["fio"], self.log_avg, runtime)
            self.fio_seconds = fiojob.seconds(self.job)
        except fiojob.JobError as e:
            raise spec.error(ex.lines["fio"], str(e)) from None
        # Every expect line against the job, before anything is built or booted.
        expect.check(spec, self.job)
        self.variants: dict[str, Variant] = {}
        slowed: list[str] = []
        self._slowed = False
        for v in self.order:
            self._slowed = False            # set when the variant's device is slowed by time-scale
            var = self.variants[v] = self._variant(v, build_module, modinfo)
            var.scale = self.scale if self._slowed else 1.0
            if self._slowed:
                slowed.append(v)
        verdicts.check(spec, list(self.disk_names), {v: x.coverage for v, x in self.variants.items()},
                       {v: x.lines for v, x in self.variants.items()})
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
    def _posint(self, sec: Section, key: str, default: int) -> int:
        v = sec.get(key)
        if v is None:
            return default
        if not re.fullmatch(r"[1-9][0-9]*", v):
            raise self.spec.error(sec.lines[key], f"{key} must be a positive number, got '{v}'")
        return int(v)

    def _scale(self, ex: Section) -> float:
        v = ex.get("time-scale", "1")
        try:
            s = float(v)
        except ValueError:
            s = -1
        if not (s > 0 and math.isfinite(s)):
            raise self.spec.error(ex.lines.get("time-scale", 0), f"time-scale must be a positive number, got '{v}'")
        return s

    @overload
    def _val(self, v: str, key: str) -> str | None: ...
    @overload
    def _val(self, v: str, key: str, default: str) -> str: ...

    def _val(self, v: str, key: str, default: str | None = None) -> str | None:
        if key in self.overrides:
            return self.overrides[key] or default
        return self.spec.value(v, key, default)

    def _err(self, v: str, key: str, msg: str) -> SpecError:
        return self.spec.error(self.spec.where(v, key), f"variant {v}: {msg}")

    def resolve_path(self, p: str) -> str | None:
        """A path in the spec is relative to the spec's folder, then to the current one."""
        for cand in (os.path.join(self.dir, p), p):
            if os.path.exists(cand):
                return os.path.abspath(cand)
        return None

    def _check_scale(self, v: str, key: str, perf: str) -> None:
        own = re.search(r"(?:^|,)time-scale=([^,]*)", perf)
        if not own:
            return
        try:
            own_scale = float(own.group(1))
        except ValueError:
            raise self._err(v, key, f"'{perf}': time-scale={own.group(1)} is not a number") from None
        if own_scale != self.scale:
            raise self._err(v, key, f"'{perf}' sets time-scale={own.group(1)}, the experiment's time-scale is "
                            f"{_num(self.scale)}: set it once, in [experiment]")

    def _with_scale(self, perf: str) -> str:
        if self.scale != 1 and not re.search(r"(?:^|,)time-scale=", perf):
            perf += f",time-scale={_num(self.scale)}"
        return perf

    # --- one variant -----------------------------------------------------------------
    def _variant(self, v: str, build_module: BuildModule | None, modinfo: ModInfo | None) -> Variant:
        """What variant v boots. Its keys are checked in a fixed order (device, kernel,
        vcpus, params, tunables, the module, the device kind's own, timeout, host-load):
        the first mistake is the one reported."""
        sec = self.spec.variants[v]
        device = self._val(v, "device", "hv-storvsc")
        if device not in DEVICES:
            raise self._err(v, "device", f"device must be one of {', '.join(DEVICES)}, got '{device}'")
        k = self._kernel(v)
        vcpus = self._vcpus(v)
        mem = self._val(v, "mem", "1G")
        desc = sec.get("description", "")      # the experiment's describes the experiment
        kname = k.kernel if k.kernel.startswith("debian-") else os.path.basename(k.kernel)
        summary = (desc + ": " if desc else "") + kname
        params, append = self._params(v)
        tunables = self._tunables(v)
        mod = self._module(v, device, k, build_module, modinfo)
        summary += mod.summary
        if params:
            summary += ", " + " ".join(params)
        if tunables:
            summary += ", " + tunables
        setup = self._setup(v, device, vcpus, params)
        summary += setup.summary
        append += setup.append
        extra = self._val(v, "append", "")
        if extra:
            append.append(extra)
        timeout = self._timeout(v)
        load = self._host_load(v)
        if load:
            summary += f", {self._val(v, 'host-load', '0')} busy host process(es)"
        var = Variant(v, device, k.kernel, k.modules, k.kdir, vcpus, mem, mod.patch, mod.ko, mod.want_version,
                      mod.want_srcversion, params, " ".join(append), tunables, setup.hw, setup.scsi_debug,
                      summary, timeout, sec.get("published", ""), sec.get("published-ratio", ""),
                      setup.wait_disks, setup.initramfs_modules, load)
        var.coverage = self._coverage(v, device) != "off"
        var.lines = self._coverage(v, device) == "lines"
        if var.lines:
            var.gcno, var.changed = self._lines(v, var)
        var.timeline = self._timeline(v, var)
        self._verdict_facts(v, var)
        return var

    def _verdict_facts(self, v: str, var: Variant) -> None:
        """What the variant's guest verdicts and timeline allow: fio failing, disks gone."""
        lines = [t for t, _ in self.spec.experiment.expects + self.spec.variants[v].expects]
        verdict_lines = [verdicts.parse(t) for t in lines if verdicts.is_verdict(t) and _reads(t)]
        var.fio_judged = any(x.key.startswith("fio.") for x in verdict_lines)
        var.may_go = {self.disk_names[x.key[:-len(".present")]] for x in verdict_lines
                      if x.key.endswith(".present") and x.value == "no" and x.key[:-8] in self.disk_names}
        var.may_go |= {self.disk_names[e.target] for e in var.timeline if e.action == "hot-remove"}
        var.presence_judged = {self.disk_names[x.key[:-len(".present")]] for x in verdict_lines
                               if x.key.endswith(".present") and x.key[:-8] in self.disk_names}
        # A disk the timeline plugs and this variant's timeline never adds is not lost.
        var.may_go |= set(var.hw.plug_later) - {self.disk_names[e.target] for e in var.timeline if e.action == "hot-add"}

    # --- timeline and coverage ---------------------------------------------------------
    def targets(self, v: str) -> timelinemod.Targets:
        """What variant v's timeline may name."""
        return self._targets(self.variants[v].hw)

    def _targets(self, hw: Hardware) -> timelinemod.Targets:
        later = {f"disk{i}": d for i, d in hw.plug_later.items()}
        return timelinemod.Targets({n: f"disk{i}" for n, i in self.disk_names.items()}, later, ["scsi0"],
                                   {f"disk{i}": i for i in self.disk_names.values()})

    def _coverage(self, v: str, device: str) -> str:
        c = self._val(v, "coverage", "off")
        if c not in ("functions", "lines", "off"):
            raise self._err(v, "coverage", f"coverage is functions, lines or off, got '{c}'")
        if c != "off" and device != "hv-storvsc":
            raise self._err(v, "coverage", f"coverage counts hv_storvsc's {c}: the variant runs on {device}")
        return c

    def _lines(self, v: str, var: Variant) -> tuple[str, dict[int, str]]:
        """coverage = lines: the notes file of the variant's storvsc_drv.c (its kernel built
        with CONFIG_GCOV_KERNEL), and the lines its patch adds or changes (from the source
        before and after, which scripts/build-module.sh keeps)."""
        if var.kernel in DEBIAN_KERNELS:
            raise self._err(v, "coverage", f"coverage = lines needs a kernel built with CONFIG_GCOV_KERNEL, given as "
                                           f"paths ({var.kernel} is not: guest-kernel/gcov.config, docs/test-your-patch.md)")
        if var.patch and not os.path.isfile(var.ko):
            return "", {}                       # a plan that builds nothing (--dry-run)
        try:
            gcno = machine_coverage.find_gcno("storvsc_drv", "hv_storvsc", var.ko or None, var.modules or None)
        except machine_coverage.CoverageError as e:
            raise self._err(v, "coverage", str(e)) from None
        info = os.path.join(os.path.dirname(var.ko), "build-info") if var.ko else ""
        src = dict(ln.split("=", 1) for ln in _read(info).splitlines() if "=" in ln).get("source", "") if info else ""
        if not (var.patch and src):
            return gcno, {}
        new = _read(os.path.join(os.path.dirname(var.ko), "storvsc_drv.c")).splitlines()
        # build-module.sh stamps the module with a version line of its own: not the patch's.
        return gcno, {n: new[n - 1] for n in machine_coverage.changed_lines(_read(src), "\n".join(new))
                      if new[n - 1].strip() and 'MODULE_VERSION("hvstor-' not in new[n - 1]}

    def _timeline(self, v: str, var: Variant) -> list[timelinemod.Event]:
        text = self._val(v, "timeline", "")
        if not text:
            return []
        # A here-document's text (it ends with a newline) starts on the line after
        # "timeline = <<END"; a one-line value is on the key's line.
        first = self.spec.where(v, "timeline") + (1 if text.endswith("\n") else 0)
        host = timelinemod.first_host_event(text)
        if var.device != "hv-storvsc" and host is not None:
            raise self.spec.error(first + host, f"variant {v}: timeline: host events act on hv-storvsc's disks: "
                                  f"the variant runs on {var.device}")
        try:
            return timelinemod.parse(text, self._targets(var.hw))
        except timelinemod.TimelineError as e:
            raise self.spec.error(first + e.offset, f"variant {v}: timeline: {e}") from None

    def _kernel(self, v: str) -> _Kernel:
        """The variant's kernel, its modules tree, kdir and storvsc-source, resolved: a
        Debian kernel by name, or one given as paths (relative to the spec's folder or the
        current one); the default is scripts/default-kernel's."""
        kernel = self._val(v, "kernel")
        if kernel is None:
            kernel = default_kernel()
        modules = self._val(v, "modules", "")
        kdir = self._val(v, "kdir", "")
        if kernel not in DEBIAN_KERNELS:
            path = self.resolve_path(kernel)
            if not path:
                raise self._err(v, "kernel", f"kernel '{kernel}' is neither debian-6.1, debian-6.12 nor a file")
            kernel = path
            if modules:
                modules = self._folder(v, "modules", modules)
        elif modules:
            raise self._err(v, "modules", f"modules is for a kernel given as a path, not {kernel}")
        if kdir:
            kdir = self._folder(v, "kdir", kdir)
        src = self._val(v, "storvsc-source", "")
        if src:
            f = self.resolve_path(src)
            if not f or not os.path.isfile(f):
                raise self._err(v, "storvsc-source", f"storvsc-source: no file {src}")
            src = f
        if (kdir or src) and kernel.startswith("debian-"):
            raise self._err(v, "kdir" if kdir else "storvsc-source",
                            f"kdir and storvsc-source are for a kernel given as a path, not {kernel}")
        return _Kernel(kernel, modules, kdir, src)

    def _folder(self, v: str, key: str, given: str) -> str:
        """A folder the spec names under key (modules, kdir), resolved."""
        d = self.resolve_path(given)
        if not d or not os.path.isdir(d):
            raise self._err(v, key, f"{key}: no folder {given}")
        return d

    def _vcpus(self, v: str) -> int:
        vcpus = self._val(v, "vcpus", "2")
        if not re.fullmatch(r"[1-9][0-9]*", vcpus):
            raise self._err(v, "vcpus", f"vcpus must be a positive number, got '{vcpus}'")
        return int(vcpus)

    def _params(self, v: str) -> tuple[list[str], list[str]]:
        """The module parameters as given, and the kernel command line they make (a name
        without a module is hv_storvsc's)."""
        params = self._val(v, "params", "").split()
        append = []
        for p in params:
            if "=" not in p:
                raise self._err(v, "params", f"params wants name=value items, got '{p}'")
            append.append(p if "." in p.split("=", 1)[0] else "hv_storvsc." + p)
        return params, append

    def _tunables(self, v: str) -> str:
        tunables = self._val(v, "tunables", "")
        for t in tunables.split():
            if "=" not in t:
                raise self._err(v, "tunables", f"tunables wants key=value items, got '{t}'")
        return tunables

    def _module(self, v: str, device: str, k: _Kernel, build_module: BuildModule | None,
                modinfo: ModInfo | None) -> _Module:
        """The hv_storvsc to load: built from `patch` (by build_module; without it, only
        what would be built), a prebuilt `ko`, or the stock one."""
        patch, ko = self._val(v, "patch", ""), self._val(v, "ko", "")
        if patch and ko:
            raise self._err(v, "ko", "give a patch or a prebuilt ko, not both")
        if patch:
            return self._built_module(v, k, self.resolve_path(patch) or patch, build_module)
        if ko:
            path = self.resolve_path(ko)
            if not path or not os.path.isfile(path):
                raise self._err(v, "ko", f"ko: no such module file {ko}")
            mod = _Module(ko=path, summary=f", prebuilt {os.path.basename(path)}")
            if modinfo:
                mod.want_version, mod.want_srcversion = modinfo(path, "version"), modinfo(path, "srcversion")
            return mod
        return _Module(summary=", stock hv_storvsc" if device == "hv-storvsc" else "")

    def _built_module(self, v: str, k: _Kernel, patch: str, build_module: BuildModule | None) -> _Module:
        mod = _Module(patch=patch, summary=f", hv_storvsc built with {os.path.basename(patch)}")
        if not build_module:
            mod.ko = f"(scripts/build-module.sh --kernel {k.kernel} {patch})"
            return mod
        mod.ko, info = build_module(v, k.kernel, k.modules, k.kdir, patch, k.source)
        mod.want_version, mod.want_srcversion = info.get("version", ""), info.get("srcversion", "")
        if not mod.want_version:
            raise self._err(v, "patch", f"the module built for it ({mod.ko}) has no version stamp")
        return mod

    def _setup(self, v: str, device: str, vcpus: int, params: list[str]) -> _Setup:
        """What the variant's device kind adds."""
        if device == "hv-storvsc":
            return self._hv_setup(v)
        if device == "virtio-scsi":
            return self._virtio_setup(v)
        return self._control_setup(v, vcpus, params)

    def _hv_setup(self, v: str) -> _Setup:
        if not self.spec.disks:
            raise self.spec.error(0, f"variant {v} runs on hv-storvsc but the spec has no [disk] section")
        hw = self._hv_devices(v)
        return _Setup(hw=hw, wait_disks=len(hw.disks))

    def _virtio_setup(self, v: str) -> _Setup:
        hw, what = self._virtio_devices(v)
        return _Setup(hw=hw, append=["hvstor.modules=virtio_pci,virtio_scsi"],
                      wait_disks=len(self.spec.disks), summary=f", comparison: {what}")

    def _control_setup(self, v: str, vcpus: int, params: list[str]) -> _Setup:
        """A control variant: the guest's own scsi_debug, loaded by its init."""
        scsi_debug = self._scsi_debug(v, vcpus, params)
        append = ["hvstor.modules=scsi_debug"] + [f"scsi_debug.{k}={x}" for k, x in scsi_debug.items()]
        return _Setup(append=append, scsi_debug=scsi_debug, initramfs_modules=["scsi_debug"],
                      summary=", control: scsi_debug " + " ".join(f"{k}={x}" for k, x in scsi_debug.items()))

    def _timeout(self, v: str) -> int:
        """Seconds per boot: the spec's `timeout`, else 150 + twice fio's runtimes."""
        timeout = self._val(v, "timeout", "")
        if not timeout:
            return 150 + 2 * self.fio_seconds
        if not re.fullmatch(r"[1-9][0-9]*s?", timeout):
            raise self._err(v, "timeout", f"timeout is seconds per boot (300 or 300s), got '{timeout}'")
        return int(timeout.rstrip("s"))

    def _host_load(self, v: str) -> int:
        load = self._val(v, "host-load", "0")
        if not load.isdigit() or int(load) > 64:
            raise self._err(v, "host-load", f"host-load is a number of busy host processes (0-64), got '{load}'")
        return int(load)

    def _virtio_devices(self, v: str) -> tuple[Hardware, str]:
        """virtio-scsi for comparison: each [disk] a null-aio block node, with the fixed
        latency of the perf string when there is one; `virtio-scsi = iothread=on` gives the
        controller an IOThread."""
        opts = {}
        for item in self._val(v, "virtio-scsi", "").split():
            k, eq, x = item.partition("=")
            if k != "iothread" or x not in ("on", "off"):
                raise self._err(v, "virtio-scsi", f"virtio-scsi takes iothread=on|off, got '{item}'")
            opts[k] = x
        hw, what = Hardware(), "virtio-scsi"
        ctl: Props = {"id": "vscsi0"}
        if opts.get("iothread") == "on":
            hw.objects.append({"qom-type": "iothread", "id": "vio0"})
            ctl["iothread"] = "vio0"
            what += " with an IOThread"
        hw.devices.append(Device("virtio-scsi-pci", ctl))
        for i, disk in enumerate(self.spec.disks):
            size = size_bytes(disk.get("size", "") or "")
            if not size:
                raise self.spec.error(disk.line, f"variant {v}: virtio-scsi needs the [disk] size (as 64G)")
            node: Props = {"driver": "null-aio", "node-name": f"vd{i}", "size": size}
            perf = self._perf_of(v, disk)
            if perf:
                ns = fixed_latency_ns(perf)
                if ns is None:
                    raise self._err(v, "perf", f"virtio-scsi variants take a fixed latency only (latency=2ms), not '{perf}'")
                self._slowed = True
                node["latency-ns"] = int(round(ns * self.scale))
                what += f", {int(round(ns))} ns latency"
            hw.blockdevs.append(node)
            hw.devices.append(Device("scsi-hd", {"bus": "vscsi0.0", "drive": f"vd{i}", "lun": i}))
        return hw, what

    def _perf_of(self, v: str, disk: Section) -> str:
        """The perf string for a disk: the variant's, else the experiment's, else the disk's."""
        p = self._val(v, "perf")
        return p if p else disk.get("perf", "")

    def _hv_devices(self, v: str) -> Hardware:
        hw = Hardware()
        vmperf = self._val(v, "vm-perf")
        if vmperf:
            self._check_scale(v, "vm-perf", vmperf)
            self._slowed = True
            hw.bridge = {"vm-perf": self._with_scale(vmperf)}
        try:
            ctl = parse_props(self._val(v, "storvsc", ""), "storvsc")
        except GuestError as e:
            raise self._err(v, "storvsc", str(e)) from None
        # iothread=ID: the IOThread the channels run in, created here.
        if "iothread" in ctl:
            hw.objects.append({"qom-type": "iothread", "id": str(ctl["iothread"])})
        hw.controllers.append(Controller("scsi0", ctl))
        for i, disk in enumerate(self.spec.disks):
            d = Disk(self._disk_props(v, i, disk, hw), 0, i)
            plug = disk.get("plug", "boot")
            if plug not in ("boot", "timeline"):
                raise self.spec.error(disk.lines["plug"], f"[disk] plug is boot or timeline, got '{plug}'")
            if plug == "timeline":
                if i in hw.scratch:
                    raise self.spec.error(disk.lines["plug"], "a disk the timeline plugs cannot be file = scratch")
                hw.plug_later[i] = d
            else:
                hw.disks.append(d)
        return hw

    def _disk_props(self, v: str, i: int, disk: Section, hw: Hardware) -> Props:
        """An hv-disk's properties from its [disk] section; `file = scratch` becomes an
        empty image of the disk's size that the runner creates for each run."""
        props: Props = {"id": f"disk{i}"}
        for key in sorted(disk.values):
            val = disk.values[key]
            if key in ("lun", "bus", "id"):
                raise self.spec.error(disk.lines[key], f"[disk] sets '{key}'; the runner assigns it "
                                      "(LUNs count from 0, ids are disk0, disk1, ...)")
            if key in ("perf", "plug") or (key == "size" and disk.get("file") == "scratch"):
                continue
            if key == "file":
                if val == "scratch":
                    size = size_bytes(disk.values.get("size", ""))
                    if size is None:
                        raise self.spec.error(disk.lines[key], "[disk] file = scratch needs a size")
                    hw.scratch[i] = size
                    continue
                val = self.resolve_path(val) or val
            props[key] = val
        perf = self._perf_of(v, disk)
        if perf:
            self._check_scale(v, "perf", perf)
            self._slowed = True
            props["perf"] = self._with_scale(perf)
        return props

    def guest(self, v: str, run_dir: str) -> Guest:
        """The machine layer's description of one run of variant v, its files in run_dir
        (scratch images, the host's trace), its command the variant's guest script."""
        var = self.variants[v]
        hw = var.hw
        disks = [Disk(dict(d.props), d.controller, d.lun) for d in hw.disks]
        for d in disks:
            if d.lun in hw.scratch:
                d.props["file"] = os.path.join(run_dir, f"disk{d.lun}.img")
        extra = HOST_TRACE + ["-D", os.path.join(run_dir, "host-trace.log")] \
            if self.trace and var.device == "hv-storvsc" else []
        return Guest(kernel=var.kernel, modules=var.modules or None, ko=[var.ko] if var.ko else [],
                     vcpus=var.vcpus, mem=var.mem, controllers=[Controller(c.id, dict(c.props)) for c in hw.controllers],
                     disks=disks, bridge=dict(hw.bridge) if hw.bridge else None, objects=list(hw.objects),
                     blockdevs=list(hw.blockdevs), devices=list(hw.devices), qemu_args=extra,
                     append=var.append.split(), initramfs_modules=list(var.initramfs_modules),
                     cmd=self.scripts[v], wait_disks=var.wait_disks, results=True,
                     coverage="hv_storvsc" if var.coverage else None, gcov=var.gcno or None,
                     timeout=float(var.timeout), quiet=True)

    def _scsi_debug(self, v: str, vcpus: int, params: list[str]) -> dict[str, str]:
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
        size = self.spec.disks[0].get("size") if self.spec.disks else None
        if "virtual_gb" not in given and size:
            b = size_bytes(size)
            if b:
                out["virtual_gb"] = str(max(1, math.ceil(b / 2 ** 30)))
        out.setdefault("dev_size_mb", given.pop("dev_size_mb", "64"))
        out.setdefault("fake_rw", given.pop("fake_rw", "1"))
        out.update(given)
        return out

    # --- the guest script -----------------------------------------------------------
    def guest_script(self, v: str) -> str:
        var = self.variants[v]
        with open(GUEST_TEMPLATE, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
        while lines and lines[0].startswith("#"):      # the template's own header
            lines.pop(0)
        text = "".join(lines)
        if var.device == "scsi_debug":
            luns, all_luns = [0], [0]
        else:
            all_luns = list(range(len(self.spec.disks)))
            luns = [i for i in all_luns if i not in var.hw.plug_later]
        host_events = any(e.action in timelinemod.HOST_ACTIONS for e in var.timeline)
        fields = {"DEVICE": var.device, "LUNS": " ".join(map(str, luns)), "ALL_LUNS": " ".join(map(str, all_luns)),
                  "TUNABLES": var.tunables, "TRACE_KB": str(self.trace_kb), "JOB": self.job.rstrip("\n"),
                  "TIMELINE": timelinemod.guest_script(var.timeline).rstrip("\n"),
                  "HOST_EVENTS": "1" if host_events else "0", "SNAPSHOT": "1" if self.snapshot else "0"}

        for k, x in fields.items():
            text = text.replace(f"@@{k}@@", x)
        left = re.findall(r"@@[A-Z_]+@@", text)
        if left:
            raise PlanError(f"{GUEST_TEMPLATE}: unknown fields {' '.join(sorted(set(left)))}")
        return text


def _num(x: float) -> str:
    return f"{x:g}"


def _reads(text: str) -> bool:
    """Whether a verdict line reads (a mistake is reported by verdicts.check)."""
    try:
        verdicts.parse(text)
        return True
    except verdicts.VerdictError:
        return False


def _read(path: str) -> str:
    """A text file's content ("" when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""
