"""ExactSolver: the non-private weighted ridge reference (spec 004 §2-§3 reductions)."""

import dp_accounting
import numpy as np
import pytest
from sklearn.linear_model import Ridge

from privrec.privacy import PrivacyLedger
from privrec.solvers import ExactSolver, TaskBatch


def _random_batch(seed=0, m=6, n_units=40, d=3):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 15, m)
    indptr = np.concatenate(([0], np.cumsum(sizes)))
    fid = np.concatenate([rng.choice(n_units, s, replace=False) for s in sizes]).astype(np.int64)
    return TaskBatch(
        indptr, fid, rng.normal(size=(n_units, d)), rng.normal(size=indptr[-1]), rng.uniform(0.1, 2.0, indptr[-1])
    )


def test_matches_sklearn_weighted_ridge_per_task():
    b = _random_batch()
    reg = np.linspace(0.5, 3.0, b.n_tasks)
    res = ExactSolver(reg=reg, dtype=np.float64).solve(b)
    for i in range(b.n_tasks):
        s, e = b.indptr[i], b.indptr[i + 1]
        if s == e:
            continue
        r = Ridge(alpha=reg[i], fit_intercept=False).fit(
            b.features[b.feature_ids[s:e]], b.labels[s:e], sample_weight=b.weights[s:e]
        )
        np.testing.assert_allclose(res.params[i], r.coef_, rtol=1e-8, atol=1e-10)


def test_empty_tasks_get_zero_parameters_even_without_regularisation():
    b = TaskBatch(np.array([0, 0, 2]), np.array([0, 1]), np.eye(2), np.array([1.0, -2.0]), np.ones(2))
    res = ExactSolver(reg=0.0, dtype=np.float64).solve(b)
    np.testing.assert_allclose(res.params, [[0.0, 0.0], [1.0, -2.0]], atol=1e-12)


def test_exact_solver_reports_non_private():
    res = ExactSolver().solve(_random_batch())
    led = PrivacyLedger()
    res.record(led)
    assert isinstance(res.event, dp_accounting.NonPrivateDpEvent)
    assert led.epsilon(1e-5) == float("inf")
    assert res.params.dtype == np.float32


def test_exact_bad_configuration():
    for kw in (
        dict(unobserved_weight=-1.0),
        dict(max_norm=0.0),
        dict(label_bound=-1.0),
        dict(num_threads=0),
        dict(dtype=np.int32),
        dict(num_threads=1.5),
    ):
        with pytest.raises(ValueError):
            ExactSolver(**kw)


def test_exact_weighted_equals_scaled_unweighted_and_numpy():
    """Weights enter as w_e (<theta, x_e> - y_e)^2: the engine's sqrt(w) scaling matches a direct numpy solve."""
    rng = np.random.default_rng(3)
    b = _random_batch()
    w = rng.uniform(0.1, 2.0, b.weights.size)
    from dataclasses import replace

    bw = replace(b, weights=w)
    got = ExactSolver(reg=0.7, dtype=np.float64).solve(bw).params
    x = b.features.astype(np.float64)
    for i in range(b.n_tasks):
        s, e = b.indptr[i], b.indptr[i + 1]
        X = x[b.feature_ids[s:e]]
        A = X.T @ (w[s:e, None] * X) + 0.7 * np.eye(x.shape[1])
        ref = np.linalg.solve(A, X.T @ (w[s:e] * b.labels[s:e]))
        np.testing.assert_allclose(got[i], ref, rtol=1e-8, atol=1e-10)
