"""Item nearest-neighbour overlap with a reference model (spec 004 §7, §8; paper Fig. 11).

For every item i, ``N_k(i)`` is the set of its ``k`` (default 20) nearest other items by cosine
similarity of the item embeddings (the item itself is excluded; ties: lower item index first, as
everywhere in :mod:`privrec.evaluation`). An item with a zero embedding has cosine 0 to every
item, so its neighbours are the lowest-indexed items — such items (e.g. rare items a head-
restricted private model leaves at zero) are reported, not silently dropped.

``overlap(i) = |N_k^model(i) ∩ N_k^reference(i)| / k``; the per-bucket value is the mean over the
bucket's items (buckets from :func:`privrec.evaluation.popularity_buckets`).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_finite_array, check_int
from .topk import iter_chunks, topk_indices


def _normalise(V) -> np.ndarray:
    V = check_finite_array(np.asarray(V, dtype=np.float32), "item_factors")
    if V.ndim != 2:
        raise ValueError(f"item_factors must be 2-D, got shape {V.shape}")
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    return V / np.where(norms > 0, norms, 1.0)


def cosine_neighbours(item_factors, k: int = 20, chunk: int = 2048, items=None) -> np.ndarray:
    """``(len(items), k)`` indices of each item's k most cosine-similar other items."""
    k = check_int(k, "k", minimum=1)
    Vn = _normalise(item_factors)
    m = Vn.shape[0]
    items = np.arange(m) if items is None else np.asarray(items, dtype=np.int64)
    out = np.empty((items.size, k), dtype=np.int64)
    for a, b in iter_chunks(items.size, chunk):
        idx = items[a:b]
        s = Vn[idx] @ Vn.T
        s[np.arange(idx.size), idx] = -np.inf
        out[a:b] = topk_indices(s, k)
    return out


def neighbour_overlap(item_factors, reference_factors, k: int = 20, chunk: int = 2048) -> np.ndarray:
    """Per-item overlap fraction in [0, 1] between the two models' top-k cosine neighbours."""
    A = np.asarray(item_factors)
    B = np.asarray(reference_factors)
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"models have different item counts: {A.shape[0]} vs {B.shape[0]}")
    k = check_int(k, "k", minimum=1)
    na = cosine_neighbours(A, k, chunk)
    nb = cosine_neighbours(B, k, chunk)
    kk = min(k, A.shape[0] - 1)
    if kk <= 0:
        return np.zeros(A.shape[0])
    # each row's entries are distinct within a model, so duplicates in the union = intersection
    both = np.sort(np.concatenate([na[:, :kk], nb[:, :kk]], axis=1), axis=1)
    dup = (both[:, 1:] == both[:, :-1]) & (both[:, 1:] >= 0)
    return dup.sum(axis=1) / float(kk)


def sliced_neighbour_overlap(item_factors, reference_factors, buckets, k: int = 20,
                             n_buckets: int | None = None) -> list:
    """Mean :func:`neighbour_overlap` per popularity bucket (NaN for an empty bucket)."""
    buckets = np.asarray(buckets, dtype=np.int64)
    ov = neighbour_overlap(item_factors, reference_factors, k)
    if buckets.shape != ov.shape:
        raise ValueError("buckets must have one entry per item")
    nb = int(buckets.max()) + 1 if n_buckets is None else int(n_buckets)
    ok = buckets >= 0
    s = np.bincount(buckets[ok], weights=ov[ok], minlength=nb)[:nb]
    n = np.bincount(buckets[ok], minlength=nb)[:nb]
    with np.errstate(invalid="ignore", divide="ignore"):
        return [float(v) for v in s / n]
