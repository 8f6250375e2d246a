"""Guest verdicts (scripts/hvexp/verdicts.py): what each expect line reads as, each mistake
refused at the file and line a user sees through Plan, what a run's folder says, and each
verdict judged over fabricated runs."""

import json
from pathlib import Path

import pytest

from conftest import spec_text
from hvexp import plan, spec, verdicts

PATH = "/nowhere/my.exp"
SPARE = "[disk spare]\nbackend = null\nsize = 1G\n\n"


def two_disks(text: str) -> str:
    return text.replace("[variant stock]", SPARE + "[variant stock]")


def refused(text: str, bad_line: str) -> spec.SpecError:
    with pytest.raises(spec.SpecError) as e:
        plan.Plan(spec.parse(text, PATH))
    assert e.value.path == PATH
    assert e.value.line == text.splitlines().index(bad_line) + 1, str(e.value)
    assert str(e.value).startswith(f"{PATH}:{e.value.line}: ")
    return e.value


# --- reading ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, key, op, value", [
    ("fio.errors = 0", "fio.errors", "=", "0"),
    ("fio.errors>0", "fio.errors", ">", "0"),
    ("guest.io_errors <= 2", "guest.io_errors", "<=", "2"),
    ("scsi.timeouts  =  0", "scsi.timeouts", "=", "0"),
    ("scsi.errors < 1", "scsi.errors", "<", "1"),
    ("fio.verify = failed", "fio.verify", "=", "failed"),
    ("spare.present = no", "spare.present", "=", "no"),
    ("disk0.present = yes", "disk0.present", "=", "yes"),
    ("coverage.functions >= 90%", "coverage.functions", ">=", "90"),
    ("coverage.all > 12.5%", "coverage.all", ">", "12.5"),
    ("coverage.storvsc_probe = not-run", "coverage.storvsc_probe", "=", "not-run"),
    ("log ~ Medium  Error", "log", "~", "Medium  Error"),          # the pattern as written
    ("log !~ I/O error, dev sd[a-z]", "log", "!~", "I/O error, dev sd[a-z]"),
    ("log~^x$", "log", "~", "^x$"),
])
def test_each_verdict_reads(text: str, key: str, op: str, value: str) -> None:
    assert verdicts.is_verdict(text)
    v = verdicts.parse(text, 7, "stock")
    assert (v.key, v.op, v.value, v.line, v.scope, v.ratio) == (key, op, value, 7, "stock", False)
    assert v.text == text and v.describe_bound() == f"{op} {value}"


@pytest.mark.parametrize("text", ["wal.write.iops >= 5", "wal.write.iops ratio >= 1.5", "seq.read.bw = 760 +-10%",
                                  "present.write.lat <= 2"])
def test_figure_expectations_are_no_verdicts(text: str) -> None:
    assert not verdicts.is_verdict(text)


# --- refused before the first boot ----------------------------------------------------------
@pytest.mark.parametrize("line, message", [
    ("expect = nope.present = no", "expect nope.present = no: the spec has no disk 'nope' (its disks: disk0, disk1, spare)"),
    ("expect = log ~ ([a-z]", "'([a-z]' is no regular expression: "),
    ("expect = log !~ *x", "'*x' is no regular expression: "),
    ("expect = fio.verify = maybe", "fio.verify is ok or failed, not 'maybe'"),
    ("expect = disk0.present = gone", "disk0.present is yes or no, not 'gone'"),
    ("expect = coverage.storvsc_probe = yes", "coverage.storvsc_probe is ran or not-run, not 'yes'"),
    ("expect = coverage.functions = ran", "coverage.functions is a share of the functions: coverage.functions >= 90%, "
                                          "not = ran"),
    ("expect = guest.io_errors >= many", "cannot read 'guest.io_errors >= many' as a guest verdict: want "),
    ("expect = fio.errors == 0", "cannot read 'fio.errors == 0' as a guest verdict"),
    ("expect = coverage.functions >= 90", "cannot read 'coverage.functions >= 90' as a guest verdict"),
])
def test_each_mistake_is_refused_at_its_line(line: str, message: str) -> None:
    text = two_disks(spec_text(exp_extra="coverage = functions", shared_extra="expect = fio.errors = 0\n" + line))
    e = refused(text, line)
    assert e.message.startswith(message), e.message


