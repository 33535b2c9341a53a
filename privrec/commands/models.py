"""``privrec fit | evaluate | recommend | similar``: fit, evaluate and query recommenders.

* ``fit``: load a dataset (default: the embedded generated ``synthetic-skew``; ``--ratings FILE``
  for the user's own CSV / Parquet file) -> split by protocol -> fit a method (non-private ALS or
  one of the six private methods) -> evaluate -> print the metrics next to the yardsticks (the
  trivial baseline, the popularity ranking of the fit's own released counts and, when cheap,
  non-private ALS), a per-popularity-bucket table and a plain-language privacy summary with the
  epsilon computed by the accountant. Explicit ratings (random protocol) get Recall@20 beside
  RMSE (relevant = held-out ratings at or above a threshold). ``--json`` prints one JSON object
  instead; ``--output`` saves the model; ``--plot`` draws the bucket table. ``--budget-file``
  charges the fit to a lifetime privacy budget (:class:`privrec.privacy.Budget`): checked before
  the fit, recorded after it, refused (exit status 3) when it would exceed the lifetime epsilon.
* ``evaluate``: evaluate a saved model on the same split (same data options and ``--seed``).
* ``recommend`` / ``similar``: top-N items for a user (projected from their own history: the
  billboard model, no privacy cost) or the items most similar to an item, with titles when the
  dataset has metadata.

Every figure computed from the exact data -- data sizes, evaluation metrics on held-out data, the
per-bucket tables, the non-private baselines, running times -- is not covered by the privacy
guarantee: the text output marks it ``[non-private]`` and ``--json`` keeps it in a separate
``"non_private"`` object, so that what may be published with the release (the model, its privacy
report, the budget) is never mixed with what may not.

Errors a user can cause print one line ``privrec <command>: error: ...`` to stderr and exit
with status 2; a fit refused by its privacy budget prints ``privrec fit: refused: ...`` and exits
with status 3; with ``--json`` a failure also prints ``{"error": "...", "exit_status": N}`` on
stdout. Output paths (``--output``, ``--plot``, a new ``--budget-file``) are checked before any
data is loaded: a folder, a device such as ``/dev/null``, or a folder where no file can be
created fails at once, not after the fit. Warnings (ignored options, a large delta) are one line
each on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import textwrap
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._io import atomic_path
from .._validation import check_ids_not_nul_suffixed
from ..evaluation import experiment as X
from ..evaluation import ranking_metrics
from ..evaluation.protocols import item_bias_of, item_factors_of, project_users
from ..privacy import suggested_delta
from ..privacy.budget import Budget, BudgetExceededError
from ..privacy.ledger import check_pld_delta
from ._parsers import add_command, report_error

# CLI flag -> estimator parameter name (passed only when given; unknown to a method -> error)
_MODEL_FLAGS = {
    "factors": "factors",
    "iterations": "iterations",
    "regularization": "regularization",
    "weight_exponent": "mu",
    "budget": "budget",
    "max_norm": "max_norm",
    "unobserved_weight": "unobserved_weight",
    "rating_range": "rating_range",
}
_FLAG_NAMES = {k: "--" + k.replace("_", "-") for k in _MODEL_FLAGS}
#: training matrices with fewer stored ratings than this get the non-private ALS comparison by default
ALS_COMPARISON_MAX_NNZ = 2_000_000
#: default target epsilon of the private methods
DEFAULT_EPSILON = 5.0
_ADAPTIVE = ("ada-dpals", "ada-dpsgd")
_WIDTH = 100
#: exit status of a fit refused by its privacy budget (2 is a user error, 1 an I/O failure; as privrec.cli)
EXIT_REFUSED = 3
#: k of the ranking metrics
TOP_K = 20
#: default relevance threshold of explicit ratings: the top quarter of the rating scale (4 on 1-5)
RELEVANCE_QUANTILE = 0.75
#: the tag of every printed figure computed from the exact data
MARK = "[non-private]"
#: result keys computed from the exact data; ``--json`` puts them in the ``"non_private"`` object
NON_PRIVATE_KEYS = (
    "n_users",
    "n_items",
    "n_train",
    "fit_seconds",
    "eval_seconds",
    "relevance_threshold",
    "metrics",
    "sliced",
    "bucket_items",
    "baselines",
)
NON_PRIVATE_NOTE = (
    "exact figures computed from the data (sizes, evaluation on the held-out data, per-bucket tables "
    "from exact counts, baselines fitted without noise, running times); the privacy guarantee does not "
    "cover them: do not publish them with the release"
)

FIT_DESCRIPTION = """\
Fit a recommender, evaluate it on held-out data and explain the result.

By default privrec fits the private model ada-dpals at epsilon 5 on a small
generated dataset (synthetic-skew, no download). Use --dataset NAME for a known
dataset (see 'privrec datasets list') or --ratings FILE for your own CSV or
Parquet file with one row per (user, item, rating).

Every metric is printed next to its yardsticks: the trivial baseline (the
training global mean for rating prediction, the exact popularity ranking for
top-k; both non-private), the popularity ranking of the fit's own released noisy
counts (private, no extra cost) and non-private ALS, which is fitted when the
training data has fewer than 2,000,000 ratings or with --compare-als. A private
model is only worth its noise if it beats the trivial baseline. Explicit ratings
get Recall@20 beside RMSE: relevant = held-out ratings >= --relevance-threshold
(default: the top quarter of the rating scale, 4 on 1-5), training items excluded.

Figures computed from the exact data (sizes, metrics on held-out data, bucket
tables, non-private baselines, timings) are marked [non-private]: the guarantee
does not cover them. --json keeps them in a separate "non_private" object.

The privacy summary says what the guarantee means for this run: removing all of
one user's ratings changes the probability of any released item factors by at
most a factor e^epsilon, except with probability delta. User embeddings are never
released; each user recomputes their own from the item factors.

Refits of the same users spend from one lifetime budget: --budget-file FILE
records every fit's noise events and refuses (exit status 3, before fitting) a
fit that would take the lifetime epsilon, composed over all of them by the PLD
accountant, above its limit. A new file takes its lifetime from
--lifetime-epsilon and --lifetime-delta.

Examples:
  privrec fit
  privrec fit --epsilon 1 --output model.npz --plot buckets.png
  privrec fit --dataset ml-100k --data-dir ~/data/ml-100k --epsilon 1
  privrec fit --ratings ratings.csv --user-col user_id --item-col movie_id --rating-col stars
  privrec fit --epsilon 1 --budget-file budget.json --lifetime-epsilon 4 --lifetime-delta 1e-6
  privrec fit --method als --json
"""

EVALUATE_DESCRIPTION = """\
Evaluate a model saved by 'privrec fit --output' on the same split of the same
data (pass the same data options and --seed as for the fit). Prints the metrics
next to the trivial baseline and, when cheap, non-private ALS, and the model's
privacy summary.

Example:
  privrec evaluate --model model.npz --dataset ml-100k --data-dir ~/data/ml-100k
"""

RECOMMEND_DESCRIPTION = """\
Top-N items for one user of the dataset. The user's embedding is recomputed
from the saved item factors and the user's own history only, so recommending
costs no privacy. Items the user already has are not recommended.

Example:
  privrec recommend --model model.npz --dataset ml-100k --data-dir ~/data/ml-100k --user 42
"""

SIMILAR_DESCRIPTION = """\
The items most similar to an item (cosine similarity of the saved item factors).

Example:
  privrec similar --model model.npz --dataset ml-100k --data-dir ~/data/ml-100k --item 50
