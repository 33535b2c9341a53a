"""Item nearest-neighbour overlap with a reference model (Krichene et al., ICML 2023, App. D.3, Fig. 11).

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
from .topk import chunk_rows, iter_chunks, topk_indices


def _normalise(V) -> np.ndarray:
    V = check_finite_array(np.asarray(V, dtype=np.float32), "item_factors")
    if V.ndim != 2:
        raise ValueError(f"item_factors must be 2-D, got shape {V.shape}")
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    return V / np.where(norms > 0, norms, 1.0)


def cosine_neighbours(
    item_factors, k: int = 20, chunk: int | None = None, items=None, memory_budget: int | None = None
) -> np.ndarray:
    """``(len(items), k)`` indices of each item's k most cosine-similar other items.

    Query items are scored ``chunk`` at a time, by default as many as ``memory_budget`` allows
    (:func:`privrec.evaluation.topk.chunk_rows`, 512 MiB unless configured)."""
    k = check_int(k, "k", minimum=1)
    Vn = _normalise(item_factors)
    m = Vn.shape[0]
    items = np.arange(m) if items is None else np.asarray(items, dtype=np.int64)
    out = np.empty((items.size, k), dtype=np.int64)
    step = chunk_rows(m, memory_budget) if chunk is None else chunk
    for a, b in iter_chunks(items.size, step):
        idx = items[a:b]
        s = Vn[idx] @ Vn.T
        s[np.arange(idx.size), idx] = -np.inf
        out[a:b] = topk_indices(s, k)
    return out


class ReferenceNeighbours:
    """A reference model's item factors with its neighbour lists cached per item subset.

    Comparing many private models with one reference (benchmarks) then computes the reference's
    neighbours once instead of once per comparison.
    """

    def __init__(self, item_factors, k: int = 20):
        self.item_factors = np.asarray(item_factors, dtype=np.float32)
        self.k = check_int(k, "k", minimum=1)
        self._cache: dict = {}

    def neighbours(self, items=None) -> np.ndarray:
        key = None if items is None else np.asarray(items, dtype=np.int64).tobytes()
        if key not in self._cache:
            self._cache[key] = cosine_neighbours(self.item_factors, self.k, items=items)
        return self._cache[key]


def neighbour_overlap(item_factors, reference_factors, k: int = 20, chunk: int | None = None, items=None) -> np.ndarray:
    """Per-item overlap fraction in [0, 1] between the two models' top-k cosine neighbours.

    ``reference_factors`` may be a :class:`ReferenceNeighbours` (cached); ``items`` restricts the
    computation to those items (neighbours are still searched among all items).
    """
    A = np.asarray(item_factors)
    ref = reference_factors if isinstance(reference_factors, ReferenceNeighbours) else None
    B = ref.item_factors if ref is not None else np.asarray(reference_factors)
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"models have different item counts: {A.shape[0]} vs {B.shape[0]}")
    k = check_int(k, "k", minimum=1)
    na = cosine_neighbours(A, k, chunk, items=items)
    nb = ref.neighbours(items) if ref is not None and ref.k == k else cosine_neighbours(B, k, chunk, items=items)
    kk = min(k, A.shape[0] - 1)
    if kk <= 0:
        return np.zeros(na.shape[0])
    # each row's entries are distinct within a model, so duplicates in the union = intersection
    both = np.sort(np.concatenate([na[:, :kk], nb[:, :kk]], axis=1), axis=1)
    dup = (both[:, 1:] == both[:, :-1]) & (both[:, 1:] >= 0)
    return dup.sum(axis=1) / float(kk)


def sample_per_bucket(buckets, per_bucket: int | None) -> np.ndarray:
    """Deterministic subset: up to ``per_bucket`` evenly spaced items of each bucket (all if None)."""
    buckets = np.asarray(buckets, dtype=np.int64)
    if per_bucket is None:
        return np.flatnonzero(buckets >= 0)
    per_bucket = check_int(per_bucket, "per_bucket", minimum=1)
    out = []
    for b in range(int(buckets.max()) + 1 if buckets.size else 0):
        idx = np.flatnonzero(buckets == b)
        if idx.size > per_bucket:
            idx = idx[np.linspace(0, idx.size - 1, per_bucket).round().astype(np.int64)]
        out.append(idx)
    return np.unique(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def sliced_neighbour_overlap(
    item_factors, reference_factors, buckets, k: int = 20, n_buckets: int | None = None, per_bucket: int | None = None
) -> list:
    """Mean :func:`neighbour_overlap` per popularity bucket (NaN for an empty bucket).

    ``per_bucket`` evaluates only that many evenly spaced items of each bucket (an unbiased-by-
    construction deterministic subsample that bounds the cost at ``n_buckets * per_bucket * m``).
    """
    buckets = np.asarray(buckets, dtype=np.int64)
    m = np.asarray(item_factors).shape[0]
    if buckets.shape != (m,):
        raise ValueError("buckets must have one entry per item")
    items = sample_per_bucket(buckets, per_bucket)
    ov = neighbour_overlap(item_factors, reference_factors, k, items=items)
    nb = int(buckets.max()) + 1 if n_buckets is None else int(n_buckets)
    b = buckets[items]
    s = np.bincount(b, weights=ov, minlength=nb)[:nb]
    n = np.bincount(b, minlength=nb)[:nb]
    with np.errstate(invalid="ignore", divide="ignore"):
        return [float(v) for v in s / n]
