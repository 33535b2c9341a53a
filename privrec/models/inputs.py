"""Inputs of privrec's factorisation models: what ``fit`` and the query methods accept, and how.

Follows implicit 0.7's ``fit(user_items, show_progress, callback)`` (a users x items matrix; a
``callback(iteration, elapsed_seconds, loss)``) and scikit-learn's input conventions (sparse and
dense ``X``, NaN allowed where the estimator tags say so, a ``y`` accepted and ignored by an
unsupervised ``fit``, ``verbose``-like progress output). This module holds the conversion of every
input to one checked CSR (:func:`as_user_items`, :func:`fit_input`), the fit wrapper that applies
it once for every subclass (:class:`FitInputMixin`: ``__init_subclass__`` wraps each subclass's
``fit``), and the declarations that come with an input: the public item catalogue, the user roster
and the rating range.

Inputs of ``fit``: a scipy sparse users x items matrix (CSR, CSC or COO; duplicates rejected), a
:class:`privrec.data.Interactions`, or a long-format pandas DataFrame with columns ``user`` /
``item`` / ``rating`` (the module defaults of :mod:`privrec.data.frames`; build the
``Interactions`` with :func:`privrec.data.from_pandas` for other column names or a public item
vocabulary), or a dense array in which NaN marks an unrated entry (0 is a rating).
scikit-learn's ``fit(X, y)`` calling convention is accepted too: a ``y`` (``None`` or an array)
in the ``show_progress`` position is ignored (the ratings are in ``X``).

Progress bars: ``fit(X, show_progress=True / False)`` decides for one fit (implicit 0.7's
signature); ``show_progress=None`` (or not given) falls back to the model's ``show_progress``
constructor parameter, as ``verbose`` in scikit-learn; its default ``None`` means **a bar when
``fit`` is called directly, none when scikit-learn calls it** (``GridSearchCV``,
``cross_validate``, a ``Pipeline``, ``check_estimator``: any scikit-learn function on the call
stack, or a ``y`` given as in ``fit(X, y)``), so a search prints no bar per fold. Estimators
cloned by scikit-learn keep the constructor value: ``show_progress=True`` asks for bars even there.

Item catalogue: ``fit(X, items=catalogue)`` declares the public item catalogue (the item axis is
then the catalogue, whatever items have ratings: :func:`with_item_catalogue`), as
``privrec.data.from_pandas(..., item_ids=catalogue)`` does. A *private* model fitted on an item axis
derived from the data (a DataFrame / CSV without a catalogue) warns with
:class:`ItemCatalogueWarning`; ``fit(X, strict_catalogue=True)`` refuses any private fit without a
declared catalogue. :meth:`FactorizationModel.save` records where the axis came from (metadata
``item_axis``: ``{"source": "catalogue" | "data" | "matrix", "public": bool}``). Likewise
``fit(X, users=roster)`` declares the public user roster (:func:`with_user_roster`; a private fit
on a roster taken from the data warns with :class:`UserRosterWarning`).
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
import warnings
from collections.abc import Iterator, Mapping, Set
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from .._validation import MAX_RATING_MAGNITUDE, check_csr_structure, check_rating_magnitude, sparse_to_csr


class RatingRangeWarning(UserWarning):
    """Ratings given to ``fit`` fall outside the model's declared (public) rating range."""


class ItemCatalogueWarning(UserWarning):
    """A private model was fitted on an item axis derived from the training data: a DataFrame / CSV
    (or an ``Interactions`` read from one) without a declared item catalogue indexes only the items
    that have at least one rating. Which items have ratings is a statistic of the data -- with one
    user as an item's only rater, the released arrays have a row more with that user than without --
    so the item axis -- and the item ids saved with the model, which name its rows -- is not
    covered by the privacy guarantee. Declare the public catalogue:
    ``model.fit(X, items=catalogue)``, ``privrec.data.from_pandas(..., item_ids=catalogue)`` or
    ``from_parquet(..., item_ids=catalogue)``; ``fit(X, strict_catalogue=True)`` refuses instead."""


class UserRosterWarning(UserWarning):
    """A private model was fitted on a user axis derived from the training data: a DataFrame / CSV
    (or an ``Interactions`` read from one) without a declared user roster lists only the users that
    have ratings. DPALS's guarantee is stated for the zero-out relation over a public roster (the
    number of users shapes the fit), and a user whose ratings are all removed would then vanish from
    the roster, changing its size. Declare the roster: ``model.fit(X, users=roster)`` or
    ``privrec.data.from_pandas(..., user_ids=roster)``."""


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


def _declared_ids(ids, what: str) -> np.ndarray:
    """A declared roster / catalogue as a 1-D id array: an ordered, non-empty sequence (a list,
    tuple, numpy array, pandas Series / Index; a set is refused, having no order:
    :func:`privrec.data.frames.check_ordered_ids`) without missing values (``None`` / NaN)."""
    from ..data.frames import check_no_missing_ids, check_ordered_ids

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
        from ..data.frames import vocabulary_fingerprint

        same = info.get(f"{axis}_vocabulary_sha256") == vocabulary_fingerprint(np.asarray(getattr(X, f"{axis}_ids")))
        return declared if same else "data"
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

    from ..data.frames import ITEM_COL, RATING_COL, USER_COL, from_pandas, vocabulary_fingerprint
    from ..data.interactions import Interactions

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

    from .persistence import _param_fingerprint  # (not at the top: persistence imports this module)

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


class FitInputMixin:
    """The input side of :class:`FactorizationModel`: each subclass's ``fit`` wrapped once
    (:func:`_wrap_fit`), and the checks of the declared item axis, user roster and rating range."""

    if TYPE_CHECKING:

        def _is_private(self) -> bool: ...

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is not None and not getattr(fit, "_privrec_fit_input", False):
            cls.fit = _wrap_fit(fit)

    # ------------------------------------------------------------------ item axis and user roster
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
                f"arrays have one row per such item, saved with its id; {advice} (strict_catalogue=True refuses such "
                "fits)",
                ItemCatalogueWarning,
                stacklevel=3,
            )

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
