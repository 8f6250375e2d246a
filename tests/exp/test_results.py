import json
import math
from pathlib import Path

import pytest

from conftest import fio_json
from hvexp import results


def test_stats() -> None:
    assert results.mean([1, 2, 3]) == 2
    assert results.median([5, 1, 3, 100]) == 4
    assert math.isclose(results.sd([2, 4, 4, 4, 5, 5, 7, 9]), 2.138, rel_tol=1e-3)
    assert math.isnan(results.sd([1]))
    assert math.isnan(results.median([]))


def test_clones_add_up(tmp_path: Path) -> None:
    doc = json.loads(fio_json([("hogs", "read", 100, 2.0, 4.0), ("hogs", "read", 300, 4.0, 9.0),
                               ("wal", "write", 50, 1.0, 1.5)]).split("\n", 1)[1])
    rows = results.summarize(doc)
    hogs = [r for r in rows if r["job"] == "hogs"][0]
    assert hogs["iops"] == 400 and hogs["dir"] == "read"
    # Mean latency weighted by I/O count: (100*5*2 + 300*5*4) / 2000 = 3.5 ms.
    assert math.isclose(hogs["clat_mean_ns"], 3.5e6)
    assert hogs["clat_p99_ns"] == 9e6
    assert [r["job"] for r in rows] == ["hogs", "wal"]


def test_scaling_back() -> None:
    row: results.Row = {"job": "a", "dir": "read", "ios": 50, "lat_mean_ns": None,
                        "iops": 10, "bw_bytes": 1e6, "clat_mean_ns": 8e6, "clat_p99_ns": 16e6, "clat_p50_ns": None}
    assert results.metric_value(row, "iops", 8) == 80
    assert results.metric_value(row, "bw", 8) == 8
    assert results.metric_value(row, "lat", 8) == 1
    assert results.metric_value(row, "p99", 8) == 2
    assert results.metric_value(row, "p50", 8) is None


def test_load_fio_json_errors(tmp_path: Path) -> None:
    p = tmp_path / "fio.json"
    p.write_text("no json at all")
    with pytest.raises(results.ResultError, match="no JSON"):
        results.load_fio_json(str(p))
    p.write_text('{"jobs": [')
    with pytest.raises(results.ResultError, match="not whole"):
        results.load_fio_json(str(p))
    with pytest.raises(results.ResultError, match="cannot read"):
        results.load_fio_json(str(tmp_path / "missing.json"))
    with pytest.raises(results.ResultError, match="no jobs"):
        results.summarize({"jobs": []})
