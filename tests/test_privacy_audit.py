"""Empirical privacy audit (privrec.privacy.audit): bounds, detection of a broken mechanism, no false alarm.

Also holds the regression tests of the audit's findings on the benchmarks (bench_tradeoff's mu
selection on validation, bench_audit's outputs). Noise in these tests comes from OS entropy, as
in a real audit; every assertion has a failure probability far below 1e-6 unless stated.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from privrec.privacy import calibrate_noise_multiplier, gaussian_event
from privrec.privacy.audit import (
    AuditResult,
    audit_scores,
    clopper_pearson_lower,
    clopper_pearson_upper,
    empirical_epsilon,
    epsilon_lower_bound,
    gdp_epsilon,
    run_audit,
    separation,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

DELTA = 1e-5


def _gaussian_release(sigma):
    """fit_release of the scalar Gaussian mechanism M(x) = x + N(0, sigma^2) (sensitivity 1)."""

    def fit_release(value, seed):
        return value + np.random.default_rng().normal(0.0, sigma)  # OS entropy; seed unused

    return fit_release


def test_clopper_pearson_matches_known_values():
    # 0 successes: the closed form 1 - alpha^(1/n); textbook one-sided 95% bound for 1/10: 0.3942
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-9)
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(0.029513, abs=1e-6)
    assert clopper_pearson_upper(1, 10, 0.05) == pytest.approx(0.39416, abs=1e-5)
    assert clopper_pearson_upper(10, 10, 0.05) == 1.0
    assert clopper_pearson_lower(0, 10, 0.05) == 0.0
    assert clopper_pearson_lower(10, 10, 0.05) == pytest.approx(0.05 ** (1 / 10), rel=1e-9)
    np.testing.assert_allclose(clopper_pearson_upper(np.array([0, 1]), 10, 0.05), [1 - 0.05**0.1, 0.39416], atol=1e-5)
    # the epsilon bound: both rates 0/1000 at joint 95% -> each rate at alpha = 0.025
    up = 1 - 0.025 ** (1 / 1000)
    eps, fpr_u, fnr_u = epsilon_lower_bound(0, 1000, 0, 1000, delta=0.0, confidence=0.95)
    assert fpr_u == pytest.approx(up, rel=1e-9) and fnr_u == pytest.approx(up, rel=1e-9)
    assert eps == pytest.approx(math.log((1 - up) / up), rel=1e-9)
    # no evidence -> 0, never negative; delta enters the numerator
    assert epsilon_lower_bound(500, 1000, 500, 1000, DELTA)[0] == 0.0
    assert epsilon_lower_bound(0, 1000, 0, 1000, 0.5)[0] < eps
    assert empirical_epsilon(0.1, 0.2) == pytest.approx(max(math.log(0.9 / 0.2), math.log(0.8 / 0.1)))
    with pytest.raises(ValueError):
        clopper_pearson_upper(3, 2)


def test_gdp_epsilon_matches_the_accountant_for_a_gaussian():
    for eps in (1.0, 4.0):
        z = calibrate_noise_multiplier(eps, DELTA, gaussian_event, accountant="pld")
        assert gdp_epsilon(1.0 / z, DELTA) == pytest.approx(eps, rel=0.01)
    assert gdp_epsilon(0.0, DELTA) == 0.0
    assert separation([0.0, 2.0], [1.0, 3.0]) == pytest.approx(1 / math.sqrt(2))


def test_broken_gaussian_mechanism_is_caught():
    """Noise 10x too small for the claimed epsilon = 1: the audit proves the claim wrong."""
    claimed = 1.0
    sigma = calibrate_noise_multiplier(claimed, DELTA, gaussian_event) / 10.0
    res = run_audit(_gaussian_release(sigma), 0.0, 1.0, n_runs=2000, delta=DELTA)
    assert isinstance(res, AuditResult) and res.n_runs == 2000 and res.n_eval == 1000
    assert res.eps_lower > claimed, res
    assert res.confidence == 0.95 and res.fpr_upper >= res.fpr and res.fnr_upper >= res.fnr
    # the Bonferroni grid (fixed before the runs) catches it too
    grid = audit_scores(
        np.random.default_rng().normal(0, sigma, 2000),
        np.random.default_rng().normal(1, sigma, 2000),
        DELTA,
        method="grid",
        thresholds=np.linspace(0, 1, 11),
    )
    assert grid.method == "grid" and grid.n_tests == 22 and grid.eps_lower > claimed


def test_correct_gaussian_mechanism_is_not_flagged():
    """Correct calibration: eps_lower <= epsilon (a false alarm has probability <= 5% by
    construction and far less in practice: the optimal test on 1000 runs stays well below)."""
    eps = 1.0
    sigma = calibrate_noise_multiplier(eps, DELTA, gaussian_event)
    res = run_audit(_gaussian_release(sigma), 0.0, 1.0, n_runs=2000, delta=DELTA)
    assert res.eps_lower <= eps
    # vector observables: the projection is learned on the calibration half only
    rng = np.random.default_rng()
    o0 = np.column_stack([rng.normal(0, sigma, 2000), rng.normal(0, 1, 2000)])
    o1 = np.column_stack([rng.normal(1, sigma, 2000), rng.normal(0, 1, 2000)])
    assert audit_scores(o0, o1, DELTA).eps_lower <= eps


def test_audit_input_checks_and_orientation():
    rng = np.random.default_rng()
    s0, s1 = rng.normal(0, 0.1, 200), rng.normal(-1, 0.1, 200)  # the canary *lowers* the score
    res = audit_scores(s0, s1, DELTA)
    assert res.orientation == -1 and res.eps_lower > 1.0
    with pytest.raises(ValueError, match="4 runs"):
        audit_scores(s0[:3], s1[:3], DELTA)
    with pytest.raises(ValueError, match="thresholds"):
        audit_scores(s0, s1, DELTA, method="grid")
    with pytest.raises(ValueError, match="finite"):
        audit_scores(np.r_[s0, np.nan], np.r_[s1, 0.0], DELTA)
    with pytest.raises(ValueError, match="fixed size"):
        run_audit(lambda d, s: np.zeros(1 + (s % 2) * d), 0, 1, n_runs=4)


# ---------------------------------------------------------------------------------- benchmarks
def test_bench_tradeoff_selects_mu_on_validation_not_test():
    """mu is chosen by the validation metric; the test metric is reported at that mu."""
    import bench_tradeoff as B

    def run(mu, val, test):
        return {
            "dataset": "d",
            "method": "ada-dpals",
            "protocol": "random",
            "epsilon": 1.0,
            "mu": mu,
            "metrics": {"rmse": test},
            "validation": {"rmse": val},
        }

    runs = [run(0.25, 0.90, 0.70), run(1 / 3, 0.80, 0.95), run(0.5, 0.85, 0.60)]  # test prefers 0.5
    best = B.best_ada(runs, "d", "ada-dpals", 1.0, "random")
    assert best["mu"] == pytest.approx(1 / 3) and B._overall(best) == 0.95
    # held-out users: higher recall is better, on validation too
    top = [
        {
            **r,
            "protocol": "heldout-users",
            "metrics": {"recall@20": 1 - r["metrics"]["rmse"]},
            "validation": {"recall@20": 1 - r["validation"]["rmse"]},
        }
        for r in runs
    ]
    assert B.best_ada(top, "d", "ada-dpals", 1.0, "heldout-users")["mu"] == pytest.approx(1 / 3)
    # without a validation metric there is no selection (never a fall-back to the test metric)
    assert (
        B.best_ada([{k: v for k, v in r.items() if k != "validation"} for r in runs], "d", "ada-dpals", 1.0, "random")
        is None
    )


def test_bench_audit_quick_outputs(tmp_path):
    import bench_audit

    assert bench_audit.main(["--quick", "--out", str(tmp_path), "--quiet", "--only", "control", "JointDPSGD"]) == 0
    data = json.loads((tmp_path / "audit_quick.json").read_text())
    rows = {r["mechanism"]: r for r in data["rows"]}
    assert set(rows) == {
        "JointDPSGD (regime='joint')",
        "JointDPSGD (regime='full')",
        "control: Gaussian with 10x too little noise",
    }
    assert data["control_caught"] and not rows["control: Gaussian with 10x too little noise"]["lower_le_reported"]
    for r in data["rows"]:
        assert r["epsilon_lower_95"] >= 0 and 0 < r["epsilon_reported"] <= 4.0 * (1 + 1e-6)
    md = (tmp_path / "audit_quick.md").read_text()
    assert "python benchmarks/bench_audit.py --quick" in md and "| mechanism | eps reported | eps_lower (95%)" in md


def test_bench_audit_dpals_and_multitask_canaries_release_scalars():
    import bench_audit

    for case in (
        bench_audit.dpals_case("dpals-uniform"),
        bench_audit.multitask_case("ssp"),
        bench_audit.federated_case(),
    ):
        a, b = case["fit_release"](case["d0"], 0), case["fit_release"](case["d1"], 1)
        assert np.isfinite(a) and np.isfinite(b)
        assert 0 < case["reported"]() <= 4.0 * (1 + 1e-6)
