"""Clipped, weighted per-task statistics before noise (Krichene et al. 2023, Alg. 1 step 1): each
task's Gramian sum_e w_e x_e x_e^T and right-hand side sum_e w_e y_e x_e, chunk by chunk, and the
global Gramian of the gravity term.

Speed (issue 16): the Gramians are accumulated in GEMM blocks of at most
:data:`DEFAULT_BLOCK_EXAMPLES` examples -- a heavy task (a head item with 10^5 raters) is split
into several blocks, each gathered into a small per-thread buffer that stays in cache while BLAS
consumes it; light tasks (few examples each) are grouped by size and computed by one zero-padded
batched ``matmul`` per group.
"""

from __future__ import annotations

import numpy as np

from ..privacy.clipping import clip_labels, clip_rows
from ._execution import DEFAULT_CHUNK_EXAMPLES, DEFAULT_CHUNK_TASKS, _gather_buffer, single_threaded_blas, task_chunks
from .batch import TaskBatch

# Examples per GEMM block of the Gramian step: the gathered (block, d) rows (1 MiB at d = 64,
# float32) stay in L2 while BLAS consumes them; tasks with fewer than LIGHT_TASK_EXAMPLES examples
# are grouped (similar sizes, zero-padded) into batched products of about this many rows.
DEFAULT_BLOCK_EXAMPLES = 4096
LIGHT_TASK_EXAMPLES = 1024


def prepared_inputs(batch: TaskBatch, max_norm, label_bound, dtype, labels: bool = True):
    """Clipped features (units, d) and clipped labels, cast to ``dtype`` (Krichene et al. 2023, Alg. 1 step 1).

    ``labels=False`` returns ``(x, None)``: callers then pass ``label_bound`` to
    :func:`chunk_statistics`, which clips block by block (no clipped copy of all labels).
    """
    x = np.asarray(batch.features, dtype=dtype)
    if max_norm is not None:
        x = clip_rows(x, max_norm)
    if not labels:
        return x, None
    y = np.asarray(batch.labels, dtype=dtype)
    if label_bound is not None:
        y = clip_labels(y, label_bound).astype(dtype, copy=False)
    return x, y


