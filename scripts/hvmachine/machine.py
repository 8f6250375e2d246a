"""One boot of a Guest under our QEMU, through QEMU's own qemu.machine and qemu.qmp.

    with Machine(guest, workdir) as m:
        m.wait_console("READY-FOR-ADD")          # a line the guest command printed
        m.qmp("device_add", driver="hv-disk", id="d1", bus="scsi0.0", lun=1, ...)
        m.device_del("d1")                       # returns with its DEVICE_DELETED
        result = m.finish()                      # the command's status and output

Two threads watch the guest while the caller works: one reads the console (the init's
markers, the command's output, a panic), the other reads the kernel's log from the kmsg
channel (every message, at every level, whatever the console shows) and keeps the clocks.
While the command runs the guest's console carries its output alone; on_output gets, beside
it, the kernel messages the console would have shown, from the kmsg channel.
The boot ends, and every wait in it raises BootFailed at once, when the guest kernel reports
an Oops, BUG, WARNING, panic or hung task, when the deadline passes (Guest.timeout), when
the guest shows no sign of life (console, kmsg or the init's heartbeat) for Guest.silence
seconds, or when QEMU exits. Waits have no clock of their own.

A boot may end in a snapshot instead of a power-off: snapshot(FOLDER) stops the guest, has
QEMU write its whole state there with the console and the kernel's log so far, and ends
QEMU. Machine(guest, restore=FOLDER) then goes on from that moment in a new QEMU with the
same devices (as many times as wanted): its logs start with what the saved boot showed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Pattern, Set, Tuple, Union

from . import assets as assetsmod
from . import coverage as coveragemod
from .guest import Guest
from .paths import cache_dir
from .qemu import import_qemu_python, qemu_binary
from .watch import Console, KernelReport, KmsgLog, LineSplitter, clean

# Serial ports of the guest: the console, the results channel, the kernel's log.
RESULTS_PORT, KMSG_PORT = "ttyS1", "ttyS2"
FIRMWARE_DIRS = ("/usr/share/seabios", "/usr/share/qemu")
POLL = 0.2          # seconds between looks of a wait; never a limit
REPORT_GRACE = 3.0  # seconds a kernel report may take to be logged whole before the end
POWEROFF_GRACE = 60.0  # a guest that reported its status and did not power off is ended
QMP_LOST_GRACE = 10.0  # how long a QMP command whose connection dropped waits for QEMU's exit
KMSG_READ = 1 << 20    # bytes of the kmsg channel read at once, up to 16 times a look
# Concurrent launches would hand one QEMU the other's console and QMP sockets (QEMU
# inherits every inheritable fd): one at a time.
_LAUNCH = threading.Lock()


class BootError(Exception):
    """A boot that could not start (bad description, no assets, QEMU refused); exit_code is
    124 when QEMU did not answer before the boot's deadline or silence, else 125."""

    def __init__(self, message: str, exit_code: int = 125) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Failure:
    """Why a boot did not end with the guest command's status."""
    kind: str                     # deadline, silence, kernel, qemu-exit, results
    message: str
    lines: List[str] = field(default_factory=list)   # the kernel's report, when there is one

    @property
    def exit_code(self) -> int:
        return 124 if self.kind in ("deadline", "silence") else 125


@dataclass
class BootResult:
    """How a boot ended."""
    status: Optional[int]          # the guest command's exit status, when it reported one
    failure: Optional[Failure]
    output: List[str]              # the command's lines
    console: List[str]             # every console line
    kernel_log: str                # the guest kernel's whole log (dmesg)
    kernel_log_lost: int           # its records that the log buffer lost before they were read
    noted: List[str]               # kernel reports that did not end the boot
    coverage: Optional[Dict[str, int]]  # Guest.coverage: hits per function of the module
    lines: Optional[Dict[int, int]]     # Guest.gcov: runs per executable line of its source
    qemu_output: str
    qemu_exitcode: Optional[int]   # QEMU's exit status (negative: the signal that ended it)
    ready_after: Optional[float]   # seconds from the launch to the guest's init being ready
    elapsed: float
    console_log: str               # paths of the logs
    kernel_log_path: str
    warnings: List[str] = field(default_factory=list)
    hibernated: bool = False       # the guest powered off having written a hibernation image
    saved: bool = False            # the guest was saved to a snapshot and this boot ended there

    @property
    def exit_code(self) -> int:
        if self.failure is not None:
            return self.failure.exit_code
        if self.status is None and (self.hibernated or self.saved):
            return 0
        return self.status if self.status is not None else 125

    @property
    def ok(self) -> bool:
        return self.failure is None and (self.status == 0 or (self.status is None and (self.hibernated or self.saved)))

    def notes(self) -> List[str]:
        """What a person should hear of a boot that did not fail: kernel reports that did
        not end it (soft lockups, RCU stalls, tolerated ones), and warnings."""
        return [f"the guest kernel logged: {n}" for n in self.noted] + self.warnings

    def describe(self) -> str:
        """What went wrong, for a person: the reason, QEMU's output, the kernel's report,
        the console's end and where the whole logs are."""
        if self.failure is None:
            done = f"the guest command exited with status {self.status}"
            if self.status is None and self.hibernated:
                done = "the guest hibernated: its image is on its swap disk (Guest.resume_lun resumes it)"
            elif self.status is None and self.saved:
                done = "the guest was saved to a snapshot (Machine(restore=FOLDER) goes on from it)"
            return "\n".join([done] + self.notes())
        out = [f"error: {self.failure.message}"]
        if self.qemu_output.strip():
            out += ["--- QEMU output ---"] + [clean(ln) for ln in self.qemu_output.rstrip().splitlines()[-20:]]
        if self.failure.lines:
            out += ["--- the guest kernel's report ---"] + self.failure.lines
        init = [ln for ln in self.console if ln.startswith("hvstor-init: modprobe")]
        if init:
            out += ["--- the guest's init ---"] + init[:6]
        out += ["--- last 60 lines of the guest console ---"] + (self.console[-60:] or ["(empty)"])
        out += ["---", f"console log: {self.console_log}", f"kernel log: {self.kernel_log_path}"]
        return "\n".join(out)


