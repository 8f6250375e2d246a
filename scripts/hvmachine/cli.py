"""./hvstor boot: a guest with our QEMU and hv-storvsc controllers, a command in it."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import List, Optional, Sequence

from .guest import Controller, Disk, Guest, GuestError, parse_props
from .paths import default_kernel

EPILOG = """\
A guest command's output is printed as it comes; the exit status is the command's, 124
when the deadline passed or the guest fell silent, 125 when the guest kernel reported an
Oops, BUG, WARNING, panic or hung task (the boot ends at once, with its lines), when QEMU
ended without the command's status, or when the results did not arrive whole; 1 or 2 for
errors before the boot; 130 on Ctrl-C and 143 on SIGTERM, QEMU ended either way.
QEMU=PATH boots with that QEMU instead of building ours.
"""


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hvstor boot", description="Boot a guest with our QEMU and an hv-storvsc controller.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--kernel", default=default_kernel(),
      help=f"debian-6.12, debian-6.1, or a bzImage path (default {default_kernel()})")
    a("--modules", help="the lib/modules/<version> tree of a bzImage")
    a("--ko", action="append", default=[], metavar="FILE",
      help="a module built for the guest kernel (scripts/build-module.sh) in place of the stock one of its name (repeatable)")
    a("--vcpus", type=_posint, default=2, help="guest CPUs (default 2)")
    a("--mem", default="1G", help="guest memory (default 1G)")
    a("--controllers", type=_controllers, default=1, help="hv-storvsc controllers, scsi0... (default 1; 0 for none)")
    a("--disk", action="append", default=[], metavar="SPEC",
      help="an hv-disk (repeatable): its properties as QEMU takes them, plus controller=K "
           "(default 0); LUNs count up per controller. e.g. --disk file=disk.img --disk backend=null,size=64G. "
           "The guest waits for all disks before the command runs")
    a("--cmd", help="shell command run in the guest; its output is printed as it comes and its "
                    "status is the exit status (an interactive shell without it)")
    a("--timeout", type=_seconds, help="a deadline in seconds for the whole boot (default: none)")
    a("--silence", type=_seconds, default=600.0,
      help="with --cmd: seconds without a sign of life (console, kernel message, heartbeat) that end the boot (default 600)")
    a("--log", help="keep the whole serial console log in this file")
    a("--append", action="append", default=[], metavar="ARGS",
      help="more kernel command line arguments (repeatable)")
    a("--wait-disks", type=int, help="SCSI disks the guest waits for before the command (default: as many as --disk)")
    a("--results", metavar="DIR", help="with --cmd: the command's files under $HVSTOR_RESULTS in the guest land in DIR")
    a("--qmp", metavar="PATH", help="a QMP server on the unix socket PATH while the guest runs")
    a("--quiet", action="store_true", help="'quiet' on the guest kernel's command line")
    ap.usage = "hvstor boot [OPTIONS] [-- QEMU ARGS]"
    return ap


def _posint(s: str) -> int:
    if not s.isdigit() or int(s) < 1:
        raise argparse.ArgumentTypeError(f"wants a positive number, got '{s}'")
    return int(s)


def _controllers(s: str) -> int:
    if not s.isdigit() or int(s) > 64:
        raise argparse.ArgumentTypeError(f"wants 0..64, got '{s}'")
    return int(s)


def _seconds(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        v = -1
    if not v > 0:
        raise argparse.ArgumentTypeError(f"wants a positive number of seconds, got '{s}'")
    return v


def disk_from_spec(spec: str, controllers: int) -> Disk:
    """--disk SPEC: hv-disk properties plus controller=K; file= made absolute."""
    props = parse_props(spec, "--disk")
    ctl = str(props.pop("controller", "0"))
    if not ctl.isdigit() or int(ctl) >= max(controllers, 1):
        raise GuestError(f"--disk: controller {ctl} does not exist in '{spec}' (the guest has {controllers})")
    lun = props.pop("lun", None)
    if lun is not None and not str(lun).isdigit():
        raise GuestError(f"--disk: lun wants a number, got '{lun}' in '{spec}'")
    if "file" in props:
        f = str(props["file"])
        if not os.path.exists(f):
            raise GuestError(f"--disk: no such file: {f}")
        props["file"] = os.path.realpath(f)
    return Disk(props, int(ctl), int(str(lun)) if lun is not None else None)


def guest_from_args(ns: argparse.Namespace, extra: List[str]) -> Guest:
    """The Guest the options describe; `extra` are QEMU's own arguments (after --)."""
    if ns.results and ns.cmd is None:
        raise GuestError("--results goes with --cmd")
    g = Guest(kernel=ns.kernel, modules=ns.modules, ko=list(ns.ko), vcpus=ns.vcpus, mem=ns.mem,
              controllers=[Controller(f"scsi{i}") for i in range(ns.controllers)],
              disks=[disk_from_spec(d, ns.controllers) for d in ns.disk], qemu_args=extra,
              append=[w for a in ns.append for w in a.split()], cmd=ns.cmd, wait_disks=ns.wait_disks,
              results=bool(ns.results), timeout=ns.timeout, silence=ns.silence, quiet=ns.quiet)
    g.validate()
    return g


