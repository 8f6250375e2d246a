"""Fixtures of the boot tests: guests booted under our QEMU through the machine layer
(scripts/hvmachine), in the shape of QEMU's tests/functional.

    def test_something(boot: Boot, checks: Checks) -> None:
        m = boot(guest(cmd=LUN_HELPERS + "...; echo READY-FOR-ADD; wait_lun 1"))
        m.wait_console("READY-FOR-ADD")
        m.qmp("device_add", driver="hv-disk", id="d1", bus="scsi0.0", lun=1, ...)
        r = m.finish()
        checks.that(r.ok, "guest command finished")

Without our QEMU (QEMU unset and no build in the cache) the whole file is skipped with
exit status 77, which meson counts as a skip, never as a pass.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)

from hvmachine import paths, qemu as qemumod  # noqa: E402  pylint: disable=wrong-import-position
from hvmachine.guest import Controller, Disk, Guest  # noqa: E402  pylint: disable=wrong-import-position
from hvmachine.machine import BootResult, Machine  # noqa: E402  pylint: disable=wrong-import-position

# One hang guard for every boot: a deadline that ends a guest whose command and host side
# wait for an event that never comes. It measures no speed: the longest boot test takes a
# few minutes even on a busy machine, and no test is sized to how long it takes. A guest
# that stops is ended sooner by the machine layer's silence watchdog.
HANG_GUARD = 1800.0
EXIT_SKIP = 77

__all__ = ["Controller", "Disk", "Guest", "HANG_GUARD", "Machine", "fault", "guest", "go_on", "set_fault", "stats"]


def _our_qemu() -> Optional[str]:
    q = os.environ.get("QEMU")
    if q:
        return q if os.access(q, os.X_OK) else None
    built = os.path.join(paths.cache_dir(), "qemu-build", "qemu-system-x86_64")
    return built if os.access(built, os.X_OK) else None


def pytest_configure(config: pytest.Config) -> None:  # pylint: disable=unused-argument
    q = _our_qemu()
    if q is None:
        print("skip: no QEMU with the device (set QEMU=, or ./hvstor build)", file=sys.stderr)
        pytest.exit("no QEMU with the device", returncode=EXIT_SKIP)
    os.environ["QEMU"] = q
    qemumod.import_qemu_python()   # qemu.qmp for the tests' ExecuteError


def guest(**fields: Any) -> Guest:
    """A Guest with the hang guard as its deadline."""
    fields.setdefault("timeout", HANG_GUARD)
    return Guest(**fields)


Boot = Callable[..., Machine]
Run = Callable[..., BootResult]


@pytest.fixture
def boot(tmp_path: Any) -> Iterator[Boot]:
    """boot(guest, **machine_args) -> a started Machine, its files under tmp_path; the
    command's output goes to this test's output as it comes."""
    machines: List[Machine] = []

    def start(g: Guest, **kw: Any) -> Machine:
        work = tmp_path / f"boot{len(machines)}"
        work.mkdir()
        kw.setdefault("on_output", lambda line: print(f"guest: {line}", flush=True))
        m = Machine(g, str(work), **kw)
        machines.append(m)
        m.start()
        return m

    yield start
    for m in machines:
        m.__exit__(None, None, None)


@pytest.fixture
def run(boot: Boot) -> Run:
    """run(guest, **machine_args) -> the BootResult of a boot with no host side."""
    def go(g: Guest, **kw: Any) -> BootResult:
        return boot(g, **kw).finish()
    return go


class Checks:
    """Checks that all run and are all reported: a boot is too dear to stop at the first
    thing wrong. The test fails at its end when one did not hold, listing each, with the
    last boot's output and why it ended."""

    def __init__(self) -> None:
        self.failed: List[str] = []
        self.results: List[BootResult] = []

    def that(self, ok: object, what: str) -> bool:
        print(f"  {'ok' if ok else 'NOT OK'}: {what}", flush=True)
        if not ok:
            self.failed.append(what)
        return bool(ok)

    def boot_ok(self, r: BootResult, what: str = "guest command finished") -> bool:
        """The boot ended with the command's status 0; the BootResult is kept for the report."""
        self.results.append(r)
        detail = "" if r.ok else f" ({r.describe().splitlines()[0]})" if r.failure else f" (status {r.status})"
        return self.that(r.ok, what + detail)

    def has(self, lines: Sequence[str], pattern: str, what: str) -> bool:
        return self.that(has(lines, pattern), what)

    def lacks(self, lines: Sequence[str], pattern: str, what: str) -> bool:
        return self.that(not has(lines, pattern), what)

    def count(self, lines: Sequence[str], pattern: str, n: int, what: str) -> bool:
        got = count(lines, pattern)
        return self.that(got == n, f"{what} ({got} of {n})" if got != n else what)

    def report(self) -> str:
        out = [f"{len(self.failed)} check(s) did not hold:"] + [f"  NOT OK: {f}" for f in self.failed]
        for i, r in enumerate(self.results):
            if not r.ok:
                out += [f"---- boot {i + 1} ----", r.describe()]
        if self.results:
            out += ["---- the last boot's output (last 60 lines) ----"] + self.results[-1].output[-60:]
        return "\n".join(out)


@pytest.fixture
def checks() -> Checks:
    return Checks()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    """A test whose checks did not all hold fails (in its own phase, not its teardown)."""
    outcome: Any = yield
    c = getattr(item, "funcargs", {}).get("checks")
    if outcome.excinfo is None and isinstance(c, Checks) and c.failed:
        pytest.fail(c.report(), pytrace=False)


def has(lines: Sequence[str], pattern: str) -> bool:
    rx = re.compile(pattern)
    return any(rx.search(ln) for ln in lines)