class BootFailed(Exception):
    """The boot ended before what a caller waited for came."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")
        self.why = why


Marker = Union[str, Pattern[str]]


class Machine:
    """See the module's docstring."""

    def __init__(self, guest: Guest, workdir: Optional[str] = None, *,
                 on_output: Optional[Callable[[str], None]] = None,
                 console_log: Optional[str] = None, results_dir: Optional[str] = None,
                 qmp_socket: Optional[str] = None, name: str = "guest",
                 assets: Optional[assetsmod.Assets] = None, qemu: Optional[str] = None,
                 restore: Optional[str] = None) -> None:
        self.guest = guest
        self.restore = restore         # a snapshot() folder the guest goes on from, or None
        self._assets = assets          # the kernel and base initramfs, when already at hand
        self._qemu = qemu              # the QEMU binary (default: qemu.qemu_binary())
        self._own_workdir = workdir is None
        # workdir keeps the logs (console.log, dmesg.txt, qemu.log); the boot's own files
        # (initramfs, chardev files) are in a folder of their own inside it, gone at the end.
        self.workdir = workdir or tempfile.mkdtemp(prefix="hvstor-boot.")
        self.rundir = tempfile.mkdtemp(prefix=".boot-", dir=self.workdir)
        self.console_log = console_log or os.path.join(self.workdir, "console.log")
        self.kernel_log = os.path.join(self.workdir, "dmesg.txt")
        self.qemu_log = os.path.join(self.workdir, "qemu.log")
        self.results_dir = results_dir
        self.qmp_socket = qmp_socket
        self.name = name
        self._on_output = on_output
        tolerate = [re.compile(t) for t in guest.tolerate]
        self._console = Console(tolerate)
        self._kmsg = KmsgLog(tolerate)
        self._cond = threading.Condition()
        self._failure: Optional[Failure] = None
        self._exited = False
        self._result: Optional[BootResult] = None
        self._vm: Any = None
        self._threads: List[threading.Thread] = []
        self._started = 0.0
        self._ready_at: Optional[float] = None
        self._status_at: Optional[float] = None
        self._report_at: Optional[float] = None
        self._warnings: List[str] = []
        self._console_bytes = 0
        self._handed = 0               # console lines whose output on_output has had
        self._kmsg_shown: List[str] = []     # kernel messages for on_output, as the console shows them
        self._console_file: Any = None
        self._cov_functions: List[str] = []
        self._binary = self._kernel_path = self._initrd_path = ""
        self._moves = 0                      # migrations to another QEMU so far
        self._saved = False                  # snapshot() ended this boot
        self._console_split = LineSplitter()  # the console's lines (a restore's start with the snapshot's)
        self._earlier_output: List[str] = []  # the output of the QEMUs the guest left

    # --- the context manager ------------------------------------------------------------
    def __enter__(self) -> "Machine":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._vm is not None and self._result is None:
            self._end("", None)
            self.finish()

    # --- starting ---------------------------------------------------------------------------
    def qemu_args(self, kernel: str, initrd: str, incoming: bool = False) -> List[str]:
        """QEMU's arguments beside those qemu.machine adds (QMP, the console). `incoming`: for
        the QEMU a migration moves the guest to, which waits for it and appends to the
        channels' files the first one wrote (the user's QMP socket stays the first's), and
        for a restore (whose channels' files start with the snapshot's)."""
        g = self.guest
        cmdline = g.kernel_cmdline(RESULTS_PORT if g.results else None, KMSG_PORT)
        w = self.rundir
        app = ",append=on" if incoming else ""
        args = base_args(g, kernel, initrd, cmdline)
        args += ["-chardev", f"file,id=hvhb,path={w}/heartbeat{app}",
                 "-device", "isa-debugcon,iobase=0x402,chardev=hvhb"]
        if g.results:
            args += ["-chardev", f"file,id=hvres,path={w}/results.tar{app}",
                     "-device", "isa-serial,chardev=hvres,index=1"]
        args += ["-chardev", f"file,id=hvkmsg,path={w}/kmsg{app}",
                 "-device", "isa-serial,chardev=hvkmsg,index=2"]
        if self.qmp_socket and (not incoming or not self._moves):
            args += ["-qmp", f"unix:{self.qmp_socket},server=on,wait=off"]
        if incoming:
            args += ["-incoming", "defer"]
        return args + g.device_args() + g.qemu_args

    def start(self) -> None:
        """Validates the guest, prepares its assets and launches QEMU."""
        try:
            self._launch()
        except BaseException:
            if self._console_file is not None:
                self._console_file.close()
            shutil.rmtree(self.rundir, ignore_errors=True)
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        try:
            sock = self._vm.console_socket
            self._threads = [threading.Thread(target=self._read_console, args=(sock,), daemon=True),
                             threading.Thread(target=self._monitor, daemon=True)]
            for t in self._threads:
                t.start()
        except BaseException:
            # Ctrl-C or SIGTERM once QEMU runs, before `with` could call __exit__: QEMU
            # would outlive this process.
            self._abort_start()
            raise

    def _abort_start(self) -> None:
        """Ends a boot whose start() was cut short after QEMU's launch, as finish() does."""
        self.kill()
        for t in self._threads:
            if t.ident is not None:
                t.join()
        with self._cond:
            self._exited = True
        self.finish()

    def _launch(self) -> None:
        g = self.guest
        g.validate()
        if g.cmd is None:
            raise BootError("Machine boots a guest command; an interactive guest is interactive()")
        import_qemu_python()
        binary = self._qemu or qemu_binary()
        a = self._assets or assetsmod.prepare(g)
        files = dict(g.files)
        if g.coverage:
            self._cov_functions = coveragemod.module_functions(self._coverage_module(g, a))
            files[coveragemod.FUNCTIONS] = coveragemod.list_file(self._cov_functions)
        initrd = assetsmod.with_command(a.initrd, g.cmd, os.path.join(self.rundir, "initrd.img"), files)
        saved = read_snapshot(self.restore, g) if self.restore else None
        for f in ("heartbeat", "kmsg", "results.tar"):
            with open(os.path.join(self.rundir, f), "wb") as out:
                out.write(saved.kmsg if saved and f == "kmsg" else b"")
        os.makedirs(os.path.dirname(os.path.abspath(self.console_log)), exist_ok=True)
        self._console_file = open(self.console_log, "wb")  # pylint: disable=consider-using-with
        self._binary, self._kernel_path, self._initrd_path = binary, a.kernel, initrd
        vm = _qemu_machine(binary, args=self.qemu_args(a.kernel, initrd, incoming=saved is not None),
                           name=self.name, base_temp_dir=self.rundir, log_dir=self.rundir)
        vm.set_console()
        self._started = time.monotonic()
        self._vm = self._launched(vm)
        if saved is not None:
            self._restored(saved)

    def _launched(self, vm: Any) -> Any:
        """vm launched and answering QMP, else BootError with QEMU ended and reaped. Launching
        waits for QMP's greeting with no bound of its own, under the launch lock: a QEMU stuck
        before its monitor runs is ended at the boot's deadline or silence."""
        from qemu.machine.machine import VMLaunchFailure  # pylint: disable=import-outside-toplevel
        guard = _LaunchGuard(vm, *self._launch_bound())
        try:
            with _LAUNCH:
                vm.launch()
            # QMP answers before the watchers start: what QEMU does next is the guest's.
            vm.cmd("query-status")
        except VMLaunchFailure as e:
            why = guard.why or f"exit status {e.exitcode}"
            raise BootError(f"QEMU did not start ({why}):\n{(e.output or '').rstrip()}",
                            124 if guard.why else 125) from None
        except BaseException as e:
            try:
                # QEMU that dropped QMP is on its way out: its last words, then it is reaped.
                vm.wait(timeout=int(QMP_LOST_GRACE) if isinstance(e, Exception) else 0)
            except Exception:  # pylint: disable=broad-except
                pass
            if not isinstance(e, Exception):
                raise
            why = guard.why or f"QMP failed: {type(e).__name__}: {e}"
            raise BootError(f"QEMU did not start ({why}):\n{(vm.get_log() or '').rstrip()}",
                            124 if guard.why else 125) from None
        finally:
            guard.stop()
        return vm

    def _launch_bound(self) -> Tuple[float, str]:
        """How long QEMU may take to answer QMP, and what is said when it did not."""
        g = self.guest
        if g.timeout is not None and g.timeout <= g.silence:
            return g.timeout, f"the deadline of {g.timeout:g}s passed before QEMU answered QMP"
        return g.silence, f"no sign of life for {g.silence:g}s: QEMU did not answer QMP"

    @staticmethod
    def _coverage_module(g: Guest, a: assetsmod.Assets) -> str:
        """The file of the module whose coverage is counted: one given with ko= of that
        name, else the kernel's own."""
        assert g.coverage is not None
        for ko in g.ko:
            if os.path.basename(ko).split(".")[0].replace("-", "_") == g.coverage:
                return ko
        if not a.modules:
            raise coveragemod.CoverageError(f"the guest's kernel has no module tree to find {g.coverage} in")
        return coveragemod.find_module(a.modules, g.coverage)

    @property
    def vm(self) -> Any:
        """The qemu.machine.QEMUMachine (for what this class does not wrap)."""
        return self._vm

    @property
    def pid(self) -> Optional[int]:
        return self._vm.get_pid() if self._vm is not None else None

    # --- the threads ----------------------------------------------------------------------
    def _read_console(self, sock: Any) -> None:
        lines = self._console_split
        while True:
            ready, _, _ = select.select([sock], [], [], POLL)
            self._hand_on_kmsg()
            if not ready:
                if self._vm_exited():
                    break
                continue
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            self._console_file.write(data)
            self._console_file.flush()
            self._console_lines(lines.feed(data), len(data))
        self._console_lines(lines.end(), 0)

    def _console_lines(self, lines: List[str], nbytes: int) -> None:
        """Console lines: what they say under the lock, then the command's lines to
        on_output outside it, in order (an on_output that blocks, stdout a full pipe, stops
        no clock)."""
        out: List[str] = []
        with self._cond:
            self._console_bytes += nbytes
            for line in lines:
                o = self._console_line(line)
                if o is not None:
                    out.append(o)
            fed = len(self._console.lines)
            self._cond.notify_all()
        for o in out:
            self._hand_on(o)
        with self._cond:
            self._handed = fed
            self._cond.notify_all()

    def _hand_on(self, line: str) -> None:
        """on_output(line), from the console's reader (and once it is gone, the monitor);
        one that raises (stdout closed) is not called again, and the boot goes on: the
        console is still read, the status still counts."""
        if self._on_output is None:
            return
        try:
            self._on_output(line)
        except Exception as e:  # pylint: disable=broad-except
            self._on_output = None
            self._warnings.append(f"on_output raised {type(e).__name__}: {e}: the command's output was no "
                                  "longer handed on")

    def _console_line(self, line: str) -> Optional[str]:
        """One console line, under the lock; the line when it is the command's output."""
        c = self._console
        was_ready, had_report = c.ready, c.report is not None
        out = c.feed(line)
        now = time.monotonic()
        if c.ready and not was_ready:
            self._ready_at = now
        if c.status is not None and self._status_at is None:
            self._status_at = now
        if c.report is not None and not had_report and self._report_at is None:
            self._report_at = now
        return out

    def _vm_exited(self) -> bool:
        return self._vm is None or self._vm.exitcode() is not None

    def _monitor(self) -> None:
        """Reads the kmsg channel and keeps the clocks, until QEMU has exited."""
        kmsg_path = os.path.join(self.rundir, "kmsg")
        beat_path = os.path.join(self.rundir, "heartbeat")
        lines = LineSplitter()
        with open(kmsg_path, "rb") as kmsg:
            life, life_at = -1, time.monotonic()
            while True:
                exited = self._vm_exited()
                self._read_kmsg(kmsg, lines)
                now = time.monotonic()
                signs = self._console_bytes + os.path.getsize(kmsg_path) + os.path.getsize(beat_path)
                if signs != life:
                    life, life_at = signs, now
                if exited:
                    break
                self._check_clocks(now, now - life_at)
                time.sleep(POLL)
        self._kmsg_lines(lines.end())   # a record cut off by QEMU's exit
        for t in self._threads:
            if t is not threading.current_thread() and t.ident is not None:
                t.join()
        self._hand_on_kmsg()            # what came after the console's reader ended
        with self._cond:
            self._exited = True
            self._cond.notify_all()

    def _read_kmsg(self, f: Any, lines: LineSplitter) -> None:
        for _ in range(16):
            data = f.read(KMSG_READ)
            if not data:
                return
            self._kmsg_lines(lines.feed(data))

    def _kmsg_lines(self, lines: List[str]) -> None:
        """Records of the kmsg channel, under the lock; the ones the console would have
        shown while the command ran wait for the console's reader to hand them on (this
        thread keeps the clocks: an on_output that blocks must not stop it)."""
        with self._cond:
            had = self._kmsg.report is not None
            for line in lines:
                r = self._kmsg.feed(line)
                if r is not None and self._kmsg.for_console(r):
                    self._kmsg_shown.append(r.line())
            if self._kmsg.report is not None and not had and self._report_at is None:
                self._report_at = time.monotonic()
            self._cond.notify_all()

    def _hand_on_kmsg(self) -> None:
        """Hands on the kernel messages waiting for it, outside the lock."""
        with self._cond:
            shown, self._kmsg_shown = self._kmsg_shown, []
        for line in shown:
            self._hand_on(line)

    def _check_clocks(self, now: float, quiet_for: float) -> None:
        report = self._report()
        if report is not None and self._report_at is not None:
            if report.complete or now - self._report_at >= REPORT_GRACE:
                self._end("kernel", f"the guest kernel reported {_a(report.kind)}: {report.lines[0]}",
                          report.lines)
            return
        over = self._clock_out(now, quiet_for)
        if self._status_at is None:
            if over is not None:
                self._end(*over)
        elif over is not None or now - self._status_at >= POWEROFF_GRACE:
            # The command is done and its status stands, whichever clock ran out.
            g = self.guest
            when = {"deadline": f"by the deadline of {g.timeout or 0:g}s",
                    "silence": f"and showed no sign of life for {g.silence:g}s"}[over[0]] if over \
                else f"in {POWEROFF_GRACE:g}s"
            self._warnings.append(f"the guest reported its status but did not power off {when}: QEMU was ended")
            self._end("", None)

    def _clock_out(self, now: float, quiet_for: float) -> Optional[Tuple[str, str]]:
        """The deadline or the silence watchdog, when one has run out: (kind, message)."""
        g = self.guest
        if g.timeout is not None and now - self._started >= g.timeout:
            when = "the guest command did not finish" if self._ready_at else "before the guest was ready"
            return "deadline", f"the deadline of {g.timeout:g}s passed: {when}"
        if quiet_for >= g.silence:
            when = "" if self._ready_at else " before the guest was ready"
            return "silence", (f"the guest showed no sign of life for {g.silence:g}s{when} "
                               "(no console output, no kernel message, no heartbeat)")
        return None

    def _report(self) -> Optional[KernelReport]:
        return self._kmsg.report or self._console.report

    def _end(self, kind: str, message: Optional[str], lines: Optional[List[str]] = None) -> None:
        """Ends QEMU (TERM, then KILL 10 s later); `message` says why the boot failed (None:
        the boot had ended well, or the caller ended it)."""
        with self._cond:
            if message is not None and self._failure is None:
                self._failure = Failure(kind, message, list(lines or []))
            self._cond.notify_all()
        pid = self.pid
        if pid is None:
            return
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not self._vm_exited() and time.monotonic() < deadline:
            time.sleep(POLL)
        if not self._vm_exited():
            _signal(pid, signal.SIGKILL)

    # --- waiting -------------------------------------------------------------------------------
    def _why_ended(self) -> Optional[str]:
        """Under the lock: why the boot can no longer give what a caller waits for."""
        if self._failure is not None:
            return self._failure.message
        if self._console.status is not None:
            return f"the guest command ended with status {self._console.status}"
        if self._exited or self._vm_exited():
            return f"QEMU exited (status {self._vm.exitcode() if self._vm else None})"
        return None

    def wait_console(self, marker: Marker) -> str:
        """The first console line holding `marker` (text, or a compiled pattern searched
        for); waits for it. Lines printed before the call count."""
        def holds(line: str) -> bool:
            return bool(marker.search(line)) if isinstance(marker, re.Pattern) else marker in line
        seen = 0
        with self._cond:
            while True:
                lines = self._console.lines
                for n in range(seen, len(lines)):
                    if holds(lines[n]):
                        # on_output has had the line too, unless the boot ended.
                        while self._handed <= n and self._why_ended() is None:
                            self._cond.wait(POLL)
                        return lines[n]
                seen = len(lines)
                why = self._why_ended()
                if why is not None:
                    raise BootFailed(f"waiting for '{_pattern_text(marker)}' on the console", why)
                self._cond.wait(POLL)

    def wait_until(self, ready: Callable[[], bool], what: str = "a condition") -> None:
        """Returns once ready() is true; asks again every POLL seconds (ready() may use QMP:
        it runs in the caller's thread)."""
        while not ready():
            with self._cond:
                why = self._why_ended()
            if why is not None:
                raise BootFailed(f"waiting for {what}", why)
            time.sleep(POLL)

    def qmp(self, cmd: str, **args: Any) -> Any:
        """A QMP command's return value (keys with '_' go as '-', as qemu.machine does);
        qemu.qmp's ExecuteError when QEMU refuses it, BootFailed when QEMU is gone."""
        from qemu.qmp import ExecuteError  # pylint: disable=import-outside-toplevel
        if self._vm is None:
            raise BootFailed(f"QMP {cmd}", "the machine is not running")
        try:
            return self._vm.cmd(cmd, **args)
        except ExecuteError:
            raise
        except Exception as e:  # pylint: disable=broad-except
            why = self._qmp_lost(e)
            if why is None:
                raise
            raise BootFailed(f"QMP {cmd}", why) from e

    def _qmp_lost(self, e: Exception) -> Optional[str]:
        """Why QMP failed with `e`, when the connection is gone (None: an error of the call).
        QEMU closes its monitor a while before its process ends: wait for the end then, up to
        QMP_LOST_GRACE seconds."""
        from qemu.qmp import QMPError  # pylint: disable=import-outside-toplevel
        if not isinstance(e, (QMPError, OSError, EOFError)) and not (self._vm_exited() or self._failure):
            return None
        deadline = time.monotonic() + QMP_LOST_GRACE
        with self._cond:
            while self._why_ended() is None and time.monotonic() < deadline:
                self._cond.wait(POLL)
            return self._why_ended() or f"the QMP connection was lost while QEMU runs ({type(e).__name__}: {e})"

    def event_wait(self, name: str, match: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The first QMP event `name` (matching `match` as qemu.machine matches) that came
        or comes."""
        while True:
            try:
                ev = self._vm.event_wait(name, timeout=POLL, match=match)
            except TimeoutError:
                ev = None
            except Exception as e:  # pylint: disable=broad-except
                why = self._qmp_lost(e)
                if why is None:
                    raise
                raise BootFailed(f"waiting for the QMP event {name}", why) from e
            if ev is not None:
                return dict(ev)
            with self._cond:
                why = self._why_ended() if self._failure or self._vm_exited() else None
            if why is not None:
                raise BootFailed(f"waiting for the QMP event {name}", why)

    def device_del(self, dev_id: str) -> None:
        """device_del, then its DEVICE_DELETED."""
        self.qmp("device_del", id=dev_id)
        self.event_wait("DEVICE_DELETED", match={"data": {"device": dev_id}})

    def console_input(self, text: str) -> None:
        """Types `text` on the guest's console (its serial port's input): a guest command
        waiting with `read line < /dev/ttyS0` goes on."""
        if self._vm is None:
            raise BootFailed("console input", "the machine is not running")
        try:
            self._vm.console_socket.sendall(text.encode())
        except OSError as e:   # QEMU has gone: the boot says why
            with self._cond:
                while self._why_ended() is None and not self._vm_exited():
                    self._cond.wait(POLL)
                raise BootFailed("console input", self._why_ended() or f"{type(e).__name__}: {e}") from None

    def kill(self) -> None:
        """SIGKILL to QEMU, as a crash would end it (the boot then ends with qemu-exit)."""
        pid = self.pid
        if pid is not None:
            _signal(pid, signal.SIGKILL)

    # --- moving the guest -----------------------------------------------------------------------
    def migrate(self, via: str = "socket") -> Dict[str, Any]:
        """Moves the running guest to a new QEMU started with the same arguments, and ends
        the old one: live migration over a UNIX socket (via="socket"), or through a file the
        old QEMU writes and the new one reads (via="file"). Console, kernel log and heartbeat
        go on from the new QEMU; qmp() talks to it. Returns once the new QEMU runs the guest,
        with the old QEMU's last query-migrate. Disks must be on storage both can open (an
        image or file; the old QEMU lets go of drive= images when the migration completes)."""
        if via not in ("socket", "file"):
            raise ValueError(f"migrate via {via!r}: 'socket' or 'file'")
        if self._vm is None or self._result is not None:
            raise BootFailed("migrating", "the machine is not running")
        self._moves += 1
        uri = f"unix:{self.rundir}/migrate.sock" if via == "socket" else f"file:{self.rundir}/migrate.state"
        new = _qemu_machine(self._binary, args=self.qemu_args(self._kernel_path, self._initrd_path, incoming=True),
                            name=f"{self.name}-{self._moves}", base_temp_dir=self.rundir, log_dir=self.rundir)
        new.set_console()
        new = self._launched(new)
        try:
            if via == "socket":
                new.cmd("migrate-incoming", uri=uri)
            info = self._migrated(uri)
            if via == "file":
                new.cmd("migrate-incoming", uri=uri)
            self._await_running(new, "the new QEMU to run the guest")
        except BaseException:
            new.kill()
            new.wait(timeout=None)
            raise
        self._take_over(new)
        return info

    def _migrated(self, uri: str) -> Dict[str, Any]:
        """Sends the guest to `uri` from the current QEMU; its query-migrate once completed."""
        self.qmp("migrate", uri=uri)
        while True:
            info: Dict[str, Any] = self.qmp("query-migrate")
            status = info.get("status")
            if status == "completed":
                return info
            if status in ("failed", "cancelled"):
                raise BootFailed("migrating", f"the migration {status}: {info.get('error-desc', '')}")
            with self._cond:
                why = self._why_ended()
            if why is not None:
                raise BootFailed("migrating", why)
            time.sleep(POLL)

    def _await_running(self, vm: Any, what: str) -> None:
        while vm.cmd("query-status")["status"] != "running":
            with self._cond:
                why = self._why_ended() if self._failure else None
            if why is not None or vm.exitcode() is not None:
                raise BootFailed(f"waiting for {what}", why or f"it exited (status {vm.exitcode()})")
            time.sleep(POLL)

    def _take_over(self, new: Any) -> None:
        """The new QEMU becomes the machine's; the old one ends, and its console's reader
        with it, before a reader of the new console starts."""
        with self._cond:
            old, self._vm = self._vm, new
        try:
            old.cmd("quit")   # its console closes: the reader ends at the end of what it sent
        except Exception:  # pylint: disable=broad-except
            old.kill()
        self._threads[0].join()
        try:
            old.shutdown(timeout=30)
        except Exception:  # pylint: disable=broad-except
            old.kill()
        self._earlier_output.append(old.get_log() or "")
        self._console_split = LineSplitter()
        self._threads[0] = threading.Thread(target=self._read_console, args=(new.console_socket,), daemon=True)
        self._threads[0].start()

    # --- snapshots ---------------------------------------------------------------------------
    def snapshot(self, folder: str) -> Dict[str, Any]:
        """Saves the running guest to `folder` and ends this boot there: the VM stops, QEMU
        writes its RAM and devices' state to FOLDER/state (a migration to a file), QEMU ends,
        and the folder keeps the console and the kernel's log up to the stop. finish() then
        gives a result with saved=True. Returns QEMU's query-migrate of the save. Disks stay
        the caller's: a restoring QEMU opens the disks its Guest names, which must hold what
        these held at the stop (copy scratch images beside the state)."""
        if self._vm is None or self._result is not None:
            raise BootFailed("saving a snapshot", "the machine is not running")
        try:
            os.makedirs(folder, exist_ok=True)
            self.qmp("stop")
            info = self._migrated(f"file:{os.path.join(folder, SNAPSHOT_STATE)}")
        except Exception as e:  # pylint: disable=broad-except
            # A VM stopped for a save that failed would wait for ever: the boot ends here.
            why = e.why if isinstance(e, BootFailed) else f"{type(e).__name__}: {e}"
            self._end("snapshot", f"saving a snapshot in {folder} failed: {why}")
            raise BootFailed("saving a snapshot", why) from None
        with self._cond:
            self._saved = True
        try:
            self._vm.cmd("quit")   # QEMU may close QMP before it answers
        except Exception:  # pylint: disable=broad-except
            pass
        with self._cond:   # the readers have had everything QEMU sent
            while not self._exited:
                self._cond.wait(POLL)
        shutil.copyfile(self.console_log, os.path.join(folder, SNAPSHOT_CONSOLE))
        shutil.copyfile(os.path.join(self.rundir, "kmsg"), os.path.join(folder, SNAPSHOT_KMSG))
        with open(os.path.join(folder, SNAPSHOT_META), "w", encoding="utf-8") as f:
            json.dump(snapshot_identity(self.guest) | {"saved_after": time.monotonic() - self._started}, f, indent=1)
        return info

    def _restored(self, saved: "Snapshot") -> None:
        """The new QEMU loads the snapshot and runs the guest; the console shows first what
        the saved boot's showed."""
        assert self.restore is not None
        vm = self._vm
        # The load has the launch's bound: a QEMU stuck in it is ended, as one stuck
        # before QMP is.
        guard = _LaunchGuard(vm, *self._launch_bound())
        try:
            self._console_file.write(saved.console)
            self._console_file.flush()
            self._console_lines(self._console_split.feed(saved.console), len(saved.console))
            vm.cmd("migrate-incoming", uri=f"file:{os.path.join(self.restore, SNAPSHOT_STATE)}")
            # Loaded, the VM is paused as it was saved; a cont while QEMU is still in
            # "inmigrate" would be overridden by that saved state: wait it out first.
            while (status := vm.cmd("query-status")["status"]) == "inmigrate":
                info = vm.cmd("query-migrate")
                if info.get("status") == "failed":
                    raise BootError(f"the incoming migration failed: {info.get('error-desc', '')}")
                time.sleep(POLL)
            if status != "paused":
                raise BootError(f"the loaded VM is {status}, not paused as it was saved")
            vm.cmd("cont")
        except BaseException as e:
            vm.kill()
            vm.wait(timeout=None)
            self._vm = None        # nothing of it to finish()
            if isinstance(e, Exception):
                why = guard.why or f"{type(e).__name__}: {e}"
                raise BootError(f"QEMU could not load the snapshot in {self.restore} ({why}):\n"
                                f"{(vm.get_log() or '').rstrip()}", 124 if guard.why else 125) from None
            raise
        finally:
            guard.stop()

    # --- the end -------------------------------------------------------------------------------
    def finish(self) -> BootResult:
        """Waits until QEMU has exited (the guest powers off after its command), then
        gathers the result: status, output, logs, the results channel."""
        if self._result is not None:
            return self._result
        if self._vm is None:   # nothing would ever end the wait below
            raise BootError("finish() of a machine that did not start")
        with self._cond:
            while not self._exited:
                self._cond.wait(POLL)
        try:
            self._vm.wait(timeout=None)
        except Exception as e:  # pylint: disable=broad-except
            # QEMU has exited: closing a QMP connection it reset is no failure of the boot.
            self._warnings.append(f"closing QMP after QEMU's exit: {type(e).__name__}: {e}")
        self._console_file.close()
        with open(self.kernel_log, "w", encoding="utf-8") as f:
            f.write(self._kmsg.text())
        qemu_output = "".join(self._earlier_output) + (self._vm.get_log() or "")
        if qemu_output:
            with open(self.qemu_log, "w", encoding="utf-8") as f:
                f.write(qemu_output)
        if self._kmsg.lost:
            self._warnings.append(f"{self._kmsg.lost} records of the guest kernel's log were lost: its log "
                                  "buffer overran the reader of the kmsg channel (they are not in dmesg.txt)")
        if self._kmsg.rewinds:
            self._warnings.append(f"the guest kernel's log went back {self._kmsg.rewinds} times (a loadvm takes "
                                  "the guest back): dmesg.txt holds each course in the order it came")
        if self._kmsg.command_open and self._console.status is not None:
            self._warnings.append("the guest kernel's log ends before the command's end marker: the "
                                  "guest's kmsg reader had not passed it on at the power-off")
        failure = self._failure or self._exit_failure()
        if failure is None and self.results_dir is not None:
            failure = self._unpack_results()
        self._result = self._make_result(failure)
        if self._own_workdir:
            self._keep_logs()
        shutil.rmtree(self.rundir, ignore_errors=True)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return self._result

    def _exit_failure(self) -> Optional[Failure]:
        # A report that came with the status and QEMU's exit (the command's last moments, the
        # power-off), before the monitor looked at it, fails the boot as any other.
        report = self._report()
        if report is not None:
            return Failure("kernel", f"the guest kernel reported {_a(report.kind)}: {report.lines[0]}",
                           report.lines)
        if self._console.status is not None or self._hibernated() or self._saved:
            return None
        rc = self._vm.exitcode()
        when = "while the guest command ran, without its exit status" if self._console.ready \
            else "before the guest was ready"
        return Failure("qemu-exit", f"QEMU exited (status {rc}) {when}")

    def _hibernated(self) -> bool:
        """Whether the guest powered off having written its hibernation image: the kernel
        entered hibernation and did not come back out of it."""
        texts = [r.text for r in self._kmsg.records]
        entry = max((i for i, t in enumerate(texts) if "PM: hibernation: hibernation entry" in t), default=-1)
        return entry >= 0 and not any("PM: hibernation: hibernation exit" in t for t in texts[entry:]) \
            and self._vm.exitcode() == 0

    def _unpack_results(self) -> Optional[Failure]:
        assert self.results_dir is not None
        tar = os.path.join(self.rundir, "results.tar")
        try:
            os.makedirs(self.results_dir, exist_ok=True)
            names = extract_results(tar, self.results_dir)
        except (tarfile.TarError, OSError) as e:
            if self._console.status == 0:
                return Failure("results", "the command succeeded but its results did not arrive "
                               f"whole on the results port ({e})")
            return None
        # The archive's own .exit-status: one left in a reused folder proves nothing.
        if self._console.status == 0 and ".exit-status" not in names:
            return Failure("results", "the command succeeded but its results did not arrive whole "
                           "on the results port (no .exit-status)")
        return None

    def _make_result(self, failure: Optional[Failure]) -> BootResult:
        ready = self._ready_at - self._started if self._ready_at is not None else None
        return BootResult(
            status=self._console.status,
            failure=failure, output=list(self._console.output), console=list(self._console.lines),
            kernel_log=self._kmsg.text(), kernel_log_lost=self._kmsg.lost, noted=list(self._kmsg.noted),
            coverage=self._coverage(),
            lines=self._lines(),
            qemu_output="".join(self._earlier_output) + (self._vm.get_log() or ""),
            qemu_exitcode=self._vm.exitcode(), ready_after=ready,
            elapsed=time.monotonic() - self._started, console_log=self.console_log,
            kernel_log_path=self.kernel_log, warnings=list(self._warnings),
            hibernated=self._console.status is None and self._hibernated(),
            saved=self._saved)

    def _coverage(self) -> Optional[Dict[str, int]]:
        """Hits per function of the module (0: it did not run; -1: the kernel refused to
        probe it and its log says so, as for notrace and __exit functions; -2: no count came
        back and the kernel named no refusal), from the profile in the results; None when
        the guest sent none."""
        if not self.guest.coverage or self.results_dir is None:
            return None
        try:
            with open(os.path.join(self.results_dir, coveragemod.PROFILE), encoding="utf-8") as f:
                hits = coveragemod.parse_profile(f.read(), self._cov_functions)
        except OSError:
            return None
        refused = coveragemod.refused(self._kmsg.text(), self._cov_functions)
        return {fn: -1 if fn in refused else hits.get(fn, -2) for fn in self._cov_functions}

    def _lines(self) -> Optional[Dict[int, int]]:
        """Runs per executable line of the source Guest.gcov profiles, from the .gcda the
        guest sent (None, with a warning saying why, when none came back or gcov could not
        read it)."""
        g = self.guest
        if not g.gcov or self.results_dir is None:
            return None
        stem = os.path.basename(g.gcov)[:-len(".gcno")]
        gcda = os.path.join(self.results_dir, coveragemod.GCDA_DIR, stem + ".gcda")
        if not os.path.isfile(gcda):
            said = [ln for ln in self._console.lines if ln.startswith("hvstor-init: gcov:")]
            self._warnings.append(f"no line coverage came back ({said[-1] if said else 'no ' + stem + '.gcda in the results'})")
            return None
        try:
            return coveragemod.gcov_lines(g.gcov, gcda, stem + ".c")
        except coveragemod.CoverageError as e:
            self._warnings.append(str(e))
            return None

    def _keep_logs(self) -> None:
        """A boot in a temporary folder keeps its logs (console, kernel log, QEMU's output)
        in the cache's last-boot/, in place of the previous boot's."""
        assert self._result is not None
        keep = os.path.join(cache_dir(), "last-boot")
        try:
            shutil.rmtree(keep, ignore_errors=True)
            os.makedirs(keep, exist_ok=True)   # another boot's may be back already
            for src, name, attr in ((self.console_log, "console.log", "console_log"),
                                    (self.kernel_log, "dmesg.txt", "kernel_log_path"),
                                    (self.qemu_log, "qemu.log", "")):
                if os.path.isfile(src) and os.path.dirname(os.path.abspath(src)) == os.path.abspath(self.workdir):
                    dst = os.path.join(keep, name)
                    shutil.copyfile(src, dst)
                    if attr:
                        setattr(self._result, attr, dst)
        except OSError as e:
            # The boot's result stands; only its logs are gone with the temporary folder.
            self._result.warnings.append(f"the boot's logs could not be kept in {keep}: {e}")


