"""Non-private weighted ridge per task: the reference every private solver reduces to at zero noise
(Krichene et al., ICML 2023, Sec. 3: Algorithms 1 and 2 without noise).

It runs on :func:`privrec.solvers.ridge.solve_rows`, the library's one exact ridge engine (the
same code solves both halves of :class:`privrec.models.ALS` and the user step of DP-ALS).
"""

from __future__ import annotations

from dataclasses import dataclass

import dp_accounting
import numpy as np

from .._validation import check_int, check_positive
from ._linalg import as_task_array, global_gramian, prepared_inputs
from .batch import SolverResult, TaskBatch
from .protocol import LabelledEvent
from .ridge import solve_rows


@dataclass(frozen=True)
class ExactSolver:
    """theta_i = argmin sum_e w_e (<theta, x_e> - y_e)^2 + alpha_0 theta^T G theta + reg_i |theta|^2.

    ``G`` = sum over all units of x_u x_u^T (gravity / unobserved weight ``unobserved_weight``
    of the reference implementation). ``reg``: scalar or per-task array. Optional ``max_norm`` /
    ``label_bound`` apply the same clipping as the private solvers. Emits one
    ``NonPrivateDpEvent`` so that a ledger using it can never report a finite epsilon. Tasks
    without examples get zero parameters. ``num_threads``: worker threads (``None`` = usable cores).
    """

    reg: float | np.ndarray = 1.0
    unobserved_weight: float = 0.0
    max_norm: float | None = None
    label_bound: float | None = None
    dtype: type = np.float32
    num_threads: int | None = None

    #: a non-private solve has no noise (the protocol's attribute)
    noise_multiplier = 0.0

    def __post_init__(self):
        check_positive(self.unobserved_weight, "unobserved_weight", allow_zero=True)
        if self.max_norm is not None:
            check_positive(self.max_norm, "max_norm")
        if self.label_bound is not None:
            check_positive(self.label_bound, "label_bound")
        if self.num_threads is not None:
            check_int(self.num_threads, "num_threads", minimum=1)
        if np.dtype(self.dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {np.dtype(self.dtype)}")

    def with_noise_multiplier(self, z: float) -> ExactSolver:
        """The exact solver has no noise scale: only ``z = 0`` is accepted."""
        if z != 0:
            raise ValueError("ExactSolver is non-private: its noise multiplier is 0")
        return self

    def labelled_events(self) -> list[LabelledEvent]:
        """One ``NonPrivateDpEvent``: a ledger holding it can never report a finite epsilon."""
        return [("exact solve (non-private)", dp_accounting.NonPrivateDpEvent(), {"mechanism": "none"})]

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.NonPrivateDpEvent()

    def solve(self, batch: TaskBatch, rng=None) -> SolverResult:
        dtype = np.dtype(self.dtype)
        m = batch.n_tasks
        reg = as_task_array(self.reg, m, "reg", dtype)
        x, y = prepared_inputs(batch, self.max_norm, self.label_bound, dtype)
        gram = global_gramian(x) * dtype.type(self.unobserved_weight) if self.unobserved_weight > 0 else None
        w = batch.weights
        weights = None if w.size == 0 or bool(np.all(w == 1)) else w
        params = solve_rows(
            batch.indptr, batch.feature_ids, y, x, reg, gram, "cholesky", num_threads=self.num_threads, weights=weights
        )
        return SolverResult(params, self.labelled_events(), {"solver": "exact"})
