"""Line coverage in the machine layer (hvmachine.coverage: gcov's counts, the notes file,
the lines a change touched), the guest's gcov data through the results channel, and the
kernel config fragment with ./hvstor kernel-build's check of it (hvmachine.kernel)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from conftest import READY, FakeBoot
from hvmachine import coverage, kernel
from hvmachine.guest import Guest, GuestError

PROGRAM = "int f(int x)\n{\n\tif (x > 3)\n\t\treturn 1;\n\treturn 0;\n}\nint main(int c, char **v)\n{\n\treturn f(c);\n}\n"


def profiled(tmp_path: Path, runs: int = 1) -> Tuple[str, str]:
    """(notes, data) of a small program built with --coverage and run `runs` times."""
    if shutil.which("gcc") is None or shutil.which("gcov") is None:
        pytest.skip("no gcc and gcov on this host")
    src = tmp_path / "storvsc_drv.c"
    src.write_text(PROGRAM)
    subprocess.run(["gcc", "--coverage", "-O0", "-c", "storvsc_drv.c"], cwd=tmp_path, check=True)
    subprocess.run(["gcc", "--coverage", "-o", "prog", "storvsc_drv.o"], cwd=tmp_path, check=True)
    for _ in range(runs):
        subprocess.run([str(tmp_path / "prog")], cwd=tmp_path, check=False)
    notes = [str(p) for p in tmp_path.glob("*.gcno")]
    data = [str(p) for p in tmp_path.glob("*.gcda")]
    assert len(notes) == 1 and len(data) == 1, (notes, data)
    return notes[0], data[0]


def test_gcov_counts_each_executable_line(tmp_path: Path) -> None:
    notes, data = profiled(tmp_path, runs=2)
    os.unlink(tmp_path / "storvsc_drv.c")                  # gcov needs no source for the counts
    lines = coverage.gcov_lines(notes, data, "storvsc_drv.c")
    assert lines[3] == 2 and lines[4] == 0 and lines[5] == 2 and lines[9] == 2
    assert 2 not in lines                                   # a brace is no executable line


def test_gcov_refuses_data_of_another_build(tmp_path: Path) -> None:
    notes, data = profiled(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    notes2, _ = profiled(other)
    with pytest.raises(coverage.CoverageError, match="gcov cannot read"):
        coverage.gcov_lines(notes2, data, "storvsc_drv.c")
    with pytest.raises(coverage.CoverageError, match="found no lines of nope.c"):
        coverage.gcov_lines(notes, data, "nope.c")


def test_changed_lines_are_those_of_the_new_text() -> None:
    old = "a\nb\nc\nd\n"
    assert coverage.changed_lines(old, "a\nB\nc\nnew\nd\n") == [2, 4]
    assert coverage.changed_lines(old, "a\nc\nd\n") == []           # removed lines run nowhere
    assert coverage.changed_lines(old, old) == []


def test_notes_are_found_beside_the_module_or_in_the_build_tree(tmp_path: Path) -> None:
    mods = tmp_path / "lib" / "modules" / "6.12.0"
    scsi = mods / "kernel" / "drivers" / "scsi"
    scsi.mkdir(parents=True)
    (scsi / "hv_storvsc.ko").write_bytes(b"")
    (tmp_path / "b" / "drivers" / "scsi").mkdir(parents=True)
    (mods / "build").symlink_to(tmp_path / "b")
    with pytest.raises(coverage.CoverageError) as e:
        coverage.find_gcno("storvsc_drv", "hv_storvsc", None, str(mods))
    assert str(scsi / "storvsc_drv.gcno") in str(e.value) and "GCOV_PROFILE_storvsc_drv.o=y" in str(e.value)
    (tmp_path / "b" / "drivers" / "scsi" / "storvsc_drv.gcno").write_bytes(b"")
    assert coverage.find_gcno("storvsc_drv", "hv_storvsc", None, str(mods)).startswith(str(mods / "build"))
    (scsi / "storvsc_drv.gcno").write_bytes(b"")
    assert coverage.find_gcno("storvsc_drv", "hv_storvsc", None, str(mods)) == str(scsi / "storvsc_drv.gcno")
    built = tmp_path / "kmod"
    built.mkdir()
    with pytest.raises(coverage.CoverageError):             # a module of its own: its own notes only
        coverage.find_gcno("storvsc_drv", "hv_storvsc", str(built / "hv_storvsc.ko"), str(mods))


def test_guest_gcov_wants_a_notes_file_and_results(tmp_path: Path) -> None:
    notes = tmp_path / "storvsc_drv.gcno"
    notes.write_bytes(b"")
    g = Guest(kernel="debian-6.12", cmd="true", results=True, gcov=str(notes))
    g.validate()
    assert "hvstor.gcov=storvsc_drv" in g.kernel_cmdline("ttyS1", None).split()
    for bad in (dict(gcov=str(tmp_path / "none.gcno")), dict(gcov=str(notes), results=False)):
        with pytest.raises(GuestError, match="gcov wants the .gcno file"):
            Guest(**dict(dict(kernel="debian-6.12", cmd="true", results=True), **bad)).validate()  # type: ignore[arg-type]


def test_the_boot_reads_the_gcov_data_the_guest_sent(fake_boot: FakeBoot, tmp_path: Path) -> None:
    notes, data = profiled(tmp_path)
    gcda = {"hex": Path(data).read_bytes().hex()}
    m = fake_boot(READY + [["results", {".exit-status": "0\n", "gcov/storvsc_drv.gcda": gcda}],
                           ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  results_dir=str(tmp_path / "res"), results=True, gcov=notes)
    r = m.finish()
    assert r.failure is None and r.lines is not None and r.lines[3] == 1 and r.lines[4] == 0


def test_a_boot_without_gcov_data_says_why(fake_boot: FakeBoot, tmp_path: Path) -> None:
    notes, _ = profiled(tmp_path)
    m = fake_boot(READY + [["console", "hvstor-init: gcov: 0 files named storvsc_drv.gcda under /sys/kernel/debug/gcov"],
                           ["results", {".exit-status": "0\n"}], ["console", "HVSTOR-EXIT-STATUS=0"], ["exit", 0]],
                  results_dir=str(tmp_path / "res"), results=True, gcov=notes)
    r = m.finish()
    assert r.lines is None and any("no line coverage came back (hvstor-init: gcov: 0 files" in w for w in r.warnings)


# --- the kernel config fragment -----------------------------------------------------------
def test_the_fragment_carries_what_the_guest_needs() -> None:
    f = kernel.fragment_lines(kernel.FRAGMENT)
    need: Dict[str, Any] = {"CONFIG_HYPERV": "y", "CONFIG_HYPERV_STORAGE": "m", "CONFIG_MODULE_UNLOAD": "y",
                            "CONFIG_KPROBE_EVENTS": "y", "CONFIG_HIBERNATION": "y", "CONFIG_PM_DEBUG": "y",
                            "CONFIG_SERIAL_8250_CONSOLE": "y", "CONFIG_BLK_DEV_INITRD": "y", "CONFIG_DEVTMPFS": "y",
                            "CONFIG_SCSI_DEBUG": "m", "CONFIG_DRM": None}
    assert {k: f.get(k, "absent") for k in need} == need
    assert kernel.fragment_lines(kernel.GCOV_FRAGMENT)["CONFIG_GCOV_KERNEL"] == "y"


def test_settings_a_config_lost_are_named(tmp_path: Path) -> None:
    wanted = {"CONFIG_A": "y", "CONFIG_B": "m", "CONFIG_C": None, "CONFIG_D": "y"}
    cfg = tmp_path / ".config"
    cfg.write_text("CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=m\n# CONFIG_D is not set\n")
    assert kernel.dropped(wanted, kernel.config_values(str(cfg))) == [
        "CONFIG_B=m: the config has CONFIG_B=y", "CONFIG_C is not set: the config has CONFIG_C=m (something selects it)",
        "CONFIG_D=y: the config has it unset"]


def test_kernel_build_refuses_what_is_no_kernel_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kernel.main([str(tmp_path), "--out", str(tmp_path / "o"), "--config-only"]) == 1
    assert "is not a kernel source tree" in capsys.readouterr().err
