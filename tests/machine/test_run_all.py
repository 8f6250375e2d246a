"""./hvstor test (tests/run_all.py) around meson: what it reports of a run, with stand-in
meson and ninja programs on PATH (a meson that refuses the tests asked for, as
`meson test nosuch` does, writes no testlog.json)."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
import xml.etree.ElementTree as ET
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


# --- --shard K/N: a slice of the tests for each of N CI runners ----------------------------
TESTS = ["hv-storvsc:unit / unit-tests", "hv-storvsc:unit / unit-tests (event loop)", "hv-storvsc:unit / scsi-tests",
         "hv-storvsc:tsan / unit-tests (event loop, TSan)", "hv-storvsc:lint / types (mypy)",
         "hv-storvsc:python / machine layer", "hv-storvsc:fuzz / ring", "hv-storvsc:fuzz / odd [1] name?*"] + [
         f"hv-storvsc:boot / boot_{c}" for c in "hgfedcba"]

# A stand-in meson test that lists TESTS (of the --suite given), and runs the tests its
# arguments select as meson does (fnmatch on the name after "project:"): it records them in
# ran.json, and writes testlog.json and testlog.junit.xml.
SHARD_FAKE = """#!{python}
import fnmatch, json, os, sys
TESTS = {tests!r}
args = sys.argv[1:]
if args[:1] == ["setup"]:
    os.makedirs(args[1], exist_ok=True)
    open(os.path.join(args[1], "build.ninja"), "w").close()
    sys.exit(0)
if args[:1] != ["test"]:
    sys.exit(0)
build = args[args.index("-C") + 1]
suites = [args[i + 1] for i, a in enumerate(args) if a == "--suite"]
tests = [t for t in TESTS if not suites or t.split(" / ")[0].split(":")[1] in suites]
if "--list" in args:
    print("\\n".join(tests))
    sys.exit(0)
skip = {{"-C", "--suite", "--num-processes"}}
pats = [a for i, a in enumerate(args[1:], 1) if not a.startswith("-") and args[i - 1] not in skip]
chosen = [t for t in tests if not pats or any(fnmatch.fnmatch(t.split(" / ", 1)[1], p.split(":", 1)[-1]) for p in pats)]
with open(os.path.join(os.path.dirname(build), "ran.json"), "a") as f:
    f.write(json.dumps([t.split(" / ", 1)[1] for t in chosen]) + "\\n")
logs = os.path.join(build, "meson-logs")
os.makedirs(logs, exist_ok=True)
with open(os.path.join(logs, "testlog.json"), "w") as f:
    for t in chosen:
        f.write(json.dumps({{"name": t, "result": "OK", "stdout": "ok\\n"}}) + "\\n")
with open(os.path.join(logs, "testlog.junit.xml"), "w") as f:
    f.write("<testsuites>" + "".join(f'<testcase name="{{t}}"/>' for t in chosen) + "</testsuites>\\n")
"""


def _shard_run_all(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    run_all = _run_all(tmp_path, monkeypatch)
    (tmp_path / "bin" / "meson").write_text(SHARD_FAKE.format(python=sys.executable, tests=TESTS))
    monkeypatch.setenv("QEMU", "/nonexistent/qemu")      # the boot tests' QEMU: nothing is built
    return run_all


def _ran(tmp_path: Any) -> list[list[str]]:
    path = tmp_path / "cache" / "ran.json"
    runs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    path.unlink(missing_ok=True)
    return runs


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_the_slices_cover_every_test_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    run_all = _shard_run_all(tmp_path, monkeypatch)
    names = [t.split(" / ", 1)[1] for t in TESTS]
    slices = []
    for k in range(1, n + 1):
        assert run_all.main(["--shard", f"{k}/{n}"]) == 0
        ran = _ran(tmp_path)
        assert len(ran) == 1 and ran[0], f"slice {k} of {n}: one meson test, of some tests ({ran})"
        slices.append(ran[0])
        junit = ET.parse(tmp_path / "cache" / "test-logs" / f"junit-shard-{k}-of-{n}.xml").getroot()
        assert [c.get("name", "").split(" / ", 1)[1] for c in junit.iter("testcase")] == ran[0], \
            "the slice's JUnit file is kept"
    assert sorted(t for s in slices for t in s) == sorted(names)           # every test, exactly once
    boot = [sum(t.startswith("boot_") for t in s) for s in slices]
    assert max(boot) - min(boot) <= 1, f"the boot tests are split evenly ({boot})"
    again = []
    for k in range(1, n + 1):                                             # the same slices every time
        run_all.main(["--shard", f"{k}/{n}"])
        again += _ran(tmp_path)
    assert again == slices


def test_a_slice_of_one_suite(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    run_all = _shard_run_all(tmp_path, monkeypatch)
    slices = []
    for k in (1, 2, 3):
        assert run_all.main(["--suite", "boot", "--shard", f"{k}/3"]) == 0
        slices += _ran(tmp_path)
        assert run_all.main(["--suite", "boot", "--shard", f"{k}/3", "--list"]) == 0
        listed = [ln.split(" / ", 1)[1] for ln in capsys.readouterr().out.splitlines() if " / " in ln]
        assert sorted(listed) == sorted(slices[-1]), "--list --shard lists the slice"
    assert sorted(t for s in slices for t in s) == sorted(f"boot_{c}" for c in "abcdefgh")
    assert sorted(map(len, slices)) == [2, 3, 3]


def test_bad_slices_are_refused(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    run_all = _shard_run_all(tmp_path, monkeypatch)
    for bad in ("0/2", "3/2", "2", "a/b"):
        with pytest.raises(SystemExit) as e:
            run_all.main(["--shard", bad])
        assert e.value.code == 2
    with pytest.raises(SystemExit) as e:             # more slices than tests: this one would run them all
        run_all.main(["--suite", "lint", "--shard", "2/2"])
    assert "this slice has none" in str(e.value)
    assert _ran(tmp_path) == []
