"""The per-user leave-one-out choice at the cost of a user step (issue 44): the batched float32
Cholesky path of :mod:`privrec.models.billboard` makes the same per-user choices and the same
projections (within float32 tolerance) as the eigendecomposition path it replaced, which is kept
below as the reference."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.data.synthetic import low_rank_interactions
from privrec.models import billboard as B

ML100K = Path(os.environ.get("PRIVREC_DATA", "/work/shared/datasets")) / "ml-100k"


# ------------------------------------------------------------------------------------ the old code
def _old_user_chunks(indptr, width, chunk=8192, chunk_bytes=64 << 20):
    n_rows = len(indptr) - 1
    per_rating = max(1, width * width * 8)
    start = 0
    while start < n_rows:
        limit = indptr[start] + max(1, chunk_bytes // per_rating)
        stop = int(np.searchsorted(indptr, limit, side="right")) - 1
        stop = min(n_rows, max(start + 1, stop), start + chunk)
        yield start, stop
        start = stop


def _old_ridge_loo(rows, y, X_items, reg, grid):
    """``billboard._ridge_loo`` before issue 44: float64 per-rating outer products, batched eigh."""
    n_rows = rows.shape[0]
    width = X_items.shape[1]
    coef = np.zeros((n_rows, width))
    best = np.full(n_rows, np.inf)
    indptr, indices = rows.indptr, rows.indices
    for start, stop in _old_user_chunks(indptr, width):
        lo, hi = indptr[start], indptr[stop]
        if hi == lo:
            best[start:stop] = 0.0
            continue
        e = np.asarray(y[lo:hi], dtype=np.float64)
        local = np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1]))
        X = X_items[indices[lo:hi]]
        starts = indptr[start:stop] - lo
        nonempty = np.diff(indptr[start : stop + 1]) > 0
        G = np.zeros((stop - start, width, width))
        G[nonempty] = np.add.reduceat(X[:, :, None] * X[:, None, :], starts[nonempty], axis=0)
        evals, Q = np.linalg.eigh(G)
        evals = np.maximum(evals, 0.0)
        Z = np.einsum("kd,kdm->km", X, Q[local])
        c = np.zeros((stop - start, width))
        c[nonempty] = np.add.reduceat(Z * e[:, None], starts[nonempty], axis=0)
        chunk_best = np.full(stop - start, np.inf)
        chunk_lam = np.ones(stop - start)
        for mult in grid:
            lam = reg[start:stop] * mult
            inv = 1.0 / (evals + lam[:, None])
            fitted = np.einsum("km,km->k", Z, (c * inv)[local])
            hat = np.einsum("km,km->k", Z * Z, inv[local])
            loo = (e - fitted) / np.maximum(1.0 - hat, 1e-12)
            press = np.bincount(local, weights=loo * loo, minlength=stop - start)
            better = press < chunk_best
            chunk_best = np.where(better, press, chunk_best)
            chunk_lam = np.where(better, lam, chunk_lam)
        empty = np.diff(indptr[start : stop + 1]) == 0
        chunk_best[empty] = 0.0
        coef[start:stop] = np.einsum("udm,um->ud", Q, c / (evals + chunk_lam[:, None]))
        best[start:stop] = chunk_best
    return coef, best


def _old_shrunk_projection(rows, item_factors, item_bias, global_mean, reg, grid=(1.0,)):
    y = rows.data.astype(np.float64) - float(global_mean) - np.asarray(item_bias, dtype=np.float64)[rows.indices]
    reg = np.asarray(reg, dtype=np.float64)
    n_rows = rows.shape[0]
    n = np.diff(rows.indptr).astype(np.float64)
    r_idx = np.repeat(np.arange(n_rows), np.diff(rows.indptr))
    b_only = B.user_bias(rows, y, reg)
    h = 1.0 / (n + reg)
    loo_b = (y - b_only[r_idx]) / np.maximum(1.0 - h[r_idx], 1e-12)
    press_b = np.bincount(r_idx, weights=loo_b * loo_b, minlength=n_rows)
    V = np.asarray(item_factors, dtype=np.float64)
    aug = np.hstack([V, np.ones((V.shape[0], 1))])
    coef, press_j = _old_ridge_loo(rows, y, aug, reg, tuple(grid))
    joint = press_j < press_b
    dtype = item_factors.dtype
    U = np.where(joint[:, None], coef[:, :-1], 0.0).astype(dtype)
    b = np.where(joint, coef[:, -1], b_only).astype(dtype)
    return U, b, np.where(joint, reg * float(grid[0]), np.inf), press_j, press_b


# ------------------------------------------------------------------------------------ the comparison
def _ml100k_sized():
    with pytest.warns(UserWarning, match="top-10% share"):
        data = low_rank_interactions(943, 1682, 100_000, random_state=0)
    return data.interactions.matrix.tocsr()


def _check_same(rows, width, ridge, seed=0):
    rng = np.random.default_rng(seed)
    n_items = rows.shape[1]
    V = (0.3 * rng.standard_normal((n_items, width))).astype(np.float32)
    bias = (0.3 * rng.standard_normal(n_items)).astype(np.float32)
    reg = ridge * (1.0 + np.diff(rows.indptr) / 100.0)
    U0, b0, c0, pj, pb = _old_shrunk_projection(rows, V, bias, 3.5, reg)
    U1, b1, c1 = B.shrunk_projection(rows, V, bias, 3.5, reg)
    assert U1.dtype == np.float32 and b1.dtype == np.float32
    # the same choice for every user whose two PRESS values are not a float32 tie
    clear = np.abs(pj - pb) > 1e-4 * np.maximum(np.abs(pb), 1e-12)
    np.testing.assert_array_equal(c1[clear], c0[clear])
    assert np.mean(c1 == c0) >= 0.999
    same = c1 == c0
    assert 0.02 < np.isfinite(c0).mean() < 0.98  # both choices occur
    np.testing.assert_allclose(U1[same], U0[same], rtol=1e-3, atol=2e-5)
    np.testing.assert_allclose(b1[same], b0[same], rtol=1e-3, atol=2e-5)


@pytest.mark.parametrize("width,ridge", [(8, 1.0), (8, 30.0), (32, 3.0)])
def test_same_choices_and_projections_as_the_eigh_code_on_ml100k_sized_data(width, ridge):
    _check_same(_ml100k_sized(), width, ridge)


@pytest.mark.skipif(not (ML100K / "u.data").is_file(), reason="ML-100K not available")
def test_same_choices_and_projections_as_the_eigh_code_on_ml100k():
    from privrec.data import load_dataset

    rows = load_dataset("ml-100k", data_dir=ML100K).matrix.tocsr().astype(np.float64)
    _check_same(rows, 16, 5.0, seed=1)


def test_float64_inputs_keep_float64_precision_and_users_are_independent():
    rows = _ml100k_sized()[:200]
    rng = np.random.default_rng(3)
    X = rng.standard_normal((rows.shape[1], 6))
    y = rng.standard_normal(rows.nnz)
    reg = np.full(rows.shape[0], 2.0)
    coef, press = B._ridge_loo(rows, y, X, reg, (0.5, 1.0, 4.0))
    ref_coef, ref_press = _old_ridge_loo(rows, y, X, reg, (0.5, 1.0, 4.0))
    np.testing.assert_allclose(press, ref_press, rtol=1e-9)
    np.testing.assert_allclose(coef, ref_coef, rtol=1e-8, atol=1e-12)
    # a user's result depends on their own ratings only, whoever else is in the batch
    keep = np.arange(rows.shape[0]) % 3 != 0
    sub_coef, sub_press = B._ridge_loo(rows[keep], y[np.repeat(keep, np.diff(rows.indptr))], X, reg[keep], (1.0,))
    full_coef, full_press = B._ridge_loo(rows, y, X, reg, (1.0,))
    np.testing.assert_array_equal(sub_coef, full_coef[keep])
    np.testing.assert_array_equal(sub_press, full_press[keep])


def test_padding_is_bounded_and_depends_on_the_count_only():
    counts = np.arange(0, 5000)
    length = B._padded_length(counts)
    assert np.all(length >= counts)
    assert np.all(length[9:] <= 1.25 * counts[9:])
    assert np.array_equal(length[:9], counts[:9])
    groups = list(B._groups(np.array([0, 3, 17, 17, 3, 2000, 0])))
    seen = np.sort(np.concatenate([g for g, _ in groups]))
    np.testing.assert_array_equal(seen, [1, 2, 3, 4, 5])  # users without ratings are left out
    assert all(np.unique(B._padded_length(np.array([0, 3, 17, 17, 3, 2000, 0])[g])).size == 1 for g, _ in groups)


def test_empty_users_and_a_singular_gramian_with_zero_ridge():
    rows = sp.csr_matrix(([5.0, 4.0, 3.0], ([0, 0, 2], [0, 1, 1])), shape=(3, 4))
    X = np.ones((4, 3), dtype=np.float32)  # rank one: X^T X is singular
    coef, press = B._ridge_loo(rows, np.array([1.0, -1.0, 0.5]), X, np.zeros(3), (1.0,))
    assert np.all(np.isfinite(coef)) and np.all(np.isfinite(press))
    assert press[1] == 0.0 and not coef[1].any()  # no ratings: zeros, PRESS 0
