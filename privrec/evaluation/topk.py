"""Batched, deterministic top-k over dense float32 score blocks (Krichene et al., ICML 2023, App. D.1).

Every ranking metric in :mod:`privrec.evaluation` goes through :func:`topk_indices`, so tie
handling is the same everywhere:

* items are ordered by **decreasing score, then increasing item index** — among equal scores
  the lower column index wins, both for *which* items enter the top k and for their order;
* excluded entries (scores of ``-inf``, e.g. a user's fold-in history) are never returned:
  their slots are filled with ``-1`` when a row has fewer than ``k`` admissible items.

Selection is ``np.partition`` (linear time per row) followed by a small sort of the ``k``
winners, so the cost per row is O(n_items + k log k) with no Python loop over rows.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_int

#: Default number of rows scored at once: bounds peak memory to ``chunk * n_items`` float32.
DEFAULT_CHUNK = 2048


def topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Return the ``k`` best column indices of each row of ``scores`` (shape ``(rows, k)``).

    Ties are broken towards the lower column index (module docstring); ``-inf`` entries are
    inadmissible and reported as ``-1``. ``k`` larger than the number of columns is clipped
    and the result padded with ``-1`` so the shape is always ``(rows, k)``. NaN scores raise.
    """
    k = check_int(k, "k", minimum=1)
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must be a 2-D array, got shape {scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN; check the model's factors")
    rows, n = scores.shape
    out = np.full((rows, k), -1, dtype=np.int64)
    kk = min(k, n)
    if rows == 0 or kk == 0:
        return out
    # kth largest value of each row (the selection threshold).
    kth = np.partition(scores, n - kk, axis=1)[:, n - kk][:, None]
    greater = scores > kth
    n_greater = greater.sum(axis=1, keepdims=True)
    ties = scores == kth
    # keep the lowest-indexed ties until each row holds exactly kk items
    tie_rank = np.cumsum(ties, axis=1)
    selected = greater | (ties & (tie_rank <= kk - n_greater))
    r, c = np.nonzero(selected)  # row-major: columns ascending within a row
    cols = c.reshape(rows, kk)
    vals = scores[r, c].reshape(rows, kk)
    order = np.argsort(-vals, axis=1, kind="stable")  # stable: lower index first among ties
    cols = np.take_along_axis(cols, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    cols[np.isneginf(vals)] = -1
    out[:, :kk] = cols
    return out


def iter_chunks(n: int, chunk: int = DEFAULT_CHUNK):
    """Yield ``(start, stop)`` pairs covering ``range(n)`` in blocks of at most ``chunk``."""
    chunk = check_int(chunk, "chunk", minimum=1)
    for start in range(0, n, chunk):
        yield start, min(n, start + chunk)


def score_block(user_factors: np.ndarray, item_factors: np.ndarray, item_bias=None) -> np.ndarray:
    """Dense float32 scores ``U V^T (+ item_bias)`` for one block of users."""
    s = np.asarray(user_factors, dtype=np.float32) @ np.asarray(item_factors, dtype=np.float32).T
    if item_bias is not None:
        s += np.asarray(item_bias, dtype=np.float32)[None, :]
    return s


def mask_history(scores: np.ndarray, history, rows: np.ndarray) -> None:
    """Set ``scores[r, j] = -inf`` for every item ``j`` in row ``rows[r]`` of CSR ``history``."""
    if history is None:
        return
    sub = history[rows]
    r = np.repeat(np.arange(len(rows)), np.diff(sub.indptr))
    scores[r, sub.indices] = -np.inf
