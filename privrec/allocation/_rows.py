"""Vectorised per-row helpers on CSR users x items matrices (shared by counts and allocations).

Every helper works on the whole ``indptr`` at once (sorting keys with ``np.lexsort`` and segment
sums with ``np.bincount``), so a 10M-interaction matrix is handled without Python loops over rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._hashing import stable_hash


def check_user_items(user_items, name: str = "user_items") -> sp.csr_matrix:
    """Return ``user_items`` as a CSR matrix; ``ValueError`` if it is not CSR or has duplicates.

    Duplicated (user, item) entries would let one user count twice for an item, which breaks
    the per-user sensitivity bounds, so they are rejected rather than silently summed.
    """
    if not (sp.issparse(user_items) and user_items.format == "csr"):
        raise ValueError(f"{name} must be a scipy.sparse CSR matrix (users x items), got {type(user_items).__name__}")
    if user_items.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {user_items.shape}")
    indptr = np.asarray(user_items.indptr)
    indices = np.asarray(user_items.indices)
    if indices.size and (indices.min() < 0 or indices.max() >= user_items.shape[1]):
        raise ValueError(f"{name} has column indices outside [0, {user_items.shape[1]})")
    if indices.size > 1 and not user_items.has_canonical_format:  # scipy's O(nnz) check (sorted, unique)
        rows = row_ids(indptr)
        same_row = rows[1:] == rows[:-1]
        if np.any(same_row & (indices[1:] <= indices[:-1])):
            # unsorted rows: check duplicates exactly on a sorted copy
            order = np.lexsort((indices, rows))
            si, sr = indices[order], rows[order]
            if np.any((sr[1:] == sr[:-1]) & (si[1:] == si[:-1])):
                raise ValueError(f"{name} has duplicate (user, item) entries; call sum_duplicates() first")
    return user_items


def row_ids(indptr: np.ndarray) -> np.ndarray:
    """Row index of every stored entry (``np.repeat(arange(n), diff(indptr))``)."""
    indptr = np.asarray(indptr)
    n = indptr.size - 1
    dtype = np.int32 if n < 2**31 - 1 else np.int64
    return np.repeat(np.arange(n, dtype=dtype), np.diff(indptr))


def _rank_from_order(indptr, rows, order):
    """Rank inside its row of every entry, given ``order`` sorting the entries by (row, key)."""
    rank = np.empty(rows.size, dtype=np.int64)
    rank[order] = np.arange(rows.size, dtype=np.int64) - indptr[:-1].astype(np.int64)[rows]
    return rank


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sampling_key(rng: np.random.Generator) -> int:
    """One 63-bit key drawn from ``rng``: all per-entry sampling randomness of one release derives from it."""
    return int(rng.integers(0, 2**63 - 1))


def stable_user_keys(ids) -> np.ndarray:
    """The stable 64-bit sampling identity (``uint64``) of each user id: what per-user sampling is keyed on.

    A pure function of the id alone (:func:`privrec._hashing.stable_hash`, the hash that also
    places users in partitions: integers by value whatever their dtype, strings and other objects
    by SipHash with a fixed key), so a user's draws do not depend on which other users are in the
    data or on the order of the rows: removing one user leaves every other user's sample unchanged
    even for someone who knows the sampling key. A fit on a bare matrix has no ids; its row index
    *is* the id (``stable_user_keys(np.arange(n_users))``), so there deleting a row renumbers -- i.e.
    re-identifies -- every later user: pass an ``Interactions`` (or a DataFrame) with the users' ids
    for the property to hold under deletion.
    """
    return np.asarray(stable_hash(ids), dtype=np.uint64)


def check_user_keys(keys, n_rows: int) -> np.ndarray | None:
    """``keys`` (one per row, e.g. from :func:`stable_user_keys`) as ``uint64``, or ``None``; ``ValueError``
    when there is not exactly one key per row."""
    if keys is None:
        return None
    arr = np.asarray(keys)
    if arr.shape != (n_rows,) or arr.dtype.kind not in "iu":
        raise ValueError(
            f"user_keys must hold one integer key per row ({n_rows}), got {arr.dtype} of shape {arr.shape}"
        )
    return arr.astype(np.uint64, copy=False)


def entry_user_keys(rows: np.ndarray, keys: np.ndarray | None, row_offset: int = 0) -> np.ndarray:
    """The sampling identity of the user of each entry (``rows``: local row per entry): its key when
    ``keys`` are given, else its global row index ``row_offset + row`` (the identity of a bare matrix)."""
    if keys is not None:
        return keys[rows]
    return np.asarray(rows).astype(np.uint64) + np.uint64(row_offset)


def keyed_uniform(key: int, users: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """U[0, 1) per (user, column) pair, a pure function of ``(key, user, column)``.

    Counter-based randomness: the draw of an entry depends on the key, on the user's sampling
    identity (``users``: a :func:`stable_user_keys` hash of the user's id, or the global row index of a
    bare matrix; see :func:`entry_user_keys`) and on the item column only -- not on how the rows are
    split into blocks or machines, nor (with id keys) on the other users -- so the local and the
    distributed fit sample the same entries, and removing a user changes no one else's draws. The
    column index is stable between neighbouring datasets only when the item axis is a public
    catalogue (not derived from the data). With a key from OS entropy the draws are as random as
    any PRNG stream (splitmix64, applied twice), and independent of the data.
    """
    with np.errstate(over="ignore"):
        h = _splitmix64(np.asarray(users).astype(np.uint64) ^ np.uint64(key))
        h = _splitmix64(h ^ np.asarray(cols).astype(np.uint64))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


def keep_lowest_per_row(
    indptr: np.ndarray,
    indices: np.ndarray,
    k: int,
    levels,
    n_levels: int,
    key: int,
    row_offset: int = 0,
    user_keys: np.ndarray | None = None,
) -> np.ndarray:
    """Boolean mask keeping, in every row, the ``k`` entries of lowest integer ``levels`` (ties at random).

    ``levels`` (per entry, integers in [0, n_levels)) or ``None`` (uniform sampling without
    replacement). Rows with at most ``k`` entries are kept whole; only the entries of longer rows
    are ranked, with a single float64 argsort of ``row + (level + U) / n_levels`` with
    U = :func:`keyed_uniform` (key, user, column ``indices``) (the row is the integer part, so rows
    never mix; U breaks ties uniformly per entry). The user of a row is ``user_keys[row]`` (one
    stable key per row, :func:`stable_user_keys`) or, without keys, the global row ``row_offset + row``.
    """
    indptr = np.asarray(indptr)
    lengths = np.diff(indptr)
    user_keys = check_user_keys(user_keys, lengths.size)
    keep = np.ones(int(indptr[-1]), dtype=bool)
    long_rows = np.flatnonzero(lengths > k)
    if long_rows.size == 0:
        return keep
    sub_len = lengths[long_rows]
    sub_indptr = np.concatenate(([0], np.cumsum(sub_len)))
    pos = np.repeat(indptr[long_rows] - sub_indptr[:-1], sub_len) + np.arange(int(sub_indptr[-1]))
    rows = row_ids(sub_indptr)
    u = keyed_uniform(key, entry_user_keys(long_rows[rows], user_keys, row_offset), np.asarray(indices)[pos])
    lev = None if levels is None else np.asarray(levels)[pos]
    if long_rows.size < 2**30 and n_levels < 2**20:
        # fraction in [0, 1 - 2^-20): with rows < 2^30 float64 resolves it, so rows never mix
        sort_key = u if lev is None else u + lev
        sort_key *= (1.0 - 2.0**-20) / n_levels
        sort_key += rows
        order = np.argsort(sort_key)
    else:  # pragma: no cover - astronomically large inputs: exact lexsort
        order = np.lexsort((u, rows) if lev is None else (u, lev, rows))
    kept = _rank_from_order(sub_indptr, rows, order) < k
    # enforce the per-row bound in code (it is the counts' sensitivity): exactly k kept per long row
    if not np.all(np.bincount(rows[kept], minlength=long_rows.size) == k):
        raise AssertionError("per-row sampling kept a wrong number of entries")  # pragma: no cover
    keep[pos] = kept
    return keep


def sample_per_row(
    indptr: np.ndarray,
    indices: np.ndarray,
    k: int,
    key: int,
    row_offset: int = 0,
    user_keys: np.ndarray | None = None,
) -> np.ndarray:
    """Boolean mask keeping at most ``k`` entries per row, uniformly at random without replacement
    (randomness from :func:`keyed_uniform`: the same entries whatever block of rows is processed,
    and with ``user_keys`` whatever other users are present)."""
    return keep_lowest_per_row(indptr, indices, k, None, 1, key, row_offset, user_keys)


def row_sums(indptr: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-row sums of ``values`` (float64), zero for empty rows."""
    indptr = np.asarray(indptr)
    out = np.bincount(row_ids(indptr), weights=np.asarray(values, dtype=np.float64), minlength=indptr.size - 1)
    return out.astype(np.float64, copy=False)
