"""Guest verdicts, the timeline and coverage in a run and in the report: what fails a run
(runner._check_verdict_facts), and what report.txt, summary.json and junit.xml show of a
results folder whose runs carry a verdicts file, a kernel log, coverage and a timeline."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import JobFigures, MakeResults, spec_text
from hvexp import __main__ as cli
from hvexp import plan, report, runner, spec

SPARE = "[disk spare]\nbackend = null\nsize = 1G\n{plug}\n"


def two_disks(text: str, plug: str = "") -> str:
    return text.replace("[variant stock]", SPARE.format(plug=plug) + "[variant stock]")


def variant(text: str, v: str = "stock") -> plan.Variant:
    return plan.Plan(spec.parse(text, "/nowhere/x.exp")).variants[v]


def facts_check(tmp_path: Path, var: plan.Variant, verdicts_file: str | None) -> str | None:
    r = tmp_path / "res"
    r.mkdir(exist_ok=True)
    if verdicts_file is not None:
        (r / "verdicts").write_text(verdicts_file)
    return runner._check_verdict_facts(var, str(r))


# --- what fails a run ---------------------------------------------------------------------
def test_fio_failing_fails_the_run_unless_a_verdict_judges_it(tmp_path: Path) -> None:
    plain = variant(spec_text())
    assert not plain.fio_judged
    assert facts_check(tmp_path, plain, None) is None                   # an older guest script
    assert facts_check(tmp_path, plain, "fio.exit=0\nlun.0.present=yes\n") is None
    assert facts_check(tmp_path, plain, "fio.exit=1\nlun.0.present=yes\n") == \
        "fio exited with status 1 (no expect line judges fio's errors: see fio.out)"
    for extra in ("expect = fio.errors > 0", "expect = fio.verify = failed"):
        judged = variant(spec_text(stock_extra=extra))
        assert judged.fio_judged
        assert facts_check(tmp_path, judged, "fio.exit=1\nlun.0.present=yes\n") is None
    every = spec_text(exp_extra="expect = fio.errors = 0")
    assert variant(every, "stock").fio_judged and variant(every, "shared").fio_judged
    assert not variant(spec_text(stock_extra="expect = guest.io_errors = 0")).fio_judged


def test_check_run_judges_the_verdicts_file(tmp_path: Path) -> None:
    r = tmp_path / "res"
    r.mkdir()
    (r / "header").write_text("module.loaded=yes\nmodule.version=\n")
    (r / "fio.json").write_text("{}")
    (r / "verdicts").write_text("fio.exit=2\nlun.0.present=yes\n")
    why = runner.check_run(variant(spec_text()), str(r))
    assert why is not None and why.startswith("fio exited with status 2")


LOST = ("the guest lost its disk at LUN 1: it is gone at the end, and neither the timeline removed it nor an "
        "expect line expects it gone")


def test_a_disk_gone_at_the_end(tmp_path: Path) -> None:
    gone = "fio.exit=0\nlun.0.present=yes\nlun.1.present=no\n"
    assert facts_check(tmp_path, variant(two_disks(spec_text())), gone) == LOST
    removed = variant(two_disks(spec_text(stock_extra="timeline = 5s hot-remove spare")))
    assert removed.may_go == {1}
    assert facts_check(tmp_path, removed, gone) is None
    assert "lost its disk at LUN 0" in (facts_check(tmp_path, removed, "lun.0.present=no\nlun.1.present=no\n") or "")
    expected = variant(two_disks(spec_text(stock_extra="expect = spare.present = no")))
    assert expected.may_go == {1}
    assert facts_check(tmp_path, expected, gone) is None
    # A verdict that wants the disk there judges its absence: a failed expectation, no lost run.
    present = variant(two_disks(spec_text(stock_extra="expect = spare.present = yes")))
    assert present.may_go == set() and present.presence_judged == {1}
    assert facts_check(tmp_path, present, gone) is None
    assert "lost its disk at LUN 0" in (facts_check(tmp_path, present, "lun.0.present=no\nlun.1.present=no\n") or "")
    assert variant(two_disks(spec_text(stock_extra="expect = disk1.present = no"))).may_go == {1}


def test_a_disk_the_timeline_plugs(tmp_path: Path) -> None:
    """Gone at the end when the timeline never plugs it (another variant's timeline may);
    lost when it was plugged and left."""
    gone = "fio.exit=0\nlun.0.present=yes\nlun.1.present=no\n"
    text = two_disks(spec_text(shared_extra="timeline = 5s hot-add spare"), "plug = timeline")
    assert facts_check(tmp_path, variant(text, "stock"), gone) is None
    assert facts_check(tmp_path, variant(text, "shared"), gone) == LOST


# --- the report -------------------------------------------------------------------------
def WAL(iops: float) -> list[JobFigures]:
    return [("wal", "write", iops, 10.0, 20.0), ("hogs", "read", 1000, 5.0, 20.0)]


SPEC = two_disks(spec_text(
    exp_extra="coverage = functions\nexpect = fio.errors = 0\nexpect = coverage.all >= 75%",
    stock_extra="timeline = <<END\n2s fault disk0 error=medium\n6s hot-add spare\nEND\n"
                "expect = log !~ Medium Error\nexpect = spare.present = yes",
    shared_extra="expect = guest.io_errors = 0\nexpect = coverage.storvsc_host_reset_handler = ran"), "plug = timeline")
IO_ERROR = "[    4.2] I/O error, dev sda, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0"
STORVSC = "[    1.0] hv_storvsc f8b3781b-1e82-4818-a1c3-63d806ec1500: tag#65 cmd 0x28 status: scsi 0x2 srb 0x84 hv 0x0"
BANNER = "[    0.9] scsi host0: storvsc_host_t"
COV = {"storvsc_probe": 1, "storvsc_queuecommand": 9, "storvsc_host_reset_handler": 0, "storvsc_remove": 0,
       "storvsc_exit": -1}
EVENTS = [{"at": 2.0, "action": "fault", "target": "disk0", "value": "error=medium", "done_at": 2.004, "result": "ok"},
          {"at": 6.0, "action": "hot-add", "target": "spare", "value": "", "done_at": 6.31,
           "result": "refused: Duplicate device ID"}]


def line_of(text: str, line: str) -> int:
    return text.splitlines().index(line) + 1


@pytest.fixture
def folder(results_dir: MakeResults) -> str:
    """Three good runs of each variant: shared's second logs an I/O error, stock's third
    ends with fio's errors; shared's runs ran storvsc_host_reset_handler."""
    d = results_dir({"stock": [WAL(100)] * 3, "shared": [WAL(150)] * 3}, SPEC)
    p = json.loads(Path(d, "plan.json").read_text())
    for v in p["variants"]:
        v["coverage"] = True
    Path(d, "plan.json").write_text(json.dumps(p))
    for v in ("stock", "shared"):
        for rep in (1, 2, 3):
            rd = Path(d, "runs", v, f"rep{rep}")
            (rd / "results" / "verdicts").write_text(
                f"fio.exit=0\nlun.0.present=yes\nlun.0.iotmo=0x0\nlun.0.ioerr=0x{rep}\nlun.1.present=yes\n")
            (rd / "dmesg.txt").write_text(BANNER + "\n" + STORVSC + "\n" + (IO_ERROR + "\n" if (v, rep) == ("shared", 2) else ""))
            (rd / "coverage.json").write_text(json.dumps(dict(COV, storvsc_host_reset_handler=int(v == "shared"))))
            if v == "stock":
                (rd / "timeline.json").write_text(json.dumps(EVENTS))
    fio = Path(d, "runs", "stock", "rep3", "results", "fio.json")
    doc = json.loads(fio.read_text().split("\n", 1)[1])
    doc["jobs"][0].update(error=5, total_err=2)
    fio.write_text(json.dumps(doc))
    return d


def test_verdicts_are_judged_per_run(folder: str) -> None:
    rep = report.Report(folder)
    got = [(o.variant, o.expectation.text, o.passed) for o in rep.outcomes]
    assert got == [("stock", "fio.errors = 0", False), ("shared", "fio.errors = 0", True),
                   ("all variants", "coverage.all >= 75%", True),
                   ("stock", "log !~ Medium Error", True), ("stock", "spare.present = yes", True),
                   ("shared", "guest.io_errors = 0", False),
                   ("shared", "coverage.storvsc_host_reset_handler = ran", True)]
    fails = {o.expectation.text: o for o in rep.failed_expectations()}
    assert fails["fio.errors = 0"].detail == "repetition 3: 2"
    assert fails["guest.io_errors = 0"].line() == (
        f"FAIL shared: expect guest.io_errors = 0 (spec.exp:{line_of(SPEC, 'expect = guest.io_errors = 0')}): "
        f"repetition 2: 1 (first: {IO_ERROR})")
    cov = [o for o in rep.outcomes if o.expectation.text.startswith("coverage.all")][0]
    assert cov.detail == "3 of 4 functions ran (75%); not run: storvsc_remove" and cov.figure == 75.0


def test_report_text_shows_the_timeline_coverage_and_the_kernel_log(folder: str) -> None:
    text = report.Report(folder).text().splitlines()
    i = text.index("Timeline (host events, seconds after fio's start: planned -> done):")
    assert text[i + 1] == ("  stock          rep 1: fault disk0 2->2.0, hot-add spare 6->6.3 (refused: Duplicate device ID)")
    assert text[i + 3].startswith("  stock          rep 3: ") and not text[i + 4].startswith("  stock")
    i = text.index("Functions of hv_storvsc that ran (from the module's symbol table: inlined functions count in "
                   "their callers):")
    assert text[i + 1:i + 4] == [
        "  stock          2 of 4 (50%); not run: storvsc_host_reset_handler, storvsc_remove",
        "  shared         3 of 4 (75%); not run: storvsc_remove",
        "  all variants   3 of 4 (75%); not run: storvsc_remove"]
    i = text.index("The guest kernel's log (I/O errors and storvsc's lines; whole logs in runs/*/rep*/dmesg.txt):")
    assert text[i + 1] == f"  stock, repetition 1: 1 line(s), e.g. {STORVSC}"
    assert f"  shared, repetition 2: 2 line(s), e.g. {STORVSC} | {IO_ERROR}" in text
    assert "Expectations (figures: medians over repetitions; guest verdicts: in every run):" in text
    assert any(ln.startswith("  FAIL stock: expect fio.errors = 0 (spec.exp:") for ln in text)


def test_summary_json_carries_timeline_coverage_and_guest_facts(folder: str) -> None:
    report.Report(folder).write(lambda m: None)
    s = json.loads(Path(folder, "summary.json").read_text())
    assert s["timeline"] == {"stock": {"1": EVENTS, "2": EVENTS, "3": EVENTS}}
    assert s["coverage"]["shared"] == {"ran": ["storvsc_host_reset_handler", "storvsc_probe", "storvsc_queuecommand"],
                                       "not_run": ["storvsc_remove"]}
    assert s["coverage"]["stock"]["not_run"] == ["storvsc_host_reset_handler", "storvsc_remove"]
    assert s["coverage"]["all variants"]["not_run"] == ["storvsc_remove"]
    assert s["guest"]["shared"]["2"] == {"fio_errors": 0, "fio_verify_failed": 0, "io_errors": 1, "scsi_timeouts": 0,
                                         "scsi_errors": 2, "facts": {"fio.exit": "0", "lun.0.present": "yes",
                                                                     "lun.0.iotmo": "0x0", "lun.0.ioerr": "0x2",
                                                                     "lun.1.present": "yes"}}
    assert s["guest"]["stock"]["3"]["fio_errors"] == 2
    v = [e for e in s["expectations"] if e["expect"] == "guest.io_errors = 0"][0]
    assert v == {"variant": "shared", "expect": "guest.io_errors = 0",
                 "where": f"spec.exp:{line_of(SPEC, 'expect = guest.io_errors = 0')}", "passed": False,
                 "figure": None, "bound": "= 0", "ratio": False, "detail": f"repetition 2: 1 (first: {IO_ERROR})"}
    assert s["passed"] is False


def test_junit_has_a_case_per_verdict(folder: str) -> None:
    report.Report(folder).write(lambda m: None)
    suite = ET.parse(Path(folder, "junit.xml")).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name", ""): c for c in suite.findall("testcase")}
    assert len(cases) == 6 + 7 and suite.get("failures") == "2"
    bad = cases["shared: guest.io_errors = 0"].find("failure")
    assert bad is not None and bad.text == f"repetition 2: 1 (first: {IO_ERROR})"
    assert bad.get("message", "").startswith("FAIL shared: expect guest.io_errors = 0 (spec.exp:")
    assert cases["all variants: coverage.all >= 75%"].find("failure") is None
    assert cases["stock: fio.errors = 0"].find("failure") is not None


def test_report_exit_status_and_a_spec_that_asks_for_uncounted_coverage(folder: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", folder]) == 1
    err = capsys.readouterr().err
    assert "FAIL shared: expect guest.io_errors = 0" in err and "FAIL stock: expect fio.errors = 0" in err
    p = json.loads(Path(folder, "plan.json").read_text())
    p["variants"][1]["coverage"] = False
    Path(folder, "plan.json").write_text(json.dumps(p))
    assert cli.main(["report", folder]) == 2
    assert "coverage is not counted for shared (coverage = functions)" in capsys.readouterr().err
