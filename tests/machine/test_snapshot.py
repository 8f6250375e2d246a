"""Machine.snapshot and Machine(restore=...) on the stand-in QEMU: what a saved boot keeps,
what a restore shows first, the QMP it sends, and the guests it refuses."""

from __future__ import annotations

import json
import os
from typing import Any, List

import pytest

from conftest import READY, FakeBoot, qmp_log
from hvmachine.machine import BootError, BootFailed, read_snapshot, snapshot_identity
from hvmachine.guest import Guest

SAVED_BOOT = READY + [["kmsg", "storvsc: before the save"], ["console", "hvstor-exp: disks ready"],
                      ["console", "HVSTOR-SNAPSHOT-POINT"], ["hang"]]
# The kernel's record numbers go on from the saved ones (a stand-in QEMU starts its own at 0).
GOES_ON = [["wait-qmp", "cont"], ["kmsg-raw", "4,1,5000,-;storvsc: after the load"], ["console", "fio done"],
           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]]


def saved(fake_boot: FakeBoot, tmp_path: Any) -> str:
    folder = str(tmp_path / "snap")
    m = fake_boot(SAVED_BOOT)
    m.wait_console("HVSTOR-SNAPSHOT-POINT")
    info = m.snapshot(folder)
    assert info["status"] == "completed"
    r = m.finish()
    assert r.ok and r.saved and r.failure is None and r.status is None and r.exit_code == 0
    assert "saved to a snapshot" in r.describe()
    return folder


def test_a_snapshot_keeps_the_state_console_and_kernel_log(fake_boot: FakeBoot, tmp_path: Any) -> None:
    folder = saved(fake_boot, tmp_path)
    assert sorted(os.listdir(folder)) == ["console.log", "kmsg", "snapshot.json", "state"]
    assert b"HVSTOR-SNAPSHOT-POINT" in open(os.path.join(folder, "console.log"), "rb").read()
    assert b"before the save" in open(os.path.join(folder, "kmsg"), "rb").read()
    cmds = [c["execute"] for c in qmp_log(tmp_path)]
    # Stopped before the state is written: RAM and devices as of one moment.
    assert cmds.index("stop") < cmds.index("migrate") < cmds.index("quit")
    meta = json.load(open(os.path.join(folder, "snapshot.json")))
    assert meta["vcpus"] == 2 and meta["saved_after"] > 0


def test_a_restore_goes_on_with_the_saved_logs_first(fake_boot: FakeBoot, tmp_path: Any) -> None:
    folder = saved(fake_boot, tmp_path)
    out: List[str] = []
    m = fake_boot(GOES_ON, on_output=out.append, restore=folder)
    r = m.finish()
    assert r.ok and r.status == 0 and not r.saved
    console = r.console
    assert console.index("HVSTOR-SNAPSHOT-POINT") < console.index("fio done")
    assert "before the save" in r.kernel_log and "after the load" in r.kernel_log
    assert r.kernel_log.index("before the save") < r.kernel_log.index("after the load")
    text = open(r.console_log, encoding="utf-8").read()
    assert text.index("disks ready") < text.index("fio done")
    assert out[:2] == ["hvstor-exp: disks ready", "HVSTOR-SNAPSHOT-POINT"] and "fio done" in out
    restore_qmp = qmp_log(tmp_path)[[c["execute"] for c in qmp_log(tmp_path)].index("quit") + 1:]
    cmds = [c["execute"] for c in restore_qmp]
    assert cmds.index("migrate-incoming") < cmds.index("cont")
    incoming = restore_qmp[cmds.index("migrate-incoming")]
    assert incoming["arguments"]["uri"] == f"file:{folder}/state"


def test_the_vm_runs_once_the_load_is_done(fake_boot: FakeBoot, tmp_path: Any) -> None:
    """A cont while QEMU is still "inmigrate" would be undone by the saved run state: the
    restore asks until the VM is paused, then continues it."""
    folder = saved(fake_boot, tmp_path)
    fake_boot(GOES_ON, restore=folder).finish()
    log = qmp_log(tmp_path)
    cmds = [c["execute"] for c in log[[c["execute"] for c in log].index("quit") + 1:]]
    between = cmds[cmds.index("migrate-incoming") + 1:cmds.index("cont")]
    # The stand-in says inmigrate twice, then paused.
    assert between.count("query-status") == 3, cmds


def test_a_save_that_fails_ends_the_boot_with_its_reason(fake_boot: FakeBoot, tmp_path: Any) -> None:
    m = fake_boot([["migrate-fails", "No space left on device"]] + SAVED_BOOT)
    m.wait_console("HVSTOR-SNAPSHOT-POINT")
    with pytest.raises(BootFailed, match="the migration failed: No space left on device"):
        m.snapshot(str(tmp_path / "snap"))
    r = m.finish()       # at once: the VM stopped for the save is not left waiting
    assert not r.ok and not r.saved and r.failure is not None
    assert r.failure.message.startswith(f"saving a snapshot in {tmp_path / 'snap'} failed: ")


def test_a_state_qemu_cannot_load_is_a_boot_error_with_its_output(fake_boot: FakeBoot, tmp_path: Any) -> None:
    folder = saved(fake_boot, tmp_path)
    with pytest.raises(BootError, match=r"(?s)could not load the snapshot in .*load of migration failed"):
        fake_boot([["load-fails"]] + GOES_ON, restore=folder)


def test_a_guest_other_than_the_saved_one_is_refused(fake_boot: FakeBoot, tmp_path: Any) -> None:
    folder = saved(fake_boot, tmp_path)
    with pytest.raises(BootError, match=r"saved from a guest with vcpus 2; this guest has 4"):
        fake_boot(GOES_ON, restore=folder, vcpus=4)


def test_a_folder_without_a_snapshot_is_refused(tmp_path: Any) -> None:
    with pytest.raises(BootError, match="holds no snapshot"):
        read_snapshot(str(tmp_path), Guest())
    folder = tmp_path / "s"
    folder.mkdir()
    for name in ("console.log", "kmsg"):
        (folder / name).write_text("")
    (folder / "snapshot.json").write_text(json.dumps(snapshot_identity(Guest())))
    with pytest.raises(BootError, match="no state in it"):
        read_snapshot(str(folder), Guest())
    (folder / "state").write_text("x")
    assert read_snapshot(str(folder), Guest()).console == b""
