"""One user partition as a worker holds it: :class:`PartitionBlock` (the partition's users x items
CSR, its item-major copy and the permutation between them) and how it is built -- from the
partition's rows of the rating table (a pure function of the set of rows: validation problems
counted, not raised; duplicates combined in an order-independent way) or from a CSR. Importable
from :mod:`privrec.distributed.partition` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from privrec._validation import unhashable_id_error
from privrec.data._matrix_facts import MatrixShapeFacts

from .._hashing import _id_array


@dataclass
class PartitionBlock(MatrixShapeFacts):
    """One user partition, as held in a worker's memory.

    ``matrix``: local users x ``n_items`` CSR (``float32`` data, ``int32`` sorted column indices);
    ``item_major``: the same entries as an ``n_items`` x local-users CSR (the transposed layout of
    :meth:`privrec.solvers.TaskBatch.from_csr` with ``transpose=True``: task = item, unit = local
    user), so an item block's entries are one contiguous slice (:meth:`item_block`);
    ``user_ids``: the partition's users, sorted. ``problems``: validation counts (empty when valid).
    ``item_order``: entry permutation from ``matrix`` order to ``item_major`` order
    (:meth:`to_item_major`), so per-entry arrays (labels, weights) computed per user are regrouped
    by item without another sort. ``n_users`` (local users), ``n_items``, ``nnz``, ``shape``: of
    ``matrix``.
    """

    index: int
    user_ids: np.ndarray
    matrix: sp.csr_matrix
    item_major: sp.csr_matrix
    problems: dict = field(default_factory=dict)
    item_order: np.ndarray | None = None

    def item_block(self, items: slice) -> sp.csr_matrix:
        """Entries of the items ``items.start:items.stop`` as an (items x local users) CSR, in
        O(entries of the block) (a row slice of :attr:`item_major`)."""
        return self.item_major[items.start : items.stop]

    def entry_range(self, items: slice) -> tuple[int, int]:
        """``(start, stop)`` of the entries of items ``items`` in item-major order (slice any array
        regrouped by :meth:`to_item_major` with it)."""
        ptr = self.item_major.indptr
        return int(ptr[items.start]), int(ptr[items.stop])

    def to_item_major(self, values: np.ndarray) -> np.ndarray:
        """A per-entry array in :attr:`matrix` (user-major) order, regrouped in :attr:`item_major`
        order (e.g. centred, clipped labels or allocation weights computed per user), O(nnz)."""
        values = np.asarray(values)
        if values.shape[:1] != (self.nnz,):
            raise ValueError(f"expected {self.nnz} per-entry values, got shape {values.shape}")
        return values if self.item_order is None else values[self.item_order]

    def summary(self) -> dict:
        return {"n_users": self.n_users, "nnz": self.nnz, "problems": dict(self.problems)}


def _empty_block(index: int, n_items: int, problems: dict) -> PartitionBlock:
    m = sp.csr_matrix((0, n_items), dtype=np.float32)
    return PartitionBlock(index, np.zeros(0, dtype=object), m, m.T.tocsr(), problems)


def _ratings(series: pd.Series | None, n: int, rating_col=None) -> tuple[np.ndarray | None, dict]:
    if series is None:
        return np.ones(n, dtype=np.float32), {}
    from privrec.data.frames import rating_array

    try:  # real numbers only (no datetimes, timedeltas, complex numbers, booleans in objects)
        vals = rating_array(series, f"rating column {rating_col!r}")
    except ValueError as exc:
        return None, {"non_numeric_ratings": 1, "rating_errors": [str(exc)]}
    vals = vals.astype(np.float32, copy=False)
    bad = int(np.count_nonzero(~np.isfinite(vals)))
    return vals, ({"non_finite_ratings": bad} if bad else {})


def build_block(
    frame: pd.DataFrame,
    index: int,
    user_col,
    item_col,
    rating_col,
    items: pd.Index,
    duplicates: str = "error",
) -> PartitionBlock:
    """The :class:`PartitionBlock` of one partition's rows (a pure function: the result depends on
    the *set* of rows only, not on their order). Validation problems are counted, not raised, so
    the driver can report totals over all partitions (:func:`partition_interactions`)."""
    n_items = len(items)
    n = len(frame)
    problems: dict[str, Any] = {}
    users = frame[user_col]
    item_values = frame[item_col]
    n_null = int(users.isna().sum())
    if n_null:
        problems["null_users"] = n_null
    n_null = int(item_values.isna().sum())
    if n_null:
        problems["null_items"] = n_null
    vals, bad = _ratings(None if rating_col is None else frame[rating_col], n, rating_col)
    problems.update(bad)
    if problems or vals is None:
        return _empty_block(index, n_items, problems)
    try:
        icodes = items.get_indexer(_id_array(item_values))
    except TypeError:
        error = unhashable_id_error(item_values.to_numpy(dtype=object), f"item column {item_col!r}")
        return _empty_block(index, n_items, {"id_errors": [str(error or f"item column {item_col!r}: unhashable ids")]})
    unknown = icodes < 0
    if unknown.any():
        examples = pd.unique(np.asarray(item_values.to_numpy(dtype=object))[unknown])[:5]
        problems["unknown_items"] = int(np.count_nonzero(unknown))
        problems["unknown_examples"] = [x.item() if hasattr(x, "item") else x for x in examples]
        return _empty_block(index, n_items, problems)
    try:
        ucodes, uniques = pd.factorize(_id_array(users), sort=True)
    except TypeError:
        error = unhashable_id_error(users.to_numpy(dtype=object), f"user column {user_col!r}")
        if error is not None:
            return _empty_block(index, n_items, {"id_errors": [str(error)]})
        return _empty_block(index, n_items, {"incomparable_users": 1})
    uids = _tidy(np.asarray(uniques))
    key = ucodes.astype(np.int64) * np.int64(n_items) + icodes.astype(np.int64)
    # (key, value) order: duplicates are combined in an order independent of the input row order
    order = np.lexsort((vals, key))
    skey = key[order]
    svals = vals[order]
    starts = np.flatnonzero(np.r_[True, skey[1:] != skey[:-1]]) if n else np.zeros(0, np.int64)
    n_dup = n - len(starts)
    if n_dup:
        if duplicates == "error":
            return _empty_block(index, n_items, {"duplicates": n_dup})
        combine = np.add if duplicates == "sum" else np.maximum
        svals = combine.reduceat(svals, starts).astype(np.float32, copy=False)
        skey = skey[starts]
    rows = skey // n_items
    cols = (skey - rows * n_items).astype(np.int32)
    indptr = np.zeros(len(uids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(uids)), out=indptr[1:])
    idx_dtype = np.int32 if len(cols) < np.iinfo(np.int32).max else np.int64
    matrix = sp.csr_matrix(
        (np.ascontiguousarray(svals, dtype=np.float32), cols, indptr.astype(idx_dtype)), shape=(len(uids), n_items)
    )
    return block_from_matrix(index, uids, matrix)


def block_from_matrix(index: int, uids: np.ndarray, matrix: sp.csr_matrix) -> PartitionBlock:
    """The :class:`PartitionBlock` of a partition's users ``uids`` (sorted) and their rows ``matrix``
    (a users x items CSR with sorted column indices; float32 data)."""
    matrix.has_sorted_indices = True
    matrix.has_canonical_format = True
    n_items = matrix.shape[1]
    cols, indptr = matrix.indices, np.asarray(matrix.indptr, dtype=np.int64)
    idx_dtype = np.int32 if len(cols) < np.iinfo(np.int32).max else np.int64
    # one counting sort (CSR -> CSC) of the entry positions gives the item-major layout and the
    # permutation that regroups any per-entry array (labels, weights) the same way
    pos = sp.csr_matrix((np.arange(1, len(cols) + 1, dtype=np.int64), cols, indptr), shape=matrix.shape).tocsc()
    item_order = (pos.data - 1).astype(idx_dtype, copy=False)
    item_major = sp.csr_matrix(
        (matrix.data[item_order], pos.indices.astype(np.int32, copy=False), pos.indptr.astype(idx_dtype, copy=False)),
        shape=(n_items, len(uids)),
    )
    item_major.has_sorted_indices = True  # row (user) indices ascending within each item
    return PartitionBlock(index, uids, matrix, item_major, {}, item_order)


def _concat_ids(parts) -> np.ndarray:
    """Concatenate per-partition id arrays (empty partitions skipped, so their placeholder dtype
    does not turn integer or string ids into objects)."""
    parts = [np.asarray(p) for p in parts if len(p)]
    if not parts:
        return np.zeros(0, dtype=object)
    return _tidy(np.concatenate(parts))


def _tidy(arr: np.ndarray) -> np.ndarray:
    """All-string object arrays as numpy unicode (as :func:`privrec.data.from_pandas` returns ids)."""
    if arr.dtype == object and len(arr) and all(isinstance(x, str) for x in arr):
        return arr.astype(str)
    return arr
