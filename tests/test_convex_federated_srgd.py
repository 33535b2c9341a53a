"""Accelerated-DP-SRGD and its single-epoch baselines: spec 001 facts 1-4 and 6, privacy accounting."""

import math

import numpy as np
import pytest

from privrec.convex.federated import (
    accelerated_dp_srgd,
    dp_ftrl_single_epoch,
    dp_sgd_single_epoch,
    eta,
    eta_cumulative,
    event_multiplier,
    general_preset,
    interior_preset,
    recursive_gradients,
    tau,
)
from privrec.convex.losses import LogisticLoss, SquaredLoss
from privrec.privacy import epsilon_from_report, tree_depth


class QuadraticLoss:
    """Every example has the same loss f(x, d) = F(x) = 1/2 (x - x*)^T A (x - x*) (spec 001 fact 3)."""

    def __init__(self, A, x_star, seen=None):
        self.A, self.x_star, self.seen = A, x_star, seen

    def per_example_gradients(self, theta, X, y):
        if self.seen is not None:
            self.seen.append(X[:, 0].astype(int).copy())
        return np.broadcast_to((theta - self.x_star) @ self.A, (X.shape[0], theta.shape[0])).copy()

    def value(self, theta, X=None, y=None):
        r = theta - self.x_star
        return 0.5 * float(r @ self.A @ r)


def test_fact1_schedules():
    for t in range(50):
        assert eta_cumulative(t) == sum(eta(i) for i in range(t + 1)) == (t + 1) * (t + 2) / 2
        assert eta(t) ** 2 / eta_cumulative(t) < 2
    assert tau(0) == 1.0 and eta(-1) == 0.0


def test_fact2_recursion_equals_prefix_form():
    rng = np.random.default_rng(0)
    deltas = rng.standard_normal((20, 3))
    nab = recursive_gradients(deltas)
    prefix = np.cumsum(deltas, axis=0) / np.array([eta(t) for t in range(20)])[:, None]
    np.testing.assert_allclose(nab, prefix, atol=1e-12)


def test_fact3_identical_examples_give_exact_gradients():
    rng = np.random.default_rng(1)
    A = np.diag([3.0, 1.0, 0.2])
    x_star = rng.standard_normal(3)
    xs = rng.standard_normal((15, 3))
    g = (xs - x_star) @ A
    deltas = np.array([eta(t) * g[t] - eta(t - 1) * (g[t - 1] if t else 0) for t in range(15)])
    np.testing.assert_allclose(recursive_gradients(deltas), g, atol=1e-12)


@pytest.mark.parametrize("T", [1, 4, 16, 40])
def test_fact4_noise_free_accelerated_rate_on_quadratics(T):
    rng = np.random.default_rng(T)
    d, R = 5, 2.0
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    A = Q @ np.diag(np.logspace(0, -3, d)) @ Q.T
    x_star = rng.standard_normal(d)
    x_star *= 0.9 * R / np.linalg.norm(x_star)
    beta = float(np.linalg.eigvalsh(A).max())
    loss = QuadraticLoss(A, x_star)
    X = np.zeros((T * 3, d))
    res = accelerated_dp_srgd(
        X,
        np.zeros(T * 3),
        loss,
        epsilon=math.inf,
        delta=1e-6,
        radius=R,
        steps=T,
        batch_size=3,
        beta=beta,
        clip=None,
        random_state=0,
    )
    gap = loss.value(res.coef)
    assert gap <= 4 * beta * R**2 / (T * (T + 1)) + 1e-12
    assert math.isinf(res.epsilon)
    # y_1 is the projected gradient step from 0 with step 1/beta (exact gradient, no noise)
    step = x_star @ A / beta  # -grad F(0) / beta
    expected = step if np.linalg.norm(step) <= R else step * R / np.linalg.norm(step)
    np.testing.assert_allclose(res.iterates[0], expected, atol=1e-12)


def test_fact6_single_epoch_each_example_in_one_batch():
    n, T, B, d = 103, 10, 10, 2
    X = np.column_stack([np.arange(n), np.zeros(n)]).astype(float)
    seen = []
    loss = QuadraticLoss(np.eye(d), np.ones(d), seen)
    res = accelerated_dp_srgd(
        X,
        np.zeros(n),
        loss,
        epsilon=1.0,
        delta=1e-5,
        radius=5.0,
        steps=T,
        batch_size=B,
        beta=1.0,
        clip=1.0,
        random_state=0,
    )
    calls = np.concatenate(seen)
    counts = np.bincount(calls, minlength=n)
    assert calls.size == res.info["gradient_calls"] == 2 * T * B - B <= 2 * n
    batches = [set(s.tolist()) for s in seen[::2][:1]] + [set(s.tolist()) for s in seen[1::2]]
    assert sum(len(b) for b in batches) == T * B == len(set().union(*batches))  # disjoint, T*B examples
    assert counts.max() <= 2 and (counts > 0).sum() == T * B
    with pytest.raises(ValueError, match="single epoch"):
        accelerated_dp_srgd(
            X, np.zeros(n), loss, epsilon=1.0, delta=1e-5, radius=1.0, steps=11, batch_size=10, beta=1.0, clip=1.0
        )


