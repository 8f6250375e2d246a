"""./hvstor test (tests/run_all.py) around meson: what it reports of a run, with stand-in
meson and ninja programs on PATH (a meson that refuses the tests asked for, as
`meson test nosuch` does, writes no testlog.json)."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
from types import ModuleType
from typing import Any

import pytest
from conftest import ROOT

FAKE = """#!{python}
import os, sys
args = sys.argv[1:]
if args[:1] == ["setup"]:
    os.makedirs(args[1], exist_ok=True)
    open(os.path.join(args[1], "build.ninja"), "w").close()
elif args[:1] == ["test"]:
    print("ERROR: *:nosuch test name does not match any test")
    sys.exit(1)
"""


def _run_all(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("meson", "ninja"):
        prog = bin_dir / name
        prog.write_text(FAKE.format(python=sys.executable))
        prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HVSTOR_CACHE", str(tmp_path / "cache"))
    spec = importlib.util.spec_from_file_location("run_all", os.path.join(ROOT, "tests", "run_all.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_previous_runs_failures_are_not_reported_again(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """meson test that runs nothing leaves the last run's testlog.json: ./hvstor test printed
    that run's failures as this one's, and put its logs in test-logs/."""
    run_all = _run_all(tmp_path, monkeypatch)
    logs = tmp_path / "cache" / "build-asan" / "meson-logs"
    logs.mkdir(parents=True)
    (logs / "testlog.json").write_text(json.dumps({"name": "hv-storvsc:boot / hotplug", "result": "FAIL",
                                                   "stdout": "an old failure\n"}) + "\n")
    rc = run_all.main(["--suite", "python", "--", "nosuch"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "hotplug" not in out and "an old failure" not in out
    assert not (tmp_path / "cache" / "test-logs" / "hv-storvsc-boot-hotplug.log").exists()


def test_a_run_of_no_test_is_no_pass(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """meson test with a --suite that matches nothing exits 0 having run nothing: ./hvstor
    test must not call that a pass."""
    run_all = _run_all(tmp_path, monkeypatch)
    fake = tmp_path / "bin" / "meson"
    fake.write_text(FAKE.format(python=sys.executable).replace(
        'print("ERROR: *:nosuch test name does not match any test")\n    sys.exit(1)', "sys.exit(0)"))
    assert run_all.main(["--suite", "python"]) == 2
