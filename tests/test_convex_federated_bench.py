"""Smoke tests: the federated and DP-SRGD benchmark scripts run end to end in --quick mode."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_srgd_quick(tmp_path):
    rec = _load("bench_srgd").main(["--quick", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "srgd_excess_risk_quick.json").read_text())
    assert (tmp_path / "srgd_excess_risk_quick.md").exists()
    assert len(data["rows"]) == 3 * len(data["T_grid"]) == len(rec["rows"])
    assert all(r["epsilon"] <= data["epsilon"] and r["excess_risk"] > 0 for r in data["rows"])
    assert data["neighboring"] == "replace_one"
    assert all(r["epsilon_zero_out"] < r["epsilon"] for r in data["rows"])
    assert data["time_ratio_srgd_over_dpsgd"] > 0


@pytest.mark.slow
def test_bench_federated_quick(tmp_path, monkeypatch):
    shared = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    import os

    if "PRIVREC_SHARED_DATASETS" not in os.environ and not shared.is_dir():
        monkeypatch.setenv("PRIVREC_SHARED_DATASETS", str(tmp_path / "absent"))  # digits only
    results = _load("bench_federated").main(["--quick", "--quiet", "--out", str(tmp_path)])
    assert "digits" in results and (tmp_path / "federated_summary_quick.md").exists()
    for name, rec in results.items():
        assert (tmp_path / f"federated_{name}_quick.json").exists()
        assert rec["neighboring"] == "replace_one"
        for row in rec["rows"]:
            assert math.isfinite(row["metric"])
            if row["max_silo_epsilon"] is not None:
                assert 0 < row["max_silo_epsilon"] <= row["epsilon"]
