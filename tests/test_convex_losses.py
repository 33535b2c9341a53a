"""Losses of privrec.convex: gradients vs finite differences, declared constants hold, clipping bounds."""

import numpy as np
import pytest

from privrec.convex.losses import (
    LogisticLoss,
    SoftmaxLoss,
    SquaredLoss,
    clip_gradients,
    clip_gradients_l1,
    clipped_gradient_sum,
)


def _data(rng, n=40, d=4, xb=1.0):
    X = rng.standard_normal((n, d))
    X *= (xb * rng.uniform(0, 1, n) / np.linalg.norm(X, axis=1))[:, None]
    return X


def _fd(f, theta, h=1e-6):
    g = np.zeros_like(theta)
    for idx in np.ndindex(theta.shape):
        e = np.zeros_like(theta)
        e[idx] = h
        g[idx] = (f(theta + e) - f(theta - e)) / (2 * h)
    return g


@pytest.mark.parametrize("kind", ["squared", "logistic", "softmax"])
def test_gradient_matches_finite_differences(kind):
    rng = np.random.default_rng(0)
    X = _data(rng)
    w = rng.uniform(0.1, 2.0, X.shape[0])
    if kind == "squared":
        loss, y, theta = SquaredLoss(l2=0.3), rng.standard_normal(40), rng.standard_normal(4)
    elif kind == "logistic":
        loss, y, theta = LogisticLoss(l2=0.3), rng.integers(0, 2, 40).astype(float), rng.standard_normal(4)
    else:
        loss, y, theta = SoftmaxLoss(3, l2=0.3), rng.integers(0, 3, 40), rng.standard_normal((4, 3))
    g = loss.gradient(theta, X, y, sample_weight=w)
    np.testing.assert_allclose(g, _fd(lambda t: loss.value(t, X, y, sample_weight=w), theta), atol=1e-6)
    # per-example gradients average to the unregularised gradient
    pe = loss.per_example_gradients(theta, X, y)
    assert pe.shape == (40, *theta.shape)
    np.testing.assert_allclose(pe.mean(axis=0) + loss.l2 * theta, loss.gradient(theta, X, y), atol=1e-10)


@pytest.mark.parametrize("kind", ["squared", "logistic", "softmax"])
def test_declared_lipschitz_and_smoothness_hold_on_domain(kind):
    rng = np.random.default_rng(1)
    xb, rb, yb = 2.0, 1.5, 3.0
    X = _data(rng, n=500, xb=xb)
    if kind == "squared":
        loss, y = SquaredLoss(), rng.uniform(-yb, yb, 500)
        shape = (4,)
    elif kind == "logistic":
        loss, y = LogisticLoss(), rng.integers(0, 2, 500).astype(float)
        shape = (4,)
    else:
        loss, y = SoftmaxLoss(5), rng.integers(0, 5, 500)
        shape = (4, 5)
    L = loss.lipschitz(xb, rb, yb)
    beta = loss.smoothness(xb)
    for _ in range(20):
        t1 = rng.standard_normal(shape)
        t1 *= rb * rng.uniform() / np.linalg.norm(t1)
        t2 = rng.standard_normal(shape)
        t2 *= rb * rng.uniform() / np.linalg.norm(t2)
        g1 = loss.per_example_gradients(t1, X, y)
        g2 = loss.per_example_gradients(t2, X, y)
        assert np.max(np.linalg.norm(g1.reshape(500, -1), axis=1)) <= L + 1e-9
        diff = np.linalg.norm((g1 - g2).reshape(500, -1), axis=1)
        assert np.max(diff) <= beta * np.linalg.norm(t1 - t2) + 1e-9
    assert loss.strong_convexity() == 0.0
    assert SquaredLoss(l2=0.5).strong_convexity() == 0.5


def test_squared_loss_values_and_logistic_stability():
    X = np.array([[1.0, 0.0], [0.0, 2.0]])
    assert SquaredLoss().losses(np.array([1.0, 1.0]), X, np.array([0.0, 1.0])).tolist() == [0.5, 0.5]
    big = LogisticLoss().losses(np.array([1000.0, 0.0]), X, np.array([0.0, 1.0]))
    assert np.all(np.isfinite(big)) and big[0] == pytest.approx(1000.0)


def test_clipping_bounds_and_sum_sensitivity():
    rng = np.random.default_rng(2)
    G = rng.standard_normal((50, 3, 2)) * 5
    c2 = clip_gradients(G, 1.5)
    assert np.all(np.linalg.norm(c2.reshape(50, -1), axis=1) <= 1.5 + 1e-12)
    small = G / 100
    np.testing.assert_array_equal(clip_gradients(small, 1.5), small)
    c1 = clip_gradients_l1(G, 1.5)
    assert np.all(np.abs(c1.reshape(50, -1)).sum(axis=1) <= 1.5 + 1e-12)
    # float32 gradients: the bound holds exactly after rounding (it is the declared sensitivity)
    G32 = (rng.standard_normal((5000, 16)) * 5).astype(np.float32)
    c32 = clip_gradients(G32, 1.5).astype(np.float64)
    assert np.sqrt(np.einsum("ij,ij->i", c32, c32)).max() <= 1.5
    assert np.abs(clip_gradients_l1(G32, 1.5).astype(np.float64)).sum(axis=1).max() <= 1.5
    # removing one example changes the clipped sum by at most its weight times the clip norm
    loss = SquaredLoss()
    X, y, th = rng.standard_normal((30, 4)) * 3, rng.standard_normal(30) * 3, rng.standard_normal(4)
    w = rng.uniform(0, 2, 30)
    full = clipped_gradient_sum(loss, th, X, y, 0.7, sample_weight=w)
    for drop in range(30):
        keep = np.arange(30) != drop
        part = clipped_gradient_sum(loss, th, X[keep], y[keep], 0.7, sample_weight=w[keep])
        assert np.linalg.norm(full - part) <= w[drop] * 0.7 + 1e-9


def test_bad_input_errors():
    with pytest.raises(ValueError, match="theta must have shape"):
        SquaredLoss().value(np.zeros(3), np.zeros((2, 4)), np.zeros(2))
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        LogisticLoss().value(np.zeros(2), np.zeros((2, 2)), np.array([0.0, 2.0]))
    with pytest.raises(ValueError, match="n_classes"):
        SoftmaxLoss(1)
    with pytest.raises(ValueError, match="NaN"):
        SquaredLoss().value(np.zeros(2), np.array([[np.nan, 0.0]]), np.zeros(1))
    with pytest.raises(ValueError, match="l2"):
        SquaredLoss(l2=-1)
    with pytest.raises(ValueError, match="norm must be"):
        clipped_gradient_sum(SquaredLoss(), np.zeros(2), np.zeros((1, 2)), np.zeros(1), 1.0, norm="linf")
