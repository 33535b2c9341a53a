"""Id columns and id vocabularies of long-format tables: an id column factorised into codes, a
declared id list (catalogue, roster, vocabulary) checked -- ordered, distinct, hashable, none
missing -- and looked up, and a vocabulary's fingerprint. Importable from
:mod:`privrec.data.frames` too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet

import numpy as np
import pandas as pd

from privrec._validation import check_ids_not_nul_suffixed, unhashable_id_error


def _tidy_uniques(uniques, name: str = "ids") -> np.ndarray:
    """Unique ids as a compact numpy array: unicode for all-string ids, object for mixed ids.

    A string id ending in NUL is an error (numpy strings drop trailing NULs: ``'a\\x00'`` would
    become ``'a'``, merging two ids)."""
    arr = np.asarray(uniques)
    if arr.dtype == object and len(arr):
        check_ids_not_nul_suffixed(arr, name)
        if all(isinstance(x, str) for x in arr):
            return arr.astype(str)
    return arr


def _id_values(values, name: str) -> np.ndarray:
    """An id column as a 1-D numpy array (object for strings and mixed ids: a NUL-suffixed string
    stays itself); a structured (struct) column is an error naming ``name``."""
    arr = values.to_numpy() if isinstance(values, (pd.Series, pd.Index)) else values
    if not isinstance(arr, np.ndarray):
        check_ids_not_nul_suffixed(list(arr), name)
        arr = np.asarray(arr)
    if arr.dtype.kind == "V":
        raise ValueError(f"{name} holds structured (struct) ids: ids must be hashable scalars (strings, integers, ...)")
    return arr


def _factorize_ids(values, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)``: uniques sorted when the ids are mutually comparable, else in order of
    first appearance (mixed types such as ``"a"`` and ``3`` cannot be sorted). Ids must be hashable
    scalars (a list / dict / struct id is a one-line ``ValueError`` naming ``name``)."""
    try:
        codes, uniques = pd.factorize(values, sort=True)
    except TypeError:
        try:
            codes, uniques = pd.factorize(values, sort=False)
        except TypeError:
            raise (
                unhashable_id_error(_id_values(values, name), name) or ValueError(f"{name}: ids cannot be hashed")
            ) from None
    if np.any(codes < 0):
        raise ValueError(f"{name} has {int(np.count_nonzero(codes < 0))} missing (NaN/None) id(s)")
    return codes.astype(np.int64, copy=False), _tidy_uniques(uniques, name)


def check_ordered_ids(values, what: str) -> None:
    """``ValueError`` when a declared id list (a catalogue, a roster, a vocabulary) ``values`` is not
    an ordered sequence: a ``set`` / ``frozenset`` (or any other ``collections.abc.Set``, e.g.
    ``dict.keys()``) has no order, and the order of a declared list fixes the rows of the model
    and of its saved file; a mapping (keys or values?), a string or bytes (a sequence of
    characters) are refused too. Passing ``sorted(ids)`` or a list states the order."""
    if isinstance(values, AbstractSet):
        raise ValueError(
            f"{what} must be an ordered sequence of ids (a list, tuple, numpy array or pandas Series / Index), "
            f"got a {type(values).__name__}: a set has no order, and the order of the ids fixes the model's rows; "
            "pass sorted(ids) or a list"
        )
    if isinstance(values, (Mapping, str, bytes)):
        raise ValueError(
            f"{what} must be an ordered sequence of ids (a list, tuple, numpy array or pandas Series / Index), "
            f"got a {type(values).__name__}"
        )


def check_no_missing_ids(vocab: np.ndarray, what: str) -> None:
    """``ValueError`` when a declared id array holds a missing value (``None``, NaN, ``pd.NA``,
    ``NaT``): a missing value is not an id, and would add a row no data can reach."""
    if vocab.dtype.kind not in "OfcmM":
        return
    missing = np.asarray(pd.isna(vocab), dtype=bool)
    if missing.any():
        k = int(np.flatnonzero(missing)[0])
        raise ValueError(
            f"{what} holds {int(missing.sum())} missing value(s) (None / NaN), e.g. {vocab[k]!r} at position {k}: "
            "a missing value is not an id"
        )


def _vocabulary_index(vocabulary, name: str) -> tuple[np.ndarray, pd.Index]:
    """``(vocabulary array, its pandas.Index)`` of a given vocabulary: a non-empty, ordered 1-D
    sequence (:func:`check_ordered_ids`: not a set) of distinct, hashable ids, none missing (one-line
    ``ValueError`` otherwise, before any lookup)."""
    check_ordered_ids(vocabulary, f"the {name} vocabulary")
    vocab = _id_values(vocabulary, f"the {name} vocabulary")
    if vocab.ndim != 1 or len(vocab) == 0:
        raise ValueError(f"the {name} vocabulary must be a non-empty 1-D sequence of ids")
    check_ids_not_nul_suffixed(vocab, f"the {name} vocabulary")
    check_no_missing_ids(vocab, f"the {name} vocabulary")
    try:
        index = pd.Index(vocab, tupleize_cols=False)
        unique = index.is_unique
    except TypeError:
        raise (
            unhashable_id_error(vocab, f"the {name} vocabulary")
            or ValueError(f"the {name} vocabulary cannot be hashed")
        ) from None
    if not unique:
        raise ValueError(
            f"the {name} vocabulary holds {int(index.duplicated().sum())} repeated id(s), "
            f"e.g. {list(index[index.duplicated()][:5])}"
        )
    return vocab, index


def _indexer(index: pd.Index, values, name: str) -> np.ndarray:
    """``index.get_indexer(values)`` with a one-line ``ValueError`` for unhashable ids."""
    try:
        return index.get_indexer(values)
    except TypeError:
        raise (
            unhashable_id_error(_id_values(values, name), name) or ValueError(f"{name}: ids cannot be hashed")
        ) from None


def _codes_in_vocabulary(values, vocabulary, name: str) -> tuple[np.ndarray, np.ndarray]:
    vocab, index = _vocabulary_index(vocabulary, name)
    codes = _indexer(index, values, f"{name} column")
    if np.any(codes < 0):
        missing = pd.unique(np.asarray(values, dtype=object)[codes < 0])[:5]
        raise ValueError(
            f"{int(np.count_nonzero(codes < 0))} {name} value(s) are not in the given {name} "
            f"vocabulary, e.g. {list(missing)}"
        )
    return codes.astype(np.int64, copy=False), _tidy_uniques(vocab, f"the {name} vocabulary")


def vocabulary_fingerprint(ids) -> str:
    """SHA-256 of an id vocabulary (order, types and values). ``Interactions.info`` keeps the
    fingerprint of a *given* item vocabulary, so a later data-dependent change of the item axis
    (e.g. ``drop_empty``, which keeps ``info``) is not mistaken for the public vocabulary."""
    arr = np.asarray(ids)
    h = hashlib.sha256(f"{arr.dtype.kind}:{len(arr)}\0".encode())
    if arr.dtype.kind in "iu":
        h.update(arr.astype(np.int64).tobytes())
    elif arr.dtype.kind == "U":
        h.update("\0".join(arr.tolist()).encode("utf-8", "surrogatepass"))
    else:
        for x in arr.tolist():
            h.update(f"{type(x).__name__}:{x!r}\0".encode("utf-8", "surrogatepass"))
    return h.hexdigest()
