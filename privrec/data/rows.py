"""Raw interaction rows to the canonical layout of :class:`~privrec.data.Interactions`: id arrays
checked, ids factorised into dense indices (sorted, or in a given vocabulary), and repeated
(user, item) rows resolved by an explicit duplicate policy into a sorted CSR. Importable from
:mod:`privrec.data.interactions` too.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import scipy.sparse as sp

from privrec._validation import check_ids_not_nul_suffixed, unhashable_id_error

DUPLICATE_POLICIES = ("last", "first", "sum", "max", "error")


def _as_id_array(ids, name: str) -> np.ndarray:
    if not isinstance(ids, np.ndarray):
        if isinstance(ids, (pd.Series, pd.Index)):
            ids = ids.to_numpy()
        else:  # a list: a string id ending in NUL would lose it in a numpy string array
            ids = ids if isinstance(ids, (list, tuple)) else list(ids)
            check_ids_not_nul_suffixed(ids, name)
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind == "V":
        raise ValueError(f"{name} holds structured (struct) ids: ids must be hashable scalars (strings, integers, ...)")
    return arr


def _factorize(ids: np.ndarray, vocabulary, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Map raw ids to dense indices. Without ``vocabulary`` the ids are sorted (deterministic)."""
    if vocabulary is None:
        if ids.dtype.kind in "iu" and len(ids):
            lo, hi = int(ids.min()), int(ids.max())
            if hi - lo <= 4 * len(ids) + (1 << 20):  # compact integer ids: dense lookup, no hashing
                present = np.zeros(hi - lo + 1, dtype=bool)
                present[ids - lo] = True
                uniques = np.flatnonzero(present) + lo
                remap = np.cumsum(present, dtype=np.int64) - 1
                return remap[ids - lo], uniques.astype(ids.dtype, copy=False)
        try:
            codes, uniques = pd.factorize(ids, sort=True)
        except TypeError:  # unhashable ids, or mixed types that cannot be sorted
            error = unhashable_id_error(ids, name)
            if error is not None:
                raise error from None
            codes, uniques = pd.factorize(ids, sort=False)
        if np.any(codes < 0):
            raise ValueError(f"{name} contains missing (NaN/None) ids")
        uniques = np.asarray(uniques)
        if uniques.dtype == object:
            check_ids_not_nul_suffixed(uniques, name)
            # keep string ids as a numpy unicode array when possible (compact, sortable)
            with contextlib.suppress(TypeError, ValueError):  # exotic ids stay objects
                uniques = uniques.astype(str)
        return codes.astype(np.int64, copy=False), uniques
    vocab = _as_id_array(vocabulary, f"{name} vocabulary")
    try:
        codes = pd.Index(vocab).get_indexer(ids)
    except TypeError:
        raise (
            unhashable_id_error(ids, name)
            or unhashable_id_error(vocab, f"{name} vocabulary")
            or ValueError(f"{name}: ids cannot be hashed")
        ) from None
    if np.any(codes < 0):
        missing = pd.unique(np.asarray(ids)[codes < 0])[:5]
        raise ValueError(
            f"{int(np.count_nonzero(codes < 0))} {name} value(s) are not in the given vocabulary, e.g. {list(missing)}"
        )
    return codes.astype(np.int64, copy=False), vocab


def rows_to_csr(users, items, values, timestamps, duplicates: str, user_ids, item_ids):
    """``(matrix, user vocabulary, item vocabulary, timestamps or None, input rows, duplicate rows)``
    of parallel arrays of raw ids, values and timestamps (see :meth:`Interactions.from_arrays`,
    which checked ``duplicates`` and reports the duplicates)."""
    users = _as_id_array(users, "users")
    items = _as_id_array(items, "items")
    n = len(users)
    if len(items) != n:
        raise ValueError(f"users and items differ in length ({n} vs {len(items)})")
    if n == 0:
        raise ValueError("no interactions given (empty input)")
    if values is None:
        vals = np.ones(n, dtype=np.float32)
    else:
        vals = np.asarray(values)
        if vals.shape != (n,):
            raise ValueError(f"values must have shape ({n},), got {vals.shape}")
        if vals.dtype.kind not in "biuf":
            raise ValueError(f"values must be numeric, got dtype {vals.dtype}")
        vals = vals.astype(np.float32, copy=False)
        if not np.all(np.isfinite(vals)):
            bad = int(np.count_nonzero(~np.isfinite(vals)))
            raise ValueError(f"values contain {bad} NaN or infinite entries")
    ts = None
    if timestamps is not None:
        ts = np.asarray(timestamps)
        if ts.shape != (n,):
            raise ValueError(f"timestamps must have shape ({n},), got {ts.shape}")
        ts = ts.astype(np.int64, copy=False)
    u, uid = _factorize(users, user_ids, "users")
    i, iid = _factorize(items, item_ids, "items")
    n_users, n_items = len(uid), len(iid)
    key = u * np.int64(n_items) + i
    del u, i
    order = np.argsort(key)  # not stable: input order within duplicates is recovered below
    skey = key[order]
    del key
    starts = np.flatnonzero(np.r_[True, skey[1:] != skey[:-1]])
    n_dup = n - len(starts)
    if n_dup and duplicates == "error":
        raise ValueError(f"{n_dup} duplicate (user, item) row(s) found and duplicates='error'")
    if n_dup == 0:
        keep = order
        out_vals = vals[keep]
        out_ts = None if ts is None else ts[keep]
    elif duplicates in ("first", "last"):
        # the earliest / latest input row of each (user, item) group
        reducer = np.minimum if duplicates == "first" else np.maximum
        keep = reducer.reduceat(order, starts)
        out_vals = vals[keep]
        out_ts = None if ts is None else ts[keep]
    else:
        sv = vals[order]
        combine = np.add if duplicates == "sum" else np.maximum
        out_vals = combine.reduceat(sv, starts).astype(np.float32, copy=False)
        out_ts = None if ts is None else np.maximum.reduceat(ts[order], starts)
    ukey = skey[starts]
    rows = ukey // n_items
    cols = (ukey - rows * n_items).astype(np.int32)
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_users), out=indptr[1:])
    matrix = sp.csr_matrix((out_vals.astype(np.float32, copy=False), cols, indptr), shape=(n_users, n_items))
    matrix.has_sorted_indices = True
    return matrix, uid, iid, out_ts, n, n_dup
