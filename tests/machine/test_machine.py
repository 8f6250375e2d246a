"""The machine layer against a scripted stand-in QEMU (fake_qemu.py): how a boot ends
(status, kernel reports, clocks, QEMU's exit), waits, QMP, streaming, the results channel.
Clocks appear only where they are what is tested (a deadline of 1 s on a guest that never
ends), never as a bound on how fast something happens."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import pytest
from conftest import FAKE_QEMU, READY, FakeBoot, qemu_python_or_skip, qmp_log

from hvmachine.assets import Assets
from hvmachine import machine as machinemod
from hvmachine.guest import Controller, Disk, Guest, GuestError
from hvmachine.machine import BootError, BootFailed, Machine
from hvmachine.watch import MAX_LINE

OOPS = ["BUG: kernel NULL pointer dereference, address: 0000000000000000",
        "#PF: supervisor read access in kernel mode",
        "Oops: 0000 [#1] PREEMPT SMP NOPTI",
        "RIP: 0010:storvsc_probe+0x2a/0x5e0 [hv_storvsc]",
        "Call Trace:", " <TASK>", " really_probe+0xde/0x340", " </TASK>",
        "---[ end trace 0000000000000000 ]---"]


def test_status_output_and_streaming(fake_boot: FakeBoot, tmp_path: Any) -> None:
    seen: List[str] = []
    m = fake_boot(READY + [["console", "first line"], ["wait-qmp", "device_add"],
                           ["console", "second line"], ["console", "outHVSTOR-EXIT-STATUS=3"],
                           ["exit", 0]], on_output=seen.append)
    m.wait_console("first line")
    # The line was handed on before the guest went on: output is streamed, not collected.
    assert seen == ["first line"]
    m.qmp("device_add", driver="hv-disk", id="d1")
    r = m.finish()
    assert r.failure is None and r.status == 3 and r.exit_code == 3
    assert r.output == ["first line", "second line", "out"]
    assert seen == r.output
    assert r.ready_after is not None
    assert [c["execute"] for c in qmp_log(tmp_path)][-1] == "device_add"


@pytest.mark.parametrize("lines,kind", [
    (OOPS, "bug"),
    (["Oops: general protection fault, probably for non-canonical address", "RIP: x"], "oops"),
    (["WARNING: CPU: 1 PID: 42 at drivers/scsi/storvsc_drv.c:1200 storvsc_on_io_completion+0x1/0x2",
      "---[ end trace 0 ]---"], "warning"),
    (["INFO: task kworker/u4:1:55 blocked for more than 120 seconds.", "Call Trace:"], "hung task"),
    (["Kernel panic - not syncing: Fatal exception", "---[ end Kernel panic - not syncing ]---"], "panic"),
])
def test_kernel_report_ends_the_boot(fake_boot: FakeBoot, lines: List[str], kind: str) -> None:
    # The guest lives on (a heartbeat for ever) and no deadline is set: only the report ends it.
    m = fake_boot(READY + [["kmsg", ln] for ln in lines] + [["beat-forever"]])
    with pytest.raises(BootFailed) as e:
        m.wait_console("never printed")
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "kernel" and r.exit_code == 125
    assert r.failure.lines == lines
    assert lines[0] in e.value.why and lines[0] in r.describe()


def test_report_on_the_console_alone(fake_boot: FakeBoot) -> None:
    # A panic before the init runs reaches only the console.
    m = fake_boot([["console", "[    1.000000] Kernel panic - not syncing: VFS: Unable to mount root fs"],
                   ["beat-forever"]])
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "kernel"
    assert "Unable to mount root fs" in r.failure.message


def test_a_command_printing_warning_is_no_report(fake_boot: FakeBoot) -> None:
    m = fake_boot(READY + [["console", "WARNING: Oops: BUG: in the command's own words"],
                           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]])
    r = m.finish()
    assert r.failure is None and r.status == 0


def test_tolerated_and_noted_reports(fake_boot: FakeBoot) -> None:
    m = fake_boot(READY + [["kmsg", "WARNING: CPU: 0 PID: 1 at fs/x.c:1 f+0x1/0x2"],
                           ["kmsg", "watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [fio:99]"],
                           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  tolerate=[r"at fs/x\.c"])
    r = m.finish()
    assert r.failure is None and r.status == 0
    assert len(r.noted) == 2 and "soft lockup" in r.noted[1]
    assert "WARNING: CPU: 0" in r.kernel_log


def test_kmsg_records_kept_once(fake_boot: FakeBoot) -> None:
    # The guest's reader starts again from the oldest record after an overrun.
    recs = ["6,0,100,-;first", "6,1,200,-;second", " SUBSYSTEM=scsi", "6,0,100,-;first",
            "6,1,200,-;second", "6,2,300,-;third\\x09tab"]
    m = fake_boot(READY + [["kmsg-raw", r] for r in recs] + [["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]])
    r = m.finish()
    assert r.kernel_log.splitlines() == ["[    0.000100] first", "[    0.000200] second",
                                         "[    0.000300] third\ttab"]
    with open(r.kernel_log_path, encoding="utf-8") as f:
        assert f.read() == r.kernel_log


def test_kernel_messages_while_the_command_runs_go_to_on_output_not_the_output(fake_boot: FakeBoot) -> None:
    """While the command runs the guest's console carries its output alone (a kernel
    message printed there, or forwarded by a guest process, could cut one of its lines in
    two); the host hands on_output the messages the console would have shown, levels 3 up
    to the console's level, between the init's markers, and keeps every one in the log."""
    recs = ["3,0,100,-;before the command",
            "7,1,200,-;hvstor-init: command starts (console level 5)",
            "3,2,300,-;an error", "4,3,400,-;a warning", "5,4,500,-;a notice (console level 5 hides it)",
            "2,5,600,-;a critical one (the kernel prints 0-2 on the console itself)",
            "7,6,700,-;hvstor-init: command ended", "3,7,800,-;after the command"]
    seen: List[str] = []
    m = fake_boot(READY + [["kmsg-raw", r] for r in recs] + [["beat"], ["console", "a line"],
                                                           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  on_output=seen.append)
    r = m.finish()
    assert r.failure is None and r.output == ["a line"]
    assert sorted(seen) == sorted(["a line", "[    0.000300] an error", "[    0.000400] a warning"])
    assert len(r.kernel_log.splitlines()) == len(recs)


def test_a_kernel_log_cut_before_the_commands_end_is_said(fake_boot: FakeBoot) -> None:
    recs = ["7,0,100,-;hvstor-init: command starts (console level 5)", "4,1,200,-;a warning"]
    m = fake_boot(READY + [["kmsg-raw", r] for r in recs] + [["beat"], ["console", "HVSTOR-EXIT-STATUS=0"],
                                                           ["exit", 0]])
    r = m.finish()
    assert r.failure is None
    assert any("ends before the command's end marker" in w for w in r.warnings)
    m = fake_boot(READY + [["kmsg-raw", r] for r in recs + ["7,2,300,-;hvstor-init: command ended"]]
                  + [["beat"], ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]])
    assert not any("end marker" in w for w in m.finish().warnings)


def test_deadline(fake_boot: FakeBoot) -> None:
    m = fake_boot(READY + [["beat-forever"]], timeout=1)
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "deadline" and r.exit_code == 124
    assert "the guest command did not finish" in r.failure.message


def test_silence(fake_boot: FakeBoot) -> None:
    m = fake_boot([["console", "booting"], ["hang"]], silence=1)
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "silence" and r.exit_code == 124
    assert "before the guest was ready" in r.failure.message


def test_qemu_exits_without_status(fake_boot: FakeBoot) -> None:
    m = fake_boot(READY + [["console", "partial"], ["stderr", "qemu: something broke"], ["exit", 1]])
    with pytest.raises(BootFailed):
        m.wait_console("never printed")
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "qemu-exit" and r.exit_code == 125
    assert "while the guest command ran" in r.failure.message
    assert "something broke" in r.describe()


def test_launch_failure_is_a_boot_error(fake_boot: FakeBoot) -> None:
    with pytest.raises(BootError, match="hv-disk lun 0: cannot open"):
        m = fake_boot([["no-qmp"], ["stderr", "qemu-system-x86_64: -device hv-disk: hv-disk lun 0: cannot open"],
                       ["exit", 1]])
        m.finish()


def test_events_and_device_del(fake_boot: FakeBoot) -> None:
    m = fake_boot(READY + [["wait-qmp", "device_del"], ["event", "DEVICE_DELETED", {"device": "other"}],
                           ["event", "DEVICE_DELETED", {"device": "d1"}], ["wait-qmp", "query-status"],
                           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]])
    m.device_del("d1")
    # The other device's event is kept for whoever waits for it.
    assert m.event_wait("DEVICE_DELETED", match={"data": {"device": "other"}})["data"] == {"device": "other"}
    assert m.qmp("query-status")["status"] == "running"
    assert m.finish().status == 0


def test_event_wait_ends_with_the_boot(fake_boot: FakeBoot) -> None:
    m = fake_boot(READY + [["kmsg", "WARNING: CPU: 0 PID: 1 at a.c:1 f+0/0"], ["beat-forever"]])
    with pytest.raises(BootFailed, match="DEVICE_DELETED.*WARNING"):
        m.event_wait("DEVICE_DELETED")
    m.finish()


def test_results_channel(fake_boot: FakeBoot, tmp_path: Any) -> None:
    out = str(tmp_path / "res")
    m = fake_boot(READY + [["results", {".exit-status": "0\n", "fio.json": "{}"}],
                           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]], results_dir=out, results=True)
    r = m.finish()
    assert r.failure is None and sorted(os.listdir(out)) == [".exit-status", "fio.json"]


def test_results_missing(fake_boot: FakeBoot, tmp_path: Any) -> None:
    m = fake_boot(READY + [["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  results_dir=str(tmp_path / "res"), results=True)
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "results" and r.exit_code == 125


def test_qemu_command_line(fake_boot: FakeBoot, tmp_path: Any) -> None:
    m = fake_boot(READY + [["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]], vcpus=3, mem="512M",
                  append=["hv_storvsc.logging_level=2"], quiet=True)
    args = m.vm._qemu_full_args  # pylint: disable=protected-access
    m.finish()
    cmdline = args[args.index("-append") + 1]
    assert re.fullmatch(r"console=ttyS0 panic=-1 quiet hvstor.kmsg=ttyS2 hv_storvsc.logging_level=2", cmdline)
    assert args[args.index("-smp") + 1] == "3" and args[args.index("-m") + 1] == "512M"


# --- defects found in review: each case failed before its fix --------------------------------
HANG_GUARD = 60.0   # a test of a wait that could hang for ever fails after this, never waits more


def _in_thread(fn: Callable[[], Any]) -> Tuple[threading.Thread, Dict[str, Any]]:
    """fn() in a thread of its own: what it returned or raised, once the thread is done."""
    out: Dict[str, Any] = {}

    def go() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # pylint: disable=broad-except
            out["error"] = e
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(HANG_GUARD)
    return t, out


def _until_exited(m: Any) -> None:
    while m.vm.exitcode() is None:
        time.sleep(0.05)


def _kill_pidfile(path: Any) -> None:
    try:
        os.kill(int(open(path, encoding="utf-8").read()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


@pytest.mark.parametrize("lines", [
    ["INFO: task fio:80 blocked for more than 122 seconds.", "      Not tainted 6.12.0 #1"],
    ["WARNING: CPU: 0 PID: 9 at drivers/scsi/storvsc_drv.c:1 f+0/0", "---[ end trace 0 ]---"],
])
def test_report_right_before_the_power_off_ends_the_boot(fake_boot: FakeBoot, lines: List[str]) -> None:
    """A report the guest logs in its last moments (the command's last step, the power-off)
    reaches the host with the status and QEMU's exit: it still fails the boot. Before, the
    monitor stopped at QEMU's exit before it looked at the report, and the status won."""
    m = fake_boot(READY + [["kmsg", ln] for ln in lines] + [["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]])
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "kernel", r.describe()
    assert r.failure.lines == lines and r.exit_code == 125


@pytest.mark.parametrize("lines,kind", [
    (["divide error: 0000 [#1] PREEMPT SMP NOPTI", "CPU: 1 PID: 77 Comm: sh Not tainted 6.1.0-57-amd64",
      "RIP: 0010:storvsc_probe+0x2a/0x5e0 [hv_storvsc]", "---[ end trace 0000000000000000 ]---"], "an Oops"),
    (["UBSAN: array-index-out-of-bounds in drivers/scsi/storvsc_drv.c:1234:17",
      "index 5 is out of range for type 'u8 [4]'", "=" * 80], "a UBSAN report"),
])
def test_reports_the_patterns_missed(fake_boot: FakeBoot, lines: List[str], kind: str) -> None:
    """6.1's die() header for a trap other than a page fault ("divide error: 0000 [#1]"), and
    UBSAN's reports (a kernel built with UBSAN), went unnoticed: the boot went on (here, for
    ever but for the hang guard)."""
    m = fake_boot(READY + [["kmsg", ln] for ln in lines] + [["beat-forever"]], timeout=HANG_GUARD)
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "kernel"
    assert r.failure.message == f"the guest kernel reported {kind}: {lines[0]}"
    assert r.failure.lines == lines


def test_qemu_that_never_greets_is_ended(fake_boot: FakeBoot, tmp_path: Any) -> None:
    """A QEMU stuck before its monitor runs (a backend that blocks in its open): start()
    waited for QMP's greeting for ever, under the launch lock, with no clock running."""
    pid = tmp_path / "pid"
    t, out = _in_thread(lambda: fake_boot([["pidfile", str(pid)], ["no-qmp"], ["hang"]], silence=1))
    if t.is_alive():
        _kill_pidfile(pid)
        t.join()
    assert not t.is_alive() and isinstance(out.get("error"), BootError), out
    assert "no sign of life for 1s" in str(out["error"]) and out["error"].exit_code == 124


def test_qemu_that_never_answers_query_status_is_ended(fake_boot: FakeBoot, tmp_path: Any) -> None:
    pid = tmp_path / "pid"
    t, out = _in_thread(lambda: fake_boot([["pidfile", str(pid)], ["mute-qmp-on", "query-status"],
                                           ["hang"]], timeout=1))
    if t.is_alive():
        _kill_pidfile(pid)
        t.join()
    assert not t.is_alive() and isinstance(out.get("error"), BootError), out
    assert "deadline of 1s" in str(out["error"]) and out["error"].exit_code == 124


def test_qemu_gone_before_its_first_answer(fake_boot: FakeBoot, tmp_path: Any) -> None:
    """QEMU that closed QMP and exited right after the handshake: start() raised qemu.qmp's
    own error, left QEMU unreaped, and __exit__ then waited for ever for watchers that never
    started."""
    pid = tmp_path / "pid"
    t, out = _in_thread(lambda: fake_boot([["pidfile", str(pid)], ["drop-qmp-on", "query-status"],
                                           ["stderr", "qemu: -device hv-disk: died"], ["exit", 1]]))
    assert not t.is_alive() and isinstance(out.get("error"), BootError), out
    assert "died" in str(out["error"]) and out["error"].exit_code == 125
    with pytest.raises(ChildProcessError):
        os.waitpid(int(pid.read_text()), os.WNOHANG)   # reaped


def test_qmp_lost_as_qemu_exits_is_boot_failed(fake_boot: FakeBoot) -> None:
    """QEMU closes its monitor a while before its process ends: a command sent then raised
    qemu.qmp's error instead of BootFailed."""
    m = fake_boot([["drop-qmp-on", "device_add"]] + READY +
                  [["wait-qmp", "device_add"], ["sleep", 1], ["stderr", "qemu: gone"], ["exit", 1]])
    with pytest.raises(BootFailed, match="QMP device_add: QEMU exited"):
        m.qmp("device_add", driver="hv-disk", id="d1")
    assert m.finish().failure is not None


def test_an_on_output_that_raises_stops_nothing(fake_boot: FakeBoot) -> None:
    """An exception in on_output (a closed stdout: ./hvstor boot ... | head -1) killed the
    console reader: the status was never read, and a guest with a heartbeat ran for ever."""
    seen: List[str] = []

    def out(line: str) -> None:
        seen.append(line)
        raise BrokenPipeError(32, "Broken pipe")
    m = fake_boot(READY + [["console", "one"], ["console", "two"], ["console", "HVSTOR-EXIT-STATUS=0"],
                           ["exit", 0]], on_output=out)
    r = m.finish()
    assert r.failure is None and r.status == 0 and r.output == ["one", "two"]
    assert seen == ["one"] and any("Broken pipe" in w for w in r.warnings)


def test_a_slow_on_output_stops_no_clock(fake_boot: FakeBoot) -> None:
    """on_output ran under the machine's lock: while it blocked (stdout a full pipe), the
    monitor could not end the boot, and the deadline passed unenforced."""
    go = threading.Event()
    m = fake_boot(READY + [["console", "blocks"], ["kmsg", "a message"], ["beat-forever"]],
                  on_output=lambda line: go.wait(2 * HANG_GUARD), timeout=1)
    t, _ = _in_thread(lambda: _until_exited(m))
    ended = m.vm.exitcode() is not None
    go.set()
    r = m.finish()
    assert not t.is_alive() and ended
    assert r.failure is not None and r.failure.kind == "deadline"


@pytest.mark.parametrize("clock", ["silence", "timeout"])
def test_status_then_no_power_off_keeps_the_status(fake_boot: FakeBoot, tmp_path: Any, clock: str) -> None:
    """A guest that printed its status and then hangs in its power-off: the silence watchdog
    or the deadline ends it, as the power-off grace would, and the command's status stands
    (before: a 'silence' or 'deadline' failure, exit status 124). The clock is set only once
    the status is in: no clock here races the guest."""
    m = fake_boot(READY + [["console", "done"], ["console", "HVSTOR-EXIT-STATUS=0"], ["hang"]])
    m.wait_console("HVSTOR-EXIT-STATUS")
    setattr(m.guest, clock, 0.5)
    r = m.finish()
    assert r.failure is None and r.status == 0 and r.output == ["done"]
    assert any("did not power off" in w for w in r.warnings), r.warnings


def _tar_member_end(names: List[str]) -> int:
    return 512 * (2 * len(names))   # a header and one block of data each


def test_results_cut_short_are_not_whole(fake_boot: FakeBoot, tmp_path: Any) -> None:
    """A results archive cut off between members (its end-of-archive blocks missing) was
    taken as whole: tarfile reads a truncated archive without a word."""
    files = {".exit-status": "0\n", "fio.json": "{}"}
    m = fake_boot(READY + [["results", files, _tar_member_end([".exit-status"])],
                           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  results_dir=str(tmp_path / "res"), results=True)
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "results", r.describe()


def test_results_judged_by_the_archive_not_by_the_folder(fake_boot: FakeBoot, tmp_path: Any) -> None:
    """An .exit-status already in the results folder (a reused folder) stood in for the one
    the archive lacked."""
    res = tmp_path / "res"
    res.mkdir()
    (res / ".exit-status").write_text("0\n")
    m = fake_boot(READY + [["results", {"fio.json": "{}"}], ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  results_dir=str(res), results=True)
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "results"


def test_results_folder_that_is_a_file(fake_boot: FakeBoot, tmp_path: Any) -> None:
    """finish() raised FileExistsError after the whole boot, and left the boot's files."""
    res = tmp_path / "res"
    res.write_text("a file")
    m = fake_boot(READY + [["results", {".exit-status": "0\n"}], ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  results_dir=str(res), results=True)
    r = m.finish()
    assert r.failure is not None and r.failure.kind == "results"
    assert not [p for p in os.listdir(m.workdir) if p.startswith(".boot-")]


def test_qemu_output_that_is_not_utf8(fake_boot: FakeBoot) -> None:
    """qemu.machine decodes QEMU's output strictly: one byte that is not UTF-8 lost all of it."""
    m = fake_boot(READY + [["stderr-raw", "qemu: hv-disk: name '\xff\xfe' not found\n"], ["exit", 1]])
    r = m.finish()
    assert "hv-disk: name" in r.qemu_output and "hv-disk: name" in r.describe()
    assert not [w for w in r.warnings if "UnicodeDecodeError" in w]


def test_huge_console_line(fake_boot: FakeBoot) -> None:
    """A guest that prints 8 MiB without a newline: the host keeps lines of a bounded length
    (before, the whole line was joined and split again for every 64 KiB read) and still
    reads the status after it."""
    seen: List[str] = []
    m = fake_boot(READY + [["console-raw", "x" * 4096, 2048], ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  on_output=seen.append)
    r = m.finish()
    assert r.failure is None and r.status == 0
    assert sum(len(ln) for ln in r.output) == 8 << 20 and max(len(ln) for ln in r.output) <= MAX_LINE
    assert seen == r.output


def test_guest_escape_sequences_never_reach_the_output(fake_boot: FakeBoot) -> None:
    seen: List[str] = []
    m = fake_boot(READY + [["console-raw", "\x1b]52;c;aGVsbG8=\x07hello\x1b[>0c\r\n"],
                           ["kmsg", "WARNING: CPU: 0 PID: 1 at a.c:1 f \\x1b]0;pwned\\x07"],
                           ["beat-forever"]], on_output=seen.append)
    r = m.finish()
    assert seen == ["hello"]
    assert r.failure is not None and "\x1b" not in r.describe() and "\x07" not in r.describe()


def test_logs_that_cannot_be_kept_cost_no_result(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A boot in a temporary folder (./hvstor boot) copies its logs to the cache's last-boot/:
    when that failed (another boot replacing last-boot/ at the same moment, a cache that is
    not writable), finish() raised after the whole boot, lost its result and left the boot's
    temporary folder."""
    qemu_python_or_skip()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "last-boot").write_text("in the way")
    monkeypatch.setattr(machinemod, "cache_dir", lambda: str(cache))
    monkeypatch.setenv("QEMU", FAKE_QEMU)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(READY + [["console", "out"], ["console", "HVSTOR-EXIT-STATUS=3"], ["exit", 0]]))
    monkeypatch.setenv("HVSTOR_FAKE_QEMU_SCRIPT", str(script))
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"")
    with Machine(Guest(kernel=str(kernel), controllers=[], cmd="true"),
                 assets=Assets(str(kernel), str(kernel), "6.12-fake")) as m:
        r = m.finish()
    assert r.status == 3 and r.failure is None
    assert any("last-boot" in w for w in r.warnings), r.warnings
    assert not os.path.exists(m.workdir)


def test_finish_of_a_machine_never_started(tmp_path: Any) -> None:
    """finish() waited for ever for watchers that a machine never started has not."""
    m = Machine(Guest(kernel=str(tmp_path), controllers=[], cmd="true"), str(tmp_path))
    t, out = _in_thread(m.finish)
    assert not t.is_alive() and isinstance(out.get("error"), BootError), out


def test_controller_classes_pass_through_and_ide_takes_lun_0_only() -> None:
    """A controller's class (and an FC HBA's WWNs) reach QEMU as they are given; an IDE
    controller's disk must sit at LUN 0, and 'type' (QOM's own) is refused with a hint."""
    ctls = [Controller("ide0", {"class": "ide"}),
            Controller("fc0", {"class": "fc", "port-wwn": "c003ff0000ff0101", "node-wwn": "c003ff0000ff0100"})]
    g = Guest(kernel="debian-6.12", controllers=ctls, disks=[Disk({"backend": "null", "size": "1G"}, 0),
                                                             Disk({"backend": "null", "size": "1G"}, 1)])
    g.validate()
    args = g.device_args()
    assert "hv-storvsc,id=ide0,class=ide" in args
    assert "hv-storvsc,id=fc0,class=fc,port-wwn=c003ff0000ff0101,node-wwn=c003ff0000ff0100" in args
    assert "hv-disk,bus=ide0.0,lun=0,backend=null,size=1G" in args
    g.disks.append(Disk({"backend": "null", "size": "1G"}, 0))
    with pytest.raises(GuestError, match="controller ide0 is class=ide: it takes one disk, at lun 0, not lun 1"):
        g.validate()
    g = Guest(kernel="debian-6.12", controllers=[Controller("c", {"type": "ide"})])
    with pytest.raises(GuestError, match="the VMBus device class is 'class'"):
        g.validate()
