"""``privrec compare``: several models on one split, one table and one plot.

The private model at several target epsilons (each with the popularity ranking of its own released
noisy counts), the non-private yardsticks (trivial baseline, exact popularity, ALS) on the same
split: RMSE where it applies, Recall@20, NDCG@20 (:func:`privrec.evaluation.compare.compare`).
Every metric is an exact figure computed on held-out data and is marked ``[non-private]``.
``--repeats N`` fits every model N times and prints mean ± std; ``--plot FILE`` draws the table
(matplotlib, the ``plots`` extra); ``--json`` prints one JSON object.
"""

from __future__ import annotations

import math

from ..evaluation import compare as C
from ..evaluation import experiment as X
from ._data import _check_data_args, _data_args, _load
from ._parsers import _out_args, add_command
from ._running import CommandError, _progress_enabled, _run, _warn
from .report import _check_plot, _print_json

COMPARE_DESCRIPTION = """\
Compare models on one split of one dataset: the private model (default
ada-dpals) at each --epsilon, the popularity ranking of each private fit's own
released noisy counts (no extra privacy cost), and the non-private yardsticks --
the training global mean (RMSE), the exact popularity ranking and ALS -- in one
table (RMSE for explicit ratings, Recall@20, NDCG@20) and, with --plot, one chart.

Every metric is computed on the exact held-out data and marked [non-private]:
the guarantee of the private models does not cover it.

Splits: random (80/10/10 of the ratings), temporal (per user by timestamp: each
user's latest ratings are tested; needs timestamps, e.g. MovieLens) and
heldout-users (binarised; the default for Last.fm).

Examples:
  privrec compare
  privrec compare --dataset ml-100k --data-dir ~/data/ml-100k --epsilon 1 5 20 --plot compare.png
  privrec compare --dataset ml-100k --data-dir ~/data/ml-100k --split temporal --repeats 3
"""


def register(subparsers) -> None:
    """Add ``privrec compare`` to the top-level ``privrec`` parser."""
    p = add_command(
        subparsers, "compare", "compare private models and yardsticks on one split (table, plot)", COMPARE_DESCRIPTION
    )
    _data_args(p, split=False)
    g = p.add_argument_group("comparison")
    g.add_argument(
        "--split",
        choices=C.SPLITS,
        default=None,
        help="random (80/10/10 of the ratings), temporal (per user by timestamp) or heldout-users; default: the "
        "dataset's usual protocol (random, heldout-users for Last.fm)",
    )
    g.add_argument(
        "--heldout-users",
        dest="heldout_users",
        type=int,
        default=None,
        help="number of held-out test users (heldout-users split)",
    )
    g.add_argument(
        "--epsilon",
        type=float,
        nargs="+",
        default=list(C.DEFAULT_EPSILONS),
        metavar="E",
        help="target epsilons of the private model (default: 1 5 20)",
    )
    g.add_argument(
        "--delta", type=float, default=None, help="target delta (default: 1e-5, 1/n_users for held-out users)"
    )
    g.add_argument(
        "--method",
        choices=X.PRIVATE_METHODS,
        default="ada-dpals",
        help="the private method (default: ada-dpals, automatic configuration)",
    )
    g.add_argument(
        "--rating-range",
        dest="rating_range",
        nargs=2,
        type=float,
        metavar=("LOW", "HIGH"),
        default=None,
        help="the public scale of valid ratings (e.g. 1 5) for the private model's clipping and the relevance threshold",
    )
    g.add_argument(
        "--no-als",
        dest="als",
        action="store_false",
        help="leave out non-private ALS (the slowest yardstick on large data)",
    )
    g.add_argument(
        "--relevance-threshold",
        dest="relevance_threshold",
        type=float,
        default=None,
        help="explicit ratings: a held-out rating at or above this is relevant (default: the top quarter of the "
        "rating scale, 4 on 1-5)",
    )
    g.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="fit every model N times (fresh noise, another initialisation) and print mean ± std (default 1)",
    )
    g.add_argument(
        "--noise-seed",
        dest="noise_seed",
        type=int,
        default=None,
        help="seed the runs' privacy noise (run r: seed + r), for reproducible experiments only: a known seed "
        "VOIDS the privacy guarantee (default: fresh randomness from the operating system)",
    )
    g = p.add_argument_group("output")
    g.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="save the comparison chart (PNG, PDF or SVG by extension; needs matplotlib, the 'plots' extra)",
    )
    _out_args(g)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    return _run("compare", _compare, args)


def _check_args(args) -> None:
    _check_data_args(args)
    for e in args.epsilon:
        if not (e > 0):
            raise CommandError(f"--epsilon must be > 0, got {e:g}")
    if len(set(args.epsilon)) != len(args.epsilon):
        raise CommandError(f"--epsilon lists a value twice: {' '.join(f'{e:g}' for e in args.epsilon)}")
    if args.delta is not None and not 0 < args.delta < 1:
        raise CommandError(f"--delta must be in (0, 1), got {args.delta}")
    if args.repeats < 1:
        raise CommandError(f"--repeats must be >= 1, got {args.repeats}")
    if args.relevance_threshold is not None and not math.isfinite(args.relevance_threshold):
        raise CommandError(f"--relevance-threshold must be a finite number, got {args.relevance_threshold}")
    if args.rating_range is not None:
        lo, hi = args.rating_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise CommandError(f"--rating-range must be two finite numbers LOW < HIGH, got {lo:g} {hi:g}")
        args.rating_range = (float(lo), float(hi))
    if args.split != "heldout-users" and args.heldout_users is not None and args.split is not None:
        _warn(args, f"--heldout-users is ignored by the {args.split} split")
    _check_plot(args.plot)


def _split_name(args, name: str) -> str:
    if args.split:
        return args.split
    if args.ratings is not None:
        return "heldout-users" if args.rating_col == "" else "random"
    return X.default_protocol(name)


def _compare(args) -> int:
    args._warnings = []
    _check_args(args)
    name, data = _load(args)
    split = _split_name(args, name)
    if split == "temporal" and getattr(data, "timestamps", None) is None:
        raise CommandError(
            f"--split temporal needs timestamps and {name} has none (the MovieLens datasets have them; generated "
            "data and --ratings files do not): use --split random"
        )
    say = None
    if _progress_enabled(args):
        import sys

        def say(msg: str) -> None:
            print(f"privrec compare: fitting {msg}", file=sys.stderr, flush=True)

    if args.noise_seed is not None:
        _warn(args, "--noise-seed: a known seed voids the privacy guarantee of every private model here")
    params = {"rating_range": args.rating_range} if args.rating_range is not None else None
    result = C.compare(
        data,
        epsilons=args.epsilon,
        delta=args.delta,
        method=args.method,
        split=split,
        seed=args.seed,
        heldout_users=args.heldout_users,
        repeats=args.repeats,
        random_state=args.noise_seed,
        yardsticks=[y for y in C.YARDSTICKS if args.als or y != "als"],
        private_params=params,
        relevance_threshold=args.relevance_threshold,
        dataset=name,
        progress=say,
    )
    out = result.to_dict()
    out["noise_seed"] = args.noise_seed
    out["warnings"] = list(args._warnings)
    if args.plot is not None:
        out["plot"] = result.plot(args.plot)
    if args.json:
        _print_json(out)
    else:
        print(result.format())
        if args.plot is not None:
            print(f"plot      {args.plot}")
    return 0
