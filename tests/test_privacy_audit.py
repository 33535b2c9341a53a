"""Empirical privacy audit (privrec.privacy.audit): bounds, detection of a broken mechanism, no false alarm,
the power every audit states, and the white-box audit of the solvers' releases.

Also holds the regression tests of the audit's findings on the benchmarks (bench_tradeoff's mu
selection on validation, bench_audit's outputs). Noise in these tests comes from OS entropy, as
in a real audit; every assertion has a failure probability far below 1e-6 unless stated.
"""

import dataclasses
import json
import math
import sys
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp

from privrec.privacy import calibrate_noise_multiplier, gaussian_event
from privrec.privacy.audit import (
    AuditResult,
    CanaryDesign,
    SolverAudit,
    audit_power,
    audit_scores,
    audit_solver_release,
    canary_design,
    clopper_pearson_lower,
    clopper_pearson_upper,
    detectable_epsilon,
    empirical_epsilon,
    epsilon_lower_bound,
    gaussian_mu,
    gdp_epsilon,
    gdp_mu,
    max_epsilon_lower,
    remove_units,
    run_audit,
    separation,
    tap_solver,
    worst_case_gd_init,
)
from privrec.solvers import NoisyGDSolver, SSPSolver, TaskBatch, weighted_statistics

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


# ---------------------------------------------------------------------------------- known power
def test_max_epsilon_lower_is_the_ceiling_set_by_the_runs():
    """600 runs per dataset, split in half: no audit can report more than 4.39 (issue 25)."""
    assert max_epsilon_lower(300, 300, DELTA) == pytest.approx(4.3923, abs=1e-3)
    ceilings = [max_epsilon_lower(n, n, DELTA) for n in (10, 100, 1_000, 10_000, 100_000)]
    assert all(a < b for a, b in zip(ceilings, ceilings[1:]))
    assert max_epsilon_lower(300, 300, DELTA, n_tests=20) < ceilings[2]  # Bonferroni costs
    rng = np.random.default_rng()
    res = audit_scores(rng.normal(0, 1, 600), rng.normal(0, 1, 600), DELTA)
    assert res.eps_max == pytest.approx(max_epsilon_lower(300, 300, DELTA))
    assert math.isnan(res.power_2x) and math.isnan(res.detectable_eps) and math.isnan(res.eps_claimed)
    with pytest.raises(ValueError):
        max_epsilon_lower(0, 10, DELTA)


def test_detectable_error_shrinks_with_the_number_of_runs():
    """The smallest true epsilon an audit flags with 90% probability decreases with the runs; an
    audit whose ceiling is below the claim detects nothing."""
    det = [detectable_epsilon(4.0, n, n, DELTA, simulations=200) for n in (600, 4_000, 40_000)]
    assert all(a > b for a, b in zip(det, det[1:])), det
    assert det[0] > 20.0 and 4.0 < det[-1] < 10.0
    assert detectable_epsilon(5.0, 600, 600, DELTA) == math.inf  # eps_max 4.39 < 5
    assert audit_power(5.0, 50.0, 600, 600, DELTA) == 0.0
    # power grows with the true epsilon and is small when the claim is right (a valid audit)
    powers = [audit_power(3.0, e, 40_000, 40_000, DELTA, orientation=1, simulations=200) for e in (3.0, 5.0, 7.0, 9.0)]
    assert powers[0] <= 0.05 and all(a <= b for a, b in zip(powers, powers[1:])) and powers[-1] > 0.95
    # the black-box figure: a Gaussian at half the noise (true eps 8.34 at claimed 4) is
    # never flagged with 600 or 4000 runs
    assert audit_power(4.0, 8.34, 600, 600, DELTA) == 0.0
    assert audit_power(4.0, 8.34, 4_000, 4_000, DELTA) < 0.1
    with pytest.raises(ValueError, match="power"):
        detectable_epsilon(4.0, 600, 600, DELTA, power=1.0)
    with pytest.raises(ValueError, match="method"):
        audit_power(4.0, 8.0, 600, 600, DELTA, method="nope")
    # the grid method's power is the best single threshold's (an upper bound)
    assert audit_power(2.0, 12.0, 4_000, 4_000, DELTA, method="grid", n_tests=20) > 0.9


