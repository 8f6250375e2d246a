import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from conftest import JobFigures, MakeResults, RunFigures, spec_text
from hvexp import __main__ as cli
from hvexp import report


def WAL(iops: float, lat: float = 10.0) -> list[JobFigures]:
    return [("wal", "write", iops, lat, 2 * lat), ("hogs", "read", 1000, 5.0, 20.0)]


EXPECT_PASS = spec_text(exp_extra="expect = hogs.read.iops >= 500",
                        shared_extra="expect = wal.write.iops ratio >= 1.5\nexpect = wal.write.lat <= 8")
EXPECT_FAIL = spec_text(shared_extra="expect = wal.write.iops ratio >= 3.2")


def figures(shared_iops: tuple[float, ...] = (150, 160, 170)) -> RunFigures:
    return {"stock": [WAL(100), WAL(100), WAL(100)], "shared": [WAL(x, 6.0) for x in shared_iops]}


def test_passing_expectations(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    d = results_dir(figures(), EXPECT_PASS)
    rep = report.Report(d)
    # hogs >= 500 applies to both variants; the ratio and the latency to shared only.
    assert [(o.variant, o.expectation.text, o.passed) for o in rep.outcomes] == [
        ("stock", "hogs.read.iops >= 500", True), ("shared", "hogs.read.iops >= 500", True),
        ("shared", "wal.write.iops ratio >= 1.5", True), ("shared", "wal.write.lat <= 8", True)]
    assert rep.ok()
    assert cli.main(["report", d]) == 0
    out = capsys.readouterr().out
    assert "PASS shared: expect wal.write.iops ratio >= 1.5 (spec.exp:" in out


def test_failing_expectation_exits_1_and_names_it(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    d = results_dir(figures(), EXPECT_FAIL)
    assert cli.main(["report", d]) == 1
    err = capsys.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith("FAIL")]
    assert len(line) == 1
    assert "expect wal.write.iops ratio >= 3.2" in line[0]
    assert "measured x1.60" in line[0] and "bound x>= 3.2" in line[0]


def test_spec_override_rejudges_the_same_results(results_dir: MakeResults) -> None:
    d = results_dir(figures(), EXPECT_PASS)
    other = d + "/../other.exp"
    with open(other, "w") as f:
        f.write(EXPECT_FAIL)
    assert cli.main(["report", d, "--spec", other]) == 1
    assert cli.main(["report", d]) == 0


def test_a_bad_expectation_is_a_spec_error(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    d = results_dir(figures(), spec_text(shared_extra="expect = wal.write.iops ratio >> 2"))
    assert cli.main(["report", d]) == 2
    assert "spec.exp:" in capsys.readouterr().err


def test_failed_and_missing_runs_count_against_the_verdict(results_dir: MakeResults) -> None:
    figs = figures()
    figs["shared"] = [WAL(150), None]          # rep 2 failed, rep 3 never ran
    d = results_dir(figs, spec_text())
    rep = report.Report(d)
    assert [(v, r) for v, r, _ in rep.failed_runs()] == [("shared", 2)]
    assert rep.missing_runs() == [("shared", 3)]
    assert not rep.ok()
    assert cli.main(["report", d]) == 3
    text = rep.text()
    assert "shared, repetition 2: the boot failed with status 124" in text
    assert "shared, repetition 3: not run" in text


def test_junit_parses_and_counts(results_dir: MakeResults) -> None:
    figs = figures()
    figs["shared"] = [WAL(150), WAL(150), None]
    d = results_dir(figs, EXPECT_FAIL)
    report.Report(d).write(lambda m: None)
    root = ET.parse(d + "/junit.xml").getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert int(suite.get("tests", "")) == len(cases) == 6 + 1
    failed = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("failures", "")) == len(failed) == 2
    names = {c.get("name") for c in failed}
    assert names == {"shared repetition 3", "shared: wal.write.iops ratio >= 3.2"}
    assert all(c.get("classname", "").startswith("hvstor.t.") for c in cases)


def test_summary_json(results_dir: MakeResults) -> None:
    d = results_dir(figures(), EXPECT_PASS)
    report.Report(d).write(lambda m: None)
    s = json.load(open(d + "/summary.json"))
    assert s["passed"] is True and s["baseline"] == "stock"
    wal = [f for f in s["figures"] if f["job"] == "wal" and f["metric"] == "iops" and f["variant"] == "shared"][0]
    assert wal["values"] == [150, 160, 170] and wal["median"] == 160
    assert wal["ratio_of_means"] == pytest.approx(1.6)
    assert len(s["expectations"]) == 4 and all(e["passed"] for e in s["expectations"])
    assert [r["status"] for r in s["runs"]] == ["ok"] * 6


def test_time_scale_applies(results_dir: MakeResults) -> None:
    d = results_dir(figures(), spec_text(stock_extra="expect = wal.write.iops >= 790\nexpect = wal.write.lat <= 1.3"), scale=8)
    rep = report.Report(d)
    assert all(o.passed for o in rep.outcomes), [o.line() for o in rep.outcomes]


def test_table_rows(results_dir: MakeResults) -> None:
    d = results_dir(figures(), spec_text())
    text = report.Report(d).text()
    assert "\nwal (write)\n" in text and "\nhogs (read)\n" in text
    rows = [ln.split() for ln in text.splitlines() if re.match(r"^  (stock|shared) +[0-9]+ +[0-9]", ln)]
    # wal then hogs, baseline first: variant, runs, IOPS, sd, MB/s, sd, clat, sd, p99, IOPS x, clat x
    assert [r[:3] for r in rows] == [["stock", "3", "100.0"], ["shared", "3", "160.0"],
                                     ["stock", "3", "1000.0"], ["shared", "3", "1000.0"]]
    assert rows[1][9:11] == ["1.60", "0.60"] and rows[1][8] == "12.000"


def test_not_a_results_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "no plan.json" in capsys.readouterr().err


def test_expectation_about_an_unknown_variant_is_an_error(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    d = results_dir(figures(), spec_text(shared_extra="expect = wal.write.iops > 1").replace("[variant shared]", "[variant shraed]"))
    assert cli.main(["report", d]) == 2
    assert "variant 'shraed'" in capsys.readouterr().err


def test_variant_left_out_is_reported_and_skipped(results_dir: MakeResults) -> None:
    figs: RunFigures = {"stock": figures()["stock"]}
    d = results_dir(figs, EXPECT_FAIL)
    plan = json.load(open(d + "/plan.json"))
    plan["all_variants"] = ["stock", "shared"]
    json.dump(plan, open(d + "/plan.json", "w"))
    rep = report.Report(d)
    assert rep.outcomes == [] and rep.left_out[0][0] == "shared"
    assert "SKIP shared: expect wal.write.iops ratio >= 3.2" in rep.text()
    rep.write(lambda m: None)
    suite = ET.parse(d + "/junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.get("skipped") == "1"


def test_odd_characters_in_the_results_path(results_dir: MakeResults, tmp_path: Path) -> None:
    import shutil
    d = results_dir(figures(), spec_text())
    odd = str(tmp_path / "it's \"odd\"")
    shutil.copytree(d, odd)
    text = report.Report(odd).write(lambda m: None)
    assert "\nwal (write)\n" in text


def test_boot_to_first_io(results_dir: MakeResults) -> None:
    """The median time to fio's start per variant, booted or gone on from a snapshot (with
    the one boot that made it); a run that did not say stays out."""
    d = results_dir(figures(), spec_text())
    times: dict[str, list[tuple[float | None, str, float | None]]] = {
        "stock": [(21.0, "boot", None), (25.0, "boot", None), (None, "boot", None)],
        "shared": [(2.5, "snapshot", 30.0), (1.5, "snapshot", 30.0), (2.0, "snapshot", 30.0)]}
    for v, runs in times.items():
        for r, (first, start, snap) in enumerate(runs, 1):
            p = Path(d) / "runs" / v / f"rep{r}" / "run.json"
            st = json.loads(p.read_text())
            st.update(first_io=first, start=start, snapshot_boot=snap)
            p.write_text(json.dumps(st))
    rep = report.Report(d)
    text = rep.text()
    assert "Boot to first I/O (seconds from a run's start to fio's start, median):" in text
    assert re.search(r"^  stock +boot 23\.0 s \(2 runs\)$", text, re.M), text
    assert re.search(r"^  shared +from its snapshot 2\.0 s \(3 runs\); the boot its snapshot was saved from 30\.0 s$",
                     text, re.M), text
    summary: Any = rep.summary()
    by_run = {(x["variant"], x["rep"]): x for x in summary["runs"]}
    assert by_run[("shared", 2)]["start"] == "snapshot" and by_run[("shared", 2)]["first_io"] == 1.5
    assert by_run[("stock", 1)]["snapshot_boot"] is None


def test_no_first_io_section_without_the_figure(results_dir: MakeResults) -> None:
    assert "Boot to first I/O" not in report.Report(results_dir(figures(), spec_text())).text()
