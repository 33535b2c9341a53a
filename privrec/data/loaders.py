"""Loaders, one per source format of the benchmark datasets (Krichene et al. 2023, App. D, and others).

* MovieLens 100K: ``u.data`` (``user \\t item \\t rating \\t timestamp``), ``u.item`` (``|``-separated,
  latin-1: id|title|release date|video date|IMDb URL|19 genre flags), ``u.genre`` (optional).
* MovieLens 1M / 10M: ``ratings.dat`` (``UserID::MovieID::Rating::Timestamp``), ``movies.dat``
  (``MovieID::Title::Genres``; 1M is latin-1, 10M utf-8).
* MovieLens 20M / 25M / latest / latest-small: ``ratings.csv`` (header
  ``userId,movieId,rating,timestamp``), ``movies.csv`` (``movieId,title,genres``, quoted titles).
* Million Song Dataset, Echo Nest Taste Profile: ``train_triplets.txt`` (``user \\t song \\t count``,
  string ids).
* Last.fm HetRec 2011: ``user_artists.dat`` (``userID \\t artistID \\t weight``, with or without a
  header line), ``artists.dat`` (``id \\t name \\t url \\t pictureURL``, header) for titles.

The fast path parses with pyarrow's multi-threaded C++ CSV reader (pyarrow is the optional extra
``privrec[parquet]``: without it these loaders raise a one-line ``ImportError`` naming it; the
generated datasets and ``from_pandas`` / ``--ratings x.csv`` need no pyarrow). Any parse failure, and any NaN
or non-numeric value, is turned into a ``ValueError`` naming the file and the 1-based line number;
to find that line a plain line scan is run, on the error path only. Separators are exact (``::``
is two colons), a UTF-8 byte-order mark is skipped, a header line is recognised only when it is
the expected column names (so a corrupt first row is reported, never swallowed), and every value
must lie in the dataset's declared range (:data:`RATING_RANGES`: MovieLens 100K/1M integers 1-5,
10M/20M/25M/latest 0.5-5 in half steps, Last.fm / MSD positive integer counts).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from privrec._optional import require
from privrec.data.interactions import Interactions

#: what needs pyarrow here, as the missing-extra error says it
_ARROW_FEATURE = "reading the benchmark datasets (privrec.data.loaders)"


class DatasetNotFoundError(FileNotFoundError, ValueError):
    """A dataset file is missing. Also a ``ValueError`` (bad input), so callers can catch either."""


def missing_file_error(path, dataset: str | None = None) -> DatasetNotFoundError:
    """Error naming the expected file and how to obtain it."""
    how = (
        f"run `privrec datasets prepare {dataset} --download` or point --data-dir / data_dir= at a folder holding it"
        if dataset
        else "point data_dir= at a folder holding it"
    )
    return DatasetNotFoundError(f"expected file not found: {path}; {how}")


# ------------------------------------------------------------------------------- valid values


@dataclass(frozen=True)
class RatingRange:
    """Declared valid values of a dataset's ratings or counts.

    A value ``v`` is valid when ``low <= v <= high`` (``high`` None: no upper bound) and, with a
    ``step``, ``(v - low) / step`` is a whole number. ``feedback`` is ``"explicit"`` (ratings) or
    ``"implicit"`` (play counts).
    """

    low: float
    high: float | None
    step: float | None
    feedback: str
    description: str

    def valid(self, values) -> np.ndarray:
        """Boolean mask of the valid entries of ``values`` (vectorised)."""
        v = np.asarray(values, dtype=np.float64)
        ok = np.isfinite(v) & (v >= self.low)
        if self.high is not None:
            ok &= v <= self.high
        if self.step:
            q = (v - self.low) / self.step
            ok &= q == np.round(q)
        return ok

    def __contains__(self, value) -> bool:
        return bool(self.valid(np.array([value], dtype=np.float64))[0])


STARS_1_TO_5 = RatingRange(1.0, 5.0, 1.0, "explicit", "integers 1-5")
HALF_STARS = RatingRange(0.5, 5.0, 0.5, "explicit", "0.5-5 in steps of 0.5")
POSITIVE_COUNTS = RatingRange(1.0, None, 1.0, "implicit", "positive integer counts")

#: Declared valid values per real dataset (also exposed as ``DatasetInfo.rating_range``).
RATING_RANGES: dict[str, RatingRange] = {
    "ml-100k": STARS_1_TO_5,
    "ml-1m": STARS_1_TO_5,
    "ml-10m": HALF_STARS,
    "ml-20m": HALF_STARS,
    "ml-25m": HALF_STARS,
    "ml-latest": HALF_STARS,
    "ml-latest-small": HALF_STARS,
    "lastfm-2k": POSITIVE_COUNTS,
    "msd": POSITIVE_COUNTS,
}


def _range_for(name: str, rating_range, fallback: RatingRange) -> RatingRange:
    if rating_range is None:
        return RATING_RANGES.get(name, fallback)
    if not isinstance(rating_range, RatingRange):
        raise ValueError(f"rating_range must be a privrec.data.loaders.RatingRange or None, got {rating_range!r}")
    return rating_range


def _check_values(path: Path, values: np.ndarray, valid: RatingRange, column: str, skip: int, dataset: str) -> None:
    """``ValueError`` naming the first line whose value is outside the declared range."""
    ok = valid.valid(values)
    if not ok.all():
        bad = np.flatnonzero(~ok)
        row = int(bad[0])
        v = values[row]
        more = f" ({len(bad)} such lines)" if len(bad) > 1 else ""
        raise ValueError(
            f"{path}, line {row + skip + 1}: {column} {v:g} is outside the valid values of {dataset} "
            f"({valid.description}){more}"
        )


# ------------------------------------------------------------------------------- parsing core

_INT = "int"
_FLOAT = "float"
_STR = "str"
_BOM = "\ufeff"


def _check_field(value: str, kind: str) -> str | None:
    if kind == _STR:
        return None if value != "" else "empty field"
    if value != value.strip():
        return f"whitespace around value {value!r}"
    try:
        v = int(value) if kind == _INT else float(value)
    except ValueError:
        return f"{'non-integer' if kind == _INT else 'non-numeric'} value {value!r}"
    if kind == _FLOAT and not math.isfinite(v):
        return f"value {value!r} is NaN or infinite"
    return None


def _scan_for_bad_line(path: Path, sep: str, kinds: list[str | None], skip: int, encoding: str):
    """Return ``(line_number, reason)`` of the first malformed line (or ``None``). Error path only.

    ``sep`` is matched exactly (``"::"`` is two colons; a single colon is not a separator).
    """
    n_fields = len(kinds)
    with open(path, encoding=encoding, errors="replace", newline="") as fh:
        for lineno, line in enumerate(fh, start=1):
            if lineno == 1 and line.startswith(_BOM):
                line = line[1:]
            if lineno <= skip:
                continue
            line = line.rstrip("\r\n")
            fields = line.split(sep)
            if len(fields) != n_fields:
                return lineno, f"expected {n_fields} fields separated by {sep!r}, found {len(fields)}: {line[:80]!r}"
            for value, kind in zip(fields, kinds):
                if kind is None:
                    continue
                reason = _check_field(value, kind)
                if reason:
                    return lineno, reason
    return None


def _read_table(
    path: Path, sep: str, kinds: list[str | None], names: list[str], skip: int = 0, encoding: str = "utf-8"
) -> dict[str, np.ndarray]:
    """Parse a delimited file whose columns are ``kinds`` (None = ignored column).

    Returns numpy arrays for the named (non-ignored) columns. ``sep`` may be ``"::"``: it is read
    as ``":"`` with a column between every two fields that must be empty (typed ``null`` with
    only ``""`` as null value), so ``1:2:3`` can never pass for ``1::2::3`` (the C++ reader only
    takes one-character separators). A UTF-8 byte-order mark is skipped.
    """
    pa = require("pyarrow", _ARROW_FEATURE)
    pc = require("pyarrow.compute", _ARROW_FEATURE)
    pacsv = require("pyarrow.csv", _ARROW_FEATURE)
    if sep == "::":
        raw_kinds: list[str | None] = []
        for i, k in enumerate(kinds):
            if i:
                raw_kinds.append("gap")
            raw_kinds.append(k)
        csv_sep = ":"
    else:
        raw_kinds = list(kinds)
        csv_sep = sep
    cols = [f"c{i}" for i in range(len(raw_kinds))]
    types = {}
    for c, k in zip(cols, raw_kinds):
        if k == _INT:
            types[c] = pa.int64()
        elif k == _FLOAT:
            types[c] = pa.float64()
        elif k == "gap":
            types[c] = pa.null()  # any non-empty text fails the conversion
        elif k in (_STR, None):
            types[c] = pa.string()
    keep = [c for c, k in zip(cols, raw_kinds) if k not in (None, "gap")]
    include = [c for c, k in zip(cols, raw_kinds) if k is not None]
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=cols, skip_rows=skip, encoding=encoding, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(
                delimiter=csv_sep,
                quote_char=False,
                escape_char=False,
                newlines_in_values=False,
                ignore_empty_lines=False,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                include_columns=include,
                null_values=[""],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        bad = _scan_for_bad_line(path, sep, kinds, skip, encoding)
        if bad:
            raise ValueError(f"{path}, line {bad[0]}: malformed line ({bad[1]})") from None
        raise ValueError(f"{path}: could not parse ({str(exc).splitlines()[0]})") from None
    if table.num_rows == 0:
        raise ValueError(f"{path}: no data rows")
    out = {}
    for c, name, kind in zip(keep, names, [k for k in raw_kinds if k not in (None, "gap")]):
        col = table.column(c)
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"{path}, line {row + skip + 1}: missing value in column {name!r}")
        if kind == _STR:
            empty = pc.equal(pc.binary_length(col), 0)
            if pc.any(empty).as_py():
                row = int(np.flatnonzero(empty.to_numpy(zero_copy_only=False))[0])
                raise ValueError(f"{path}, line {row + skip + 1}: empty {name} field")
            out[name] = col
            continue
        arr = col.to_numpy()
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            row = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise ValueError(f"{path}, line {row + skip + 1}: {name} is NaN or infinite")
        out[name] = arr
    return out


def _find(folder, filename: str, dataset: str | None) -> Path:
    folder = Path(folder)
    if folder.is_file() and folder.name == filename:
        return folder
    path = folder / filename
    if not path.is_file():
        raise missing_file_error(path, dataset)
    return path


def _first_line(path: Path, encoding: str = "utf-8") -> str:
    """First line without its line break and without a UTF-8 byte-order mark."""
    with open(path, encoding=encoding, errors="replace") as fh:
        line = fh.readline().rstrip("\r\n")
    return line[1:] if line.startswith(_BOM) else line


def _metadata_for(item_ids: np.ndarray, meta_ids, titles, genres) -> pd.DataFrame:
    idx = pd.Index(np.asarray(meta_ids)).get_indexer(item_ids)
    titles = np.asarray(titles, dtype=object)
    genres = np.asarray(genres, dtype=object)
    found = idx >= 0
    t = np.full(len(item_ids), "", dtype=object)
    g = np.full(len(item_ids), "", dtype=object)
    t[found] = titles[idx[found]]
    g[found] = genres[idx[found]]
    return pd.DataFrame({"item_id": item_ids, "title": t, "genres": g})


def _to_codes(col) -> tuple[np.ndarray, np.ndarray]:
    """Dictionary-encode a pyarrow string column: (codes int64, sorted vocabulary).

    Chunks are encoded in place and their dictionaries unified, so the (possibly GBs of) string
    data is never copied into one contiguous buffer.
    """
    pa = require("pyarrow", _ARROW_FEATURE)
    chunked = col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])
    enc = pa.table({"c": chunked.dictionary_encode()}).unify_dictionaries().column("c")
    chunks = [ch for ch in enc.chunks if len(ch)]
    vocab = np.asarray(chunks[0].dictionary.to_pylist(), dtype=object).astype(str)
    codes = np.concatenate([ch.indices.to_numpy(zero_copy_only=False).astype(np.int64) for ch in chunks])
    order = np.argsort(vocab, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[codes], vocab[order]


# ------------------------------------------------------------------------------- loaders

ML100K_GENRES = [
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
]


def _movielens_ratings(
    path: Path, sep: str, valid: RatingRange, duplicates: str, name: str, skip: int = 0
) -> Interactions:
    """The ``user, item, rating, timestamp`` table every MovieLens release has, as ``Interactions``.

    ``sep`` is the release's separator, ``skip`` its number of header lines; ratings must be in ``valid``.
    """
    t = _read_table(path, sep, [_INT, _INT, _FLOAT, _INT], ["user", "item", "rating", "timestamp"], skip=skip)
    _check_values(path, t["rating"], valid, "rating", skip, name)
    return Interactions.from_arrays(
        t["user"],
        t["item"],
        t["rating"],
        timestamps=t["timestamp"],
        duplicates=duplicates,
        name=name,
        info={"source": str(path)},
    )


def load_movielens_100k(folder, duplicates: str = "last", name: str = "ml-100k", rating_range=None) -> Interactions:
    """MovieLens 100K from ``u.data`` (+ ``u.item`` titles/genres when present).

    Ratings must be integers 1-5 (``rating_range`` overrides; see :data:`RATING_RANGES`).
    """
    path = _find(folder, "u.data", "ml-100k")
    x = _movielens_ratings(path, "\t", _range_for(name, rating_range, STARS_1_TO_5), duplicates, name)
    item_file = path.parent / "u.item"
    if item_file.is_file():
        genre_names = ML100K_GENRES
        gfile = path.parent / "u.genre"
        if gfile.is_file():
            rows = [ln.split("|") for ln in gfile.read_text(encoding="latin-1").splitlines() if "|" in ln]
            if len(rows) == 19:
                genre_names = [r[0] for r in rows]
        ids, titles, genres = [], [], []
        with open(item_file, encoding="latin-1") as fh:  # 1,682 lines: small metadata file
            for lineno, line in enumerate(fh, start=1):
                line = line.rstrip("\r\n")
                if not line:
                    continue
                f = line.split("|")
                if len(f) != 24 or not f[0].strip().isdigit():
                    raise ValueError(
                        f"{item_file}, line {lineno}: malformed line (expected 24 '|'-separated fields, found {len(f)})"
                    )
                ids.append(int(f[0]))
                titles.append(f[1])
                genres.append("|".join(g for g, flag in zip(genre_names, f[5:]) if flag.strip() == "1"))
        x.item_metadata = _metadata_for(x.item_ids, ids, titles, genres)
    return x


def _read_movies_dat(path: Path) -> tuple[list, list, list]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # ML-1M is latin-1
        text = raw.decode("latin-1")
    ids, titles, genres = [], [], []
    for lineno, line in enumerate(text.splitlines(), start=1):  # tens of thousands of lines at most
        if not line:
            continue
        f = line.split("::")
        if len(f) != 3 or not f[0].isdigit():
            raise ValueError(f"{path}, line {lineno}: malformed line (expected MovieID::Title::Genres)")
        ids.append(int(f[0]))
        titles.append(f[1])
        genres.append(f[2])
    return ids, titles, genres


def load_movielens_dat(folder, duplicates: str = "last", name: str = "ml-1m", rating_range=None) -> Interactions:
    """MovieLens 1M / 10M from ``ratings.dat`` (+ ``movies.dat``), exactly ``::``-separated.

    Ratings: integers 1-5 for ``ml-1m``, 0.5-5 in half steps for ``ml-10m`` and other names
    (``rating_range`` overrides).
    """
    path = _find(folder, "ratings.dat", name)
    x = _movielens_ratings(path, "::", _range_for(name, rating_range, HALF_STARS), duplicates, name)
    movies = path.parent / "movies.dat"
    if movies.is_file():
        x.item_metadata = _metadata_for(x.item_ids, *_read_movies_dat(movies))
    return x


def load_movielens_csv(folder, duplicates: str = "last", name: str = "ml-20m", rating_range=None) -> Interactions:
    """MovieLens 20M / 25M / latest / latest-small from ``ratings.csv`` (+ ``movies.csv``).

    The header line is required; ratings must be 0.5-5 in half steps (``rating_range`` overrides).
    """
    path = _find(folder, "ratings.csv", name)
    valid = _range_for(name, rating_range, HALF_STARS)
    header = _first_line(path)  # without a byte-order mark
    if [h.strip() for h in header.split(",")] != ["userId", "movieId", "rating", "timestamp"]:
        raise ValueError(f"{path}, line 1: expected header 'userId,movieId,rating,timestamp', found {header[:80]!r}")
    x = _movielens_ratings(path, ",", valid, duplicates, name, skip=1)
    movies = path.parent / "movies.csv"
    if movies.is_file():
        try:
            m = pd.read_csv(
                movies, dtype={"movieId": "int64", "title": str, "genres": str}, keep_default_na=False, engine="c"
            )
        except (ValueError, pd.errors.ParserError) as exc:
            raise ValueError(f"{movies}: malformed file ({str(exc).splitlines()[0]})") from None
        if list(m.columns) != ["movieId", "title", "genres"]:
            raise ValueError(f"{movies}, line 1: expected header 'movieId,title,genres'")
        x.item_metadata = _metadata_for(x.item_ids, m.movieId.to_numpy(), m.title.to_numpy(), m.genres.to_numpy())
    return x


def load_msd_taste_profile(folder, duplicates: str = "sum", name: str = "msd", rating_range=None) -> Interactions:
    """Echo Nest Taste Profile (Million Song Dataset) ``train_triplets.txt``: string ids, play counts.

    String ids are dictionary-encoded by pyarrow (no Python strings per row); duplicates, if any,
    are summed by default (play counts).
    """
    path = _find(folder, "train_triplets.txt", "msd")
    valid = _range_for(name, rating_range, POSITIVE_COUNTS)
    t = _read_table(path, "\t", [_STR, _STR, _INT], ["user", "item", "count"])
    counts = t["count"]
    _check_values(path, counts, valid, "play count", 0, name)
    u, uvocab = _to_codes(t["user"])
    i, ivocab = _to_codes(t["item"])
    x = Interactions.from_arrays(u, i, counts, duplicates=duplicates, name=name, info={"source": str(path)})
    # every code occurs, so the sorted unique codes are 0..V-1: map them back to the string ids
    return Interactions(x.matrix, uvocab[x.user_ids], ivocab[x.item_ids], name=name, info=x.info)


LASTFM_HEADER = ("userID", "artistID", "weight")


def load_lastfm_hetrec(folder, duplicates: str = "sum", name: str = "lastfm-2k", rating_range=None) -> Interactions:
    """Last.fm HetRec 2011 ``user_artists.dat`` + ``artists.dat`` names as titles.

    The first line is taken as a header only when it is exactly ``userID<TAB>artistID<TAB>weight``
    (case-insensitive); anything else is data, so a corrupt first row is reported, never skipped.
    Weights must be positive integer play counts (``rating_range`` overrides).
    """
    path = _find(folder, "user_artists.dat", "lastfm-2k")
    valid = _range_for(name, rating_range, POSITIVE_COUNTS)
    first = [f.strip().lower() for f in _first_line(path).split("\t")]
    skip = 1 if first == [h.lower() for h in LASTFM_HEADER] else 0
    t = _read_table(path, "\t", [_INT, _INT, _INT], ["user", "item", "weight"], skip=skip)
    _check_values(path, t["weight"], valid, "weight", skip, name)
    x = Interactions.from_arrays(
        t["user"],
        t["item"],
        t["weight"],
        duplicates=duplicates,
        name=name,
        info={"source": str(path), "header": bool(skip)},
    )
    artists = path.parent / "artists.dat"
    if artists.is_file():
        ids, names = [], []
        with open(artists, encoding="utf-8", errors="replace", newline="") as fh:  # ~17k lines
            reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
            for row in reader:
                if row and row[0].strip().isdigit() and len(row) >= 2:
                    ids.append(int(row[0]))
                    names.append(row[1])
        x.item_metadata = _metadata_for(x.item_ids, ids, names, [""] * len(ids))
    return x


__all__ = [
    "DatasetNotFoundError",
    "missing_file_error",
    "RatingRange",
    "RATING_RANGES",
    "STARS_1_TO_5",
    "HALF_STARS",
    "POSITIVE_COUNTS",
    "load_movielens_100k",
    "load_movielens_dat",
    "load_movielens_csv",
    "load_msd_taste_profile",
    "load_lastfm_hetrec",
]