def test_power_model_predicts_real_split_audits():
    """The simulated power of audit_scores' split test matches 100 real audits of Gaussian scores
    (60 audits: binomial sd 0.05; tolerance 0.3, 6 sd)."""
    claim, true, n = 2.0, 6.0, 4_000
    predicted = audit_power(claim, true, n, n, DELTA)
    mu = gdp_mu(true, DELTA)
    rng = np.random.default_rng()
    hits = [audit_scores(rng.normal(0, 1, n), rng.normal(mu, 1, n), DELTA).eps_lower > claim for _ in range(60)]
    assert 0.5 < predicted < 0.98 and abs(np.mean(hits) - predicted) < 0.3, (predicted, np.mean(hits))


def test_audit_results_state_their_power():
    rng = np.random.default_rng()
    res = audit_scores(
        rng.normal(0, 1, 1000), rng.normal(1, 1, 1000), DELTA, epsilon_claimed=1.0, power_simulations=100
    )
    assert res.eps_claimed == 1.0 and res.n_without == res.n_with == 1000
    assert res.eps_max == pytest.approx(max_epsilon_lower(500, 500, DELTA))
    assert 0.0 <= res.power_2x <= 1.0 and res.detectable_eps > 1.0
    assert res.detected == (res.eps_lower > 1.0) and "power_2x" in res.to_dict()
    grid = audit_scores(
        rng.normal(0, 1, 1000),
        rng.normal(1, 1, 1000),
        DELTA,
        method="grid",
        thresholds=np.linspace(-1, 3, 9),
        epsilon_claimed=1.0,
        power_simulations=50,
    )
    assert grid.n_tests == 18 and grid.eps_max == pytest.approx(max_epsilon_lower(1000, 1000, DELTA, n_tests=18))
    assert 0.0 <= grid.power_2x <= 1.0
    via_runs = run_audit(
        _gaussian_release(1.0), 0.0, 1.0, n_runs=100, delta=DELTA, epsilon_claimed=2.0, power_simulations=50
    )
    assert via_runs.eps_claimed == 2.0 and via_runs.power_2x == 0.0  # 50 evaluated runs cannot reach 2.0


def test_gdp_mu_inverts_gdp_epsilon_and_gaussian_mu_composes():
    for eps in (0.5, 1.0, 4.0, 8.0, 50.0):
        assert gdp_epsilon(gdp_mu(eps, DELTA), DELTA) == pytest.approx(eps, rel=1e-6)
    assert gdp_epsilon(40.0, DELTA) > 500  # log-space: no overflow at large mu
    assert gdp_mu(math.inf, DELTA) == math.inf
    with pytest.raises(ValueError):
        gdp_mu(1.0, 0.0)
    g2, g1 = dp_accounting.GaussianDpEvent(2.0), dp_accounting.GaussianDpEvent(1.0)
    assert gaussian_mu(g2) == pytest.approx(0.5)
    assert gaussian_mu(dp_accounting.ComposedDpEvent([g2, g1])) == pytest.approx(math.sqrt(1.25))
    assert gaussian_mu(dp_accounting.SelfComposedDpEvent(g2, 4)) == pytest.approx(1.0)
    assert gaussian_mu(dp_accounting.NonPrivateDpEvent()) == math.inf
    assert gaussian_mu(dp_accounting.NoOpDpEvent()) == 0.0
    assert math.isnan(gaussian_mu(dp_accounting.LaplaceDpEvent(1.0)))
    # the SSP solver's two releases: the canary separation of its claim
    ssp = SSPSolver(noise_multiplier=2.0, budget=1.0, gramian_ratio=2.0)
    assert gaussian_mu(ssp.dp_event()) == pytest.approx(math.sqrt(1 / 16 + 1 / 4))