def extract_results(tar: str, dest: str) -> Set[str]:
    """The guest's results archive extracted into dest; the names of its members. TarError
    when it is not whole (tarfile reads an archive cut short without a word: its end-of-
    archive blocks are looked for) or holds anything but files and folders inside dest."""
    with tarfile.open(tar) as t:
        members = t.getmembers()
        for m in members:
            if m.name.startswith("/") or ".." in m.name.split("/") or not (m.isfile() or m.isdir()):
                raise tarfile.TarError(f"refusing member {m.name!r}")
        with open(tar, "rb") as f:
            f.seek(t.offset)
            if f.read(2 * tarfile.BLOCKSIZE) != bytes(2 * tarfile.BLOCKSIZE):
                raise tarfile.TarError("the archive was cut short (no end-of-archive blocks)")
        # Python's own checks too, where it has them (3.11.4 on).
        safe: Dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        t.extractall(dest, **safe)
    return {os.path.normpath(m.name) for m in members}


SNAPSHOT_STATE, SNAPSHOT_CONSOLE, SNAPSHOT_KMSG, SNAPSHOT_META = "state", "console.log", "kmsg", "snapshot.json"


@dataclass
class Snapshot:
    """What a restore starts from beside QEMU's state: the saved boot's console and kernel log."""
    console: bytes
    kmsg: bytes


