import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import spec_text
from hvexp import plan, runner, spec


def make_plan(reps: int = 3) -> plan.Plan:
    return plan.Plan(spec.parse(spec_text(), "/nowhere/x.exp"), reps=reps)


def fake_runs(monkeypatch: pytest.MonkeyPatch, fail_at: tuple[int, str] | None = None,
              delay: float = 0.01) -> tuple[list[tuple[int, str]], dict[str, int]]:
    seen: list[tuple[int, str]] = []
    lock, state = threading.Lock(), {"now": 0, "max": 0}

    def run_one(p: plan.Plan, v: str, rep: int, out: str, qemu: str,
                snap_boot: float | None = None) -> tuple[dict[str, Any], list[Any] | None, str]:
        with lock:
            seen.append((rep, v) if snap_boot is None else (rep, v, snap_boot))  # type: ignore[arg-type]
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(delay)
        with lock:
            state["now"] -= 1
        if (rep, v) == fail_at:
            return {"status": "failed", "why": "boom", "seconds": 0}, None, "/x"
        return {"status": "ok", "why": "", "seconds": 0}, [], "/x"

    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(runner, "failure_text", lambda v, rep, d, why: f"\n[hvstor] error: {v}, repetition {rep}: {why}")
    monkeypatch.setattr(runner, "hw_queues", lambda d: "?")
    monkeypatch.setattr(runner, "log", lambda m: None)
    return seen, state


