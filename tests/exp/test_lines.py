"""Line coverage (coverage = lines): the spec's key and verdicts, what the plan finds for a
variant (the notes file, the lines its patch changes), and what report.txt and
summary.json show of runs that carry lines.json."""

import json
from pathlib import Path

import pytest

from conftest import MakeResults, spec_text
from hvexp import plan, report, spec, verdicts

STOCK = "int a;\nint f(int x)\n{\n\treturn x;\n}\n"
PATCHED = "int a;\nint f(int x)\n{\n\tif (x < 0)\n\t\treturn 0;\n\treturn x;\n}\n\n"


def make(text: str, **kw: object) -> plan.Plan:
    return plan.Plan(spec.parse(text, "/nowhere/x.exp"), **kw)  # type: ignore[arg-type]


# --- the spec --------------------------------------------------------------------------
def test_line_verdicts_read_and_want_a_share() -> None:
    v = verdicts.parse("coverage.lines >= 60%")
    assert (v.key, v.op, v.value) == ("coverage.lines", ">=", "60")
    assert verdicts.parse("coverage.change > 75.5%").key == "coverage.change"
    with pytest.raises(verdicts.VerdictError, match="share of the lines"):
        verdicts.parse("coverage.change = ran")
    assert verdicts.is_verdict("coverage.lines >= many")       # a verdict that does not read


def test_lines_need_a_kernel_of_your_own() -> None:
    with pytest.raises(spec.SpecError, match="coverage = lines needs a kernel built with CONFIG_GCOV_KERNEL"):
        make(spec_text(stock_extra="coverage = lines"))
    with pytest.raises(spec.SpecError, match="coverage is functions, lines or off, got 'branches'"):
        make(spec_text(stock_extra="coverage = branches"))
    with pytest.raises(spec.SpecError, match=r"coverage is not counted for stock \(coverage = lines\)"):
        make(spec_text(stock_extra="coverage = functions\nexpect = coverage.lines >= 50%"))


def kernel_tree(tmp_path: Path, gcno: bool) -> tuple[str, str]:
    """A bzImage and a modules tree whose `build` link holds storvsc_drv.gcno (or not)."""
    image = tmp_path / "bzImage"
    image.write_bytes(b"k")
    mods = tmp_path / "mods" / "lib" / "modules" / "6.12.0"
    (mods / "kernel" / "drivers" / "scsi").mkdir(parents=True)
    (mods / "kernel" / "drivers" / "scsi" / "hv_storvsc.ko").write_bytes(b"ko")
    (tmp_path / "build" / "drivers" / "scsi").mkdir(parents=True)
    if gcno:
        (tmp_path / "build" / "drivers" / "scsi" / "storvsc_drv.gcno").write_bytes(b"notes")
    (mods / "build").symlink_to(tmp_path / "build")
    return str(image), str(mods)


def test_the_plan_finds_the_notes_and_the_changed_lines(tmp_path: Path) -> None:
    image, mods = kernel_tree(tmp_path, gcno=True)
    built = tmp_path / "kmod"
    built.mkdir()
    (built / "hv_storvsc.ko").write_bytes(b"ko")
    (built / "storvsc_drv.gcno").write_bytes(b"notes of the patched build")
    (tmp_path / "stock.c").write_text(STOCK)
    (built / "storvsc_drv.c").write_text(PATCHED + 'MODULE_VERSION("hvstor-x-1");\n')
    (built / "build-info").write_text(f"kernel=6.12.0\nsource={tmp_path / 'stock.c'}\npatch=x.patch\n")

    def build(v: str, kernel: str, modules: str, kdir: str, patch: str, source: str = "") -> tuple[str, dict[str, str]]:
        return str(built / "hv_storvsc.ko"), {"version": "hvstor-x-1", "srcversion": "A"}
    p = make(spec_text(exp_extra=f"kernel = {image}\nmodules = {mods}\ncoverage = lines\n"
                                 "expect = coverage.lines >= 10%", shared_extra="expect = coverage.change >= 50%"),
             build_module=build)
    stock, shared = p.variants["stock"], p.variants["shared"]
    assert stock.lines and Path(stock.gcno).resolve() == tmp_path / "build" / "drivers" / "scsi" / "storvsc_drv.gcno"
    assert stock.changed == {}
    # The patched module's own notes; its new lines, not the version stamp nor a blank.
    assert shared.gcno == str(built / "storvsc_drv.gcno")
    assert shared.changed == {4: "\tif (x < 0)", 5: "\t\treturn 0;"}
    g = p.guest("shared", "/run")
    assert g.gcov == shared.gcno and "hvstor.gcov=storvsc_drv" in g.kernel_cmdline("ttyS1", "ttyS2")


def test_a_kernel_without_gcov_notes_is_refused_at_the_line(tmp_path: Path) -> None:
    image, mods = kernel_tree(tmp_path, gcno=False)
    text = spec_text(exp_extra=f"kernel = {image}\nmodules = {mods}", stock_extra="coverage = lines")
    with pytest.raises(spec.SpecError) as e:
        make(text)
    assert "no storvsc_drv.gcno" in str(e.value) and "CONFIG_GCOV_KERNEL" in str(e.value)
    assert e.value.line == text.splitlines().index("coverage = lines") + 1


# --- verdicts and the report -------------------------------------------------------------
SPEC = spec_text(exp_extra="coverage = lines\nexpect = coverage.lines >= 50%\nexpect = coverage.all-lines >= 75%\n"
                           "expect = coverage.all-change >= 10%",
                 shared_extra="expect = coverage.change >= 80%")


