"""Streaming, deterministic top-k over user chunks sized from a memory budget (Krichene et al., ICML 2023, App. D.1).

Every ranking metric in :mod:`privrec.evaluation` goes through :func:`stream_topk` (and so
:func:`topk_indices`), so tie handling is the same everywhere:

* items are ordered by **decreasing score, then increasing item index** — among equal scores
  the lower column index wins, both for *which* items enter the top k and for their order;
* excluded entries (scores of ``-inf``, e.g. a user's fold-in history) are never returned:
  their slots are filled with ``-1`` when a row has fewer than ``k`` admissible items.

**Memory.** A users x items score matrix is never formed: users are scored in chunks whose rows
are sized from a memory budget (:func:`chunk_rows`): ``rows * n_items * bytes_per_entry <=
budget`` with :data:`BYTES_PER_ENTRY` bytes per (user, item) entry held at once (the float32
score, the selection's partition copy and boolean masks). The budget is
:data:`DEFAULT_MEMORY_BUDGET` (512 MiB), or ``$PRIVREC_EVAL_MEMORY_MB`` when set, or the
``memory_budget=`` argument of the functions that score users (``ranking_metrics``,
``sliced_recall``, the models' ``recommend``, ``serving.recommend_all``). A user's already-seen
items are masked from the chunk's CSR rows (no dense history). So the score buffers of an
evaluation are bounded by the budget whatever the number of users and items; a single user whose
scores alone exceed it is still one chunk of one row.

**Selection.** ``np.partition`` finds each row's k-th largest score (linear time per row); the
items above it and the lowest-indexed ties at it are kept, then the ``k`` winners are sorted: cost
per row O(n_items + k log k), no Python loop over rows.

**Rankers without factors** (a popularity ranking: every user's scores are the same item scores,
``d = 0``): the items are sorted once and each user's top k are the first k items of that order
not in their history (:func:`popularity_topk`), which is exactly what the scored path returns, at
O(k + history) per user instead of O(n_items).
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .._validation import check_int

#: default bytes of (user, item) score entries (and their selection temporaries) held at once
#: while ranking: 512 MiB; ``$PRIVREC_EVAL_MEMORY_MB`` overrides it for the process
DEFAULT_MEMORY_BUDGET = 512 << 20
#: environment variable with the budget in MiB
MEMORY_ENV = "PRIVREC_EVAL_MEMORY_MB"
#: bytes per (user, item) entry of one chunk held at once by :func:`topk_indices`: the float32 score
#: (4), the partition copy (4, freed before the mask) or the selection mask (1) and, for the rows
#: with more ties at the k-th score than places (a quarter of the rows at a time), a copy of their
#: scores, three masks and their running tie count (11 / 4)
BYTES_PER_ENTRY = 12
#: the same for the models' ``recommend`` (float32 scores, their negated copy for
#: ``np.argpartition`` and its int64 index array)
RECOMMEND_BYTES_PER_ENTRY = 16
#: former fixed chunk (rows); kept for callers that pass it explicitly
DEFAULT_CHUNK = 2048


def memory_budget(budget: int | None = None) -> int:
    """The evaluation memory budget in bytes: ``budget`` if given, else ``$PRIVREC_EVAL_MEMORY_MB``
    (MiB) if set, else :data:`DEFAULT_MEMORY_BUDGET`."""
    if budget is not None:
        return check_int(budget, "memory_budget", minimum=1)
    env = os.environ.get(MEMORY_ENV)
    if env:
        try:
            mib = float(env)
        except ValueError:
            raise ValueError(f"${MEMORY_ENV} must be a number of MiB, got {env!r}") from None
        if not mib > 0:
            raise ValueError(f"${MEMORY_ENV} must be a positive number of MiB, got {env!r}")
        return max(1, int(mib * (1 << 20)))
    return DEFAULT_MEMORY_BUDGET


def chunk_rows(n_items: int, budget: int | None = None, bytes_per_entry: int = BYTES_PER_ENTRY) -> int:
    """Users per chunk so that ``rows * n_items * bytes_per_entry <= budget`` (at least one row).

    ``budget``: bytes (``None``: :func:`memory_budget`). The float32 score buffer of a chunk is then
    at most ``4 / bytes_per_entry`` of the budget."""
    n_items = max(1, int(n_items))
    per_row = n_items * check_int(bytes_per_entry, "bytes_per_entry", minimum=1)
    return max(1, memory_budget(budget) // per_row)


def topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Return the ``k`` best column indices of each row of ``scores`` (shape ``(rows, k)``).

    Ties are broken towards the lower column index (module docstring); ``-inf`` entries are
    inadmissible and reported as ``-1``. ``k`` larger than the number of columns is clipped
    and the result padded with ``-1`` so the shape is always ``(rows, k)``. NaN scores raise.
    Temporaries: at most :data:`BYTES_PER_ENTRY` bytes per entry of ``scores``, score included.
    """
    k = check_int(k, "k", minimum=1)
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must be a 2-D array, got shape {scores.shape}")
    rows, n = scores.shape
    if rows and n and np.isnan(np.max(scores, axis=1)).any():  # max propagates NaN: one pass, no mask
        raise ValueError("scores contain NaN; check the model's factors")
    out = np.full((rows, k), -1, dtype=np.int64)
    kk = min(k, n)
    if rows == 0 or kk == 0:
        return out
    # kth largest value of each row (the selection threshold); the partitioned copy is freed at once
    kth = np.partition(scores, n - kk, axis=1)[:, n - kk].copy()[:, None]
    selected = scores >= kth  # exactly kk entries, unless ties at the threshold exceed the places
    trim = np.flatnonzero(selected.sum(axis=1) > kk)
    step = max(1, rows // 4)  # a quarter of the rows at a time: the temporaries stay within the budget
    for t0 in range(0, trim.size, step):  # keep the entries above the threshold and the lowest-indexed ties
        part = trim[t0 : t0 + step]
        sub, th = scores[part], kth[part]
        greater = sub > th
        ties = sub == th
        need = kk - greater.sum(axis=1)
        greater |= ties & (np.cumsum(ties, axis=1, dtype=np.int32) <= need[:, None])
        selected[part] = greater
        del sub, greater, ties
    r, c = np.nonzero(selected)  # row-major: columns ascending within a row
    del selected
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


def popularity_topk(item_scores, k: int, history=None, rows=None) -> np.ndarray:
    """:func:`topk_indices` of ``n_rows`` identical score rows ``item_scores``, row ``r`` without
    the items of ``history[rows[r]]``, without forming the score rows (module docstring).

    ``rows`` defaults to every row of ``history`` (then one row when ``history`` is ``None``).
    Equal to ``topk_indices(s, k)`` where ``s[r] = item_scores`` with ``-inf`` at row r's history.
    """
    k = check_int(k, "k", minimum=1)
    s = np.asarray(item_scores, dtype=np.float32).ravel()
    if np.isnan(s).any():
        raise ValueError("scores contain NaN; check the model's factors")
    n = s.size
    if history is None:
        n_rows = 1 if rows is None else len(rows)
        counts = np.zeros(n_rows, dtype=np.int64)
        hist_items = np.zeros(0, dtype=np.int64)
    else:
        sub = history if rows is None else history[np.asarray(rows, dtype=np.int64)]
        sub = sp.csr_matrix(sub)
        n_rows = sub.shape[0]
        counts = np.diff(sub.indptr).astype(np.int64)
        hist_items = sub.indices.astype(np.int64)
    out = np.full((n_rows, k), -1, dtype=np.int64)
    if n_rows == 0 or n == 0:
        return out
    # decreasing score, then increasing index; -inf items are never admissible
    order = np.lexsort((np.arange(n), -s.astype(np.float64)))
    n_adm = int(np.count_nonzero(~np.isneginf(s)))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    owner = np.repeat(np.arange(n_rows, dtype=np.int64), counts)
    p = pos[hist_items]
    keys = np.sort(owner * n + p)  # per row, the history's positions in the order, ascending
    p_sorted = keys - owner * n  # owner is sorted, so it still matches keys after the sort
    starts = np.concatenate([[0], np.cumsum(counts)])
    rank = np.arange(keys.size) - starts[owner]
    # free slots before each history position: non-decreasing within a row
    free_keys = owner * (n + 1) + (p_sorted - rank)
    j = np.arange(k, dtype=np.int64)
    query = np.arange(n_rows, dtype=np.int64)[:, None] * (n + 1) + j[None, :]
    before = np.searchsorted(free_keys, query, side="right") - starts[:-1, None]
    slot = j[None, :] + before  # position in the order of the row's (j+1)-th admissible item
    ok = slot < n_adm
    out[ok] = order[slot[ok]]
    return out


def stream_topk(
    user_factors,
    item_factors,
    k: int,
    item_bias=None,
    history=None,
    rows=None,
    chunk: int | None = None,
    memory_budget: int | None = None,
):
    """Yield ``(start, stop, top)``: the top-``k`` item indices (:func:`topk_indices`, ``-1`` padded)
    of ``rows[start:stop]`` (default: every row of ``user_factors``), chunk by chunk.

    ``user_factors[r]`` scores every item as ``user_factors[r] @ item_factors.T (+ item_bias)``;
    ``history`` (CSR, one row per row of ``user_factors``) holds the items excluded for that user.
    Chunks hold ``chunk`` rows, or (default) :func:`chunk_rows` of ``memory_budget``. A ranker
    without factors (``d = 0``) goes through :func:`popularity_topk` (same result, no score rows).
    """
    U = np.asarray(user_factors, dtype=np.float32)
    V = np.asarray(item_factors, dtype=np.float32)
    rows = np.arange(U.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    n_items = V.shape[0]
    bias = None if item_bias is None else np.asarray(item_bias, dtype=np.float32)
    if V.shape[1] == 0:
        scores = np.zeros(n_items, dtype=np.float32) if bias is None else bias
        # O(k + history) per row: chunks of many rows, memory (rows x k) bounded by the same budget
        step = chunk if chunk is not None else max(1, memory_budget_rows(k, memory_budget))
        for a, b in iter_chunks(rows.size, step):
            yield a, b, popularity_topk(scores, k, history, rows[a:b])
        return
    step = chunk if chunk is not None else chunk_rows(n_items, memory_budget)
    for a, b in iter_chunks(rows.size, step):
        r = rows[a:b]
        s = score_block(U[r], V, bias)
        mask_history(s, history, r)
        yield a, b, topk_indices(s, k)
        del s


def memory_budget_rows(width: int, budget: int | None = None) -> int:
    """Rows of ``width`` int64 entries (plus as many search temporaries) that fit the budget."""
    return chunk_rows(width, budget, bytes_per_entry=32)


def hits_of(top: np.ndarray, targets: sp.csr_matrix) -> np.ndarray:
    """Boolean ``(rows, k)``: whether ``top[r, j]`` (``-1`` = none) is among the items of row r of
    ``targets`` (CSR with one row per row of ``top``), without densifying ``targets``."""
    t = sp.csr_matrix(targets)
    if not t.has_sorted_indices:
        t = t.sorted_indices()
    n = max(int(t.shape[1]), 1)
    rows = np.repeat(np.arange(t.shape[0], dtype=np.int64), np.diff(t.indptr))
    keys = rows * n + t.indices  # sorted: row-major, indices sorted within a row
    valid = top >= 0
    if keys.size == 0:
        return np.zeros(top.shape, dtype=bool)
    q = np.arange(top.shape[0], dtype=np.int64)[:, None] * n + np.where(valid, top, 0)
    pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
    return (keys[pos] == q) & valid
