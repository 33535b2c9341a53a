"""Each user's own choice of how much of the personal part to use (billboard model, free).

Krichene et al. (ICML 2023), Remark D.1: a user's embedding is computed from the released item
side and that user's own ratings only, on the user's side, so it costs no privacy. This module
adds one more such per-user computation: the user's ridge on the personal (low-rank) part is
chosen by exact leave-one-out (PRESS) on their own ratings, from a public grid that includes
"no personal part" (ridge = infinity).

Why: when the released item factors carry little signal (few users, small epsilon), a personal
part fitted to them adds variance and no bias reduction, and a user with many ratings fits
noise. The leave-one-out error of ridge regression has a closed form, so each user can check,
on their own history, whether the personal part predicts their held-out ratings better than
their biases alone -- and drop it when it does not. With pure-noise item factors the choice is
(in expectation) "none", and the prediction reduces to ``mean + b_i + b_u``: the private bias
model. Nothing here reads another user's data, so the item-step sensitivity is unchanged.

Two stages per user u with ratings r_ui on items I_u:

1. the user bias ``b_u = sum_i (r_ui - mean - b_i) / (n_u + reg_u)`` (ridge ``reg_u``);
2. the personal part on the residuals e_ui = r_ui - mean - b_i - b_u: ridge regression on the
   item factors V_{I_u} with ridge ``lam`` from ``grid * reg_u`` and infinity, the one with the
   smallest leave-one-out squared error (PRESS, via the hat-matrix diagonal of each ridge).

:func:`loo_personal_part` implements this two-stage form. The projection DPALS uses,
:func:`shrunk_projection`, instead compares two candidates per user: the joint ridge fit of
embedding and bias (exactly the fixed-ridge projection) against the bias alone. Fewer candidates
keep the choice itself from fitting noise.

The computation diagonalises each user's d x d Gramian once (batched ``eigh``); every grid
point then costs O(n_u d) per user.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

#: ridge multipliers tried by each user (times the user's base ridge); infinity is always added
DEFAULT_GRID = (0.25, 1.0, 4.0, 16.0, 64.0)

_CHUNK = 8192  # at most this many users per batched eigendecomposition
_CHUNK_BYTES = 64 << 20  # and at most this many bytes of per-rating outer products per chunk


def _user_chunks(indptr: np.ndarray, width: int):
    """``(start, stop)`` ranges of users whose ratings' outer products (ratings x width^2 float64)
    fit in :data:`_CHUNK_BYTES` (a single heavy user gets a chunk of its own)."""
    n_rows = len(indptr) - 1
    per_rating = max(1, width * width * 8)
    start = 0
    while start < n_rows:
        limit = indptr[start] + max(1, _CHUNK_BYTES // per_rating)
        stop = int(np.searchsorted(indptr, limit, side="right")) - 1
        stop = min(n_rows, max(start + 1, stop), start + _CHUNK)
        yield start, stop
        start = stop


def user_bias(rows: sp.csr_matrix, residual: np.ndarray, reg: np.ndarray) -> np.ndarray:
    """``sum_i residual_ui / (n_u + reg_u)`` per row (the bias stage)."""
    n_rows = rows.shape[0]
    r_idx = np.repeat(np.arange(n_rows), np.diff(rows.indptr))
    sums = np.bincount(r_idx, weights=residual, minlength=n_rows)
    return sums / (np.diff(rows.indptr) + reg)


def loo_personal_part(
    rows: sp.csr_matrix,
    residual: np.ndarray,
    item_factors: np.ndarray,
    reg: np.ndarray,
    grid=DEFAULT_GRID,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-user ridge fit of ``residual`` (aligned with ``rows.data``) on the item factors, the ridge
    chosen by leave-one-out from ``grid * reg_u`` and infinity (the two-stage form of the module
    docstring). Returns ``(U, chosen)``: the users' embeddings (zero rows where no personal part
    was chosen) and each user's chosen ridge (``inf`` = none)."""
    n_rows = rows.shape[0]
    V = np.asarray(item_factors, dtype=np.float64)
    U = np.zeros((n_rows, V.shape[1]))
    chosen = np.full(n_rows, np.inf)
    if V.shape[1] == 0 or rows.nnz == 0:
        return U, chosen
    e = np.asarray(residual, dtype=np.float64)
    r_idx = np.repeat(np.arange(n_rows), np.diff(rows.indptr))
    press_none = np.bincount(r_idx, weights=e * e, minlength=n_rows)
    reg = np.asarray(reg, dtype=np.float64)
    best_press, best_coef = press_none, U
    for mult in grid:  # one ridge at a time: the chosen coefficients are those of the chosen ridge
        coef, press = _ridge_loo(rows, e, V, reg, (float(mult),))
        better = press < best_press
        best_press = np.where(better, press, best_press)
        best_coef = np.where(better[:, None], coef, best_coef)
        chosen = np.where(better, reg * float(mult), chosen)
    return best_coef, chosen


