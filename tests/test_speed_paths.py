"""Issue 16 fast paths equal their straightforward references.

* Gramian accumulation (``chunk_statistics``): heavy tasks split over several GEMM blocks and light
  tasks batched into zero-padded stacks give the per-task definition sum_e w_e x_e x_e^T;
* GIL-free LAPACK (ctypes) kernels: Cholesky test, SPD solve, projected ridge solve equal the
  scipy / numpy paths;
* SSP with a fixed seed draws exactly the noise of the per-chunk streams (order unchanged) and
  solves the spec's projected systems;
* CG of the ALS half-steps: within tolerance of the exact solve; chunking by bytes changes nothing.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import privrec.solvers._linalg as L
from privrec.privacy import make_rng, symmetric_gaussian_noise
from privrec.privacy.mechanisms import gaussian_noise
from privrec.solvers import SSPSolver, TaskBatch, psd_project
from privrec.solvers import ridge as S
from privrec.solvers._base import NOISE_BLOCK
from privrec.solvers._linalg import (
    chunk_statistics,
    positive_definite_mask,
    prepared_inputs,
    projected_ridge_solve,
    spd_solve,
)


def _skewed_batch(
    seed=0, n_units=400, sizes=(0, 1, 2, 3, 5, 9, 17, 40, 130, 390, 400, 0, 7, 64, 333), d=6, dtype=np.float64
):
    """Tasks of very different sizes (empty, tiny, medium, nearly every unit)."""
    rng = np.random.default_rng(seed)
    fids, labels, weights = [], [], []
    for n in sizes:
        fids.append(np.sort(rng.choice(n_units, size=n, replace=False)))
        labels.append(rng.normal(0, 3, n))
        weights.append(rng.uniform(0, 1.5, n) * (rng.random(n) > 0.1))  # some zero weights
    indptr = np.concatenate([[0], np.cumsum([len(f) for f in fids])])
    feats = rng.normal(size=(n_units, d)).astype(dtype)
    return TaskBatch(
        indptr, np.concatenate(fids).astype(np.int32), feats, np.concatenate(labels), np.concatenate(weights)
    )


def _reference_statistics(batch, max_norm, label_bound):
    x, y = prepared_inputs(batch, max_norm, label_bound, np.float64)
    w = batch.weights.astype(np.float64)
    m, d = batch.n_tasks, batch.dim
    G, b = np.zeros((m, d, d)), np.zeros((m, d))
    for i in range(m):
        s, e = batch.indptr[i], batch.indptr[i + 1]
        xi = x[batch.feature_ids[s:e]]
        G[i] = xi.T @ (w[s:e, None] * xi)
        b[i] = xi.T @ (w[s:e] * y[s:e])
    return G, b


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block, light", [(10**6, 1), (7, 1), (50, 1), (10**6, 10**6), (64, 32), (5, 3)])
@pytest.mark.parametrize("d", [6, 33, 20])  # 33 = 32 + 1 and 20 = 16 + 4: rank-k update + thin product
def test_split_and_batched_gramians_equal_the_per_task_definition(dtype, block, light, d):
    batch = _skewed_batch(dtype=dtype, d=d)
    G_ref, b_ref = _reference_statistics(batch, 1.5, 2.0)
    x, _ = prepared_inputs(batch, 1.5, None, dtype, labels=False)
    for t0, t1 in [(0, batch.n_tasks), (3, 11), (9, 10)]:
        G, b = chunk_statistics(
            batch, x, batch.labels, t0, t1, label_bound=2.0, block_examples=block, light_examples=light
        )
        assert G.dtype == dtype and b.dtype == dtype
        tol = 1e-12 if dtype == np.float64 else 2e-5
        scale = max(1.0, np.abs(G_ref).max())
        np.testing.assert_allclose(G, G_ref[t0:t1], rtol=0, atol=tol * scale)
        np.testing.assert_allclose(b, b_ref[t0:t1], rtol=0, atol=tol * max(1.0, np.abs(b_ref).max()))
        np.testing.assert_array_equal(G, np.swapaxes(G, 1, 2))  # exactly symmetric


def test_one_block_tasks_are_bit_identical_to_the_unblocked_product():
    batch = _skewed_batch(dtype=np.float32)
    x, y = prepared_inputs(batch, 1.5, 2.0, np.float32)
    G, b = chunk_statistics(batch, x, y, 0, batch.n_tasks, block_examples=10**6, light_examples=1)
    for i in range(batch.n_tasks):
        s, e = batch.indptr[i], batch.indptr[i + 1]
        sw = np.sqrt(batch.weights[s:e].astype(np.float32))
        blk = x[batch.feature_ids[s:e]] * sw[:, None]
        np.testing.assert_array_equal(G[i], blk.T @ blk)
        np.testing.assert_array_equal(b[i], (y[s:e] * sw) @ blk)


def test_per_block_label_clipping_equals_clipped_copy():
    batch = _skewed_batch(dtype=np.float32)
    x, y = prepared_inputs(batch, 1.0, 0.7, np.float32)
    for light in (1, 10**6):
        G1, b1 = chunk_statistics(batch, x, y, 0, batch.n_tasks, light_examples=light)
        G2, b2 = chunk_statistics(batch, x, batch.labels, 0, batch.n_tasks, label_bound=0.7, light_examples=light)
        np.testing.assert_array_equal(G1, G2)
        np.testing.assert_array_equal(b1, b2)


# ------------------------------------------------------------------ GIL-free LAPACK kernels
def _stack(rng, m, d, dtype):
    X = rng.normal(size=(m, d, d))
    psd = X @ np.swapaxes(X, 1, 2) / d + 0.1 * np.eye(d)
    ind = X + np.swapaxes(X, 1, 2)
    return psd.astype(dtype), ind.astype(dtype)


@pytest.fixture(params=["ctypes", "fallback"])
def lapack_mode(request, monkeypatch):
    if request.param == "fallback":
        monkeypatch.setattr(L, "_lapack", lambda dtype: None)
    else:
        assert L._lapack(np.float32) is not None and L._lapack(np.float64) is not None
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_positive_definite_mask_matches_eigenvalues(lapack_mode, dtype):
    rng = np.random.default_rng(1)
    psd, ind = _stack(rng, 30, 9, dtype)
    M = np.concatenate([psd, ind])
    for floor in (0.0, 0.3):
        lam_min = np.linalg.eigvalsh(M.astype(np.float64))[:, 0]
        expect = lam_min > floor
        clear = np.abs(lam_min - floor) > 1e-3
        got = positive_definite_mask(M, floor)
        np.testing.assert_array_equal(got[clear], expect[clear])
    M0 = M.copy()
    positive_definite_mask(M, 0.3)
    np.testing.assert_array_equal(M, M0)  # input untouched


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [8, 30])  # below / above the per-matrix Cholesky crossover
def test_spd_solve_equals_lu_and_falls_back_on_indefinite_and_singular(lapack_mode, dtype, d):
    rng = np.random.default_rng(2)
    psd, ind = _stack(rng, 25, d, dtype)
    sing = np.zeros((3, d, d), dtype=dtype)
    sing[:, :2, :2] = np.eye(2)
    A = np.concatenate([psd, ind, sing])
    b = rng.normal(size=(A.shape[0], d)).astype(dtype)
    A0 = A.copy()
    x = spd_solve(A, b)
    np.testing.assert_array_equal(A, A0)
    assert x.dtype == dtype
    ref = np.linalg.solve(A[:50].astype(np.float64), b[:50].astype(np.float64)[..., None])[..., 0]
    tol = 1e-9 if dtype == np.float64 else 5e-3
    np.testing.assert_allclose(x[:50], ref, rtol=tol, atol=tol * np.abs(ref).max())
    np.testing.assert_allclose(x[50:, :2], b[50:, :2], rtol=1e-6)  # pinv of the singular block
    np.testing.assert_allclose(x[50:, 2:], 0, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_projected_ridge_solve_ctypes_equals_scipy_path(dtype, monkeypatch):
    rng = np.random.default_rng(3)
    _, G = _stack(rng, 40, 12, dtype)
    b = rng.normal(size=(40, 12)).astype(dtype)
    shift = rng.uniform(0.1, 2.0, 40)
    fast = projected_ridge_solve(G, b, shift, 0.2)
    monkeypatch.setattr(L, "_lapack", lambda dtype: None)
    slow = projected_ridge_solve(G, b, shift, 0.2)
    ref = np.linalg.solve(
        psd_project(G.astype(np.float64), 0.2) + shift[:, None, None] * np.eye(12), b.astype(np.float64)[..., None]
    )[..., 0]
    tol = 1e-10 if dtype == np.float64 else 1e-4
    scale = np.abs(ref).max()
    np.testing.assert_allclose(fast, slow, rtol=0, atol=tol * scale)
    np.testing.assert_allclose(fast, ref, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [6, 40])  # numpy eigh below 32, tridiagonal + rank-k correction above
@pytest.mark.parametrize("floor", [0.0, 0.25])
def test_projected_solve_with_gravity_equals_projection_then_solve(lapack_mode, dtype, d, floor):
    rng = np.random.default_rng(d)
    _, G = _stack(rng, 30, d, dtype)
    G[:5] = _stack(rng, 5, d, dtype)[0]  # some positive definite ones (k = 0)
    Y = rng.normal(size=(d, d))
    extra = (Y @ Y.T / d).astype(dtype)
    b = rng.normal(size=(30, d)).astype(dtype)
    shift = rng.uniform(0.2, 2.0, 30)
    G0 = G.copy()
    got = L.projected_solve(G, b, shift, extra, floor)
    np.testing.assert_array_equal(G, G0)
    ref = np.linalg.solve(
        psd_project(G.astype(np.float64), floor) + extra + shift[:, None, None] * np.eye(d),
        b.astype(np.float64)[..., None],
    )[..., 0]
    tol = 1e-10 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(ref).max())


# ------------------------------------------------------------------ SSP: same noise, same systems
def _ssp_reference(batch, solver, seed):
    """Algorithm 1 written plainly: per public block of NOISE_BLOCK tasks, its own spawned stream;
    Gramian noise first, then RHS noise; projection by eigenvalue floor, ridge, global term, then
    solve (float64)."""
    std = solver.noise_stds()
    rng = make_rng(seed)
    dtype = np.dtype(solver.dtype)
    x, y = prepared_inputs(batch, solver.max_norm, solver.label_bound, dtype)
    gram = None
    if solver.unobserved_weight > 0:
        g0 = x.T @ x + symmetric_gaussian_noise((), batch.dim, std["global"], rng, dtype)
        gram = psd_project(g0) * dtype.type(solver.unobserved_weight)
    G_all, b_all = _reference_statistics(batch, solver.max_norm, solver.label_bound)
    m = batch.n_tasks
    chunks = [(t0, min(t0 + NOISE_BLOCK, m)) for t0 in range(0, m, NOISE_BLOCK)]
    rngs = rng.spawn(len(chunks))
    out = []
    for c, (t0, t1) in enumerate(chunks):
        G = G_all[t0:t1] + symmetric_gaussian_noise((t1 - t0,), batch.dim, std["gramian"], rngs[c], dtype)
        b = b_all[t0:t1] + gaussian_noise((t1 - t0, batch.dim), std["rhs"], rngs[c], dtype)
        A = psd_project(G.astype(np.float64), solver.eig_floor) + solver.reg * np.eye(batch.dim)
        if gram is not None:
            A = A + gram
        out.append(np.linalg.solve(A, b.astype(np.float64)[..., None])[..., 0])
    return np.concatenate(out)


@pytest.mark.parametrize("alpha0", [0.0, 0.4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [6, 40])
def test_ssp_draws_the_same_noise_in_the_same_order_and_solves_the_projected_systems(alpha0, dtype, d):
    batch = _skewed_batch(seed=5, dtype=dtype, d=d)
    spend = batch.unit_budget()
    solver = SSPSolver(
        noise_multiplier=0.8,
        budget=spend,
        max_norm=1.5,
        label_bound=2.0,
        reg=0.9,
        unobserved_weight=alpha0,
        dtype=dtype,
        chunk_tasks=4,
        chunk_examples=300,
    )
    got = solver.solve(batch, rng=123).params
    ref = _ssp_reference(batch, solver, 123)
    tol = 1e-8 if dtype == np.float64 else 2e-3
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))
    again = solver.solve(batch, rng=123).params
    np.testing.assert_array_equal(got, again)  # fixed seed: bit-identical
    threaded = SSPSolver(**{**solver.__dict__, "num_threads": 2}).solve(batch, rng=123).params
    np.testing.assert_array_equal(got, threaded)
    # the noise layout is public (blocks of NOISE_BLOCK tasks): other compute chunks, same noise
    rechunked = SSPSolver(**{**solver.__dict__, "chunk_tasks": 4096, "chunk_examples": 1 << 20}).solve(batch, rng=123)
    np.testing.assert_allclose(rechunked.params, got, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))


def test_ssp_noise_blocks_are_public_and_a_block_release_is_reproducible():
    """Each block of NOISE_BLOCK tasks draws from its own seed: re-releasing a block (a retried task in
    the distributed backend) gives the identical values; blocks never share a stream."""
    batch = _skewed_batch(seed=2, dtype=np.float64, d=5)
    solver = SSPSolver(noise_multiplier=1.0, budget=batch.unit_budget(), max_norm=1.0, dtype=np.float64)
    seeds = SSPSolver.noise_seeds(np.random.default_rng(9), 3 * NOISE_BLOCK + 1)
    assert len(seeds) == 4 and len({s.entropy for s in seeds}) == 1 and len({s.spawn_key for s in seeds}) == 4
    x, _ = prepared_inputs(batch, solver.max_norm, None, np.float64, labels=False)
    G, b = chunk_statistics(batch, x, batch.labels, 0, batch.n_tasks, label_bound=solver.label_bound)
    reg = np.ones(batch.n_tasks)
    first, _ = solver.release_block(G.copy(), b, reg, None, seeds[1])
    again, _ = solver.release_block(G.copy(), b, reg, None, seeds[1])
    other, _ = solver.release_block(G.copy(), b, reg, None, seeds[2])
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


# ------------------------------------------------------------------ ALS half-steps
def _ratings(n_rows=300, n_cols=120, density=0.08, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_rows, n_cols)) < density) * rng.integers(1, 6, (n_rows, n_cols))
    dense[:5, :60] = rng.integers(1, 6, (5, 60))  # a few long rows
    return sp.csr_matrix(dense.astype(np.float32))


@pytest.mark.parametrize("gravity", [False, True])
def test_cg_solution_within_tolerance_of_exact(gravity):
    R = _ratings()
    rng = np.random.default_rng(1)
    d = 10
    F = (rng.normal(size=(R.shape[1], d)) * 0.5).astype(np.float32)
    reg = np.full(R.shape[0], 2.0)
    G = (0.05 * F.T @ F).astype(np.float32) if gravity else None
    exact = S.solve_rows(R.indptr, R.indices, R.data, F, reg, G, "cholesky")
    x0 = exact + rng.normal(size=exact.shape).astype(np.float32) * 0.05  # warm start near the solution
    three = S.solve_rows(R.indptr, R.indices, R.data, F, reg, G, "cg", x0.copy(), cg_steps=3)
    many = S.solve_rows(R.indptr, R.indices, R.data, F, reg, G, "cg", x0.copy(), cg_steps=d)
    err0 = np.linalg.norm(x0 - exact, axis=1).max()
    assert np.linalg.norm(three - exact, axis=1).max() < 0.2 * err0  # 3 warm-started steps: most of the way
    np.testing.assert_allclose(many, exact, rtol=0, atol=1e-3 * np.abs(exact).max())  # d steps: exact


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_chunking_by_bytes_does_not_change_the_solution(solver):
    R = _ratings(seed=4)
    rng = np.random.default_rng(2)
    F = (rng.normal(size=(R.shape[1], 7)) * 0.5).astype(np.float32)
    reg = np.full(R.shape[0], 1.0)
    x0 = rng.normal(size=(R.shape[0], 7)).astype(np.float32)
    ref = S.solve_rows(R.indptr, R.indices, R.data, F, reg, None, solver, x0.copy(), max_slots=10**7, num_threads=1)
    for slots in (256, 1000):
        got = S.solve_rows(R.indptr, R.indices, R.data, F, reg, None, solver, x0.copy(), max_slots=slots, num_threads=2)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_chunk_slots_bound_the_gathered_bytes_and_reused_buffer_gathers_the_same():
    assert S.chunk_slots(65, 4) * 65 * 4 <= S.DEFAULT_CHUNK_BYTES
    assert S.chunk_slots(10**6, 8) == 256  # floor for huge d
    R = _ratings(seed=6)
    F_ext = np.vstack([np.random.default_rng(0).normal(size=(R.shape[1], 5)), np.zeros((1, 5))]).astype(np.float32)
    for rows, length in S.row_chunks(np.diff(R.indptr), 300):
        X1, t1 = S.gather_padded(R.indptr, R.indices, R.data, rows, length, F_ext)
        X2, t2 = S.gather_padded(R.indptr, R.indices, R.data, rows, length, F_ext, reuse=True)
        np.testing.assert_array_equal(X1, X2)
        np.testing.assert_array_equal(t1, t2)


# ------------------------------------------------------------------ benchmark matrix
def test_heavy_head_matrix_is_seeded_and_heavy(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    monkeypatch.setattr(sys, "argv", ["bench_speed.py"])
    import bench_speed

    spec = dict(n_users=2000, n_items=800, n_interactions=60_000, exponent=1.1, min_per_user=5)
    A = bench_speed.heavy_head_matrix(**spec, seed=0)
    B = bench_speed.heavy_head_matrix(**spec, seed=0)
    assert (A != B).nnz == 0 and A.shape == (2000, 800)
    assert 0.8 * 60_000 <= A.nnz <= 60_000
    dedup = A.copy()
    dedup.sum_duplicates()
    assert dedup.nnz == A.nnz  # distinct (user, item) pairs
    counts = np.sort(np.bincount(A.indices, minlength=800))[::-1]
    assert counts[0] > 0.5 * 2000  # the top item is rated by most users
    assert counts[:80].sum() > 0.5 * A.nnz  # top 10% of items hold most interactions
