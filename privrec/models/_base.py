"""Shared estimator API for privrec's factorisation models (Krichene et al., ICML 2023, App. D.1).

The API follows scikit-learn (hyper-parameters in ``__init__`` only, learned state with a trailing
underscore, ``get_params`` / ``set_params`` / ``sklearn.base.clone``, ``NotFittedError``,
``score``) and ``implicit`` 0.7 (``fit(user_items, show_progress, callback)``, ``recommend``,
``similar_items``, ``similar_users``, ``recalculate_user`` / ``recalculate_item``,
``partial_fit_users`` / ``partial_fit_items``, ``rank_items``, ``user_factors`` / ``item_factors``,
``save`` / ``load`` of a path or file object; ids and scores returned as ``(ids, scores)`` arrays,
batched over arrays of ids), so a script written for ``implicit`` runs after swapping the import.

Learned state common to all models: ``item_factors_`` (n_items, d), ``user_factors_`` (n_users, d)
and, where a model has them, ``global_mean_``, ``user_bias_``, ``item_bias_``. A prediction is
``global_mean_ + user_bias_[u] + item_bias_[i] + <user_factors_[u], item_factors_[i]>``. A model
fitted from data with ids (a pandas DataFrame or an ``Interactions``) also holds ``user_ids_`` /
``item_ids_`` (index -> original id; ``None`` when fitted from a bare matrix) and recommends by id
(``recommend_ids``, ``similar_items_ids``).

Inputs of ``fit`` (handled once here, for every subclass: ``FactorizationModel.__init_subclass__``
wraps each subclass's ``fit`` so it receives a checked CSR): a scipy sparse users x items matrix
(CSR, CSC or COO; duplicates rejected), a :class:`privrec.data.Interactions`, or a long-format
pandas DataFrame with columns ``user`` / ``item`` / ``rating`` (the module defaults of
:mod:`privrec.data.frames`; build the ``Interactions`` with :func:`privrec.data.from_pandas` for
other column names or a public item vocabulary), or a dense array in which NaN marks an unrated
entry (0 is a rating). scikit-learn's ``fit(X, y)`` calling convention is accepted too: a ``y``
(``None`` or an array) in the ``show_progress`` position is ignored (the ratings are in ``X``).

Progress bars: ``fit(X, show_progress=True / False)`` decides for one fit (implicit 0.7's
signature); ``show_progress=None`` (or not given) falls back to the model's ``show_progress``
constructor parameter, as ``verbose`` in scikit-learn; its default ``None`` means **a bar when
``fit`` is called directly, none when scikit-learn calls it** (``GridSearchCV``,
``cross_validate``, a ``Pipeline``, ``check_estimator``: any scikit-learn function on the call
stack, or a ``y`` given as in ``fit(X, y)``), so a search prints no bar per fold. Estimators
cloned by scikit-learn keep the constructor value: ``show_progress=True`` asks for bars even there.

Model selection over a private model: scores computed for scikit-learn's model selection
(``GridSearchCV``, ``cross_val_score``, ...) are functions of the private data that no privacy
ledger counts, and choosing among the candidates spends privacy that none of their (epsilon, delta)
guarantees covers; :class:`PrivateSelectionWarning` says so once per model and points to
:func:`privrec.tuning.select_private`, which accounts for the whole selection.

Item catalogue: ``fit(X, items=catalogue)`` declares the public item catalogue (the item axis is
then the catalogue, whatever items have ratings: :func:`with_item_catalogue`), as
``privrec.data.from_pandas(..., item_ids=catalogue)`` does. A *private* model fitted on an item axis
derived from the data (a DataFrame / CSV without a catalogue) warns with
:class:`ItemCatalogueWarning`; ``fit(X, strict_catalogue=True)`` refuses any private fit without a
declared catalogue. :meth:`FactorizationModel.save` records where the axis came from (metadata
``item_axis``: ``{"source": "catalogue" | "data" | "matrix", "public": bool}``).

User ids and sampling: per-user sampling in a private fit is keyed on each user's id
(:func:`privrec.allocation.stable_user_keys`); a bare matrix has no ids and its row index is the id.

Pickling (``pickle``, ``joblib.dump``) a fitted private model keeps the release only: the training
users' factors, biases and ids, data-derived item ids, fit timings and the noise seed are dropped,
with one :class:`PrivateStateWarning` (:meth:`FactorizationModel.__getstate__`). Non-private models
pickle everything.

Private models (``epsilon`` finite) refuse operations that would compute something new from
*other* users' data after the release (``recalculate_item``, ``partial_fit_items``): those would be
releases no privacy ledger accounts for, so they raise :class:`PrivateReleaseError`. Operations on
a user's *own* data are free (billboard projection, Krichene et al. 2023, Remark D.1): ``recalculate_user``,
``partial_fit_users``, ``transform``, and ``recommend`` on a loaded model without user factors,
which projects the given ``user_items`` rows automatically.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import json
import math
import numbers
import os
import sys
import warnings
import weakref
import zipfile
import zlib
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from .._io import atomic_path
from .._validation import (
    MAX_RATING_MAGNITUDE,
    _gib,
    check_csr_structure,
    check_int,
    check_memory,
    check_rating_magnitude,
    memory_limit,
    sparse_to_csr,
    unhashable_id_error,
)

FORMAT_NAME = "privrec-model"
FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_FLOAT_DTYPES = ("float32", "float64")
_MAX_META_BYTES = 256 << 20  # UTF-32 text of the metadata (privacy reports with many events)
#: zip compression methods a model file may use -> the most bytes one compressed byte can expand
#: to. numpy writes .npz members stored (``np.savez``, 1:1) or deflated (``np.savez_compressed``);
#: deflate cannot exceed 1032:1 (RFC 1951: a 258-byte match costs at least 2 bits). bzip2 and lzma
#: (whose ratios are unbounded in practice) are refused, so every declared size is bounded by the
#: size of the file itself before anything is read.
_MAX_EXPANSION = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: 1032}
_MAX_JSON_DEPTH = 64
_EPS_RTOL = 1e-6

__all__ = [
    "FactorizationModel",
    "PrivateReleaseError",
    "PrivateSelectionWarning",
    "PrivateStateWarning",
    "ItemCatalogueWarning",
    "UserRosterWarning",
    "RatingRangeWarning",
    "NotFittedError",
    "as_user_items",
    "check_fit_matrix",
    "check_ids",
    "check_rating_range",
    "fit_input",
    "item_axis_source",
    "user_axis_source",
    "with_item_catalogue",
    "with_user_roster",
]


class PrivateReleaseError(ValueError, NotImplementedError):
    """The operation would compute a new function of other users' private training data after the
    release (e.g. re-solving an item from its ratings): a release that the model's privacy ledger
    does not account for. Subclasses both ``ValueError`` and ``NotImplementedError``."""


class RatingRangeWarning(UserWarning):
    """Ratings given to ``fit`` fall outside the model's declared (public) rating range."""


class ItemCatalogueWarning(UserWarning):
    """A private model was fitted on an item axis derived from the training data: a DataFrame / CSV
    (or an ``Interactions`` read from one) without a declared item catalogue indexes only the items
    that have at least one rating. Which items have ratings is a statistic of the data -- with one
    user as an item's only rater, the released arrays have a row more with that user than without --
    so the item axis is not covered by the privacy guarantee. Declare the public catalogue:
    ``model.fit(X, items=catalogue)``, ``privrec.data.from_pandas(..., item_ids=catalogue)`` or
    ``from_parquet(..., item_ids=catalogue)``; ``fit(X, strict_catalogue=True)`` refuses instead."""


class UserRosterWarning(UserWarning):
    """A private model was fitted on a user axis derived from the training data: a DataFrame / CSV
    (or an ``Interactions`` read from one) without a declared user roster lists only the users that
    have ratings. DPALS's guarantee is stated for the zero-out relation over a public roster (the
    number of users shapes the fit), and a user whose ratings are all removed would then vanish from
    the roster, changing its size. Declare the roster: ``model.fit(X, users=roster)`` or
    ``privrec.data.from_pandas(..., user_ids=roster)``."""


class PrivateStateWarning(UserWarning):
    """Pickling (``pickle``, ``joblib.dump``, ...) a fitted private model dropped the state its privacy
    guarantee does not cover (the training users' factors, biases and ids, data-derived item ids,
    fit timings, the noise seed): the unpickled model holds the release only, as a loaded one does."""


class PrivateSelectionWarning(UserWarning):
    """A private model is scored for scikit-learn's model selection (``GridSearchCV``,
    ``cross_val_score``, ...): the scores and the choice among candidates are computed from the
    private data, and no privacy ledger counts that spending. :func:`privrec.tuning.select_private`
    selects among private candidates with every release in one ledger."""


def called_by_sklearn(package: str = "sklearn") -> bool:
    """Whether a function of ``package`` (scikit-learn, or one of its subpackages such as
    ``"sklearn.model_selection"``) is on the current call stack."""
    frame = sys._getframe(1)
    while True:
        module = frame.f_globals.get("__name__") or ""
        if module == package or module.startswith(package + "."):
            return True
        if frame.f_back is None:
            return False
        frame = frame.f_back


#: models that already warned (held weakly: a model is not kept alive, nor its state changed)
_selection_warned: weakref.WeakSet = weakref.WeakSet()


def warn_private_selection(model, stacklevel: int = 3) -> None:
    """One :class:`PrivateSelectionWarning` per private ``model`` (finite epsilon) scored within
    ``sklearn.model_selection``; nothing otherwise."""
    if not model._is_private() or model in _selection_warned or not called_by_sklearn("sklearn.model_selection"):
        return
    _selection_warned.add(model)
    warnings.warn(
        f"scoring a private {type(model).__name__} (epsilon={model.epsilon}) for scikit-learn's model selection: "
        "each candidate's (epsilon, delta) covers its own release only, while the scores and the choice among "
        "candidates are computed from the private training and held-out data, spending privacy that no privacy "
        "ledger counts. Select settings on public or synthetic data, or use privrec.tuning.select_private, "
        "which fits the candidates, releases their held-out scores with noise and refits the winner under one "
        "ledger",
        PrivateSelectionWarning,
        stacklevel=stacklevel,
    )


# ---------------------------------------------------------------------- input checks


def _dense_to_csr(user_items, name: str) -> sp.csr_matrix:
    """A dense users x items array as CSR: **NaN marks an unrated entry; every other value, 0
    included, is a rating** (a ``UserWarning`` says how many zeros were taken as ratings, since
    ``scipy.sparse.csr_matrix(dense)`` would have dropped them)."""
    import pandas as pd

    if isinstance(user_items, pd.DataFrame):
        raise ValueError(
            f"{name}: a DataFrame is read as a long-format rating table (columns 'user', 'item', "
            f"'rating'), got columns {list(user_items.columns)[:10]}; see privrec.data.from_pandas"
        )
    arr = None if isinstance(user_items, (Mapping, Set, str, bytes)) else np.asarray(user_items)
    if arr is None or arr.ndim == 0:
        raise ValueError(
            f"{name} must be a users x items ratings matrix (scipy.sparse, a 2-D array, a privrec.data."
            f"Interactions or a long-format DataFrame), got {type(user_items).__name__}"
        )
    if arr.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} must hold real-valued ratings")
    if arr.dtype.kind not in "biuf":
        if arr.dtype.kind in "OUSV":
            if arr.dtype.kind == "O":
                from ..data.frames import check_real_objects

                # real numbers only: datetimes, complex numbers, booleans in an object array are refused
                check_real_objects(arr, name)
            arr = arr.astype(np.float64)  # a TypeError / ValueError names the non-numeric value
        else:
            raise ValueError(f"{name} must hold numeric ratings, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D users x items matrix, got an array of shape {arr.shape}. Reshape "
            f"your data: a single user's ratings with .reshape(1, -1)"
        )
    arr = arr.astype(np.float32, copy=False) if arr.dtype.kind != "f" else arr
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains {int(np.isinf(arr).sum())} infinite value(s)")
    rated = ~np.isnan(arr)
    # before the float32 cast below (a float64 rating of 1e40 would become infinite)
    check_rating_magnitude(arr[rated], name, lambda k: "row {}, column {}".format(*np.argwhere(rated)[k]))
    n_zero = int(np.count_nonzero(arr == 0))
    if n_zero:
        warnings.warn(
            f"dense {name}: {n_zero} entries equal to 0 are taken as ratings of 0 (NaN marks an unrated "
            f"entry in a dense matrix; pass a scipy.sparse matrix if 0 means unrated)",
            UserWarning,
            stacklevel=4,
        )
    indptr = np.zeros(arr.shape[0] + 1, dtype=np.int64)
    np.cumsum(rated.sum(axis=1), out=indptr[1:])
    cols = np.nonzero(rated)[1]
    return sp.csr_matrix((arr[rated].astype(np.float32), cols, indptr), shape=arr.shape)