def test_repetition_major_order(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, state = fake_runs(monkeypatch)
    assert runner.execute(make_plan(), "/out", "qemu", 1) is None
    assert seen == [(1, "stock"), (1, "shared"), (2, "stock"), (2, "shared"), (3, "stock"), (3, "shared")]
    assert state["max"] == 1


def test_jobs_run_at_most_n_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, state = fake_runs(monkeypatch, delay=0.05)
    assert runner.execute(make_plan(reps=4), "/out", "qemu", 3) is None
    assert sorted(seen) == sorted((r, v) for r in range(1, 5) for v in ("stock", "shared"))
    assert 1 < state["max"] <= 3


def test_a_failure_stops_further_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, _ = fake_runs(monkeypatch, fail_at=(1, "shared"))
    failure = runner.execute(make_plan(), "/out", "qemu", 1)
    assert failure is not None and "shared, repetition 1: boom" in failure
    assert seen == [(1, "stock"), (1, "shared")]


def fake_snapshots(monkeypatch: pytest.MonkeyPatch, fail: str = "") -> list[str]:
    taken: list[str] = []

    def take(p: plan.Plan, v: str, out: str, qemu: str) -> tuple[float | None, str]:
        taken.append(v)
        return (None, "no snapshot point") if v == fail else (10.0 + len(taken), "")

    monkeypatch.setattr(runner, "take_snapshot", take)
    return taken


def snapshot_plan(reps: int = 2) -> plan.Plan:
    return plan.Plan(spec.parse(spec_text(), "/nowhere/x.exp"), reps=reps, snapshot=True)


def test_each_variant_is_saved_once_and_its_runs_go_on_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, _ = fake_runs(monkeypatch)
    taken = fake_snapshots(monkeypatch)
    assert runner.execute(snapshot_plan(), "/out", "qemu", 1) is None
    assert taken == ["stock", "shared"]
    # Every run is told how long its variant's one boot took: it goes on from that snapshot.
    assert seen == [(1, "stock", 11.0), (1, "shared", 12.0), (2, "stock", 11.0), (2, "shared", 12.0)]


def test_a_shard_saves_only_the_variants_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, _ = fake_runs(monkeypatch)
    taken = fake_snapshots(monkeypatch)
    assert runner.execute(snapshot_plan(), "/out", "qemu", 1, [("shared", 1), ("shared", 2)]) is None
    assert taken == ["shared"] and seen == [(1, "shared", 11.0), (2, "shared", 11.0)]


def test_a_snapshot_that_fails_stops_the_experiment_before_its_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, _ = fake_runs(monkeypatch)
    taken = fake_snapshots(monkeypatch, fail="shared")
    failure = runner.execute(snapshot_plan(), "/out", "qemu", 1)
    assert failure is not None and "shared, repetition 0: no snapshot point" in failure
    assert taken == ["stock", "shared"] and not seen


def test_without_snapshots_nothing_is_saved(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, _ = fake_runs(monkeypatch)
    taken = fake_snapshots(monkeypatch)
    assert runner.execute(make_plan(reps=1), "/out", "qemu", 1) is None
    assert not taken and seen == [(1, "stock"), (1, "shared")]


def test_the_snapshot_boot_is_named_in_its_failure(tmp_path: Path) -> None:
    text = runner.failure_text("stock", 0, str(tmp_path), "no snapshot point")
    assert "stock, the boot its repetitions go on from (snapshot = on): no snapshot point" in text


def test_discarding_a_snapshot_keeps_its_logs(tmp_path: Path) -> None:
    for name in ("state", "disk0.img", "disk12.img", "console.log", "boot.txt", "snapshot.json"):
        (tmp_path / name).write_text("x")
    runner.discard_snapshot(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["boot.txt", "console.log", "snapshot.json"]
    runner.discard_snapshot(str(tmp_path / "gone"))     # no folder: nothing to do


def check(tmp_path: Path, var: plan.Variant, header: str, fio: bool = True) -> Any:
    r = tmp_path / "res"
    r.mkdir(exist_ok=True)
    (r / "header").write_text(header)
    if fio:
        (r / "fio.json").write_text("{}")
    return runner.check_run(var, str(r))


def test_checks_of_a_run(tmp_path: Path) -> None:
    p = plan.Plan(spec.parse(spec_text(stock_extra="params = storvsc_max_hw_queues=1",
                                       shared_extra="device = scsi_debug\nscsi-debug = ndelay=1ms"), "/x/x.exp"))
    stock, ctl = p.variants["stock"], p.variants["shared"]
    ok = "module.loaded=yes\nmodule.version=\nparam.storvsc_max_hw_queues=1\n"
    assert check(tmp_path, stock, ok) is None
    assert "not loaded" in check(tmp_path, stock, "module.loaded=no\n")
    assert "out-of-tree hv_storvsc (hvstor-x)" in check(tmp_path, stock, ok.replace("version=", "version=hvstor-x"))
    assert "parameter storvsc_max_hw_queues is '4'" in check(tmp_path, stock, ok.replace("queues=1", "queues=4"))
    stock.want_version = "hvstor-mine-1"
    assert "not the module built for this variant (hvstor-mine-1)" in check(tmp_path, stock, ok)
    sd = "scsi_debug.loaded=yes\nscsi_debug.ndelay=1000000\nscsi_debug.submit_queues=2\n"
    assert check(tmp_path, ctl, sd) is None
    assert "scsi_debug parameter ndelay is '5'" in check(tmp_path, ctl, sd.replace("1000000", "5"))
    assert "scsi_debug is not loaded" in check(tmp_path, ctl, "scsi_debug.loaded=no\n")
    assert "no header" in (runner.check_run(stock, str(tmp_path / "missing")) or "")


def test_a_bool_parameter_set_as_1_reads_y(tmp_path: Path) -> None:
    p = plan.Plan(spec.parse(spec_text(stock_extra="params = storvsc_ringbuffer_size=65536 hv_storvsc.x_flag=1"),
                             "/x/x.exp"))
    stock = p.variants["stock"]
    ok = "module.loaded=yes\nmodule.version=\nparam.storvsc_ringbuffer_size=65536\nparam.x_flag=Y\n"
    assert check(tmp_path, stock, ok) is None
    assert "parameter x_flag is 'N'" in (check(tmp_path, stock, ok.replace("x_flag=Y", "x_flag=N")) or "")