"""


def register(subparsers) -> None:
    """Add the four model subcommands to the top-level ``privrec`` parser."""
    p = add_command(subparsers, "fit", "fit a (private) model, evaluate it and explain the result", FIT_DESCRIPTION)
    _data_args(p)
    g = p.add_argument_group("model and privacy")
    g.add_argument(
        "--method",
        choices=X.METHODS,
        default="ada-dpals",
        help="model to fit (default: ada-dpals; 'als' is the non-private reference)",
    )
    g.add_argument(
        "--epsilon",
        type=float,
        default=None,
        help=f"target epsilon of a private method (default {DEFAULT_EPSILON:g}); smaller is more private",
    )
    g.add_argument(
        "--delta",
        type=float,
        default=None,
        help="target delta (default: 1e-5 for the random protocol, 1/n_users for held-out users, the "
        "papers' convention; choose delta much smaller than 1/n_users for real use)",
    )
    g.add_argument("--factors", type=int, help="embedding dimension (default: automatic for private methods)")
    g.add_argument("--iterations", type=int, help="ALS sweeps (default: automatic for private methods)")
    g.add_argument("--regularization", type=float, help="ridge strength")
    g.add_argument(
        "--weight-exponent",
        dest="weight_exponent",
        type=float,
        help="adaptive-weight exponent mu (ada-dpals and ada-dpsgd only)",
    )
    g.add_argument("--budget", type=float, help="per-user budget (items per user / sum of squared weights)")
    g.add_argument("--max-norm", dest="max_norm", type=float, help="clipping norm of user embeddings")
    g.add_argument(
        "--unobserved-weight",
        dest="unobserved_weight",
        type=float,
        help="weight of unobserved (user, item) pairs (gravity)",
    )
    g.add_argument(
        "--rating-range",
        dest="rating_range",
        nargs=2,
        type=float,
        metavar=("LOW", "HIGH"),
        default=None,
        help="the public scale of valid ratings, e.g. --rating-range 1 5 (from the data's documentation, "
        "never from the data): private methods reject ratings outside it and clip to it, and the "
        "relevance threshold of Recall@20 is the top quarter of it",
    )
    g.add_argument(
        "--noise-seed",
        dest="noise_seed",
        type=int,
        default=None,
        help="seed of the initialisation and the privacy noise, for reproducible experiments only: "
        "anyone who knows it can subtract the noise, so a known seed VOIDS the privacy "
        "guarantee (default: fresh randomness from the operating system)",
    )
    g = p.add_argument_group("output")
    g.add_argument("--output", "-o", help="save the fitted model to this file")
    g.add_argument(
        "--evaluate", action="store_true", help="evaluate on the held-out part (always done without --output)"
    )
    g.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="save a per-popularity-bucket bar chart (PNG, PDF or SVG by extension; needs matplotlib, "
        "the 'plots' extra)",
    )
    g.add_argument(
        "--model-card",
        dest="model_card",
        metavar="FILE",
        default=None,
        help="write a Markdown model card: data shape, neighbouring relation, epsilon / delta, accountant, "
        "the resolved settings, the metrics against the yardsticks (when evaluated; marked non-private) "
        "and what is released and what is not",
    )
    _compare_args(g)
    _out_args(g)
    g = p.add_argument_group("lifetime privacy budget (refits of the same users)")
    g.add_argument(
        "--budget-file",
        dest="budget_file",
        metavar="FILE",
        default=None,
        help="charge this fit to the lifetime privacy budget in FILE (JSON): refused before fitting when the "
        "composition of every recorded fit and this one would exceed the lifetime epsilon; recorded after it. "
        "Not the per-user --budget",
    )
    g.add_argument(
        "--lifetime-epsilon",
        dest="lifetime_epsilon",
        type=float,
        default=None,
        help="lifetime epsilon of a new --budget-file (an existing file keeps its own)",
    )
    g.add_argument(
        "--lifetime-delta",
        dest="lifetime_delta",
        type=float,
        default=None,
        help="lifetime delta of a new --budget-file; every lifetime epsilon is computed at it",
    )
    g.add_argument(
        "--budget-label",
        dest="budget_label",
        metavar="TEXT",
        default=None,
        help="label of this fit in the budget file (default: method, epsilon and dataset)",
    )
    p.set_defaults(func=cmd_fit)

    p = add_command(subparsers, "evaluate", "evaluate a saved model on a dataset split", EVALUATE_DESCRIPTION)
    p.add_argument("--model", required=True, help="model file written by 'privrec fit --output'")
    _data_args(p)
    g = p.add_argument_group("output")
    _compare_args(g)
    _out_args(g)
    p.set_defaults(func=cmd_evaluate)

    for name, key, helptext, desc, func in (
        ("recommend", "--user", "top-N items for one user of a dataset", RECOMMEND_DESCRIPTION, cmd_recommend),
        (
            "similar",
            "--item",
            "items most similar to an item (cosine of item factors)",
            SIMILAR_DESCRIPTION,
            cmd_similar,
        ),
    ):
        p = add_command(subparsers, name, helptext, desc)
        p.add_argument("--model", required=True, help="model file written by 'privrec fit --output'")
        p.add_argument(key, required=True, help=f"{key[2:]} id as in the dataset")
        p.add_argument("-n", "--n", dest="n", type=int, default=10, help="number of items (default 10)")
        _data_args(p, split=False)
        _out_args(p)
        p.set_defaults(func=func)


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
        "ratings get rows too; without it a private fit's item axis comes from the data, which the "
        "guarantee does not cover)",
    )
    g.add_argument(
        "--users",
        default=None,
        metavar="FILE",
        help="the public user roster of --ratings: a text file with one user id per line (the guarantee is "
        "stated for zero-out of one user's ratings over a public roster)",
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


def _compare_args(g) -> None:
    g.add_argument(
        "--relevance-threshold",
        dest="relevance_threshold",
        type=float,
        default=None,
        help="explicit ratings: a held-out rating at or above this is relevant for Recall@20 (default: the "
        "top quarter of the rating scale -- the model's declared rating range, else the training ratings' "
        "range -- i.e. 4 on 1-5)",
    )
    g.add_argument(
        "--compare-als",
        dest="compare_als",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also fit non-private ALS as a reference (default: only when the training data has fewer "
        f"than {ALS_COMPARISON_MAX_NNZ:,} ratings)",
    )


def _out_args(p) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")


# ---------------------------------------------------------------------------------------- helpers
class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class _Exit(Exception):
    """A failure to report: ``message`` (the stderr line), ``status``, ``detail`` (the JSON ``error``)."""

    def __init__(self, message: str, status: int = 2, detail: str | None = None):
        super().__init__(message)
        self.status = status
        self.detail = message if detail is None else detail


@contextmanager
def _errors(name: str):
    try:
        yield
    except BrokenPipeError:  # handled quietly by privrec.cli.main
        raise
    except BudgetExceededError as exc:
        msg = f"refused: {_one_line(exc)}"
        raise _Exit(f"privrec {name}: {msg}", EXIT_REFUSED, msg) from None
    except (ValueError, FileNotFoundError, KeyError, OSError, CommandError) as exc:
        msg = cli_wording(_one_line(exc))
        if isinstance(exc, KeyError):
            msg = f"not found: {msg}"
        raise _Exit(f"privrec {name}: error: {msg}", 2, msg) from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.split()) if text else type(exc).__name__


#: the library's advice in Python words -> the same advice as CLI flags
_CLI_WORDS = (
    (re.compile(r"\bduplicates='(\w+)'"), r"--duplicates \1"),
    (re.compile(r"\brating_range=\(low, high\)"), "--rating-range LOW HIGH"),
)


def cli_wording(message: str) -> str:
    """An error or warning of the library as the CLI says it: ``duplicates='sum'`` becomes
    ``--duplicates sum``, ``rating_range=(low, high)`` becomes ``--rating-range LOW HIGH``."""
    for pattern, repl in _CLI_WORDS:
        message = pattern.sub(repl, message)
    return message


def _run(name, fn, args) -> int:
    """Run ``fn(args)``: user errors -> one line and status 2; warnings -> one line each."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"privrec {name}: warning: {cli_wording(' '.join(str(message).split()))}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show
            with _errors(name):
                return fn(args)
    except _Exit as e:  # one line on stderr; with --json also {"error": ..., "exit_status": ...} on stdout
        return report_error(str(e), e.status, bool(getattr(args, "json", False)), e.detail)


