"""ALS (spec 004 §6/§8): exact reductions against dense closed-form ridge, CG, real-data RMSE."""

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.models import ALS, ImplicitALS
from privrec.models.als import half_step
from privrec.solvers.ridge import frequency_regularization, row_chunks, solve_rows


def _ratings(n_users=40, n_items=25, density=0.3, seed=0, empty_user=None, empty_item=None):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < density
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
    if empty_user is not None:
        mask[empty_user] = False
    if empty_item is not None:
        mask[:, empty_item] = False
    vals = rng.integers(1, 6, size=mask.shape).astype(np.float32)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


def _dense_half_step(R, F, fixed_bias, mu, reg_rows, alpha0, with_bias):
    """Per-row closed-form ridge with numpy.linalg.solve (the reference)."""
    D = R.toarray().astype(np.float64)
    n, d = D.shape[0], F.shape[1]
    Fa = np.hstack([F, np.ones((F.shape[0], 1))]) if with_bias else F.astype(np.float64)
    G = np.zeros((Fa.shape[1], Fa.shape[1]))
    G[:d, :d] = alpha0 * F.T.astype(np.float64) @ F
    out = np.zeros((n, Fa.shape[1]))
    for r in range(n):
        J = np.flatnonzero(D[r])
        if J.size == 0:
            continue
        t = D[r, J] - mu - (fixed_bias[J] if with_bias else 0.0)
        A = Fa[J].T @ Fa[J] + reg_rows[r] * np.eye(Fa.shape[1]) + G
        out[r] = np.linalg.solve(A, Fa[J].T @ t)
    return out


@pytest.mark.parametrize("d", [5, 12])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("alpha0", [0.0, 0.3])
def test_half_step_equals_dense_ridge(with_bias, alpha0, d):
    """Rows shorter than d take the dual (L x L) path, longer rows the primal one: both exact."""
    rng = np.random.default_rng(0)
    dense = np.zeros((40, 25), dtype=np.float32)
    for r in range(40):  # row lengths 0..24: both paths and an empty row
        if r != 3:
            dense[r, rng.choice(25, size=r % 25, replace=False)] = rng.integers(1, 6, size=r % 25)
    R = sp.csr_matrix(dense)
    counts = np.diff(R.indptr)
    assert (counts[counts > 0] < d + with_bias).any() and (counts >= d + with_bias).any()
    rng = np.random.default_rng(1)
    F = rng.standard_normal((R.shape[1], d))
    fb = rng.standard_normal(R.shape[1])
    reg, _ = frequency_regularization(np.diff(R.indptr), 2.0, 0.7)
    X, b = half_step(R, F, fb, 3.1, reg, alpha0, with_bias)
    ref = _dense_half_step(R, F, fb, 3.1, reg, alpha0, with_bias)
    np.testing.assert_allclose(X, ref[:, :d], rtol=1e-8, atol=1e-10)
    if with_bias:
        np.testing.assert_allclose(b, ref[:, d], rtol=1e-8, atol=1e-10)
    assert np.all(X[3] == 0)  # a row without data gets the zero solution


def test_frequency_regularization_normalisation():
    counts = np.array([0, 1, 5, 50, 200])
    reg, norm = frequency_regularization(counts, 3.0, 1.0)
    np.testing.assert_allclose(reg, 3.0 * (counts + 1.0) * norm)
    # the reference's normalisation: sum(count * w) = sum(count), w = reg_r / reg
    np.testing.assert_allclose(np.sum(counts * reg / 3.0), counts.sum())
    np.testing.assert_array_equal(frequency_regularization(counts, 3.0, 0.0)[0], np.full(5, 3.0))


def test_row_chunks_cover_every_nonempty_row_once_with_bounded_padding():
    counts = np.random.default_rng(0).zipf(1.6, size=5000).clip(0, 3000)
    counts[::7] = 0
    seen = []
    for rows, length in row_chunks(counts, max_slots=4096):
        assert length == counts[rows].max()
        assert len(rows) == 1 or len(rows) * length <= 4096
        assert counts[rows].min() >= 1 and length <= max(int(counts[rows].min() * 1.25), counts[rows].min() + 4)
        seen.append(rows)
    seen = np.concatenate(seen)
    assert np.array_equal(np.sort(seen), np.flatnonzero(counts > 0))


def test_threaded_and_single_thread_solves_agree():
    R = _ratings(200, 60, 0.2)
    F = np.random.default_rng(2).standard_normal((60, 8)).astype(np.float32)
    reg = np.full(200, 0.5, dtype=np.float32)
    a = solve_rows(R.indptr, R.indices, R.data, F, reg, max_slots=64, num_threads=1)
    b = solve_rows(R.indptr, R.indices, R.data, F, reg, max_slots=64, num_threads=2)
    np.testing.assert_array_equal(a, b)