# ---------------------------------------------------------------------------------- white box
def _canary_batch(n_canaries, k, background=True, norm=0.5, label=5.0):
    """Canary u (< n_canaries) is the only canary of tasks u*k .. u*k + k - 1 (weight 1, feature
    +-norm, label ``label``); one background unit (label 0.3, spend 0.999 k) rates every task."""
    m = n_canaries * k
    rows, cols = np.repeat(np.arange(n_canaries), k), np.arange(m)
    vals, w = np.full(m, label), np.ones(m)
    if background:
        rows, cols = np.r_[rows, np.full(m, n_canaries)], np.r_[cols, np.arange(m)]
        vals, w = np.r_[vals, np.full(m, 0.3)], np.r_[w, np.full(m, 0.999 * math.sqrt(k / m))]
    n = n_canaries + int(background)
    R = sp.csr_matrix((vals, (rows, cols)), shape=(n, m))
    W = sp.csr_matrix((w, (rows, cols)), shape=(n, m))
    U = np.random.default_rng(0).choice([-norm, norm], size=(n, 1))
    return TaskBatch.from_csr(R, W, U, transpose=True)


def test_canary_design_contributions_and_checks():
    batch = _canary_batch(50, 3)
    d = canary_design(batch, np.arange(50), 0.5, 5.0)
    assert isinstance(d, CanaryDesign) and d.delta_gramian.shape == (150, 1, 1)
    np.testing.assert_array_equal(d.task_canary, np.repeat(np.arange(50), 3))
    x = batch.features[np.repeat(np.arange(50), 3), 0]
    np.testing.assert_allclose(d.delta_rhs[:, 0], 5.0 * x, rtol=1e-6)  # w y x, w = 1
    np.testing.assert_allclose(d.delta_gramian[:, 0, 0], x * x, rtol=1e-6)
    G, b = weighted_statistics(remove_units(batch, np.arange(50)), 0.5, 5.0)
    np.testing.assert_allclose(d.base_rhs, b) and np.testing.assert_allclose(d.base_gramian, G)
    assert np.all(d.base_rhs != 0)  # the background unit is in every task
    # labels beyond the claimed bound are clipped in the modelled contribution
    np.testing.assert_allclose(canary_design(batch, np.arange(50), 0.5, 2.0).delta_rhs[:, 0], 2.0 * x, rtol=1e-6)
    with pytest.raises(ValueError, match="share a task"):
        canary_design(batch, [0, 50], 0.5, 5.0)  # the background unit shares every task
    with pytest.raises(ValueError, match="at least one example"):
        canary_design(batch, [0, 999], 0.5, 5.0)
    assert remove_units(batch, np.arange(50)).nnz == 150 and remove_units(batch, []).nnz == batch.nnz


def test_tap_solver_records_the_ssp_release_without_changing_it():
    batch = _canary_batch(2_000, 4)
    solver = SSPSolver(
        noise_multiplier=1.5, budget=4.0, max_norm=0.5, label_bound=5.0, gramian_ratio=2.0, chunk_tasks=512
    )
    tapped, tap = tap_solver(solver)
    assert isinstance(tapped, SSPSolver) and tapped.noise_multiplier == 1.5
    np.testing.assert_array_equal(tapped.solve(batch, rng=7).params, solver.solve(batch, rng=7).params)
    released = tap.released(tapped.block_tasks)
    G, b = weighted_statistics(batch, 0.5, 5.0)
    std = solver.noise_stds()
    # the recorded statistics minus the exact ones are the noise: its sd is the declared one (8000 draws)
    assert np.std(released["gramian"] - G) == pytest.approx(std["gramian"], rel=0.05)
    assert np.std(released["rhs"] - b) == pytest.approx(std["rhs"], rel=0.05)
    # noise off: the release is the exact statistics
    exact, tap0 = tap_solver(solver.with_noise_multiplier(0.0))
    exact.solve(batch)
    np.testing.assert_allclose(tap0.released(exact.block_tasks)["rhs"], b, rtol=1e-5, atol=1e-6)
    tap0.clear()
    assert tap0.released(exact.block_tasks) == {}
    with pytest.raises(TypeError):
        tap_solver(object())