def check_paths(ns: argparse.Namespace) -> None:
    """The files a boot writes, checked before it: after the boot is too late."""
    if ns.qmp:
        check_qmp_path(ns.qmp)
    if ns.results and os.path.exists(ns.results) and not os.path.isdir(ns.results):
        raise GuestError(f"--results: {ns.results} exists and is not a folder")
    if ns.log and os.path.isdir(ns.log):
        raise GuestError(f"--log: {ns.log} is a folder; the log is a file")


def check_qmp_path(path: str) -> None:
    # QEMU removes whatever is at the path before it listens: never a file of the user's.
    if os.path.exists(path) and not _is_socket(path):
        raise GuestError(f"--qmp: {path} exists and is not a socket")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise GuestError(f"--qmp: no directory {os.path.dirname(path)}")
    if len(path) > 107:
        raise GuestError(f"--qmp: socket paths are limited to 107 bytes: {path}")
    if "," in path:
        raise GuestError(f"--qmp: the path must not contain a comma: {path}")


def _is_socket(path: str) -> bool:
    import stat  # pylint: disable=import-outside-toplevel
    return stat.S_ISSOCK(os.stat(path).st_mode)


def log(msg: str) -> None:
    print(f"[hvstor {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def boot(ns: argparse.Namespace, extra: List[str]) -> int:
    # Imported here: --help and bad arguments need neither QEMU nor its Python packages.
    from .machine import BootError, Machine, interactive  # pylint: disable=import-outside-toplevel
    g = guest_from_args(ns, extra)
    check_paths(ns)
    if g.cmd is None:
        log(f"booting {g.kernel} interactively (Ctrl-A X quits)")
        return interactive(g, ns.log, ns.qmp)
    log(f"booting {g.kernel} ({g.vcpus} vCPUs, {g.mem}"
        f"{f', deadline {g.timeout:g}s' if g.timeout else ''}, ended after {g.silence:g}s without a sign of life)")
    m = Machine(g, console_log=ns.log, results_dir=ns.results, qmp_socket=ns.qmp,
                on_output=lambda line: print(line, flush=True))
    try:
        with m:
            r = m.finish()
    except BootError as e:
        print(f"[hvstor] error: {e}", file=sys.stderr)
        return e.exit_code
    for w in r.notes():
        log(f"note: {w}")
    if r.failure is not None:
        print(f"[hvstor] {r.describe()}", file=sys.stderr)
        return r.exit_code
    ready = f"{r.ready_after:.1f}s" if r.ready_after is not None else "?"
    log(f"guest ready after {ready}, command exited with status {r.status}, total {r.elapsed:.1f}s")
    if r.qemu_output.strip() and not g.quiet:
        for line in r.qemu_output.rstrip().splitlines():
            print(f"[qemu] {line}", file=sys.stderr)
    return r.exit_code


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .assets import AssetError  # pylint: disable=import-outside-toplevel
    from .qemu import QemuError  # pylint: disable=import-outside-toplevel
    args = list(sys.argv[1:] if argv is None else argv)
    extra: List[str] = []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    ns = parser().parse_args(args)
    # SIGTERM (kill, a CI job cancelled) ends the boot as Ctrl-C does, QEMU with it; by
    # default Python would end at once and leave QEMU running its guest.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return boot(ns, extra)
    except (GuestError, AssetError, QemuError) as e:
        print(f"[hvstor] error: {e}", file=sys.stderr)
        return 2 if isinstance(e, GuestError) else 1
    except Terminated:
        print("[hvstor] terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("[hvstor] interrupted", file=sys.stderr)
        return 130


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt."""


def _terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # once: the ending itself is not cut short
    raise Terminated()