def as_user_items(
    user_items, name: str = "user_items", n_items: int | None = None, model: str = "the model"
) -> sp.csr_matrix:
    """Validate and normalise a users x items rating matrix (scipy sparse or dense, or an ``Interactions``).

    Returns a float32 CSR with sorted int32 indices (a copy when needed). Every public entry that
    takes ratings (``fit``, ``recommend``, ``transform``, ``recalculate_user``) goes through here.
    CSC and COO inputs are converted to CSR (after their own structural check); a dense array is
    read with **NaN as the unrated marker** (0 is a rating; see :func:`_dense_to_csr`). Raises a
    one-line ``ValueError`` for a corrupt matrix (column index out of range, inconsistent
    ``indptr``: see :func:`privrec._validation.check_csr_structure`), infinite values (and NaN in
    a sparse matrix), a wrong item count, or **duplicate (user, item) entries: they are rejected,
    never summed** (the same policy as :class:`privrec.data.Interactions`; resolve them first with
    ``matrix.sum_duplicates()`` or ``Interactions.from_arrays(..., duplicates=...)``).
    """
    if user_items is None:
        raise ValueError(f"{name} is None: pass a users x items ratings matrix (scipy.sparse, CSR/CSC/COO)")
    matrix = getattr(user_items, "matrix", user_items)  # privrec.data.Interactions (duck-typed)
    if not sp.issparse(matrix):
        matrix = _dense_to_csr(user_items, name)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {matrix.shape}")
    matrix = sparse_to_csr(matrix, name)
    if n_items is not None and matrix.shape[1] != n_items:
        raise ValueError(
            f"{name} has {matrix.shape[1]} item columns, but the model was fitted on {n_items} items "
            f"(X has {matrix.shape[1]} features, but {model} is expecting {n_items} features as input)"
        )
    is_sorted = check_csr_structure(matrix, name)
    data = np.asarray(matrix.data)
    indices = np.asarray(matrix.indices)
    indptr = np.asarray(matrix.indptr)
    check_rating_magnitude(
        data,
        name,
        lambda k: f"row {int(np.searchsorted(indptr, k, side='right') - 1)}, column {int(indices[k])}",
    )
    small = max(matrix.shape) < np.iinfo(np.int32).max and len(indices) < np.iinfo(np.int32).max
    idx_dtype = np.int32 if small else np.int64
    out = sp.csr_matrix(
        (
            data.astype(np.float32, copy=False),
            indices.astype(idx_dtype, copy=False),
            indptr.astype(idx_dtype, copy=False),
        ),
        shape=matrix.shape,
        copy=False,
    )
    if not is_sorted:
        out = out.copy()
        out.has_sorted_indices = False
        out.sort_indices()
    # checked above: sorted (now), no duplicates
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def _item_users(item_users, n_users: int) -> sp.csr_matrix:
    """An items x users matrix with at most ``n_users`` columns (fewer: the missing users have no
    ratings, e.g. users added by ``partial_fit_users`` after it was built), widened to ``n_users``."""
    rows = as_user_items(item_users, name="item_users")
    if rows.shape[1] > n_users:
        raise ValueError(f"item_users has {rows.shape[1]} user columns, but the model has {n_users} users")
    if rows.shape[1] < n_users:
        rows = sp.csr_matrix((rows.data, rows.indices, rows.indptr), shape=(rows.shape[0], n_users))
        rows.has_sorted_indices = True
    return rows


def _id_array(ids) -> np.ndarray:
    """1-D array of ids from an array or a list (a list of tuples stays a list of tuple ids: pass a
    tuple id inside a list, ``[(2, 3)]``, since a bare tuple is read as a sequence of ids)."""
    if isinstance(ids, (list, tuple)):
        values = list(ids)
        kinds = {type(v) for v in values}
        # (a str id ending in NUL stays an object: a numpy string would drop the NUL and match another id)
        if values and all(issubclass(k, str) for k in kinds) and not any(v.endswith("\x00") for v in values):
            return np.asarray(values, dtype=str)
        if values and all(issubclass(k, numbers.Integral) and not issubclass(k, (bool, np.bool_)) for k in kinds):
            try:
                return np.asarray(values, dtype=np.int64)
            except OverflowError:  # ids beyond int64 (e.g. uint64 ids >= 2**63)
                if min(values) >= 0 and max(values) < 1 << 64:
                    return np.asarray(values, dtype=np.uint64)
        arr = np.empty(len(values), dtype=object)
        for k, v in enumerate(values):
            arr[k] = v
        return arr
    return np.atleast_1d(np.asarray(ids))


def _is_identity_ids(ids, n: int) -> bool:
    ids = np.asarray(ids)
    return ids.dtype.kind in "iu" and ids.shape == (n,) and bool(np.array_equal(ids, np.arange(n)))


def fit_input(X):
    """``(csr, user_ids or None, item_ids or None, item_vocabulary_given)`` of any ``fit`` input.

    ``X``: a scipy sparse users x items matrix (any format), an ``Interactions`` (its id maps are
    returned unless they are the identity ``0..n-1``) or a long-format pandas DataFrame with the
    default columns of :mod:`privrec.data.frames` (``user``, ``item``, ``rating``).
    """
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        from ..data.frames import interactions_from_frame

        X = interactions_from_frame(X)
    user_ids = item_ids = None
    given = False
    if not sp.issparse(X) and hasattr(X, "matrix") and hasattr(X, "user_ids") and hasattr(X, "item_ids"):
        n_users, n_items = X.matrix.shape
        if not _is_identity_ids(X.user_ids, n_users):
            user_ids = np.asarray(X.user_ids)
        if not _is_identity_ids(X.item_ids, n_items):
            item_ids = np.asarray(X.item_ids)
        info = getattr(X, "info", None) or {}
        if info.get("item_vocabulary") == "given" and item_ids is not None:
            from ..data.frames import vocabulary_fingerprint

            # the item axis may have been changed since (e.g. drop_empty keeps info): check it is the given one
            given = info.get("item_vocabulary_sha256") == vocabulary_fingerprint(item_ids)
    return as_user_items(X), user_ids, item_ids, given


#: where a fitted model's item axis came from (``FactorizationModel.item_axis_``, saved as ``item_axis``)
ITEM_AXIS_SOURCES = ("catalogue", "data", "matrix")


def item_axis_source(X) -> str:
    """Where the item axis (columns) of a ``fit`` input comes from.

    * ``"catalogue"``: a declared public vocabulary -- an ``Interactions`` built with ``item_ids=``
      (``from_pandas`` / ``from_parquet`` / :func:`with_item_catalogue`) whose axis is still that
      vocabulary (checked by fingerprint);
    * ``"data"``: the items that have ratings -- a long DataFrame (or CSV) or an ``Interactions``
      read from one without ``item_ids``, or whose given axis was changed since (e.g. ``drop_empty``);
    * ``"matrix"``: the columns of a matrix (or of an ``Interactions`` built from one), as the caller
      made them; privrec cannot tell whether they are a catalogue.
    """
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        return "data"
    if sp.issparse(X) or not (hasattr(X, "matrix") and hasattr(X, "item_ids")):
        return "matrix"
    info = getattr(X, "info", None) or {}
    vocabulary = info.get("item_vocabulary")
    if vocabulary == "given":
        from ..data.frames import vocabulary_fingerprint

        same = info.get("item_vocabulary_sha256") == vocabulary_fingerprint(np.asarray(X.item_ids))
        return "catalogue" if same else "data"
    return "data" if vocabulary == "data" else "matrix"


def user_axis_source(X) -> str:
    """Where the user axis (rows) of a ``fit`` input comes from: ``"roster"`` (an ``Interactions``
    built with ``user_ids=``, still that vocabulary), ``"data"`` (a DataFrame, or an ``Interactions``
    read from one without ``user_ids``) or ``"matrix"`` (a matrix's rows, as the caller made them)."""
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        return "data"
    if sp.issparse(X) or not (hasattr(X, "matrix") and hasattr(X, "user_ids")):
        return "matrix"
    info = getattr(X, "info", None) or {}
    vocabulary = info.get("user_vocabulary")
    if vocabulary == "given":
        from ..data.frames import vocabulary_fingerprint

        same = info.get("user_vocabulary_sha256") == vocabulary_fingerprint(np.asarray(X.user_ids))
        return "roster" if same else "data"
    return "data" if vocabulary == "data" else "matrix"


def with_user_roster(X, users):
    """A long DataFrame ``X`` as an ``Interactions`` whose user axis is the public roster ``users``
    (users without ratings get empty rows). Other inputs declare their roster when built
    (``from_pandas`` / ``from_parquet(..., user_ids=roster)``; a matrix's rows are its roster)."""
    import pandas as pd

    from ..data.frames import ITEM_COL, RATING_COL, USER_COL, from_pandas

    if not isinstance(X, pd.DataFrame):
        raise ValueError(
            "users= (the public user roster) applies to a long DataFrame; build other inputs with "
            "privrec.data.from_pandas / from_parquet(..., user_ids=roster), and a matrix's rows are its roster"
        )
    roster = _id_array(users)
    if roster.ndim != 1 or roster.size == 0:
        raise ValueError("users (the public user roster) must be a non-empty 1-D sequence of user ids")
    return from_pandas(X, USER_COL, ITEM_COL, RATING_COL if RATING_COL in X.columns else None, user_ids=roster)


def with_item_catalogue(X, items):
    """``X`` (any ``fit`` input) as an ``Interactions`` whose item axis is the public catalogue ``items``.

    ``items``: the catalogue's item ids, in order (unique; public: it must come from outside the
    ratings, e.g. a product list). A DataFrame is read with ``from_pandas(X, item_ids=items)``; an
    ``Interactions`` has its columns re-indexed to the catalogue (``ValueError`` for an item not in
    it); a matrix must have one column per catalogue item, in catalogue order. Items of the
    catalogue without ratings get columns without entries, so the released arrays have one row per
    catalogue item whatever the data (``ModelFile`` metadata ``item_axis``: ``catalogue``).
    """
    import pandas as pd

    from ..data.frames import ITEM_COL, RATING_COL, USER_COL, from_pandas, vocabulary_fingerprint
    from ..data.interactions import Interactions

    catalogue = _id_array(items)
    if catalogue.ndim != 1 or catalogue.size == 0:
        raise ValueError("items (the public item catalogue) must be a non-empty 1-D sequence of item ids")
    index = pd.Index(catalogue)
    if not index.is_unique:
        raise ValueError(
            f"items (the public item catalogue) holds repeated ids, e.g. {list(index[index.duplicated()][:5])}"
        )
    if isinstance(X, pd.DataFrame):
        return from_pandas(X, USER_COL, ITEM_COL, RATING_COL, item_ids=catalogue)
    if not sp.issparse(X) and hasattr(X, "matrix") and hasattr(X, "item_ids"):
        matrix, user_ids, timestamps = X.matrix, X.user_ids, getattr(X, "timestamps", None)
        codes = index.get_indexer(np.asarray(X.item_ids))
        if np.any(codes < 0):
            missing = list(np.asarray(X.item_ids)[codes < 0][:5])
            raise ValueError(f"item(s) {missing} of the data are not in the declared item catalogue")
        m = sp.csr_matrix((matrix.data, codes[matrix.indices], matrix.indptr), shape=(matrix.shape[0], index.size))
        name, info = getattr(X, "name", ""), dict(getattr(X, "info", None) or {})
    else:
        m = as_user_items(X)
        if m.shape[1] != index.size:
            raise ValueError(
                f"items declares {index.size} catalogue items but the matrix has {m.shape[1]} item columns "
                "(a matrix's columns are the catalogue, in order)"
            )
        user_ids = timestamps = None
        name, info = "", {}
    info.update(item_vocabulary="given", item_vocabulary_sha256=vocabulary_fingerprint(catalogue))
    return Interactions(m, user_ids, catalogue, timestamps=timestamps, name=name, info=info)


def check_fit_matrix(user_items) -> sp.csr_matrix:
    """:func:`fit_input`'s matrix plus the fit-time checks: at least one user, one item and one rating.

    Accepts every ``fit`` input (sparse matrix of any format, ``Interactions``, long DataFrame).
    """
    m = fit_input(user_items)[0]
    if m.shape[1] == 0:
        raise ValueError(
            f"user_items has no items, nothing to fit: 0 feature(s) (shape={m.shape}) while a minimum of 1 is required."
        )
    if m.shape[0] == 0:
        raise ValueError(
            f"user_items has no users, nothing to fit: 0 sample(s) (shape={m.shape}) while a minimum of 1 is required."
        )
    if m.nnz == 0:
        raise ValueError("user_items holds no ratings (nnz = 0); every user and item has no data")
    return m


def check_ids(ids, n: int, name: str) -> tuple[np.ndarray, bool]:
    """Return ``(ids as int64 1-D array, was_scalar)``; ``ValueError`` for negative / out-of-range ids."""
    scalar = np.ndim(ids) == 0
    arr = np.atleast_1d(np.asarray(ids))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be an integer or a 1-D array of integers, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        if (
            arr.dtype.kind == "f"
            and np.all(np.isfinite(arr))
            and np.all(arr == np.round(arr))
            and np.all(np.abs(arr) < 2.0**62)
        ):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"{name} must be in [0, {n}), got values in [{arr.min()}, {arr.max()}]")
    return arr, scalar


def check_rating_range(rating_range, name: str = "rating_range") -> tuple[float, float] | None:
    """``None`` or a ``(low, high)`` pair of finite numbers with ``low < high`` (returned as floats)."""
    if rating_range is None:
        return None
    try:
        low, high = rating_range
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be None or a (low, high) pair, got {rating_range!r}") from None
    for v in (low, high):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            raise ValueError(f"{name} must hold two finite numbers, got {rating_range!r}")
    if not float(low) < float(high):
        raise ValueError(f"{name} must have low < high, got {rating_range!r}")
    if max(abs(float(low)), abs(float(high))) > MAX_RATING_MAGNITUDE:
        raise ValueError(
            f"{name}={rating_range!r} is too wide: its bounds must be at most {MAX_RATING_MAGNITUDE:g} in magnitude "
            "(larger ratings overflow the float32 Gramians); rescale the ratings"
        )
    return float(low), float(high)


