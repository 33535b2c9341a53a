"""Non-private weighted ridge per task (the reference for spec 004 §2's reductions)."""

from __future__ import annotations

from dataclasses import dataclass

import dp_accounting
import numpy as np

from .._validation import check_positive
from ._linalg import (
    DEFAULT_CHUNK_EXAMPLES,
    DEFAULT_CHUNK_TASKS,
    as_task_array,
    check_execution,
    chunk_statistics,
    global_gramian,
    map_chunks,
    prepared_inputs,
    spd_solve,
    task_chunks,
)
from .batch import SolverResult, TaskBatch


@dataclass(frozen=True)
class ExactSolver:
    """theta_i = argmin sum_e w_e (<theta, x_e> - y_e)^2 + alpha_0 theta^T G theta + reg_i |theta|^2.

    ``G`` = sum over all units of x_u x_u^T (gravity / unobserved weight ``unobserved_weight``,
    spec 004 §6). ``reg``: scalar or per-task array. Optional ``max_norm`` / ``label_bound``
    apply the same clipping as the private solvers. Emits one ``NonPrivateDpEvent`` so that a
    ledger using it can never report a finite epsilon. Singular systems use the pseudo-inverse
    (tasks without examples and ``reg = 0`` get zero parameters).
    """

    reg: float | np.ndarray = 1.0
    unobserved_weight: float = 0.0
    max_norm: float | None = None
    label_bound: float | None = None
    dtype: type = np.float32
    chunk_tasks: int = DEFAULT_CHUNK_TASKS
    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES
    n_jobs: int | None = None

    def __post_init__(self):
        check_positive(self.unobserved_weight, "unobserved_weight", allow_zero=True)
        if self.max_norm is not None:
            check_positive(self.max_norm, "max_norm")
        if self.label_bound is not None:
            check_positive(self.label_bound, "label_bound")
        check_execution(self.chunk_tasks, self.chunk_examples, self.n_jobs)

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.NonPrivateDpEvent()

    def solve(self, batch: TaskBatch, rng=None) -> SolverResult:
        dtype = np.dtype(self.dtype)
        m, d = batch.n_tasks, batch.dim
        reg = as_task_array(self.reg, m, "reg", dtype)
        x, _ = prepared_inputs(batch, self.max_norm, None, dtype, labels=False)  # labels clipped per block
        gram = global_gramian(x) * dtype.type(self.unobserved_weight) if self.unobserved_weight > 0 else None
        eye = np.eye(d, dtype=dtype)

        def solve_chunk(c, bounds):
            t0, t1 = bounds
            G, b = chunk_statistics(batch, x, batch.labels, t0, t1, label_bound=self.label_bound)
            G += reg[t0:t1, None, None] * eye
            if gram is not None:
                G += gram
            return spd_solve(G, b)

        chunks = list(task_chunks(batch.indptr, self.chunk_tasks, self.chunk_examples))
        results = map_chunks(solve_chunk, chunks, self.n_jobs)
        params = np.concatenate(results) if results else np.zeros((0, d), dtype=dtype)
        events = [("exact solve (non-private)", dp_accounting.NonPrivateDpEvent(), {"mechanism": "none"})]
        return SolverResult(params, events, {"solver": "exact"})
