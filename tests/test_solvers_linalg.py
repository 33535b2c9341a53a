"""Fast paths of the SSP item step (spec 004 §2) equal their plain definitions."""

import numpy as np
import pytest
from test_solvers_ssp import _batch

from privrec.privacy import add_symmetric_gaussian_noise as add_symmetric_noise
from privrec.privacy import symmetric_gaussian_noise
from privrec.privacy.mechanisms import gaussian_noise
from privrec.solvers import SSPSolver, psd_project, weighted_statistics
from privrec.solvers._linalg import projected_ridge_solve


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 2, 7])
def test_in_place_symmetric_noise_draws_exactly_the_mechanisms_noise(dtype, d):
    rng = np.random.default_rng(3)
    G = rng.normal(size=(5, d, d)).astype(dtype)
    G = G + np.swapaxes(G, -1, -2)
    ref = G + symmetric_gaussian_noise((5,), d, 2.5, np.random.default_rng(11), dtype)
    add_symmetric_noise(G, 2.5, np.random.default_rng(11))
    assert G.dtype == dtype
    np.testing.assert_array_equal(G, ref)


def _stack(rng, m, d, kind):
    X = rng.normal(size=(m, d, d))
    if kind == "psd":
        return X @ np.swapaxes(X, -1, -2) / d
    if kind == "singular":  # rank d // 2: eigenvalues exactly 0 are kept at the floor
        Y = X[:, :, : d // 2]
        return Y @ np.swapaxes(Y, -1, -2)
    return (X + np.swapaxes(X, -1, -2)) * 2.0  # indefinite, like a noisy Gramian


def _reference(G, b, shift, floor):
    """Project (eigenvalue floor), then add the ridge, then solve: the spec's definition."""
    A = psd_project(G.astype(np.float64), floor) + np.asarray(shift, dtype=np.float64)[:, None, None] * np.eye(
        G.shape[-1]
    )
    return np.linalg.solve(A, b.astype(np.float64)[..., None])[..., 0]


@pytest.mark.parametrize("kind", ["psd", "singular", "indefinite"])
@pytest.mark.parametrize("d", [1, 3, 16, 64])
@pytest.mark.parametrize("floor", [0.0, 0.3])
def test_projected_ridge_solve_equals_projection_then_ridge_then_solve(kind, d, floor):
    rng = np.random.default_rng(d)
    m = 40
    G = _stack(rng, m, d, kind)
    b = rng.normal(size=(m, d)) * 3
    shift = rng.uniform(0.05, 5.0, size=m)
    ref = _reference(G, b, shift, floor)
    G0 = G.copy()
    out = projected_ridge_solve(G, b, shift, floor)
    np.testing.assert_array_equal(G, G0)  # input untouched
    scale = np.max(np.abs(ref), axis=1, keepdims=True)
    assert np.max(np.abs(out - ref) / scale) <= 1e-10
    out32 = projected_ridge_solve(G.astype(np.float32), b.astype(np.float32), shift.astype(np.float32), floor)
    assert out32.dtype == np.float32
    assert np.max(np.abs(out32 - ref) / scale) <= 1e-5 * max(1.0, d / 16)
    # scalar shift
    np.testing.assert_allclose(
        projected_ridge_solve(G, b, 1.5, floor), _reference(G, b, np.full(m, 1.5), floor), rtol=1e-9, atol=1e-11
    )


def test_projected_ridge_solve_zero_ridge_uses_the_pseudo_inverse():
    rng = np.random.default_rng(0)
    G = _stack(rng, 10, 8, "indefinite")
    b = rng.normal(size=(10, 8))
    out = projected_ridge_solve(G, b, 0.0, 0.0)
    lam, V = np.linalg.eigh(G)
    ref = np.stack(
        [
            np.linalg.pinv((V[i] * np.maximum(lam[i], 0)) @ V[i].T, rcond=8 * np.finfo(float).eps) @ b[i]
            for i in range(10)
        ]
    )
    np.testing.assert_allclose(out, ref, rtol=1e-8, atol=1e-10)
    assert projected_ridge_solve(np.zeros((0, 8, 8)), np.zeros((0, 8)), 1.0).shape == (0, 8)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_seeded_ssp_solve_equals_statistics_plus_noise_projected_then_ridge(dtype):
    """End to end: same statistics, same noise draws, projection then ridge then solve."""
    batch = _batch(seed=2, n_users=120, n_items=30, d=6)
    solver = SSPSolver(
        noise_multiplier=0.8,
        budget=3.0,
        max_norm=1.5,
        label_bound=4.0,
        reg=np.linspace(0.1, 2, 30),
        eig_floor=0.2,
        dtype=dtype,
        num_threads=1,
    )
    res = solver.solve(batch, rng=np.random.default_rng(5))
    std = solver.noise_stds()
    (r,) = np.random.default_rng(5).spawn(1)  # one chunk: the solver's first spawned generator
    G, b = weighted_statistics(batch, 1.5, 4.0, dtype=dtype)
    G += symmetric_gaussian_noise((30,), 6, std["gramian"], r, dtype)
    b += gaussian_noise(b.shape, std["rhs"], r, dtype)
    ref = _reference(G, b, np.linspace(0.1, 2, 30), 0.2)
    assert res.info["projected_tasks"] > 0
    tol = 1e-10 if dtype == np.float64 else 2e-5
    assert np.max(np.abs(res.params - ref)) <= tol * np.max(np.abs(ref))


def test_projected_ridge_solve_workspace_and_eigensolver_fallback(monkeypatch):
    import types

    import privrec.solvers._linalg as la

    rng = np.random.default_rng(1)
    G = _stack(rng, 12, 10, "indefinite")
    b = rng.normal(size=(12, 10))
    ref = _reference(G, b, np.full(12, 0.7), 0.0)
    np.testing.assert_allclose(projected_ridge_solve(G.copy(), b, 0.7, overwrite_g=True), ref, rtol=1e-9, atol=1e-11)
    # a tridiagonal eigensolver that reports non-convergence: the dense fallback gives the same answer
    real = la.lapack
    failing = types.SimpleNamespace(dsytrd=real.dsytrd, dstevd=lambda d, e: (d * 0, np.zeros((d.size, d.size)), 1))
    monkeypatch.setattr(la, "lapack", failing)
    np.testing.assert_allclose(projected_ridge_solve(G, b, 0.7), ref, rtol=1e-9, atol=1e-11)


def test_map_chunks_cost_order_changes_only_the_schedule():
    import threading

    from privrec.solvers._linalg import chunk_costs, map_chunks

    chunks = [(0, 3), (3, 4), (4, 9), (9, 10)]
    indptr = np.array([0, 1, 2, 3, 500, 501, 502, 503, 504, 505, 9000])
    costs = chunk_costs(indptr, chunks)
    # examples + 1200 per task: the last chunk (one task with 8495 examples) is the most costly
    assert costs == [3 + 3600, 497 + 1200, 5 + 6000, 8495 + 1200]
    started = []
    lock = threading.Lock()
    first_two = threading.Barrier(2)

    def fn(i, c):
        with lock:
            started.append(i)
            n = len(started)
        if threading.current_thread() is not threading.main_thread() and n <= 2:
            first_two.wait(timeout=30)  # neither worker takes a third chunk before both started one
        return (i, c[1] - c[0])

    expected = [(i, c[1] - c[0]) for i, c in enumerate(chunks)]
    assert map_chunks(fn, chunks, 2, costs) == expected  # results in the chunks' order
    assert set(started[:2]) == {3, 2}  # the two most costly chunks were started first
    started.clear()
    assert map_chunks(fn, chunks, 1, costs) == expected and started == [0, 1, 2, 3]
    first_two.reset()
    started.clear()
    assert map_chunks(fn, chunks, 2) == expected and set(started[:2]) == {0, 1}


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_seeded_ssp_solve_does_not_depend_on_threads_or_schedule(threads):
    b = _batch(seed=6, n_users=60, n_items=700)
    ref = SSPSolver(noise_multiplier=0.8, budget=3.0, reg=0.3, num_threads=1, chunk_tasks=256).solve(b, rng=5).params
    got = SSPSolver(noise_multiplier=0.8, budget=3.0, reg=0.3, num_threads=threads, chunk_tasks=256)
    np.testing.assert_array_equal(got.solve(b, rng=5).params, ref)
