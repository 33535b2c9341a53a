"""The stable 64-bit hash of a user (or item) id, identical in every process, machine and run.

At the bottom of the house: per-user sampling keys (:func:`privrec.allocation.stable_user_keys`),
the selection's held-out split and the Dask partitioning (:mod:`privrec.distributed.partition`) all
key on it, so a user's draws and partition depend on that user's id alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["HASH_KEY", "stable_hash"]

#: key of pandas' SipHash for string / object ids (exactly 16 characters; changing it re-partitions every user)
HASH_KEY = "privrec-users-v1"


def _id_array(values) -> np.ndarray:
    """Ids as a numpy array with a canonical dtype: int64 / uint64 for integers, float64 for floats,
    object for everything else (strings of any pandas string dtype, categoricals of strings, ...)."""
    if isinstance(values, (pd.Series, pd.Index)):
        dtype = values.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            values = values.astype(dtype.categories.dtype)
            dtype = values.dtype
        if pd.api.types.is_bool_dtype(dtype):
            return values.to_numpy(dtype=np.int64)
        if pd.api.types.is_integer_dtype(dtype) and not values.hasnans:
            return values.to_numpy(dtype=np.uint64 if pd.api.types.is_unsigned_integer_dtype(dtype) else np.int64)
        if pd.api.types.is_float_dtype(dtype):
            return values.to_numpy(dtype=np.float64, na_value=np.nan)
        return _object_ids(values.to_numpy(dtype=object))
    arr = np.asarray(values)
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind == "i":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64, copy=False)
    if arr.dtype.kind == "f":
        return arr.astype(np.float64, copy=False)
    return _object_ids(arr.astype(object, copy=False))


def _object_ids(arr: np.ndarray) -> np.ndarray:
    """An object column holding only integers (or only floats) becomes int64 (float64), so it
    hashes like the same ids in a numeric column (an input chunk may arrive as either)."""
    kind = pd.api.types.infer_dtype(arr, skipna=False)
    try:
        if kind == "integer":
            return arr.astype(np.int64)
        if kind == "floating":
            return arr.astype(np.float64)
    except (OverflowError, TypeError, ValueError):  # e.g. integers beyond int64: keep the objects
        pass
    return arr


def stable_hash(ids) -> np.ndarray:
    """64-bit hash (``uint64``) of each id, identical in every process, machine and run.

    Integers (any width / signedness, as int64 / uint64 values) and floats (``-0.0`` as ``0.0``)
    use pandas' fixed integer mix; strings and other objects pandas' SipHash-2-4 keyed with
    :data:`HASH_KEY` (mixed types hash their ``str``). The same id gives the same hash whatever the
    column dtype it arrives in (``int32`` Parquet vs ``int64`` pandas, ``object`` vs ``string``).
    """
    arr = _id_array(ids)
    if arr.dtype.kind == "f":
        arr = arr + 0.0  # -0.0 -> 0.0 (same id, same partition)
    if arr.dtype == object:
        return pd.util.hash_array(arr, hash_key=HASH_KEY, categorize=True)
    return pd.util.hash_array(arr)
