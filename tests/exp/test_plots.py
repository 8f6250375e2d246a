"""The plots of a results folder (scripts/hvexp/plots.py), checked through the gnuplot
scripts and data files each is drawn from (plots/data/<plot>.gp, *.dat): the spread over
repetitions, the expectations' bounds and the published figures, the timeline's events,
the time axis and its scale, the latency percentiles and the attribution plot's layout.
gnuplot itself runs only in the last test (skipped without it)."""

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from conftest import JobFigures, MakeResults, RunFigures, spec_text
from hvexp import plots, report


def WAL(iops: float, lat: float = 10.0) -> list[JobFigures]:
    return [("wal", "write", iops, lat, 2 * lat), ("hogs", "read", 1000, 5.0, 20.0)]


def figures(shared_iops: tuple[float, ...] = (150, 160, 170)) -> RunFigures:
    return {"stock": [WAL(100), WAL(100), WAL(100)], "shared": [WAL(x, 6.0) for x in shared_iops]}


@pytest.fixture
def gnuplot(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A stand-in gnuplot that only keeps the scripts it is given (the report sees a gnuplot)."""
    scripts: list[str] = []

    def run(script: str) -> "subprocess.CompletedProcess[str]":
        scripts.append(script)
        return subprocess.CompletedProcess(["gnuplot"], 0, "", "")
    monkeypatch.setattr(plots, "run_gnuplot", run)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    return scripts


def write_log(d: str, v: str, rep: int, name: str, entries: list[tuple[int, float, int]]) -> None:
    """A fio log (<job>_<iops|clat>.<N>.log) of a run: (ms, value, direction) entries."""
    logs = Path(d, "runs", v, f"rep{rep}", "results", "logs")
    logs.mkdir(exist_ok=True)
    (logs / name).write_text("".join(f"{t}, {x:g}, {dn}, 0, 0\n" for t, x, dn in entries))


def iops_log(d: str, v: str, rep: int, values: Sequence[float], job: str = "wal", dn: int = 1, clone: int = 1) -> None:
    """IOPS per second from t = 1 s, with the jitter of fio's log times."""
    write_log(d, v, rep, f"{job}_iops.{clone}.log", [(1000 * (i + 1) + 3 * i, x, dn) for i, x in enumerate(values)])


def script(d: str, name: str) -> str:
    return Path(d, "plots", "data", f"{name}.gp").read_text()


def hlines(text: str) -> list[float]:
    """The heights of a script's horizontal lines."""
    return sorted(float(y) for y in re.findall(r"set arrow from graph 0, first (\S+) to graph 1", text))


def vlines(text: str) -> list[float]:
    return sorted(float(t) for t in re.findall(r"set arrow from first (\S+), graph 0 to", text))


def labels(text: str) -> list[str]:
    return [m.replace("''", "'") for m in re.findall(r"set label '((?:[^']|'')*)' at", text)]


def rows(path: Path) -> list[list[float]]:
    return [[float(x) for x in ln.split()] for ln in path.read_text().splitlines() if not ln.startswith("#")]


def set_plan(d: str, **changes: object) -> None:
    p = Path(d, "plan.json")
    plan = json.loads(p.read_text())
    plan.update(changes)
    p.write_text(json.dumps(plan))


def set_published(d: str, v: str, published: str = "", ratio: str = "") -> None:
    p = Path(d, "plan.json")
    plan = json.loads(p.read_text())
    for x in plan["variants"]:
        if x["name"] == v:
            x["published"], x["published_ratio"] = published, ratio
    p.write_text(json.dumps(plan))


def test_time_plots_draw_the_median_and_a_min_max_band(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text())
    for rep, vals in enumerate(([100, 110], [120, 90], [80, 100]), 1):
        iops_log(d, "stock", rep, vals)
        write_log(d, "stock", rep, "wal_clat.1.log", [(1000, vals[0] * 1e5, 1), (2000, vals[1] * 1e5, 1)])
    iops_log(d, "shared", 1, [150, 160])
    made = report.Report(d).plots(lambda m: None)
    assert {Path(p).name for p in made} >= {"wal-write-iops.png", "wal-write-clat.png"}
    data = Path(d, "plots", "data")
    # seconds, median, min, max, repetitions
    assert rows(data / "wal-write-iops-stock.dat") == [[1, 100, 80, 120, 3], [2, 100, 90, 110, 3]]
    assert rows(data / "wal-write-clat-stock.dat") == [[1, 10, 8, 12, 3], [2, 10, 9, 11, 3]]
    assert rows(data / "wal-write-iops-shared.dat") == [[1, 150, 150, 150, 1], [2, 160, 160, 160, 1]]
    s = script(d, "wal-write-iops")
    band = re.search(r"'[^']*wal-write-iops-stock\.dat' using 1:3:4 with filledcurves", s)
    assert band, s
    assert "using 1:2 with linespoints" in s and "'stock: median of 3 repetitions'" in s
    # One repetition: its line alone, and said so.
    assert "'shared: 1 repetition'" in s and "wal-write-iops-shared.dat' using 1:3:4" not in s
    assert "line the median over repetitions, band their min to max" in s


def test_clones_are_added_up_per_repetition(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text())
    for rep in (1, 2):
        iops_log(d, "stock", rep, [100 * rep], clone=1)
        iops_log(d, "stock", rep, [10 * rep], clone=2)
        iops_log(d, "stock", rep, [5], job="hogs", dn=0, clone=3)      # another job: not in wal's sum
    report.Report(d).plots(lambda m: None)
    assert rows(Path(d, "plots", "data", "wal-write-iops-stock.dat")) == [[1, 165, 110, 220, 2]]


def test_bounds_and_published_figures_are_labelled_lines(results_dir: MakeResults, gnuplot: list[str]) -> None:
    spec = spec_text(exp_extra="expect = hogs.read.iops >= 500",
                     shared_extra="expect = wal.write.iops ratio >= 1.5\nexpect = wal.write.iops = 200 +-10%\n"
                                  "expect = wal.write.lat <= 8\nexpect = wal.write.p99 <= 30")
    d = results_dir(figures(), spec)
    set_published(d, "stock", "wal.write.iops=153 hogs.read.bw=800 wal.write.lat=9.5")
    set_published(d, "shared", "wal.write.iops=270", "wal.write.iops=1.76")
    for v in ("stock", "shared"):
        iops_log(d, v, 1, [100, 100])
        iops_log(d, v, 1, [1000, 1000], job="hogs", dn=0, clone=2)
        write_log(d, v, 1, "wal_clat.1.log", [(1000, 7e6, 1)])
        write_log(d, v, 1, "hogs_clat.2.log", [(1000, 5e6, 0)])
    report.Report(d).plots(lambda m: None)
    s = script(d, "wal-write-iops")
    # ratio: 1.5 x stock's median 100; = 200 +-10%: both ends; published 153 and 270; 1.76 x 100.
    assert hlines(s) == [150, 153, 176, 180, 220, 270]
    text = labels(s)
    line = spec.splitlines().index("expect = wal.write.iops ratio >= 1.5") + 1
    assert (f"shared: expect wal.write.iops ratio >= 1.5 (spec.exp:{line}) (stock's median 100 IOPS x ratio): "
            "150 IOPS; shared PASS") in text
    assert any(t.startswith("shared: expect wal.write.iops = 200 +-10%") and "low end: 180 IOPS; shared FAIL" in t
               for t in text)
    assert any("high end: 220 IOPS" in t for t in text)
    assert "stock: published 153 IOPS" in text and "shared: published 270 IOPS" in text
    assert "shared: published x1.76 of stock's median 100 = 176 IOPS" in text
    assert "'an expect line''s bound'" in s and "'a published figure'" in s        # the key says which is which
    clat = script(d, "wal-write-clat")
    assert hlines(clat) == [8, 9.5]
    assert any("expect wal.write.lat <= 8" in t for t in labels(clat))
    assert hlines(script(d, "wal-write-clat-percentiles")) == [30]
    hogs = script(d, "hogs-read-iops")
    # About every variant: one line, the verdict of each.
    assert hlines(hogs) == [500]
    assert any(t.startswith("expect hogs.read.iops >= 500") and t.endswith("stock PASS, shared PASS") for t in labels(hogs))
    # MB/s figures have no plot of their own.
    assert not any("800" in t for name in ("hogs-read-iops", "hogs-read-clat") for t in labels(script(d, name)))


def timeline_json(d: str, v: str, rep: int, events: list[dict[str, object]]) -> None:
    Path(d, "runs", v, f"rep{rep}", "timeline.json").write_text(json.dumps(events))


def event(at: float, action: str, target: str, done_at: float | None, result: str = "ok") -> dict[str, object]:
    return {"at": at, "action": action, "target": target, "value": "x", "done_at": done_at, "result": result}


def test_timeline_events_are_vertical_lines(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text())
    for rep, done in enumerate((2.1, 2.0, 2.3), 1):
        added = event(7, "hot-add", "spare", 7.0) if rep < 3 else event(7, "hot-add", "spare", None, "not reached")
        timeline_json(d, "stock", rep, [event(2, "fault", "disk0", done), event(4, "hot-remove", "disk1", 4.0), added])
        timeline_json(d, "shared", rep, [event(4, "hot-remove", "disk1", 4.0), event(5, "capacity", "disk0", 5.0, "refused: no")])
        iops_log(d, "stock", rep, [100, 100])
        write_log(d, "stock", rep, "wal_clat.1.log", [(1000, 1e7, 1)])
    timeline_json(d, "shared", 1, [event(4, "hot-remove", "disk1", 4.0), event(5, "capacity", "disk0", None, "not reached")])
    report.Report(d).plots(lambda m: None)
    for name in ("wal-write-iops", "wal-write-clat"):
        s = script(d, name)
        # fault: the median of when it happened; hot-remove: every variant at once, one line.
        assert vlines(s) == [2.1, 4, 5, 7], s
        text = labels(s)
        assert "stock: fault disk0" in text and "hot-remove disk1" in text
        assert "shared: capacity disk0 (refused)" in text
        assert "stock: hot-add spare (not reached in every repetition)" in text
        assert "'a timeline event'" in s


def test_timeline_events_are_scaled_back(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text(), scale=8)
    timeline_json(d, "stock", 1, [event(4, "fault", "disk0", 4.0)])
    iops_log(d, "stock", 1, [100, 100])
    report.Report(d).plots(lambda m: None)
    assert vlines(script(d, "wal-write-iops")) == [0.5]


def test_every_time_plot_of_a_run_has_the_same_time_range(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text())
    iops_log(d, "stock", 1, [100] * 3)
    iops_log(d, "shared", 2, [100] * 7)
    iops_log(d, "stock", 1, [1000] * 4, job="hogs", dn=0, clone=2)
    write_log(d, "shared", 1, "hogs_clat.2.log", [(1000, 5e6, 0), (2000, 5e6, 0)])
    write_log(d, "shared", 1, "wal_clat.1.log", [(1000, 5e6, 1)])
    timeline_json(d, "stock", 1, [event(9, "fault", "disk0", 9.2)])
    made = report.Report(d).plots(lambda m: None)
    ranges = {Path(p).stem: re.findall(r"set xrange \[(.*)\]", script(d, Path(p).stem)) for p in made
              if not p.endswith("-percentiles.png")}
    assert set(ranges) == {"wal-write-iops", "wal-write-clat", "hogs-read-iops", "hogs-read-clat"}
    assert all(r == ["0:9.5"] for r in ranges.values()), ranges     # the latest point or event, rounded up


def test_time_scaled_axes_say_so(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text(), scale=8)
    set_plan(d, scale_note="time-scale 8: rates x8, latencies and times /8")
    plan = json.loads(Path(d, "plan.json").read_text())
    for x in plan["variants"]:
        x["scale"] = 8
    Path(d, "plan.json").write_text(json.dumps(plan))
    iops_log(d, "stock", 1, [100, 100])
    write_log(d, "stock", 1, "wal_clat.1.log", [(1000, 8e6, 1), (2000, 16e6, 1)])
    report.Report(d).plots(lambda m: None)
    s = script(d, "wal-write-iops")
    assert "set xlabel 'seconds after fio''s start, scaled back by the time scale (/8)'" in s
    assert "set ylabel 'IOPS, scaled back by the time scale (x8)'" in s
    assert "time-scale 8: rates x8, latencies and times /8" in s        # plan.json's scale_note in the title
    assert rows(Path(d, "plots", "data", "wal-write-iops-stock.dat")) == [[0.125, 800, 800, 800, 1], [0.25, 800, 800, 800, 1]]
    clat = script(d, "wal-write-clat")
    assert "set ylabel 'mean completion latency (ms), scaled back by the time scale (/8)'" in clat
    assert rows(Path(d, "plots", "data", "wal-write-clat-stock.dat")) == [[0.125, 1, 1, 1, 1], [0.25, 2, 2, 2, 1]]


def test_only_the_variants_a_time_scale_slowed_are_scaled_back(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text(), scale=8)
    plan = json.loads(Path(d, "plan.json").read_text())
    plan["variants"][0]["scale"], plan["variants"][1]["scale"] = 8, 1
    Path(d, "plan.json").write_text(json.dumps(plan))
    iops_log(d, "stock", 1, [100])
    report.Report(d).plots(lambda m: None)
    assert "set xlabel 'seconds after fio''s start, scaled back by the time scale (/8) for stock'" in script(d, "wal-write-iops")


def add_percentiles(d: str, v: str, rep: int, job: str, pct: dict[float, float]) -> None:
    """Gives a run's fio.json these completion latency percentiles (ms) for a job."""
    p = Path(d, "runs", v, f"rep{rep}", "results", "fio.json")
    warning, _, doc = p.read_text().partition("\n")
    fio = json.loads(doc)
    for j in fio["jobs"]:
        if j["jobname"] == job:
            d_ = "write" if job == "wal" else "read"
            j[d_]["clat_ns"]["percentile"] = {f"{k:.6f}": ms * 1e6 for k, ms in pct.items()}
    p.write_text(warning + "\n" + json.dumps(fio))


def test_latency_percentile_plot(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text())
    for rep, k in enumerate((1.0, 2.0, 3.0), 1):
        add_percentiles(d, "stock", rep, "wal", {10.0: 0.5, 50.0: k, 90.0: 2 * k, 99.0: 4 * k, 99.9: 8 * k, 99.99: 16 * k})
    made = report.Report(d).plots(lambda m: None)
    assert str(Path(d, "plots", "wal-write-clat-percentiles.png")) in made
    # percentile, its place on the axis (nines), median, min, max, repetitions; p10 is left out.
    got = rows(Path(d, "plots", "data", "wal-write-clat-percentiles-stock.dat"))
    assert [r[0] for r in got] == [50, 90, 99, 99.9, 99.99]
    assert [r[1] for r in got] == pytest.approx([0.301, 1, 2, 3, 4], abs=1e-3)
    assert [r[2:] for r in got] == [[2, 1, 3, 3], [4, 2, 6, 3], [8, 4, 12, 3], [16, 8, 24, 3], [32, 16, 48, 3]]
    s = script(d, "wal-write-clat-percentiles")
    assert "set logscale y" in s and "set ylabel 'completion latency (ms, log scale)'" in s
    assert "using 2:3:4:5 with yerrorlines" in s and "'stock: median of 3 repetitions, bars min to max'" in s
    assert "'p50' 0.3010" in s and "'p99.99' 4.0000" in s
    # The conftest's runs give p50 and p99 only: shared's plot has those.
    assert [r[0] for r in rows(Path(d, "plots", "data", "wal-write-clat-percentiles-shared.dat"))] == [50, 99]


def test_percentiles_of_clones_are_the_highest_clones(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir({"stock": [WAL(100) + [("wal", "write", 50, 30.0, 60.0)]]}, spec_text(), reps=1)
    report.Report(d).plots(lambda m: None)
    # (50 %: 10 and 30 ms; 99 %: 20 and 60 ms): the highest, as the table's p50 and p99.
    assert [r[2] for r in rows(Path(d, "plots", "data", "wal-write-clat-percentiles-stock.dat"))] == [30, 60]


def test_attribution_plot_layout(results_dir: MakeResults, gnuplot: list[str]) -> None:
    d = results_dir(figures(), spec_text())
    rep = report.Report(d)
    rep.attribution = {v: report.Attribution(dirs={"write": {"n": 100, "tag": 0.5, "sched": 2.0, "host": 4.0 + i,
                                                             "transport": 0.1, "wake": 0.05}})
                       for i, v in enumerate(rep.variants)}
    made = rep.plots(lambda m: None)
    assert str(Path(d, "plots", "attribution-write.png")) in made
    s = script(d, "attribution-write")
    assert "set key outside below center horizontal" in s
    assert "t: where a write request's latency goes\\n" in s           # the whole title, first line
    assert "set terminal pngcairo size 1100,700" in s
    # Parts no variant has (scsi, device, complete) are not in the key.
    assert "'SCSI midlayer'" not in s and "'waiting for a tag'" in s
    data = Path(d, "plots", "data", "attribution-write.dat").read_text().splitlines()
    assert data[0] == "# variant tag sched host transport wake traced fio_clat (ms per request)"
    # the bars' totals, and fio's mean clat beside them (stock 10 ms, shared 6 ms)
    assert data[1].split() == ['"stock"', "0.5", "2", "4", "0.1", "0.05", "6.65", "10"]
    assert data[2].split()[-2:] == ["7.65", "6"]
    assert "fio''s mean completion latency (clat)" in s or "fio's mean completion latency (clat)" in s


def test_no_gnuplot_no_plots(results_dir: MakeResults, monkeypatch: pytest.MonkeyPatch) -> None:
    d = results_dir(figures(), spec_text())
    monkeypatch.setattr(shutil, "which", lambda name: None)
    said: list[str] = []
    text = report.Report(d).write(lambda m: said.append(m))
    assert said == ["gnuplot is missing: no plots (apt-get install gnuplot-nox)"]
    assert "\nPlots:\nRuns" in text
    assert not list(Path(d, "plots").glob("*.png"))


def test_a_failing_gnuplot_costs_the_plots_not_the_report(results_dir: MakeResults, monkeypatch: pytest.MonkeyPatch) -> None:
    d = results_dir(figures(), spec_text())
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(plots, "run_gnuplot", lambda s: subprocess.CompletedProcess(["gnuplot"], 1, "", "line 3: oops"))
    said: list[str] = []
    text = report.Report(d).write(lambda m: said.append(m))
    assert said and said[0].startswith("no plots: gnuplot failed on ") and "oops" in said[0]
    assert "\nwal (write)\n" in text


@pytest.mark.skipif(not shutil.which("gnuplot"), reason="gnuplot is not installed")
def test_gnuplot_draws_every_plot(results_dir: MakeResults) -> None:
    spec = spec_text(shared_extra="expect = wal.write.iops ratio >= 1.5\nexpect = wal.write.p99 <= 30")
    d = results_dir(figures(), spec)
    for v in ("stock", "shared"):
        for rep in (1, 2, 3):
            iops_log(d, v, rep, [100 + rep, 120 - rep, 110])
            write_log(d, v, rep, "wal_clat.1.log", [(1000, 9e6 + rep, 1), (2000, 1e7, 1)])
            timeline_json(d, v, rep, [event(1.5, "fault", "disk0", 1.5)])
            add_percentiles(d, v, rep, "wal", {50.0: 10, 90.0: 12, 99.0: 20 + rep, 99.9: 25, 99.99: 40})
    res = report.Report(d)
    res.attribution = {"stock": report.Attribution(dirs={"write": {"n": 10, "sched": 2.0, "host": 7.0}})}
    made = res.plots(lambda m: None)
    names = sorted(Path(p).name for p in made)
    assert names == ["attribution-write.png", "hogs-read-clat-percentiles.png", "wal-write-clat-percentiles.png",
                     "wal-write-clat.png", "wal-write-iops.png"]
    for p in made:
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p
