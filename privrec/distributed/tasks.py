"""Worker-side task bodies of the distributed DP-ALS fit (one concern: what runs where a
partition's block lives; the driver, :mod:`privrec.distributed.fit`, decides what runs when and
draws every random number).

Implements the "partition tasks" and the leaves / roots of the "reduction" of
:mod:`privrec.distributed.fit` -- per partition, the stages of :meth:`privrec.models.DPALS.fit`
(Krichene et al., ICML 2023, Alg. 3 and App. D.1) on its users: validation summaries, the
training matrix, sampled (or exact) item counts and rating sums keyed on the users' ids, head
restriction, centering, the per-user allocation and ridge, the item-major batch structure
(:class:`PartitionState`, kept on the worker between steps), and per ALS step the user step and
the item-step inputs (:class:`StepData`); per public item block, the leaf statistics
(``chunk_statistics``) and, at the root of its summation tree
(:func:`~privrec.distributed.reduce_item_blocks`), the solver's release of each noise block it
covers (SSP or noisy GD, Krichene et al. 2023, Alg. 1 / Alg. 2) or the exact ridge solve. Every function is pure and
picklable (a task lost with a worker is recomputed with the same arguments, the same seeds).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..allocation import (
    adaptive_weights,
    sampled_item_counts,
    sampled_rating_sum,
    stable_user_keys,
    tail_weights,
    uniform_weights,
)
from ..allocation.partition import weighted_item_counts
from ..privacy import clip_labels
from ..solvers import TaskBatch
from ..solvers._linalg import chunk_statistics, prepared_inputs, single_threaded_blas, spd_solve
from ..solvers.ridge import frequency_regularization, scaled_regularization
from .blocks import block_from_matrix
from .partition import PartitionBlock

# ---------------------------------------------------------------------- per-partition state


@dataclass
class PartitionState:
    """What a partition keeps on its worker between ALS steps (never gathered).

    ``centered``: the head-restricted ratings (binarised for implicit feedback) minus the global
    mean, in the fit's dtype (local users x head items); ``rows``: local user row of every entry;
    ``user_counts``: head-restricted ratings per local user; ``reg_users``: the user-step ridge;
    ``batch0``: the item-major :class:`~privrec.solvers.TaskBatch` structure (allocation weights,
    entry positions as labels) and ``order`` the entry permutation into it, so a step regroups its
    labels without another sort (as the local fit does).
    """

    centered: sp.csr_matrix
    rows: np.ndarray
    user_counts: np.ndarray
    reg_users: np.ndarray | None
    batch0: TaskBatch
    order: np.ndarray


@dataclass
class StepData:
    """One partition's item-step input of one ALS step: the batch (labels, weights, features), the
    features as the solver sees them (``x``, clipped for SSP), the partition's largest unit spend,
    its partial global Gramian (``None`` without gravity) and the users' unclipped solution (the
    warm start of the next CG user step, ``DPALS._user_step``)."""

    batch: TaskBatch
    x: np.ndarray
    spend: float
    gram: np.ndarray | None
    warm: np.ndarray


# ---------------------------------------------------------------------- task bodies (pure, picklable)


def _identity(value):
    return value


def _scan(block: PartitionBlock) -> dict:
    """Validation summary of one partition's raw values (nnz, min, max, negatives)."""
    data = np.asarray(block.matrix.data)
    if not data.size:
        return {"nnz": 0, "min": math.inf, "max": -math.inf, "negative": 0}
    return {
        "nnz": int(data.size),
        "min": float(data.min()),
        "max": float(data.max()),
        "negative": int(np.count_nonzero(data < 0)),
    }


def _training_matrix(block: PartitionBlock, offset: int, implicit: bool) -> sp.csr_matrix:
    """The partition's rows of the fit's matrix (``R_full`` of the local fit): binarised for implicit feedback."""
    from ..models.dpals import _binarised

    return _binarised(block.matrix) if implicit else block.matrix


def _partition_user_keys(block: PartitionBlock, offset: int) -> np.ndarray:
    """The sampling keys of the partition's users: the stable hash of their ids, as the local fit
    keys an ``Interactions``' users (``FactorizationModel._sampling_user_keys``)."""
    return stable_user_keys(block.user_ids)


def _sampled_counts(R: sp.csr_matrix, offset: int, k: int, key: int, user_keys=None) -> np.ndarray:
    return sampled_item_counts(R, k, key, offset, user_keys)


def _weighted_counts(R: sp.csr_matrix, offset: int, max_items: int, key: int, user_keys=None) -> np.ndarray:
    """The partition's users' part of the item selection's weighted counts
    (:func:`~privrec.allocation.partition.weighted_item_counts`, keyed on the users' ids: the
    local fit's samples); the driver sums the partitions."""
    return weighted_item_counts(R, max_items, key, user_keys, offset)


