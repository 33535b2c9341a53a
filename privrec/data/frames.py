"""Long-format rating tables (pandas / Parquet) to :class:`~privrec.data.Interactions`, and a
rating-level cross-validation splitter for scikit-learn's model selection.

A *long-format* table has one row per rating: a user id column, an item id column and (for
explicit feedback) a rating column. Ids may be of any hashable type (strings, integers, mixed
objects); they become the ``user_ids`` / ``item_ids`` maps of the returned ``Interactions``, and a
model fitted on it recommends by id (``recommend_ids``, ``similar_items_ids``).

Column names default to :data:`USER_COL`, :data:`ITEM_COL`, :data:`RATING_COL` (``"user"``,
``"item"``, ``"rating"``). These defaults are module-level and estimator-independent: a model's
``fit(df)`` reads a DataFrame with exactly these columns; for other names build the
``Interactions`` first with :func:`from_pandas` / :func:`from_parquet`.

Duplicates: privrec's policy is to reject duplicate (user, item) rows (a silent sum or overwrite
changes the data). Both readers raise a ``ValueError`` naming the number of duplicate rows unless
``duplicates="sum"`` (play counts) or ``"last"`` (latest row wins; also ``"first"`` / ``"max"``)
is passed, in which case they are resolved with a ``UserWarning`` (see
:meth:`Interactions.from_arrays`).

Privacy note: without a given vocabulary, the item ids are *the items that have at least one
rating*, which is itself a statistic of the data. A private model (``DPALS``) fitted on them
warns (``ItemCatalogueWarning``), and its saved file records the item axis -- rows and ids -- as
not public; give the public vocabulary (``item_ids=`` here) to have it covered. See
``FactorizationModel.save``.
"""

from __future__ import annotations

import datetime
import hashlib
import numbers
from collections.abc import Collection, Hashable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd

from privrec._validation import check_ids_not_nul_suffixed, unhashable_id_error
from privrec.data.interactions import DUPLICATE_POLICIES, Interactions

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+; only the type checker needs it
    from typing import Unpack

#: default column names of a long-format rating table (module-level, estimator-independent)
USER_COL = "user"
ITEM_COL = "item"
RATING_COL = "rating"


# ---------------------------------------------------------------------- id vocabularies


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


def _missing_column(what: str, col, columns, where: str = "the table") -> ValueError:
    hint = " (pass rating_col=None for implicit feedback: every row counts 1)" if what == "rating_col" else ""
    return ValueError(f"{what}={col!r} is not a column of {where}; columns are {list(columns)[:20]}{hint}")


def _check_single_column(df: pd.DataFrame, col, what: str) -> None:
    """``ValueError`` when the column name ``col`` appears more than once in ``df``."""
    n = int(np.count_nonzero(df.columns == col)) if df.columns.has_duplicates else 1
    if n > 1:
        raise ValueError(f"{what}={col!r} names {n} columns of the table: column names must be unique")


def _column(df: pd.DataFrame, col, what: str):
    if col not in df.columns:
        raise _missing_column(what, col, df.columns)
    _check_single_column(df, col, what)
    return df[col]


#: Python / numpy scalar types that convert to float but are not ratings (a datetime would become
#: its microseconds since the epoch, a complex number would lose its imaginary part)
_NOT_RATINGS = (
    datetime.date,
    datetime.time,
    datetime.timedelta,
    np.datetime64,
    np.timedelta64,
    complex,
    np.complexfloating,
)


def _not_real(name: str, what: str) -> ValueError:
    return ValueError(f"{name} must be numeric: ratings are real numbers, got {what}")


def check_real_objects(vals: np.ndarray, name: str) -> None:
    """``ValueError`` naming ``name`` when an object array holds booleans, datetimes, timedeltas or
    complex numbers (which ``astype(float)`` would turn into numbers without complaint)."""
    for t in {type(x) for x in vals.ravel().tolist()}:
        if issubclass(t, (bool, np.bool_)):
            raise _not_real(name, "booleans in an object column (use a bool column, or numbers)")
        if issubclass(t, _NOT_RATINGS):
            raise _not_real(name, f"{t.__name__} values")


