"""Smoke test of benchmarks/bench_speed.py --quick (the speed figures themselves are not asserted)."""

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_bench_speed_quick_writes_results(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", ["bench_speed.py"])
    import bench_speed

    res = bench_speed.main(["--quick", "--factors", "8", "--out", str(tmp_path), "--quiet"])
    data = json.loads((tmp_path / "bench_speed_quick.json").read_text())
    assert (tmp_path / "bench_speed_quick.md").read_text().startswith("# bench_speed_quick")
    for key in ("implicit_iteration_s", "als_sweep_exact_s", "als_sweep_cg_s", "dpals_sweep_s", "peak_rss_gb"):
        assert data[key] > 0 and res[key] == pytest.approx(data[key])
    assert data["ratio_als_exact_vs_implicit"] == pytest.approx(
        data["als_sweep_exact_s"] / data["implicit_iteration_s"]
    )
    assert data["dpals_epsilon"] <= 5.0
