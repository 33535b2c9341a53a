"""Multi-task convex learning under user-level DP with budget allocation.

Krichene, Jain, Song, Sundararajan, Thakurta, Zhang, "Multi-Task Differential Privacy Under
Distribution Skew" (ICML 2023): Sec. 2 (setting), Algorithm 1 (weighted SSP, Sec. 3.1), Algorithm 2
(weighted noisy GD, Sec. 3.2), Sec. 4 (adaptive weights, eqs. 11-12), App. D.1 (private counts),
App. C (synthetic experiments).

A :class:`MultiTaskProblem` is a set of examples (task i, user j, features x_ij, label y_ij), at
most one per (task, user) pair as in the paper's task-user graph Omega. Users are the privacy
unit: removing a user removes all of their examples. The estimators

* :class:`MultiTaskDPRegressor` -- ridge per task, solved by privrec's shared solvers
  (:class:`privrec.solvers.SSPSolver` or :class:`privrec.solvers.NoisyGDSolver`, no second
  implementation here), with per-example weights from :func:`privrec.allocation.adaptive_weights`
  (``weight_exponent`` = mu; mu = 0 is uniform weighting) so that every user satisfies
  ``sum_i w_ij^2 <= budget`` (enforced by the allocation code and checked by the solver);
* :class:`MultiTaskDPClassifier` -- per-task logistic regression by weighted noisy full-batch GD
  (Algorithm 2 with the logistic loss): the solvers package only covers the squared
  loss, so the logistic gradient step lives here; the sensitivity argument is the same.

Privacy pipeline (every step records its DpEvent in the estimator's ledger):

1. task counts n_i, needed by the weights (mu > 0 or eq. 11's global normalisation) and by the
   noisy-GD step sizes, are released by :func:`privrec.allocation.private_item_counts`
   (Gaussian, each user's tasks subsampled to ``count_sample``), unless the caller supplies
   ``task_counts`` it asserts are public (e.g. known task sizes; Appendix C uses exact counts);
2. weights are post-processing of the released counts and the user's own row;
3. the solver's release (SSP: Gramians and right-hand sides; GD: T noisy gradients).

The noise scales of (1) and (3) come from :func:`privrec.privacy.calibrate_with_split` over the
exact events the fit records (the count share defaults to the paper's, App. D.1), so the
reported epsilon (``privacy_report()``) is the accountant's and never exceeds ``epsilon``.

``random_state=None`` draws all noise from OS entropy; an integer seed is for experiments only and
voids the guarantee for anyone who knows it. A ``numpy.random.Generator`` / ``RandomState`` is
rejected at fit time (:func:`privrec.privacy.check_noise_random_state`): ``sklearn.clone``
deep-copies it, so every clone would draw the same noise.

Fitted attributes (what may leave the process):

* released: ``params_`` (the model), ``task_counts_used_`` (the released noisy counts, or the
  counts the caller declared public), ``ledger_`` / :meth:`privacy_report`;
* public configuration: ``noise_multiplier_``, ``count_noise_multiplier_`` (calibrated from
  epsilon, delta and public settings only), ``epsilon_target_``, ``delta_``, ``budget_``,
  ``counts_source_``, ``n_tasks_`` (the task universe is treated as public: give
  ``MultiTaskProblem(n_tasks=...)`` when ``max(tasks) + 1`` itself is not), ``solver_info_``
  (solver name, iteration count, the *declared* budget and, for SSP, the number of tasks whose
  *noisy* Gramian needed the PSD projection -- post-processing of the release);
* PRIVATE diagnostic, never to be published: ``weights_`` (per-example weights: they reveal which
  tasks each user contributed to). The exact per-user spend (``max_j sum_i w_ij^2``, a function of
  the private data) is checked during the fit but not stored.
"""

from __future__ import annotations

import dataclasses
from numbers import Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._constraints import (
    DELTA,
    EPSILON,
    NON_NEGATIVE,
    OPEN_FRACTION,
    POSITIVE,
    POSITIVE_INT,
    Interval,
    StrOptions,
)
from .._params import Hyperparameters, param
from .._validation import check_delta, check_epsilon, check_finite_array, check_int, check_positive
from ..allocation import adaptive_task_weights
from ..pipeline import PrivatePipeline
from ..privacy import check_noise_random_state, default_count_fraction, make_rng
from ..solvers import PrivateSolver, TaskBatch, make_solver
from .losses import LogisticLoss

