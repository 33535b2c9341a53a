"""Smoke test: benchmarks/bench_allocation.py --quick runs and writes consistent results."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_allocation.py"


@pytest.mark.slow
def test_bench_allocation_quick(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_allocation", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--quick", "--quiet", "--out", str(tmp_path), "--dim", "4"])
    saved = json.loads((tmp_path / "bench_allocation_quick.json").read_text())
    assert saved["nnz"] == out["nnz"] > 0
    assert set(saved["seconds"]) == {
        "private_item_counts",
        "private_global_mean",
        "uniform_weights",
        "tail_weights",
        "adaptive_weights_per_user",
        "adaptive_weights_global",
    }
    assert saved["counts_plus_allocation_seconds_worst"] > 0
    assert saved["ssp"]["tasks"] > 0 and saved["ssp"]["dim"] == 4
    assert "target <= 15 s" in (tmp_path / "bench_allocation_quick.md").read_text()
