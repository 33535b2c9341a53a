"""Offline metrics: RMSE, Recall@k, NDCG@k, Precision@k, MAP@k, coverage (Krichene et al., ICML 2023, App. D.1).

All ranking metrics take factor matrices and CSR interaction matrices aligned row by row:
``user_factors[r]`` scores every item as ``user_factors[r] @ item_factors.T (+ item_bias)``,
``targets[r]`` holds the user's held-out items and ``history[r]`` the items that are *excluded
from the candidates* (the fold-in history; Liang et al. 2018). Users are scored in float32 chunks
sized from a memory budget (:mod:`privrec.evaluation.topk`: 512 MiB by default) and the top k is
taken by :func:`topk.stream_topk` (ties: higher score first, then lower item index); targets and
history stay sparse.

Definitions (Krichene et al., App. D.1, "Metrics"):

* ``Recall@k = (1/n') sum_j |T_j ∩ topk_j| / min(k, |T_j|)`` over the n' users with at least
  one target (users without targets are dropped, not counted as zero).
* ``NDCG@k = (1/n') sum_j DCG_j / IDCG_j`` with binary gains, ``DCG = sum_{hits at rank r}
  1/log2(r+2)`` (r = 0 for the first slot) and ``IDCG = sum_{r < min(k, |T_j|)} 1/log2(r+2)``.
* ``Precision@k = (1/n') sum_j |T_j ∩ topk_j| / k`` (the usual definition: a user with fewer than
  k targets cannot reach 1).
* ``MAP@k = (1/n') sum_j AP_j`` with ``AP_j = sum_{hits at rank r} P_j@(r+1) / min(k, |T_j|)``,
  ``P_j@(r+1)`` the share of hits among the first r+1 slots: the definition of ``implicit``'s
  ``mean_average_precision_at_k`` (normalised by ``min(k, |T_j|)``, so a perfect list scores 1).
  Note that ``implicit``'s ``precision_at_k`` is *not* the usual Precision@k: it divides the total
  number of hits by ``sum_j min(k, |T_j|)``; the two agree when every evaluated user has at least
  k targets.
* ``coverage@k`` = share of the catalogue (or of ``items`` when given) that appears in at
  least one evaluated user's top-k list.
* ``RMSE = sqrt(mean over test pairs of (prediction - y)^2)``.

Every ``k`` must be at most the number of candidate items (the test matrix's columns, or
``len(items)``): :func:`ranking_metrics` refuses a larger ``k`` with a one-line ``ValueError``
(``implicit.evaluation`` returns precision 189.75 at ``K = 10**6``). Callers that evaluate at a
fixed k (the CLI's Recall@20) use :func:`ranking_k`, ``min(k, n_items)``, on small catalogues
and say so (:func:`ranking_k_note`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validation import check_finite_array, check_int
from .topk import hits_of, iter_chunks, stream_topk


def rmse(predictions, targets) -> float:
    """Root mean squared error of two equal-length vectors (NaN when empty)."""
    p = check_finite_array(np.asarray(predictions, dtype=np.float64).ravel(), "predictions")
    y = check_finite_array(np.asarray(targets, dtype=np.float64).ravel(), "targets")
    if p.shape != y.shape:
        raise ValueError(f"predictions and targets differ in length: {p.size} vs {y.size}")
    if p.size == 0:
        return float("nan")
    return float(np.sqrt(np.mean((p - y) ** 2)))


def pair_predictions(user_factors, item_factors, rows, cols, chunk: int = 1 << 20) -> np.ndarray:
    """``<u_rows[e], v_cols[e]>`` for every pair ``e``, computed in blocks of ``chunk`` pairs."""
    U = np.asarray(user_factors, dtype=np.float32)
    V = np.asarray(item_factors, dtype=np.float32)
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    out = np.empty(rows.size, dtype=np.float32)
    for a, b in iter_chunks(rows.size, chunk):
        out[a:b] = np.einsum("ij,ij->i", U[rows[a:b]], V[cols[a:b]])
    return out


def _as_csr(m, name: str, shape) -> sp.csr_matrix:
    if m is None:
        return None
    if not sp.issparse(m):
        raise ValueError(f"{name} must be a scipy sparse matrix (users x items)")
    m = sp.csr_matrix(m)
    if m.shape != shape:
        raise ValueError(f"{name} has shape {m.shape}, expected {shape}")
    return m


def _check_factors(user_factors, item_factors):
    U = check_finite_array(np.asarray(user_factors, dtype=np.float32), "user_factors")
    V = check_finite_array(np.asarray(item_factors, dtype=np.float32), "item_factors")
    if U.ndim != 2 or V.ndim != 2 or U.shape[1] != V.shape[1]:
        raise ValueError(f"factor shapes do not match: users {U.shape}, items {V.shape}")
    return U, V


def ranking_k(k: int, n_items: int) -> int:
    """The k a fixed-k evaluation uses on a catalogue of ``n_items``: ``min(k, n_items)`` (at least 1).

    :func:`ranking_metrics` refuses ``k > n_items``; the CLI, :func:`privrec.evaluation.compare.compare`
    and :func:`privrec.evaluation.protocols.evaluate_heldout` evaluate a small catalogue at this k
    instead (e.g. Recall@12 on 12 items) and say so (:func:`ranking_k_note`)."""
    k = check_int(k, "k", minimum=1)
    return max(1, min(k, int(n_items)))


def ranking_k_note(k: int, n_items: int) -> str | None:
    """The sentence stating that a fixed-k evaluation used ``min(k, n_items)`` (``None`` when k fits)."""
    used = ranking_k(k, n_items)
    if used == k:
        return None
    return (
        f"ranking metrics at k = {used} instead of {k}: the catalogue has only {int(n_items)} "
        f"item{'s' if n_items != 1 else ''} (k may not exceed it)"
    )


def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(k, dtype=np.float64) + 2.0)


def ranking_metrics(
    user_factors,
    item_factors,
    targets,
    history=None,
    ks=(20,),
    item_bias=None,
    items=None,
    chunk: int | None = None,
    progress=None,
    memory_budget: int | None = None,
) -> dict:
    """Recall@k, NDCG@k, Precision@k, MAP@k and coverage@k for every k in ``ks`` in one pass over the users.

    ``items`` (optional index array) restricts both candidates and targets to those items
    (e.g. the top-10% most popular items, as in the authors' reference implementation). ``progress`` is
    an optional callable receiving the number of users processed per block (e.g. ``tqdm.update``).
    Users are scored ``chunk`` at a time, by default as many as ``memory_budget`` allows
    (:func:`privrec.evaluation.topk.chunk_rows`; default 512 MiB); targets and history stay sparse.
    Returns ``{"recall@k", "ndcg@k", "precision@k", "map@k", "coverage@k", "n_users"}`` (NaN metrics
    when no user has a target; definitions in the module docstring).

    Raises ``ValueError`` when ``targets`` / ``history`` do not have one column per item of
    ``item_factors`` (and one row per user), or when a k exceeds the number of candidate items
    (the catalogue, or ``items``): evaluate a small catalogue at :func:`ranking_k` instead.
    """
    U, V = _check_factors(user_factors, item_factors)
    ks = sorted({check_int(k, "k", minimum=1) for k in np.atleast_1d(ks).tolist()})
    shape = (U.shape[0], V.shape[0])
    targets = _as_csr(targets, "targets", shape)
    history = _as_csr(history, "history", shape)
    bias = None if item_bias is None else np.asarray(item_bias, dtype=np.float32)
    if items is not None:
        items = np.unique(np.asarray(items, dtype=np.int64))
        V = V[items]
        bias = None if bias is None else bias[items]
        targets = targets[:, items]
        history = None if history is None else history[:, items]
    if ks[-1] > V.shape[0]:  # implicit.evaluation returns a precision above 1 there (189.75 at K = 10**6)
        where = (
            f"the catalogue of {shape[1]} items"
            if items is None
            else f"the {V.shape[0]} candidate items given by items= (of {shape[1]})"
        )
        raise ValueError(f"k = {ks[-1]} exceeds {where}; ranking metrics need k <= the number of items")
    if bias is not None and not np.isfinite(bias).all():
        raise ValueError("item_bias holds NaN or infinite values; the model's release is not usable for ranking")
    targets.eliminate_zeros()
    kmax = ks[-1]
    disc = _discounts(kmax)
    cum_disc = np.cumsum(disc)
    n_t = np.diff(targets.indptr)
    ranks = np.arange(1, kmax + 1, dtype=np.float64)
    seen = {k: np.zeros(V.shape[0], dtype=bool) for k in ks}
    users = np.flatnonzero(n_t > 0)
    n_eval = int(users.size)
    # per-user values, summed once at the end: the result does not depend on the chunking
    per_user = {name: np.zeros((len(ks), n_eval)) for name in ("recall", "ndcg", "precision", "map")}
    if progress is not None and U.shape[0] > n_eval:
        progress(U.shape[0] - n_eval)  # users without a target: nothing to score
    for a, b, top in stream_topk(U, V, kmax, bias, history, users, chunk, memory_budget):
        rows = users[a:b]
        valid = top >= 0
        hits = hits_of(top, targets[rows])
        nt = n_t[rows].astype(np.float64)
        cum_hits = np.cumsum(hits, axis=1)
        cum_dcg = np.cumsum(hits * disc[None, :], axis=1)
        cum_ap = np.cumsum(hits * (cum_hits / ranks[None, :]), axis=1)  # precision at each hit
        for j, k in enumerate(ks):
            denom = np.minimum(k, nt)
            idcg = cum_disc[denom.astype(np.int64) - 1]
            per_user["recall"][j, a:b] = cum_hits[:, k - 1] / denom
            per_user["ndcg"][j, a:b] = cum_dcg[:, k - 1] / idcg
            per_user["precision"][j, a:b] = cum_hits[:, k - 1] / k
            per_user["map"][j, a:b] = cum_ap[:, k - 1] / denom
            shown = top[:, :k][valid[:, :k]]
            seen[k][shown] = True
        if progress is not None:
            progress(b - a)
    out: dict = {"n_users": n_eval}
    for j, k in enumerate(ks):
        for name, vals in per_user.items():
            out[f"{name}@{k}"] = float(np.sum(vals[j])) / n_eval if n_eval else float("nan")
        out[f"coverage@{k}"] = float(seen[k].mean()) if V.shape[0] else float("nan")
    return out


def recall_at_k(user_factors, item_factors, targets, history=None, k: int = 20, **kw) -> float:
    """Recall@k as in the paper (module docstring); see :func:`ranking_metrics` for arguments."""
    return ranking_metrics(user_factors, item_factors, targets, history, ks=(k,), **kw)[f"recall@{k}"]


def ndcg_at_k(user_factors, item_factors, targets, history=None, k: int = 20, **kw) -> float:
    """NDCG@k with binary gains (module docstring); see :func:`ranking_metrics`."""
    return ranking_metrics(user_factors, item_factors, targets, history, ks=(k,), **kw)[f"ndcg@{k}"]


def precision_at_k(user_factors, item_factors, targets, history=None, k: int = 20, **kw) -> float:
    """Precision@k, hits among the top k divided by k, averaged over users with a target (module
    docstring); see :func:`ranking_metrics` for arguments."""
    return ranking_metrics(user_factors, item_factors, targets, history, ks=(k,), **kw)[f"precision@{k}"]


def map_at_k(user_factors, item_factors, targets, history=None, k: int = 20, **kw) -> float:
    """MAP@k as ``implicit`` defines it (average precision normalised by ``min(k, |T_j|)``; module
    docstring); see :func:`ranking_metrics` for arguments."""
    return ranking_metrics(user_factors, item_factors, targets, history, ks=(k,), **kw)[f"map@{k}"]


def catalogue_coverage(recommended, n_items: int) -> float:
    """Share of ``n_items`` appearing at least once in ``recommended`` (index array; -1 ignored)."""
    n_items = check_int(n_items, "n_items", minimum=1)
    rec = np.asarray(recommended, dtype=np.int64).ravel()
    rec = rec[rec >= 0]
    if rec.size and rec.max() >= n_items:
        raise ValueError(f"recommended item index {int(rec.max())} out of range for {n_items} items")
    return float(np.unique(rec).size / n_items)