__all__ = ["MultiTaskProblem", "MultiTaskDPRegressor", "MultiTaskDPClassifier"]


class MultiTaskProblem:
    """Examples of m tasks contributed by n users (Krichene et al. 2023, Sec. 2), at most one per (task, user).

    Parameters
    ----------
    tasks : (N,) integer task index of each example, in ``[0, n_tasks)``.
    users : (N,) user of each example (any hashable labels; the privacy unit).
    labels : (N,) labels.
    features : (N, d) per-example features, or ``None`` when ``user_features`` is given.
    user_features : (n_users, d) features shared by all examples of a user (Appendix C: x_ij = u_j);
        then ``users`` must be integer indices into it.
    n_tasks : number of tasks (default ``max(tasks) + 1``).
    """

    def __init__(self, tasks, users, labels, features=None, user_features=None, n_tasks: int | None = None):
        tasks = np.asarray(tasks)
        if tasks.ndim != 1:
            raise ValueError(f"tasks must be 1-D, got shape {tasks.shape}")
        N = tasks.size
        if tasks.dtype.kind not in "iu":
            raise ValueError(f"tasks must be integer task indices, got dtype {tasks.dtype}")
        if N and tasks.min() < 0:
            raise ValueError("tasks must be >= 0")
        m = int(tasks.max()) + 1 if N else 0
        if n_tasks is not None:
            n_tasks = check_int(n_tasks, "n_tasks", minimum=1)
            if n_tasks < m:
                raise ValueError(f"n_tasks ({n_tasks}) is smaller than max(tasks) + 1 ({m})")
            m = n_tasks
        if m == 0:
            raise ValueError("a multi-task problem needs at least one example")
        users = np.asarray(users)
        labels = check_finite_array(np.asarray(labels), "labels")
        if users.shape != (N,) or labels.shape != (N,):
            raise ValueError(f"tasks, users and labels must all have shape ({N},)")
        if (features is None) == (user_features is None):
            raise ValueError("give exactly one of features (per example) or user_features (per user)")
        if user_features is not None:
            uf = check_finite_array(user_features, "user_features")
            if uf.ndim != 2:
                raise ValueError(f"user_features must be 2-D (n_users, d), got shape {uf.shape}")
            if users.dtype.kind not in "iu" or (N and (users.min() < 0 or users.max() >= uf.shape[0])):
                raise ValueError(f"with user_features, users must be integer indices in [0, {uf.shape[0]})")
            self.user_labels = np.arange(uf.shape[0])
            user_idx = users.astype(np.int64)
            self.user_features: np.ndarray | None = uf if uf.dtype.kind == "f" else uf.astype(np.float32)
            self.features: np.ndarray | None = None
        else:
            X = check_finite_array(features, "features")
            if X.ndim != 2 or X.shape[0] != N:
                raise ValueError(f"features must have shape ({N}, d), got {X.shape}")
            self.user_labels, user_idx = np.unique(users, return_inverse=True)
            self.features = X if X.dtype.kind == "f" else X.astype(np.float32)
            self.user_features = None
        key = user_idx * m + tasks.astype(np.int64)
        if np.unique(key).size != N:
            raise ValueError("each (task, user) pair may appear at most once (Omega is a set: Krichene et al. 2023)")
        self.tasks = tasks.astype(np.int64)
        self.user_index = user_idx
        self.labels = labels
        self.n_tasks = m

    # ---------------------------------------------------------------- constructors / properties
    @classmethod
    def from_task_examples(cls, examples, user_features, n_tasks: int | None = None) -> MultiTaskProblem:
        """From :class:`privrec.data.synthetic.TaskExamples` (indptr, feature_ids, labels) + user features."""
        return cls(
            examples.task_ids().astype(np.int64),
            np.asarray(examples.feature_ids, dtype=np.int64),
            examples.labels,
            user_features=user_features,
            n_tasks=n_tasks or examples.n_tasks,
        )

    @property
    def n_examples(self) -> int:
        return self.tasks.size

    @property
    def n_users(self) -> int:
        return self.user_labels.size

    @property
    def dim(self) -> int:
        return self._feature_table.shape[1]

    @property
    def _feature_table(self) -> np.ndarray:
        """The feature rows: one per user (``user_features``) or one per example (``features``)."""
        table = self.user_features if self.user_features is not None else self.features
        if table is None:  # pragma: no cover - __init__ always sets exactly one
            raise ValueError("a MultiTaskProblem needs features or user_features")
        return table

    def example_features(self) -> np.ndarray:
        """(N, d) features of every example."""
        if self.features is not None:
            return self.features
        return self._feature_table[self.user_index]

    def task_counts(self) -> np.ndarray:
        """Exact n_i (private: never publish or use in a private release)."""
        return np.bincount(self.tasks, minlength=self.n_tasks)

    def user_task_matrix(self):
        """(users x tasks CSR with ones, order): CSR position k holds example ``order[k]``."""
        order = np.lexsort((self.tasks, self.user_index))
        indptr = np.concatenate(([0], np.cumsum(np.bincount(self.user_index, minlength=self.n_users))))
        mat = sp.csr_matrix(
            (np.ones(order.size, dtype=np.float32), self.tasks[order].astype(np.int32), indptr),
            shape=(self.n_users, self.n_tasks),
        )
        return mat, order

    def task_batch(self, example_weights, task_sizes=None, task_weights=None) -> TaskBatch:
        """The solvers' :class:`TaskBatch`, examples grouped by task (zero weights dropped).

        With ``user_features`` the batch's units are the users, so the solver's per-unit budget
        check is exactly the per-user one. With per-example features each example is its own
        feature row; the per-user budget is then enforced by the allocation (and re-checked by
        :meth:`user_spend`).
        """
        w = np.asarray(example_weights)
        if w.shape != (self.n_examples,):
            raise ValueError(f"example_weights must have shape ({self.n_examples},)")
        keep = np.flatnonzero(w > 0)
        order = keep[np.argsort(self.tasks[keep], kind="stable")]
        indptr = np.concatenate(([0], np.cumsum(np.bincount(self.tasks[order], minlength=self.n_tasks))))
        fid = self.user_index[order] if self.user_features is not None else order
        feats = self._feature_table
        return TaskBatch(
            indptr,
            fid.astype(np.int64),
            feats,
            self.labels[order],
            w[order],
            task_sizes=task_sizes,
            task_weights=task_weights,
        )

    def user_spend(self, example_weights) -> np.ndarray:
        """Per-user sum of squared weights (must be <= beta: Krichene et al. 2023, Thm 3.3)."""
        w = np.asarray(example_weights, dtype=np.float64)
        return np.bincount(self.user_index, weights=w * w, minlength=self.n_users)