def rating_array(series, name: str) -> np.ndarray:
    """A rating column as a numeric numpy array (bool, integer or float; an object column of real
    numbers becomes float64). Datetime, timedelta and complex columns, and object columns holding
    booleans, datetimes or other non-numbers, are a one-line ``ValueError`` naming ``name``."""
    dtype = getattr(series, "dtype", None)
    if dtype is not None and not isinstance(dtype, np.dtype):  # a pandas extension dtype
        if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
            raise _not_real(name, f"dtype {dtype}")
        if isinstance(dtype, pd.CategoricalDtype):
            return rating_array(np.asarray(series), name)
        if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
            if pd.api.types.is_complex_dtype(dtype):
                raise _not_real(name, f"dtype {dtype}")
            return series.to_numpy(dtype=np.float64, na_value=np.nan)
    vals = np.asarray(series)
    kind = vals.dtype.kind
    if kind in "biuf":
        return vals
    if kind in "mMc":
        what = {"m": "timedeltas", "M": "datetimes", "c": "complex numbers"}[kind]
        raise _not_real(name, f"{what} (dtype {vals.dtype})")
    if kind == "O":
        check_real_objects(vals, name)
    try:
        return vals.astype(np.float64)
    except (TypeError, ValueError):
        raise _not_real(name, f"non-numeric values (dtype {dtype if dtype is not None else vals.dtype})") from None


def _rating_values(series, name: str) -> np.ndarray:
    return rating_array(series, name).astype(np.float32, copy=False)


def _epoch_seconds(values) -> np.ndarray:
    """Timestamps as given; datetimes become int64 seconds since the epoch."""
    ts = np.asarray(values)
    return ts.astype("datetime64[s]").astype(np.int64) if ts.dtype.kind == "M" else ts


# ---------------------------------------------------------------------- reader options


class ReaderOptions(TypedDict, total=False):
    """The keyword options shared by :func:`from_pandas` and :func:`from_parquet` (``**options``),
    declared once: ``duplicates``, ``user_ids``, ``item_ids``, ``timestamp_col`` and ``name``, as
    documented in :func:`from_pandas`. Any other keyword is a ``TypeError``, as for a signature."""

    duplicates: str
    user_ids: Collection[Hashable] | None
    item_ids: Collection[Hashable] | None
    timestamp_col: Hashable | None
    name: str


@dataclass(frozen=True)
class _TableRequest:
    """What a reader is asked for: the columns of the table and the :class:`ReaderOptions`, with
    their defaults, checked before any data is read."""

    user_col: Hashable
    item_col: Hashable
    rating_col: Hashable | None
    duplicates: str = "error"
    user_ids: Collection[Hashable] | None = None
    item_ids: Collection[Hashable] | None = None
    timestamp_col: Hashable | None = None
    name: str = ""

    @classmethod
    def of(cls, reader: str, user_col, item_col, rating_col, options: ReaderOptions) -> _TableRequest:
        """The request of ``reader(..., user_col, item_col, rating_col, **options)``."""
        for key in options:
            if key not in ReaderOptions.__optional_keys__:
                raise TypeError(f"{reader}() got an unexpected keyword argument {key!r}")
        request = cls(user_col, item_col, rating_col, **options)
        if request.duplicates not in DUPLICATE_POLICIES:
            raise ValueError(f"duplicates must be one of {DUPLICATE_POLICIES}, got {request.duplicates!r}")
        return request

    @property
    def columns(self) -> dict[str, Hashable]:
        """The columns to read, by argument name (the optional ones only when given)."""
        wanted = {"user_col": self.user_col, "item_col": self.item_col}
        for what, col in (("rating_col", self.rating_col), ("timestamp_col", self.timestamp_col)):
            if col is not None:
                wanted[what] = col
        return wanted

    def check_columns(self, available, where: str = "the table") -> None:
        """``ValueError`` naming the first requested column missing from ``available``."""
        for what, col in self.columns.items():
            if col not in available:
                raise _missing_column(what, col, available, where)

    def interactions(self, ucodes, icodes, values, user_vocab, item_vocab, timestamps, source: str) -> Interactions:
        """Interactions from integer codes (0..len(vocab)-1) and their vocabularies."""
        user_given, item_given = self.user_ids is not None, self.item_ids is not None
        info = {
            "source": source,
            "user_vocabulary": "given" if user_given else "data",
            "item_vocabulary": "given" if item_given else "data",
        }
        if item_given:
            info["item_vocabulary_sha256"] = vocabulary_fingerprint(item_vocab)
        if user_given:
            info["user_vocabulary_sha256"] = vocabulary_fingerprint(user_vocab)
        try:
            # integer codes with a fixed vocabulary 0..n-1: the matrix has exactly len(vocab) rows/columns
            inter = Interactions.from_arrays(
                ucodes,
                icodes,
                values,
                timestamps=timestamps,
                duplicates=self.duplicates,
                name=self.name,
                user_ids=np.arange(len(user_vocab)),
                item_ids=np.arange(len(item_vocab)),
                info=info,
            )
        except ValueError as exc:
            msg = str(exc)
            if self.duplicates == "error" and "duplicate" in msg:
                n_dup = msg.split()[0]
                raise ValueError(
                    f"{n_dup} duplicate (user, item) row(s) in the rating table: privrec rejects "
                    f"duplicates; pass duplicates='sum' (add them, e.g. play counts) or "
                    f"duplicates='last' (keep the last row)"
                ) from None
            raise
        inter.user_ids = user_vocab  # codes were the identity: swap in the real ids (lookups not built yet)
        inter.item_ids = item_vocab
        return inter