def _distinct(ids: np.ndarray) -> np.ndarray:
    """Candidate ids with repeats removed (first occurrence kept): a candidate set, so a repeated
    candidate is ranked once, never returned twice."""
    if ids.size < 2:
        return ids
    _, first = np.unique(ids, return_index=True)
    return ids if first.size == ids.size else ids[np.sort(first)]


def _topk(scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-n (descending) of a 2-D score array; -inf entries are never returned."""
    n = min(n, scores.shape[1])
    if n == 0:
        return np.zeros((scores.shape[0], 0), dtype=np.int64), np.zeros((scores.shape[0], 0), dtype=scores.dtype)
    part = np.argpartition(-scores, n - 1, axis=1)[:, :n]
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    ids = np.take_along_axis(part, order, axis=1)
    vals = np.take_along_axis(part_scores, order, axis=1)
    return ids, vals


#: dtype of the ids returned by recommend / similar_items / similar_users / rank_items: implicit 0.7's
#: (its CPU models return int32 ids, and ``implicit.evaluation`` reads them into C ``int`` buffers)
ID_DTYPE = np.int32


def _dropped_item_ids() -> ValueError:
    """The error of an id lookup in a model whose data-derived item ids were not kept."""
    return ValueError(
        "this model was saved without item ids (its item axis was not a declared catalogue): its ids came from the "
        "training data, which the privacy guarantee does not cover, so they were not kept and ids cannot be mapped "
        "to rows; use row indices (similar_items, recommend), or refit with the public catalogue (fit(X, "
        "items=catalogue); privrec fit --items FILE) to keep the ids"
    )


def _as_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """Returned ids (indices < ``n``, -1 padding) as :data:`ID_DTYPE`; int64 kept only when ``n``
    exceeds the int32 range."""
    return ids.astype(ID_DTYPE, copy=False) if n <= np.iinfo(ID_DTYPE).max else ids


def _normalised(F: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (all-zero rows stay zero: similarity 0 to everything)."""
    F = np.asarray(F, dtype=np.float32)
    norms = np.linalg.norm(F, axis=1)
    return F / np.where(norms > 0, norms, 1.0)[:, None]


def _array_or_none(value):
    return None if value is None else np.asarray(value)


def _grown_bias(b: np.ndarray | None, n_new: int, ids, values, dtype) -> np.ndarray:
    """Bias table ``b`` (``None``: none yet) cut or grown with zeros to ``n_new`` entries, ``ids`` set to
    ``values`` (``None``: kept)."""
    out = np.zeros(n_new, dtype=dtype)
    if b is not None:
        out[: b.shape[0]] = b[:n_new]
    if values is not None:
        out[ids] = values
    return out


def _implicit_alias(attr: str, note: str) -> property:
    """The fitted attribute ``attr`` under implicit's name (no trailing underscore), read and write.

    Reading gives ``None`` while ``attr`` is unset; assigning stores ``value`` as an array (``None`` as is).
    """

    def get(self):
        return getattr(self, attr, None)

    def set_(self, value):
        setattr(self, attr, _array_or_none(value))

    return property(get, set_, doc=f"``{attr}`` under implicit's name {note}.")


def _embedding_for_similarity(F: np.ndarray, side: str) -> np.ndarray:
    """``F`` (``side`` factors), refused when it has no columns: cosine of empty embeddings is undefined."""
    if F.shape[1] == 0:
        raise ValueError(
            f"this model has no {side} factors (factors = 0: the bias / popularity model, which the automatic "
            f"configuration chooses when the privacy noise would swamp item embeddings), so {side} similarity is "
            "undefined; fit with a larger epsilon, more users or an explicit factors="
        )
    return F


def _is_show_progress(value) -> bool:
    return isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and value in (0, 1))


def _progress_arguments(model, args: tuple, kwargs: dict, progress_second: bool, takes_progress: bool):
    """``(args, kwargs)`` for a subclass's ``fit(user_items, ...)`` with scikit-learn's ``y`` removed and
    ``show_progress`` resolved (module docstring): the fit's argument, else the constructor's
    ``show_progress``, else a bar only when neither a ``y`` was given nor scikit-learn is the caller."""
    sklearn_style = bool(args) and not _is_show_progress(args[0])
    if sklearn_style:
        args = args[1:]  # scikit-learn's y (None or an array): ignored, the ratings are in X
    elif args and progress_second:
        if "show_progress" in kwargs:
            raise TypeError("fit() got multiple values for argument 'show_progress'")
        kwargs = {**kwargs, "show_progress": args[0]}
        args = args[1:]
    if not takes_progress:
        return args, kwargs
    show = kwargs.pop("show_progress", None)
    if show is None:
        show = getattr(model, "show_progress", None)  # checked with the other parameters by fit
    if show is None:
        show = not (sklearn_style or called_by_sklearn())
    if progress_second:
        return (show, *args), kwargs
    return args, {**kwargs, "show_progress": show}


def _check_fitted_factors(model) -> None:
    """One-line ``ValueError`` (and the model left unfitted) when a fit produced NaN or infinite
    factors: a numerical overflow must not pass for a model (``recommend`` then returned ``[]``)."""
    for name in ("item_factors_", "user_factors_", "item_bias_", "user_bias_"):
        value = getattr(model, name, None)
        if value is not None and not np.isfinite(value).all():
            model.item_factors_ = None  # not fitted (sklearn's check and every method agree)
            raise ValueError(
                f"the fit of this {type(model).__name__} overflowed: {name} holds NaN or infinite values; rescale the "
                "ratings (e.g. to a 1-5 scale) or fit with dtype=np.float64"
            )


def _wrap_fit(fit):
    """Wrap a subclass's ``fit``: one input conversion (module docstring), scikit-learn's ``y``
    ignored, ``show_progress`` resolved (``None``: the constructor's value; module docstring), and
    the id maps stored once the fit succeeded."""

    import inspect

    signature = inspect.signature(fit)
    params = list(signature.parameters)
    progress_second = len(params) > 2 and params[2] == "show_progress"
    takes_progress = "show_progress" in params

    @functools.wraps(fit)
    def fit_wrapper(self, user_items, *args, items=None, users=None, strict_catalogue: bool = False, **kwargs):
        args, kwargs = _progress_arguments(self, args, kwargs, progress_second, takes_progress)
        if "y" in kwargs:
            kwargs.pop("y")
        if kwargs.get("callback") is not None and not callable(kwargs["callback"]):
            raise ValueError(
                f"callback must be callable(iteration, elapsed_seconds, loss) or None, "
                f"got {type(kwargs['callback']).__name__}"
            )
        if users is not None:
            user_items = with_user_roster(user_items, users)
        if items is not None:
            user_items = with_item_catalogue(user_items, items)
        self._check_user_axis(user_axis_source(user_items))
        axis = item_axis_source(user_items)
        self._check_item_axis(axis, bool(strict_catalogue))
        R, user_ids, item_ids, given = fit_input(user_items)
        # the fitted users' ids, for the duration of the fit only (FactorizationModel._sampling_user_keys)
        self._fit_user_ids = user_ids
        try:
            out = fit(self, R, *args, **kwargs)
        finally:
            self.__dict__.pop("_fit_user_ids", None)
        _check_fitted_factors(self)
        self.user_ids_ = user_ids
        self.item_ids_ = item_ids
        # ids that are exactly 0..n-1 are kept as None (indices are the ids): not a dropped vocabulary
        self._item_ids_identity = item_ids is None
        self._item_ids_given = bool(given)
        self._item_axis = axis
        self._id_lookup = {}
        self._fitted_params = _param_fingerprint(self)  # save() refuses parameters changed since
        return out

    fit_wrapper._privrec_fit_input = True
    if takes_progress:  # the documented default: None (the constructor's show_progress)
        fit_wrapper.__signature__ = signature.replace(
            parameters=[
                p.replace(default=None, annotation="bool | None") if p.name == "show_progress" else p
                for p in signature.parameters.values()
            ]
        )
    return fit_wrapper


