"""Shards (./hvstor run --shard K/N) and their merge (./hvstor report --merge) on stored
results: which runs each shard holds, the report of one shard, and a merged folder whose
report, summary.json, junit.xml, plots and verdict are those of the same runs in one folder;
every merge that cannot be right is refused with its reason (exit 2)."""

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import JobFigures, MakeResults, RunFigures, fio_json, spec_text
from hvexp import __main__ as cli
from hvexp import plan as planmod
from hvexp import report, runner, shards

EXPECT_PASS = spec_text(exp_extra="expect = hogs.read.iops >= 500",
                        shared_extra="expect = wal.write.iops ratio >= 1.5\nexpect = wal.write.lat <= 8")
EXPECT_FAIL = spec_text(shared_extra="expect = wal.write.iops ratio >= 3.2")


def WAL(iops: float, lat: float = 10.0) -> list[JobFigures]:
    return [("wal", "write", iops, lat, 2 * lat), ("hogs", "read", 1000 + iops, 5.0, 20.0)]


def figures() -> RunFigures:
    """Each run's figures its own, so that a run taken twice or left out shows."""
    return {"stock": [WAL(100), WAL(104), WAL(97)], "shared": [WAL(150, 6.0), WAL(171, 6.5), WAL(160, 5.5)]}


# --- which runs a shard holds ------------------------------------------------------------
@pytest.mark.parametrize("nvar,reps,count", [(2, 3, 2), (2, 2, 2), (3, 4, 2), (2, 5, 3), (4, 1, 3),
                                             (1, 7, 3), (3, 3, 3), (2, 2, 4), (5, 2, 4)])
def test_the_shards_cover_the_plan_once_and_evenly(nvar: int, reps: int, count: int) -> None:
    order = [f"v{i}" for i in range(nvar)]
    plan = shards.plan_runs(order, reps)
    slices = [shards.shard_runs(order, reps, shards.Shard(k, count)) for k in range(1, count + 1)]
    assert sorted(r for s in slices for r in s) == sorted(plan)             # every run, once
    assert max(map(len, slices)) - min(map(len, slices)) <= 1              # even
    for s in slices:
        assert s == [r for r in plan if r in s]                             # repetition-major (A B A B)
        if reps >= count:
            assert {v for v, _ in s} == set(order), f"a shard without every variant: {s}"
    for v in order:                 # each variant's repetitions on as many shards as can be
        assert len({k for k, s in enumerate(slices) if any(x == v for x, _ in s)}) == min(reps, count)


def test_two_variants_three_repetitions_two_shards() -> None:
    order = ["A", "B"]
    assert shards.shard_runs(order, 3, shards.Shard(1, 2)) == [("A", 1), ("B", 2), ("A", 3)]
    assert shards.shard_runs(order, 3, shards.Shard(2, 2)) == [("B", 1), ("A", 2), ("B", 3)]


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "2", "1/2/3", ""])
def test_a_bad_shard_is_refused(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(shards.ShardError):
        shards.parse(text)
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "x.exp", "--shard", text])
    assert e.value.code == 2
    assert "--shard" in capsys.readouterr().err


