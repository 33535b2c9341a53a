"""Asynchronous DP learner (spec 003): unit facts, noise-free reductions, per-owner accounting."""

import math

import numpy as np
import pytest

from privrec.convex.asynchronous import (
    AsyncDPLearner,
    cost_bound,
    effective_noise_scale,
    laplace_scale,
    ridge_objective,
    ridge_optimum,
)
from privrec.privacy import epsilon_from_report


def _data(rng, n=300, p=3, owners=3):
    X = rng.uniform(-1, 1, (n, p)) / p
    theta = rng.standard_normal(p)
    y = X @ theta + 0.05 * rng.standard_normal(n)
    owner = np.repeat(np.arange(owners), n // owners)
    return X, y, owner


def test_fact1_laplace_scale_and_fact2_effective_noise():
    assert laplace_scale(1.0, 1000, 10_000, 1.0) == pytest.approx(0.2)
    assert 2 * laplace_scale(1.0, 1000, 10_000, 1.0) ** 2 == pytest.approx(0.08)  # variance 2 b^2
    assert laplace_scale(1.0, 1000, 10_000, 1.0, n_params=4) == pytest.approx(0.4)  # sqrt(p) factor
    n = 50_000
    for n_i in (1_000, 10_000, 25_000):
        assert n_i / n * laplace_scale(1.0, 1000, n_i, 2.0) == pytest.approx(effective_noise_scale(1.0, 1000, n, 2.0))
    assert laplace_scale(1.0, 10, 10, math.inf) == 0.0


def test_fact5_cost_bound_values():
    for eps, expected in ((0.1, 1.06916e-5), (1.0, 1.00680e-5), (10.0, 1.00068e-5)):
        assert cost_bound(1000, 750_000, [eps] * 3) == pytest.approx(expected, rel=1e-5)


def test_laplace_noise_uses_spec_scale_per_owner():
    rng = np.random.default_rng(0)
    X, y, owner = _data(rng, n=400, owners=2)
    owner = np.where(np.arange(400) < 100, 0, 1)  # n_0 = 100, n_1 = 300
    est = AsyncDPLearner(epsilon=[0.5, 2.0], n_steps=50, grad_bound=0.7, rho=1.0, random_state=0).fit(X, y, owner)
    np.testing.assert_allclose(est.laplace_scales_, [2 * 0.7 * 50 / (100 * 0.5), 2 * 0.7 * 50 / (300 * 2.0)])
    est2 = AsyncDPLearner(epsilon=[0.5, 2.0], n_steps=50, grad_bound=0.7, l1_mode="sqrt_p").fit(X, y, owner)
    np.testing.assert_allclose(est2.laplace_scales_, est.laplace_scales_ * math.sqrt(3))


def test_noise_free_is_async_projected_gossip_and_rho_zero_never_moves():
    """eps = inf: replay the owner sequence with a plain loop; rho = 0: iterates stay at 0."""
    rng = np.random.default_rng(1)
    X, y, owner = _data(rng, owners=3)
    T, rho, sigma, tmax, xi = 200, 4e-3, 1e-2, 0.3, 0.5
    est = AsyncDPLearner(
        epsilon=math.inf,
        n_steps=T,
        rho=rho,
        sigma=sigma,
        theta_max=tmax,
        grad_bound=xi,
        coefficient="eq7",
        random_state=3,
    ).fit(X, y, owner)
    N, n, p = 3, X.shape[0], X.shape[1]
    step = rho / (T**2 * sigma)
    thL, th = np.zeros(p), np.zeros((N, p))
    for i in est.owner_sequence_:
        m = owner == i
        bar = 0.5 * (thL + th[i])
        G = 2 * (X[m] @ bar - y[m])[:, None] * X[m]
        G *= np.minimum(1.0, xi / np.abs(G).sum(axis=1))[:, None]
        Q = G.mean(axis=0)
        th[i] = np.clip(bar - N * step * (sigma * bar / (2 * N) + m.sum() / n * Q), -tmax, tmax)
        thL = np.clip(bar - (N - 1) / N * step * sigma * bar, -tmax, tmax)
    np.testing.assert_allclose(est.coef_, thL, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(est.owner_models_, th, rtol=1e-10, atol=1e-14)
    still = AsyncDPLearner(epsilon=1.0, n_steps=30, rho=0.0, random_state=0).fit(X, y, owner)
    assert np.all(still.coef_ == 0) and np.all(still.owner_models_ == 0)
    rep = est.privacy_report()
    assert all(r["epsilon"] == "inf" for r in rep.values())


def test_noise_free_converges_towards_ridge_optimum():
    rng = np.random.default_rng(2)
    X, y, owner = _data(rng, n=600, owners=3)
    sigma, T = 1e-2, 3000
    est = AsyncDPLearner(
        epsilon=math.inf, n_steps=T, rho=0.5 * T**2 * sigma, sigma=sigma, grad_bound=100.0, random_state=0
    ).fit(X, y, owner)
    star = ridge_optimum(X, y, sigma)
    psi = ridge_objective(est.coef_, X, y, sigma) / ridge_objective(star, X, y, sigma) - 1
    assert psi < 0.05
    # f is minimised at theta*
    assert ridge_objective(star, X, y, sigma) <= ridge_objective(star + 1e-3, X, y, sigma)


def test_fact4_selection_frequency_and_per_owner_ledgers():
    rng = np.random.default_rng(3)
    X, y, owner = _data(rng, owners=3)
    est = AsyncDPLearner(epsilon=[0.5, 1.0, 4.0], n_steps=6000, rho=1e-3, random_state=0).fit(X, y, owner)
    freq = np.bincount(est.owner_sequence_, minlength=3) / 6000
    np.testing.assert_allclose(freq, 1 / 3, atol=0.02)
    rep = est.privacy_report()
    for j, eps in enumerate([0.5, 1.0, 4.0]):
        r = rep[j]
        assert r["answers"] == int(freq[j] * 6000 + 0.5)
        assert r["epsilon_pure"] <= eps
        assert epsilon_from_report(r) == pytest.approx(r["epsilon"], rel=1e-9)
        assert 0 < r["epsilon"] <= eps  # the accountant's bound is below the budget at this T
    assert est.privacy_report(owner=2)["epsilon"] > rep[0]["epsilon"]


def test_gradient_clipping_bounds_owner_answer_sensitivity():
    """Replacing one record of an owner moves its noiseless answer by <= 2 Xi / n_i in L1."""
    rng = np.random.default_rng(4)
    X, y, _ = _data(rng, n=50, owners=1)
    est = AsyncDPLearner(grad_bound=0.2)
    theta = rng.standard_normal((5, 3)) * 10
    a = est._clipped_mean_gradients(X, y, theta)
    X2, y2 = X.copy(), y.copy()
    X2[7], y2[7] = 100.0, -300.0
    b = est._clipped_mean_gradients(X2, y2, theta)
    assert np.all(np.abs(a - b).sum(axis=1) <= 2 * 0.2 / 50 + 1e-12)


def test_simulate_runs_and_bad_input():
    rng = np.random.default_rng(5)
    X, y, owner = _data(rng)
    traj = AsyncDPLearner(epsilon=1.0, n_steps=20, rho=1e-4, random_state=0).simulate(X, y, owner, 7, [10, 20])
    assert set(traj) == {10, 20} and traj[20].shape == (7, 3)
    with pytest.raises(ValueError, match="one value per owner"):
        AsyncDPLearner(epsilon=[1.0, 2.0]).fit(X, y, owner)
    with pytest.raises(ValueError, match="l1_mode"):
        AsyncDPLearner(l1_mode="l2").fit(X, y, owner)
    with pytest.raises(ValueError, match="coefficient"):
        AsyncDPLearner(coefficient="half").fit(X, y, owner)
    with pytest.raises(ValueError, match="epsilon"):
        AsyncDPLearner(epsilon=[1.0, -1.0, 1.0]).fit(X, y, owner)
    with pytest.raises(ValueError, match="same number of rows"):
        AsyncDPLearner().fit(X, y[:-1], owner)
    with pytest.raises(ValueError, match="NaN"):
        AsyncDPLearner().fit(np.full_like(X, np.nan), y, owner)
    with pytest.raises(ValueError):
        cost_bound(10, 100, [])


# ------------------------------------------------------------------ privacy audit fixes (A, B)
def test_clone_with_generator_random_state_is_rejected():
    from sklearn.base import clone

    rng = np.random.default_rng(6)
    X, y, owner = _data(rng, n=60)
    twin = clone(AsyncDPLearner(n_steps=10, random_state=np.random.default_rng(0)))
    with pytest.raises(ValueError, match="random_state"):
        twin.fit(X, y, owner)
    with pytest.raises(ValueError, match="random_state"):
        twin.simulate(X, y, owner, 3)
    a, b = clone(AsyncDPLearner(n_steps=10, rho=1.0)), clone(AsyncDPLearner(n_steps=10, rho=1.0))
    assert not np.allclose(a.fit(X, y, owner).coef_, b.fit(X, y, owner).coef_)


def test_simulate_records_every_noise_draw_in_per_owner_ledgers():
    rng = np.random.default_rng(7)
    X, y, owner = _data(rng, n=90, owners=3)
    T, R = 40, 6
    est = AsyncDPLearner(epsilon=[0.5, 1.0, math.inf], n_steps=T, rho=1e-3, random_state=11)
    est.simulate(X, y, owner, R, [T])
    answers = est.simulation_answers_
    assert answers.shape == (R, 3) and answers.sum() == R * T
    rep = est.simulation_report()
    for j, _eps in enumerate([0.5, 1.0]):
        r = rep[j]
        assert r["runs"] == R and r["answers_total"] == answers[:, j].sum()
        assert len(r["events"]) == int(np.count_nonzero(answers[:, j]))  # one Laplace event per run
        assert epsilon_from_report(r) == pytest.approx(r["epsilon"], rel=1e-9)
        assert 0 < r["epsilon_per_run_max"] < r["epsilon"]  # publishing all runs composes
    assert rep[2]["epsilon"] == "inf"  # an owner without noise is never reported as private
    # one simulated run with the fit's seed: same owner sequence, same accountant epsilon as fit
    fit = AsyncDPLearner(epsilon=[0.5, 1.0, 2.0], n_steps=T, rho=1e-3, random_state=5).fit(X, y, owner)
    sim = AsyncDPLearner(epsilon=[0.5, 1.0, 2.0], n_steps=T, rho=1e-3, random_state=5)
    sim.simulate(X, y, owner, 1)
    for j in range(3):
        assert sim.simulation_report(owner=j)["epsilon"] == pytest.approx(fit.privacy_report(owner=j)["epsilon"])
    with pytest.raises(ValueError, match="simulate"):
        AsyncDPLearner().simulation_report()
