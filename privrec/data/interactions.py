"""The ``Interactions`` container: a users x items sparse matrix plus id maps.

This is the object every later stage consumes (CONTRIBUTING.md, "Architecture and contracts";
Krichene et al., ICML 2023, App. D, describes the benchmark datasets). Layout:

* ``matrix``: ``scipy.sparse.csr_matrix`` of shape ``(n_users, n_items)``, ``float32`` data,
  ``int32`` indices and indptr, column indices sorted within each row, no duplicate entries.
* ``user_ids`` / ``item_ids``: numpy arrays mapping a row / column index to the original id.
* ``timestamps``: optional ``int64`` array aligned with ``matrix.data``.
* ``item_metadata``: optional ``pandas.DataFrame`` indexed by item index (``0..n_items-1``) with
  at least ``title`` and ``genres`` columns.
* ``info``: dict of provenance facts (source, number of duplicate rows resolved, ...).

Duplicate (user, item) pairs are resolved by :meth:`Interactions.from_arrays` according to an
explicit policy (the rows become the canonical CSR and id maps in :mod:`privrec.data.rows`); the
number of input rows affected is stored in ``info["duplicate_rows"]`` and a ``UserWarning`` is
emitted, so duplicates are never dropped silently.

The container is "frozen-ish": methods return new objects and never modify ``self``; callers must
not mutate ``matrix`` in place either (cached derived objects such as ``item_user`` would go stale).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from privrec._validation import check_csr_structure, sparse_to_csr
from privrec.data._matrix_facts import MatrixShapeFacts
from privrec.data.rows import (  # noqa: F401 (re-exported: importable from here, as before the split)
    DUPLICATE_POLICIES,
    _as_id_array,
    _factorize,
    rows_to_csr,
)


class Interactions(MatrixShapeFacts):
    """Users x items interaction matrix with original-id maps (see module docstring).

    Build it with :meth:`from_arrays` (raw ids, any order, duplicates resolved by an explicit
    policy) or directly from a sparse matrix (converted to the canonical dtype/sorted layout). A
    matrix is checked once by :func:`privrec._validation.check_csr_structure` (index bounds,
    ``indptr`` consistency, finite values) and **duplicate entries in a matrix are rejected**
    (never summed), the same policy as the models' ``fit``.

    Sizes: ``n_users``, ``n_items``, ``nnz`` and ``shape`` (of ``matrix``, as ints; see
    :class:`~privrec.data._matrix_facts.MatrixShapeFacts`), ``density``.
    """

    def __init__(
        self,
        matrix,
        user_ids=None,
        item_ids=None,
        timestamps=None,
        item_metadata=None,
        name: str = "",
        info: dict[str, Any] | None = None,
    ):
        if not sp.issparse(matrix):
            raise ValueError(f"matrix must be a scipy sparse matrix, got {type(matrix).__name__}")
        m = _as_checked_csr(matrix)
        # one structural check of the arrays (bounds, indptr, duplicates rejected, finite values)
        is_sorted = check_csr_structure(m, "matrix")
        n_users, n_items = m.shape
        if n_users == 0 or n_items == 0 or m.nnz == 0:
            raise ValueError(f"interactions are empty (shape {m.shape}, {m.nnz} entries)")
        big = np.iinfo(np.int32).max
        if m.nnz > big or n_users > big or n_items > big:
            raise ValueError(f"too large for int32 indexing: shape {m.shape}, {m.nnz} interactions")
        indices, data = m.indices, m.data
        order = None
        if not is_sorted:  # sort within rows, carrying the timestamps along with the values
            rows = np.repeat(np.arange(n_users, dtype=np.int64), np.diff(m.indptr).astype(np.int64))
            order = np.argsort(rows * np.int64(n_items) + indices.astype(np.int64), kind="stable")
            del rows
            indices, data = indices[order], data[order]
        data = np.ascontiguousarray(data, dtype=np.float32)
        m = sp.csr_matrix(
            (data, indices.astype(np.int32, copy=False), m.indptr.astype(np.int32, copy=False)),
            shape=(n_users, n_items),
        )
        m.has_sorted_indices = True
        m.has_canonical_format = True
        self.matrix: sp.csr_matrix = m
        self.user_ids = np.arange(n_users) if user_ids is None else _as_id_array(user_ids, "user_ids")
        self.item_ids = np.arange(n_items) if item_ids is None else _as_id_array(item_ids, "item_ids")
        if len(self.user_ids) != n_users:
            raise ValueError(f"user_ids has {len(self.user_ids)} entries but matrix has {n_users} rows")
        if len(self.item_ids) != n_items:
            raise ValueError(f"item_ids has {len(self.item_ids)} entries but matrix has {n_items} columns")
        if timestamps is not None:
            timestamps = np.asarray(timestamps)
            if timestamps.dtype.kind not in "iu":
                raise ValueError(f"timestamps must be integers, got dtype {timestamps.dtype}")
            timestamps = np.ascontiguousarray(timestamps, dtype=np.int64)
            if timestamps.shape != (m.nnz,):
                raise ValueError(
                    f"timestamps must align with matrix.data ({m.nnz} entries), got shape {timestamps.shape}"
                )
            if order is not None:
                timestamps = timestamps[order]
        self.timestamps = timestamps
        if item_metadata is not None:
            if not isinstance(item_metadata, pd.DataFrame):
                raise ValueError("item_metadata must be a pandas DataFrame indexed by item index")
            if len(item_metadata) != n_items:
                raise ValueError(f"item_metadata has {len(item_metadata)} rows but there are {n_items} items")
        self.item_metadata = item_metadata
        self.name = str(name)
        self.info: dict[str, Any] = dict(info or {})
        self._item_user: sp.csr_matrix | None = None
        self._user_lookup: pd.Index | None = None
        self._item_lookup: pd.Index | None = None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_arrays(
        cls,
        users,
        items,
        values=None,
        timestamps=None,
        duplicates: str = "last",
        name: str = "",
        item_metadata=None,
        user_ids=None,
        item_ids=None,
        info: dict[str, Any] | None = None,
    ) -> Interactions:
        """Build from parallel arrays of raw user ids, item ids and values.

        ``values`` defaults to 1.0 (implicit feedback). ``user_ids`` / ``item_ids``, when given,
        fix the vocabulary (and thus the indexing) instead of the sorted unique ids; every id must
        then be in it — this is how a split keeps the item indexing of its training set.
        ``item_metadata`` rows must follow the final item indexing.

        Duplicate policy (``duplicates``), applied to rows with the same (user, item):
        ``"last"`` keeps the row appearing last in the input (default; "the latest rating wins"
        for files in time order), ``"first"`` keeps the first, ``"sum"`` adds the values (play
        counts), ``"max"`` keeps the largest value, ``"error"`` raises. For ``sum``/``max`` the
        timestamp kept is the latest one. The number of input rows removed by the policy is stored
        in ``info["duplicate_rows"]`` and reported with a ``UserWarning`` when non-zero.
        """
        if duplicates not in DUPLICATE_POLICIES:
            raise ValueError(f"duplicates must be one of {DUPLICATE_POLICIES}, got {duplicates!r}")
        matrix, uid, iid, out_ts, n, n_dup = rows_to_csr(
            users, items, values, timestamps, duplicates, user_ids, item_ids
        )
        info = dict(info or {})
        info["input_rows"] = int(n)
        info["duplicate_rows"] = int(n_dup)
        info["duplicate_policy"] = duplicates
        if n_dup:
            warnings.warn(
                f"{n_dup} duplicate (user, item) row(s) resolved with policy {duplicates!r}"
                + (f" in {name}" if name else ""),
                UserWarning,
                stacklevel=2,
            )
        return cls(matrix, uid, iid, timestamps=out_ts, item_metadata=item_metadata, name=name, info=info)

    # ------------------------------------------------------------------ basic facts
    # n_users, n_items, nnz and shape: from MatrixShapeFacts
    @property
    def density(self) -> float:
        return self.nnz / (self.n_users * self.n_items)

    @property
    def user_counts(self) -> np.ndarray:
        """Number of interactions per user (int64, length ``n_users``)."""
        return np.diff(self.matrix.indptr).astype(np.int64)

    @property
    def item_counts(self) -> np.ndarray:
        """Number of interactions per item (int64, length ``n_items``)."""
        return np.bincount(self.matrix.indices, minlength=self.n_items).astype(np.int64)

    @property
    def item_user(self) -> sp.csr_matrix:
        """Items x users CSR (the transpose), computed once and cached."""
        if self._item_user is None:
            csc = self.matrix.tocsc()
            t = sp.csr_matrix(
                (
                    csc.data.astype(np.float32, copy=False),
                    csc.indices.astype(np.int32, copy=False),
                    csc.indptr.astype(np.int32, copy=False),
                ),
                shape=(self.n_items, self.n_users),
            )
            t.has_sorted_indices = True
            self._item_user = t
        return self._item_user

    def __repr__(self) -> str:
        label = f"{self.name!r}, " if self.name else ""
        return f"Interactions({label}{self.n_users} users x {self.n_items} items, {self.nnz} interactions)"

    def __len__(self) -> int:
        return self.nnz

    # ------------------------------------------------------------------ conversions
    def coo_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(user_index, item_index, value)`` arrays in CSR (user-major) order."""
        rows = np.repeat(np.arange(self.n_users, dtype=np.int32), np.diff(self.matrix.indptr))
        return rows, self.matrix.indices.copy(), self.matrix.data.copy()

    def to_pandas(self, indices: bool = False) -> pd.DataFrame:
        """Long-format DataFrame: ``user_id``, ``item_id``, ``value`` (+ ``timestamp``).

        With ``indices=True`` the dense ``user_index`` / ``item_index`` columns are added.
        """
        rows, cols, vals = self.coo_arrays()
        frame = {"user_id": self.user_ids[rows], "item_id": self.item_ids[cols], "value": vals}
        if self.timestamps is not None:
            frame["timestamp"] = self.timestamps
        if indices:
            frame["user_index"] = rows
            frame["item_index"] = cols
        return pd.DataFrame(frame)

    def user_index(self, ids) -> np.ndarray:
        """Row indices of the given original user ids (``ValueError`` for unknown ids)."""
        if self._user_lookup is None:
            self._user_lookup = pd.Index(self.user_ids)
        return _lookup(self._user_lookup, ids, "user")

    def item_index(self, ids) -> np.ndarray:
        """Column indices of the given original item ids (``ValueError`` for unknown ids)."""
        if self._item_lookup is None:
            self._item_lookup = pd.Index(self.item_ids)
        return _lookup(self._item_lookup, ids, "item")

    # ------------------------------------------------------------------ derived objects
    def _derive(self, matrix, user_ids, item_ids, timestamps, item_metadata, info_update) -> Interactions:
        info = dict(self.info)
        info.update(info_update)
        return Interactions(
            matrix, user_ids, item_ids, timestamps=timestamps, item_metadata=item_metadata, name=self.name, info=info
        )

    def _positions(self) -> sp.csr_matrix:
        """CSR with the same pattern whose data are positions into ``matrix.data`` (int64)."""
        m = self.matrix
        return sp.csr_matrix((np.arange(m.nnz, dtype=np.int64), m.indices, m.indptr), shape=m.shape)

    def subset_users(self, idx) -> Interactions:
        """Keep the given users (index array in the wanted order, or boolean mask); items unchanged.

        The item axis (indexing, ids, metadata) is kept as is, so the result shares item indexing
        with ``self``. ``ValueError`` if no interaction remains.
        """
        idx = _as_selector(idx, self.n_users, "user")
        pos = self._positions()[idx]
        p = pos.data
        sub = sp.csr_matrix((self.matrix.data[p], pos.indices, pos.indptr), shape=pos.shape)
        ts = None if self.timestamps is None else self.timestamps[p]
        return self._derive(sub, self.user_ids[idx], self.item_ids, ts, self.item_metadata, {})

    def subset_items(self, idx) -> Interactions:
        """Keep the given items (index array in the wanted order, or boolean mask); users unchanged.

        Items are re-indexed in the given order; users keep their rows (possibly empty).
        ``ValueError`` if no interaction remains.
        """
        idx = _as_selector(idx, self.n_items, "item")
        pos = self._positions()[:, idx].tocsr()
        pos.sort_indices()
        p = pos.data
        sub = sp.csr_matrix((self.matrix.data[p], pos.indices, pos.indptr), shape=pos.shape)
        ts = None if self.timestamps is None else self.timestamps[p]
        meta = None
        if self.item_metadata is not None:
            meta = self.item_metadata.iloc[idx].reset_index(drop=True)
        return self._derive(sub, self.user_ids, self.item_ids[idx], ts, meta, {})

    def filter_entries(self, mask) -> Interactions:
        """Keep the entries where ``mask`` (aligned with ``matrix.data``) is true; shape unchanged."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (self.nnz,):
            raise ValueError(f"mask must have shape ({self.nnz},), got {mask.shape}")
        m = self.matrix
        rows = np.repeat(np.arange(self.n_users), np.diff(m.indptr))[mask]
        indptr = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.n_users), out=indptr[1:])
        sub = sp.csr_matrix((m.data[mask], m.indices[mask], indptr), shape=m.shape)
        ts = None if self.timestamps is None else self.timestamps[mask]
        return self._derive(sub, self.user_ids, self.item_ids, ts, self.item_metadata, {})

    def binarize(self, threshold: float = 0.0) -> Interactions:
        """Keep entries with value strictly greater than ``threshold`` and set them to 1.0.

        Shape and indexing are unchanged (users/items may end up with no entries). Liang et al.
        (2018) use ``threshold=3.5`` on MovieLens-20M.
        """
        thr = float(threshold)
        if np.isnan(thr):
            raise ValueError("threshold must not be NaN")
        out = self.filter_entries(self.matrix.data > thr)
        out.matrix.data[:] = 1.0
        out.info["binarized_threshold"] = thr
        return out

    def drop_empty(self) -> Interactions:
        """Remove users and items without any interaction."""
        out = self
        if np.any(out.user_counts == 0):
            out = out.subset_users(np.flatnonzero(out.user_counts > 0))
        if np.any(out.item_counts == 0):
            out = out.subset_items(np.flatnonzero(out.item_counts > 0))
        return out


def _as_checked_csr(matrix) -> sp.csr_matrix:
    """Any scipy sparse matrix as CSR, without letting scipy sum duplicates or index out of bounds
    (:func:`privrec._validation.sparse_to_csr`; a CSR is returned as is, checked by the caller)."""
    if not sp.issparse(matrix):
        raise ValueError(f"matrix must be a scipy sparse matrix, got {type(matrix).__name__}")
    if len(matrix.shape) != 2:
        raise ValueError(f"matrix must be 2-D, got shape {matrix.shape}")
    out = sparse_to_csr(matrix, "matrix")
    return out if isinstance(out, sp.csr_matrix) else sp.csr_matrix(out)


def _as_selector(idx, n: int, what: str) -> np.ndarray:
    arr = np.asarray(idx)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise ValueError(f"boolean {what} mask must have shape ({n},), got {arr.shape}")
        return np.flatnonzero(arr)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{what} selection must be a 1-D integer index array or boolean mask")
    arr = arr.astype(np.int64, copy=False)
    if arr.size == 0:
        raise ValueError(f"empty {what} selection")
    if arr.min() < 0 or arr.max() >= n:
        raise ValueError(f"{what} index out of range [0, {n})")
    if len(np.unique(arr)) != len(arr):
        raise ValueError(f"{what} selection contains repeated indices")
    return arr


def _lookup(index: pd.Index, ids, what: str) -> np.ndarray:
    scalar = np.ndim(ids) == 0
    arr = np.atleast_1d(np.asarray(ids))
    codes = index.get_indexer(arr)
    if np.any(codes < 0):
        missing = list(arr[codes < 0][:5])
        raise ValueError(f"unknown {what} id(s): {missing}")
    codes = codes.astype(np.int64)
    return codes[0] if scalar else codes