def shrunk_projection(
    rows: sp.csr_matrix,
    item_factors: np.ndarray,
    item_bias: np.ndarray | None,
    global_mean: float,
    reg: np.ndarray,
    grid=(1.0,),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Billboard projection with each user's leave-one-out choice: ``(U, b_u, chosen_ridge)``.

    Two candidates per user, both ridge fits of the user's residuals ``r - mean - b_i``:

    * the joint fit of the user's embedding and bias on ``[V, 1]`` with ridge ``grid * reg_u``
      (with the default grid ``(1,)`` exactly the fixed-ridge projection of ``personal="fixed"``);
    * the bias alone, ``b_u = sum(e) / (n_u + reg_u)`` (ridge ``reg_u``), no personal part.

    The one with the smaller leave-one-out error (PRESS) on the user's own ratings wins (ridge
    ``inf`` in ``chosen_ridge`` = bias only). Few candidates keep the choice itself from fitting
    noise; measured: ml10m-like@0.2 at eps = 20 (8 factors), RMSE 0.637 with this choice against
    0.652 with a six-point ridge grid after a separate bias stage.
    """
    y = rows.data.astype(np.float64) - float(global_mean)
    if item_bias is not None:
        y = y - np.asarray(item_bias, dtype=np.float64)[rows.indices]
    reg = np.asarray(reg, dtype=np.float64)
    n_rows = rows.shape[0]
    n = np.diff(rows.indptr).astype(np.float64)
    r_idx = np.repeat(np.arange(n_rows), np.diff(rows.indptr))
    # bias alone: b = sum(e) / (n + reg), hat diagonal 1 / (n + reg), PRESS in closed form
    b_only = user_bias(rows, y, reg)
    h = 1.0 / (n + reg)
    loo_b = (y - b_only[r_idx]) / np.maximum(1.0 - h[r_idx], 1e-12)
    press_b = np.bincount(r_idx, weights=loo_b * loo_b, minlength=n_rows)
    # joint fit on [V, 1]: the augmented personal part (its last coordinate is the user bias)
    V = np.asarray(item_factors, dtype=np.float64)
    aug = np.hstack([V, np.ones((V.shape[0], 1))])
    coef, press_j = _ridge_loo(rows, y, aug, reg, tuple(grid))
    joint = press_j < press_b
    dtype = item_factors.dtype
    U = np.where(joint[:, None], coef[:, :-1], 0.0).astype(dtype)
    b = np.where(joint, coef[:, -1], b_only).astype(dtype)
    chosen = np.where(joint, reg * float(grid[0]), np.inf)
    return U, b, chosen


def _ridge_loo(rows, y, X_items, reg, grid) -> tuple[np.ndarray, np.ndarray]:
    """Per-user ridge fit of ``y`` on ``X_items[items]`` with the best ridge of ``grid * reg_u`` by
    PRESS: ``(coefficients, PRESS)`` (users without ratings: zeros and 0)."""
    n_rows = rows.shape[0]
    width = X_items.shape[1]
    coef = np.zeros((n_rows, width))
    best = np.full(n_rows, np.inf)
    indptr, indices = rows.indptr, rows.indices
    for start, stop in _user_chunks(indptr, width):
        lo, hi = indptr[start], indptr[stop]
        if hi == lo:
            best[start:stop] = 0.0
            continue
        e = np.asarray(y[lo:hi], dtype=np.float64)
        local = np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1]))
        X = X_items[indices[lo:hi]]
        starts = indptr[start:stop] - lo
        nonempty = np.diff(indptr[start : stop + 1]) > 0
        G = np.zeros((stop - start, width, width))
        # per-user sums of the ratings' outer products (CSR rows are contiguous: reduceat)
        G[nonempty] = np.add.reduceat(X[:, :, None] * X[:, None, :], starts[nonempty], axis=0)
        evals, Q = np.linalg.eigh(G)
        evals = np.maximum(evals, 0.0)
        Z = np.einsum("kd,kdm->km", X, Q[local])
        c = np.zeros((stop - start, width))
        c[nonempty] = np.add.reduceat(Z * e[:, None], starts[nonempty], axis=0)
        chunk_best = np.full(stop - start, np.inf)
        chunk_lam = np.ones(stop - start)
        for mult in grid:
            lam = reg[start:stop] * mult
            inv = 1.0 / (evals + lam[:, None])
            fitted = np.einsum("km,km->k", Z, (c * inv)[local])
            hat = np.einsum("km,km->k", Z * Z, inv[local])
            loo = (e - fitted) / np.maximum(1.0 - hat, 1e-12)
            press = np.bincount(local, weights=loo * loo, minlength=stop - start)
            better = press < chunk_best
            chunk_best = np.where(better, press, chunk_best)
            chunk_lam = np.where(better, lam, chunk_lam)
        empty = np.diff(indptr[start : stop + 1]) == 0
        chunk_best[empty] = 0.0
        coef[start:stop] = np.einsum("udm,um->ud", Q, c / (evals + chunk_lam[:, None]))
        best[start:stop] = chunk_best
    return coef, best