class FactorizationModel(BaseEstimator):
    """Base class: recommend / similar items and users / predict / score / projection / save / load.

    Subclasses implement ``fit`` (which receives a checked CSR: see the module docstring) and
    ``_project_users(user_items) -> (factors, user_bias)`` (the billboard projection of Krichene et al.
    2023, Remark D.1: a user's embedding recomputed from the fitted item side and that user's own
    ratings only). Non-private models may implement ``_solve_items(item_users) -> (factors,
    item_bias)`` (an exact item solve from the fitted user side) for ``recalculate_item`` and
    ``partial_fit_items``.

    scikit-learn conventions: ``fit`` returns ``self``; methods of an unfitted model raise
    ``sklearn.exceptions.NotFittedError`` (a ``ValueError`` and ``AttributeError``);
    ``score(X)`` is the negative RMSE of the held-out ratings in ``X`` (see :meth:`score`);
    use :class:`privrec.data.RatingSplitCV` to cross-validate over ratings with ``GridSearchCV``.
    """

    # names of array attributes written by save(); subclasses extend
    _saved_arrays: tuple[str, ...] = ("item_factors_",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is not None and not getattr(fit, "_privrec_fit_input", False):
            cls.fit = _wrap_fit(fit)

    # ------------------------------------------------------------------ state helpers
    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "item_factors_", None) is not None

    def _check_fitted(self):
        check_is_fitted(self, msg=f"this {type(self).__name__} is not fitted yet; call fit(user_items) first")

    def __sklearn_tags__(self):
        # Input: a users x items ratings matrix, sparse (CSR/CSC/COO) or dense (NaN = unrated, 0 is a
        # rating), or an Interactions / long-format DataFrame.
        # No target (requires_y False; a y given to fit is ignored).
        # A transformer: ``transform(user_items)`` maps each user's rating row to that user's
        # d-dimensional embedding (the billboard projection of Krichene et al. 2023, Remark D.1: row by row,
        # from the fitted item side), so ``fit(X).transform(X)`` works in a Pipeline that feeds
        # user embeddings to a downstream estimator. The output dtype is the model's ``dtype``
        # (float32 by default), not the input's, hence ``preserves_dtype=[]``.
        # Not a regressor: ``predict`` takes (user, item) pairs or the entries of a ratings matrix,
        # not rows of features; ``score`` is the negative RMSE of held-out ratings.
        from sklearn.utils import TransformerTags

        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True  # NaN marks an unrated entry of a dense matrix (infinity is rejected)
        tags.target_tags.required = False
        tags.requires_fit = True
        tags.transformer_tags = TransformerTags(preserves_dtype=[])
        tags.non_deterministic = "random_state" in self.get_params(deep=False) and self.random_state is None
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"requires_y": False, "X_types": ["2darray", "sparse"], "allow_nan": True, "requires_fit": True}

    @property
    def n_items_(self) -> int:
        self._check_fitted()
        return int(self.item_factors_.shape[0])

    @property
    def n_features_in_(self) -> int:
        """scikit-learn's name for the number of columns of ``X``: the number of items."""
        return self.n_items_

    item_factors = _implicit_alias("item_factors_", "(``None`` before fit, as in implicit)")
    user_factors = _implicit_alias("user_factors_", "(``None`` before fit, or for a loaded private model)")

    def _item_bias(self):
        return _array_or_none(getattr(self, "item_bias_", None))

    def _user_bias(self):
        return _array_or_none(getattr(self, "user_bias_", None))

    def _global(self) -> float:
        return float(getattr(self, "global_mean_", 0.0) or 0.0)

    def _project_users(self, user_items: sp.csr_matrix):
        raise NotImplementedError

    def _solve_items(self, item_users: sp.csr_matrix):
        raise NotImplementedError(
            f"{type(self).__name__} cannot re-solve item factors (recalculate_item / partial_fit_items)"
        )

    def _is_private(self) -> bool:
        """Whether the model carries a (finite) privacy guarantee: its parameter ``epsilon`` < inf."""
        eps = getattr(self, "epsilon", None)
        if eps is None:
            return False
        try:
            return math.isfinite(float(eps))
        except (TypeError, ValueError):
            return True

    def _is_implicit_feedback(self) -> bool:
        return getattr(self, "feedback", "explicit") == "implicit"

    def describe(self):
        """What was fitted: a dict (``model``, ``label``, ``method``, ``feedback``, ``shape``,
        ``factors``, ``personal``, ``personal_part``, ``config`` = the resolved ``config_``,
        ``privacy`` = the guarantee in plain words with epsilon, delta, accountant, relation,
        public and released parts) whose ``str()`` is printable text
        (:mod:`privrec.models._describe`). Reads the model only: no privacy cost."""
        from ._describe import describe

        return describe(self)

    def model_card(self, path=None, metrics=None, dataset: str | None = None) -> str:
        """Markdown model card (data shape, relation, epsilon / delta, accountant, settings, the
        ``metrics`` against the yardsticks when given as ``{row: {metric: value}}``, what is released
        and what is not); written atomically to ``path`` when given. Returns the text."""
        from ._describe import model_card

        return model_card(self, path, metrics=metrics, dataset=dataset)

    def _private_refusal(self, what: str) -> PrivateReleaseError:
        return PrivateReleaseError(
            f"{what} is not available for a private {type(self).__name__} (epsilon={self.epsilon}): it would compute "
            f"a new function of other users' training data after the release, a private release that the "
            f"model's privacy ledger does not account for (the (epsilon, delta) guarantee covers fit only). Refit "
            f"the model (a new, accounted release) to include new data"
        )

    def _check_user_axis(self, axis: str) -> None:
        """Before a fit: a private model warns (:class:`UserRosterWarning`) when its user axis (the
        roster, whose size is public under the zero-out relation) comes from the data."""
        if self._is_private() and axis == "data":
            warnings.warn(
                f"private {type(self).__name__} fitted on a user roster taken from the data (only the users that "
                "have ratings): the guarantee is stated for a public roster (zero-out of one user's ratings), "
                "and a user whose ratings are all removed would leave this one; declare the roster with "
                "fit(X, users=roster) or privrec.data.from_pandas(..., user_ids=roster)",
                UserRosterWarning,
                stacklevel=3,
            )

    def _check_item_axis(self, axis: str, strict: bool) -> None:
        """Before a fit: a private model warns (:class:`ItemCatalogueWarning`) when its item axis comes
        from the data (``axis``: :func:`item_axis_source`); with ``strict`` it refuses (``ValueError``)
        any item axis that is not a declared catalogue. Non-private models fit any axis."""
        if not self._is_private() or axis == "catalogue":
            return
        how = (
            "the items that have ratings in the data"
            if axis == "data"
            else "the matrix's columns, which privrec cannot check against a catalogue"
        )
        advice = (
            "declare the public item catalogue with fit(X, items=catalogue) or privrec.data.from_pandas / "
            "from_parquet(..., item_ids=catalogue)"
        )
        if strict:
            raise ValueError(
                f"strict_catalogue: this private {type(self).__name__} needs a declared item catalogue, but its "
                f"item axis would be {how}; {advice}"
            )
        if axis == "data":
            warnings.warn(
                f"private {type(self).__name__} fitted on an item axis taken from the data (only the items that have "
                "ratings): which items have ratings is not covered by the privacy guarantee, and the released item "
                f"arrays have one row per such item; {advice} (strict_catalogue=True refuses such fits)",
                ItemCatalogueWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ pickling
    #: Fitted state of a private model that its (epsilon, delta) guarantee does not cover -- computed
    #: from the exact training data, not part of the release -- dropped when the model is pickled.
    #: Subclasses extend the tuple.
    _private_state: tuple[str, ...] = (
        "user_factors_",  # billboard projection of every training user: each user's exact ratings
        "user_bias_",  # the same for the user biases
        "user_ids_",  # the training roster
        "fit_timings_",  # wall-clock times, which grow with the exact data size
        "_id_lookup",  # cached index of user_ids_ / item_ids_
        "_fit_user_ids",  # the roster, held during fit only
    )
    #: Fitted attributes a private model keeps when pickled: the release (item side, noisy counts,
    #: privacy ledger / report) and values computed from public settings alone. Any other fitted
    #: (``name_``) attribute is dropped as well, so state added later is private until listed here;
    #: ``item_ids_`` is kept only when it is a given public catalogue (as :meth:`save` does).
    _released_state: tuple[str, ...] = (
        "item_factors_",
        "item_bias_",
        "global_mean_",
        "item_counts_",
        "item_exposure_",
        "selection_",
        "trained_items_",
        "ledger_",
        "privacy_report_",
        "noise_scales_",
        "config_",
        "user_reg_norm_",
        "user_regularization_",
        "item_reg_norm_",
    )
    #: attributes the API reads with ``getattr(..., None)``: set to ``None`` when dropped
    _none_when_dropped = ("user_factors_", "user_bias_", "user_ids_", "item_ids_")

    def __getstate__(self):
        """The pickled state: everything for a non-private or unfitted model; for a fitted private
        model the release only (:attr:`_private_state` and every fitted attribute not in
        :attr:`_released_state` dropped, the user side ``None`` as in a loaded model, the noise seed
        removed as :meth:`save` does) and one :class:`PrivateStateWarning` naming what was dropped.

        The unpickled model recommends for a user from the user's own rows (billboard projection,
        free: ``recommend(userid, user_items, recalculate_user=True)``, ``transform``), and ranks
        similar items, exactly as the original. In-memory copies (``copy.copy`` / ``copy.deepcopy``)
        keep everything: they do not leave the process.
        """
        state = dict(super().__getstate__())
        if not (self._is_private() and self.__sklearn_is_fitted__()):
            return state
        dropped = []
        for name in list(state):
            if name == "item_ids_":
                drop = not state.get("_item_ids_given", False)
            elif name in self._private_state:
                drop = True
            else:
                drop = name.endswith("_") and not name.startswith("_") and name not in self._released_state
            if drop:
                value = state.pop(name)
                if value is not None and not (isinstance(value, dict) and not value):
                    dropped.append(name)
        for name in self._none_when_dropped:
            state.setdefault(name, None)
        state["_id_lookup"] = {}
        for name, value in self._saved_params().items():  # e.g. DPALS: no noise seed in a private release
            if name in state and state[name] is not value:
                state[name] = value
                dropped.append(f"the {name} parameter")
        if dropped:
            warnings.warn(
                f"pickling a private {type(self).__name__} (epsilon={self.epsilon}): dropped {', '.join(dropped)} -- "
                "state computed from the exact training data that its privacy guarantee does not cover. The "
                "unpickled model holds the release only; recommend for a user from the user's own rows with "
                "recommend(userid, user_items, recalculate_user=True) or transform(user_items)",
                PrivateStateWarning,
                stacklevel=2,
            )
        return state

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    # ------------------------------------------------------------------ rating range
    @staticmethod
    def _check_rating_range(matrix, low: float, high: float, stacklevel: int = 3) -> int:
        """Warn (:class:`RatingRangeWarning`) when ratings fall outside ``[low, high]``; returns how many.

        For a model's public ``rating_range`` parameter (validate it with
        :func:`check_rating_range`). Data outside the declared scale usually means the wrong scale
        was declared (e.g. 0-10 data, 1-5 declared). The message gives the count only, no data
        values. (A private model may prefer an error: ``DPALS`` raises, since its noise is
        calibrated to the declared range.)
        """
        data = np.asarray(getattr(matrix, "matrix", matrix).data)
        n_out = int(np.count_nonzero((data < low) | (data > high)))
        if n_out:
            warnings.warn(
                f"{n_out} of {data.size} ratings ({n_out / data.size:.2%}) fall outside the declared rating range "
                f"[{low:g}, {high:g}]; check the model's rating_range",
                RatingRangeWarning,
                stacklevel=stacklevel,
            )
        return n_out

    # ------------------------------------------------------------------ id maps
    def _sampling_user_keys(self, n_users: int) -> np.ndarray:
        """Stable per-user sampling keys of the users being fitted
        (:func:`privrec.allocation.stable_user_keys` of their ids, one per row).

        The ids are those of the fit input (an ``Interactions`` or a DataFrame); a bare matrix has
        none, and its row index is then the id. Keyed on the id, a user's sample does not depend on
        the other users, so removing a user leaves every other user's sample unchanged even for
        someone who knows the sampling key (a fixed ``random_state``).
        """
        from ..allocation import stable_user_keys

        ids = self.__dict__.get("_fit_user_ids")
        if ids is None or len(ids) != n_users:
            ids = np.arange(n_users, dtype=np.int64)
        return stable_user_keys(ids)

    def _lookup(self, which: str):
        """``pandas.Index`` of ``user_ids_`` / ``item_ids_`` (cached), or ``None`` without ids."""
        import pandas as pd

        ids = getattr(self, f"{which}_ids_", None)
        if ids is None:
            return None
        cache = self.__dict__.setdefault("_id_lookup", {})
        hit = cache.get(which)
        if hit is None or hit[0] is not ids:
            hit = (ids, pd.Index(ids))
            cache[which] = hit
        return hit[1]

    def _codes(self, which: str, ids, n: int, strict: bool = True) -> np.ndarray:
        """Indices of original ids (``-1`` for unknown ones unless ``strict``: then ``ValueError``)."""
        arr = _id_array(ids)
        index = self._lookup(which)
        if index is None and which == "item" and self._item_ids_dropped():
            raise _dropped_item_ids()
        if index is None:  # fitted from a bare matrix: ids are indices
            codes = np.full(arr.shape, -1, dtype=np.int64)
            if arr.dtype.kind in "iu":
                ok = (arr >= 0) & (arr < n)
            else:
                ok = np.array(
                    [
                        isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)) and 0 <= int(x) < n
                        for x in arr.tolist()
                    ],
                    dtype=np.bool_,
                )
            codes[ok] = arr[ok].astype(np.int64)
        else:
            try:
                codes = index.get_indexer(arr).astype(np.int64)
            except TypeError:
                raise (
                    unhashable_id_error(arr, f"the {which} ids") or ValueError(f"{which} ids cannot be hashed")
                ) from None
        if strict and np.any(codes < 0):
            missing = list(arr[codes < 0][:5])
            raise ValueError(f"unknown {which} id(s) {missing}: not in the model's {which}_ids_")
        return codes

    def _item_ids_dropped(self) -> bool:
        """Whether the model had item ids that were not kept: its item axis came from the data (no
        declared catalogue) and a private save or pickle dropped those ids (issue 27)."""
        return (
            getattr(self, "_item_axis", None) == "data"
            and getattr(self, "item_ids_", None) is None
            and not self.__dict__.get("_item_ids_identity", False)  # fitted in memory on ids 0..n-1
        )

    def _item_id_values(self, idx: np.ndarray) -> np.ndarray:
        if self._item_ids_dropped():
            raise _dropped_item_ids()
        ids = getattr(self, "item_ids_", None)
        return idx if ids is None else np.asarray(ids)[idx]

    def _check_vocabulary_growth(self, which: str, n_new: int, n_old: int):
        if n_new > n_old and getattr(self, f"{which}_ids_", None) is not None:
            raise ValueError(
                f"this model maps {which} ids ({which}_ids_ has {n_old} entries); indices >= {n_old} "
                f"would be {which}s without an id: refit with the new {which}s instead"
            )

    # ------------------------------------------------------------------ projection
    def _grown_factors(self, which: str, F: np.ndarray, n_new: int, ids, factors) -> np.ndarray:
        """``F`` (the ``which`` side's factors) grown with zero rows to ``n_new`` rows, rows ``ids`` set to ``factors``."""
        n_old, d = F.shape
        self._check_vocabulary_growth(which, n_new, n_old)
        check_memory(n_new, d + 1, F.dtype.itemsize, f"{which} factors")
        out = np.zeros((n_new, d), dtype=F.dtype)
        out[:n_old] = F
        out[ids] = factors
        return out

    def recalculate_user(self, userid, user_items):
        """Billboard projection of users' own histories onto the item factors (no privacy cost).

        ``user_items`` rows correspond to ``userid`` (implicit 0.7 convention). Returns the user
        factors (d,) for a scalar id or (len(userid), d).
        """
        self._check_fitted()
        ids = np.atleast_1d(np.asarray(userid))
        rows = as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__)
        if rows.shape[0] != ids.size:
            raise ValueError(f"user_items must have one row per userid ({ids.size}), got {rows.shape[0]}")
        factors, _ = self._project_users(rows)
        return factors[0] if np.ndim(userid) == 0 else factors

    def transform(self, user_items):
        """Project every row of ``user_items`` (users x items) onto the item factors (Krichene et al., Remark D.1)."""
        self._check_fitted()
        factors, _ = self._project_users(as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__))
        return factors

    def fit_transform(self, X, y=None, **fit_params):
        """``fit(X)`` then ``transform`` of the training matrix: the users' embeddings (rows in the
        order of the fitted users, i.e. of ``user_ids_`` when ``X`` carried ids)."""
        items = fit_params.get("items")
        R = fit_input(X if items is None else with_item_catalogue(X, items))[0]
        return self.fit(X, **fit_params).transform(R)

    def partial_fit_users(self, userids, user_items):
        """Update (or add) users from their own histories: billboard projection, no privacy cost.

        implicit 0.7 convention: ``user_items`` has one row per id in ``userids``; ids beyond the
        fitted users extend ``user_factors_`` / ``user_bias_`` (users in between get zero factors
        and bias: the prediction of a user without data). A loaded private model (no user factors)
        starts from an empty user table.
        """
        self._check_fitted()
        n_items = self.n_items_
        ids = np.atleast_1d(np.asarray(userids))
        ids, _ = check_ids(ids, np.iinfo(np.int64).max, "userids")
        rows = as_user_items(user_items, n_items=n_items)
        if rows.shape[0] != ids.size:
            raise ValueError(
                f"user_items must contain 1 row for every user in userids ({ids.size}), got {rows.shape[0]}"
            )
        if np.unique(ids).size != ids.size:
            raise ValueError("userids holds repeated ids")
        factors, bias = self._project_users(rows)
        d = self.item_factors_.shape[1]
        uf = getattr(self, "user_factors_", None)
        uf = np.zeros((0, d), dtype=self.item_factors_.dtype) if uf is None else np.asarray(uf)
        n_old = uf.shape[0]
        n_new = max(n_old, int(ids.max()) + 1) if ids.size else n_old
        new_uf = self._grown_factors("user", uf, n_new, ids, factors)
        ub = self._user_bias()
        if bias is not None or ub is not None:
            self.user_bias_ = _grown_bias(ub, n_new, ids, bias, uf.dtype)
        self.user_factors_ = new_uf
        return self

    # ------------------------------------------------------------------ items from other users' data
    def recalculate_item(self, itemid, item_users):
        """Re-solve items from their ratings (``item_users``: items x users, one row per ``itemid``,
        or the full items x users matrix) with the fitted user side held fixed.

        Non-private models only: for a private model this would be a new, unaccounted release of
        the raters' data (:class:`PrivateReleaseError`).
        """
        self._check_fitted()
        if self._is_private():
            raise self._private_refusal("recalculate_item")
        rows, _ = self._item_rows(itemid, item_users)
        factors, _ = self._solve_items(rows)
        return factors[0] if np.ndim(itemid) == 0 else factors

    def _item_rows(self, itemid, item_users):
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(f"this {type(self).__name__} holds no user factors, so items cannot be re-solved")
        if item_users is None:
            raise ValueError("item_users (items x users ratings) is required to recalculate items")
        ids = np.atleast_1d(np.asarray(itemid))
        rows = _item_users(item_users, uf.shape[0])
        if rows.shape[0] != ids.size:
            if rows.shape[0] == self.n_items_:
                checked, _ = check_ids(ids, rows.shape[0], "itemid")
                rows = rows[checked]
            else:
                raise ValueError(
                    f"item_users must have one row per itemid ({ids.size}) or one per fitted item, "
                    f"got {rows.shape[0]} rows"
                )
        return rows, ids

    def partial_fit_items(self, itemids, item_users):
        """Update (or add) items from their ratings (``item_users``: one row per id in ``itemids``).

        Non-private models only (exact solve with the user side fixed); a private model raises
        :class:`PrivateReleaseError` (new items need a new, accounted release: refit).
        """
        self._check_fitted()
        if self._is_private():
            raise self._private_refusal("partial_fit_items")
        ids = np.atleast_1d(np.asarray(itemids))
        ids, _ = check_ids(ids, np.iinfo(np.int64).max, "itemids")
        if np.unique(ids).size != ids.size:
            raise ValueError("itemids holds repeated ids")
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(f"this {type(self).__name__} holds no user factors, so items cannot be solved")
        rows = _item_users(item_users, uf.shape[0])
        if rows.shape[0] != ids.size:
            raise ValueError(
                f"item_users must contain 1 row for every item in itemids ({ids.size}), got {rows.shape[0]}"
            )
        factors, bias = self._solve_items(rows)
        V = np.asarray(self.item_factors_)
        new_V = self._grown_factors("item", V, max(V.shape[0], int(ids.max()) + 1), ids, factors)
        ib = self._item_bias()
        if ib is not None:
            self.item_bias_ = _grown_bias(ib, new_V.shape[0], ids, bias, ib.dtype)
        self.item_factors_ = new_V
        return self

    # ------------------------------------------------------------------ scoring
    def _query_rows(self, ids: np.ndarray, user_items, required: bool):
        """The rated-items rows of the queried users: ``user_items`` has one row per id, or is the
        full users x items matrix (then rows ``ids`` are taken); ``None`` allowed unless required."""
        if user_items is None:
            if required:
                raise ValueError(
                    "user_items (the users' rated items, one row per userid) is required with "
                    "filter_already_liked_items=True, recalculate_user=True, or for a model without "
                    "user factors"
                )
            return None
        mat = as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__)
        if mat.shape[0] == ids.size:
            return mat
        uf = getattr(self, "user_factors_", None)
        if uf is None or mat.shape[0] == uf.shape[0]:
            checked, _ = check_ids(ids, mat.shape[0], "userid")
            return mat[checked]
        raise ValueError(
            f"user_items must have one row per userid ({ids.size}) or one row per fitted user, got {mat.shape[0]} rows"
        )

    def _user_vectors(self, ids, rows, recalculate):
        uf = getattr(self, "user_factors_", None)
        if recalculate or uf is None:
            # a loaded private model keeps only the item side: project the given rows (free: Krichene et al.,
            # Remark D.1)
            if rows is None:
                raise ValueError(
                    f"this {type(self).__name__} holds no user factors (a loaded or released model keeps only item "
                    "factors): pass user_items, the users' rated items, to project them"
                )
            return self._project_users(rows)
        ids, _ = check_ids(ids, uf.shape[0], "userid")
        ub = self._user_bias()
        return uf[ids], (None if ub is None else ub[ids])

    def recommend(
        self,
        userid,
        user_items,
        N: int = 10,
        filter_already_liked_items: bool = True,
        filter_items=None,
        recalculate_user: bool = False,
        items=None,
    ):
        """Top-N items for one user (1-D outputs) or an array of users (2-D outputs): ``(ids, scores)``.

        ``user_items`` holds the users' rated items: either one row per ``userid`` (implicit 0.7
        convention) or the full training matrix (then rows ``userid`` are used); it may be ``None``
        when it is not needed (no filtering of rated items, stored user factors). Rated items are
        excluded when ``filter_already_liked_items``; ``filter_items`` are excluded for everybody;
        ``items`` restricts the candidates. Scores are predicted ratings. A model without user
        factors (a loaded private model) projects the ``user_items`` rows automatically, as
        ``recalculate_user=True`` does. When fewer than N items are eligible the output is
        shorter: columns that no user can fill are dropped (a row of a batched call may then still
        end in id -1 / score -inf padding, never an excluded item).
        """
        self._check_fitted()
        N = check_int(N, "N", minimum=1)
        scalar = np.ndim(userid) == 0
        ids = np.atleast_1d(np.asarray(userid))
        needs_rows = filter_already_liked_items or recalculate_user or getattr(self, "user_factors_", None) is None
        rows = self._query_rows(ids, user_items, needs_rows)
        uvec, ubias = self._user_vectors(ids, rows, recalculate_user)
        return self._rank(uvec, ubias, rows if filter_already_liked_items else None, N, filter_items, items, scalar)

    def _rank(self, uvec, ubias, liked_rows, N, filter_items, items, scalar):
        n_items = self.n_items_
        scores = self._score_all(uvec, ubias)
        candidates = None
        if items is not None:
            candidates = _distinct(check_ids(items, n_items, "items")[0])
        if filter_items is not None:
            fi, _ = check_ids(filter_items, n_items, "filter_items")
            scores[:, fi] = -np.inf
        if liked_rows is not None:
            r_idx = np.repeat(np.arange(liked_rows.shape[0]), np.diff(liked_rows.indptr))
            scores[r_idx, liked_rows.indices] = -np.inf
        if candidates is not None:
            sub = scores[:, candidates]
            top, vals = _topk(sub, N)
            top = candidates[top]
        else:
            top, vals = _topk(scores, N)
        # drop columns that are -inf for every user (fewer eligible items than N)
        finite_cols = np.isfinite(vals).any(axis=0)
        keep = int(finite_cols.sum()) if finite_cols.size else 0
        top, vals = top[:, :keep], vals[:, :keep]
        top = _as_ids(np.where(np.isfinite(vals), top, -1), n_items)
        if scalar:
            row_ok = np.isfinite(vals[0])
            return top[0][row_ok], vals[0][row_ok]
        return top, vals

    def rank_items(self, userid, user_items, selected_items, recalculate_user: bool = False):
        """Rank ``selected_items`` for the user(s): ``(ids, scores)`` sorted by decreasing score.

        As implicit 0.7 (``recommend`` with ``items=selected_items`` and no filtering of rated
        items), except that every selected item is returned (implicit caps at N=10), once: a
        repeated item is ranked once.
        """
        sel = np.atleast_1d(np.asarray(selected_items))
        if sel.size == 0:
            raise ValueError("selected_items is empty")
        try:
            n_distinct = int(np.unique(sel).size) if sel.ndim == 1 else int(sel.size)
        except TypeError:  # mixed objects: check_ids refuses them in recommend
            n_distinct = int(sel.size)
        return self.recommend(
            userid,
            user_items,
            N=n_distinct,
            filter_already_liked_items=False,
            recalculate_user=recalculate_user,
            items=sel,
        )

    def _score_all(self, uvec, ubias):
        scores = uvec @ self.item_factors_.T
        ib = self._item_bias()
        if ib is not None:
            scores += ib[None, :]
        if ubias is not None:
            scores += ubias[:, None]
        scores += self._global()
        return scores.astype(np.float32, copy=False)

    def _require_user_factors(self) -> np.ndarray:
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(
                f"this {type(self).__name__} holds no user factors (a loaded private model keeps only the item side): "
                "predictions need the fitted users; project users from their own histories with transform() or "
                "partial_fit_users(), or evaluate with privrec.evaluation.evaluate_ratings(model, train, test)"
            )
        return uf

    def _predict_indices(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """Predictions for index pairs; ``-1`` marks an unknown user / item (its terms are zero)."""
        uf = self._require_user_factors()
        V = self.item_factors_
        ku, ki = u >= 0, i >= 0
        both = ku & ki
        pred = np.full(u.shape, self._global(), dtype=np.float64)
        pred[both] += np.einsum("ij,ij->i", uf[u[both]], V[i[both]])
        ib = self._item_bias()
        if ib is not None:
            pred[ki] += ib[i[ki]]
        ub = self._user_bias()
        if ub is not None:
            pred[ku] += ub[u[ku]]
        return pred.astype(np.float32)

    def _entries(self, X):
        """``(user index, item index, ratings or None)`` of the entries of ``X`` (unknown ids: -1).

        ``X``: a long-format DataFrame (``user`` / ``item`` [/ ``rating``] columns, ids mapped
        through ``user_ids_`` / ``item_ids_``; ids never seen in training get index -1), an
        ``Interactions`` (same, through its own id maps), or a sparse users x items matrix indexed
        like the training matrix (one row per fitted user).
        """
        import pandas as pd

        uf = getattr(self, "user_factors_", None)
        n_users = None if uf is None else uf.shape[0]
        if isinstance(X, pd.DataFrame):
            from ..data.frames import frame_triples

            users, items, vals = frame_triples(X, rating_required=False)
        elif not sp.issparse(X) and hasattr(X, "matrix") and hasattr(X, "user_ids"):
            m = as_user_items(X, name="X")
            coo = m.tocoo()
            users, items, vals = np.asarray(X.user_ids)[coo.row], np.asarray(X.item_ids)[coo.col], coo.data
        else:
            m = as_user_items(X, name="X", n_items=self.n_items_, model=type(self).__name__)
            if n_users is not None and m.shape[0] != n_users:
                raise ValueError(
                    f"X has {m.shape[0]} rows but the model has {n_users} fitted users: a matrix X is indexed like the "
                    "training matrix (its entries are held-out ratings of the training users). To cross-validate, "
                    "split ratings, not users: pass a long-format DataFrame with privrec.data.RatingSplitCV"
                )
            coo = m.tocoo()
            return coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data
        u = self._codes("user", users, n_users if n_users is not None else 0, strict=False)
        i = self._codes("item", items, self.n_items_, strict=False)
        return u, i, (None if vals is None else np.asarray(vals, dtype=np.float32))

    def predict(self, users, items=None):
        """Predicted ratings.

        ``predict(users, items)``: aligned arrays of (user, item) index pairs. ``predict(X)``: one
        prediction per entry of ``X`` (a sparse matrix indexed like the training matrix, in CSR
        order; or a long-format DataFrame / ``Interactions`` with ids, in row order; ids unseen in
        training contribute zero factors and bias).
        """
        self._check_fitted()
        if items is None:
            u, i, _ = self._entries(users)
            return self._predict_indices(u, i)
        uf = self._require_user_factors()
        u, _ = check_ids(users, uf.shape[0], "users")
        i, _ = check_ids(items, self.n_items_, "items")
        if u.shape != i.shape:
            raise ValueError(f"users and items must have the same length, got {u.size} and {i.size}")
        return self._predict_indices(u, i)

    def score(self, X, y=None) -> float:
        """Negative RMSE of the predicted ratings on the ratings held in ``X`` (higher is better).

        The rule: each rating of ``X`` is predicted from the *fitted* factors of its user and item
        (``user_factors_``, never a projection from ``X`` itself, which would use the held-out
        ratings to predict them). So ``X`` holds held-out ratings of the training users: a sparse
        matrix indexed like the training matrix, or a long-format DataFrame / ``Interactions`` with
        ids (ratings of users or items unseen in training are predicted without that side's
        factors and bias). For ``GridSearchCV`` split ratings, not users:
        ``GridSearchCV(model, grid, cv=privrec.data.RatingSplitCV(5)).fit(ratings_df)``. ``y`` is
        ignored. Defined for explicit ratings; an implicit-feedback model raises ``ValueError``
        (its scores are rankings, evaluate them with ``privrec.evaluation``).
        """
        self._check_fitted()
        if self._is_implicit_feedback():
            raise ValueError(
                f"score(X) is the negative RMSE of predicted ratings; this {type(self).__name__} models "
                "implicit feedback (scores rank items, they are not ratings): evaluate it with "
                "privrec.evaluation.evaluate_topk or ranking_metrics"
            )
        u, i, truth = self._entries(X)
        if truth is None:
            from ..data.frames import RATING_COL

            raise ValueError(f"X holds no ratings (a DataFrame needs a {RATING_COL!r} column)")
        if truth.size == 0:
            raise ValueError("X holds no ratings to score")
        bad = ~np.isfinite(truth)
        if bad.any():
            raise ValueError(
                f"X holds {int(np.count_nonzero(bad))} NaN or infinite rating(s) (e.g. entry {int(np.flatnonzero(bad)[0])}): "
                "score() needs every held-out rating; drop the missing ones first"
            )
        err = self._predict_indices(u, i).astype(np.float64) - truth
        return -float(np.sqrt(np.mean(err * err)))

    # ------------------------------------------------------------------ similarity
    def _similar(self, F, query, N, filter_ids, candidates, n, what):
        scores = _normalised(query) @ _normalised(F).T
        if filter_ids is not None:
            fi, _ = check_ids(filter_ids, n, f"filter_{what}s")
            scores[:, fi] = -np.inf
        if candidates is not None:
            cand = _distinct(check_ids(candidates, n, f"{what}s")[0])
            top, vals = _topk(scores[:, cand], N)
            return _as_ids(cand[top], n), vals
        top, vals = _topk(scores, N)
        return _as_ids(top, n), vals

    def similar_items(
        self, itemid, N: int = 10, recalculate_item: bool = False, item_users=None, filter_items=None, items=None
    ):
        """Top-N items by cosine similarity of item factors: ``(ids, scores)`` (batched like recommend).

        Items with an all-zero factor (never seen in training) have similarity 0 to everything.
        ``recalculate_item=True`` first re-solves the query items from ``item_users`` (see
        :meth:`recalculate_item`: non-private models only).
        """
        self._check_fitted()
        N = check_int(N, "N", minimum=1)
        scalar = np.ndim(itemid) == 0
        V = _embedding_for_similarity(self.item_factors_, "item")
        if recalculate_item:
            query = np.atleast_2d(self.recalculate_item(itemid, item_users))
        else:
            ids, _ = check_ids(itemid, self.n_items_, "itemid")
            query = V[ids]
        top, vals = self._similar(V, query, N, filter_items, items, self.n_items_, "item")
        if scalar:
            ok = np.isfinite(vals[0])
            return top[0][ok], vals[0][ok]
        return top, vals

    def similar_users(self, userid, N: int = 10, filter_users=None, users=None):
        """Top-N users by cosine similarity of user factors: ``(ids, scores)`` (batched like recommend).

        Needs ``user_factors_`` (a loaded private model has none: use ``partial_fit_users`` first) with
        at least one factor (a ``factors=0`` model is refused, as by :meth:`similar_items`).
        """
        self._check_fitted()
        N = check_int(N, "N", minimum=1)
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(
                f"this {type(self).__name__} holds no user factors (a loaded private model keeps only the "
                "item side); add users with partial_fit_users(userids, user_items) first"
            )
        uf = _embedding_for_similarity(uf, "user")
        n = uf.shape[0]
        scalar = np.ndim(userid) == 0
        ids, _ = check_ids(userid, n, "userid")
        top, vals = self._similar(uf, uf[ids], N, filter_users, users, n, "user")
        if scalar:
            ok = np.isfinite(vals[0])
            return top[0][ok], vals[0][ok]
        return top, vals

    # ------------------------------------------------------------------ by original id
    def _id_rows(self, req: np.ndarray, user_items):
        """Rows (one per requested user) of ``user_items`` given by id: a long DataFrame or an
        ``Interactions``; items unknown to the model are dropped (with a warning)."""
        import pandas as pd

        if isinstance(user_items, pd.DataFrame):
            from ..data.frames import frame_triples

            users, items, vals = frame_triples(user_items, rating_required=False)
        else:
            m = as_user_items(user_items)
            coo = m.tocoo()
            users, items, vals = (
                np.asarray(user_items.user_ids)[coo.row],
                np.asarray(user_items.item_ids)[coo.col],
                coo.data,
            )
        if vals is None:
            vals = np.ones(len(users), dtype=np.float32)
        req_codes, req_uniques = pd.factorize(req)
        pos = pd.Index(req_uniques).get_indexer(users)
        keep = pos >= 0
        item_idx = self._codes("item", np.asarray(items)[keep], self.n_items_, strict=False)
        unknown = int(np.count_nonzero(item_idx < 0))
        if unknown:
            warnings.warn(
                f"{unknown} rated item(s) of the queried users are not in the model's items and are ignored",
                UserWarning,
                stacklevel=3,
            )
        ok = item_idx >= 0
        r, c, v = pos[keep][ok], item_idx[ok], np.asarray(vals, dtype=np.float32)[keep][ok]
        # duplicate (user, item) rows are rejected by the COO check, not summed
        mat = as_user_items(sp.coo_matrix((v, (r, c)), shape=(len(req_uniques), self.n_items_)), name="user_items")
        return mat[req_codes]

    def recommend_ids(
        self,
        user_id,
        user_items=None,
        N: int = 10,
        filter_already_liked_items: bool = True,
        filter_items=None,
        items=None,
        recalculate_user: bool = False,
    ):
        """Top-N items for users given by their original ids: ``(item ids, scores)``.

        For a model fitted from a DataFrame / ``Interactions`` with ids (``user_ids_`` /
        ``item_ids_``); a model fitted from a bare matrix uses indices as ids. ``user_items``: the
        users' rated items, as a long-format DataFrame (``user`` / ``item`` [/ ``rating``]
        columns, e.g. the training table itself), an ``Interactions``, or a sparse matrix with one
        row per requested user (indexed like the model's items); ``None`` when not needed (known
        users, ``filter_already_liked_items=False``). Users absent from ``user_ids_`` (new users),
        ``recalculate_user=True`` and models without user factors are projected from their rows
        (billboard, free). ``filter_items`` / ``items`` are item ids. Batched calls return 2-D
        arrays; if a row has fewer than N eligible items its tail holds id ``None`` (score -inf).
        """
        self._check_fitted()
        import pandas as pd

        N = check_int(N, "N", minimum=1)
        scalar = not isinstance(user_id, (list, tuple)) and np.ndim(user_id) == 0
        req = _id_array([user_id] if scalar else user_id)
        uf = getattr(self, "user_factors_", None)
        n_users = 0 if uf is None else uf.shape[0]
        codes = self._codes("user", req, n_users, strict=False) if uf is not None else np.full(req.shape, -1)
        rows = None
        if user_items is not None:
            by_id = isinstance(user_items, pd.DataFrame) or (
                not sp.issparse(user_items) and hasattr(user_items, "user_ids")
            )
            if by_id:
                rows = self._id_rows(req, user_items)
            else:
                rows = as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__)
                if rows.shape[0] != req.size:
                    raise ValueError(
                        f"a sparse user_items must have one row per requested user ({req.size}), got {rows.shape[0]}"
                    )
        projected = np.ones(req.size, dtype=bool) if (recalculate_user or uf is None) else codes < 0
        if projected.any():
            no_data = projected if rows is None else projected & (np.diff(rows.indptr) == 0)
            if no_data.any():
                raise ValueError(
                    f"user id(s) {list(req[no_data][:5])} have no fitted factors (unknown users, "
                    f"recalculate_user=True, or a model without user factors) and no ratings in "
                    f"user_items to project them from"
                )
        if filter_already_liked_items and rows is None:
            raise ValueError(
                "filter_already_liked_items=True needs the users' rated items: pass user_items (e.g. the "
                "training DataFrame), or filter_already_liked_items=False"
            )
        if recalculate_user or uf is None:
            uvec, ubias = self._project_users(rows)
        else:
            d = self.item_factors_.shape[1]
            uvec = np.zeros((req.size, d), dtype=self.item_factors_.dtype)
            ub_all = self._user_bias()
            ubias = None if ub_all is None else np.zeros(req.size, dtype=ub_all.dtype)
            known = codes >= 0
            uvec[known] = uf[codes[known]]
            if ubias is not None:
                ubias[known] = ub_all[codes[known]]
            if not known.all():
                assert rows is not None  # unknown users without user_items rows raised above (no_data)
                pu, pb = self._project_users(rows[np.flatnonzero(~known)])
                uvec[~known] = pu
                if pb is not None:
                    if ubias is None:
                        ubias = np.zeros(req.size, dtype=pb.dtype)
                    ubias[~known] = pb
        fi = None if filter_items is None else self._codes("item", filter_items, self.n_items_)
        cand = None if items is None else self._codes("item", items, self.n_items_)
        top, vals = self._rank(uvec, ubias, rows if filter_already_liked_items else None, N, fi, cand, False)
        out = self._item_id_values(np.where(top >= 0, top, 0))
        if np.any(top < 0):
            out = out.astype(object)
            out[top < 0] = None
        if scalar:
            ok = np.isfinite(vals[0])
            return out[0][ok], vals[0][ok]
        return out, vals

    def similar_items_ids(self, item_id, N: int = 10, filter_items=None, items=None):
        """``similar_items`` by original item ids: ``(item ids, scores)`` (``filter_items`` / ``items`` are ids)."""
        self._check_fitted()
        scalar = not isinstance(item_id, (list, tuple)) and np.ndim(item_id) == 0
        q = self._codes("item", [item_id] if scalar else item_id, self.n_items_)
        fi = None if filter_items is None else self._codes("item", filter_items, self.n_items_)
        cand = None if items is None else self._codes("item", items, self.n_items_)
        top, vals = self.similar_items(q[0] if scalar else q, N=N, filter_items=fi, items=cand)
        return self._item_id_values(top), vals

    # ------------------------------------------------------------------ persistence
    # Model file schema (FORMAT_VERSION 2; see docs/data-and-model-files.md). An .npz (zip) holding
    # exactly: ``__meta__`` (0-d unicode array: the JSON metadata), optionally ``__sha256__`` (0-d
    # unicode array: content hash of the metadata text and every array), and one member per saved
    # array. On load only the arrays listed in the class's ``_saved_arrays`` (names ending in ``_``)
    # are accepted, each with the dtype and number of dimensions of ``_array_schema``.
    _array_schema: dict[str, tuple[int, tuple[str, ...]]] = {
        "item_factors_": (2, _FLOAT_DTYPES),
        "user_factors_": (2, _FLOAT_DTYPES),
        "item_bias_": (1, _FLOAT_DTYPES),
        "user_bias_": (1, _FLOAT_DTYPES),
        "global_mean_": (0, _FLOAT_DTYPES),
        "user_reg_norm_": (0, _FLOAT_DTYPES),
        "item_reg_norm_": (0, _FLOAT_DTYPES),
    }

    @classmethod
    def _array_spec(cls, name) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """``(allowed ndims, allowed dtype names)`` of saved array ``name``; ``ValueError`` if ``name``
        is not one of this class's saved arrays."""
        if not isinstance(name, str) or name not in cls._saved_arrays or not name.endswith("_") or name.startswith("_"):
            raise ValueError(
                f"array {str(name)[:60]!r} is not a saved array of {cls.__name__} "
                f"(expected some of {list(cls._saved_arrays)})"
            )
        spec = cls._array_schema.get(name)
        if spec is None:  # a subclass added an array without a schema entry: float, at most 2-D
            return (0, 1, 2), _FLOAT_DTYPES
        return (spec[0],), tuple(spec[1])

    def _metadata(self) -> dict[str, Any]:
        return {}

    def _saved_params(self) -> dict[str, Any]:
        """Constructor parameters written by :meth:`save` (all of them by default)."""
        return self.get_params(deep=False)

    def _restore_metadata(self, meta: dict[str, Any]) -> None:
        pass

    def save(self, path) -> None:
        """Write the fitted model to ``path`` (npz arrays + JSON metadata: class, params, privacy report).

        ``path``: a file name (written exactly there; unlike implicit no ``.npz`` is appended, but
        :meth:`load` finds ``name.npz`` when given ``name``) or a binary file object open for
        writing (implicit 0.7's ``save(file)``). A write to a path is atomic: an interrupted save
        (an exception, SIGINT, or SIGTERM -- handled like SIGINT while the file is written, unless
        the program set its own SIGTERM handler) never leaves a truncated file at ``path``, and
        its temporary file, ``.privrec-<name>.h<host>p<pid>.<random>.tmp``, is removed; one left by
        a killed process is removed by the next save into the same folder as soon as that
        process is gone (or once it is a day old). A symbolic link at ``path`` is written through:
        the file it points to is replaced atomically and the link stays. A ``path`` that is not a
        regular file -- a folder, ``/dev/null``, ``/dev/stdout``, a FIFO -- is refused with a
        ``ValueError`` before anything is written (:func:`privrec._io.check_write_target`). The
        file carries a SHA-256 of its content, checked on load.

        Id maps (``user_ids_`` / ``item_ids_`` of a model fitted with ids; str or int ids) are saved
        in the metadata: user ids only with the user factors, and a *private* model saves item ids
        only when they came from a given (public) vocabulary -- ids derived from the data tell
        which items have ratings, which the privacy guarantee does not cover (a
        ``UserWarning`` says so).
        """
        self._check_fitted()
        self._check_params_unchanged()
        arrays = {}
        for name in self._saved_arrays:
            val = getattr(self, name, None)
            if val is not None:
                arr = _c_order(np.asarray(val))
                ndims, dtypes = self._array_spec(name)
                if arr.dtype.name not in dtypes or arr.ndim not in ndims:
                    raise ValueError(
                        f"cannot save {type(self).__name__}: {name} has dtype {arr.dtype} and "
                        f"{arr.ndim} dimension(s), the model file schema wants {'/'.join(dtypes)} "
                        f"with {'/'.join(map(str, ndims))}"
                    )
                arrays[name] = arr
        params = {k: _jsonable(v) for k, v in self._saved_params().items()}
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "class": type(self).__name__,
            "params": params,
            "arrays": {k: {"shape": list(v.shape), "dtype": v.dtype.str} for k, v in arrays.items()},
            **self._metadata(),
            **self._id_metadata(),
        }
        meta_text = json.dumps(meta)
        digest = _content_hash(meta_text, arrays)
        # typed Any for np.savez, whose stub matches a **dict[str, ndarray] against allow_pickle: bool
        members: dict[str, Any] = arrays
        if hasattr(path, "write"):  # an open binary file (implicit's save(file))
            np.savez(path, __meta__=np.array(meta_text), __sha256__=np.array(digest), **members)
            return
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, __meta__=np.array(meta_text), __sha256__=np.array(digest), **members)

    def _check_params_unchanged(self) -> None:
        """``ValueError`` when a parameter that shapes the fitted arrays or the privacy report was
        changed (``set_params``) after the fit: the file would pair the old arrays with the new
        values (e.g. ``factors=8`` with 4-column factors, which no load accepts)."""
        fitted = self.__dict__.get("_fitted_params")
        if fitted is None:  # fitted elsewhere (privrec.distributed) or unpickled from an older privrec
            return
        now = _param_fingerprint(self)
        changed = [k for k in now if k not in _RUNTIME_PARAMS and now[k] != fitted.get(k, now[k])]
        if changed:
            detail = ", ".join(f"{k}: {fitted[k]} -> {now[k]}" for k in changed[:5])
            raise ValueError(
                f"cannot save this {type(self).__name__}: parameter(s) changed by set_params since the fit ({detail}); "
                "the fitted arrays belong to the old values. Refit, or set them back before save()"
            )

    def _id_metadata(self) -> dict[str, Any]:
        out = {}
        uids = getattr(self, "user_ids_", None)
        if (
            uids is not None
            and "user_factors_" in self._saved_arrays
            and getattr(self, "user_factors_", None) is not None
            and len(uids) == np.asarray(self.user_factors_).shape[0]
        ):
            entry = _ids_to_json(uids, "user")
            if entry is not None:
                out["user_ids"] = entry
        iids = getattr(self, "item_ids_", None)
        if iids is not None and len(iids) == self.n_items_:
            if self._is_private() and not getattr(self, "_item_ids_given", False):
                warnings.warn(
                    f"item ids not saved with this private {type(self).__name__}: they were derived from the training "
                    "data (the items that have ratings), and so was the item axis itself -- the number and order of "
                    "the saved item rows -- which the privacy guarantee does not cover (the file records item_axis "
                    "public: false). Fit with a declared public catalogue (model.fit(X, items=catalogue) or "
                    "privrec.data.from_pandas(..., item_ids=catalogue)) to release them",
                    ItemCatalogueWarning,
                    stacklevel=3,
                )
            else:
                entry = _ids_to_json(iids, "item")
                if entry is not None:
                    out["item_ids"] = entry
        axis = getattr(self, "_item_axis", None)
        if axis in ITEM_AXIS_SOURCES:  # where the item axis came from (None: a model loaded from an older file)
            out["item_axis"] = {"source": axis, "public": axis == "catalogue"}
        return out

    def _restore_ids(self, meta: dict[str, Any]) -> None:
        n_items = int(self.item_factors_.shape[0])
        uf = getattr(self, "user_factors_", None)
        for which, n in (("item", n_items), ("user", None if uf is None else int(uf.shape[0]))):
            entry = meta.get(f"{which}_ids")
            if entry is None:
                continue
            if n is None:
                raise _BadModelFile(f"{which} ids are stored without {which} factors")
            setattr(self, f"{which}_ids_", _ids_from_json(entry, which, n))
        axis = meta.get("item_axis")
        if axis is not None and not (
            isinstance(axis, dict)
            and set(axis) == {"source", "public"}
            and axis["source"] in ITEM_AXIS_SOURCES
            and axis["public"] is (axis["source"] == "catalogue")
        ):
            raise _BadModelFile(
                "metadata item_axis must be {'source': 'catalogue' | 'data' | 'matrix', 'public': source == 'catalogue'}"
            )
        self._item_axis = None if axis is None else axis["source"]
        self._item_ids_given = getattr(self, "item_ids_", None) is not None and self._item_axis in (None, "catalogue")
        self._id_lookup: dict[str, tuple[Any, Any]] = {}  # which -> (ids, their pandas.Index), see _lookup

    @classmethod
    def load(cls, fileobj_or_path):
        """Load a model written by :meth:`save`; a one-line ``ValueError`` for anything else.

        ``fileobj_or_path``: a file name (if it does not exist but ``name + ".npz"`` does, that
        file is read, as implicit 0.7 does) or a binary file object open for reading.
        Checked (see docs/data-and-model-files.md): the zip members (only ``__meta__``,
        ``__sha256__`` and the arrays this class saves; stored or deflated), their declared sizes
        before anything is read (each bounded by the file size -- deflate expands at most 1032:1
        -- and all arrays together by :func:`privrec._validation.memory_limit`, so a small forged
        file cannot make ``load`` allocate what it declares), each array's dtype, dimensions, shape and
        finiteness, the parameters (a dict of known names with plain JSON values), the content
        hash, and a stored privacy report: its epsilons are recomputed from its events with
        ``dp_accounting`` and must match. Version-1 files (no dtypes, no hash) are still read.
        """
        if hasattr(fileobj_or_path, "read"):
            path = getattr(fileobj_or_path, "name", None)
            path = path if isinstance(path, (str, Path)) else "<file object>"
            source = fileobj_or_path
        else:
            path = Path(fileobj_or_path)
            if not path.exists() and path.suffix != ".npz" and path.with_name(path.name + ".npz").exists():
                path = path.with_name(path.name + ".npz")
            source = path
        try:
            return cls._load_checked(source, path)
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            raise
        except _BadModelFile as exc:
            raise ValueError(f"{path}: {_one_line(exc)}") from None
        except ValueError as exc:
            msg = _one_line(exc)
            raise ValueError(msg if msg.startswith(f"{path}:") else f"{path}: {msg}") from None
        except (
            zipfile.BadZipFile,
            zlib.error,
            EOFError,
            OSError,
            KeyError,
            TypeError,
            AttributeError,
            IndexError,
            RecursionError,
            OverflowError,
            NotImplementedError,
            RuntimeError,
            MemoryError,
        ) as exc:
            raise ValueError(
                f"{path}: not a readable privrec model file ({type(exc).__name__}: {_one_line(exc)[:300]})"
            ) from None

    @classmethod
    def _load_checked(cls, source, path):
        if isinstance(source, Path):
            with open(source, "rb") as fh:
                head = fh.read(8)
                file_size = os.fstat(fh.fileno()).st_size
        else:  # a file object: zipfile needs to seek, so read a non-seekable stream into memory
            if not (hasattr(source, "seekable") and source.seekable()):
                source = io.BytesIO(source.read())
            start = source.tell()
            head = source.read(8)
            file_size = source.seek(0, io.SEEK_END) - start
            source.seek(start)
        if not isinstance(head, bytes):
            raise _BadModelFile("the file object must be opened in binary mode ('rb')")
        if head.startswith(b"\x93NUMPY"):
            raise _BadModelFile("is a single .npy array, not a privrec model file (an .npz written by save())")
        if not head.startswith(b"PK"):
            raise _BadModelFile("not a privrec model file (not an .npz archive)")
        with zipfile.ZipFile(source) as zf:
            members = _npz_members(zf, file_size)
            if "__meta__" not in members:
                raise _BadModelFile("not a privrec model file (no metadata record)")
            meta_text = _read_text_member(zf, members["__meta__"], "__meta__", _MAX_META_BYTES)
            meta = _parse_meta(meta_text)
            version = meta.get("version")
            if version not in _READABLE_VERSIONS:
                raise _BadModelFile(
                    f"unsupported privrec model format version {version!r} (this privrec reads "
                    f"{', '.join(map(str, _READABLE_VERSIONS))}); save the model again with a "
                    f"matching privrec version"
                )
            from . import MODEL_CLASSES

            name = meta.get("class")
            target = MODEL_CLASSES.get(name) if isinstance(name, str) else None
            if target is None:
                raise _BadModelFile(f"unknown model class {str(name)[:60]!r}")
            if cls is not FactorizationModel and not issubclass(target, cls):
                raise _BadModelFile(f"holds a {name}, not a {cls.__name__}")
            declared = meta.get("arrays")
            if not isinstance(declared, dict):
                raise _BadModelFile("metadata 'arrays' must be an object of array name -> shape")
            specs = {}
            for k, entry in declared.items():
                ndims, dtypes = target._array_spec(k)
                if version == 1:
                    shape, dtype = entry, None
                else:
                    if not isinstance(entry, dict) or set(entry) != {"shape", "dtype"}:
                        raise _BadModelFile(f"metadata entry of array {k} must be {{'shape': [...], 'dtype': ...}}")
                    shape, dtype = entry["shape"], entry["dtype"]
                    if not isinstance(dtype, str) or dtype.lstrip("<>|=") not in ("f4", "f8"):
                        raise _BadModelFile(f"array {k}: metadata dtype {str(dtype)[:20]!r} is not float32/float64")
                if not isinstance(shape, list) or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
                ):
                    raise _BadModelFile(f"array {k}: metadata shape must be a list of non-negative integers")
                specs[k] = (tuple(shape), dtype, ndims, dtypes)
            allowed = {"__meta__"} | ({"__sha256__"} if version >= 2 else set())
            extra = sorted(set(members) - allowed - set(specs))
            if extra:
                raise _BadModelFile(
                    f"unexpected member(s) {[e[:40] for e in extra[:5]]} (not declared in the metadata)"
                )
            missing = sorted(set(specs) - set(members))
            if missing:
                raise _BadModelFile(f"arrays {missing} are declared in the metadata but missing from the file")
            _check_declared_sizes(specs, members, file_size)
            arrays = {}
            for k, (shape, dtype, ndims, dtypes) in specs.items():
                arrays[k] = _read_array_member(zf, members[k], k, shape, dtype, ndims, dtypes)
            digest = None
            if "__sha256__" in members:
                digest = _read_text_member(zf, members["__sha256__"], "__sha256__", 1024)
        if digest is not None and digest != _content_hash(meta_text, arrays):
            raise _BadModelFile("content hash mismatch: the file is corrupt or was edited after save()")
        if "item_factors_" not in arrays:
            raise _BadModelFile("item_factors_ missing")
        n_items, d = arrays["item_factors_"].shape
        if n_items == 0:  # d = 0 is legal: a DPALS bias / popularity-only model
            raise _BadModelFile(f"item_factors_ has no items (shape {arrays['item_factors_'].shape})")
        params = _check_params(meta.get("params", {}), target)
        if (
            isinstance(params.get("factors"), int)
            and not isinstance(params["factors"], bool)
            and params["factors"] != d
        ):
            raise _BadModelFile(f"params say factors={params['factors']} but item_factors_ has {d} columns")
        if "privacy_report" in meta:
            _verify_privacy_report(meta["privacy_report"], params)
        if isinstance(params.get("dtype"), str):
            try:
                params["dtype"] = np.dtype(params["dtype"]).type
            except TypeError:
                raise _BadModelFile(f"unknown dtype {params['dtype'][:20]!r}") from None
        try:
            model = target(**params)
        except TypeError as exc:
            raise _BadModelFile(f"parameters do not match {name}: {exc}") from None
        model._check_loaded_arrays(arrays, path)
        for k, v in arrays.items():
            setattr(model, k, v)
        try:
            model._restore_metadata(meta)
        except (KeyError, TypeError, AttributeError) as exc:
            raise _BadModelFile(f"malformed {name} metadata ({type(exc).__name__}: {exc})") from None
        model._restore_ids(meta)
        model._fitted_params = _param_fingerprint(model)
        return model

    def _check_loaded_arrays(self, arrays: dict[str, np.ndarray], path) -> None:
        n_items, d = arrays["item_factors_"].shape
        if "user_factors_" in arrays and arrays["user_factors_"].shape[1:] != (d,):
            raise ValueError(
                f"{path}: user_factors_ has {arrays['user_factors_'].shape[1:]} columns, item factors have {d}"
            )
        if "item_bias_" in arrays and arrays["item_bias_"].shape != (n_items,):
            raise ValueError(f"{path}: item_bias_ has shape {arrays['item_bias_'].shape}, expected ({n_items},)")
        if (
            "user_bias_" in arrays
            and "user_factors_" in arrays
            and arrays["user_bias_"].shape != arrays["user_factors_"].shape[:1]
        ):
            raise ValueError(f"{path}: user_bias_ does not match user_factors_")


