"""Weighted SSP (Algorithm 1, spec 004 §2): exact reduction, sensitivity property, PSD, noise."""

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from test_allocation_helpers import interaction_matrices, remove_unit

from privrec.allocation import adaptive_weights, tail_weights, uniform_weights
from privrec.privacy import PrivacyLedger, calibrate_noise_multiplier
from privrec.solvers import ExactSolver, SSPSolver, TaskBatch, psd_project, weighted_statistics


def _batch(seed=0, n_users=80, n_items=12, d=4, dtype=np.float64):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < 0.4) * rng.integers(1, 6, (n_users, n_items))
    ui = sp.csr_matrix(dense.astype(np.float32))
    counts = np.maximum(np.diff(ui.tocsc().indptr), 1).astype(float)
    w = adaptive_weights(ui, counts, 0.25, 3.0)
    feats = rng.normal(size=(n_users, d)).astype(dtype)
    return TaskBatch.from_csr(ui, w, feats, transpose=True)


def _dense_ridge(batch, reg, max_norm, label_bound, alpha0=0.0):
    """Per-task weighted ridge with numpy, one task at a time (the independent reference)."""
    x = batch.features.astype(np.float64)
    nrm = np.linalg.norm(x, axis=1, keepdims=True)
    x = x * np.minimum(1.0, max_norm / np.maximum(nrm, 1e-300))
    y = np.clip(batch.labels.astype(np.float64), -label_bound, label_bound)
    w = batch.weights.astype(np.float64)
    d = batch.dim
    out = np.zeros((batch.n_tasks, d))
    for i in range(batch.n_tasks):
        s, e = batch.indptr[i], batch.indptr[i + 1]
        xi = x[batch.feature_ids[s:e]]
        A = xi.T @ (w[s:e, None] * xi) + reg * np.eye(d) + alpha0 * x.T @ x
        out[i] = np.linalg.solve(A, xi.T @ (w[s:e] * y[s:e]))
    return out


@pytest.mark.parametrize("alpha0", [0.0, 0.3])
def test_ssp_without_noise_equals_exact_weighted_ridge(alpha0):
    b = _batch()
    kw = dict(reg=0.7, unobserved_weight=alpha0, dtype=np.float64)
    ref = _dense_ridge(b, 0.7, 2.0, 3.0, alpha0)
    exact = ExactSolver(max_norm=2.0, label_bound=3.0, **kw).solve(b).params
    ssp = SSPSolver(noise_multiplier=0.0, max_norm=2.0, label_bound=3.0, **kw).solve(b)
    np.testing.assert_allclose(exact, ref, rtol=1e-10, atol=1e-12)
    assert np.max(np.abs(ssp.params - ref)) <= 1e-5 * np.max(np.abs(ref))
    assert all(isinstance(e, dp_accounting.NonPrivateDpEvent) for _, e, _ in ssp.events)


def test_chunking_does_not_change_the_result():
    b = _batch(seed=4)
    one = SSPSolver(noise_multiplier=0.0, reg=0.5, dtype=np.float64).solve(b).params
    many = SSPSolver(noise_multiplier=0.0, reg=0.5, dtype=np.float64, chunk_tasks=3, chunk_examples=7).solve(b).params
    np.testing.assert_allclose(many, one, rtol=1e-12)
    f32 = SSPSolver(noise_multiplier=0.0, reg=0.5).solve(b).params
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, one, rtol=1e-3, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(
    interaction_matrices(max_users=10, max_items=7),
    st.sampled_from(["uniform", "tail", "adaptive", "adaptive-global"]),
    st.floats(0.1, 3.0),
    st.floats(0.5, 4.0),
    st.integers(0, 2**31 - 1),
)
def test_removing_one_user_moves_stacked_statistics_within_declared_sensitivity(m, alloc, gamma, bound, seed):
    rng = np.random.default_rng(seed)
    counts = np.maximum(np.diff(m.tocsc().indptr) + rng.normal(0, 1, m.shape[1]), 1.0)
    beta = 2.0
    if alloc == "uniform":
        w = uniform_weights(m, 2, rng=seed)
    elif alloc == "tail":
        w = tail_weights(m, counts, 2, rng=seed)
    else:
        w = adaptive_weights(m, counts, 0.5, beta, mode="global" if alloc == "adaptive-global" else "per_user")
    feats = rng.normal(0, 3, size=(m.shape[0], 3))  # norms well above gamma: clipping matters
    labels = m.copy()
    labels.data = labels.data * 1.7 - 4  # some labels exceed the bound
    solver = SSPSolver(noise_multiplier=1.0, budget=beta, max_norm=gamma, label_bound=bound)
    sens = solver.sensitivities()
    full = TaskBatch.from_csr(labels, w, feats, transpose=True)
    G, b = weighted_statistics(full, gamma, bound)
    for j in range(m.shape[0]):
        G2, b2 = weighted_statistics(remove_unit(full, j), gamma, bound)
        assert np.linalg.norm(G - G2) <= sens["gramian"] * (1 + 1e-9)
        assert np.linalg.norm(b - b2) <= sens["rhs"] * (1 + 1e-9)
    # the global Gramian moves by at most gamma^2
    x = feats * np.minimum(1, gamma / np.linalg.norm(feats, axis=1, keepdims=True))
    assert np.max(np.linalg.norm(x, axis=1) ** 2) <= sens["global"] * (1 + 1e-9)