def _warn(args, message: str) -> None:
    """One-line warning on stderr, also kept for the JSON output."""
    args._warnings.append(message)
    print(f"privrec {args.command}: warning: {message}", file=sys.stderr)


class _Stages:
    """A tqdm bar over the named stages; off with --quiet, --json or when stderr is not a TTY."""

    def __init__(self, names, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(names), desc=names[0], leave=False, file=sys.stderr)
        self.names = list(names)
        self.i = 0

    def next(self):
        self.i += 1
        if self.bar is not None:
            self.bar.update(1)
            if self.i < len(self.names):
                self.bar.set_description(self.names[self.i])

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _progress_enabled(args) -> bool:
    return not (args.quiet or args.json) and sys.stderr.isatty()


def _noise_seed(args):
    """Seed of initialisation and privacy noise: None (OS entropy, the private default) unless given."""
    return getattr(args, "noise_seed", None)


def _yardstick_seed(args) -> int:
    """Seed of the non-private ALS yardstick's initial factors: the public ``--seed`` (it adds no
    noise, so a known seed costs nothing), so ``fit`` and ``evaluate`` refit the same yardstick."""
    return int(getattr(args, "seed", 0) or 0)


# ---------------------------------------------------------------------------------------- data
def _check_data_args(args) -> None:
    """Reject contradictory data options; warn about ignored ones."""
    if not hasattr(args, "_warnings"):
        args._warnings = []
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
        )
    name = args.dataset or X.DEFAULT_DATASET
    return name, X.load_data(name, args.data_dir, args.scale, seed=args.seed)


def _check_ratings_path(path: Path, flag: str = "--ratings") -> None:
    if path.is_dir():
        raise CommandError(f"{flag} {path} is a directory, not a file")
    if not path.is_file():
        raise CommandError(f"{flag} file not found: {path}")


def _is_parquet(path) -> bool:
    return Path(path).suffix.lower() in (".parquet", ".pq")


def ratings_id_kinds(path, user_col: str, item_col: str, numeric_ids: bool = False) -> dict[str, str]:
    """How the ids of a ``--ratings`` file are typed, by ``"user"`` / ``"item"``: ``"int"`` or
    ``"str"``. A CSV's ids are text (``007`` and ``7`` are two ids) unless ``numeric_ids``; a
    Parquet file's follow its column types (integer columns ``"int"``, everything else ``"str"``).
    The ``--users`` / ``--items`` files are read with the same types, so their ids match."""
    kinds = {"user": "int" if numeric_ids else "str", "item": "int" if numeric_ids else "str"}
    if _is_parquet(path) and Path(path).is_file():
        import pyarrow as pa
        import pyarrow.parquet as pq

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
    """``values`` (text) as Python ints; ``CommandError`` naming the first that is not an integer
    (``where(k)``: its location, e.g. a line number)."""
    out = []
    for k, v in enumerate(values):
        text = str(v).strip()
        try:
            out.append(int(text))
        except ValueError:
            raise CommandError(
                f"{where(k)}: {what} {str(v)[:40]!r} is not an integer (ids are declared numeric with --numeric-ids)"
            ) from None
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
):
    """Read a CSV or Parquet file of (user, item[, rating]) rows as ``Interactions``.

    ``rating_col`` empty or ``None``: every row is a positive interaction (value 1).
    ``duplicates``: policy for repeated (user, item) rows (``"error"`` rejects them). A CSV's ids
    are read as text (``007`` and ``7`` are two users) unless ``numeric_ids`` (then every id must
    be an integer, and ``007`` is ``7``); a Parquet file's ids keep their column types. Every CSV
    row must have as many fields as the header (a line with extra or missing fields is an error
    naming it).
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
        import pyarrow.parquet as pq

        try:
            columns = list(pq.read_schema(path).names)
        except Exception as exc:  # Arrow errors are not ValueErrors
            raise CommandError(f"cannot read {path.name} as Parquet: {_one_line(exc)}") from None
        _check_columns(columns, wanted, path)
        from_parquet = getattr(D, "from_parquet", None)
        if from_parquet is not None:
            return from_parquet(path, **options)
        import pandas as pd

        df = pd.read_parquet(path, columns=wanted)
    else:
        sep = "\t" if suffix == ".tsv" else ","
        df = _read_csv_ratings(path, sep, wanted, [user_col, item_col])
        if numeric_ids:
            for col in (user_col, item_col):
                try:
                    df[col] = df[col].str.strip().astype(np.int64)
                except (ValueError, OverflowError):  # name the first bad id
                    _integer_ids(df[col].tolist(), f"{col!r} id", lambda k: f"{path.name}, data row {k + 1}")
                    raise
    from_pandas = getattr(D, "from_pandas", None)
    if from_pandas is not None:
        return from_pandas(df, **options)
    values = None
    if rating_col:
        from ..data.frames import rating_array

        values = rating_array(df[rating_col], f"rating column {rating_col!r}")
        if np.isnan(values).any():
            raise CommandError(f"{path.name}: column {rating_col!r} has missing values")
    return D.Interactions.from_arrays(
        df[user_col].to_numpy(), df[item_col].to_numpy(), values, duplicates=duplicates, name=path.stem
    )


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


# ---------------------------------------------------------------------------------------- baselines
class _Trivial:
    """Non-private yardstick read by the evaluation protocols: no factors, only offsets.

    Ratings: the training global mean. Held-out users: items ranked by exact training counts.
    """

    def __init__(self, train: sp.csr_matrix, protocol: str):
        n_users, n_items = train.shape
        self.item_factors_ = np.zeros((n_items, 0), dtype=np.float32)
        if protocol == "random":
            self.name = "training global mean"
            self.global_mean_ = float(np.mean(train.data)) if train.nnz else 0.0
            self.item_bias_ = None
        else:
            self.name = "popularity (exact training counts)"
            self.global_mean_ = 0.0
            self.item_bias_ = (_exact_counts(train) / max(1, n_users)).astype(np.float32)

    def _project_users(self, rows):
        return np.zeros((rows.shape[0], 0), dtype=np.float32), None


class _Popularity(_Trivial):
    """A ranker without factors: every user's unseen items by one per-item score (e.g. counts)."""

    def __init__(self, scores, name: str):
        scores = np.asarray(scores, dtype=np.float32)
        self.name = name
        self.item_factors_ = np.zeros((scores.size, 0), dtype=np.float32)
        self.global_mean_ = 0.0
        self.item_bias_ = scores


def _exact_counts(train: sp.csr_matrix) -> np.ndarray:
    return np.diff(sp.csc_matrix(train).indptr).astype(np.float64)


def relevance_threshold(model, train: sp.csr_matrix, given: float | None = None) -> float:
    """The rating at or above which a held-out rating is relevant (explicit feedback).

    ``given`` if set; else the top quarter of the rating scale, ``low + 0.75 (high - low)``: 4 on a
    1-5 scale. The scale is the model's declared ``rating_range`` when it has one, else the range of
    the training ratings (an exact statistic: the threshold is a non-private figure).
    """
    if given is not None:
        if not math.isfinite(given):
            raise CommandError(f"--relevance-threshold must be a finite number, got {given}")
        return float(given)
    declared = getattr(model, "rating_range", None)
    if declared is not None:
        lo, hi = (float(v) for v in declared)
    elif train.nnz:
        lo, hi = float(train.data.min()), float(train.data.max())
    else:
        return 0.0
    return lo + RELEVANCE_QUANTILE * (hi - lo)