def test_coverage_verdicts_want_coverage_counted() -> None:
    line = "expect = coverage.functions >= 50%"
    e = refused(spec_text(exp_extra=line), line)
    assert e.message == "expect coverage.functions >= 50%: coverage is not counted for stock, shared (coverage = functions)"
    e = refused(spec_text(stock_extra="coverage = functions", exp_extra=line), line)
    assert e.message.endswith("coverage is not counted for shared (coverage = functions)")
    line = "expect = coverage.storvsc_probe = ran"
    e = refused(spec_text(stock_extra="coverage = functions", shared_extra=line), line)
    assert e.message == f"expect {line[9:]}: coverage is not counted for shared (coverage = functions)"
    plan.Plan(spec.parse(spec_text(stock_extra="coverage = functions\n" + line), PATH))
    plan.Plan(spec.parse(spec_text(exp_extra="coverage = functions\nexpect = coverage.all >= 50%"), PATH))


def test_coverage_is_counted_on_hv_storvsc_only() -> None:
    p = plan.Plan(spec.parse(spec_text(stock_extra="coverage = functions"), PATH))
    assert p.variants["stock"].coverage and not p.variants["shared"].coverage
    assert p.guest("stock", "/run").coverage == "hv_storvsc" and p.guest("shared", "/run").coverage is None
    for device in ("device = scsi_debug\nscsi-debug = ndelay=1ms", "device = virtio-scsi"):
        e = refused(spec_text(exp_extra="coverage = functions", stock_extra=device), "coverage = functions")
        kind = device.split("\n")[0].split(" = ")[1]
        assert e.message == f"variant stock: coverage counts hv_storvsc's functions: the variant runs on {kind}"
    e = refused(spec_text(stock_extra="coverage = branches"), "coverage = branches")
    assert e.message == "variant stock: coverage is functions, lines or off, got 'branches'"


# --- what a run's folder says ------------------------------------------------------------
VERDICTS = "fio.exit=1\nlun.0.present=yes\nlun.0.iorequest=0x20\nlun.0.ioerr=0x2\nlun.0.iotmo=0x1\n" \
           "lun.1.present=yes\nlun.1.ioerr=3\nlun.1.iotmo=\nlun.2.present=no\n"
DMESG = """\
[    5.1] sd 0:0:0:0: [sda] tag#3 Sense Key : Medium Error [current]
[    5.2] I/O error, dev sda, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0
[    5.3] critical medium error, dev sda, sector 16 op 0x0:(READ)
[    5.4] Buffer I/O error on dev sda, logical block 2, async page read
[    5.5] hv_storvsc f8b3781b-1e82-4818-a1c3-63d806ec15bb: tag#0 cmd 0x28 status: scsi 0x2 srb 0x4
"""


def run_folder(d: Path, verdicts_file: str = "", jobs: list[dict[str, object]] | None = None, dmesg: str = "",
               coverage: dict[str, int] | None = None) -> str:
    (d / "results").mkdir(parents=True)
    if verdicts_file:
        (d / "results" / "verdicts").write_text(verdicts_file)
    if jobs is not None:
        (d / "results" / "fio.json").write_text("fio: a note before the document\n" + json.dumps({"jobs": jobs}))
    if dmesg:
        (d / "dmesg.txt").write_text(dmesg)
    if coverage is not None:
        (d / "coverage.json").write_text(json.dumps(coverage))
    return str(d)


