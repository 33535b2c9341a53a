"""privrec.solvers public surface: the registry's checks, TaskBatch validation messages and
constructors, and the solvers' parameter validation."""

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp

from privrec.solvers import (
    ExactSolver,
    NoisyGDSolver,
    SSPSolver,
    TaskBatch,
    available_solvers,
    make_solver,
    protocol,
    register_solver,
    suggested_iterations,
)


@pytest.fixture
def private_registry(monkeypatch):
    """A scratch copy of the registry, so registrations made by a test do not leak."""
    monkeypatch.setattr(protocol, "_REGISTRY", dict(protocol._REGISTRY))
    return protocol


def test_registry_lists_the_builtin_solvers():
    assert {"exact", "ssp", "noisy_gd"} <= set(available_solvers())
    assert available_solvers() == sorted(available_solvers())
    assert isinstance(make_solver("ssp", noise_multiplier=2.0, budget=3.0), SSPSolver)


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown solver 'nope'; choose one of"):
        make_solver("nope")
    with pytest.raises(ValueError, match="non-empty string"):
        register_solver("", ExactSolver)
    with pytest.raises(ValueError, match="non-empty string"):
        register_solver(3, ExactSolver)
    with pytest.raises(ValueError, match="already registered"):
        register_solver("exact", ExactSolver)

    class Half:
        def solve(self, batch, rng=None): ...

    with pytest.raises(
        ValueError, match=r"Half does not implement the PrivateSolver protocol \(missing \['labelled_events'"
    ):
        register_solver("half", Half)
    assert "half" not in available_solvers()


def test_a_factory_must_build_a_private_solver(private_registry):
    register_solver("broken", lambda **kw: object())
    assert "broken" in available_solvers()
    with pytest.raises(TypeError, match="built a object, which is not a PrivateSolver"):
        make_solver("broken")


def test_a_third_party_solver_can_be_registered(private_registry):
    class Zero:
        noise_multiplier = 0.0

        def __init__(self, scale=1.0):
            self.scale = scale

        def solve(self, batch, rng=None):
            from privrec.solvers import SolverResult

            return SolverResult(np.zeros((batch.n_tasks, batch.dim), np.float32), self.labelled_events())

        def labelled_events(self):
            return [("zero", dp_accounting.NonPrivateDpEvent(), {"mechanism": "none"})]

        def dp_event(self):
            return dp_accounting.NonPrivateDpEvent()

        def with_noise_multiplier(self, z):
            return self

    register_solver("zero", Zero)
    solver = make_solver("zero", scale=2.0)
    assert solver.scale == 2.0
    batch = TaskBatch(np.array([0, 1]), np.array([0]), np.ones((1, 2)), np.array([1.0]), np.array([1.0]))
    assert solver.solve(batch).params.shape == (1, 2)


# ---------------------------------------------------------------------- TaskBatch


def _batch_kwargs(**over):
    kw = dict(
        indptr=np.array([0, 2, 3]),
        feature_ids=np.array([0, 1, 1]),
        features=np.ones((2, 2)),
        labels=np.array([1.0, 2.0, 3.0]),
        weights=np.array([1.0, 0.5, 1.0]),
    )
    kw.update(over)
    return kw


@pytest.mark.parametrize(
    "over, needle",
    [
        (dict(features=np.ones(2)), "features must be a 2-D"),
        (dict(indptr=np.array([[0, 3]])), "indptr must be a non-decreasing 1-D"),
        (dict(feature_ids=np.array([0.0, 1.0, 1.0])), "feature_ids must be integers"),
        (dict(feature_ids=np.array([0, 1, 2])), r"feature_ids must lie in \[0, 2\)"),
        (dict(weights=np.array([1.0, -1.0, 1.0])), "weights must be >= 0"),
        (dict(labels=np.array([1.0, 2.0])), r"labels must have shape \(3,\)"),
        (dict(task_sizes=np.array([1.0])), "task_sizes must be a non-negative array of shape"),
        (dict(task_weights=np.array([1.0, -2.0])), "task_weights must be a non-negative"),
    ],
)
def test_task_batch_validation_messages(over, needle):
    with pytest.raises(ValueError, match=needle):
        TaskBatch(**_batch_kwargs(**over))


def test_task_batch_properties_and_integer_features():
    b = TaskBatch(**_batch_kwargs(features=np.array([[1, 0], [0, 2]]), task_sizes=[2, 1]))
    assert b.features.dtype == np.float64  # integer features become floats
    assert (b.n_tasks, b.n_units, b.dim, b.nnz) == (2, 2, 2, 3)
    np.testing.assert_array_equal(b.sizes, [2, 1])
    np.testing.assert_array_equal(b.task_ids(), [0, 0, 1])
    np.testing.assert_allclose(b.unit_spend(), [1.0, 0.25 + 1.0])
    assert b.unit_budget() == pytest.approx(1.25)
    assert b.check_budget(None) == pytest.approx(1.25)
    with pytest.raises(ValueError, match="exceeds the declared budget 1"):
        b.check_budget(1.0)
    assert b.task_sizes.dtype == np.float64
    with pytest.raises(ValueError, match=r"features must have shape \(2, d\)"):
        b.with_features(np.ones((3, 2)))


def test_empty_batch():
    b = TaskBatch(np.array([0, 0, 0]), np.zeros(0, int), np.ones((3, 2)), np.zeros(0), np.zeros(0))
    assert b.unit_budget() == 0.0 and b.nnz == 0
    params = ExactSolver(reg=1.0).solve(b).params
    np.testing.assert_array_equal(params, np.zeros((2, 2)))