def _select_columns(block: PartitionBlock, offset: int, columns: np.ndarray) -> PartitionBlock:
    """The partition's block on the privately selected item columns (``columns``: sorted column
    indices), as the local fit restricts its matrix to them."""
    m = block.matrix[:, np.asarray(columns, dtype=np.int64)].tocsr()
    m.sort_indices()
    m = sp.csr_matrix((m.data.astype(np.float32, copy=False), m.indices.astype(np.int32), m.indptr), shape=m.shape)
    return block_from_matrix(block.index, block.user_ids, m)


def _block_nnz(block: PartitionBlock) -> int:
    return int(block.matrix.nnz)


def _exact_counts(R: sp.csr_matrix, offset: int) -> np.ndarray:
    return np.bincount(R.indices, minlength=R.shape[1]).astype(np.float64)


def _sampled_sum(
    R: sp.csr_matrix, offset: int, k: int, key: int, bound: float, mid: float, user_keys=None
) -> tuple[float, float]:
    # the local PrivatePipeline.release_mean shifts by the public midpoint first (same expression)
    m = R if not mid else sp.csr_matrix((R.data - mid, R.indices, R.indptr), shape=R.shape)
    return sampled_rating_sum(m, k, key, bound, offset, user_keys)


def _exact_sum(R: sp.csr_matrix, offset: int) -> tuple[float, float]:
    return float(R.data.sum(dtype=np.float64)), float(R.nnz)


def _weights(
    R: sp.csr_matrix, offset: int, counts_h: np.ndarray, cfg, key: int | None, user_keys=None
) -> sp.csr_matrix:
    """``PrivatePipeline.allocate`` for one block of users (the sampling key drawn by the driver,
    the users' own keys from their ids)."""
    dtype = cfg.dtype
    kind = cfg.allocation if cfg.private else "full"
    if kind == "full":
        return sp.csr_matrix((np.ones(R.nnz, dtype=dtype), R.indices, R.indptr), shape=R.shape)
    if kind == "uniform":
        return uniform_weights(R, int(cfg.budget), dtype=dtype, key=key, row_offset=offset, user_keys=user_keys)
    if kind == "tail":
        return tail_weights(R, counts_h, int(cfg.budget), dtype=dtype, key=key, row_offset=offset, user_keys=user_keys)
    return adaptive_weights(R, counts_h, cfg.mu, cfg.budget, dtype=dtype)


def _prepare(
    R_full: sp.csr_matrix,
    offset: int,
    head: np.ndarray,
    mu: float,
    counts_h: np.ndarray,
    key: int | None,
    n_users: int,
    proxy,
    cfg,
    user_keys=None,
) -> PartitionState:
    """Head restriction, centering, allocation, user ridge (when per user) and the batch structure."""
    dtype = cfg.dtype
    n_items = R_full.shape[1]
    R = (R_full[:, head] if head.size != n_items else R_full).tocsr()
    if not R.has_sorted_indices:
        R = R.copy()  # never sort the partition block itself in place
        R.sort_indices()
    centered = R.copy()
    centered.data = centered.data.astype(dtype, copy=True)
    if mu:
        centered.data -= dtype.type(mu)
    W = _weights(R, offset, counts_h, cfg, key, user_keys)
    user_counts = np.diff(R.indptr)
    rows = np.repeat(np.arange(R.shape[0]), user_counts)
    if cfg.private:
        reg_users: np.ndarray | None = proxy._user_regularization(cfg, user_counts)[0]
    elif not cfg.user_reg_exponent:
        reg_users = frequency_regularization(user_counts, cfg.user_reg, 0.0)[0]
    else:
        reg_users = None  # needs the global normaliser: _with_user_reg
    width = cfg.factors + (1 if cfg.biases else 0)
    where = centered.copy()
    where.data = np.arange(1, centered.nnz + 1, dtype=np.float64)
    batch0 = proxy.item_batch(cfg, where, W, np.zeros((R.shape[0], width), dtype=dtype), counts_h, n_users)
    order = batch0.labels.astype(np.int64) - 1
    return PartitionState(centered, rows, user_counts, reg_users, batch0, order)


def _user_count_sums(state: PartitionState, exponent: float) -> tuple[float, float]:
    """The two sums of ``frequency_regularization``'s normaliser over this partition's users."""
    c = np.asarray(state.user_counts, dtype=np.float64)
    return float(c.sum()), float(np.dot(c, (c + 1.0) ** exponent))


def _with_user_reg(state: PartitionState, reg: float, exponent: float, norm: float) -> PartitionState:
    """``frequency_regularization`` with the global normaliser (non-private fits)."""
    return dataclasses.replace(state, reg_users=scaled_regularization(state.user_counts, reg, exponent, norm))