def test_run_facts(tmp_path: Path) -> None:
    jobs: list[dict[str, object]] = [{"error": 0}, {"error": 5, "total_err": 4}, {"error": 84}, {"error": 0, "total_err": 2}]
    f = verdicts.run_facts(run_folder(tmp_path / "r", VERDICTS, jobs, DMESG, {"a": 3, "b": 0, "c": -1}), 2)
    assert f.rep == 2 and f.values["fio.exit"] == "1" and f.values["lun.1.iotmo"] == ""
    assert f.fio_errors == 4 + 1 + 2                     # total_err, else 1 for a job that ended in error
    assert f.fio_verify_failed == 1                      # EILSEQ: data that failed verification
    assert f.counter("iotmo") == 1 and f.counter("ioerr") == 2 + 3       # hex or decimal, over the disks
    assert f.counter("iorequest") == 32
    assert [ln[:9] for ln in f.io_error_lines()] == ["[    5.2]", "[    5.3]", "[    5.4]"]
    assert f.coverage == {"a": 3, "b": 0, "c": -1}


def test_run_facts_of_an_empty_folder(tmp_path: Path) -> None:
    f = verdicts.run_facts(str(tmp_path / "nothing"), 1)
    assert (f.values, f.fio_errors, f.fio_verify_failed, f.kernel_log, f.coverage) == ({}, 0, 0, [], None)
    (tmp_path / "r" / "results").mkdir(parents=True)
    (tmp_path / "r" / "results" / "fio.json").write_text('{"jobs": [{"error": 5')     # cut short
    (tmp_path / "r" / "coverage.json").write_text("[1, 2")
    f = verdicts.run_facts(str(tmp_path / "r"), 1)
    assert f.fio_errors == 0 and f.coverage is None


# --- judging -----------------------------------------------------------------------------
LUNS = {"disk0": 0, "disk1": 1, "spare": 1}


def facts(rep: int, values: str = "", fio_errors: int = 0, verify: int = 0, log: str = "",
          coverage: dict[str, int] | None = None) -> verdicts.RunFacts:
    vals = dict(ln.split("=", 1) for ln in values.split())
    return verdicts.RunFacts(rep, vals, fio_errors, verify, log.splitlines(), coverage)


GOOD = facts(1, "lun.0.present=yes lun.1.present=yes lun.0.iotmo=0 lun.0.ioerr=0", log="[1.0] all well")
BAD_VALUES = "lun.0.present=yes lun.1.present=no lun.0.iotmo=0x2 lun.1.iotmo=1 lun.0.ioerr=0x4"
BAD = facts(2, BAD_VALUES, fio_errors=3, verify=1, log=DMESG)


def judge(text: str, runs: list[verdicts.RunFacts]) -> verdicts.VerdictOutcome:
    return verdicts.evaluate(verdicts.parse(text), "stock", runs, LUNS, "my.exp:9")


@pytest.mark.parametrize("text, good, bad", [
    ("fio.errors = 0", "0", "repetition 2: 3"),
    ("fio.verify = ok", "verify ok", "repetition 2: verify failed"),
    ("guest.io_errors = 0", "0", "repetition 2: 3 (first: [    5.2] I/O error, dev sda, sector 8"),
    ("scsi.timeouts < 1", "0", "repetition 2: 3"),
    ("scsi.errors <= 3", "0", "repetition 2: 4"),
    ("log !~ Medium Error", "0 line(s)",
     "repetition 2: 1 line(s), first: [    5.1] sd 0:0:0:0: [sda] tag#3 Sense Key : Medium Error [current]"),
    ("spare.present = yes", "present: yes", "repetition 2: present: no"),
    ("disk1.present = yes", "present: yes", "repetition 2: present: no"),
])
def test_a_verdict_holds_in_every_run_or_names_the_one_it_failed_in(text: str, good: str, bad: str) -> None:
    o = judge(text, [GOOD])
    assert o.passed and o.figure is None and o.detail == f"held in each of 1 run(s) ({good})"
    o = judge(text, [GOOD, BAD])
    assert not o.passed and o.detail.startswith(bad), o.detail
    assert o.line().startswith(f"FAIL stock: expect {text} (my.exp:9): repetition 2: ")
    o = judge(text, [BAD, GOOD, facts(3, BAD_VALUES, 3, 1, DMESG)])      # each run that failed, named
    assert o.detail.startswith(bad) and "; repetition 3: " in o.detail and "repetition 1" not in o.detail