def lines_doc(counts: dict[int, int], changed: dict[int, str]) -> str:
    return json.dumps(verdicts.Lines("storvsc_drv.c", counts, changed).as_json())


@pytest.fixture
def folder(results_dir: MakeResults) -> str:
    """stock ran lines 10 and 11 of 10-13; shared's patch changed 11, 12, 20 (20 no code):
    its first run ran 11, its second nothing more."""
    row = [("wal", "write", 100.0, 1.0, 2.0), ("hogs", "read", 100.0, 1.0, 2.0)]
    d = results_dir({"stock": [row] * 2, "shared": [row] * 2}, SPEC, reps=2)
    p = json.loads(Path(d, "plan.json").read_text())
    for v in p["variants"]:
        v["coverage"] = v["lines"] = True
    Path(d, "plan.json").write_text(json.dumps(p))
    changed = {11: "\tif (x < 0)", 12: "\t\treturn 0;", 20: "\t/* why */"}
    for rep in (1, 2):
        Path(d, "runs", "stock", f"rep{rep}", "lines.json").write_text(
            lines_doc({10: 3, 11: rep - 1, 12: 0, 13: 0}, {}))
        Path(d, "runs", "shared", f"rep{rep}", "lines.json").write_text(
            lines_doc({10: 1, 11: 2 - rep, 12: 0, 13: 0}, changed))
    return d


def test_line_verdicts_are_judged_over_the_variants_runs(folder: str) -> None:
    rep = report.Report(folder)
    got = {(o.variant, o.expectation.text): (o.passed, o.figure, o.detail) for o in rep.outcomes}
    assert got[("stock", "coverage.lines >= 50%")] == (True, 50.0, "2 of 4 executable lines of storvsc_drv.c ran (50%)")
    assert got[("shared", "coverage.lines >= 50%")][:2] == (True, 50.0)
    assert got[("shared", "coverage.change >= 80%")] == (
        False, 50.0, "your change: 1 of 2 lines executed; not run: 12 `return 0;` (50%)")
    # Over every run: lines 10 and 11 ran, of 4; the variants' changes differ.
    assert got[("all variants", "coverage.all-lines >= 75%")] == (
        False, 50.0, "2 of 4 executable lines of storvsc_drv.c ran (50%)")
    assert got[("all variants", "coverage.all-change >= 10%")] == (
        False, None, "the variants do not share one change of storvsc_drv.c")


def test_report_and_summary_show_the_lines_and_the_change(folder: str) -> None:
    rep = report.Report(folder)
    text = rep.text().splitlines()
    i = text.index("Lines of storvsc_drv.c that ran (gcov; coverage = lines; runs' counts in runs/*/rep*/lines.json):")
    assert text[i + 1].split() == ["stock", "2", "of", "4", "lines", "(50%)"]
    assert text[i + 2].split() == ["shared", "2", "of", "4", "lines", "(50%)"]
    assert text[i + 3].strip() == "your change: 1 of 2 lines executed; not run: 12 `return 0;`"
    assert text[i + 4].split() == ["all", "variants", "2", "of", "4", "lines", "(50%)"]
    s = rep.lines()
    assert rep.summary()["lines"] == s
    assert s["stock"] == {"file": "storvsc_drv.c", "executable": 4, "ran": 2, "not_run": [12, 13], "change": None}
    assert s["shared"]["change"] == {"lines": 2, "ran": [11], "not_run": [[12, "\t\treturn 0;"]]}
    assert s["all variants"]["ran"] == 2 and s["all variants"]["change"] is None


def test_a_variant_without_lines_fails_a_line_verdict(folder: str) -> None:
    for rep in (1, 2):
        Path(folder, "runs", "shared", f"rep{rep}", "lines.json").unlink()
    out = {(o.variant, o.expectation.text): o for o in report.Report(folder).outcomes}
    o = out[("shared", "coverage.change >= 80%")]
    assert not o.passed and o.detail == "no line coverage came back (gcov)"


def test_a_change_of_no_code_is_said_so() -> None:
    u = verdicts.Lines("storvsc_drv.c", {1: 1}, {5: "/* a comment */"})
    assert verdicts.describe_change(u) == "your change: none of its 1 line(s) is executable code"
    o = verdicts.evaluate(verdicts.parse("coverage.change >= 1%"), "v", [verdicts.RunFacts(1, lines=u)], {})
    assert not o.passed and "none of its 1 line(s)" in o.detail


def test_one_patch_over_every_scenario_is_judged_together() -> None:
    """A suite run with one --patch: each scenario ran part of the change, all of them
    together ran it all."""
    change = {3: "a();", 4: "b();"}
    runs = [verdicts.RunFacts(1, lines=verdicts.Lines("storvsc_drv.c", {3: 1, 4: 0, 9: 2}, change)),
            verdicts.RunFacts(1, lines=verdicts.Lines("storvsc_drv.c", {3: 0, 4: 5, 9: 0}, change))]
    o = verdicts.evaluate(verdicts.parse("coverage.all-change >= 100%"), "all variants", runs, {})
    assert o.passed and o.detail == "your change: 2 of 2 lines executed (100%)"
    one = verdicts.evaluate(verdicts.parse("coverage.change >= 100%"), "v", runs[:1], {})
    assert not one.passed and one.detail == "your change: 1 of 2 lines executed; not run: 4 `b();` (50%)"