def _as_problem(X, y, tasks, users, problem) -> MultiTaskProblem:
    if problem is not None:
        if not isinstance(problem, MultiTaskProblem):
            raise ValueError("problem must be a MultiTaskProblem")
        return problem
    if tasks is None or users is None:
        raise ValueError("fit needs tasks= and users= (or problem=)")
    return MultiTaskProblem(tasks, users, y, features=X)


#: solver diagnostics that are public: configuration, or post-processing of the noisy release
#: (``projected_tasks`` counts the tasks whose *noisy* Gramian was not positive definite).
_PUBLIC_SOLVER_INFO = ("solver", "iterations", "projected_tasks")


def _public_solver_info(info: dict, budget: float) -> dict:
    """Whitelist of a solver's ``info``: the exact per-unit spend (``unit_budget``, a function of
    the private data) and any future private diagnostic are dropped; the *declared* budget is kept."""
    out = {k: info[k] for k in _PUBLIC_SOLVER_INFO if k in info}
    out["budget"] = float(budget)
    return out


#: constraints shared by both multi-task estimators (scikit-learn style; see privrec._constraints)
class _MultiTaskDPBase(Hyperparameters, BaseEstimator):
    """Shared pipeline: counts -> weights -> calibrated private solve (see module docstring).

    The parameters both estimators take (documented on :class:`MultiTaskDPRegressor`).
    """

    epsilon: float = param(EPSILON, default=1.0)
    delta: float = param(DELTA, default=1e-5)
    weight_exponent: float = param(Interval(Real, 0, 1, closed="both"), default=0.5)
    budget: float = param(POSITIVE, default=1.0)
    weight_mode: str = param(StrOptions({"global", "per_user"}), default="per_user")
    n_users: int | None = param(POSITIVE_INT, None, default=None)
    task_counts: Any = param(StrOptions({"private"}), "array-like", default="private")
    count_fraction: float | None = param(OPEN_FRACTION, None, default=None)
    count_sample: int = param(POSITIVE_INT, default=32)
    max_norm: float = param(POSITIVE, default=1.0)
    iterations: int = param(POSITIVE_INT, default=50)
    random_state: Any = param(default=None)  # check_noise_random_state

    def _validate_common(self):
        """The constraint table, then the resolved (public) values every fit uses."""
        self._validate_params()
        check_noise_random_state(self.random_state, type(self).__name__)
        self.delta_ = check_delta(self.delta)
        self.epsilon_target_ = check_epsilon(self.epsilon)
        self.budget_ = check_positive(self.budget, "budget")

    def _needs_counts(self) -> bool:
        return True

    def _public_counts(self, problem):
        if isinstance(self.task_counts, str):
            if self.task_counts != "private":
                raise ValueError(
                    f"task_counts must be 'private' or an array of public counts, got {self.task_counts!r}"
                )
            return None
        c = check_finite_array(np.asarray(self.task_counts, dtype=np.float64), "task_counts")
        if c.shape != (problem.n_tasks,) or np.any(c <= 0):
            raise ValueError(f"task_counts must be {problem.n_tasks} positive public counts")
        return c

    def _make_solver(self, z: float) -> PrivateSolver:
        raise NotImplementedError  # each estimator builds its solver at noise multiplier z

    def _solver(self, name: str, z: float, **settings) -> PrivateSolver:
        """The registered solver ``name`` at noise multiplier z, with the fitted budget and this
        estimator's feature clip; ``settings`` are the estimator-specific ones."""
        return make_solver(
            name, noise_multiplier=z, budget=self.budget_, max_norm=float(self.max_norm), dtype=np.float64, **settings
        )

    def _fit_pipeline(self, problem: MultiTaskProblem, prepare_solver=None):
        """The shared private pipeline (:class:`privrec.pipeline.PrivatePipeline`): counts ->
        adaptive weights -> calibrated solve -> ledger check. ``prepare_solver(solver, counts,
        omega)`` may set public, data-independent details (e.g. step sizes from released counts)."""
        self._validate_common()
        rng = make_rng(self.random_state)
        public = self._public_counts(problem)
        release_counts = public is None and self._needs_counts()
        frac = self.count_fraction if self.count_fraction is not None else default_count_fraction(self.epsilon_target_)
        pipe = PrivatePipeline(
            epsilon=self.epsilon_target_,
            delta=self.delta_,
            pre_labels=["task counts"] if release_counts else [],
            train_plan=lambda z: [(label, ev) for label, ev, _ in self._make_solver(z).labelled_events()],
            count_fraction=frac if release_counts else 0.0,
            accountant="rdp",
            rng=rng,
        )
        split = pipe.calibrate()
        user_tasks, order = problem.user_task_matrix()
        if release_counts:
            counts = pipe.release_counts(user_tasks, int(self.count_sample), label="task counts")
        elif public is not None:
            counts = public
        else:
            counts = np.ones(problem.n_tasks)
        n_public = problem.n_users if self.n_users is None else check_int(self.n_users, "n_users", minimum=1)
        mu = float(self.weight_exponent)
        W = pipe.allocate(
            user_tasks, counts, "adaptive", self.budget_, mu, dtype=np.float64, mode=self.weight_mode, n_users=n_public
        )
        weights = np.empty(problem.n_examples)
        weights[order] = W.data
        spend = problem.user_spend(weights)
        if spend.max(initial=0.0) > self.budget_ * (1 + 1e-9):
            raise AssertionError("allocation exceeded the per-user budget")  # pragma: no cover
        omega = adaptive_task_weights(counts, mu, self.budget_, n_public)
        solver = self._make_solver(split.train_scale)
        if prepare_solver is not None:
            solver = prepare_solver(solver, counts, omega)
        result = solver.solve(problem.task_batch(weights, task_sizes=counts, task_weights=omega), rng)
        pipe.record(result)
        self.ledger_ = pipe.finish()
        self.params_ = np.asarray(result.params)
        self.solver_info_ = _public_solver_info(result.info, self.budget_)
        self.weights_ = weights
        self.task_counts_used_ = counts
        self.noise_multiplier_ = split.train_scale
        self.count_noise_multiplier_ = split.count_scale if release_counts else None
        self.n_tasks_ = problem.n_tasks
        self.counts_source_ = "private" if release_counts else ("public (supplied)" if public is not None else "unused")
        return self

    # ---------------------------------------------------------------- inference / report
    def decision_function(self, X, tasks) -> np.ndarray:
        check_is_fitted(self, "params_")
        X = check_finite_array(X, "X")
        tasks = np.asarray(tasks)
        if X.ndim != 2 or X.shape[1] != self.params_.shape[1] or tasks.shape != (X.shape[0],):
            raise ValueError(f"X must be (N, {self.params_.shape[1]}) and tasks (N,)")
        if tasks.size and (tasks.dtype.kind not in "iu" or tasks.min() < 0 or tasks.max() >= self.n_tasks_):
            raise ValueError(f"tasks must be integers in [0, {self.n_tasks_})")
        return np.einsum("ij,ij->i", X, self.params_[tasks])

    def privacy_report(self) -> dict:
        """Ledger report (events, epsilon by the accountant) plus the allocation settings."""
        check_is_fitted(self, "ledger_")
        rep = self.ledger_.report(self.delta_, include_pld=False)
        rep["target_epsilon"] = self.epsilon_target_
        rep["budget"] = self.budget_
        rep["weight_exponent"] = float(self.weight_exponent)
        rep["weight_mode"] = self.weight_mode
        rep["task_counts"] = self.counts_source_
        return rep