def _relevant(test: sp.csr_matrix, threshold: float) -> sp.csr_matrix:
    """The held-out ratings at or above ``threshold``, as 1s."""
    out = sp.csr_matrix(test, dtype=np.float32, copy=True)
    out.data = (out.data >= threshold).astype(np.float32)
    out.eliminate_zeros()
    return out


def ranking_metrics_of(ranker, split, threshold: float | None = None, k: int = TOP_K) -> dict:
    """Recall@k and NDCG@k of a fitted model (or a :class:`_Popularity` ranker) on the split's held-out data.

    Held-out users: their targets, their fold-in history excluded (as the protocol's own metric).
    Random split of explicit ratings: relevant = held-out ratings ``>= threshold``; each user is
    projected from the same history as for the RMSE (training + validation ratings, whose items are
    excluded from the candidates). Scores are those of ``model.recommend`` (predicted rating; the
    per-user offsets do not change a user's ranking).
    """
    if split.protocol == "random":
        history = split.projection if split.projection is not None else split.train
        targets = _relevant(split.test, -math.inf if threshold is None else threshold)
    else:
        history, targets = split.history, split.targets
    users = np.flatnonzero(np.diff(targets.indptr) > 0)
    if users.size == 0:
        return {f"recall@{k}": math.nan, f"ndcg@{k}": math.nan, "ranking_users": 0}
    rows = history[users]
    U = project_users(ranker, rows)
    m = ranking_metrics(U, item_factors_of(ranker), targets[users], rows, ks=(k,), item_bias=item_bias_of(ranker))
    return {f"recall@{k}": m[f"recall@{k}"], f"ndcg@{k}": m[f"ndcg@{k}"], "ranking_users": m["n_users"]}


def _fit_model(split, method, epsilon, delta, params, seed, show_progress: bool, charged: dict | None = None):
    """``(model, fit seconds)`` for ``run_experiment(fitted=...)``: progress bars only when asked
    (models whose ``fit`` shows progress by default, as implicit's, stay quiet under --json / -q).

    ``charged = {"budget": Budget, "label": str}``: the fit is planned, checked, run and recorded
    under the budget's lock (:meth:`privrec.privacy.Budget.charge`), refused before it starts when
    it would exceed the lifetime epsilon; ``charged["charge"]`` is then the recorded charge."""
    import inspect
    import time

    if method == "als":  # the non-private yardstick: implicit-feedback ALS on held-out users (X.make_yardstick)
        model = X.make_yardstick(split.train.shape, split.protocol, params, seed)
    else:
        model = X.make_model(method, epsilon, delta, params, seed, split.protocol)
    kwargs = (
        {"show_progress": bool(show_progress)} if "show_progress" in inspect.signature(model.fit).parameters else {}
    )
    with (
        charged["budget"].charge(model, split.train.shape, label=charged["label"]) if charged else nullcontext()
    ) as ticket:
        t0 = time.perf_counter()
        model.fit(split.train, **kwargs)
        seconds = time.perf_counter() - t0
    if charged:
        charged["charge"] = ticket
    return model, seconds


def _want_als(args, method: str | None, nnz: int) -> bool:
    if method == "als":
        return False
    if args.compare_als is not None:
        return bool(args.compare_als)
    return nnz < ALS_COMPARISON_MAX_NNZ


def _baselines(
    args, split, name, method, params, model=None, private_release: bool = False, threshold: float | None = None
) -> dict:
    """Yardsticks on the same split: the trivial baseline (always), the popularity ranking of the
    model's own released noisy counts (a private model that has them), the exact popularity ranking
    (explicit ratings: its Recall@20 beside the global mean's RMSE) and non-private ALS (when wanted)."""
    explicit = split.protocol == "random"
    triv = _Trivial(split.train, split.protocol)
    ev = X.evaluate_split(triv, split)
    out: dict[str, Any] = {
        "trivial": {"name": triv.name, "private": False, "metrics": ev["metrics"], "sliced": ev["sliced"]},
    }
    counts = getattr(model, "item_counts_", None)
    if private_release and counts is not None:
        pop = _Popularity(counts, "popularity (this fit's released noisy counts)")
        out["private_popularity"] = {
            "name": pop.name,
            "private": True,
            "metrics": ranking_metrics_of(pop, split, threshold),
            "sliced": {},
        }
    if explicit:
        pop = _Popularity(_exact_counts(split.train), "popularity (exact training counts)")
        out["popularity"] = {
            "name": pop.name,
            "private": False,
            "metrics": ranking_metrics_of(pop, split, threshold),
            "sliced": {},
        }
    out["als"] = None
    if _want_als(args, method, split.train.nnz):
        # the private model's factors / iterations when given (a bias-only model's factors = 0 has no ALS twin)
        als_params = {k: params[k] for k in ("factors", "iterations") if params.get(k)}
        seed = _yardstick_seed(args)
        fitted = _fit_model(split, "als", None, None, als_params, seed, False)
        als, res = X.run_experiment(split, "als", params=als_params, seed=seed, dataset=name, fitted=fitted)
        metrics = dict(res["metrics"])
        if explicit:
            metrics.update(ranking_metrics_of(als, split, threshold))
        kind = "" if explicit else " implicit (Hu et al. 2008)"
        out["als"] = {
            "name": f"ALS{kind}" + (" (same factors, iterations)" if als_params else ""),
            "private": False,
            "params": als_params,
            "config": dict(getattr(als, "config_", {}) or {}),
            "seed": seed,
            "metrics": metrics,
            "sliced": res["sliced"],
            "fit_seconds": res["fit_seconds"],
        }
    elif method != "als" and args.compare_als is None:
        out["als_skipped"] = (
            f"training data has {split.train.nnz:,} ratings (>= {ALS_COMPARISON_MAX_NNZ:,}); "
            "pass --compare-als to fit it anyway"
        )
    return out


def _is_private_release(res: dict) -> bool:
    """Whether a result's model carries a guarantee (recorded events and a finite epsilon)."""
    return bool((res.get("privacy_events") or {}).get("events")) and math.isfinite(_as_float(res.get("epsilon_spent")))


def _add_ranking(res: dict, model, split, args) -> float | None:
    """Explicit ratings (random protocol): add Recall@20 to ``res["metrics"]`` beside the RMSE and
    return the relevance threshold (``None`` for the held-out-users protocol, which ranks already)."""
    if split.protocol != "random":
        return None
    import time

    t0 = time.perf_counter()
    threshold = relevance_threshold(model, split.train, getattr(args, "relevance_threshold", None))
    res["metrics"] = {**res["metrics"], **ranking_metrics_of(model, split, threshold)}
    res["relevance_threshold"] = threshold
    if "eval_seconds" in res:
        res["eval_seconds"] = round(res["eval_seconds"] + time.perf_counter() - t0, 4)
    return threshold


def _primary(protocol: str) -> tuple[str, str, str]:
    """(overall metric, sliced metric, direction) of a protocol."""
    if protocol == "random":
        return "rmse", "rmse", "lower is better"
    return "recall@20", "recall", "higher is better"