def count(lines: Sequence[str], pattern: str) -> int:
    rx = re.compile(pattern)
    return sum(1 for ln in lines if rx.search(ln))


def matches(lines: Sequence[str], pattern: str) -> List[str]:
    rx = re.compile(pattern)
    return [ln for ln in lines if rx.search(ln)]


def go_on(m: Machine, lun: int, controller: str = "scsi0", dev_id: Optional[str] = None) -> None:
    """Plugs a 1 MiB null disk at `lun`: a guest command that waits for it goes on (a
    guest must not end before the host's last QMP step, so its last line waits for a disk
    the host plugs last)."""
    m.qmp("device_add", driver="hv-disk", id=dev_id or f"go{lun}", bus=f"{controller}.0", lun=lun,
          backend="null", size=1 << 20)


def _device(path: str) -> str:
    """A QOM path: an id stands for /machine/peripheral/ID."""
    return path if path.startswith("/") else "/machine/peripheral/" + path


def set_fault(m: Machine, disk: str, value: str) -> None:
    """qom-set of an hv-disk's fault (`disk`: its id or QOM path); a refusal raises."""
    m.qmp("qom-set", path=_device(disk), property="fault", value=value)


def fault(m: Machine, disk: str) -> str:
    """The hv-disk's fault in effect, as text."""
    text: str = m.qmp("qom-get", path=_device(disk), property="fault")
    return text


def stats(m: Machine, path: str) -> Dict[str, Any]:
    """qom-get PATH stats (an hv-disk, an hv-storvsc, the bus): a JSON object as QMP gives it,
    read directly. Anything else fails the test that asked."""
    path = _device(path)
    got = m.qmp("qom-get", path=path, property="stats")
    assert isinstance(got, dict), f"qom-get {path} stats: a JSON object expected, got {type(got).__name__}: {got!r}"
    return got


# --- Module builds, file checks and the project's commands, for the patched-module,
# attribution and experiment-smoke tests ----------------------------------------------------
import shutil  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order
import subprocess  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order
from dataclasses import dataclass, field  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass
class ModuleBuild:
    """One run of scripts/build-module.sh: its status, the module (the last line of its
    output, when that is a file), the build-info beside it, and its progress (stderr)."""
    rc: int
    ko: Optional[str]
    log: str
    info: Dict[str, str] = field(default_factory=dict)

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log.splitlines()[-n:])


def build_module(*args: str) -> ModuleBuild:
    """scripts/build-module.sh ARGS (answered from its cache when built before)."""
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build-module.sh"), *args],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    lines = r.stdout.strip().splitlines()
    ko = lines[-1] if r.returncode == 0 and lines and os.path.isfile(lines[-1]) else None
    info = read_build_info(os.path.join(os.path.dirname(ko), "build-info")) if ko else {}
    return ModuleBuild(r.returncode, ko, r.stderr, info)


def read_build_info(path: str) -> Dict[str, str]:
    """KEY=value lines of a build-info file ({} when there is none)."""
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)


def modinfo(ko: str, what: str) -> str:
    """modinfo -F WHAT of a module file, as $(modinfo ...) gives it (its trailing blank kept; '' when
    modinfo cannot read it)."""
    tool = shutil.which("modinfo") or "/usr/sbin/modinfo"
    r = subprocess.run([tool, "-F", what, ko], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, check=False)
    return r.stdout.rstrip("\n") if r.returncode == 0 else ""


def stock_module(tree: str) -> Optional[str]:
    """The first hv_storvsc.ko* under `tree` (a guest kernel's unpacked package)."""
    for dirpath, dirs, files in os.walk(tree):
        dirs.sort()
        for f in sorted(files):
            if f.startswith("hv_storvsc.ko"):
                return os.path.join(dirpath, f)
    return None


def is_png(path: str) -> bool:
    """The file exists and starts with PNG's signature."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == PNG_MAGIC
    except OSError:
        return False


def file_lines(path: str) -> List[str]:
    """A text file's lines ([] when it is missing)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def hvstor(*args: str) -> tuple[int, List[str]]:
    """./hvstor ARGS to its end: its exit status and its output (stdout and stderr), each
    line also printed to this test's output as it comes."""
    p = subprocess.Popen([os.path.join(ROOT, "hvstor"), *args], cwd=ROOT, text=True, errors="replace",
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out: List[str] = []
    assert p.stdout is not None
    for line in p.stdout:
        out.append(line.rstrip("\n"))
        print(f"hvstor: {out[-1]}", flush=True)
    return p.wait(), out


# --- QEMU's threads and a file's checksum, for the drive, iothread, iothread-mapping and
# soak tests -------------------------------------------------------------------------------
import hashlib  # noqa: E402  pylint: disable=wrong-import-position,wrong-import-order


def qemu_threads(pid: int) -> List[tuple[str, int]]:
    """(name, times it ran on a CPU: schedstat's third field) of each thread of process
    `pid` (a thread that ends while they are read is left out)."""
    out: List[tuple[str, int]] = []
    for t in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{t}/comm", encoding="utf-8") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{t}/schedstat", encoding="utf-8") as f:
                slices = int(f.read().split()[2])
        except (OSError, IndexError, ValueError):
            continue
        out.append((name, slices))
    return out


def sha256_file(path: str) -> str:
    """The SHA-256 of a file, in hex (as sha256sum prints it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- Sparse disk images, for the resize, crash-consistency and disk-io tests ---------------
def sparse_file(path: "os.PathLike[str] | str", size: int) -> str:
    """A sparse file of `size` bytes at `path` (a raw disk image, all zeros); its path."""
    with open(path, "wb") as f:
        f.truncate(size)
    return os.fspath(path)