def test_tap_solver_records_noisy_gradients():
    batch = _canary_batch(1_000, 4)
    gd = NoisyGDSolver(
        noise_multiplier=1.2,
        budget=4.0,
        max_norm=0.5,
        label_bound=5.0,
        radius=10.0,
        iterations=3,
        schedule=0.01,
        reg=0.5,
    )
    tapped, tap = tap_solver(gd)
    np.testing.assert_array_equal(tapped.solve(batch, rng=3).params, gd.solve(batch, rng=3).params)
    rel = tap.released(tapped.block_tasks)
    assert rel["theta"].shape == rel["gradient"].shape == (3, 4_000, 1)
    G, b = weighted_statistics(batch, 0.5, 5.0)
    exact = np.einsum("kij,tkj->tki", G, rel["theta"]) - b  # the data gradient at each recorded iterate
    assert np.std(rel["gradient"] - exact) == pytest.approx(gd.noise_std(), rel=0.05)
    assert np.all(rel["theta"][0] == 0) and np.any(rel["theta"][1] != 0)
    with pytest.raises(ValueError, match="squared loss"):
        from privrec.convex.losses import LogisticLoss

        tap_solver(dataclasses.replace(gd, loss=LogisticLoss()))


def test_whitebox_exact_gaussian_at_the_right_noise_is_not_flagged():
    """Correct noise: eps_lower <= claimed epsilon (the canaries reach the declared sensitivity)."""
    batch = _canary_batch(12_000, 2)
    solver = SSPSolver(noise_multiplier=3.0, budget=2.0, max_norm=0.5, label_bound=5.0)
    audit = audit_solver_release(solver, batch, np.arange(12_000), DELTA, power_simulations=50)
    assert isinstance(audit, SolverAudit) and audit.releases == ("SSP local Gramians", "SSP right-hand sides")
    assert audit.eps_lower <= audit.eps_claimed, audit.to_dict()
    assert audit.eps_claimed == pytest.approx(gdp_epsilon(math.sqrt(2) / 3.0, DELTA), rel=0.02)
    assert audit.mu_canary / audit.mu_claimed == pytest.approx(1.0, abs=1e-4)
    assert audit.result.n_without + audit.result.n_with == 12_000 and audit.n_canaries == 12_000
    assert abs(audit.separation - audit.mu_canary) < 0.15  # the measured d' is the claimed one
    assert audit.result.orientation == 1 and audit.scores_with.size == audit.result.n_with
    assert not audit.detected and "mu_canary" in audit.to_dict()


def test_whitebox_detects_a_4x_under_noised_solver_in_a_small_run():
    """Noise multiplier 4x too small for the claim (true eps 9.3 vs claimed 1.87): detected with
    12,000 canaries in one solve (simulated: margin > 5 sd). The same for noisy GD from the
    worst-case initial iterate."""
    batch = _canary_batch(12_000, 2)
    claimed = SSPSolver(noise_multiplier=3.0, budget=2.0, max_norm=0.5, label_bound=5.0)
    weak = claimed.with_noise_multiplier(0.75)
    audit = audit_solver_release(weak, batch, np.arange(12_000), DELTA, claimed=claimed, power_simulations=50)
    assert audit.detected and audit.eps_lower > audit.eps_claimed, audit.to_dict()
    assert audit.separation > 2.5 * audit.mu_canary  # the scores are 4x more separated than claimed
    gd = NoisyGDSolver(
        noise_multiplier=3.0, budget=2.0, max_norm=0.5, label_bound=5.0, radius=10.0, iterations=1, schedule=0.01
    )
    design = canary_design(batch, np.arange(12_000), 0.5, 5.0)
    gd = dataclasses.replace(gd, init=worst_case_gd_init(design, 10.0))
    weak_gd = gd.with_noise_multiplier(0.75)
    audit_gd = audit_solver_release(weak_gd, batch, design, DELTA, claimed=gd, power_simulations=50)
    assert audit_gd.detected, audit_gd.to_dict()
    with pytest.raises(ValueError, match="same kind"):
        audit_solver_release(weak_gd, batch, design, DELTA, claimed=claimed)
    with pytest.raises(ValueError, match="noise"):
        audit_solver_release(claimed.with_noise_multiplier(0.0), batch, design, DELTA)
    with pytest.raises(ValueError, match="include_probability"):
        audit_solver_release(claimed, batch, design, DELTA, include_probability=1.0)