# ---------------------------------------------------------------------- readers


def _encode_ids(values, vocabulary, what: str, col) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, vocabulary)`` of one id column: in the given vocabulary, else the data's sorted ids."""
    if vocabulary is None:
        return _factorize_ids(values, f"{what} column {col!r}")
    return _codes_in_vocabulary(values, vocabulary, what)


def from_pandas(
    df: pd.DataFrame,
    user_col: Hashable = USER_COL,
    item_col: Hashable = ITEM_COL,
    rating_col: Hashable | None = RATING_COL,
    **options: Unpack[ReaderOptions],
) -> Interactions:
    """An :class:`Interactions` from a long-format DataFrame (one row per rating).

    ``user_col`` / ``item_col`` hold ids of any hashable type; ``rating_col`` the ratings
    (``None``: implicit feedback, every row counts 1). Keyword options (:class:`ReaderOptions`,
    the same for :func:`from_parquet`):

    * ``duplicates``: ``"error"`` (default: ``ValueError`` naming how many duplicate (user, item)
      rows there are), ``"sum"``, ``"last"``, ``"first"`` or ``"max"``;
    * ``user_ids`` / ``item_ids``: when given, fix the vocabularies (every id must be in them; the
      matrix gets one row / column per vocabulary entry, in that order) -- e.g. a public item
      catalogue, which a private model may then save with its release. Without them, ids are
      sorted (first-appearance order when they are not mutually comparable);
    * ``timestamp_col``: a column of integer or datetime timestamps (datetimes are stored as
      seconds since the epoch), default none;
    * ``name``: the name of the result.
    """
    table = _TableRequest.of("from_pandas", user_col, item_col, rating_col, options)
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"from_pandas expects a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise ValueError("the rating table is empty (no rows)")
    table.check_columns(df.columns)
    for what, col in table.columns.items():
        _check_single_column(df, col, what)
    values = None if rating_col is None else _rating_values(df[rating_col], f"rating column {rating_col!r}")
    ts = None if table.timestamp_col is None else _epoch_seconds(df[table.timestamp_col])
    ucodes, uvocab = _encode_ids(df[user_col], table.user_ids, "user", user_col)
    icodes, ivocab = _encode_ids(df[item_col], table.item_ids, "item", item_col)
    return table.interactions(ucodes, icodes, values, uvocab, ivocab, ts, "pandas")


