"""Seeded multi-task regression data (Krichene et al., ICML 2023, Appendix C): m regression tasks in
dimension d, n users, user features ``u_j`` and task parameters ``theta_i`` drawn from N(0, I) and
projected onto the unit ball, labels ``y_ij = <u_j, theta_i> + noise``, task probabilities ``q_i``
drawn from the power law with pdf ``a x^(a-1)`` on [0, 1] (``a`` in {1, 2}) and rescaled so that
``sum_i q_i = tasks_per_user`` (20); pair (i, j) observed with probability ``q_i``; a random 80/20
split of the observations. Importable from :mod:`privrec.data.synthetic` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from privrec._validation import check_fraction, check_int, check_positive
from privrec.privacy.clipping import project_ball


@dataclass
class TaskExamples:
    """Observations grouped by task (CSR-like), directly usable to build a solver ``TaskBatch``.

    Task ``i``'s examples are positions ``indptr[i]:indptr[i+1]``; example ``e`` belongs to user
    ``feature_ids[e]`` (the privacy unit; its feature row is ``features[feature_ids[e]]``) and has
    label ``labels[e]``. Within a task, users are sorted.
    """

    indptr: np.ndarray
    feature_ids: np.ndarray
    labels: np.ndarray

    @property
    def n_tasks(self) -> int:
        return len(self.indptr) - 1

    @property
    def n_examples(self) -> int:
        return len(self.labels)

    @property
    def task_counts(self) -> np.ndarray:
        return np.diff(self.indptr)

    def task_ids(self) -> np.ndarray:
        """Task index of every example."""
        return np.repeat(np.arange(self.n_tasks, dtype=np.int32), np.diff(self.indptr))

    def to_csr(self, n_users: int) -> sp.csr_matrix:
        """Tasks x users CSR of labels (note: a label exactly 0.0 would be a stored zero)."""
        return sp.csr_matrix((self.labels, self.feature_ids, self.indptr), shape=(self.n_tasks, n_users))


@dataclass
class MultiTaskRegression:
    """Output of :func:`multitask_regression` (Krichene et al. 2023, Appendix C)."""

    features: np.ndarray  # (n_users, d) user features u_j, ||u_j|| <= 1
    task_params: np.ndarray  # (n_tasks, d) true theta_i, ||theta_i|| <= 1
    task_probs: np.ndarray  # (n_tasks,) q_i, sum = tasks_per_user (before clipping at 1)
    train: TaskExamples
    test: TaskExamples
    params: dict = field(default_factory=dict)


def multitask_regression(
    n_users: int = 10_000,
    n_tasks: int = 100,
    dim: int = 5,
    power: float = 1.0,
    tasks_per_user: float = 20.0,
    noise_std: float = 1e-3,
    train_fraction: float = 0.8,
    random_state=0,
    dtype=np.float32,
) -> MultiTaskRegression:
    """Generate the multi-task regression data of Krichene et al. (ICML 2023), Appendix C.

    ``power`` is the exponent ``a`` of the task-probability law (pdf ``a x^(a-1)``, i.e. a Beta(a, 1)
    draw; the paper uses a in {1, 2}). The paper's label noise is N(0, sigma_F^2) with sigma_F = 1e-3
    (variance 1e-6), hence the default ``noise_std=1e-3``. A pair
    (task i, user j) is observed with probability ``min(q_i, 1)``; observations are split at
    random into ``train_fraction`` / rest.
    """
    params: dict[str, Any] = dict(  # the checked arguments, also recorded in the result
        n_users=check_int(n_users, "n_users", 1),
        n_tasks=check_int(n_tasks, "n_tasks", 1),
        dim=check_int(dim, "dim", 1),
        power=check_positive(power, "power"),
        tasks_per_user=check_positive(tasks_per_user, "tasks_per_user"),
        noise_std=check_positive(noise_std, "noise_std", allow_zero=True),
        train_fraction=check_fraction(train_fraction, "train_fraction", closed_high=False),
    )
    n_users, n_tasks, dim, power, tasks_per_user, noise_std, train_fraction = params.values()
    if tasks_per_user > n_tasks:
        raise ValueError(f"tasks_per_user ({tasks_per_user}) cannot exceed n_tasks ({n_tasks})")
    rng = np.random.default_rng(random_state)
    features = project_ball(rng.standard_normal((n_users, dim)), 1.0, inplace=True).astype(dtype)
    task_params = project_ball(rng.standard_normal((n_tasks, dim)), 1.0, inplace=True).astype(dtype)
    raw = rng.beta(power, 1.0, size=n_tasks)
    q = raw * (tasks_per_user / raw.sum())
    q_eff = np.minimum(q, 1.0)
    # observation mask, tasks x users, generated in chunks of tasks to bound memory
    tasks_l, users_l = [], []
    chunk = max(1, int(2_000_000 // max(n_users, 1)))
    for s in range(0, n_tasks, chunk):
        mask = rng.random((min(chunk, n_tasks - s), n_users)) < q_eff[s : s + chunk, None]
        t, u = np.nonzero(mask)
        tasks_l.append(t + s)
        users_l.append(u)
    tasks = np.concatenate(tasks_l).astype(np.int64)
    users = np.concatenate(users_l).astype(np.int32)
    if len(tasks) == 0:
        raise ValueError("no observation was generated; increase tasks_per_user or n_users")
    dots = np.einsum("ij,ij->i", features[users].astype(np.float64), task_params[tasks].astype(np.float64))
    labels = (dots + noise_std * rng.standard_normal(len(tasks))).astype(dtype)
    is_train = rng.random(len(tasks)) < train_fraction

    def group(sel):
        t = tasks[sel]
        indptr = np.zeros(n_tasks + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=n_tasks), out=indptr[1:])
        return TaskExamples(indptr, users[sel], labels[sel])  # np.nonzero order: task-major, users sorted

    return MultiTaskRegression(features, task_params, q, group(is_train), group(~is_train), params=params)