class MultiTaskDPRegressor(_MultiTaskDPBase):
    """Per-task ridge regression under user-level DP (Krichene et al. 2023, Secs. 3-4), scikit-learn style.

    Parameters
    ----------
    solver : ``"ssp"`` (Algorithm 1, :class:`privrec.solvers.SSPSolver`) or ``"noisy_gd"``
        (Algorithm 2, :class:`privrec.solvers.NoisyGDSolver`).
    epsilon, delta : the target budget (``epsilon=inf``: no noise; the fit then equals weighted
        per-task ridge and the report says epsilon = inf).
    weight_exponent : mu in [0, 1] of the adaptive weights (0 = uniform weighting).
    budget : beta, the per-user bound on sum_i w_ij^2. Only the ratio to ``reg`` matters.
    weight_mode : ``"per_user"`` (default: every user spends exactly beta, weights ∝ nhat_i^-mu
        inside the user's own tasks; no user's weights depend on any other user) or ``"global"``
        (eq. 11-12 with per-user clipping). The global normaliser involves the number of users n:
        under add/remove-one-user neighbours n itself changes, so ``"global"`` is private only if
        n is public — pass it as ``n_users``; when ``n_users`` is None the problem's own user
        count is used and thereby *treated as public*.
    n_users : public number of users for ``"global"`` weights and the noisy-GD step sizes (see
        ``weight_mode``); ``None`` = the problem's user count, assumed public.
    task_counts : ``"private"`` (released with part of the budget) or an array of counts the
        caller asserts are public.
    count_fraction : share of the RDP budget spent on counts (default: the paper's, App. D.1).
    count_sample : tasks per user sampled for the counts.
    max_norm, label_bound : Gamma_x and the label clip (enforced by the solvers).
    reg : public ridge added after the noise (see ``SSPSolver``).
    iterations, radius, schedule, strong_convexity : noisy-GD settings (see ``NoisyGDSolver``).
    random_state : ``None`` = OS entropy; an int seed voids the guarantee if known (a Generator is
        rejected at fit time, see the module docstring).

    Fitted attributes: see the module docstring (``weights_`` is a private diagnostic).
    """

    solver: str = param(StrOptions({"ssp", "noisy_gd"}), default="ssp")
    label_bound: float = param(POSITIVE, default=1.0)
    reg: float = param(NON_NEGATIVE, default=1.0)
    radius: float = param(POSITIVE, default=2.0)
    schedule: Any = param(StrOptions({"convex", "strongly_convex"}), POSITIVE, callable, default="strongly_convex")
    strong_convexity: float = param(NON_NEGATIVE, default=0.1)

    def _needs_counts(self) -> bool:
        return self.solver == "noisy_gd" or float(self.weight_exponent) > 0 or self.weight_mode == "global"

    def _make_solver(self, z: float) -> PrivateSolver:
        clip = {"label_bound": float(self.label_bound), "reg": float(self.reg)}
        if self.solver == "ssp":
            return self._solver("ssp", z, **clip)
        gd = {"radius": self.radius, "schedule": self.schedule, "strong_convexity": self.strong_convexity}
        return self._solver("noisy_gd", z, iterations=self.iterations, **clip, **gd)

    def fit(self, X=None, y=None, tasks=None, users=None, problem: MultiTaskProblem | None = None):
        """Fit on per-example features ``X``, labels ``y``, ``tasks`` and ``users`` (or a ``problem``)."""
        return self._fit_pipeline(_as_problem(X, y, tasks, users, problem))

    def predict(self, X, tasks) -> np.ndarray:
        return self.decision_function(X, tasks)

    def score(self, X, y, tasks) -> float:
        """R^2 of the predictions."""
        y = np.asarray(y, dtype=np.float64)
        r = y - self.predict(X, tasks)
        return float(1.0 - np.sum(r * r) / max(np.sum((y - y.mean()) ** 2), np.finfo(float).tiny))