# ---------------------------------------------------------------------------------------- privacy text
def privacy_paragraph(
    report: dict | None, feedback: str = "explicit", noise_seed=None, width: int | None = _WIDTH
) -> str:
    """A plain-language summary of a privacy report (``model.privacy_report()``).

    What epsilon, delta and "user-level" mean for the release, which accountant computed epsilon,
    what is released and what is treated as public. ``report=None`` describes a non-private model.
    ``width=None`` returns one unwrapped line.
    """
    fill = (lambda text: textwrap.fill(text, width)) if width else (lambda text: text)
    if not report or not report.get("events"):
        return fill(
            "None: this is a non-private model. Its item factors are fitted on the exact data and can "
            "reveal individual users' ratings; use it as a reference, not as a release."
        )
    eps = _as_float(report.get("epsilon"))
    delta = _as_float(report.get("delta"))
    if not math.isfinite(eps):
        return fill(
            "None: epsilon is infinite (privacy switched off), so the released item factors carry no guarantee."
        )
    unit = "interactions" if feedback == "implicit" else "ratings"
    acc = str(report.get("accountant", "rdp")).lower()
    acc_name = {"pld": "PLD (privacy loss distribution)", "rdp": "RDP (Renyi differential privacy)"}.get(acc, acc)
    other_key, other_name = ("epsilon_rdp", "RDP") if acc == "pld" else ("epsilon_pld", "PLD")
    other = _as_float(report.get(other_key))
    target = _as_float(report.get("target_epsilon"))
    n_events = len(report.get("events", []))
    factor = math.exp(eps) if eps < 700 else math.inf
    parts = [
        f"This release is ({eps:.3g}, {delta:.3g})-differentially private at the user level.",
        f"User-level means the protected unit is everything one user contributed: removing all of one user's {unit} "
        f"changes the probability of any released item factors by at most a factor e^{eps:.3g} = {factor:.3g}, "
        f"except with probability delta = {delta:.3g}.",
        f"epsilon = {eps:.4g}"
        + (f" (target {target:g})" if math.isfinite(target) else "")
        + f" was computed by the {acc_name} accountant over the {n_events} recorded noise events of the fit"
        + (f" (the {other_name} accountant gives {other:.4g} for the same noise)." if math.isfinite(other) else "."),
        (
            "Covered by it: the item factors and the popularity prior (the noisy item counts divided by the number "
            "of users)."
            if feedback == "implicit"
            else "Covered by it: the item factors and item biases, and the intermediate noisy statistics listed in the "
            "report (item counts and, when centering, the global mean)."
        )
        + " User embeddings are never released: each user's embedding is recomputed from the released item side "
        "and that user's own history, at no privacy cost. The numbers of users and items are treated as public.",
    ]
    if noise_seed is not None:
        parts.append(
            f"WARNING: --noise-seed {noise_seed} fixed the noise; anyone who knows the seed can regenerate "
            "and subtract it, so this run has no privacy guarantee (experiments only)."
        )
    return fill(" ".join(parts))


def _as_float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _delta_warning(delta: float, n_users: int, protocol: str, user_chose: bool) -> str | None:
    """Warning text when delta >= 1/n_users (``None`` otherwise)."""
    if delta is None or not n_users or delta < 1.0 / n_users:
        return None
    suggest = suggested_delta(n_users)
    text = (
        f"delta = {delta:.3g} is not smaller than 1/n_users = 1/{n_users:,} {MARK}: with delta >= 1/n a mechanism that "
        "publishes the full data of one randomly chosen user meets the definition."
    )
    if protocol == "heldout-users" and not user_chose:
        text += (
            " The held-out-users protocol uses delta = 1/n by the paper's convention (Krichene et al. 2023) "
            "so that results are comparable with it."
        )
    return text + f" For real use choose delta much smaller than 1/n_users, e.g. --delta {suggest:.0e}."


# ---------------------------------------------------------------------------------------- printing
def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4f}"
    return str(v)


