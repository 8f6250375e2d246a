"""The machine layer against a scripted stand-in QEMU (fake_qemu.py): how a boot ends
(status, kernel reports, clocks, QEMU's exit), waits, QMP, streaming, the results channel.
Clocks appear only where they are what is tested (a deadline of 1 s on a guest that never
ends), never as a bound on how fast something happens."""

from __future__ import annotations

import os
import re
from typing import Any, List

import pytest
from conftest import READY, FakeBoot, qmp_log

from hvmachine.machine import BootError, BootFailed

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