def snapshot_identity(g: Guest) -> Dict[str, Any]:
    """What a guest that goes on from a snapshot must share with the one saved: its kernel,
    CPUs, memory and devices (QEMU refuses other devices too, in fewer words)."""
    return {"kernel": g.kernel, "vcpus": g.vcpus, "mem": g.mem, "accel": g.accel, "cpu": g.cpu,
            "controllers": len(g.controllers), "disks": sorted((d.controller, d.lun if d.lun is not None else -1)
                                                               for d in g.disks),
            "ko": [os.path.basename(k) for k in g.ko], "results": g.results,
            "cmd_sha256": hashlib.sha256((g.cmd or "").encode()).hexdigest()}


def read_snapshot(folder: str, g: Guest) -> Snapshot:
    """The snapshot in `folder`, checked against the guest that goes on from it."""
    try:
        with open(os.path.join(folder, SNAPSHOT_META), encoding="utf-8") as f:
            meta = json.load(f)
        with open(os.path.join(folder, SNAPSHOT_CONSOLE), "rb") as f:
            console = f.read()
        with open(os.path.join(folder, SNAPSHOT_KMSG), "rb") as f:
            kmsg = f.read()
        if not os.path.isfile(os.path.join(folder, SNAPSHOT_STATE)):
            raise OSError(f"no {SNAPSHOT_STATE} in it")
    except (OSError, ValueError) as e:
        raise BootError(f"{folder} holds no snapshot: {e}") from None
    want = snapshot_identity(g)
    for k, val in want.items():
        if json.loads(json.dumps(meta.get(k))) != json.loads(json.dumps(val)):
            raise BootError(f"the snapshot in {folder} was saved from a guest with {k} {meta.get(k)!r}; "
                            f"this guest has {val!r}")
    return Snapshot(console, kmsg)


