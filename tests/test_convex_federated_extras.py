"""Moreau-envelope smoothing (spec 002 A1, non-smooth) and shuffled MB-SGD's amplification bound (A5-A7)."""

import logging

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant
from scipy.optimize import minimize_scalar

from privrec.convex.federated import (
    AbsoluteLoss,
    HingeLoss,
    MoreauEnvelope,
    SiloSet,
    advanced_composition,
    calibrate_shuffle,
    fmt_shuffle_epsilon,
    gaussian_epsilon,
    mb_sgd,
    shuffle_guarantee,
    shuffled_mb_sgd,
)
from privrec.privacy import epsilon_from_report

logging.getLogger("absl").setLevel(logging.ERROR)


@pytest.mark.parametrize("base", [HingeLoss(), AbsoluteLoss()])
def test_moreau_envelope_matches_brute_force_prox_and_sandwich(base):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 3))
    y = rng.integers(0, 2, 12).astype(float)
    theta = rng.standard_normal(3)
    beta = 3.0
    env = MoreauEnvelope(base, beta)
    vals = env.losses(theta, X, y)
    for i in range(12):
        x = X[i]
        # the prox moves theta along x, so the envelope is a 1-D minimisation over the shift s
        f = lambda s: base.losses(theta - s * x, X[i : i + 1], y[i : i + 1])[0] + 0.5 * beta * s**2 * (x @ x)
        best = minimize_scalar(f, bounds=(-5, 5), method="bounded", options=dict(xatol=1e-12)).fun
        assert vals[i] == pytest.approx(best, abs=1e-8)
    f_vals = base.losses(theta, X, y)
    L2 = np.einsum("ij,ij->i", X, X)  # per-example Lipschitz^2 = ||x||^2
    assert np.all(vals <= f_vals + 1e-12) and np.all(f_vals <= vals + L2 / (2 * beta) + 1e-12)
    # gradient = finite differences of the envelope (it is smooth)
    g = env.gradient(theta, X, y)
    h = 1e-6
    fd = np.array([(env.value(theta + h * e, X, y) - env.value(theta - h * e, X, y)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(g, fd, atol=1e-5)
    assert np.all(np.linalg.norm(env.per_example_gradients(theta, X, y), axis=1) <= np.sqrt(L2) + 1e-12)


def test_private_mb_sgd_on_smoothed_hinge_classifies():
    rng = np.random.default_rng(1)
    w = np.array([1.0, -1.0, 0.5])
    Xs = [rng.standard_normal((400, 3)) / 2 for _ in range(3)]
    ys = [(X @ w > 0).astype(float) for X in Xs]
    silos = SiloSet.from_arrays(Xs, ys, epsilon=2.0)
    res = mb_sgd(
        silos, MoreauEnvelope(HingeLoss(), beta=4.0), rounds=30, batch_size=40, step_size=0.5, clip=2.0, random_state=0
    )
    assert np.mean([np.mean((X @ res.coef > 0) == (yy > 0)) for X, yy in zip(Xs, ys)]) > 0.9
    assert all(e <= 2.0 for e in res.epsilons)


def test_gaussian_epsilon_is_exact_and_shuffle_bound_pieces():
    acc = PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(2.0))
    assert gaussian_epsilon(2.0, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-4)
    # FMT21: no amplification outside the theorem's range, amplification for many messages
    assert fmt_shuffle_epsilon(0.5, 10, 1e-6) == 0.5
    assert fmt_shuffle_epsilon(0.5, 10**6, 1e-6) < 0.05
    assert fmt_shuffle_epsilon(0.5, 10**6, 1e-6) < fmt_shuffle_epsilon(0.5, 10**5, 1e-6)
    assert advanced_composition(0.1, 1, 1e-6) >= 0.1


@pytest.mark.parametrize("M", [5, 2000])
def test_shuffle_calibration_meets_target(M):
    z = calibrate_shuffle(1.0, 1e-5, M, 10)
    g = shuffle_guarantee(z, M, 10, 1.0, 1e-5)
    assert g["epsilon"] <= 1.0 and g["delta"] <= 1e-5
    g_less = shuffle_guarantee(z * 0.98, M, 10, 1.0, 1e-5)
    assert g_less["epsilon"] > 1.0 or g_less["delta"] > 1e-5  # calibrated to within 2%
    assert g["amplified"] == (M == 2000)


def test_shuffled_mb_sgd_runs_and_reports():
    rng = np.random.default_rng(2)
    Xs = [rng.standard_normal((50, 2)) for _ in range(3)]
    ys = [X @ np.array([1.0, 2.0]) for X in Xs]
    silos = SiloSet.from_arrays(Xs, ys, epsilon=1.0)
    from privrec.convex.losses import SquaredLoss

    res = shuffled_mb_sgd(
        silos, SquaredLoss(), rounds=8, step_size=0.1, clip=1.0, epsilon=1.0, delta=1e-5, n_available=2, random_state=0
    )
    assert res.info["shuffle"]["epsilon"] <= 1.0
    assert sum(res.info["messages"]) == 8 * 2
    for rep, e in zip(res.reports, res.epsilons):
        assert epsilon_from_report(rep) == pytest.approx(e)
    with pytest.raises(ValueError, match="fixed"):
        shuffled_mb_sgd(
            silos, SquaredLoss(), rounds=2, step_size=0.1, clip=1.0, epsilon=1.0, delta=1e-5, n_available=(2, 3)
        )
