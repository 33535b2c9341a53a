"""Weighted noisy full-batch GD (Algorithm 2, spec 004 §3)."""

import math

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from test_allocation_helpers import interaction_matrices, remove_unit

from privrec.allocation import adaptive_weights
from privrec.privacy import PrivacyLedger
from privrec.solvers import ExactSolver, NoisyGDSolver, TaskBatch, suggested_iterations, weighted_statistics


def _batch(seed=0, n_users=80, n_items=10, d=4, public=False):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < 0.4) * rng.integers(1, 6, (n_users, n_items))
    ui = sp.csr_matrix(dense.astype(np.float32))
    counts = np.maximum(np.diff(ui.tocsc().indptr), 1).astype(float)
    w = adaptive_weights(ui, counts, 0.5, 2.0)
    feats = rng.normal(0, 0.5, size=(n_users, d))
    labels = ui.copy()
    labels.data = (labels.data - 3) / 2
    kw = dict(task_sizes=counts + 1.0, task_weights=np.ones(n_items)) if public else {}
    return TaskBatch.from_csr(labels, w, feats, transpose=True, **kw)


def _step_for(batch, reg):
    G, _ = weighted_statistics(batch, 1.0, 1.0)
    return 1.0 / (np.linalg.eigvalsh(G).max() + reg)


@pytest.mark.parametrize("alpha0", [0.0, 0.2])
def test_zero_noise_gd_converges_to_exact_ridge(alpha0):
    b = _batch()
    reg = 0.5
    exact = (
        ExactSolver(reg=reg, unobserved_weight=alpha0, max_norm=1.0, label_bound=1.0, dtype=np.float64).solve(b).params
    )
    step = 1.0 / (1.0 / _step_for(b, reg) + alpha0 * np.linalg.eigvalsh(b.features.T @ b.features).max())
    gd = NoisyGDSolver(
        noise_multiplier=0.0,
        iterations=3000,
        radius=100.0,
        reg=reg,
        unobserved_weight=alpha0,
        schedule=step,
        dtype=np.float64,
    ).solve(b)
    np.testing.assert_allclose(gd.params, exact, rtol=1e-6, atol=1e-8)
    assert isinstance(gd.event, dp_accounting.NonPrivateDpEvent) or any(
        isinstance(e, dp_accounting.NonPrivateDpEvent) for _, e, _ in gd.events
    )


def test_strongly_convex_schedule_approaches_the_solution_without_noise():
    b = _batch(seed=2)
    reg = 20.0  # strongly convex enough for eta_t = 1/(mu t) to be stable from t = 1
    exact = ExactSolver(reg=reg, max_norm=1.0, label_bound=1.0, dtype=np.float64).solve(b).params
    errs = []
    for T in (10, 100):
        p = NoisyGDSolver(noise_multiplier=0.0, iterations=T, radius=10.0, reg=reg, dtype=np.float64).solve(b).params
        errs.append(np.abs(p - exact).max())
    assert errs[1] < errs[0] and errs[1] < 0.05 * np.abs(exact).max()


def test_convex_schedule_runs_with_public_sizes_and_stays_in_ball():
    b = _batch(public=True)
    s = NoisyGDSolver(noise_multiplier=1.0, iterations=20, budget=2.0, radius=0.3, reg=0.1, schedule="convex")
    res = s.solve(b, rng=0)
    assert np.all(np.linalg.norm(res.params, axis=1) <= 0.3 * (1 + 1e-5))
    assert res.params.dtype == np.float32


def test_private_schedule_needs_public_task_information():
    with pytest.raises(ValueError, match="public"):
        NoisyGDSolver(noise_multiplier=1.0, budget=2.0).solve(_batch(), rng=0)


def test_events_sensitivity_and_paper_multiplier():
    s = NoisyGDSolver(noise_multiplier=0.8, iterations=7, budget=4.0, max_norm=0.5, label_bound=2.0, radius=3.0)
    # per-example gradient bound Gamma = Gamma_x (R Gamma_x + B)
    assert s.gradient_bound == pytest.approx(0.5 * (3.0 * 0.5 + 2.0))
    ((label, ev, meta),) = s.labelled_events()
    assert label == "noisy GD gradients"
    assert ev == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(0.8), 7)
    assert meta["sensitivity"] == pytest.approx(2.0 * 1.75)
    assert meta["noise_std"] == pytest.approx(0.8 * 2.0 * 1.75)
    # paper: noise Gamma sqrt(T/2) at budget beta -> (alpha, alpha beta)-RDP overall
    T, beta = 9, 0.3
    z = NoisyGDSolver.paper_noise_multiplier(T, beta)
    paper = NoisyGDSolver(noise_multiplier=z, iterations=T, budget=beta)
    assert paper.noise_std() == pytest.approx(paper.gradient_bound * math.sqrt(T / 2))
    # RDP of T Gaussian steps with multiplier z is T * alpha / (2 z^2) = alpha * beta
    from dp_accounting import rdp

    acc = rdp.RdpAccountant(orders=[2.0, 8.0])
    acc.compose(paper.dp_event())
    np.testing.assert_allclose(acc._rdp, [2.0 * beta, 8.0 * beta], rtol=1e-10)
    led = PrivacyLedger()
    NoisyGDSolver(noise_multiplier=1.0, budget=2.0, unobserved_weight=0.1, schedule=0.1).solve(_batch(), rng=0).record(
        led
    )
    assert [e.label for e in led.entries] == ["noisy GD global Gramian", "noisy GD gradients"]


