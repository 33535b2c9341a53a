"""Uniform / tail / adaptive allocations (spec 004 §4-§5): alignment, the per-user budget
invariant for every allocation (hypothesis), and each rule's definition."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from test_allocation_helpers import interaction_matrices

from privrec.allocation import (
    adaptive_task_weights,
    adaptive_weights,
    enforce_budget,
    tail_weights,
    uniform_weights,
    user_spend,
)


def _counts(m, seed):
    rng = np.random.default_rng(seed)
    return np.maximum(np.diff(m.tocsc().indptr) + rng.normal(0, 2, m.shape[1]), 1.0)


def _all_allocations(m, counts, k, beta, mu, seed):
    return {
        "uniform": (uniform_weights(m, k, rng=seed), float(k)),
        "tail": (tail_weights(m, counts, k, rng=seed), float(k)),
        "adaptive-per-user": (adaptive_weights(m, counts, mu, beta), beta),
        "adaptive-global": (adaptive_weights(m, counts, mu, beta, mode="global"), beta),
        "adaptive-global-inflated": (
            adaptive_weights(m, counts, mu, beta, mode="global", inflation=3.0, beta_bar=beta / 4),
            beta,
        ),
        "adaptive-per-user-inflated": (adaptive_weights(m, counts, mu, beta, inflation=2.0), beta),
    }


@settings(max_examples=60, deadline=None)
@given(interaction_matrices(), st.integers(1, 6), st.floats(0.01, 50.0), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_every_allocation_respects_budget_and_alignment(m, k, beta, mu, seed):
    counts = _counts(m, seed)
    for name, (w, b) in _all_allocations(m, counts, k, beta, mu, seed).items():
        assert w.shape == m.shape, name
        np.testing.assert_array_equal(w.indptr, m.indptr)
        np.testing.assert_array_equal(w.indices, m.indices)
        assert w.dtype == np.float32
        assert np.all(w.data >= 0)
        spend = user_spend(m, w)  # float64 from the stored float32 weights
        assert spend.max(initial=0.0) <= b, name


@settings(max_examples=40, deadline=None)
@given(interaction_matrices(), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_uniform_keeps_min_k_items_with_weight_one(m, k, seed):
    w = uniform_weights(m, k, rng=seed)
    lengths = np.diff(m.indptr)
    kept = np.bincount(np.repeat(np.arange(m.shape[0]), lengths), weights=w.data, minlength=m.shape[0])
    np.testing.assert_array_equal(kept, np.minimum(lengths, k))
    assert set(np.unique(w.data)) <= {0.0, 1.0}


@settings(max_examples=40, deadline=None)
@given(interaction_matrices(), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_tail_keeps_the_k_lowest_count_items_of_each_user(m, k, seed):
    counts = np.round(_counts(m, seed))  # rounding creates ties
    w = tail_weights(m, counts, k, rng=seed)
    for j in range(m.shape[0]):
        s, e = m.indptr[j], m.indptr[j + 1]
        if s == e:
            continue
        c = counts[m.indices[s:e]]
        kept = w.data[s:e] == 1
        assert kept.sum() == min(k, e - s)
        if kept.sum() < e - s:
            assert c[kept].max() <= c[~kept].min()  # every kept item is at most as popular as any dropped one


def test_tail_prefers_rare_items_exactly():
    m = sp.csr_matrix(np.ones((2, 5), dtype=np.float32))
    counts = np.array([50.0, 3.0, 20.0, 1.0, 7.0])
    w = tail_weights(m, counts, 2, rng=0).toarray()
    np.testing.assert_array_equal(w, [[0, 1, 0, 1, 0]] * 2)


@settings(max_examples=40, deadline=None)
@given(interaction_matrices(), st.floats(0.5, 20.0), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_adaptive_per_user_spends_exactly_beta_with_power_law_shape(m, beta, mu, seed):
    counts = _counts(m, seed)
    w = adaptive_weights(m, counts, mu, beta)
    spend = user_spend(m, w)
    nonempty = np.diff(m.indptr) > 0
    np.testing.assert_allclose(spend[nonempty], beta, rtol=3e-6)
    # within a row, w_ij * nhat_i^mu is constant
    for j in np.flatnonzero(nonempty):
        s, e = m.indptr[j], m.indptr[j + 1]
        r = w.data[s:e].astype(np.float64) * counts[m.indices[s:e]] ** mu
        np.testing.assert_allclose(r, r[0], rtol=1e-5)


def test_adaptive_global_follows_eq_11_12():
    rng = np.random.default_rng(3)
    dense = (rng.random((40, 15)) < 0.4).astype(np.float32)
    m = sp.csr_matrix(dense)
    counts = np.maximum(dense.sum(0) + rng.normal(0, 1, 15), 1.0)
    mu, beta, beta_bar, s = 0.25, 4.0, 2.0, 1.5
    w = adaptive_weights(m, counts, mu, beta, mode="global", inflation=s, beta_bar=beta_bar).toarray()
    nh = counts + s
    omega = nh**-mu / math.sqrt(np.sum(nh ** (1 - 2 * mu)) / (40 * beta_bar))
    np.testing.assert_allclose(omega, adaptive_task_weights(counts, mu, beta, 40, beta_bar, s), rtol=1e-12)
    for j in range(40):
        items = np.flatnonzero(dense[j])
        if items.size == 0:
            continue
        scale = min(1.0, math.sqrt(beta / np.sum(omega[items] ** 2)))
        np.testing.assert_allclose(w[j, items], omega[items] * scale, rtol=2e-6)
    # average unclipped spend is beta_bar when counts are exact
    exact = dense.sum(0)
    om = adaptive_task_weights(np.maximum(exact, 1), mu, beta, 40, beta_bar)
    assert np.sum(np.maximum(exact, 1) * om**2) / 40 == pytest.approx(beta_bar)


def test_mu_zero_is_uniform_over_all_items():
    m = sp.csr_matrix(np.ones((3, 4), dtype=np.float32))
    w = adaptive_weights(m, np.array([1.0, 10.0, 100.0, 1000.0]), 0.0, 2.0)
    np.testing.assert_allclose(w.toarray(), math.sqrt(0.5), rtol=1e-6)


def test_enforce_budget_scales_only_offending_rows_in_float32():
    indptr = np.array([0, 3, 5])
    data = np.array([1.0, 1.0, 1.0, 0.1, 0.1], dtype=np.float32)
    out = enforce_budget(indptr, data, 1.0)
    assert out.dtype == np.float32
    spend = np.array([np.sum(out[:3].astype(np.float64) ** 2), np.sum(out[3:].astype(np.float64) ** 2)])
    assert spend[0] <= 1.0 and spend[0] == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_array_equal(out[3:], data[3:])


@pytest.mark.parametrize(
    "call",
    [
        lambda m, c: uniform_weights(m, 0),
        lambda m, c: tail_weights(m, c, 0),
        lambda m, c: tail_weights(m, c[:-1], 2),
        lambda m, c: tail_weights(m, -c, 2),
        lambda m, c: adaptive_weights(m, c, -0.1, 1.0),
        lambda m, c: adaptive_weights(m, c, 1.5, 1.0),
        lambda m, c: adaptive_weights(m, c, 0.5, -1.0),
        lambda m, c: adaptive_weights(m, c, 0.5, 0.0),
        lambda m, c: adaptive_weights(m, c, 0.5, 1.0, inflation=-1.0),
        lambda m, c: adaptive_weights(m, c, 0.5, 1.0, mode="magic"),
        lambda m, c: adaptive_weights(m, np.full(3, np.nan), 0.5, 1.0),
        lambda m, c: enforce_budget(m.indptr, m.data, -2.0),
        lambda m, c: uniform_weights(m.tocoo(), 2),
    ],
)
def test_bad_input(call):
    m = sp.csr_matrix(np.ones((2, 3), dtype=np.float32))
    with pytest.raises(ValueError):
        call(m, np.array([1.0, 2.0, 3.0]))
