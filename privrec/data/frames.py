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
rating*, which is itself a statistic of the data. A private ``DPALS`` fitted on them selects its
items privately by default (add/remove DP); with ``axes="warn"`` it fits them, warns
(``ItemCatalogueWarning``), and its saved file records the item axis -- rows and ids -- as not
public; give the public vocabulary (``item_ids=`` here) to have it covered. See
``FactorizationModel.save``.

The id vocabularies live in :mod:`privrec.data.vocabulary`, the columns and their values in
:mod:`privrec.data.columns`, :class:`RatingSplitCV` in :mod:`privrec.data.rating_cv`; their names
are importable from here, as before the split.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import pandas as pd

from privrec._validation import unhashable_id_error
from privrec.data.columns import (  # noqa: F401 (re-exported: importable from here, as before the split)
    _NOT_RATINGS,
    ITEM_COL,
    RATING_COL,
    USER_COL,
    _check_single_column,
    _column,
    _epoch_seconds,
    _missing_column,
    _not_real,
    _rating_values,
    check_real_objects,
    rating_array,
)
from privrec.data.interactions import DUPLICATE_POLICIES, Interactions
from privrec.data.rating_cv import RatingSplitCV
from privrec.data.vocabulary import (  # noqa: F401 (re-exported: importable from here, as before the split)
    _codes_in_vocabulary,
    _factorize_ids,
    _id_values,
    _indexer,
    _tidy_uniques,
    _vocabulary_index,
    check_no_missing_ids,
    check_ordered_ids,
    vocabulary_fingerprint,
)

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+; only the type checker needs it
    from typing import Unpack


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
    from privrec._optional import require

    pa = require("pyarrow", "from_parquet")
    pq = require("pyarrow.parquet", "from_parquet")

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
