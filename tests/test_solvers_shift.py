"""The eigenvalue-shift item-step estimator (issue 29): a cheaper post-processing of SSP's release.

Facts checked: the shift is the smallest power-of-two multiple of the noise edge that makes the
noisy Gramian positive definite (0 where it already is), the shifted solve is the plain dense
solve of the shifted system, it is post-processing (same events, same noise draws, the exact
path where no noise is added), and DPALS threads it through and records it.
"""

import numpy as np
import pytest
from test_solvers_ssp import _batch

from privrec.models import DPALS
from privrec.solvers import SSPSolver
from privrec.solvers._linalg import noise_edge, shifted_solve


def _noisy_stack(m=12, d=9, noise=3.0, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, 2 * d, d)) * 0.3
    G = np.swapaxes(X, -1, -2) @ X
    E = rng.normal(size=(m, d, d)) * noise
    E = np.triu(E) + np.swapaxes(np.triu(E, 1), -1, -2)
    G[:4] += 10.0 * np.eye(d)  # the first four stay positive definite after the noise
    G[4:] += E[4:]
    return G.astype(dtype), rng.normal(size=(m, d)).astype(dtype)


def test_noise_edge_bounds_the_noise_spectrum():
    from privrec.privacy.mechanisms import add_symmetric_gaussian_noise

    for d in (1, 3, 17, 65):
        E = np.zeros((400, d, d))
        add_symmetric_gaussian_noise(E, 2.0, np.random.default_rng(d))
        lam = np.linalg.eigvalsh(E)
        edge = noise_edge(2.0, d)
        assert np.abs(lam).max() < edge
        if d >= 17:  # and it is tight: the semicircle edge 2 std sqrt(d) is reached
            assert np.abs(lam).max() > 0.9 * 2.0 * 2.0 * np.sqrt(d)
    assert noise_edge(0.0, 65) == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_extra", [False, True])
def test_shifted_solve_is_the_dense_solve_of_the_smallest_sufficient_shift(dtype, with_extra):
    G, b = _noisy_stack(seed=3, dtype=dtype)
    reg = np.linspace(0.1, 2.0, len(G))
    R = np.random.default_rng(1).normal(size=(9, 9))
    extra = (R @ R.T / 9).astype(dtype) if with_extra else None
    floor, scale = 0.2, 2.5
    out, s = shifted_solve(G, b, reg, scale, extra, floor=floor)
    assert out.dtype == dtype and np.isfinite(out).all()
    tol = 1e-4 if dtype == np.float32 else 1e-9
    for i in range(len(G)):
        k = np.log2(s[i] / scale)
        assert k >= 0 and k == round(k)
        A = G[i].astype(np.float64) + (s[i] + floor + reg[i]) * np.eye(9) + (0.0 if extra is None else extra)
        lam = np.linalg.eigvalsh(A)[0]
        assert lam > -tol  # positive definite ...
        if k > 0:  # ... and half the shift was not enough
            assert lam - s[i] / 2 < tol
        np.testing.assert_allclose(out[i], np.linalg.solve(A, b[i]), rtol=50 * tol, atol=tol)
    assert (s[4:] > scale).any()  # the doubling ran
    # with the calibrated noise's edge as the scale, one step suffices
    edge = noise_edge(3.0, 9)
    assert (shifted_solve(G, b, reg, edge, extra, floor=floor)[1] == edge).all()


def test_shifted_solve_flags_matrices_that_are_not_finite_and_checks_its_scale():
    G, b = _noisy_stack()
    G[5, 1, 1] = np.nan
    G[6, 0, 0] = np.inf
    before = G.copy()
    out, s = shifted_solve(G, b, 0.5, 1.0)
    np.testing.assert_array_equal(G, before)
    assert np.isnan(s[[5, 6]]).all() and np.isnan(out[[5, 6]]).all()
    assert np.isfinite(np.delete(out, [5, 6], axis=0)).all()
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="scale"):
            shifted_solve(G, b, 0.5, bad)
    assert shifted_solve(G[:0], b[:0], 0.5, 1.0)[0].shape == (0, 9)


def test_ssp_shift_is_post_processing_of_the_same_release():
    b = _batch(n_users=60, n_items=15, d=6)
    kw = dict(noise_multiplier=4.0, budget=3.0, reg=0.5, dtype=np.float64)
    eig = SSPSolver(projection="eigen", **kw)
    shf = SSPSolver(projection="shift", **kw)
    assert [(lbl, repr(e), meta) for lbl, e, meta in eig.labelled_events()] == [
        (lbl, repr(e), meta) for lbl, e, meta in shf.labelled_events()
    ]
    r1 = eig.solve(b, rng=5)
    r2 = shf.solve(b, rng=5)
    assert r1.info["projected_tasks"] == r2.info["projected_tasks"] > 0
    assert np.isfinite(r2.params).all()
    # the shift regularises more where the noise dominates: smaller solutions than the projection
    assert np.linalg.norm(r2.params) < np.linalg.norm(r1.params)
    # tasks whose noisy Gramian is positive definite get the same solution
    same = np.isclose(np.linalg.norm(r1.params - r2.params, axis=1), 0.0, atol=1e-12)
    assert same.sum() == b.n_tasks - r1.info["projected_tasks"]


def test_ssp_shift_without_noise_equals_the_exact_path_and_bad_option():
    b = _batch(seed=2)
    kw = dict(noise_multiplier=0.0, reg=0.7, dtype=np.float64)
    np.testing.assert_array_equal(
        SSPSolver(projection="shift", **kw).solve(b).params, SSPSolver(projection="eigen", **kw).solve(b).params
    )
    with pytest.raises(ValueError, match="projection"):
        SSPSolver(noise_multiplier=0.0, projection="cholesky")


def _ratings(seed=0, n_users=300, n_items=40):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < 0.3
    vals = np.clip(np.round(3 + rng.normal(size=(n_users, n_items))), 1, 5)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


def test_dpals_item_projection_reduces_exactly_without_noise_and_is_recorded():
    X = _ratings()
    kw = dict(factors=4, iterations=2, random_state=0, show_progress=False)
    a = DPALS(epsilon=np.inf, item_projection="shift", **kw).fit(X)
    b = DPALS(epsilon=np.inf, item_projection="eigen", **kw).fit(X)
    np.testing.assert_array_equal(a.item_factors_, b.item_factors_)
    p = DPALS(epsilon=2.0, item_projection="shift", **kw).fit(X)
    assert p.config_["item_projection"] == "shift" and np.isfinite(p.item_factors_).all()
    q = DPALS(epsilon=2.0, item_projection="eigen", **kw).fit(X)
    assert p.privacy_report()["epsilon"] == pytest.approx(q.privacy_report()["epsilon"])
    assert p.privacy_report()["events"] == q.privacy_report()["events"]
    with pytest.raises(ValueError, match="item_projection"):
        DPALS(epsilon=1.0, item_projection="qr", **kw).fit(X)
