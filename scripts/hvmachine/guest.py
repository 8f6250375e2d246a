"""The description of one guest: what every boot of the project is made from.

A Guest says which kernel boots (a Debian kernel by name or a bzImage), with which modules,
how many vCPUs and how much memory, which hv-storvsc controllers and hv-disk disks it has
(their QEMU properties as values, never as comma strings), what else QEMU gets, and what the
guest runs. validate() checks all of it in one place; qemu_args() renders it as QEMU's
command line. Nothing here starts a process.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Union

from .paths import default_kernel

DEBIAN_KERNELS = ("debian-6.1", "debian-6.12")
MAX_LUN = 63
# A value of a QEMU property: scalars render as QEMU's option syntax; lists and objects
# need a JSON -device (iothread-vq-mapping).
PropValue = Union[str, int, bool, float, List[object], Dict[str, object]]
Props = Dict[str, PropValue]

_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_PROP_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_MEM = re.compile(r"^[1-9][0-9]*[MGmg]?$")
# Properties the Guest sets itself: a disk names its controller and LUN with fields.
_PLACED = ("bus", "lun")


class GuestError(Exception):
    """A guest description that cannot boot, with what is wrong in words."""


@dataclass
class Device:
    """A QEMU device (-device) other than our controllers and disks."""
    driver: str
    props: Props = field(default_factory=dict)


@dataclass
class Controller:
    """An hv-storvsc controller; its disks sit on bus ID.0."""
    id: str
    props: Props = field(default_factory=dict)


@dataclass
class Disk:
    """An hv-disk: its properties (file, backend, size, perf, fault, drive, id, ...), on
    the controller with index `controller`, at `lun` (the next free one when None)."""
    props: Props = field(default_factory=dict)
    controller: int = 0
    lun: Optional[int] = None


@dataclass
class Guest:
    """Everything one boot is made from. See the module's docstring."""
    kernel: str = field(default_factory=default_kernel)
    modules: Optional[str] = None        # lib/modules/<version> for a bzImage path
    ko: List[str] = field(default_factory=list)  # modules replacing the stock ones
    vcpus: int = 2
    mem: str = "1G"
    accel: str = "tcg"
    cpu: str = "max"
    controllers: List[Controller] = field(default_factory=lambda: [Controller("scsi0")])
    disks: List[Disk] = field(default_factory=list)
    bridge: Optional[Props] = None       # hv-vmbus-bridge properties (given with any controller)
    objects: List[Props] = field(default_factory=list)    # -object, JSON (qom-type, id)
    blockdevs: List[Props] = field(default_factory=list)  # -blockdev, JSON
    devices: List[Device] = field(default_factory=list)   # after ours
    qemu_args: List[str] = field(default_factory=list)    # appended as they are
    append: List[str] = field(default_factory=list)       # kernel command line
    load_modules: List[str] = field(default_factory=list)  # modprobe'd by the init
    initramfs_modules: List[str] = field(default_factory=list)  # added to the initramfs
    cmd: Optional[str] = None            # the guest command; None: an interactive shell
    wait_disks: Optional[int] = None     # SCSI disks to wait for (default: len(disks))
    results: bool = False                # the results channel (a folder in the guest)
    timeout: Optional[float] = None      # a deadline for the whole boot
    silence: float = 600.0               # no sign of life for this long ends the boot
    quiet: bool = False                  # "quiet" on the kernel command line
    tolerate: List[str] = field(default_factory=list)  # kernel reports that may happen
    coverage: Optional[str] = None       # a module whose functions' hits to count (coverage.py)
    gcov: Optional[str] = None           # the .gcno of a profiled source: its lines' runs (coverage.py)
    resume_lun: Optional[int] = None     # resume from the hibernation image on the disk at this LUN
    files: Dict[str, bytes] = field(default_factory=dict)  # more files for /hvstor in the guest

    # --- checks -----------------------------------------------------------------------
    def validate(self) -> None:
        """Raises GuestError naming the first thing that cannot boot."""
        self._validate_kernel()
        if not 1 <= self.vcpus <= 255:
            raise GuestError(f"vcpus wants 1..255, got {self.vcpus}")
        if not _MEM.match(self.mem):
            raise GuestError(f"mem wants a size such as 1G or 512M, got '{self.mem}'")
        if self.accel not in ("tcg", "kvm"):
            raise GuestError(f"accel is tcg or kvm, got '{self.accel}'")
        self._validate_controllers()
        self._validate_disks()
        for name, props in (("bridge", self.bridge or {}),):
            _check_props(name, props)
        for d in self.devices:
            _check_props(f"device {d.driver}", d.props)
        for o in self.objects:
            if "qom-type" not in o or "id" not in o:
                raise GuestError(f"an -object needs qom-type and id, got {json.dumps(o)}")
        if self.wait_disks is not None and self.wait_disks < 0:
            raise GuestError(f"wait_disks wants 0 or more, got {self.wait_disks}")
        if self.results and self.cmd is None:
            raise GuestError("the results channel goes with a guest command")
        if self.coverage is not None and not (self.results and re.fullmatch(r"[a-z0-9_]+", self.coverage)):
            raise GuestError(f"coverage of '{self.coverage}' wants a module name and the results channel")
        if self.gcov is not None and not (self.results and self.gcov.endswith(".gcno") and os.path.isfile(self.gcov)):
            raise GuestError(f"gcov wants the .gcno file of a profiled source and the results channel, got '{self.gcov}'")
        for name in self.files:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == "cmd":
                raise GuestError(f"files: '{name}' is not a name for a file in /hvstor")
        if self.resume_lun is not None and not 0 <= self.resume_lun <= MAX_LUN:
            raise GuestError(f"resume_lun wants 0..{MAX_LUN}, got {self.resume_lun}")
        if self.timeout is not None and not self.timeout > 0:
            raise GuestError(f"timeout wants a positive number of seconds, got {self.timeout}")
        if not self.silence > 0:
            raise GuestError(f"silence wants a positive number of seconds, got {self.silence}")
        for a in self.append + self.load_modules + self.initramfs_modules:
            if not a or any(c.isspace() for c in a):
                raise GuestError(f"kernel arguments and module names take no blanks: '{a}'")
        for pattern in self.tolerate:
            try:
                re.compile(pattern)
            except re.error as e:
                raise GuestError(f"tolerate: '{pattern}' is no regular expression: {e}") from None

    def _validate_kernel(self) -> None:
        if self.kernel in DEBIAN_KERNELS:
            if self.modules:
                raise GuestError(f"modules is for a kernel given as a path, not {self.kernel}")
        elif not os.path.isfile(self.kernel):
            raise GuestError(f"kernel '{self.kernel}' is neither {' nor '.join(DEBIAN_KERNELS)} "
                             "nor a file")
        if self.modules and not os.path.isdir(self.modules):
            raise GuestError(f"modules: no folder {self.modules}")
        for ko in self.ko:
            if not os.path.isfile(ko):
                raise GuestError(f"ko: no such module file {ko}")

    def _validate_controllers(self) -> None:
        seen = set()
        for c in self.controllers:
            if not _ID.match(c.id):
                raise GuestError(f"controller id '{c.id}' wants letters, digits, '-', '_' or '.'")
            if c.id in seen:
                raise GuestError(f"controller id '{c.id}' given twice")
            seen.add(c.id)
            _check_props(f"controller {c.id}", c.props)
            if "id" in c.props:
                raise GuestError(f"controller {c.id}: its id is the field, not a property")
            if "type" in c.props:
                raise GuestError(f"controller {c.id}: 'type' is every QEMU object's type name; "
                                 "the VMBus device class is 'class' (scsi, ide, fc)")

    def _validate_disks(self) -> None:
        used: Dict[int, set[int]] = {}
        for n, d in enumerate(self.disks):
            what = f"disk {n}"
            if not 0 <= d.controller < len(self.controllers):
                raise GuestError(f"{what}: controller {d.controller} does not exist "
                                 f"(the guest has {len(self.controllers)})")
            _check_props(what, d.props)
            for k in _PLACED:
                if k in d.props:
                    raise GuestError(f"{what}: '{k}' is set by the disk's controller and lun fields")
            f = d.props.get("file")
            if f is not None and not os.path.exists(str(f)):
                raise GuestError(f"{what}: no such file: {f}")
            if d.lun is not None:
                if not 0 <= d.lun <= MAX_LUN:
                    raise GuestError(f"{what}: lun wants 0..{MAX_LUN}, got {d.lun}")
                if d.lun in used.setdefault(d.controller, set()):
                    raise GuestError(f"{what}: lun {d.lun} of controller "
                                     f"{self.controllers[d.controller].id} given twice")
                used[d.controller].add(d.lun)
        for d in self.placed_disks():
            c = self.controllers[d.controller]
            if c.props.get("class") == "ide" and d.lun != 0:
                raise GuestError(f"controller {c.id} is class=ide: it takes one disk, at lun 0, "
                                 f"not lun {d.lun}")

    # --- rendering ----------------------------------------------------------------------
    def placed_disks(self) -> List[Disk]:
        """The disks with every LUN decided: LUNs count up per controller, after the
        last one given."""
        nxt: Dict[int, int] = {}
        out = []
        for d in self.disks:
            lun = d.lun if d.lun is not None else nxt.get(d.controller, 0)
            nxt[d.controller] = lun + 1
            out.append(Disk(dict(d.props), d.controller, lun))
        return out

    def disks_to_wait_for(self) -> int:
        return len(self.disks) if self.wait_disks is None else self.wait_disks

    def device_args(self) -> List[str]:
        """-object, -blockdev and -device arguments for everything the guest has. The
        bridge comes first (the controllers plug into its bus); settings given as text
        (perf, vm-perf, fault) go as -object hv-disk-model, hv-vm-caps and hv-fault that
        the devices name by id, one object per device."""
        objects: List[Props] = list(self.objects)
        devs: List[Props] = []
        # Only with a controller or when asked for: a guest without one (a control arm on
        # virtio-scsi or scsi_debug) must not see a Hyper-V partition.
        if self.controllers or self.bridge is not None:
            devs.append({"driver": "hv-vmbus-bridge",
                         **_as_object(dict(self.bridge or {}), "vm-perf", "hv-vm-caps", "hvstor-vm-caps", objects)})
        for c in self.controllers:
            devs.append({"driver": "hv-storvsc", "id": c.id, **c.props})
        for d in self.placed_disks():
            ctl = self.controllers[d.controller].id
            lun = d.lun if d.lun is not None else 0
            name = str(d.props.get("id", f"{ctl}-lun{lun}"))
            props = _as_object(dict(d.props), "perf", "hv-disk-model", f"hvstor-{name}-model", objects)
            props = _as_object(props, "fault", "hv-fault", f"hvstor-{name}-fault", objects)
            devs.append({"driver": "hv-disk", "bus": f"{ctl}.0", "lun": lun, **props})
        devs += [{"driver": d.driver, **d.props} for d in self.devices]
        ids = [str(o["id"]) for o in objects]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise GuestError(f"two -object with the id {', '.join(twice)}: give the disks ids of their own")
        args: List[str] = []
        for o in objects:
            args += ["-object", json.dumps(o)]
        for b in self.blockdevs:
            args += ["-blockdev", json.dumps(b)]
        # QEMU creates JSON devices after all others: once one needs JSON, all go as JSON
        # so that controllers still come before their disks.
        as_json = any(isinstance(v, (list, dict)) for dev in devs for v in dev.values())
        for dev in devs:
            args += ["-device", json.dumps(dev) if as_json else opts_string(dev)]
        return args

    def kernel_cmdline(self, results_port: Optional[str], kmsg_port: Optional[str]) -> str:
        words = ["console=ttyS0", "panic=-1"]
        if self.quiet:
            words.append("quiet")
        if self.disks_to_wait_for():
            words.append(f"hvstor.wait_disks={self.disks_to_wait_for()}")
        if results_port:
            words.append(f"hvstor.results={results_port}")
        if kmsg_port:
            words.append(f"hvstor.kmsg={kmsg_port}")
        if self.load_modules:
            words.append("hvstor.modules=" + ",".join(self.load_modules))
        if self.coverage:
            words.append(f"hvstor.cov={self.coverage}")
        if self.gcov:
            words.append(f"hvstor.gcov={os.path.basename(self.gcov)[:-len('.gcno')]}")
        if self.resume_lun is not None:
            words.append(f"hvstor.resume={self.resume_lun}")
        return " ".join(words + self.append)