def _table(header, rows, indent="  ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return [line.rstrip() for line in lines]


def separate_non_private(res: dict) -> dict:
    """The result with every figure computed from the exact data moved to ``res["non_private"]``.

    What stays at the top level is what may accompany the release: the settings, the privacy report
    and summary, the budget, warnings and file names. ``non_private`` holds :data:`NON_PRIVATE_KEYS`
    and a ``note`` saying that the guarantee does not cover them.
    """
    out = {k: v for k, v in res.items() if k not in NON_PRIVATE_KEYS}
    out["non_private"] = {"note": NON_PRIVATE_NOTE, **{k: res[k] for k in NON_PRIVATE_KEYS if k in res}}
    return out


def _model_label(res: dict) -> tuple[str, str]:
    """(name, privacy) of the fitted model for the tables (the name says when the model is bias-only)."""
    name = str(res.get("label") or res.get("method", "model"))
    if res.get("method") == "als" or not res.get("privacy_events", {}).get("events"):
        return name, "non-private"
    if math.isinf(_as_float(res.get("epsilon_spent"))):  # epsilon = inf: events, but no guarantee
        return name, "non-private (eps inf)"
    return name, f"private, eps {_fmt_eps(res.get('epsilon_spent'))}"


def _fmt_setting(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_fmt_setting(x) for x in v) + ")"
    return str(v)


def _fmt_eps(v) -> str:
    f = _as_float(v)
    return f"{f:.3g}" if math.isfinite(f) else str(v)


#: order and table label of the baselines
_BASELINES = (
    ("private_popularity", ""),
    ("trivial", "trivial baseline: "),
    ("popularity", "trivial baseline: "),
    ("als", ""),
)


def _rows(res: dict) -> list[tuple[str, str, dict, dict]]:
    """(name, privacy of the ranker, metrics, sliced) of the model and of each baseline present."""
    ev = res["non_private"]
    rows = [(*_model_label(res), ev["metrics"], ev["sliced"])]
    for key, prefix in _BASELINES:
        b = (ev.get("baselines") or {}).get(key)
        if b:
            privacy = "non-private"
            if b.get("private"):
                privacy = f"private, eps {_fmt_eps(res.get('epsilon_spent'))} (this release)"
            rows.append((prefix + b["name"], privacy, b["metrics"], b.get("sliced") or {}))
    return rows


def _metric_note(res: dict) -> str | None:
    """What the ranking metrics of explicit ratings count as relevant (``None`` without them)."""
    t = res["non_private"].get("relevance_threshold")
    if t is None:
        return None
    return f"recall@{TOP_K}, ndcg@{TOP_K}: relevant = held-out ratings >= {t:g}, training items excluded"


def _print_comparison(res: dict) -> None:
    """Overall metric of the model next to the baselines, then the per-bucket table (all marked non-private)."""
    ev = res["non_private"]
    overall, sliced_key, direction = _primary(res["protocol"])
    base = ev.get("baselines") or {}
    rows = _rows(res)
    hidden = (overall, "n_users", "n_test", "ranking_users")
    other = [k for k in ev["metrics"] if k not in hidden]
    header = ["model", "privacy of the model", overall] + other
    table = [[name, priv, _fmt(m.get(overall))] + [_fmt(m.get(k)) for k in other] for name, priv, m, _ in rows]
    print(
        f"metrics   {MARK} {overall} ({direction}) on {ev['metrics'].get('n_users', '?')} test users, "
        "computed on the exact held-out data"
    )
    note = _metric_note(res)
    if note:
        print(f"          {note}")
    for line in _table(header, table):
        print(line)
    if base.get("als_skipped"):
        print(f"  (non-private ALS not fitted: {base['als_skipped']})")
    verdict = _verdict(res)
    if verdict:
        print(textwrap.fill(verdict, _WIDTH, initial_indent="  note: ", subsequent_indent="  "))
    sliced = ev["sliced"]
    keys = [k for k in sliced if k != "k"]
    nb = len(sliced[keys[0]]) if keys else 0
    short = {"trivial": "trivial", "als": "ALS"}
    extra = [(short[k], base[k]["sliced"].get(sliced_key)) for k in ("trivial", "als") if base.get(k)]
    header = ["bucket", "items"] + (["k"] if "k" in sliced else []) + keys + [f"{n} {sliced_key}" for n, _ in extra]
    table = []
    for b in range(nb):
        label = f"{b}" + (" (tail)" if b == 0 else " (head)" if b == nb - 1 else "")
        row = [label, str(ev["bucket_items"][b])] + ([str(sliced["k"][b])] if "k" in sliced else [])
        row += [_fmt(sliced[k][b]) for k in keys]
        row += [_fmt(vals[b]) if vals is not None else "" for _, vals in extra]
        table.append(row)
    print(f"{MARK} per-popularity bucket (0 = least popular items; buckets from exact training counts):")
    for line in _table(header, table):
        print(line)


def _verdict(res: dict) -> str | None:
    """A plain sentence when a private model does not beat the trivial baseline."""
    if _model_label(res)[1] == "non-private":
        return None
    ev = res["non_private"]
    triv = (ev.get("baselines") or {}).get("trivial")
    overall, _, _ = _primary(res["protocol"])
    if not triv:
        return None
    mine, ref = _as_float(ev["metrics"].get(overall)), _as_float(triv["metrics"].get(overall))
    if not (math.isfinite(mine) and math.isfinite(ref)):
        return None
    worse = mine > ref if overall == "rmse" else mine < ref
    if not worse:
        return None
    return (
        f"at this epsilon and data size the private model does not beat the trivial baseline ({overall} "
        f"{mine:.4f} vs {ref:.4f}); more users or a larger epsilon help, and the trivial model itself may be "
        "the better choice."
    )


def _print_budget(res: dict) -> None:
    b = res.get("budget")
    if not b:
        return
    n = b["releases"]
    print(
        f"budget    {b['file']}: lifetime eps {_fmt_eps(b['lifetime_epsilon'])} at delta "
        f"{_as_float(b['lifetime_delta']):g}; spent eps {_fmt_eps(b['spent_before'])} -> "
        f"{_fmt_eps(b['spent'])} (PLD over every event of {n} release{'s' if n != 1 else ''}); "
        f"remaining {_fmt_eps(b['remaining'])}; this fit recorded as {b['label']!r}"
    )


def _print_non_private(res: dict) -> None:
    """The footer: exact sizes and running times, and what the mark means."""
    ev = res["non_private"]
    unit = "interactions" if res["protocol"] == "heldout-users" else "ratings"
    if "n_users" in ev:
        print(
            f"{MARK} data     {ev['n_users']:,} users x {ev['n_items']:,} items, "
            f"{ev['n_train']:,} training {unit} (exact counts)"
        )
    spans = (("fit_seconds", "fit"), ("eval_seconds", "evaluation"))
    times = [f"{label} {ev[key]:.2f} s" for key, label in spans if key in ev]
    als = (ev.get("baselines") or {}).get("als")
    if als and "fit_seconds" in als:
        times.append(f"non-private ALS fit {als['fit_seconds']:.2f} s")
    if times:
        print(f"{MARK} timings  " + ", ".join(times))
    print(
        textwrap.fill(
            f"{MARK} = an exact figure computed from the data (sizes, metrics on held-out data, bucket tables, "
            "baselines fitted without noise, running times): the privacy guarantee does not cover it; do not "
            "publish it with the release.",
            _WIDTH,
            subsequent_indent="  ",
        )
    )


def _print_result(res: dict) -> None:
    print(f"dataset   {res.get('dataset')}  (protocol {res['protocol']})")
    label = res.get("label") or res["method"]
    print(f"method    {label}" + ("  (non-private reference)" if res["method"] == "als" else ""))
    if res.get("personal_part"):
        print(textwrap.fill(res["personal_part"], _WIDTH, initial_indent="personal  ", subsequent_indent="          "))
    if res.get("config"):
        settings = ", ".join(f"{k}={_fmt_setting(v)}" for k, v in res["config"].items())
        print(
            textwrap.fill(
                settings, _WIDTH, initial_indent="settings  ", subsequent_indent="          ", break_on_hyphens=False
            )
        )
    if "metrics" in res["non_private"]:
        _print_comparison(res)
    _print_budget(res)
    print("privacy")
    print(textwrap.fill(res["privacy_summary"], _WIDTH, initial_indent="  ", subsequent_indent="  "))
    _print_non_private(res)


# ---------------------------------------------------------------------------------------- plot
def _check_plot(path) -> None:
    """Fail before fitting when --plot cannot be written."""
    if path is None:
        return
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CommandError("--plot needs matplotlib: pip install 'privrec[plots]'") from None
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    supported = Figure().canvas.get_supported_filetypes()
    if ext not in supported:
        raise CommandError(
            f"--plot {path.name}: unknown image type {path.suffix!r}; use one of "
            f"{', '.join('.' + e for e in sorted(supported))}"
        )
    if not path.parent.is_dir():
        raise CommandError(f"--plot: folder {path.parent} does not exist")
    _check_output_path(path, "--plot")


def _check_output_path(path, flag: str) -> None:
    """Fail before fitting when ``path`` (``--output``, ``--plot``, a new ``--budget-file``) cannot
    be written: it is not a regular file (a folder, ``/dev/null``, a FIFO: see
    :func:`privrec._io.check_write_target`; a symbolic link is checked at its target), a part of
    its folder is a file, or no file can be created in its folder (or, when the folder is still to
    be created, in the nearest one that exists) -- probed with a privrec temporary file, removed
    at once."""
    if path is None:
        return
    from .._io import check_write_target, make_temp_file

    try:
        target = check_write_target(path)
    except ValueError as exc:
        raise CommandError(f"{flag}: {_one_line(exc)}") from None
    folder = target.parent
    while not folder.exists() and folder != folder.parent:  # save() creates missing folders
        folder = folder.parent
    if not folder.is_dir():
        raise CommandError(f"{flag} {path}: {folder} is not a folder")
    try:
        probe = make_temp_file(folder, target.name)
    except OSError as exc:
        raise CommandError(f"{flag} {path}: cannot create a file in {folder} ({exc.strerror or exc})") from None
    probe.unlink(missing_ok=True)


def save_bucket_plot(res: dict, path) -> str:
    """Grouped bar chart of the primary metric per popularity bucket: the model and its baselines."""
    from matplotlib.figure import Figure

    _, key, direction = _primary(res["protocol"])
    labelled = [(f"{name} ({priv})", sliced.get(key)) for name, priv, _, sliced in _rows(res)]
    series = [(label, vals) for label, vals in labelled if vals is not None]
    nb = len(series[0][1])
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    w = 0.8 / len(series)
    for j, (label, vals) in enumerate(series):
        ax.bar(
            [b + j * w for b in range(nb)], [math.nan if v is None else v for v in vals], w, label=label, color=f"C{j}"
        )
    ax.set_xticks([b + 0.4 - w / 2 for b in range(nb)])
    ax.set_xticklabels([f"{b}" + (" (tail)" if b == 0 else " (head)" if b == nb - 1 else "") for b in range(nb)])
    ax.set_xlabel("item popularity bucket (0 = least popular)")
    ax.set_ylabel(f"{key} ({direction})")
    ax.set_title(f"{res.get('dataset')}: {key} per popularity bucket (non-private: exact held-out data)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:  # atomic, and never over a device or through a replaced link
        fig.savefig(tmp, format=Path(path).suffix.lower().lstrip("."))
    return str(path)


# ---------------------------------------------------------------------------------------- commands
def cmd_fit(args) -> int:
    return _run("fit", _fit, args)


def _check_fit_args(args) -> dict:
    """Validate options, warn about ignored ones; return the estimator parameters."""
    _check_data_args(args)
    private = args.method != "als"
    if args.epsilon is not None and not args.epsilon > 0:
        raise CommandError(f"--epsilon must be > 0, got {args.epsilon}")
    if args.delta is not None and not 0 < args.delta < 1:
        raise CommandError(f"--delta must be in (0, 1), got {args.delta}")
    if not private:
        if args.epsilon is not None:
            _warn(args, "ε (--epsilon) is ignored by the non-private method als")
        if args.delta is not None:
            _warn(args, "δ (--delta) is ignored by the non-private method als")
        for flag in ("weight_exponent", "budget", "max_norm"):
            if getattr(args, flag) is not None:
                raise CommandError(
                    f"{_FLAG_NAMES[flag]} ({_MODEL_FLAGS[flag]}) does not apply to the non-private "
                    "method als; it is a private-method option"
                )
    elif args.weight_exponent is not None and args.method not in _ADAPTIVE:
        _warn(
            args,
            f"--weight-exponent (mu) is ignored by {args.method}; only the adaptive methods "
            f"({', '.join(_ADAPTIVE)}) use it",
        )
    if args.compare_als and not private:
        _warn(args, "--compare-als is ignored: the fitted model is already non-private ALS")
    _check_budget_args(args, private)
    for flag in ("factors", "iterations"):
        v = getattr(args, flag)
        if v is not None and v < (0 if flag == "factors" and private else 1):
            raise CommandError(f"{_FLAG_NAMES[flag]} must be >= {0 if flag == 'factors' and private else 1}, got {v}")
    _check_output_path(args.output, "--output")
    _check_output_path(getattr(args, "model_card", None), "--model-card")
    _check_plot(args.plot)
    if args.rating_range is not None:
        lo, hi = args.rating_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise CommandError(f"--rating-range must be two finite numbers LOW < HIGH, got {lo:g} {hi:g}")
        args.rating_range = (float(lo), float(hi))
    return {_MODEL_FLAGS[k]: getattr(args, k) for k in _MODEL_FLAGS if getattr(args, k) is not None}


def _check_budget_args(args, private: bool) -> None:
    """The --budget-file options, checked before any data is loaded: a non-private fit cannot be
    charged, a new file needs its lifetime, an existing file is opened (and checked) and refused
    (exit status 3) when nothing is left."""
    given = [f for f in ("lifetime_epsilon", "lifetime_delta", "budget_label") if getattr(args, f) is not None]
    if args.budget_file is None:
        if given:
            flags = ", ".join("--" + f.replace("_", "-") for f in given)
            raise CommandError(f"{flags} only appl{'y' if len(given) > 1 else 'ies'} with --budget-file")
        return
    lifetime = [f for f in given if f != "budget_label"]
    if not private:
        raise CommandError(
            "--budget-file: als is non-private (epsilon = inf) and cannot be charged to a privacy budget"
        )
    if args.epsilon is not None and math.isinf(args.epsilon):
        raise CommandError("--budget-file: epsilon = inf is non-private and cannot be charged to a privacy budget")
    if _noise_seed(args) is not None:
        raise CommandError(
            "--budget-file with --noise-seed: a known noise seed voids the guarantee, so the fit cannot be "
            "charged to a privacy budget"
        )
    if args.lifetime_epsilon is not None and not (math.isfinite(args.lifetime_epsilon) and args.lifetime_epsilon > 0):
        raise CommandError(f"--lifetime-epsilon must be finite and > 0, got {args.lifetime_epsilon}")
    if args.lifetime_delta is not None:
        if not 0 < args.lifetime_delta < 1:
            raise CommandError(f"--lifetime-delta must be in (0, 1), got {args.lifetime_delta}")
        check_pld_delta(args.lifetime_delta, "--lifetime-delta")  # every lifetime epsilon is a PLD one
    path = Path(args.budget_file)
    if not path.exists():
        if len(lifetime) < 2:
            raise CommandError(
                f"budget file {path} does not exist; create it with --lifetime-epsilon and --lifetime-delta"
            )
        if not path.parent.is_dir():
            raise CommandError(f"--budget-file: folder {path.parent} does not exist")
        _check_output_path(path, "--budget-file")
        return
    budget = Budget.open_or_create(path, args.lifetime_epsilon, args.lifetime_delta)  # checks the file and lifetime
    args._budget = budget  # reused for the fit (the check proper runs under its lock then)
    if budget.remaining() <= 0:
        spent, eps = budget.spent(), budget.epsilon
        raise BudgetExceededError(
            f"privacy budget {path} is used up: spent epsilon {_fmt_eps(spent)} of its lifetime "
            f"{_fmt_eps(eps)} (delta {budget.delta:g}); nothing was loaded or fitted",
            path=path,
            lifetime_epsilon=eps,
            delta=budget.delta,
            spent=spent,
            total=spent,
            n_releases=len(budget.releases),
        )


def _budget_result(charged: dict) -> dict:
    """The ``budget`` entry of the result: lifetime, spend before and after this fit, its label."""
    budget, ticket = charged["budget"], charged["charge"]
    release = ticket.release
    eps = budget.epsilon
    return {
        "file": str(budget.path),
        "lifetime_epsilon": eps,
        "lifetime_delta": budget.delta,
        "accountant": "pld",
        "label": release.label,
        "spent_before": ticket.spent_before,
        "spent": release.spent_after,
        "remaining": max(0.0, eps - release.spent_after),
        "releases": ticket.releases_before + 1,
    }


def _fit(args) -> int:
    args._warnings = []
    params = _check_fit_args(args)
    private = args.method != "als"
    epsilon = (DEFAULT_EPSILON if args.epsilon is None else args.epsilon) if private else None
    evaluate = args.evaluate or not args.output or args.plot is not None
    stages = _Stages(
        ["load", "split", "fit"] + (["evaluate", "baselines"] if evaluate else []), _progress_enabled(args)
    )
    try:
        name, data = _load(args)
        stages.next()
        split = _split(args, data, name)
        stages.next()
        delta = args.delta
        if private:
            delta = X.default_delta(split) if delta is None else delta
            msg = _delta_warning(delta, split.train.shape[0], split.protocol, args.delta is not None)
            if msg:
                _warn(args, msg)
        if private and args.ratings is not None:
            if args.items is None:
                _warn(
                    args,
                    "the item axis comes from the data (only items with ratings), which the guarantee does not "
                    "cover; declare the public catalogue with --items FILE",
                )
            if args.users is None:
                _warn(
                    args,
                    "the user roster comes from the data (only users with ratings); the guarantee is stated for a "
                    "public roster: declare it with --users FILE",
                )
        charged = None
        if args.budget_file is not None:
            label = args.budget_label or f"privrec fit --method {args.method} --epsilon {epsilon:g} on {name}"
            budget = getattr(args, "_budget", None) or Budget.open_or_create(
                args.budget_file, args.lifetime_epsilon, args.lifetime_delta
            )
            charged = {"budget": budget, "label": label}
        fitted = _fit_model(
            split,
            args.method,
            epsilon,
            delta if private else None,
            params,
            _noise_seed(args),
            _progress_enabled(args),
            charged,
        )
        model, res = X.run_experiment(
            split,
            args.method,
            epsilon=epsilon,
            delta=delta if private else None,
            params=params,
            seed=_noise_seed(args),
            evaluate=evaluate,
            dataset=name,
            fitted=fitted,
        )
        stages.next()
        if evaluate:
            threshold = _add_ranking(res, model, split, args)
            stages.next()
            res["baselines"] = _baselines(
                args, split, name, args.method, params, model, _is_private_release(res), threshold
            )
            stages.next()
    finally:
        stages.close()
    if charged is not None:
        res["budget"] = _budget_result(charged)
    res["seed"] = args.seed
    res["noise_seed"] = _noise_seed(args)
    feedback = getattr(model, "feedback", "explicit")
    report = res["privacy_events"] if private else None
    res["privacy_summary"] = privacy_paragraph(report, feedback, _noise_seed(args) if private else None, width=None)
    res["warnings"] = list(args._warnings)
    _add_description(res, model)
    if args.output:
        # the model was fitted on the split's matrix: say where its item axis came from (a declared
        # catalogue, or the data) and give it the split's ids when they may be saved -- a declared
        # catalogue is public, a non-private model keeps everything -- so that recommend / similar
        # can check a data file against them (a private model's data-derived ids are not saved)
        declared = args.ratings is not None and args.items is not None
        model._item_axis = "catalogue" if declared else "data"
        if split.item_ids is not None and (declared or not model._is_private()):
            model.item_ids_, model._item_ids_given = np.asarray(split.item_ids), declared
        model.save(args.output)
        res["output"] = str(args.output)
    res = separate_non_private(res)
    if args.plot is not None:
        res["plot"] = save_bucket_plot(res, args.plot)
    if getattr(args, "model_card", None):
        res["model_card"] = write_model_card(args.model_card, model, res)
    if args.json:
        print(json.dumps(X.json_safe(res)))
    else:
        _print_result(res)
        if args.output:
            print(f"saved     {args.output}")
        if args.plot is not None:
            print(f"plot      {args.plot}")
        if getattr(args, "model_card", None):
            print(f"card      {args.model_card}")
    return 0


def _add_description(res: dict, model) -> None:
    """What was fitted (``model.describe()``): the label (``"ada-dpals (bias-only: factors=0)"`` for
    a model without a personal part), whether the model is personal and how users use that part,
    and the resolved configuration -- all public settings, so they stay beside the release. The
    data shape in the configuration is left to the ``non_private`` object (``n_users`` /
    ``n_items``), as everywhere in the CLI's output."""
    d = model.describe()
    res["label"] = d["label"]
    res["personal"] = bool(d["personal"])
    res["personal_part"] = d["personal_part"]
    res["config"] = {k: v for k, v in d["config"].items() if k not in ("n_users", "n_items")}


def write_model_card(path, model, res: dict) -> str:
    """Write ``model.model_card`` with the metrics of the model and of its yardsticks (when evaluated)."""
    metrics = None
    if "metrics" in res.get("non_private", {}):
        hidden = ("n_users", "n_test", "ranking_users")
        metrics = {
            f"{name} ({privacy})": {k: v for k, v in m.items() if k not in hidden} for name, privacy, m, _ in _rows(res)
        }
    model.model_card(path, metrics=metrics, dataset=res.get("dataset"))
    return str(path)


def cmd_evaluate(args) -> int:
    return _run("evaluate", _evaluate, args)


def _load_model(path):
    from ..models import load_model

    return load_model(path)


def _evaluate(args) -> int:
    args._warnings = []
    _check_data_args(args)
    model = _load_model(args.model)
    name, data = _load(args)
    split = _split(args, data, name)
    if model.item_factors_.shape[0] != split.train.shape[1]:
        raise CommandError(
            f"model has {model.item_factors_.shape[0]} items but dataset {name} has "
            f"{split.train.shape[1]}; evaluate on the dataset it was fitted on"
        )
    ev = X.evaluate_split(model, split)
    method = getattr(model, "method", None) if hasattr(model, "privacy_report") else "als"
    res = {
        "dataset": name,
        "model": str(args.model),
        "method": method or type(model).__name__.lower(),
        "protocol": split.protocol,
        "n_users": int(split.train.shape[0]),
        "n_items": int(split.train.shape[1]),
        "n_train": int(split.train.nnz),
        **X.privacy_summary(model, None),
        **ev,
    }
    threshold = _add_ranking(res, model, split, args)
    res["baselines"] = _baselines(args, split, name, res["method"], {}, model, _is_private_release(res), threshold)
    report = res["privacy_events"] if res["privacy_events"].get("events") else None
    res["privacy_summary"] = privacy_paragraph(report, getattr(model, "feedback", "explicit"), width=None)
    res["warnings"] = list(args._warnings)
    _add_description(res, model)
    res = separate_non_private(res)
    if args.json:
        print(json.dumps(X.json_safe(res)))
    else:
        print(f"model     {args.model} on {name} ({split.protocol} protocol)")
        _print_comparison(res)
        print("privacy")
        print(textwrap.fill(res["privacy_summary"], _WIDTH, initial_indent="  ", subsequent_indent="  "))
        _print_non_private(res)
    return 0


def _find(ids, wanted: str, what: str) -> int:
    ids = np.asarray(ids)
    hit = np.flatnonzero(ids.astype(str) == str(wanted))
    if hit.size == 0:
        raise CommandError(f"{what} {wanted!r} not found in the dataset")
    return int(hit[0])


def _titles(data, idx) -> list:
    meta = getattr(data, "item_metadata", None)
    if meta is None or "title" not in getattr(meta, "columns", ()):
        return [None] * len(idx)
    col = meta["title"]
    return [str(col.get(int(i), "")) if hasattr(col, "get") else str(col.iloc[int(i)]) for i in idx]


def _show_items(args, data, ids, scores, header: str) -> None:
    item_ids = np.asarray(getattr(data, "item_ids", np.arange(data.matrix.shape[1])))
    titles = _titles(data, ids)
    rows = [
        {"item": X.json_safe(item_ids[i]), "score": float(s), **({"title": t} if t else {})}
        for i, s, t in zip(ids, scores, titles)
    ]
    if args.json:
        print(json.dumps({"query": header, "items": rows}))
        return
    print(header)
    for r, row in enumerate(rows, 1):
        print(f"{r:>3}. {row['item']!s:<12} {row['score']:8.4f}  {row.get('title', '')}")


def _check_model_matches(model, data, name, args=None):
    """The data must have the model's items: the same number and, when the model file has item ids,
    the same ids in the same order (a file with other ids would map rows to the wrong items and
    titles). A model saved without ids (a private model whose item axis came from the data) cannot
    be checked beyond the count: a ``--ratings`` file then gets a warning."""
    n_model, n_data = model.item_factors_.shape[0], data.matrix.shape[1]
    if n_model != n_data:
        raise CommandError(
            f"model has {n_model} items but dataset {name} has {n_data}; pass the dataset the model was fitted on"
        )
    saved, ids = getattr(model, "item_ids_", None), getattr(data, "item_ids", None)
    if saved is not None and ids is not None:
        a, b = np.asarray(saved).astype(str).tolist(), np.asarray(ids).astype(str).tolist()
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if diff:
            i = diff[0]
            how = (
                "the same ids in another order (pass the --items catalogue the model was fitted with)"
                if sorted(a) == sorted(b)
                else f"{len(diff)} item ids differ"
            )
            raise CommandError(
                f"{name} does not match the model: both have {n_model} items, but {how}; row {i} is item "
                f"{a[i]!r} in the model and {b[i]!r} in {name}: pass the data the model was fitted on"
            )
    elif args is not None and args.ratings is not None and model._item_ids_dropped():
        _warn(
            args,
            f"cannot check that the items of {name} are the model's: the model was saved without item ids (its item "
            "axis was not a declared catalogue), so only the count was compared; a file with other ids gives wrong "
            "items. Fit with --items FILE to have them checked",
        )


def cmd_recommend(args) -> int:
    return _run("recommend", _recommend, args)


def _model_and_data(args):
    """Validate -n, load the saved model and the dataset it must match."""
    args._warnings = []
    if args.n < 1:
        raise CommandError(f"-n must be >= 1, got {args.n}")
    _check_data_args(args)
    model = _load_model(args.model)
    name, data = _load(args)
    _check_model_matches(model, data, name, args)
    return model, data


def _recommend(args) -> int:
    model, data = _model_and_data(args)
    u = _find(getattr(data, "user_ids", np.arange(data.matrix.shape[0])), args.user, "user")
    row = data.matrix[[u]]
    ids, scores = model.recommend(0, row, N=args.n, recalculate_user=True)
    _show_items(args, data, ids, scores, f"top {len(ids)} for user {args.user} ({row.nnz} items in history)")
    return 0


def cmd_similar(args) -> int:
    return _run("similar", _similar, args)


def _similar(args) -> int:
    model, data = _model_and_data(args)
    i = _find(getattr(data, "item_ids", np.arange(data.matrix.shape[1])), args.item, "item")
    ids, scores = model.similar_items(i, N=args.n + 1)
    keep = ids != i
    ids, scores = ids[keep][: args.n], scores[keep][: args.n]
    title = _titles(data, [i])[0]
    _show_items(args, data, ids, scores, f"items similar to {args.item}" + (f" ({title})" if title else ""))
    return 0