# --- the report of one shard -------------------------------------------------------------
def test_a_shards_report_names_the_runs_elsewhere(results_dir: MakeResults,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    d = results_dir(figures(), EXPECT_FAIL, name="s2", shard=(2, 2))
    rep = report.Report(d)
    assert [(v, r) for v, r, _ in rep.runs] == [("shared", 1), ("stock", 2), ("shared", 3)]
    assert rep.elsewhere == [("stock", 1), ("shared", 2), ("stock", 3)]
    assert rep.missing_runs() == [] and rep.ok()
    text = rep.text()
    assert "Shard 2 of 2: 3 of the plan's 6 runs are in this folder" in text
    assert "  shard 1 of 2: stock rep 1, shared rep 2, stock rep 3\n" in text
    assert "not run" not in text and "Runs that did not count" not in text
    assert "Expectations on the runs of this shard only" in text
    assert re.search(r"^  stock +1 +104\.0 ", text, re.M) and re.search(r"^  shared +2 ", text, re.M)
    # Its expectation fails on its runs, but a shard's verdict is its runs': the merge judges.
    assert cli.main(["report", d]) == 0
    assert "judged once the shards are merged" in capsys.readouterr().err
    s = json.loads(Path(d, "summary.json").read_text())
    assert s["shard"]["index"] == 2 and s["passed"] is True
    assert [(r["variant"], r["rep"], r["shard"]) for r in s["shard"]["elsewhere"]] == [
        ("stock", 1, 1), ("shared", 2, 1), ("stock", 3, 1)]
    junit = Path(d, "junit.xml").read_text()
    assert 'failures="0"' in junit and "judged on the merged results of every shard" in junit


def test_a_failed_run_fails_its_shard(results_dir: MakeResults) -> None:
    figs = figures()
    figs["stock"][1] = None             # stock rep 2 is shard 2's
    assert cli.main(["report", results_dir(figs, EXPECT_PASS, name="s1", shard=(1, 2))]) == 0
    assert cli.main(["report", results_dir(figs, EXPECT_PASS, name="s2", shard=(2, 2))]) == 3


def test_expectations_about_variants_not_in_the_shard_are_not_judged(results_dir: MakeResults) -> None:
    figs: RunFigures = {"stock": [WAL(100)], "shared": [WAL(150)]}
    d = results_dir(figs, EXPECT_PASS, reps=1, name="s2", shard=(2, 2))
    rep = report.Report(d)
    assert [v for v, _, _ in rep.runs] == ["shared"] and rep.away == {"stock"}
    assert {(o.variant, o.expectation.text) for o in rep.outcomes} == {
        ("shared", "hogs.read.iops >= 500"), ("shared", "wal.write.lat <= 8")}
    assert "SKIP shared: expect wal.write.iops ratio >= 1.5 (spec.exp:" in rep.text()
    assert "SKIP stock: expect hogs.read.iops >= 500" in rep.text()


# --- the merge: the report of the same runs in one folder --------------------------------
def outputs(d: str) -> dict[str, str]:
    """What a report writes, its folder's path taken out."""
    out = {}
    for name in ("report.txt", "summary.json", "junit.xml"):
        out[name] = Path(d, name).read_text().replace(d, "DIR")
    # The plots: their names, and the gnuplot scripts and data that draw them.
    for p in sorted(Path(d, "plots").rglob("*")):
        if p.is_file():
            out[str(p.relative_to(d))] = "" if p.suffix == ".png" else p.read_text().replace(d, "DIR")
    return out


def merged_and_one(results_dir: MakeResults, figs: RunFigures, spec: str, count: int = 2,
                   reps: int = 3) -> tuple[int, str, int, str]:
    """(exit status, folder) of the shards merged, and of the same runs in one folder."""
    one = results_dir(figs, spec, reps=reps, name="one")
    parts = [results_dir(figs, spec, reps=reps, name=f"s{k}", shard=(k, count)) for k in range(1, count + 1)]
    merged = os.path.join(os.path.dirname(one), "merged")
    rc = cli.main(["report", "--merge", *parts, "--out", merged])
    return rc, merged, cli.main(["report", one]), one


@pytest.mark.parametrize("spec,count,verdict", [(EXPECT_PASS, 2, 0), (EXPECT_FAIL, 2, 1), (EXPECT_PASS, 3, 0),
                                                (EXPECT_FAIL, 4, 1)], ids=["pass-2", "fail-2", "pass-3", "fail-4"])
def test_the_merged_report_is_the_one_of_a_run_in_one_go(results_dir: MakeResults, spec: str, count: int,
                                                         verdict: int) -> None:
    rc, merged, rc_one, one = merged_and_one(results_dir, figures(), spec, count)
    assert (rc, rc_one) == (verdict, verdict)
    a, b = outputs(merged), outputs(one)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], name
    assert [(v, r) for v, r, _ in report.Report(merged).runs] == [(v, r) for v, r, _ in report.Report(one).runs]
    plan = json.loads(Path(merged, "plan.json").read_text())
    assert "shard" not in plan and "shard_runs" not in plan
    assert [m["shard"] for m in plan["merged_from"]] == [f"{k}/{count}" for k in range(1, count + 1)]
    # The runs' files are the shards' own (hard links on one file system).
    k = shards.assignment(["stock", "shared"], 3, count)[("stock", 2)]
    assert os.path.samefile(Path(merged, "runs/stock/rep2/results/fio.json"),
                            Path(os.path.dirname(one), f"s{k}", "runs/stock/rep2/results/fio.json"))


def test_a_failed_run_and_a_run_a_shard_stopped_before(results_dir: MakeResults) -> None:
    figs = figures()
    figs["shared"] = [WAL(150), None]           # shared rep 2 failed, rep 3 was never run
    rc, merged, rc_one, one = merged_and_one(results_dir, figs, EXPECT_PASS)
    assert rc == rc_one == 3
    assert outputs(merged) == outputs(one)
    text = Path(merged, "report.txt").read_text()
    assert "shared, repetition 3: not run" in text and "shared, repetition 2: the boot failed" in text


