"""The data a command reads: the data options, their checks, loading and splitting.

The ``data`` argument group (``--dataset`` / ``--ratings FILE`` and its columns, ids and
catalogues, ``--seed``, the split protocol), the checks of those options, reading the user's own
CSV / Parquet ratings file (:func:`load_ratings_file`) or a known dataset, the train/test split,
and reading a saved model file.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from .._optional import require
from .._validation import MAX_RATING_MAGNITUDE, check_ids_not_nul_suffixed
from ..evaluation import experiment as X
from ._paths import check_distinct_paths
from ._running import CommandError, _one_line, _warn

#: the range of the ids read with --numeric-ids (numpy int64)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _data_args(p, split: bool = True) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default=None, help=f"dataset name (default: the generated {X.DEFAULT_DATASET})")
    g.add_argument("--data-dir", dest="data_dir", default=None, help="local folder holding the dataset files")
    g.add_argument(
        "--ratings",
        default=None,
        metavar="FILE",
        help="your own interactions: a .csv or .parquet file with one row per (user, item, rating)",
    )
    g.add_argument("--user-col", dest="user_col", default=None, help="user id column of --ratings (default 'user')")
    g.add_argument("--item-col", dest="item_col", default=None, help="item id column of --ratings (default 'item')")
    g.add_argument(
        "--rating-col",
        dest="rating_col",
        default=None,
        help="rating column of --ratings (default 'rating'); an empty string means every row is a "
        "positive interaction (implicit feedback)",
    )
    g.add_argument(
        "--numeric-ids",
        dest="numeric_ids",
        action="store_true",
        default=None,
        help="read the user and item ids of a CSV --ratings file (and of --users / --items) as integers, so "
        "007 and 7 are one id; by default they are text, 007 and 7 are two ids (a Parquet file's ids keep "
        "their column types)",
    )
    g.add_argument(
        "--duplicates",
        choices=("error", "last", "first", "sum", "max"),
        default=None,
        help="what to do with repeated (user, item) rows in --ratings: error (default), keep the last / "
        "first / largest, or sum them (play counts)",
    )
    g.add_argument(
        "--items",
        default=None,
        metavar="FILE",
        help="the public item catalogue of --ratings: a text file with one item id per line (items without "
        "ratings get rows too; without it a private fit selects its items privately: add/remove DP)",
    )
    g.add_argument(
        "--users",
        default=None,
        metavar="FILE",
        help="the public user roster of --ratings: a text file with one user id per line (the guarantee is "
        "stated for zero-out of one user's ratings over a public roster; without it the number of users is "
        "released as a noisy count: add/remove DP)",
    )
    g.add_argument("--scale", type=float, default=None, help="shrink a generated dataset (e.g. 0.1)")
    g.add_argument(
        "--seed", type=int, default=0, help="seed of the generated data and of the train/test split (public; default 0)"
    )
    if split:
        g.add_argument(
            "--protocol",
            choices=X.PROTOCOLS,
            default=None,
            help="random (rating prediction, RMSE) or heldout-users (top-k, Recall@20); default: the "
            "dataset's usual protocol",
        )
        g.add_argument(
            "--heldout-users",
            dest="heldout_users",
            type=int,
            default=None,
            help="number of held-out test users (heldout-users protocol)",
        )


def _check_data_args(args) -> None:
    """Reject contradictory data options; warn about ignored ones. Also refuses, before anything is
    read or written, two file options naming the same file when one of them is written
    (:func:`privrec.commands._paths.check_distinct_paths`: ``--output`` and ``--model-card``,
    ``--plot``, ``--budget-file``, or an input such as ``--ratings`` / ``--model``)."""
    if not hasattr(args, "_warnings"):
        args._warnings = []
    check_distinct_paths(args)
    if args.ratings is not None:
        if args.dataset is not None:
            raise CommandError("use either --dataset or --ratings, not both")
        if args.scale is not None:
            raise CommandError("--scale applies to the generated datasets only, not to a --ratings file")
        if args.data_dir is not None:
            _warn(args, "--data-dir is ignored with --ratings")
        if getattr(args, "numeric_ids", None) and _is_parquet(args.ratings):
            _warn(args, "--numeric-ids applies to CSV files; the ids of a Parquet file keep their column types")
    else:
        given = [
            f
            for f in ("user_col", "item_col", "rating_col", "duplicates", "items", "users", "numeric_ids")
            if getattr(args, f, None) is not None
        ]
        if given:
            flags = ", ".join("--" + f.replace("_", "-") for f in given)
            _warn(args, f"{flags} only appl{'y' if len(given) > 1 else 'ies'} to --ratings; ignored")
    if getattr(args, "heldout_users", None) is not None and args.heldout_users < 1:
        raise CommandError(f"--heldout-users must be >= 1, got {args.heldout_users}")


def _load(args):
    """``(name, Interactions)`` from ``--ratings`` or ``--dataset``."""
    if args.ratings is not None:
        numeric = bool(getattr(args, "numeric_ids", False))
        kinds = ratings_id_kinds(args.ratings, args.user_col or "user", args.item_col or "item", numeric)
        users, items = getattr(args, "users", None), getattr(args, "items", None)
        return Path(args.ratings).name, load_ratings_file(
            args.ratings,
            args.user_col or "user",
            args.item_col or "item",
            "rating" if args.rating_col is None else args.rating_col,
            duplicates=args.duplicates or "error",
            user_ids=read_id_list(users, "--users", kinds["user"]) if users else None,
            item_ids=read_id_list(items, "--items", kinds["item"]) if items else None,
            numeric_ids=numeric,
            rating_range=getattr(args, "rating_range", None),
        )
    name = args.dataset or X.DEFAULT_DATASET
    data = X.load_data(name, args.data_dir, args.scale, seed=args.seed)
    _check_rating_values(data, f"dataset {name}", getattr(args, "rating_range", None))
    return name, data


def _check_ratings_path(path: Path, flag: str = "--ratings") -> None:
    """A ``--ratings`` / ``--users`` / ``--items`` path must be an existing, non-empty regular file
    (symbolic links followed): a folder, a device such as ``/dev/null``, a FIFO or a socket is
    named as such -- and never opened, so a FIFO cannot block the command."""
    import os
    import stat

    from .._io import _not_regular

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CommandError(f"{flag} file not found: {path}") from None
    except OSError as exc:
        raise CommandError(f"{flag} {path}: cannot read it ({exc.strerror or _one_line(exc)})") from None
    if stat.S_ISDIR(st.st_mode):
        raise CommandError(f"{flag} {path} is a directory, not a file")
    what = _not_regular(st.st_mode) if not stat.S_ISREG(st.st_mode) else None
    if what is not None:
        raise CommandError(f"{flag} {path} is {what}, not a regular file")
    if st.st_size == 0:
        raise CommandError(f"{flag} {path} is an empty file")


#: what needs pyarrow (the optional extra privrec[parquet]) here, as its missing-extra error says it
_PARQUET_FEATURE = "a Parquet --ratings file"


def _is_parquet(path) -> bool:
    return Path(path).suffix.lower() in (".parquet", ".pq")


def ratings_id_kinds(path, user_col: str, item_col: str, numeric_ids: bool = False) -> dict[str, str]:
    """How the ids of a ``--ratings`` file are typed, by ``"user"`` / ``"item"``: ``"int"`` or
    ``"str"``. A CSV's ids are text (``007`` and ``7`` are two ids) unless ``numeric_ids``; a
    Parquet file's follow its column types (integer columns ``"int"``, everything else ``"str"``).
    The ``--users`` / ``--items`` files are read with the same types, so their ids match."""
    kinds = {"user": "int" if numeric_ids else "str", "item": "int" if numeric_ids else "str"}
    if _is_parquet(path) and Path(path).is_file():
        pa = require("pyarrow", _PARQUET_FEATURE)
        pq = require("pyarrow.parquet", _PARQUET_FEATURE)

        try:
            schema = pq.read_schema(path)
        except Exception:  # reported by load_ratings_file
            return kinds
        for which, col in (("user", user_col), ("item", item_col)):
            if col in schema.names:
                t = schema.field(col).type
                t = t.value_type if pa.types.is_dictionary(t) else t
                kinds[which] = "int" if pa.types.is_integer(t) else "str"
    return kinds


def _integer_ids(values: list, what: str, where) -> list:
    """``values`` (text) as Python ints; ``CommandError`` naming the first that is not an integer or
    is outside the 64-bit integer range of ``--numeric-ids`` ids (``where(k)``: its location, e.g. a
    line number)."""
    out = []
    for k, v in enumerate(values):
        text = str(v).strip()
        try:
            n = int(text)
        except ValueError:
            raise CommandError(
                f"{where(k)}: {what} {str(v)[:40]!r} is not an integer (ids are declared numeric with --numeric-ids)"
            ) from None
        if not _INT64[0] <= n <= _INT64[1]:
            raise CommandError(
                f"{where(k)}: {what} {text[:40]!r} is outside the 64-bit integer range of --numeric-ids ids "
                f"([{_INT64[0]}, {_INT64[1]}]); read the ids as text (without --numeric-ids)"
            )
        out.append(n)
    return out


def read_id_list(path, flag: str, kind: str = "str"):
    """Ids from a text file with one id per line (a public catalogue or roster): text, or integers
    when ``kind == "int"`` (the types of the ratings file's ids: :func:`ratings_id_kinds`), so they
    compare equal to the ids of the ratings. A blank line, a repeated id or (``int``) a
    non-integer are errors naming the line."""
    import pandas as pd

    path = Path(path)
    _check_ratings_path(path, flag)
    try:
        col = pd.read_csv(
            path, header=None, sep="\t", skip_blank_lines=False, dtype=str, keep_default_na=False, na_values=[""]
        ).iloc[:, 0]
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {flag} file {path.name}: {_one_line(exc)}") from None
    if col.isna().any():
        raise CommandError(f"{path.name}: line {int(np.flatnonzero(col.isna().to_numpy())[0]) + 1} is blank ({flag})")
    values = col.tolist()
    if kind == "int":
        values = _integer_ids(values, "id", lambda k: f"{path.name}: line {k + 1} ({flag})")
    try:
        check_ids_not_nul_suffixed(values, f"{flag} file {path.name}")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    dup = pd.Series(values, dtype=object).duplicated().to_numpy()
    if dup.any():
        line = int(np.flatnonzero(dup)[0]) + 1
        raise CommandError(f"{path.name}: line {line} repeats the id {str(values[line - 1])!r} ({flag})")
    return values


def _csv_problem(path: Path, sep: str, header: list, wanted: list) -> tuple[int, str] | None:
    """``(line, reason)`` of the first data row of a CSV with a wrong number of fields or an empty
    wanted field (blank lines are skipped, as pandas does); ``None`` if there is none. Only run
    after pandas reported a problem, to name the line."""
    import csv

    positions = [(header.index(c), c) for c in wanted]
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh, delimiter=sep)
        next(reader, None)
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                return reader.line_num, f"expected {len(header)} fields (as the header), found {len(row)}"
            for pos, col in positions:
                if row[pos].strip() == "":
                    return reader.line_num, f"empty {col!r} field"
    return None


def _read_csv_ratings(path: Path, sep: str, wanted: list, id_cols: list):
    """The wanted columns of a CSV ratings file: ids as text, every row checked to have as many
    fields as the header (a row with extra or missing fields is an error naming its line)."""
    import pandas as pd

    try:
        header = list(pd.read_csv(path, sep=sep, nrows=0).columns)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {path.name} as CSV: {_one_line(exc)}") from None
    _check_columns(header, wanted, path)
    if len(set(header)) != len(header):
        repeated = sorted({str(c) for c in header if header.count(c) > 1})
        raise CommandError(f"{path.name}: the header repeats the column name(s) {', '.join(repeated)}")

    def fail(exc) -> CommandError:
        bad = _csv_problem(path, sep, header, wanted)
        if bad is not None:
            return CommandError(f"{path.name}, line {bad[0]}: {bad[1]}")
        return CommandError(f"cannot read {path.name} as CSV: {_one_line(exc)}")

    try:
        with warnings.catch_warnings():
            # index_col=False: never take the first column as an index when rows have one field too
            # many (pandas then warns and drops fields: an error here)
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(
                path,
                sep=sep,
                index_col=False,
                dtype=dict.fromkeys(id_cols, str),
                keep_default_na=False,
                na_values={c: [""] for c in wanted},
            )
    except (pd.errors.ParserError, pd.errors.ParserWarning, UnicodeDecodeError) as exc:
        raise fail(exc) from None
    df = df[wanted]
    if df.isna().to_numpy().any():
        raise fail(ValueError("missing values"))
    return df


def load_ratings_file(
    path,
    user_col: str = "user",
    item_col: str = "item",
    rating_col: str | None = "rating",
    duplicates: str = "error",
    user_ids=None,
    item_ids=None,
    numeric_ids: bool = False,
    rating_range: tuple[float, float] | None = None,
):
    """Read a CSV or Parquet file of (user, item[, rating]) rows as ``Interactions``.

    ``rating_col`` empty or ``None``: every row is a positive interaction (value 1).
    ``duplicates``: policy for repeated (user, item) rows (``"error"`` rejects them). A CSV's ids
    are read as text (``007`` and ``7`` are two users) unless ``numeric_ids`` (then every id must
    be a 64-bit integer, and ``007`` is ``7``); a Parquet file's ids keep their column types. Every
    CSV row must have as many fields as the header (a line with extra or missing fields is an error
    naming it).

    Every rating of the whole file, after ``duplicates`` resolved repeated rows (a sum may leave
    the scale), is checked before anything is split: its magnitude is at most
    :data:`privrec._validation.MAX_RATING_MAGNITUDE` and, with ``rating_range=(low, high)`` (the
    public scale, ``--rating-range``), it lies in ``[low, high]``. A failure is one ``CommandError``
    naming the file, the line(s) (a Parquet file: the row) and the value -- whatever the split
    would have done with that rating.
    """
    from .. import data as D

    path = Path(path)
    _check_ratings_path(path)
    rating_col = rating_col or None
    wanted = [c for c in (user_col, item_col, rating_col) if c]
    # the same reader options for from_parquet and from_pandas
    options = dict(
        user_col=user_col,
        item_col=item_col,
        rating_col=rating_col,
        duplicates=duplicates,
        name=path.stem,
        user_ids=user_ids,
        item_ids=item_ids,
    )
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv", ".tsv", ".txt"):
        raise CommandError(f"--ratings must be a .csv, .tsv or .parquet file, got {path.name!r}")
    if suffix in (".parquet", ".pq"):
        pq = require("pyarrow.parquet", _PARQUET_FEATURE)

        try:
            columns = list(pq.read_schema(path).names)
        except Exception as exc:  # Arrow errors are not ValueErrors
            raise CommandError(f"cannot read {path.name} as Parquet: {_one_line(exc)}") from None
        _check_columns(columns, wanted, path)
        from_parquet = getattr(D, "from_parquet", None)
        if from_parquet is not None:
            data = from_parquet(path, **options)
            if rating_col:
                _check_rating_values(data, path.name, rating_range, _parquet_locator(path, user_col, item_col))
            return data
        import pandas as pd

        df = pd.read_parquet(path, columns=wanted)
        locate = _parquet_locator(path, user_col, item_col)
    else:
        sep = "\t" if suffix == ".tsv" else ","
        df = _read_csv_ratings(path, sep, wanted, [user_col, item_col])
        if numeric_ids:
            for col in (user_col, item_col):
                try:
                    df[col] = df[col].str.strip().astype(np.int64)
                except (ValueError, OverflowError):  # name the first bad id (OverflowError: beyond int64)
                    _integer_ids(df[col].tolist(), f"{col!r} id", lambda k: f"{path.name}, data row {k + 1}")
                    raise
        if rating_col:
            _check_csv_ratings(df, rating_col, path, sep)
        locate = _csv_locator(path, sep, df, user_col, item_col)
    from_pandas = getattr(D, "from_pandas", None)
    if from_pandas is not None:
        data = from_pandas(df, **options)
    else:
        values = None
        if rating_col:
            from ..data.frames import rating_array

            values = rating_array(df[rating_col], f"rating column {rating_col!r}")
            if np.isnan(values).any():
                raise CommandError(f"{path.name}: column {rating_col!r} has missing values")
        data = D.Interactions.from_arrays(
            df[user_col].to_numpy(), df[item_col].to_numpy(), values, duplicates=duplicates, name=path.stem
        )
    if rating_col:
        _check_rating_values(data, path.name, rating_range, locate)
    return data


def _check_csv_ratings(df, rating_col, path: Path, sep: str) -> None:
    """Every rating of a CSV file is a finite number: else a ``CommandError`` naming the file, the
    line and the value (text such as ``five``, or ``nan`` / ``inf``)."""
    from ..data.frames import rating_array

    try:
        values = rating_array(df[rating_col], f"rating column {rating_col!r}")
    except ValueError:  # name the first value that is not a number, and its line
        import pandas as pd

        text = pd.to_numeric(df[rating_col], errors="coerce").isna().to_numpy()
        if not text.any():
            raise
        k = int(np.flatnonzero(text)[0])
        raise CommandError(
            f"{path.name}, line {_CsvLines(path, sep).of(k)}: rating column {rating_col!r} must be numeric, got "
            f"{str(df[rating_col].iloc[k])[:40]!r}"
        ) from None
    bad = ~np.isfinite(values)
    if bad.any():  # e.g. the text "nan" or "inf": not a rating
        k = int(np.flatnonzero(bad)[0])
        raise CommandError(
            f"{path.name}, line {_CsvLines(path, sep).of(k)}: rating {str(df[rating_col].iloc[k])[:40]!r} "
            f"(column {rating_col!r}) is not a finite number"
        )


class _CsvLines:
    """Line numbers (1-based, as an editor shows them) of the data rows of a CSV file as pandas
    read them: the header is line 1, blank lines are skipped, a quoted field may span lines. The
    file is scanned once, on the first lookup (only to word an error)."""

    def __init__(self, path: Path, sep: str):
        self.path, self.sep = path, sep
        self._lines: list[int] | None = None

    def of(self, row: int) -> str:
        if self._lines is None:
            import csv

            self._lines = []
            with open(self.path, newline="", encoding="utf-8", errors="replace") as fh:
                reader = csv.reader(fh, delimiter=self.sep)
                next(reader, None)
                start = reader.line_num
                for fields in reader:
                    if fields:
                        self._lines.append(start + 1)
                    start = reader.line_num
        return str(self._lines[row]) if 0 <= row < len(self._lines) else f"? (data row {row + 1})"


def _csv_locator(path: Path, sep: str, df, user_col, item_col):
    """``(user id, item id) -> "line N"`` / ``"lines N and M"`` of a CSV ratings file read as ``df``."""
    lines = _CsvLines(path, sep)

    def locate(user, item) -> str:
        rows = np.flatnonzero((df[user_col].to_numpy() == user) & (df[item_col].to_numpy() == item))
        return _plural("line", [lines.of(int(k)) for k in rows])

    return locate


def _parquet_locator(path: Path, user_col, item_col):
    """``(user id, item id) -> "row N"`` (1-based) of a Parquet ratings file."""

    def locate(user, item) -> str:
        import pyarrow.parquet as pq

        t = pq.read_table(path, columns=list(dict.fromkeys([user_col, item_col]))).to_pandas()
        rows = np.flatnonzero((t[user_col].to_numpy() == user) & (t[item_col].to_numpy() == item))
        return _plural("row", [str(int(k) + 1) for k in rows])

    return locate


def _plural(word: str, places: list[str]) -> str:
    if not places:
        return f"{word} ?"
    if len(places) == 1:
        return f"{word} {places[0]}"
    shown = places[:5] + (["..."] if len(places) > 5 else [])
    return f"{word}s {', '.join(shown[:-1])} and {shown[-1]}"


def _check_rating_values(data, where: str, rating_range=None, locate=None) -> None:
    """Every stored rating of ``data`` (``Interactions``, duplicates already resolved) has a
    magnitude of at most :data:`MAX_RATING_MAGNITUDE` and, with ``rating_range``, lies in it; else
    one ``CommandError`` naming ``where`` (the file), the place (``locate(user id, item id)``) and
    the value. Run on the whole data before the split, so that the outcome never depends on which
    part a rating lands in."""
    m = data.matrix
    vals = np.asarray(m.data, dtype=np.float64)
    if vals.size == 0:
        return
    checks = [
        (
            np.abs(vals) > MAX_RATING_MAGNITUDE,
            f"is above the largest magnitude privrec accepts ({MAX_RATING_MAGNITUDE:g}; squared and summed such "
            "ratings overflow the float32 Gramians): rescale the ratings",
        )
    ]
    if rating_range is not None:
        lo, hi = rating_range
        outside = (vals < lo) | (vals > hi)
        checks.append(
            (
                outside,
                f"is outside the declared rating_range [{lo:g}, {hi:g}] (--rating-range): fix the data or declare "
                "the right range",
            )
        )
    for bad, why in checks:
        if not bad.any():
            continue
        k = int(np.flatnonzero(bad)[0])
        row = int(np.searchsorted(m.indptr, k, side="right") - 1)
        user, item = np.asarray(data.user_ids)[row], np.asarray(data.item_ids)[m.indices[k]]
        place = ""
        if locate is not None:
            try:
                place = locate(user, item)
            except Exception:  # only the wording of the error: never hide it
                place = ""
        merged = place.startswith(("lines ", "rows "))
        policy = (data.info or {}).get("duplicate_policy") if hasattr(data, "info") else None
        value = f"{float(vals[k]):g}"
        what = (
            f"the rating of user {_show(user)}, item {_show(item)}, {value} after --duplicates {policy},"
            if merged and policy
            else f"rating {value} (user {_show(user)}, item {_show(item)})"
        )
        more = int(np.count_nonzero(bad)) - 1
        tail = f" ({more} more rating(s) too)" if more else ""
        raise CommandError(f"{where}{', ' + place if place else ''}: {what} {why}{tail}")


def _show(v) -> str:
    return repr(v.item() if isinstance(v, np.generic) else v)[:40]


def _check_columns(columns, wanted, path) -> None:
    missing = [c for c in wanted if c not in columns]
    if missing:
        flag = {0: "--user-col", 1: "--item-col", 2: "--rating-col"}
        hint = ", ".join(f"{c!r} ({flag[wanted.index(c)]})" for c in missing)
        raise CommandError(f"{path.name} has no column {hint}; its columns are: {', '.join(map(str, columns))}")


def _protocol(args, name) -> str:
    if args.protocol:
        return args.protocol
    if args.ratings is not None:
        return "heldout-users" if args.rating_col == "" else "random"
    return X.default_protocol(name)


def _split(args, data, name):
    protocol = _protocol(args, name)
    if protocol == "random" and args.heldout_users is not None:
        _warn(args, "--heldout-users is ignored by the random protocol")
    # a file without ratings: every row is a positive, nothing may be binarised away (the default
    # threshold of make_split, 3.5 for small integer values, would drop every implicit 1)
    implicit_file = protocol == "heldout-users" and args.ratings is not None and args.rating_col == ""
    return X.make_split(
        data,
        protocol,
        seed=args.seed,
        heldout_users=args.heldout_users,
        binarize_threshold=0.0 if implicit_file else None,
    )


def _load_model(path):
    from ..models import load_model

    return load_model(path)
