"""Input readers of :func:`~privrec.distributed.partition_interactions` (one concern: turning
what the user passes -- a Dask DataFrame, a pandas DataFrame or a Parquet file / folder / glob --
into a Dask DataFrame of the wanted columns, refusing bad input before any task runs).

Implements the input checks documented in ``partition_interactions``: Parquet files are listed as
Dask reads a folder and checked footer by footer (:func:`check_parquet_files`: every file holds
the columns, ids of one Arrow kind across files, real-number ratings); an in-memory table is
checked for duplicate column names and unhashable ids; rating columns of datetime, timedelta or
complex dtype are refused from the frame's metadata. Dask is imported only when called.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from privrec._validation import unhashable_id_error

__all__ = ["check_parquet_files"]


def _column_error(col, what: str, columns, where: str = "the table") -> ValueError:
    hint = " (pass rating_col=None for implicit feedback: every row counts 1)" if what == "rating_col" else ""
    return ValueError(f"{what}={col!r} is not a column of {where}; columns are {list(columns)[:20]}{hint}")


def _parquet_files(path: str) -> tuple[Any, list[str]]:
    """``(filesystem, files)`` a Parquet path / folder / glob stands for (as Dask reads a folder:
    every file below it whose name does not start with ``_`` or ``.``); one-line ``ValueError``
    when nothing matches."""
    import fsspec

    fs, _, paths = fsspec.core.get_fs_token_paths(path)
    if not paths:
        raise ValueError(f"no files match {path!r}")
    files: list[str] = []
    for p in paths:
        if fs.isdir(p):
            root = p.rstrip("/")
            for f in sorted(fs.find(p)):
                rel = f[len(root) :].lstrip("/")
                if not any(part.startswith(("_", ".")) for part in rel.split("/")):
                    files.append(f)
        elif fs.exists(p):
            files.append(p)
        else:
            raise ValueError(f"no such file or directory: {p!r}")
    if not files:
        raise ValueError(f"{path!r} holds no Parquet files")
    return fs, files


def _arrow_kind(t) -> str:
    """The kind of an Arrow type that matters for ids and ratings (dictionary-encoded: its values)."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    for kind, test in (
        ("integer", pa.types.is_integer),
        ("float", pa.types.is_floating),
        ("decimal", pa.types.is_decimal),
        ("boolean", pa.types.is_boolean),
        ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x) or str(x) == "string_view"),
        ("binary", lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x) or pa.types.is_fixed_size_binary(x)),
        ("null", pa.types.is_null),
        ("nested", pa.types.is_nested),
    ):
        if test(t):
            return kind
    return str(t)  # timestamp[us], duration[s], date32, ...


def check_parquet_files(path, columns: dict) -> None:
    """Check every file of a Parquet path / folder / glob before Dask reads it (footers only): each
    holds the ``columns`` (``{"user_col": name, ...}``), ids are scalars of one kind in every file
    (integer ids in one file and strings in another used to fail in the shuffle as ``RuntimeError:
    P2P ... unpack``), and ratings are real numbers. One-line ``ValueError`` naming the file."""
    import pyarrow.parquet as pq

    fs, files = _parquet_files(os.fspath(path))
    first: dict = {}
    for f in files:
        try:
            with fs.open(f, "rb") as fh:
                schema = pq.read_schema(fh)
        except Exception as exc:  # Arrow errors are not ValueErrors
            raise ValueError(f"{f}: not a readable Parquet file ({' '.join(str(exc).split())[:200]})") from None
        for what, col in columns.items():
            if col not in schema.names:
                raise _column_error(col, what, schema.names, where=f)
            t = schema.field(col).type
            kind = _arrow_kind(t)
            label = f"{what[: -len('_col')]} column {col!r}"
            if what == "rating_col":
                if kind not in ("integer", "float", "decimal", "boolean", "null"):
                    raise ValueError(f"{label} of {f} has type {t}: ratings must be real numbers")
                kind = "number"  # integer ratings in one file and float ones in another are the same
            elif kind == "nested":
                raise ValueError(
                    f"{label} of {f} holds {t} values: ids must be hashable scalars (strings, integers, ...)"
                )
            if kind == "null":  # an all-null column: reported as missing ids / ratings later
                continue
            seen = first.setdefault(col, (kind, t, f))
            if seen[0] != kind:
                raise ValueError(
                    f"{label} has type {seen[1]} in {seen[2]} but {t} in {f}: every file must store it with one "
                    "type (e.g. cast the ids to strings in every file)"
                )


def _as_dask_frame(data, columns_wanted: Callable[[Sequence], list], required: dict | None = None):
    """A Dask DataFrame with only the wanted columns (``columns_wanted(all_columns)``); a Parquet path
    is checked first (:func:`check_parquet_files` with the ``required`` columns)."""
    import dask.dataframe as dd

    if isinstance(data, (str, os.PathLike)):
        check_parquet_files(data, required or {})
        ddf = dd.read_parquet(os.fspath(data))
        return ddf[columns_wanted(ddf.columns)]
    if isinstance(data, pd.DataFrame):
        if len(data) == 0:
            raise ValueError("the rating table is empty (no rows)")
        cols = columns_wanted(data.columns)
        for what, col in (required or {}).items():  # in memory: checked here, before any task runs
            if not isinstance(data[col], pd.Series):
                raise ValueError(
                    f"{what}={col!r} names {data[col].shape[1]} columns of the table: column names must be unique"
                )
            if what != "rating_col" and data[col].dtype == object:
                error = unhashable_id_error(data[col].to_numpy(), f"{what[: -len('_col')]} column {col!r}")
                if error is not None:
                    raise error
        nparts = max(1, min(64, math.ceil(len(data) / (1 << 20))))
        return dd.from_pandas(data[cols], npartitions=nparts, sort=False)
    if isinstance(data, dd.DataFrame):
        return data[columns_wanted(data.columns)]
    raise ValueError(
        f"data must be a Dask DataFrame, a pandas DataFrame or a Parquet path / glob, got {type(data).__name__}"
    )


def _check_rating_dtype(ddf, rating_col) -> None:
    """Datetime, timedelta and complex rating columns are refused from the frame's metadata (before
    anything is computed); object columns are checked per partition (:func:`build_block`)."""
    if rating_col is None:
        return
    dtype = ddf._meta[rating_col].dtype
    if (
        pd.api.types.is_datetime64_any_dtype(dtype)
        or pd.api.types.is_timedelta64_dtype(dtype)
        or pd.api.types.is_complex_dtype(dtype)
    ):
        raise ValueError(f"rating column {rating_col!r} must be numeric: ratings are real numbers, got dtype {dtype}")