def _as_object(props: Props, key: str, qom_type: str, obj_id: str, objects: List[Props]) -> Props:
    """props with props[key], settings as text ("profile=premium-p10,burst=off"), moved to an
    -object of qom_type appended to objects and named by its id. A value that is no text of
    settings (an id already, "none") stays as it is. The object's properties are the text's
    settings with '.' written '-' (latency.read: latency-read), each a string."""
    text = props.get(key)
    if not isinstance(text, str) or "=" not in text:
        return props
    items = []
    for item in split_opts(text):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise GuestError(f"{key}: expected NAME=VALUE items, got '{item}' in '{text}'")
        items.append((k, v))
    if not _order_free([k for k, _ in items]) or (key == "perf" and any(k in ("name", "timeline") for k, _ in items)):
        return props  # as text: its order matters, or it names what is a disk's own
    obj: Props = {"qom-type": qom_type, "id": obj_id}
    for k, v in items:
        obj[k.replace(".", "-")] = v
    objects.append(obj)
    props[key] = obj_id
    return props


def _order_free(keys: List[str]) -> bool:
    """Whether settings written in this order mean the same in the model's own order (an
    object's): no key given twice, no specific key (latency.read) before its general one
    (latency), and not both of two keys for one setting (mbps and bps)."""
    if len(set(keys)) != len(keys):
        return False
    for i, k in enumerate(keys):
        if "." in k and k.split(".")[0] in keys[i + 1:]:
            return False
    return not any({f"{p}mbps", f"{p}bps"} <= set(keys) for p in ("", "burst."))