def test_from_csr_without_transpose_and_feature_shape_checks():
    labels = sp.csr_matrix(np.array([[1.0, 0, 2.0], [0, 3.0, 0]]))
    weights = labels.copy()
    weights.data[:] = [1.0, 0.0, 0.5]
    b = TaskBatch.from_csr(labels, weights, np.eye(3))  # tasks x units
    assert b.n_tasks == 2 and b.nnz == 2  # the zero weight was dropped
    np.testing.assert_array_equal(b.feature_ids, [0, 1])
    kept = TaskBatch.from_csr(labels, weights, np.eye(3), drop_zero_weights=False)
    assert kept.nnz == 3
    with pytest.raises(ValueError, match="features must have 3 rows"):
        TaskBatch.from_csr(labels, weights, np.eye(2))
    with pytest.raises(ValueError, match="weights must be a scipy.sparse CSR"):
        TaskBatch.from_csr(labels, weights.toarray(), np.eye(3))


# ---------------------------------------------------------------------- solver parameters


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: ExactSolver(unobserved_weight=-1.0), "unobserved_weight"),
        (lambda: ExactSolver(label_bound=0.0), "label_bound"),
        (lambda: ExactSolver(dtype=np.int32), "dtype must be float32 or float64"),
        (lambda: SSPSolver(noise_multiplier=1.0), "needs the declared per-unit budget"),
        (lambda: SSPSolver(noise_multiplier=1.0, budget=-1.0), "budget"),
        (lambda: SSPSolver(noise_multiplier=0.0, gramian_ratio=0.0), "gramian_ratio"),
        (lambda: SSPSolver(noise_multiplier=0.0, eig_floor=-1.0), "eig_floor"),
        (lambda: NoisyGDSolver(noise_multiplier=0.0, iterations=0), "iterations"),
        (lambda: NoisyGDSolver(noise_multiplier=0.0, schedule="fast"), "schedule must be 'convex'"),
        (lambda: NoisyGDSolver(noise_multiplier=0.0, schedule=-0.1), "schedule"),
        (lambda: NoisyGDSolver(noise_multiplier=0.0, radius=0.0), "radius"),
    ],
)
def test_solver_parameter_validation(make, needle):
    with pytest.raises(ValueError, match=needle):
        make()


def test_ssp_accounting_from_the_configuration():
    s = SSPSolver(
        noise_multiplier=2.0, budget=4.0, max_norm=0.5, label_bound=3.0, unobserved_weight=0.1, global_ratio=2.0
    )
    assert s.multipliers() == {"gramian": 2.0, "rhs": 2.0, "global": 4.0}
    sens = s.sensitivities()
    assert sens["gramian"] == pytest.approx(2.0 * 0.25) and sens["rhs"] == pytest.approx(2.0 * 0.5 * 3.0)
    assert sens["global"] == pytest.approx(0.25)
    assert s.noise_stds()["rhs"] == pytest.approx(2.0 * 3.0)
    labels = [lab for lab, _, _ in s.labelled_events()]
    assert labels == ["SSP global Gramian", "SSP local Gramians", "SSP right-hand sides"]
    noiseless = s.with_noise_multiplier(0.0)
    assert all(v == 0.0 for v in noiseless.noise_stds().values())


def test_noisy_gd_helpers():
    assert NoisyGDSolver.paper_noise_multiplier(8, 4.0) == pytest.approx(1.0)
    s = NoisyGDSolver(noise_multiplier=1.0, budget=4.0, iterations=3, max_norm=2.0, radius=0.5, label_bound=1.0)
    assert s.gradient_bound == pytest.approx(2.0 * (0.5 * 2.0 + 1.0))
    assert s.noise_std() == pytest.approx(1.0 * 2.0 * 4.0)
    ((label, ev, meta),) = s.labelled_events()
    assert ev == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.0), 3)
    assert meta["steps"] == 3 and meta["sensitivity"] == pytest.approx(2.0 * 4.0)
    one = NoisyGDSolver(noise_multiplier=1.0, budget=4.0, iterations=1)
    assert one.dp_event() == dp_accounting.GaussianDpEvent(1.0)
    assert suggested_iterations([10, 20], [1.0, 1.0], dim=2, kind="convex") == 250
    assert suggested_iterations([10, 20], 1.0, dim=2) >= 1
    with pytest.raises(ValueError, match="must be > 0"):
        suggested_iterations([0, 1], 1.0, dim=2)
    with pytest.raises(ValueError, match="kind must be"):
        suggested_iterations([1, 1], 1.0, dim=2, kind="fast")


def test_noisy_gd_private_schedule_needs_public_task_info_and_checks_init():
    b = TaskBatch(**_batch_kwargs())
    with pytest.raises(ValueError, match="needs public task_sizes and task_weights"):
        NoisyGDSolver(noise_multiplier=1.0, budget=2.0).solve(b, rng=0)
    with pytest.raises(ValueError, match=r"init must be a finite array of shape \(2, 2\)"):
        NoisyGDSolver(noise_multiplier=0.0, init=np.zeros((3, 2))).solve(b)
    # a callable schedule and a convex schedule both run noise-free without public info
    for sched in (lambda t: 0.1 / t, "convex"):
        params = NoisyGDSolver(noise_multiplier=0.0, schedule=sched, iterations=5).solve(b).params
        assert params.shape == (2, 2) and np.all(np.isfinite(params))
        assert np.all(np.linalg.norm(params, axis=1) <= 1.0 + 1e-6)  # the iterates stay in the ball