def test_merging_into_the_default_folder(results_dir: MakeResults, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVSTOR_CACHE", str(tmp_path / "cache"))
    parts = [results_dir(figures(), EXPECT_PASS, name=f"s{k}", shard=(k, 2)) for k in (1, 2)]
    assert cli.main(["report", "--merge", *parts]) == 0
    latest = tmp_path / "cache" / "results" / "t-latest"
    assert (latest / "summary.json").is_file() and (latest / "runs" / "shared" / "rep3").is_dir()


# --- through ./hvstor run: shards booted (by a stand-in), then merged ---------------------
def fake_boots(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """runner.run_one writes each run's files as a boot would, its figures its own."""
    booted: list[tuple[str, int]] = []
    base = {"stock": figures()["stock"], "shared": figures()["shared"]}

    def run_one(p: planmod.Plan, v: str, rep: int, out: str, qemu: str,
                snap_boot: float | None = None) -> tuple[dict[str, Any], Any, str]:
        booted.append((v, rep))
        run_dir = Path(out, "runs", v, f"rep{rep}")
        (run_dir / "results").mkdir(parents=True)
        rows = base[v][rep - 1]
        assert rows is not None
        (run_dir / "results" / "fio.json").write_text(fio_json(rows))
        (run_dir / "results" / "header").write_text("device=hv-storvsc\nkernel=6.12\ndisk.sda.hw_queues=2\n")
        st = {"status": "ok", "why": "", "seconds": 30.0, "rc": 0}
        (run_dir / "run.json").write_text(json.dumps(st))
        return st, report.load_run_dir(str(run_dir)), str(run_dir)

    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(runner, "take_snapshot", lambda p, v, out, qemu: (20.0, ""))
    monkeypatch.setattr(runner, "find_qemu", lambda: "qemu")
    monkeypatch.setattr(runner, "hw_queues", lambda d: "2")
    monkeypatch.setattr(runner, "log", lambda m: None)
    return booted


def test_run_shards_then_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    booted = fake_boots(monkeypatch)
    spec = tmp_path / "t.exp"
    spec.write_text(EXPECT_FAIL.replace("patch = none\n", ""))
    for k in (1, 2):
        assert cli.main(["run", str(spec), "--out", str(tmp_path / f"s{k}"), "--shard", f"{k}/2"]) == 0
    assert booted == [("stock", 1), ("shared", 2), ("stock", 3), ("shared", 1), ("stock", 2), ("shared", 3)]
    booted.clear()
    assert cli.main(["run", str(spec), "--out", str(tmp_path / "one")]) == 1
    assert booted == shards.plan_runs(["stock", "shared"], 3)
    docs = [json.loads(Path(tmp_path, d, "plan.json").read_text()) for d in ("s1", "s2", "one")]
    assert [d.get("shard") for d in docs] == [{"index": 1, "count": 2}, {"index": 2, "count": 2}, None]
    assert docs[0]["shard_runs"] == [{"variant": "stock", "rep": 1}, {"variant": "shared", "rep": 2},
                                     {"variant": "stock", "rep": 3}]
    assert docs[0]["runs"] == docs[2]["runs"] and len(docs[2]["runs"]) == 6
    assert docs[0]["fingerprint"] == docs[1]["fingerprint"] == docs[2]["fingerprint"]
    assert docs[0]["version"] == shards.project_version() != "unknown"
    assert cli.main(["report", "--merge", str(tmp_path / "s1"), str(tmp_path / "s2"),
                     "--out", str(tmp_path / "m")]) == 1
    assert outputs(str(tmp_path / "m")) == outputs(str(tmp_path / "one"))
    merged = json.loads(Path(tmp_path, "m", "plan.json").read_text())
    assert {k: v for k, v in merged.items() if k != "merged_from"} == docs[2]


def test_options_that_change_the_plan_change_its_fingerprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    fake_boots(monkeypatch)
    spec = tmp_path / "t.exp"
    spec.write_text(EXPECT_PASS.replace("patch = none\n", ""))
    prints: dict[str, str] = {}
    options: list[list[str]] = [[], ["--reps", "2"], ["--runtime", "3"], ["--variants", "shared,stock"], ["--trace"],
                                ["--kernel", "debian-6.1"], ["--snapshot", "on"], ["--reps", "3", "--jobs", "2"]]
    for opts in options:
        out = tmp_path / f"o{len(prints)}"
        cli.main(["run", str(spec), "--out", str(out), "--shard", "1/2", *opts])
        prints[" ".join(opts)] = json.loads((out / "plan.json").read_text())["fingerprint"]
    assert prints.pop("--reps 3 --jobs 2") == prints[""]            # the same plan: the spec's 3, jobs change nothing
    assert len(set(prints.values())) == len(prints)


def test_a_dry_run_names_the_shards_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "t.exp"
    spec.write_text(EXPECT_PASS.replace("patch = none\n", ""))
    assert cli.main(["run", str(spec), "--dry-run", "--shard", "2/2"]) == 0
    assert "== shard 2 of 2: boots shared rep 1, stock rep 2, shared rep 3" in capsys.readouterr().out
    assert cli.main(["run", str(spec), "--dry-run", "--shard", "7/7", "--reps", "3"]) == 2
    assert "the plan has 6 run(s)" in capsys.readouterr().err


# --- merges that are refused -------------------------------------------------------------
def refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["report", "--merge", *args]) == 2
    return capsys.readouterr().err


def edit_plan(d: str, **changes: object) -> None:
    p = Path(d, "plan.json")
    plan = json.loads(p.read_text())
    plan.update(changes)
    p.write_text(json.dumps(plan))


def test_refused_different_versions(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_dir(figures(), EXPECT_PASS, name="a", shard=(1, 2), version="v1")
    b = results_dir(figures(), EXPECT_PASS, name="b", shard=(2, 2), version="v2")
    err = refused([a, b, "--out", a + "-m"], capsys)
    assert "different project versions: v1 in " in err and "v2 in " in err
    assert not os.path.exists(a + "-m")


def test_refused_different_specs(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_dir(figures(), EXPECT_PASS, name="a", shard=(1, 2))
    b = results_dir(figures(), EXPECT_FAIL, name="b", shard=(2, 2))
    assert "different specs" in refused([a, b, "--out", a + "-m"], capsys)


def test_refused_different_plans(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_dir(figures(), EXPECT_PASS, name="a", shard=(1, 2))
    b = results_dir(figures(), EXPECT_PASS, name="b", shard=(2, 2))
    plan = json.loads(Path(b, "plan.json").read_text())
    plan["options"]["runtime"] = 3
    edit_plan(b, options=plan["options"], fingerprint=shards.fingerprint(EXPECT_PASS, plan["options"], "v1"))
    err = refused([a, b, "--out", a + "-m"], capsys)
    assert "different plans" in err and "runtime None in " in err and "3 in " in err


def test_refused_a_run_in_two_shards(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_dir(figures(), EXPECT_PASS, name="a", shard=(1, 2))
    b = results_dir(figures(), EXPECT_PASS, name="b", shard=(2, 2))
    c = results_dir(figures(), EXPECT_PASS, name="c", shard=(2, 2))
    err = refused([a, b, c, "--out", a + "-m"], capsys)
    assert "duplicated" in err and "shared rep 1 in " in err and "(shard 2/2) and in " in err


def test_refused_runs_in_no_shard(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_dir(figures(), EXPECT_PASS, name="a", shard=(1, 3))
    b = results_dir(figures(), EXPECT_PASS, name="b", shard=(3, 3))
    err = refused([a, b, "--out", a + "-m"], capsys)
    assert "(missing): stock rep 2, shared rep 2 (shards given: 1/3, 3/3; shard(s) 2/3 not given)" in err


def test_refused_folders_that_are_not_shards(results_dir: MakeResults, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    a = results_dir(figures(), EXPECT_PASS, name="a", shard=(1, 2))
    whole = results_dir(figures(), EXPECT_PASS, name="whole")
    assert "is not a shard's results folder" in refused([a, whole, "--out", a + "-m"], capsys)
    (tmp_path / "empty").mkdir()
    assert "no plan.json" in refused([a, str(tmp_path / "empty"), "--out", a + "-m"], capsys)
    assert "no such folder" in refused([a, str(tmp_path / "nowhere"), "--out", a + "-m"], capsys)
    assert "not a shard's results folder" in refused([str(tmp_path / "empty")], capsys)


def test_refused_an_out_that_is_a_shard(results_dir: MakeResults, capsys: pytest.CaptureFixture[str]) -> None:
    a = results_dir(figures(), EXPECT_PASS, name="a", shard=(1, 2))
    b = results_dir(figures(), EXPECT_PASS, name="b", shard=(2, 2))
    assert "a folder to merge" in refused([a, b, "--out", b], capsys)
    assert Path(b, "runs").is_dir() and Path(b, "plan.json").is_file()


def test_report_takes_a_folder_or_merge(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["report"], ["report", "x", "--merge", "y"], ["report", "x", "--out", "y"]):
        with pytest.raises(SystemExit) as e:
            cli.main(args)
        assert e.value.code == 2


# --- the project's version -----------------------------------------------------------------
def test_the_version_outside_git(tmp_path: Path) -> None:
    (tmp_path / "meson.build").write_text("project('hv-storvsc', 'cpp',\n  version: '0.7.1',\n)\n")
    assert shards.project_version(str(tmp_path)) == "0.7.1"
    (tmp_path / "VERSION").write_text("1.2.3\n")
    assert shards.project_version(str(tmp_path)) == "1.2.3"
    assert shards.project_version(str(tmp_path / "none")) == "unknown"