def _lsq(rng, n=4000, d=5):
    X = rng.standard_normal((n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    w = rng.standard_normal(d)
    w /= np.linalg.norm(w)
    y = X @ w + 0.1 * rng.standard_normal(n)
    return X, y


def test_privacy_equal_epsilon_and_at_least_spec_noise():
    rng = np.random.default_rng(2)
    X, y = _lsq(rng)
    eps, delta, T, B, C, beta = 1.0, 1e-6, 16, 250, 2.0, 3.0
    loss = SquaredLoss()
    r = accelerated_dp_srgd(
        X, y, loss, epsilon=eps, delta=delta, radius=2.0, steps=T, batch_size=B, beta=beta, clip=C, random_state=0
    )
    s = dp_sgd_single_epoch(
        X, y, loss, epsilon=eps, delta=delta, steps=T, batch_size=B, clip=C, step_size=0.5, radius=2.0, random_state=0
    )
    f = dp_ftrl_single_epoch(
        X, y, loss, epsilon=eps, delta=delta, steps=T, batch_size=B, clip=C, step_size=0.2, radius=2.0, random_state=0
    )
    for res in (r, s, f):
        assert res.epsilon <= eps
        assert epsilon_from_report(res.report) == pytest.approx(res.epsilon, rel=1e-9)
    assert r.epsilon == pytest.approx(s.epsilon) == pytest.approx(f.epsilon)
    sigma_req = (C / (B * beta)) * math.sqrt(tree_depth(T)) * math.sqrt(2 * math.log(2.5 / delta)) / eps
    assert r.info["node_noise_std"] >= sigma_req * (1 - 1e-12)
    z_acc = event_multiplier(eps, delta, "accountant")
    assert z_acc <= event_multiplier(eps, delta, "max")
    acc = accelerated_dp_srgd(
        X,
        y,
        loss,
        epsilon=eps,
        delta=delta,
        radius=2.0,
        steps=T,
        batch_size=B,
        beta=beta,
        clip=C,
        noise_rule="accountant",
        random_state=0,
    )
    assert eps * 0.99 <= acc.epsilon <= eps


def test_private_srgd_learns_least_squares_and_logistic():
    rng = np.random.default_rng(3)
    X, y = _lsq(rng, n=20000)
    loss = SquaredLoss()
    w_star = np.linalg.lstsq(X, y, rcond=None)[0]
    f_star = loss.value(w_star, X, y)
    f0 = loss.value(np.zeros(X.shape[1]), X, y)
    r = accelerated_dp_srgd(
        X, y, loss, epsilon=2.0, delta=1e-6, radius=2.0, steps=20, batch_size=1000, beta=2.0, clip=4.0, random_state=0
    )
    assert loss.value(r.coef, X, y) - f_star < 0.05 * (f0 - f_star)
    yb = (y > 0).astype(float)
    lg = LogisticLoss()
    r2 = accelerated_dp_srgd(
        X, yb, lg, epsilon=2.0, delta=1e-6, radius=5.0, steps=20, batch_size=1000, beta=1.0, clip=2.0, random_state=0
    )
    assert np.mean((X @ r2.coef > 0) == (yb > 0.5)) > 0.85


def test_presets_follow_spec_formulas_and_are_overridable():
    p = general_preset(10000, 2.0, 1.5, c_m=1.0)
    assert p.batch_size == 100 and p.steps == 100
    assert p.beta == pytest.approx(24 * 2.0 * 10000**1.5 / (1.5 * 100**2)) and p.clip == 24.0
    q = interior_preset(10**6, 1.0, 1.0, 10, 1.0, 1e-6)
    c_dp = 4 * math.sqrt(2) * math.log(1e6) ** 1.5 * math.sqrt(math.log(2e6 / 1e-6)) * math.log(2.5e6)
    assert q.clip == pytest.approx(c_dp) and q.beta == pytest.approx(c_dp**2) and q.steps == math.ceil(1e6**0.25)
    rng = np.random.default_rng(4)
    X, y = _lsq(rng, n=900)
    res = accelerated_dp_srgd(
        X, y, SquaredLoss(), epsilon=1.0, delta=1e-5, radius=1.0, lipschitz=2.0, steps=5, random_state=0
    )  # general preset fills B, beta, clip; T overridden
    assert res.info["steps"] == 5 and res.info["batch_size"] == 30
    with pytest.raises(ValueError, match="lipschitz"):
        accelerated_dp_srgd(X, y, SquaredLoss(), epsilon=1.0, delta=1e-5, radius=1.0)
