"""Popularity-sliced metrics (Krichene et al., ICML 2023, Sec. 5 and App. D.2).

Buckets: the (optionally restricted) items are sorted by **increasing training count** — equal
counts ordered by item index — and cut into ``n_buckets`` contiguous groups of equal size
(``np.array_split``: when the count does not divide, the first buckets get one item more).
Bucket 0 is the least popular. Items outside ``items`` get bucket ``-1`` and are ignored.

Per-bucket RMSE (as in the authors' reference implementation): ``sqrt(sum_i mse_i n_i / sum_i n_i)``
over the bucket's items, with ``mse_i`` the mean squared error of item i's test pairs and ``n_i``
their number — i.e. exactly the RMSE over the test pairs whose item lies in the bucket. A bucket
without test pairs is NaN.

Per-bucket Recall (Krichene et al., Sec. 5): for bucket b with cut-off ``k_b``, both the **candidates**
and the **targets** are restricted to the bucket's items: a user's ranking is computed among bucket-b items
not in their history, their targets are ``T_j ∩ B_b``, and
``Recall_b = (1/n_b) sum_j |T_j ∩ B_b ∩ topk_b(j)| / min(k_b, |T_j ∩ B_b|)`` over the ``n_b``
users with at least one target in the bucket (others dropped). The paper's option
``ks = [100, 80, 60, 40, 20]`` gives larger k to tail buckets (first entry = bucket 0).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_int
from .metrics import _as_csr, _check_factors, _discounts
from .topk import hits_of, stream_topk

#: The paper's per-bucket cut-offs, least popular bucket first (Krichene et al. 2023, Sec. 5, footnote 2).
PAPER_SLICED_KS = (100, 80, 60, 40, 20)


def popularity_buckets(train_counts, n_buckets: int = 5, items=None) -> np.ndarray:
    """Bucket index per item (int64 array of length ``len(train_counts)``; -1 = not bucketed)."""
    counts = np.asarray(train_counts).ravel()
    n_buckets = check_int(n_buckets, "n_buckets", minimum=1)
    idx = np.arange(counts.size) if items is None else np.unique(np.asarray(items, dtype=np.int64))
    if idx.size and (idx.min() < 0 or idx.max() >= counts.size):
        raise ValueError("items contains an index outside the catalogue")
    order = idx[np.lexsort((idx, counts[idx]))]  # by count, then by item index
    out = np.full(counts.size, -1, dtype=np.int64)
    for b, part in enumerate(np.array_split(order, n_buckets)):
        out[part] = b
    return out


def top_items(train_counts, fraction: float) -> np.ndarray:
    """Indices of the ``ceil(fraction * m)`` most-trained items (ties: lower index first)."""
    counts = np.asarray(train_counts).ravel()
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    n = int(np.ceil(fraction * counts.size))
    order = np.lexsort((np.arange(counts.size), -counts))
    return np.sort(order[:n])


def sliced_rmse(predictions, y, item_of_pair, buckets, n_buckets: int | None = None) -> list:
    """Per-bucket RMSE (module docstring); ``item_of_pair[e]`` is the item of test pair e."""
    p = np.asarray(predictions, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    items = np.asarray(item_of_pair, dtype=np.int64).ravel()
    buckets = np.asarray(buckets, dtype=np.int64)
    if not (p.size == y.size == items.size):
        raise ValueError("predictions, y and item_of_pair must have the same length")
    nb = int(buckets.max()) + 1 if n_buckets is None else int(n_buckets)
    b = buckets[items]
    ok = b >= 0
    se = np.bincount(b[ok], weights=(p[ok] - y[ok]) ** 2, minlength=nb)[:nb]
    n = np.bincount(b[ok], minlength=nb)[:nb]
    with np.errstate(invalid="ignore", divide="ignore"):
        return [float(v) for v in np.sqrt(se / n)]


def sliced_recall(
    user_factors,
    item_factors,
    targets,
    buckets,
    history=None,
    ks=20,
    item_bias=None,
    n_buckets: int | None = None,
    chunk: int | None = None,
    with_ndcg: bool = False,
    memory_budget: int | None = None,
):
    """Per-bucket Recall@k_b (module docstring). ``ks``: one int or one cut-off per bucket.

    Returns a list of recalls (bucket 0 first); with ``with_ndcg`` a pair ``(recalls, ndcgs)``.
    Empty buckets and buckets where no user has a target give NaN. Each bucket is ranked on its
    own (its items' scores only), users ``chunk`` at a time or as many as ``memory_budget`` allows
    (:mod:`privrec.evaluation.topk`); targets and history stay sparse.
    """
    U, V = _check_factors(user_factors, item_factors)
    shape = (U.shape[0], V.shape[0])
    targets = _as_csr(targets, "targets", shape)
    targets.eliminate_zeros()
    history = _as_csr(history, "history", shape)
    buckets = np.asarray(buckets, dtype=np.int64)
    if buckets.shape != (V.shape[0],):
        raise ValueError(f"buckets must have one entry per item ({V.shape[0]}), got {buckets.shape}")
    nb = int(buckets.max()) + 1 if n_buckets is None else check_int(n_buckets, "n_buckets", 1)
    ks = [check_int(int(k), "k", 1) for k in np.broadcast_to(np.asarray(ks), (nb,))]
    bias = None if item_bias is None else np.asarray(item_bias, dtype=np.float32)
    rec = [float("nan")] * nb
    nd = [float("nan")] * nb
    for b in range(nb):
        cols = np.flatnonzero(buckets == b)
        if cols.size == 0:
            continue
        tb = targets[:, cols]  # the bucket's targets, columns = positions in ``cols``
        nt = np.diff(tb.indptr)
        users = np.flatnonzero(nt > 0)
        if users.size == 0:
            continue
        k = ks[b]
        disc = _discounts(k)
        cum_disc = np.cumsum(disc)
        hb = None if history is None else history[:, cols]
        recall_u = np.zeros(users.size)
        ndcg_u = np.zeros(users.size)
        vb, bb = V[cols], (None if bias is None else bias[cols])
        for a, b_, top in stream_topk(U, vb, k, bb, hb, users, chunk, memory_budget):
            rows = users[a:b_]
            hits = hits_of(top, tb[rows])
            denom = np.minimum(k, nt[rows]).astype(np.float64)
            recall_u[a:b_] = hits.sum(axis=1) / denom
            ndcg_u[a:b_] = (hits * disc).sum(axis=1) / cum_disc[denom.astype(np.int64) - 1]
        rec[b] = float(np.sum(recall_u)) / users.size
        nd[b] = float(np.sum(ndcg_u)) / users.size
    return (rec, nd) if with_ndcg else rec