@pytest.mark.parametrize("text", ["fio.errors > 0", "fio.errors >= 3", "fio.verify = failed", "guest.io_errors > 2",
                                  "scsi.timeouts = 3", "scsi.errors > 3", "log ~ Medium Error", "log ~ ^\\[ *5\\.5\\] hv_storvsc",
                                  "spare.present = no", "disk1.present = no"])
def test_the_opposite_verdicts(text: str) -> None:
    assert judge(text, [BAD]).passed
    assert not judge(text, [BAD, GOOD]).passed


def test_log_detail_and_present_without_a_verdicts_file() -> None:
    assert judge("log ~ Medium Error", [BAD]).detail == \
        "held in each of 1 run(s) (1 line(s), first: [    5.1] sd 0:0:0:0: [sda] tag#3 Sense Key : Medium Error [current])"
    assert judge("disk0.present = no", [facts(1)]).passed       # an older guest script: no word on any disk
    o = judge("fio.errors = 0", [])
    assert (o.passed, o.detail) == (False, "no run to judge")


COV1 = {"storvsc_probe": 1, "storvsc_queuecommand": 40, "storvsc_host_reset_handler": 0, "storvsc_exit": -1,
        "storvsc_remove": 0}
COV2 = {"storvsc_probe": 1, "storvsc_queuecommand": 0, "storvsc_host_reset_handler": 2, "storvsc_exit": -1,
        "storvsc_remove": -1}


def test_coverage_union_leaves_out_functions_never_probed() -> None:
    r1, r2, none = facts(1, coverage=COV1), facts(2, coverage=COV2), facts(3)
    assert verdicts.coverage_union([r1]) == (["storvsc_probe", "storvsc_queuecommand"],
                                             ["storvsc_host_reset_handler", "storvsc_remove"])
    # Ran in any run; not probed in one run but probed in another: counted where probed.
    assert verdicts.coverage_union([r1, r2, none]) == (
        ["storvsc_host_reset_handler", "storvsc_probe", "storvsc_queuecommand"], ["storvsc_remove"])
    assert verdicts.coverage_union([r2]) == (["storvsc_host_reset_handler", "storvsc_probe"], ["storvsc_queuecommand"])
    assert verdicts.coverage_union([none]) == ([], [])


def test_coverage_verdicts() -> None:
    runs = [facts(1, coverage=COV1), facts(2, coverage=COV2)]
    o = judge("coverage.functions >= 75%", runs)
    assert o.passed and o.figure == 75.0
    assert o.detail == "3 of 4 functions ran (75%); not run: storvsc_remove"
    o = judge("coverage.functions > 75%", runs)
    assert not o.passed and o.line().startswith("FAIL stock: expect coverage.functions > 75% (my.exp:9): 3 of 4")
    assert judge("coverage.all >= 50%", runs[:1]).detail == \
        "2 of 4 functions ran (50%); not run: storvsc_host_reset_handler, storvsc_remove"
    assert judge("coverage.storvsc_host_reset_handler = ran", runs).passed
    assert not judge("coverage.storvsc_host_reset_handler = ran", runs[:1]).passed
    o = judge("coverage.storvsc_remove = not-run", runs)
    assert o.passed and o.detail == "storvsc_remove not-run"
    o = judge("coverage.storvsc_exit = not-run", runs)
    assert not o.passed and o.detail == "the kernel would not probe storvsc_exit (a notrace function, such as an __exit one)"
    o = judge("coverage.storvsc_nothing = not-run", runs)
    assert not o.passed and o.detail == "storvsc_nothing is not a function the module's symbol table has"
    o = judge("coverage.functions >= 1%", [facts(1)])
    assert (o.passed, o.detail) == (False, "no coverage was counted")
