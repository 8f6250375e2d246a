"""Every expect line is checked against the fio job when the plan is made, before any boot
(and in --dry-run): errors name the user's spec file and the line."""

from pathlib import Path
from typing import Any

import pytest

from conftest import MakeResults, spec_text
from hvexp import __main__ as cli
from hvexp import plan, spec

PATH = "/nowhere/my.exp"


def refused(text: str, expect_line: str, **kw: Any) -> spec.SpecError:
    """The SpecError a plan of text raises, checked to be at the line of expect_line."""
    with pytest.raises(spec.SpecError) as e:
        plan.Plan(spec.parse(text, PATH), **kw)
    assert e.value.path == PATH
    assert e.value.line == text.splitlines().index(expect_line) + 1
    assert str(e.value).startswith(f"{PATH}:{e.value.line}: ")
    return e.value


def test_a_job_the_fio_job_does_not_have() -> None:
    e = refused(spec_text(shared_extra="expect = wla.write.iops >= 1"), "expect = wla.write.iops >= 1")
    assert e.message == "variant shared: expect wla.write.iops >= 1: the fio job has no job 'wla' (fio reports: wal, hogs)"


def test_a_direction_the_job_does_not_do() -> None:
    e = refused(spec_text(exp_extra="expect = hogs.write.iops >= 1"), "expect = hogs.write.iops >= 1")
    assert e.message == "expect hogs.write.iops >= 1: job 'hogs' does no write I/O (rw=randread)"
    e = refused(spec_text(stock_extra="expect = wal.trim.lat <= 2"), "expect = wal.trim.lat <= 2")
    assert "job 'wal' does no trim I/O (rw=write)" in e.message


def test_a_metric_that_does_not_exist() -> None:
    e = refused(spec_text(stock_extra="expect = wal.write.speed >= 1"), "expect = wal.write.speed >= 1")
    assert "metric 'speed' is not one of iops, bw, lat, tlat, p50, p99" in e.message
    e = refused(spec_text(stock_extra="expect = wal.sideways.iops >= 1"), "expect = wal.sideways.iops >= 1")
    assert "direction 'sideways' is not one of read, write, trim" in e.message
    e = refused(spec_text(stock_extra="expect = wal.write.iops => 1"), "expect = wal.write.iops => 1")
    assert "cannot read expectation 'wal.write.iops => 1'" in e.message


def test_a_percentile_fio_leaves_out() -> None:
    text = spec_text(shared_extra="expect = wal.write.p50 <= 2").replace("rw=write", "rw=write\npercentile_list=99:99.9")
    e = refused(text, "expect = wal.write.p50 <= 2")
    assert "job 'wal' reports no p50" in e.message
    plan.Plan(spec.parse(text.replace("p50", "p99"), PATH))


def test_ratio_in_the_baselines_own_section() -> None:
    e = refused(spec_text(stock_extra="expect = wal.write.iops ratio >= 1.5"), "expect = wal.write.iops ratio >= 1.5")
    assert e.message.startswith("variant stock: expect wal.write.iops ratio >= 1.5: a ratio to the baseline in the "
                                "baseline's own section (stock is the baseline)")
    text = spec_text(exp_extra="baseline = shared", shared_extra="expect = wal.write.iops ratio >= 1.5")
    refused(text, "expect = wal.write.iops ratio >= 1.5")
    plan.Plan(spec.parse(text.replace("baseline = shared", ""), PATH))      # shared against stock: fine


def test_ratio_with_only_one_variant() -> None:
    one = spec_text(exp_extra="expect = wal.write.iops ratio >= 1.5").split("[variant shared]")[0]
    e = refused(one, "expect = wal.write.iops ratio >= 1.5")
    assert e.message.endswith("a ratio to the baseline, and the spec has only one variant (stock)")
    plan.Plan(spec.parse(one.replace(" ratio", ""), PATH))


def test_group_reporting_names_the_group_after_its_first_job() -> None:
    job = "[global]\ngroup_reporting\n[readers]\nrw=read\nnumjobs=2\n[wal]\nrw=write\n"
    text = spec_text(shared_extra="expect = wal.write.iops >= 1").replace(
        "[global]\nruntime=5\n[wal]\nrw=write\n[hogs]\nrw=randread\n", job)
    e = refused(text, "expect = wal.write.iops >= 1")
    assert "group_reporting puts job 'wal' in one entry with readers" in e.message and "use 'readers'" in e.message
    plan.Plan(spec.parse(text.replace("wal.write", "readers.write"), PATH))     # the group does write
    plan.Plan(spec.parse(text.replace("[wal]\n", "[wal]\nstonewall\n"), PATH))   # a group of its own


def test_checked_before_any_module_is_built_and_for_left_out_variants() -> None:
    built: list[str] = []

    def build(v: str, kernel: str, modules: str, kdir: str, patch: str, source: str = "") -> tuple[str, dict[str, str]]:
        built.append(v)
        return "/k/hv_storvsc.ko", {"version": "hvstor-none-x"}
    text = spec_text(shared_extra="expect = wal.read.iops >= 1")
    refused(text, "expect = wal.read.iops >= 1", build_module=build)
    assert built == []
    refused(text, "expect = wal.read.iops >= 1", only=["stock"])


def test_good_expectations_and_included_jobs_pass() -> None:
    p = plan.Plan(spec.parse(spec_text(exp_extra="expect = hogs.read.iops >= 500\nexpect = wal.write.tlat <= 9",
                                       shared_extra="expect = wal.write.iops ratio >= 1.5"), PATH))
    assert p.order == ["stock", "shared"]
    # A job that includes other files cannot be known: its expectations are left to the report.
    plan.Plan(spec.parse(spec_text(stock_extra="expect = other.write.iops >= 1").replace(
        "[hogs]\n", "[hogs]\ninclude more.fio\n"), PATH))


def test_run_and_dry_run_exit_2_with_the_users_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = spec_text(shared_extra="expect = hogs.write.iops >= 1")
    path = tmp_path / "mine.exp"
    path.write_text(text)
    line = text.splitlines().index("expect = hogs.write.iops >= 1") + 1
    assert cli.main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}: variant shared: expect hogs.write.iops >= 1: job 'hogs' does no write I/O" in err


def test_report_with_another_spec_checks_it(results_dir: MakeResults, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    row = [("wal", "write", 100.0, 10.0, 20.0), ("hogs", "read", 1000.0, 5.0, 20.0)]
    d = results_dir({"stock": [row, row, row], "shared": [row, row, row]}, spec_text())
    other = tmp_path / "stricter.exp"
    text = spec_text(shared_extra="expect = wal.wirte.iops >= 1")
    other.write_text(text)
    assert cli.main(["report", d, "--spec", str(other)]) == 2
    line = text.splitlines().index("expect = wal.wirte.iops >= 1") + 1
    assert f"{other}:{line}: " in capsys.readouterr().err
