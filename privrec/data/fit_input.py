"""Every ``fit`` input as one checked users x items CSR, with the ids and declarations it carries.

What ``fit`` accepts (see :mod:`privrec.models.inputs` for the estimator side): a scipy sparse
users x items matrix (CSR, CSC or COO; duplicates rejected), a :class:`privrec.data.Interactions`,
a long-format pandas DataFrame with columns ``user`` / ``item`` / ``rating`` (the defaults of
:mod:`privrec.data.frames`), or a dense array in which NaN marks an unrated entry (0 is a rating);
the public item catalogue (:func:`with_item_catalogue`) and user roster (:func:`with_user_roster`)
declared with it; where the item and user axes came from (:func:`item_axis_source`,
:func:`user_axis_source`); the declared rating range (:func:`check_rating_range`). A data-layer
concern: the configure stage (:mod:`privrec.tuning`) and the estimators read inputs through it.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterator, Mapping, Set

import numpy as np
import scipy.sparse as sp

from .._validation import MAX_RATING_MAGNITUDE, check_csr_structure, check_rating_magnitude, sparse_to_csr


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
                from .frames import check_real_objects

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


def _declared_ids(ids, what: str) -> np.ndarray:
    """A declared roster / catalogue as a 1-D id array: an ordered, non-empty sequence (a list,
    tuple, numpy array, pandas Series / Index; a set is refused, having no order:
    :func:`privrec.data.frames.check_ordered_ids`) without missing values (``None`` / NaN)."""
    from .frames import check_no_missing_ids, check_ordered_ids

    check_ordered_ids(ids, what)
    if isinstance(ids, Iterator):  # a generator states an order: read it once
        ids = list(ids)
    if hasattr(ids, "to_numpy") and not isinstance(ids, np.ndarray):  # pandas Series / Index
        ids = ids.to_numpy()
    arr = _id_array(ids)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence of ids")
    check_no_missing_ids(arr, what)
    return arr


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
        from .frames import interactions_from_frame

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
            from .frames import vocabulary_fingerprint

            # the item axis may have been changed since (e.g. drop_empty keeps info): check it is the given one
            given = info.get("item_vocabulary_sha256") == vocabulary_fingerprint(item_ids)
    return as_user_items(X), user_ids, item_ids, given


#: where a fitted model's item axis came from (``FactorizationModel.item_axis_``, saved as ``item_axis``)
#: where a model's item axis came from; "selection": chosen by the fit's private item selection
#: (add/remove DP, :mod:`privrec.allocation.partition`), public like a declared catalogue
ITEM_AXIS_SOURCES = ("catalogue", "data", "matrix", "selection")
#: the item-axis sources the guarantee covers
PUBLIC_ITEM_AXES = ("catalogue", "selection")


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
    return _axis_source(X, "item", "catalogue")


def user_axis_source(X) -> str:
    """Where the user axis (rows) of a ``fit`` input comes from: ``"roster"`` (an ``Interactions``
    built with ``user_ids=``, still that vocabulary), ``"data"`` (a DataFrame, or an ``Interactions``
    read from one without ``user_ids``) or ``"matrix"`` (a matrix's rows, as the caller made them)."""
    return _axis_source(X, "user", "roster")


def _axis_source(X, axis: str, declared: str) -> str:
    """The rule of :func:`item_axis_source` / :func:`user_axis_source` for ``axis`` ("item" or
    "user"): ``declared`` when the ``{axis}_ids`` vocabulary given at construction is still the
    axis (by fingerprint), else ``"data"`` or ``"matrix"``."""
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        return "data"
    if sp.issparse(X) or not (hasattr(X, "matrix") and hasattr(X, f"{axis}_ids")):
        return "matrix"
    info = getattr(X, "info", None) or {}
    vocabulary = info.get(f"{axis}_vocabulary")
    if vocabulary == "given":
        from .frames import vocabulary_fingerprint

        same = info.get(f"{axis}_vocabulary_sha256") == vocabulary_fingerprint(np.asarray(getattr(X, f"{axis}_ids")))
        return declared if same else "data"
    return "data" if vocabulary == "data" else "matrix"


def with_user_roster(X, users):
    """A long DataFrame ``X`` as an ``Interactions`` whose user axis is the public roster ``users``
    (users without ratings get empty rows). Other inputs declare their roster when built
    (``from_pandas`` / ``from_parquet(..., user_ids=roster)``; a matrix's rows are its roster)."""
    import pandas as pd

    from .frames import ITEM_COL, RATING_COL, USER_COL, from_pandas

    if not isinstance(X, pd.DataFrame):
        raise ValueError(
            "users= (the public user roster) applies to a long DataFrame; build other inputs with "
            "privrec.data.from_pandas / from_parquet(..., user_ids=roster), and a matrix's rows are its roster"
        )
    roster = _declared_ids(users, "users (the public user roster)")
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

    from .frames import ITEM_COL, RATING_COL, USER_COL, from_pandas, vocabulary_fingerprint
    from .interactions import Interactions

    catalogue = _declared_ids(items, "items (the public item catalogue)")
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