def test_worst_case_gd_init_saturates_the_gradient_bound():
    """From 0 a one-example canary's gradient is |y| ||x|| = half the bound ||x|| (R ||x|| + B) with
    R = B / ||x||; from the worst-case start it is all of it."""
    batch = _canary_batch(500, 2)
    gd = NoisyGDSolver(
        noise_multiplier=2.0, budget=2.0, max_norm=0.5, label_bound=5.0, radius=10.0, iterations=1, schedule=0.01
    )
    design = canary_design(batch, np.arange(500), 0.5, 5.0)
    init = worst_case_gd_init(design, 10.0)
    assert init.shape == (1000, 1) and np.allclose(np.abs(init), 10.0)
    assert np.all(np.sign(init[:, 0]) == -np.sign(batch.features[np.repeat(np.arange(500), 2), 0]))
    zero = audit_solver_release(gd, batch, design, DELTA, power_simulations=20)
    worst = audit_solver_release(dataclasses.replace(gd, init=init), batch, design, DELTA, power_simulations=20)
    assert zero.mu_canary / zero.mu_claimed == pytest.approx(0.5, abs=0.01)
    assert worst.mu_canary / worst.mu_claimed == pytest.approx(1.0, abs=1e-3)
    assert zero.releases == ("noisy GD gradients",)


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
    """bench_audit --quick on a subset (seconds): black-box rows with their power columns, the
    white-box item-step audit of one method (a real DPALS fit's solver and batch) and both
    half-noise controls (too few canaries in --quick to detect them: structure only)."""
    import bench_audit

    argv = [
        "--quick",
        "--out",
        str(tmp_path),
        "--quiet",
        "--only",
        "control: Gaussian",
        "control: item step",
        "JointDPSGD",
        "item step dpals-uniform",
    ]
    assert bench_audit.main(argv) == 0
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
        assert r["epsilon_lower_95"] <= r["eps_max"] + 1e-9 and 0 <= r["power_2x"] <= 1
    # 4000 runs cannot see a 2x error: the stated power says so
    assert rows["control: Gaussian with 10x too little noise"]["power_2x"] < 0.1
    wb = data["whitebox"]
    (honest,) = wb["honest"]
    assert honest["method"] == "dpals-uniform" and honest["releases"] == ["SSP local Gramians", "SSP right-hand sides"]
    assert honest["saturation"] == pytest.approx(1.0, abs=1e-3)  # the canaries reach the sensitivity
    assert honest["lower_le_claimed"] and honest["lower_le_model"] and honest["eps_claimed"] <= honest["model_epsilon"]
    assert honest["n_without"] + honest["n_with"] == data["config"]["whitebox"]["canaries"]
    assert {c["method"] for c in wb["controls"]} == {"dpals-uniform", "dpsgd-uniform"}
    for c in wb["controls"]:
        assert c["repetitions"] == len(c["repetition_rows"]) == data["config"]["whitebox"]["control_repetitions"]
        assert c["eps_true"] > 2 * c["eps_claimed"] and 0 <= c["predicted_power"] <= 1
        assert c["settings"]["noise_multiplier"] > 0
    assert data["timing"]["wall_seconds"] > 0 and data["violations"] == []
    md = (tmp_path / "audit_quick.md").read_text()
    assert "python benchmarks/bench_audit.py --quick" in md and "| mechanism | eps reported | eps_lower (95%)" in md
    assert "## 1. White-box audit of the DP-ALS item step" in md and "detection rate" in md


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