def _dense_als(R, factors, reg, exponent, alpha0, iterations, init_scale, seed):
    """Reference biased ALS built from the dense half-step."""
    D = R.toarray().astype(np.float64)
    mu = D[D != 0].mean()
    V = np.random.default_rng(seed).standard_normal((R.shape[1], factors)) * init_scale
    bi = np.zeros(R.shape[1])
    reg_u, _ = frequency_regularization(np.count_nonzero(D, axis=1), reg, exponent)
    reg_i, _ = frequency_regularization(np.count_nonzero(D, axis=0), reg, exponent)
    RT = sp.csr_matrix(D.T)
    for _ in range(iterations):
        su = _dense_half_step(R, V, bi, mu, reg_u, alpha0, True)
        U, bu = su[:, :factors], su[:, factors]
        si = _dense_half_step(RT, U, bu, mu, reg_i, alpha0, True)
        V, bi = si[:, :factors], si[:, factors]
    return U, V, bu, bi, mu


def test_als_fit_equals_dense_reference():
    R = _ratings(empty_item=4)
    m = ALS(
        solver="cholesky",
        factors=4,
        regularization=1.5,
        reg_exponent=1.0,
        unobserved_weight=0.05,
        iterations=3,
        dtype=np.float64,
        random_state=7,
    ).fit(R)
    U, V, bu, bi, mu = _dense_als(R, 4, 1.5, 1.0, 0.05, 3, 0.1, 7)
    np.testing.assert_allclose(m.item_factors_, V, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(m.user_factors_, U, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(m.item_bias_, bi, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(m.user_bias_, bu, rtol=1e-7, atol=1e-9)
    assert float(m.global_mean_) == pytest.approx(mu)
    assert np.all(m.item_factors_[4] == 0) and m.item_bias_[4] == 0  # never-seen item
    pred = m.predict([0, 1, 2], [4, 4, 4])
    np.testing.assert_allclose(pred, mu + m.user_bias_[:3], rtol=1e-6)


def test_float32_default_and_cg_converges_to_exact():
    R = _ratings(120, 50, 0.25, seed=3)
    exact = ALS(factors=6, regularization=5.0, iterations=4, random_state=0).fit(R)
    assert exact.item_factors_.dtype == np.float32 and exact.user_factors_.dtype == np.float32
    F = exact.item_factors_
    reg = np.full(R.shape[0], 0.5, dtype=np.float32)
    ex = solve_rows(R.indptr, R.indices, R.data, F, reg, solver="cholesky")
    cg = solve_rows(R.indptr, R.indices, R.data, F, reg, solver="cg", cg_steps=12)
    np.testing.assert_allclose(cg, ex, rtol=2e-3, atol=2e-3)
    fast = ALS(factors=6, regularization=5.0, iterations=4, solver="cg", random_state=0).fit(R)
    rows, cols = R.nonzero()
    err_exact = np.sqrt(np.mean((exact.predict(rows, cols) - R.data) ** 2))
    err_cg = np.sqrt(np.mean((fast.predict(rows, cols) - R.data) ** 2))
    assert err_cg < err_exact * 1.2


def test_recalculate_user_matches_training_factors():
    R = _ratings(30, 20, 0.4, seed=5)
    m = ALS(factors=3, iterations=5, random_state=0).fit(R)
    # the projection is the exact user step against the final item side
    U, bu = half_step(
        R,
        m.item_factors_,
        m.item_bias_,
        float(m.global_mean_),
        frequency_regularization(np.diff(R.indptr), m.regularization, m.reg_exponent)[0],
        0.0,
        True,
    )
    np.testing.assert_allclose(m.transform(R), U, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.recalculate_user(2, R[2]), U[2], rtol=1e-5, atol=1e-6)


def test_implicit_wrapper_api():
    R = _ratings(60, 30, 0.2, seed=1)
    m = ImplicitALS(factors=8, iterations=3, num_threads=1, random_state=0).fit(R)
    assert m.item_factors_.shape == (30, 8) and m.user_factors_.shape == (60, 8)
    ids, scores = m.recommend(np.arange(5), R[:5], N=4)
    assert ids.shape == (5, 4)
    liked = [set(R[u].indices) for u in range(5)]
    assert all(not (set(ids[u]) & liked[u]) for u in range(5))
    u = m.recalculate_user(0, R[0])
    assert u.shape == (8,)


def _shared_datasets() -> Path:
    env = os.environ.get("PRIVREC_SHARED_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "datasets"


def test_ml100k_rmse_with_documented_defaults():
    path = _shared_datasets() / "ml-100k" / "u.data"
    if not path.exists():
        pytest.skip("ML-100K not available (set PRIVREC_SHARED_DATASETS)")
    raw = np.loadtxt(path, dtype=np.int64)
    u, i, r = raw[:, 0] - 1, raw[:, 1] - 1, raw[:, 2].astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(r))
    n_tr, n_va = int(0.8 * len(r)), int(0.9 * len(r))
    tr, va, te = perm[:n_tr], perm[n_tr:n_va], perm[n_va:]
    R = sp.csr_matrix((r[tr], (u[tr], i[tr])), shape=(u.max() + 1, i.max() + 1))
    m = ALS(random_state=0).fit(R)  # documented defaults (tuned on the validation split)

    def rmse(idx):
        return float(np.sqrt(np.mean((m.predict(u[idx], i[idx]) - r[idx]) ** 2)))

    val, test = rmse(va), rmse(te)
    print(f"ML-100K ALS defaults: validation RMSE {val:.4f}, test RMSE {test:.4f}")
    assert test <= 0.92
    assert val <= 0.92