class _Vocabulary:
    """Growing id -> code map for chunked reads (codes in order of first appearance)."""

    def __init__(self, name: str):
        self.name = name
        self.codes: dict = {}
        self.ids: list = []

    def encode(self, values: pd.Series) -> np.ndarray:
        try:
            codes, uniques = pd.factorize(values, sort=False)
        except TypeError:
            raise (
                unhashable_id_error(_id_values(values, self.name), self.name)
                or ValueError(f"{self.name}: ids cannot be hashed")
            ) from None
        if np.any(codes < 0):
            raise ValueError(f"{self.name} has {int(np.count_nonzero(codes < 0))} missing (null) id(s)")
        uniques = list(uniques)
        lookup = np.empty(len(uniques), dtype=np.int64)
        get = self.codes.get
        for k, u in enumerate(uniques):
            c = get(u)
            if c is None:
                c = len(self.ids)
                self.codes[u] = c
                self.ids.append(u)
            lookup[k] = c
        return lookup[codes]

    def finish(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sort the vocabulary (as :func:`from_pandas` does) and remap ``codes``."""
        ids = pd.Index(self.ids, tupleize_cols=False).to_numpy()  # numeric ids keep a numeric dtype
        try:
            order = np.argsort(ids, kind="stable") if len(ids) else np.zeros(0, np.int64)
        except TypeError:  # mutually incomparable ids: keep first-appearance order
            return codes, _tidy_uniques(ids, self.name)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return inverse[codes], _tidy_uniques(ids[order], self.name)


def from_parquet(
    path,
    user_col: Hashable = USER_COL,
    item_col: Hashable = ITEM_COL,
    rating_col: Hashable | None = RATING_COL,
    *,
    batch_size: int = 1 << 20,
    **options: Unpack[ReaderOptions],
) -> Interactions:
    """An :class:`Interactions` from a long-format Parquet file, read in chunks with pyarrow.

    Only the needed columns are read, ``batch_size`` rows at a time; ids (any Arrow type:
    strings, integers, dictionary-encoded) are mapped to codes chunk by chunk, so the string
    columns are never materialised whole. Columns, keyword options (:class:`ReaderOptions`) and
    result as :func:`from_pandas` (same id order, same duplicate policy).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = _TableRequest.of("from_parquet", user_col, item_col, rating_col, options)
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    pf = pq.ParquetFile(path)
    table.check_columns(pf.schema_arrow.names, str(path))
    user_ids, item_ids, timestamp_col = table.user_ids, table.item_ids, table.timestamp_col
    # given vocabularies: checked (distinct, hashable) before any lookup
    fixed_users = None if user_ids is None else _vocabulary_index(user_ids, "user")[1]
    fixed_items = None if item_ids is None else _vocabulary_index(item_ids, "item")[1]
    uvoc, ivoc = _Vocabulary(f"user column {user_col!r}"), _Vocabulary(f"item column {item_col!r}")
    ucodes, icodes, vals, stamps = [], [], [], []

    def to_series(arr) -> pd.Series:
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        return arr.to_pandas()

    def encode_fixed(index, series, what):
        if series.isna().any():
            raise ValueError(f"{what} column has {int(series.isna().sum())} missing (null) id(s)")
        codes = _indexer(index, series.to_numpy(), f"{what} column")
        if np.any(codes < 0):
            missing = pd.unique(series.to_numpy()[codes < 0])[:5]
            raise ValueError(
                f"{int(np.count_nonzero(codes < 0))} {what} value(s) are not in the given {what} "
                f"vocabulary, e.g. {list(missing)}"
            )
        return codes.astype(np.int64)

    for batch in pf.iter_batches(batch_size=batch_size, columns=list(dict.fromkeys(table.columns.values()))):
        u = to_series(batch.column(user_col))
        i = to_series(batch.column(item_col))
        ucodes.append(uvoc.encode(u) if fixed_users is None else encode_fixed(fixed_users, u, "user"))
        icodes.append(ivoc.encode(i) if fixed_items is None else encode_fixed(fixed_items, i, "item"))
        if rating_col is not None:
            vals.append(_rating_values(to_series(batch.column(rating_col)), f"rating column {rating_col!r}"))
        if timestamp_col is not None:
            stamps.append(_epoch_seconds(to_series(batch.column(timestamp_col))))
    if not ucodes or sum(len(c) for c in ucodes) == 0:
        raise ValueError(f"{path}: the rating table is empty (no rows)")
    uc, ic = np.concatenate(ucodes), np.concatenate(icodes)
    if fixed_users is None:
        uc, uvocab = uvoc.finish(uc)
    else:
        uvocab = _codes_in_vocabulary(np.zeros(0), user_ids, "user")[1]
    if fixed_items is None:
        ic, ivocab = ivoc.finish(ic)
    else:
        ivocab = _codes_in_vocabulary(np.zeros(0), item_ids, "item")[1]
    values = np.concatenate(vals) if rating_col is not None else None
    ts = np.concatenate(stamps) if timestamp_col is not None else None
    return table.interactions(uc, ic, values, uvocab, ivocab, ts, "parquet")


# ---------------------------------------------------------------------- inputs of fit / score


def interactions_from_frame(df: pd.DataFrame, *, rating_required: bool = True) -> Interactions:
    """``from_pandas`` with the module's default column names (what ``model.fit(df)`` does)."""
    rating = RATING_COL if (rating_required or RATING_COL in df.columns) else None
    return from_pandas(df, USER_COL, ITEM_COL, rating)


def frame_triples(df: pd.DataFrame, *, rating_required: bool = True):
    """``(user ids, item ids, ratings or None)`` arrays of a long-format table with the default columns."""
    users = np.asarray(_column(df, USER_COL, "user_col"))
    items = np.asarray(_column(df, ITEM_COL, "item_col"))
    if RATING_COL in df.columns:
        vals = _rating_values(_column(df, RATING_COL, "rating_col"), f"rating column {RATING_COL!r}")
    elif rating_required:
        _column(df, RATING_COL, "rating_col")  # raises with the column list
    else:
        vals = None
    return users, items, vals


# ---------------------------------------------------------------------- cross-validation


class RatingSplitCV:
    """K-fold over *ratings* within each user, for ``GridSearchCV`` / ``cross_val_score``.

    scikit-learn's model selection indexes the rows of ``X``; for a rating model the samples must
    be ratings, not users (holding out whole users and scoring them would need their factors
    projected from the held-out ratings themselves: the test data would leak into the prediction).
    So pass the ratings as a long-format DataFrame (one row per rating, columns ``user`` / ``item``
    / ``rating``: see :data:`USER_COL`); this splitter assigns each user's ratings round-robin (in a
    random order) to the folds, so every fold's test ratings belong to users who keep training
    ratings: a user with ``m >= 2`` ratings has at most ``ceil(m / n_splits) <= m - 1`` of them in
    any test fold, and a user with a single rating is never tested. The models' ``score(X)`` then
    predicts each held-out rating from the fitted user and item factors (negative RMSE).

    Example::

        from sklearn.model_selection import GridSearchCV
        from privrec.data import RatingSplitCV
        from privrec.models import ALS

        search = GridSearchCV(ALS(), {"regularization": [5.0, 20.0]}, cv=RatingSplitCV(3, random_state=0))
        search.fit(ratings_df)            # DataFrame with columns user, item, rating

    Note that choosing hyper-parameters on private data is itself a use of that data that no
    ledger accounts for (see ``privrec.tuning.auto_config``).
    """

    n_splits: int
    user_col: Hashable
    shuffle: bool
    random_state: Any  # anything numpy.random.default_rng accepts (an int seed, None, ...)

    def __init__(self, n_splits: int = 5, *, user_col=USER_COL, shuffle: bool = True, random_state=None):
        if isinstance(n_splits, bool) or not isinstance(n_splits, numbers.Integral) or n_splits < 2:
            raise ValueError(f"n_splits must be an integer >= 2, got {n_splits!r}")
        self.n_splits = int(n_splits)
        self.user_col = user_col
        self.shuffle = shuffle
        self.random_state = random_state

    def __repr__(self) -> str:
        return (
            f"RatingSplitCV(n_splits={self.n_splits}, user_col={self.user_col!r}, shuffle={self.shuffle}, "
            f"random_state={self.random_state!r})"
        )

    def get_n_splits(self, X=None, y=None, groups=None) -> int:
        return self.n_splits

    def _folds(self, X) -> np.ndarray:
        if not isinstance(X, pd.DataFrame):
            raise ValueError(
                f"RatingSplitCV splits the rows of a long-format rating DataFrame (one row per rating), got "
                f"{type(X).__name__}: scikit-learn indexes the rows of X, which for a users x items matrix are "
                f"users, not ratings. Convert with Interactions.to_pandas() and rename the columns to "
                f"{USER_COL!r}, {ITEM_COL!r}, {RATING_COL!r}"
            )
        users = _column(X, self.user_col, "user_col")
        codes, _ = _factorize_ids(users, f"user column {self.user_col!r}")
        n = len(codes)
        rng = np.random.default_rng(self.random_state)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        # rank of each rating within its user (in the shuffled order)
        by_user = order[np.argsort(codes[order], kind="stable")]
        counts = np.bincount(codes, minlength=int(codes.max()) + 1 if n else 0)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(n, dtype=np.int64)
        rank[by_user] = np.arange(n) - np.repeat(starts, counts)
        offset = rng.integers(0, self.n_splits, size=len(counts)) if self.shuffle else np.zeros(len(counts), np.int64)
        folds = (rank + offset[codes]) % self.n_splits
        folds[counts[codes] < 2] = -1  # a single rating always stays in training
        return folds

    def split(self, X, y=None, groups=None):
        """Yield ``(train_rows, test_rows)`` integer positions into the rows of ``X``."""
        folds = self._folds(X)
        rows = np.arange(len(folds))
        for k in range(self.n_splits):
            test = folds == k
            if not test.any():
                raise ValueError(
                    f"fold {k} has no test ratings: too few users with two or more ratings for n_splits={self.n_splits}"
                )
            yield rows[~test], rows[test]


__all__ = [
    "USER_COL",
    "ITEM_COL",
    "RATING_COL",
    "from_pandas",
    "from_parquet",
    "ReaderOptions",
    "RatingSplitCV",
    "interactions_from_frame",
    "frame_triples",
    "vocabulary_fingerprint",
]