# ---------------------------------------------------------------------- model file helpers


class _BadModelFile(ValueError):
    """A check of the model file failed (the message does not name the file; ``load`` adds it)."""


def _ids_to_json(ids, which: str):
    """``{"kind": "int"|"str"|"object", "values": [...]}`` of an id map, or ``None`` (with a
    ``UserWarning``) when the ids are not all str / int (only those are saved)."""
    arr = np.asarray(ids)
    if arr.dtype.kind in "iu":
        return {"kind": "int", "values": [int(x) for x in arr.tolist()]}
    if arr.dtype.kind == "U":
        return {"kind": "str", "values": arr.tolist()}
    if arr.dtype == object:
        values: list[str | int] = []
        for x in arr.tolist():
            if isinstance(x, str) or (isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))):
                values.append(x if isinstance(x, str) else int(x))
            else:
                break
        else:
            return {"kind": "object", "values": values}
    warnings.warn(
        f"{which} ids of dtype {arr.dtype} are not saved (only str and int ids are): the loaded model will use indices",
        UserWarning,
        stacklevel=4,
    )
    return None


def _ids_from_json(entry, which: str, n: int) -> np.ndarray:
    if not isinstance(entry, dict) or set(entry) != {"kind", "values"}:
        raise _BadModelFile(f"metadata {which}_ids must be {{'kind': ..., 'values': [...]}}")
    kind, values = entry["kind"], entry["values"]
    if not isinstance(values, list) or len(values) != n:
        raise _BadModelFile(f"metadata {which}_ids must list {n} ids")
    is_int = [isinstance(v, int) and not isinstance(v, bool) for v in values]
    is_str = [isinstance(v, str) for v in values]
    if kind == "int" and all(is_int):
        if values and max(values) >= 1 << 63 and min(values) >= 0 and max(values) < 1 << 64:
            arr = np.array(values, dtype=np.uint64)  # uint64 ids >= 2**63 (saved as such by _ids_to_json)
        else:
            arr = np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
    elif kind == "str" and all(is_str):
        arr = np.array(values, dtype=str) if values else np.zeros(0, dtype=str)
    elif kind == "object" and all(a or b for a, b in zip(is_int, is_str)):
        arr = np.empty(n, dtype=object)
        arr[:] = values
    else:
        raise _BadModelFile(f"metadata {which}_ids: kind {str(kind)[:10]!r} with values that do not match it")
    if len(set(values)) != n:
        raise _BadModelFile(f"metadata {which}_ids holds repeated ids")
    return arr