class MultiTaskDPClassifier(_MultiTaskDPBase):
    """Per-task binary logistic regression under user-level DP by weighted noisy GD (Krichene et al. 2023, Alg. 2).

    For task i and step t = 1..T (full batch):

        g_i = sum_e w_e (sigmoid(<theta_i, x_e>) - y_e) x_e          (features clipped to Gamma_x)
        theta_i <- Proj_R[theta_i - eta_i (g_i + N(0, std^2 I) + reg theta_i)]

    Every logistic per-example gradient has norm <= ||x_e|| <= Gamma_x for any theta, so removing
    a user with spend <= beta moves the stacked gradient by <= sqrt(beta) Gamma_x: each step is a
    Gaussian mechanism with multiplier z (std = z sqrt(beta) Gamma_x), T steps
    ``SelfComposed(Gaussian(z), T)``. The step eta_i = learning_rate / (Gamma_x^2 omega_i nhat_i / 4 + reg)
    is 1/smoothness of task i's weighted loss, from public counts and weights only.
    Labels must be 0/1. Other parameters (and the fitted attributes, ``weights_`` being a private
    diagnostic) as :class:`MultiTaskDPRegressor`.
    """

    reg: float = param(NON_NEGATIVE, default=1e-2)
    radius: float = param(POSITIVE, default=10.0)
    learning_rate: float = param(POSITIVE, default=1.0)

    def _make_solver(self, z: float) -> PrivateSolver:
        """Algorithm 2 with the logistic loss (labels in {0, 1}), on the shared noisy-GD solver."""
        steps = {"iterations": int(self.iterations), "radius": float(self.radius), "schedule": 1.0}
        return self._solver("noisy_gd", z, label_bound=1.0, reg=float(self.reg), loss=LogisticLoss(), **steps)

    def fit(self, X=None, y=None, tasks=None, users=None, problem: MultiTaskProblem | None = None):
        """Fit on per-example features, 0/1 labels, ``tasks`` and ``users`` (or a ``problem``)."""
        problem = _as_problem(X, y, tasks, users, problem)
        if np.any((problem.labels != 0) & (problem.labels != 1)):
            raise ValueError("MultiTaskDPClassifier labels must be 0 or 1")
        lr, reg, gx = float(self.learning_rate), float(self.reg), float(self.max_norm)

        def prepare(solver, counts, omega):
            # eta_i = learning_rate / smoothness of task i's weighted loss, from public counts and weights
            eta = lr / (gx * gx * omega * counts / 4.0 + reg + 1e-12)
            return dataclasses.replace(solver, schedule=lambda t: eta)

        return self._fit_pipeline(problem, prepare)

    def predict_proba(self, X, tasks) -> np.ndarray:
        p1 = 1.0 / (1.0 + np.exp(-self.decision_function(X, tasks)))
        return np.stack([1 - p1, p1], axis=1)

    def predict(self, X, tasks) -> np.ndarray:
        return (self.decision_function(X, tasks) > 0).astype(np.int64)

    def score(self, X, y, tasks) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X, tasks) == np.asarray(y)))