def _check_props(what: str, props: Mapping[str, PropValue]) -> None:
    for k, v in props.items():
        if not _PROP_NAME.match(k):
            raise GuestError(f"{what}: '{k}' is not a property name")
        if v is None or (isinstance(v, str) and v == ""):
            raise GuestError(f"{what}: property {k} has no value")


def opts_string(props: Mapping[str, PropValue]) -> str:
    """driver,key=value,... in QEMU's option syntax: a comma inside a value is doubled."""
    parts = [str(props["driver"])]
    for k, v in props.items():
        if k == "driver":
            continue
        parts.append(f"{k}={render_value(v)}")
    return ",".join(parts)


def render_value(v: PropValue) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v).replace(",", ",,")


def parse_props(text: str, what: str) -> Props:
    """key=value,key=value (QEMU's syntax, a doubled comma inside a value) into a dict: for
    the command line, where users write properties as QEMU does."""
    out: Props = {}
    for item in split_opts(text):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise GuestError(f"{what}: expected key=value items, got '{item}' in '{text}'")
        if k in out:
            raise GuestError(f"{what}: '{k}' given twice in '{text}'")
        out[k] = v
    return out


def split_opts(text: str) -> Sequence[str]:
    items, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "," and text[i + 1:i + 2] == ",":
            cur.append(",")
            i += 2
            continue
        if c == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    items.append("".join(cur))
    return [x for x in items if x]