def _qemu_machine(binary: str, **kw: Any) -> Any:
    """A qemu.machine QEMUMachine that reads QEMU's output as UTF-8 whatever bytes it holds
    (qemu.machine decodes it strictly: one byte that is not UTF-8 lost all of it)."""
    from qemu.machine import QEMUMachine  # pylint: disable=import-outside-toplevel

    class _Machine(QEMUMachine):
        def _load_io_log(self) -> None:
            if self._qemu_log_path is not None:
                with open(self._qemu_log_path, "rb") as f:
                    self._iolog = f.read().decode("utf-8", "replace")

    return _Machine(binary, **kw)


class _LaunchGuard:
    """Kills QEMU when `seconds` pass before stop(): `why` then says so."""

    def __init__(self, vm: Any, seconds: float, why: str) -> None:
        self.why: Optional[str] = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(vm, seconds, why), daemon=True)
        self._thread.start()

    def _run(self, vm: Any, seconds: float, why: str) -> None:
        if self._done.wait(seconds):
            return
        self.why = why
        while not self._done.is_set():
            pid = vm.get_pid()   # None before the process exists, and once it has exited
            if pid is not None:
                _signal(pid, signal.SIGKILL)
                return
            self._done.wait(POLL)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def base_args(g: Guest, kernel: str, initrd: str, cmdline: str) -> List[str]:
    """The machine, its CPUs and memory, the kernel and initramfs, the firmware."""
    args = ["-machine", "q35", "-accel", g.accel, "-cpu", g.cpu, "-smp", str(g.vcpus),
            "-m", g.mem, "-nodefaults", "-no-reboot",
            "-kernel", kernel, "-initrd", initrd, "-append", cmdline]
    for fw in FIRMWARE_DIRS:
        if os.path.isdir(fw):
            args += ["-L", fw]
    return args