def chunk_statistics(
    batch: TaskBatch,
    x: np.ndarray,
    y: np.ndarray,
    t0: int,
    t1: int,
    label_bound: float | None = None,
    block_examples: int = DEFAULT_BLOCK_EXAMPLES,
    light_examples: int = LIGHT_TASK_EXAMPLES,
):
    """Weighted Gramians sum_e w_e x_e x_e^T and RHS sum_e w_e y_e x_e for tasks [t0, t1).

    ``y`` holds the labels of all examples (already clipped, or clipped here block by block when
    ``label_bound`` is given, so no clipped copy of every label is needed). Never materialises
    (nnz, d, d) nor the chunk's (examples, d) rows:

    * a task with at least ``light_examples`` examples is accumulated over GEMM blocks of at most
      ``block_examples`` sqrt(w)-scaled rows (gathered into a per-thread buffer that stays in
      cache; ``Xs.T @ Xs`` is a BLAS rank-k update); a task of one block is computed exactly as a
      single product, so its Gramian is bit-identical to the unblocked one;
    * lighter tasks are sorted by size and grouped (lengths within a group differ by at most 25%
      or 4) into zero-padded (B, L, d) stacks of about ``block_examples`` rows, one batched
      ``matmul`` per group (padding rows have weight 0 and add exact zeros).
    """
    d = x.shape[1]
    dtype = x.dtype
    indptr = batch.indptr
    fid, w = batch.feature_ids, batch.weights
    m = t1 - t0
    starts = indptr[t0:t1]
    sizes = indptr[t0 + 1 : t1 + 1] - starts
    G = np.zeros((m, d, d), dtype=dtype)
    b = np.zeros((m, d), dtype=dtype)
    block = max(1, int(block_examples))

    def labels(s, e, sw):  # cast, then clip: the order of prepared_inputs
        ys = y[s:e].astype(dtype, copy=False)
        if label_bound is not None:
            ys = clip_labels(ys, label_bound).astype(dtype, copy=False)
        return ys * sw

    heavy = np.flatnonzero(sizes >= max(1, light_examples))
    if heavy.size:
        tmp = np.empty((d, d), dtype=dtype)
        # BLAS kernels work on 16-column panels: for d = 64 + r (r < 16, e.g. the bias feature)
        # a rank-k update of the first 64 columns plus a thin product for the last r is ~6% faster
        # than the rank-k update of all d columns
        d0 = d - d % 16 if d > 16 and d % 16 else d
        for i in heavy:
            s0, s1 = int(starts[i]), int(starts[i] + sizes[i])
            n_blocks = -(-(s1 - s0) // block)
            step = -(-(s1 - s0) // n_blocks)  # equal blocks: no tiny remainder
            for s in range(s0, s1, step):
                e = min(s + step, s1)
                xs = _gather_buffer(e - s, d, dtype)
                np.take(x, fid[s:e], axis=0, out=xs, mode="clip")  # ids validated by TaskBatch
                sw = np.sqrt(w[s:e].astype(dtype, copy=False))
                xs *= sw[:, None]
                ys = labels(s, e, sw)
                target = G[i] if s == s0 else tmp
                if d0 == d:
                    np.matmul(xs.T, xs, out=target)
                else:
                    _split_gramian(xs, d0, target)
                if s == s0:
                    np.matmul(ys, xs, out=b[i])
                else:
                    G[i] += tmp
                    b[i] += ys @ xs

    light = np.flatnonzero((sizes > 0) & (sizes < max(1, light_examples)))
    if light.size:
        light = light[np.argsort(sizes[light], kind="stable")]
        lsizes = sizes[light]
        n = light.size
        g0 = 0
        while g0 < n:
            c0 = int(lsizes[g0])
            cap = int(np.searchsorted(lsizes, max(int(c0 * 1.25), c0 + 4), side="right"))
            g1 = min(n, cap)
            length = int(lsizes[g1 - 1])
            g1 = min(g1, g0 + max(1, block // length))
            length = int(lsizes[g1 - 1])
            idx = light[g0:g1]
            slot = np.arange(length)
            mask = slot[None, :] < sizes[idx][:, None]
            pos = np.where(mask, starts[idx][:, None] + slot[None, :], starts[idx][:, None])
            xs = _gather_buffer(pos.size, d, dtype)
            np.take(x, fid[pos.ravel()], axis=0, out=xs, mode="clip")
            X = xs.reshape(idx.size, length, d)
            sw = np.where(mask, np.sqrt(w[pos].astype(dtype, copy=False)), dtype.type(0))
            X *= sw[:, :, None]
            ys = y[pos].astype(dtype, copy=False)
            if label_bound is not None:
                ys = clip_labels(ys, label_bound).astype(dtype, copy=False)
            ys = ys * sw
            Xt = X.transpose(0, 2, 1)
            G[idx] = np.matmul(Xt, X)
            b[idx] = np.matmul(Xt, ys[:, :, None])[:, :, 0]
            g0 = g1
    return G, b


def _split_gramian(xs: np.ndarray, d0: int, out: np.ndarray) -> None:
    """out = xs^T xs (exactly symmetric) from a rank-k update of the first d0 columns and one thin
    product xs^T xs[:, d0:] for the rest."""
    x0, x1 = xs[:, :d0], xs[:, d0:]
    np.matmul(x0.T, x0, out=out[:d0, :d0])
    t = xs.T @ x1  # (d, r)
    out[:d0, d0:] = t[:d0]
    out[d0:, :d0] = t[:d0].T
    corner = t[d0:]
    out[d0:, d0:] = (corner + corner.T) * out.dtype.type(0.5)


def weighted_statistics(
    batch: TaskBatch,
    max_norm=None,
    label_bound=None,
    dtype=np.float64,
    chunk_tasks: int = DEFAULT_CHUNK_TASKS,
    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES,
):
    """All tasks' clipped weighted statistics before noise: Gramians (m, d, d) and RHS (m, d).

    These are exactly what SSP perturbs (Krichene et al. 2023, Alg. 1); exposed for sensitivity tests and audits.
    """
    x, y = prepared_inputs(batch, max_norm, label_bound, dtype)
    G = np.empty((batch.n_tasks, batch.dim, batch.dim), dtype=dtype)
    b = np.empty((batch.n_tasks, batch.dim), dtype=dtype)
    with single_threaded_blas():
        for t0, t1 in task_chunks(batch.indptr, chunk_tasks, chunk_examples):
            G[t0:t1], b[t0:t1] = chunk_statistics(batch, x, y, t0, t1)
    return G, b


def global_gramian(x: np.ndarray) -> np.ndarray:
    """sum over units of x_u x_u^T (the gravity / unobserved-weight term, Krichene et al. 2023, App. D)."""
    return x.T @ x