def _user_step(
    state: PartitionState, side, proxy, cfg, max_norm: float | None, gravity: str | None, warm=None
) -> StepData:
    """User step of the partition's users (warm-started at their previous solution ``warm``, as
    in ``DPALS.fit``), then its item-step batch."""
    V, b_items = side["V"], side["b"]
    dtype = cfg.dtype
    U, b_users, solution = proxy._user_step(cfg, state.centered, V, b_items, state.reg_users, warm)
    labels = state.centered.data.copy()
    if b_users is not None:
        labels -= b_users[state.rows]
    if cfg.private:
        labels = clip_labels(labels, cfg.label_bound).astype(dtype, copy=False)
    n = state.centered.shape[0]
    feats = np.hstack([U, np.full((n, 1), dtype.type(cfg.bias_feature), dtype=dtype)]) if cfg.biases else U
    batch = dataclasses.replace(state.batch0, labels=labels[state.order], features=feats)
    x, _ = prepared_inputs(batch, max_norm, None, dtype, labels=False)
    spend = batch.unit_budget() if cfg.private else 0.0
    gram = None
    with single_threaded_blas():
        if gravity == "features":  # SSP / ExactSolver: global_gramian(x) of the solver's features
            gram = x.T @ x
        elif gravity == "factors":  # ALS: alpha * U^T U in float64, the bias coordinate without gravity
            u64 = np.asarray(U, dtype=np.float64)
            gram = u64.T @ u64
    return StepData(batch, x, spend, gram, solution)


def _spend(step: StepData) -> float:
    return step.spend


def _warm(step: StepData) -> np.ndarray:
    return step.warm


def _gram(step: StepData) -> np.ndarray | None:
    return step.gram


def _statistics(step: StepData, offset: int, items: slice, label_bound: float | None, exact: bool, hook):
    """Leaf: this partition's exact statistics of the item tasks ``items`` (``chunk_statistics``)."""
    if hook is not None:
        hook(offset, items)
    batch = step.batch
    with single_threaded_blas():
        G, b = chunk_statistics(batch, step.x, batch.labels, items.start, items.stop, label_bound=label_bound)
    if exact:
        return G, b, np.diff(batch.indptr[items.start : items.stop + 1])
    return G, b


def _release_blocks(total, k: int, seeds, solver, reg: np.ndarray, gram, block_tasks: int, gd=None):
    """Root of a private block: the solver's ``release_block`` once per noise block it covers (SSP:
    noisy statistics and solve; noisy GD: ``gd["theta0"]`` / ``gd["steps"]`` give the public start
    and step sizes of its T steps)."""
    G, b = total
    t0 = k * block_tasks
    out = np.empty(b.shape, dtype=np.dtype(solver.dtype))
    keep = gd is None and getattr(solver, "keep_diagonal", False)
    diag = np.empty(b.shape, dtype=np.float64) if keep else None
    rhs = np.empty(b.shape, dtype=np.float64) if keep else None
    n_bad = 0
    with single_threaded_blas():
        for j, seed in enumerate(seeds):
            s0, s1 = solver.block_tasks(j, j + 1, len(b))
            lo, hi = t0 + s0, t0 + s1
            if gd is None:
                extra = {} if diag is None or rhs is None else {"diagonal_out": diag[s0:s1], "rhs_out": rhs[s0:s1]}
                out[s0:s1], bad = solver.release_block(G[s0:s1], b[s0:s1], reg[lo:hi], gram, seed, **extra)
                n_bad += bad
            else:
                out[s0:s1] = solver.release_block(
                    G[s0:s1], b[s0:s1], reg[lo:hi], gram, seed, gd["theta0"][lo:hi], gd["steps"][:, lo:hi]
                )
    return (out, n_bad) if diag is None else (out, n_bad, diag, rhs)


def _solve_exact(total, k: int, seed, reg: np.ndarray, gram, block_tasks: int):
    """Root of a non-private block: the ridge solve of ``ExactSolver`` / ALS from the summed statistics
    (tasks without examples get zeros, as ``solve_rows`` gives them)."""
    G, b, sizes = total
    t0 = k * block_tasks
    A = G
    d = A.shape[-1]
    diag = np.arange(d)
    A[:, diag, diag] += reg[t0 : t0 + len(b), None]
    if gram is not None:
        A += gram
    out = np.zeros(b.shape, dtype=b.dtype)
    has = np.flatnonzero(sizes > 0)
    if has.size:
        with single_threaded_blas():
            out[has] = spd_solve(A[has], b[has])
    return out, 0


def _head_user_counts(R: sp.csr_matrix, offset: int, head: np.ndarray, e: float) -> tuple[float, float]:
    """``_user_count_sums`` when no state is built (no ALS step)."""
    c = np.diff((R[:, head] if head.size != R.shape[1] else R).tocsr().indptr).astype(np.float64)
    return float(c.sum()), float(np.dot(c, (c + 1.0) ** e))


def _out_of_range(block: PartitionBlock, low: float, high: float) -> int:
    data = np.asarray(block.matrix.data)
    return int(np.count_nonzero((data < low) | (data > high)))


__all__ = ["PartitionState", "StepData"]