def test_gradient_noise_is_injected_with_declared_std():
    # no examples, reg 0, constant step 1, one iteration from 0: theta = -noise (before projection)
    b = TaskBatch(np.zeros(4001, dtype=np.int64), np.zeros(0, np.int64), np.ones((1, 3)), np.zeros(0), np.zeros(0))
    s = NoisyGDSolver(
        noise_multiplier=0.5,
        iterations=1,
        budget=4.0,
        max_norm=0.01,
        label_bound=1.0,
        radius=1e3,
        reg=0.0,
        schedule=1.0,
        dtype=np.float64,
    )
    res = s.solve(b, rng=3)
    assert res.params.std() == pytest.approx(s.noise_std(), rel=0.03)


def test_suggested_iterations_formulas():
    n = np.array([10.0, 100.0, 1000.0])
    w = np.array([0.5, 0.2, 0.1])
    assert suggested_iterations(n, w, 4, "convex") == math.ceil(2 / 4 * np.sum(n**2) / np.sum(1 / w**2))
    assert suggested_iterations(n, w, 4) == math.ceil(2 / 4 * np.sum(n) / np.sum(1 / (w**2 * n)))
    with pytest.raises(ValueError):
        suggested_iterations(n, w, 4, "concave")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(noise_multiplier=1.0),  # private without budget
        dict(noise_multiplier=0.0, iterations=0),
        dict(noise_multiplier=0.0, radius=0.0),
        dict(noise_multiplier=0.0, schedule="fast"),
        dict(noise_multiplier=0.0, schedule=-0.1),
        dict(noise_multiplier=0.0, strong_convexity=-1.0),
    ],
)
def test_bad_configuration(kwargs):
    with pytest.raises(ValueError):
        NoisyGDSolver(**kwargs)


def test_bad_init_shape():
    with pytest.raises(ValueError, match="init"):
        NoisyGDSolver(noise_multiplier=0.0, init=np.zeros((2, 2))).solve(_batch())


@settings(max_examples=30, deadline=None)
@given(
    interaction_matrices(max_users=10, max_items=7),
    st.floats(0.1, 2.0),
    st.floats(0.2, 3.0),
    st.floats(0.1, 5.0),
    st.integers(0, 2**31 - 1),
)
def test_removing_one_user_moves_stacked_gradients_within_declared_sensitivity(m, gamma, bound, radius, seed):
    rng = np.random.default_rng(seed)
    counts = np.maximum(np.diff(m.tocsc().indptr) + rng.normal(0, 1, m.shape[1]), 1.0)
    beta = 1.5
    w = adaptive_weights(m, counts, 0.25, beta)
    feats = rng.normal(0, 2, size=(m.shape[0], 3))
    labels = m.copy()
    labels.data = labels.data * 2.0 - 6.0
    solver = NoisyGDSolver(noise_multiplier=1.0, budget=beta, max_norm=gamma, label_bound=bound, radius=radius)
    sens = solver.labelled_events()[-1][2]["sensitivity"]
    theta = rng.normal(size=(m.shape[1], 3))
    theta *= np.minimum(1, radius / np.linalg.norm(theta, axis=1, keepdims=True))  # any point of the ball
    full = TaskBatch.from_csr(labels, w, feats, transpose=True)

    def grads(batch):
        G, b = weighted_statistics(batch, gamma, bound)
        return np.einsum("ijk,ik->ij", G, theta) - b

    g = grads(full)
    for j in range(m.shape[0]):
        assert np.linalg.norm(g - grads(remove_unit(full, j))) <= sens * (1 + 1e-9)


def test_noise_comes_from_public_task_blocks_not_from_compute_chunks():
    """Noisy GD draws each block of NOISE_BLOCK tasks' noise from its own seeded stream: other compute
    chunks give the same iterates, and re-running one block (a retried task) gives identical values."""
    b = _batch(seed=3, n_items=600, public=True)  # 600 tasks: three noise blocks
    s = NoisyGDSolver(noise_multiplier=1.0, iterations=4, budget=b.unit_budget(), dtype=np.float64, schedule=0.05)
    small = NoisyGDSolver(**{**s.__dict__, "chunk_tasks": 256, "chunk_examples": 50}).solve(b, rng=11).params
    large = NoisyGDSolver(**{**s.__dict__, "chunk_tasks": 4096, "chunk_examples": 1 << 22}).solve(b, rng=11).params
    np.testing.assert_allclose(small, large, rtol=0, atol=1e-10)
    G, rhs = weighted_statistics(b, s.max_norm, s.label_bound, np.float64)
    seeds = NoisyGDSolver.noise_seeds(np.random.default_rng(5), b.n_tasks)
    steps = np.full((4, 256), 0.05)
    args = (G[256:512], rhs[256:512], np.ones(256), None)
    one = s.release_block(*args, seeds[1], np.zeros((256, b.dim)), steps)
    np.testing.assert_array_equal(one, s.release_block(*args, seeds[1], np.zeros((256, b.dim)), steps))
    assert not np.allclose(one, s.release_block(*args, seeds[2], np.zeros((256, b.dim)), steps))