def interactive(guest: Guest, console_log: Optional[str] = None,
                qmp_socket: Optional[str] = None) -> int:
    """Boots `guest` with its console and QEMU's monitor on this terminal (Ctrl-A X quits,
    Ctrl-A C the monitor) and a shell in the guest; QEMU's exit status."""
    guest.validate()
    a = assetsmod.prepare(guest)
    binary = qemu_binary()
    chardev = "stdio,id=con0,mux=on,signal=off" + (f",logfile={console_log}" if console_log else "")
    args = [binary] + base_args(guest, a.kernel, a.initrd, guest.kernel_cmdline(None, None))
    args += ["-display", "none", "-chardev", chardev, "-serial", "chardev:con0",
             "-mon", "chardev=con0,mode=readline"]
    if qmp_socket:
        args += ["-qmp", f"unix:{qmp_socket},server=on,wait=off"]
    args += guest.device_args() + guest.qemu_args
    if guest.timeout is not None:
        args = ["timeout", "--foreground", f"{guest.timeout:g}"] + args
    return subprocess.run(args, check=False).returncode


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _a(kind: str) -> str:
    return {"oops": "an Oops", "bug": "a BUG", "ubsan": "a UBSAN report", "warning": "a WARNING",
            "panic": "a panic", "hung task": "a hung task"}.get(kind, kind)


def _pattern_text(m: Marker) -> str:
    return m.pattern if isinstance(m, re.Pattern) else m