def test_events_meta_and_calibration_hook():
    s = SSPSolver(
        noise_multiplier=2.0,
        budget=4.0,
        max_norm=0.5,
        label_bound=5.0,
        gramian_ratio=1.5,
        unobserved_weight=0.2,
        global_ratio=3.0,
    )
    labels = [lab for lab, _, _ in s.labelled_events()]
    assert labels == ["SSP global Gramian", "SSP local Gramians", "SSP right-hand sides"]
    evs = {lab: (e, meta) for lab, e, meta in s.labelled_events()}
    assert evs["SSP global Gramian"][0] == dp_accounting.GaussianDpEvent(6.0)
    assert evs["SSP global Gramian"][1]["sensitivity"] == 0.25
    assert evs["SSP local Gramians"][0] == dp_accounting.GaussianDpEvent(3.0)
    assert evs["SSP local Gramians"][1]["noise_std"] == pytest.approx(3.0 * 2.0 * 0.25)
    # RHS noise scales with max_norm * label_bound (not max_norm alone)
    assert evs["SSP right-hand sides"][1]["sensitivity"] == pytest.approx(2.0 * 0.5 * 5.0)
    assert evs["SSP right-hand sides"][1]["noise_std"] == pytest.approx(2.0 * 2.0 * 0.5 * 5.0)
    res = s.solve(_batch(n_items=5), rng=0)
    led = PrivacyLedger()
    res.record(led, prefix="ALS step 1: ")
    assert led.entries[1].label == "ALS step 1: SSP local Gramians"
    assert led.epsilon(1e-5) == pytest.approx(_eps(s.dp_event()))
    # calibration through dp_event: the common scale hits the target
    z = calibrate_noise_multiplier(
        2.0, 1e-5, lambda z: dp_accounting.SelfComposedDpEvent(s.with_noise_multiplier(z).dp_event(), 3), "pld"
    )
    assert 0.995 * 2.0 <= _eps(dp_accounting.SelfComposedDpEvent(s.with_noise_multiplier(z).dp_event(), 3)) <= 2.0


def _eps(ev):
    led = PrivacyLedger()
    led.record("x", ev)
    return led.epsilon(1e-5)


def test_noise_std_matches_declaration_on_empty_tasks():
    # tasks without examples: b is pure noise with std z * sqrt(beta) * gamma * B
    b = TaskBatch(np.zeros(3001, dtype=np.int64), np.zeros(0, np.int64), np.ones((1, 2)), np.zeros(0), np.zeros(0))
    s = SSPSolver(noise_multiplier=0.5, budget=4.0, max_norm=2.0, label_bound=3.0, reg=1e6, dtype=np.float64)
    res = s.solve(b, rng=1)
    # theta = b / (lam_+ + reg) with reg >> |noise|: theta * reg ~ noise with std 0.5*2*2*3 = 6
    assert (res.params * 1e6).std() == pytest.approx(6.0, rel=0.05)


def test_psd_projection():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 6, 6))
    A = A + np.swapaxes(A, -1, -2)
    P = psd_project(A)
    np.testing.assert_allclose(P, np.swapaxes(P, -1, -2), atol=1e-12)
    assert np.linalg.eigvalsh(P).min() >= -1e-10
    P2 = psd_project(A, floor=0.5)
    assert np.linalg.eigvalsh(P2).min() >= 0.5 - 1e-10
    # already-PSD matrices are unchanged
    B = A @ np.swapaxes(A, -1, -2)
    np.testing.assert_allclose(psd_project(B), B, rtol=1e-9, atol=1e-9)


def test_noisy_solution_finite_with_projected_tasks_and_budget_check():
    b = _batch()
    res = SSPSolver(noise_multiplier=5.0, budget=3.0, reg=0.0).solve(b, rng=0)
    assert np.all(np.isfinite(res.params)) and res.info["projected_tasks"] > 0
    with pytest.raises(ValueError, match="budget"):
        SSPSolver(noise_multiplier=1.0, budget=1.0).solve(b)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(noise_multiplier=1.0),  # no budget
        dict(noise_multiplier=-1.0, budget=1.0),
        dict(noise_multiplier=1.0, budget=-1.0),
        dict(noise_multiplier=1.0, budget=1.0, max_norm=0.0),
        dict(noise_multiplier=1.0, budget=1.0, label_bound=-2.0),
        dict(noise_multiplier=1.0, budget=1.0, unobserved_weight=-0.1),
        dict(noise_multiplier=1.0, budget=1.0, gramian_ratio=0.0),
    ],
)
def test_bad_configuration(kwargs):
    with pytest.raises(ValueError):
        SSPSolver(**kwargs)


def test_bad_regularisation_shape():
    with pytest.raises(ValueError, match="reg"):
        SSPSolver(noise_multiplier=0.0, reg=np.ones(2)).solve(_batch())
    with pytest.raises(ValueError, match="reg"):
        ExactSolver(reg=-1.0).solve(_batch())
