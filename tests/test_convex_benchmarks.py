"""Smoke tests: the three convex-layer benchmarks run end to end in --quick mode (issue 6).

Checks the outputs' structure, that every private run's accountant epsilon is within its target,
and that each claim verdict agrees with the numbers it summarises.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_appendix_c  # noqa: E402
import bench_async  # noqa: E402
import bench_joint_dp  # noqa: E402


def _outputs(out: Path, tag: str):
    data = json.loads((out / f"{tag}.json").read_text())
    md = (out / f"{tag}.md").read_text()
    assert (out / f"{tag}.png").stat().st_size > 0
    return data, md


def test_appendix_c_quick(tmp_path):
    assert bench_appendix_c.main(["--quick", "--out", str(tmp_path), "--quiet"]) == 0
    data, md = _outputs(tmp_path, "appendix_c_quick")
    cfg = data["config"]
    assert len(data["rows"]) == len(cfg["powers"]) * len(cfg["epsilons"]) * 2 * len(cfg["mus"])
    for r in data["rows"]:
        assert r["reported_epsilon"] <= r["epsilon"] * (1 + 1e-9)
        assert r["test_rmse"] > 0
    c1 = data["claims"]["uniform_clearly_worse_at_low_eps"]
    assert c1["holds_all"] == all(c["rmse_mu0"] >= 1.05 * c["rmse_best"] for c in c1["cases"])
    assert "| a | solver | eps |" in md


@pytest.mark.slow
def test_joint_dp_quick(tmp_path):
    assert bench_joint_dp.main(["--quick", "--out", str(tmp_path), "--quiet"]) == 0
    data, md = _outputs(tmp_path, "joint_dp_quick")
    regimes = {r["regime"] for r in data["rows"]}
    assert regimes == {"individual", "nonprivate", "full", "joint"}
    for r in data["rows"]:
        assert 0.0 <= r["accuracy"] <= 1.0
        if r["regime"] in ("full", "joint"):
            assert r["reported_epsilon"] <= r["epsilon"] * (1 + 1e-9)
    for c in data["claims"]["low_eps_cases"]:
        assert c["joint_ge_full_all_n"] == all(g >= 0 for g in c["gaps"].values())
    assert "| n | eps | individual | no-DP | full DP | joint DP |" in md


def test_async_quick(tmp_path):
    assert bench_async.main(["--quick", "--out", str(tmp_path), "--quiet"]) == 0
    data, md = _outputs(tmp_path, "async_quick")
    for r in data["region"]["rows"] + data["region_heterogeneous"]["rows"]:
        assert r["owner1_gains"] == (r["psi_collaborative"] < r["psi_alone"])
    for cur in data["trajectory"]["curves"].values():
        assert all(a <= b + 1e-12 for a, b in zip(cur["p25"], cur["p75"]))
    assert data["scaling"]["fit"]["c"] > 0
    assert "Claims (measured)" in md