def _c_order(a: np.ndarray) -> np.ndarray:
    """C-contiguous copy if needed, keeping 0-d arrays 0-d (``np.ascontiguousarray`` makes them 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def _one_line(exc: BaseException) -> str:
    return " ".join((str(exc) or type(exc).__name__).split())


def _content_hash(meta_text: str, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the metadata text and every array (name, dtype, shape, C-order bytes)."""
    h = hashlib.sha256()
    h.update(b"privrec-model-content\0")
    h.update(meta_text.encode("utf-8"))
    for k in sorted(arrays):
        a = _c_order(np.asarray(arrays[k]))
        h.update(f"\0{k}\0{a.dtype.str}\0{list(a.shape)}\0".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def _npz_members(zf: zipfile.ZipFile, file_size: int | None = None) -> dict[str, zipfile.ZipInfo]:
    """The members of an .npz by array name; with ``file_size`` (bytes of the whole file), each
    member's declared sizes are checked against it first (:func:`_check_member_size`)."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        fname = info.filename
        if not fname.endswith(".npy") or "/" in fname or "\\" in fname:
            raise _BadModelFile(f"unexpected member {fname[:60]!r} (a model file holds only .npy arrays)")
        key = fname[:-4]
        if key in members:
            raise _BadModelFile(f"member {key[:60]!r} appears twice")
        if file_size is not None:
            _check_member_size(info, key, file_size)
        members[key] = info
    return members


def _check_member_size(info: zipfile.ZipInfo, what: str, file_size: int) -> None:
    """A member's declared sizes must be possible in a file of ``file_size`` bytes: its compressed
    bytes fit in the file, and its uncompressed size is at most :data:`_MAX_EXPANSION` times them
    (stored: equal; deflated: 1032:1). The zip directory is not trusted: a forged size would
    otherwise make the reader allocate what it declares."""
    expansion = _MAX_EXPANSION.get(info.compress_type)
    if expansion is None:
        raise _BadModelFile(
            f"member {what[:60]!r} uses zip compression method {info.compress_type}; a model file's members are "
            "stored or deflated (as numpy writes them)"
        )
    if info.compress_size > file_size:
        raise _BadModelFile(
            f"member {what[:60]!r} claims {info.compress_size:,} compressed bytes, more than the whole file "
            f"({file_size:,} bytes)"
        )
    if info.file_size > expansion * info.compress_size:
        how = "stored" if expansion == 1 else f"deflated, at most {expansion}:1"
        raise _BadModelFile(
            f"member {what[:60]!r} claims {info.file_size:,} bytes but holds {info.compress_size:,} "
            f"({how}): its size is forged"
        )


def _check_declared_sizes(specs: dict, members: dict[str, zipfile.ZipInfo], file_size: int) -> None:
    """Before any array is read: every array the metadata declares fits in its member (whose size
    :func:`_check_member_size` bounded by the file's), and all of them together fit in
    :func:`privrec._validation.memory_limit` (``$PRIVREC_MAX_ARRAY_BYTES``)."""
    total = 0
    for k, (shape, dtype_str, _, dtypes) in specs.items():
        itemsize = np.dtype(dtype_str).itemsize if dtype_str is not None else min(np.dtype(t).itemsize for t in dtypes)
        nbytes = math.prod(shape) * itemsize  # exact Python ints: no overflow
        info = members[k]
        if nbytes > info.file_size:
            raise _BadModelFile(
                f"array {k}: the metadata says shape {tuple(shape)} ({_gib(nbytes)}), but its member holds only "
                f"{info.file_size:,} bytes (the file has {file_size:,})"
            )
        total += nbytes
    limit = memory_limit()
    if total > limit:
        raise _BadModelFile(
            f"its arrays declare {_gib(total)}, more than the memory limit of {_gib(limit)} (set "
            "PRIVREC_MAX_ARRAY_BYTES to raise it)"
        )


def _read_header(fh, what: str):
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise _BadModelFile(f"member {what}: unsupported .npy version {version}")
        return tuple(int(n) for n in shape), bool(fortran), np.dtype(dtype)
    except _BadModelFile:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError):
        raise
    except Exception as exc:  # numpy parses the header with ast.literal_eval: SyntaxError, TokenError, ...
        raise _BadModelFile(f"member {what} has a corrupt .npy header ({type(exc).__name__})") from None


def _read_exact(fh, nbytes: int, what: str) -> np.ndarray:
    buf = np.empty(nbytes, dtype=np.uint8)
    view = buf.data
    got = 0
    while got < nbytes:
        n = fh.readinto(view[got:])
        if not n:
            raise _BadModelFile(f"member {what} is truncated ({got} of {nbytes} data bytes)")
        got += n
    if fh.read(1):
        raise _BadModelFile(f"member {what} has trailing data after its array")
    return buf


def _read_text_member(zf, info, what: str, max_bytes: int) -> str:
    if info.file_size > max_bytes:
        raise _BadModelFile(f"member {what} is too large ({info.file_size} bytes)")
    with zf.open(info) as fh:
        shape, fortran, dtype = _read_header(fh, what)
        if shape != () or dtype.kind != "U":
            raise _BadModelFile(f"member {what} must be a text scalar, got dtype {dtype} shape {shape}")
        if dtype.itemsize > info.file_size:  # checked before allocating what the header declares
            raise _BadModelFile(
                f"member {what} declares {dtype.itemsize:,} bytes of text but holds only {info.file_size:,}"
            )
        raw = _read_exact(fh, dtype.itemsize, what)
    return str(raw.view(dtype)[0])


def _read_array_member(zf, info, what, shape, dtype_str, ndims, dtypes) -> np.ndarray:
    with zf.open(info) as fh:
        fshape, fortran, dtype = _read_header(fh, what)
        if dtype.name not in dtypes or dtype.hasobject or dtype.fields is not None:
            raise _BadModelFile(f"array {what} has dtype {dtype}, expected {'/'.join(dtypes)}")
        if dtype_str is not None and np.dtype(dtype_str) != dtype:
            raise _BadModelFile(f"array {what} has dtype {dtype}, metadata says {dtype_str}")
        if len(fshape) not in ndims:
            raise _BadModelFile(f"array {what} has {len(fshape)} dimension(s), expected {'/'.join(map(str, ndims))}")
        if fshape != shape:
            raise _BadModelFile(f"array {what} has shape {fshape}, metadata says {shape}")
        nbytes = int(np.prod(fshape, dtype=object)) * dtype.itemsize
        if nbytes > info.file_size:
            raise _BadModelFile(f"array {what} claims shape {fshape} but its member holds only {info.file_size} bytes")
        raw = _read_exact(fh, nbytes, what)
    arr = raw.view(dtype)
    arr = arr.reshape(fshape[::-1]).T if fortran else arr.reshape(fshape)
    arr = _c_order(arr)
    if not np.all(np.isfinite(arr)):
        raise _BadModelFile(f"array {what} contains NaN or infinite values")
    return arr


def _json_depth(obj) -> int:
    depth, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        depth = max(depth, d)
        if depth > _MAX_JSON_DEPTH:
            break
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return depth


def _parse_meta(text: str) -> dict:
    try:
        meta = json.loads(text)
    except RecursionError:
        raise _BadModelFile(f"metadata is nested too deeply (more than {_MAX_JSON_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise _BadModelFile(f"metadata is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise _BadModelFile("not a privrec model file (format tag missing)")
    if _json_depth(meta) > _MAX_JSON_DEPTH:
        raise _BadModelFile(f"metadata is nested too deeply (more than {_MAX_JSON_DEPTH} levels)")
    return meta


def _scalar_param(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _check_params(params, target) -> dict:
    if not isinstance(params, dict):
        raise _BadModelFile(f"metadata 'params' must be an object, got {type(params).__name__}")
    known = set(target._get_param_names())
    for k, v in params.items():
        if k not in known:
            raise _BadModelFile(f"unknown parameter {k[:40]!r} for {target.__name__}")
        if not (_scalar_param(v) or (isinstance(v, list) and all(_scalar_param(x) for x in v))):
            raise _BadModelFile(f"parameter {k} must be a number, string, boolean, null or a list of those")
    return dict(params)


def _as_epsilon(value, what: str) -> float:
    if value in ("inf", "Infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise _BadModelFile(f"privacy report: {what} must be a non-negative number or 'inf', got {str(value)[:40]!r}")
    return float(value)


def _same_epsilon(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=_EPS_RTOL, abs_tol=1e-12)


def _verify_privacy_report(report, params: dict) -> None:
    """Recompute epsilon from the report's events; any disagreement means the file was edited."""
    from ..privacy.ledger import epsilon_from_report

    if not isinstance(report, dict):
        raise _BadModelFile("privacy report must be an object")
    events = report.get("events")
    if not isinstance(events, list) or not all(
        isinstance(e, dict) and isinstance(e.get("event"), dict) for e in events
    ):
        raise _BadModelFile("privacy report: 'events' must be a list of recorded events")
    delta = report.get("delta")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise _BadModelFile(f"privacy report: delta must be in (0, 1), got {str(delta)[:40]!r}")
    if isinstance(params.get("delta"), (int, float)) and not math.isclose(params["delta"], delta, rel_tol=_EPS_RTOL):
        raise _BadModelFile(f"privacy report delta {delta} differs from the model's delta {params['delta']}")
    if "epsilon_rdp" not in report:
        raise _BadModelFile("privacy report lacks epsilon_rdp")
    claimed = {"rdp": _as_epsilon(report["epsilon_rdp"], "epsilon_rdp")}
    if report.get("epsilon_pld") is not None:
        claimed["pld"] = _as_epsilon(report["epsilon_pld"], "epsilon_pld")
    accountant = report.get("accountant", "rdp")  # the accountant the noise was calibrated with
    if accountant not in ("rdp", "pld"):
        raise _BadModelFile(f"privacy report: unknown accountant {str(accountant)[:20]!r}")
    if accountant not in claimed:
        raise _BadModelFile(f"privacy report lacks epsilon_{accountant}, the value of its accountant")
    if "epsilon" in report and not _same_epsilon(_as_epsilon(report["epsilon"], "epsilon"), claimed[accountant]):
        raise _BadModelFile(f"privacy report: epsilon differs from epsilon_{accountant}")
    target_eps = params.get("epsilon", report.get("target_epsilon"))
    if (
        "target_epsilon" in report
        and "epsilon" in params
        and not _same_epsilon(
            _as_epsilon(report["target_epsilon"], "target_epsilon"),
            _as_epsilon(params["epsilon"], "the epsilon parameter"),
        )
    ):
        raise _BadModelFile("privacy report: target_epsilon differs from the model's epsilon parameter")
    private = target_eps is not None and not math.isinf(_as_epsilon(target_eps, "target epsilon"))
    if private and not events and not math.isinf(claimed["rdp"]):
        raise _BadModelFile("privacy report of a private model records no events (epsilon cannot be recomputed)")
    for accountant, value in claimed.items():
        try:
            actual = epsilon_from_report(report, accountant)
        except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
            raise _BadModelFile(
                f"privacy report events are malformed ({type(exc).__name__}: {_one_line(exc)[:200]})"
            ) from None
        if not _same_epsilon(actual, value):
            raise _BadModelFile(
                f"privacy report claims epsilon_{accountant} = {value:g} but its recorded events "
                f"give {actual:g}: the report was edited"
            )


#: parameters that do not shape a fit's result (changing them after the fit does not stop save())
_RUNTIME_PARAMS = frozenset({"show_progress", "num_threads"})


def _param_fingerprint(model) -> dict[str, str]:
    """The saved parameters as JSON text, by name (what :meth:`FactorizationModel.save` would write)."""
    return {k: json.dumps(_jsonable(v), sort_keys=True, default=repr) for k, v in model._saved_params().items()}


def _jsonable(v):
    if isinstance(v, (type, np.dtype)):
        try:
            return np.dtype(v).name
        except TypeError:
            return repr(v)
    if isinstance(v, (np.random.Generator, np.random.RandomState, np.random.SeedSequence)):
        return None  # generator state is not persisted
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return v  # json.dumps writes Infinity; json.loads reads it back
    return v
