"""The columns of a long-format rating table: their default names, checks that a named column is
there exactly once, and the conversion of its values -- ratings as real numbers (datetimes, complex
numbers and booleans refused), timestamps as seconds since the epoch. Importable from
:mod:`privrec.data.frames` too.
"""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd

#: default column names of a long-format rating table (module-level, estimator-independent)
USER_COL = "user"
ITEM_COL = "item"
RATING_COL = "rating"


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
