"""``privrec export``: every user's top-N items to a Parquet file (:func:`privrec.serving.recommend_all`).

Reads a model saved by ``privrec fit --output`` and the users' histories (``--ratings FILE`` or
``--dataset NAME``, the same data options as ``privrec recommend``), projects each user from their
own history (billboard, no privacy cost; a model with stored user factors for exactly these users
uses them) and writes one row per (user, rank) in user batches with bounded memory.
``--approximate`` searches an HNSW index of the item side instead of scoring every item (needs
``pip install 'privrec[serving]'``).
"""

from __future__ import annotations

import json

from ._data import _check_data_args, _data_args, _load, _load_model
from ._parsers import _out_args, add_command
from ._paths import _check_output_path
from ._running import CommandError, _progress_enabled, _run

EXPORT_DESCRIPTION = """\
Write every user's top-N items to a Parquet file, one row per (user, rank) with
columns user, rank, item, score. Users are processed in batches, so memory stays
bounded whatever the number of users. Each user's embedding is recomputed from the
saved item factors and the user's own history only, so exporting costs no privacy.
Items a user already has are left out (--keep-rated keeps them). Item ids are the
model's (saved with every model, with or without --items); a model file written
by an older privrec without them gets item indices, with a warning.

Examples:
  privrec export --model model.npz --dataset ml-100k --data-dir ~/data/ml-100k --output top10.parquet
  privrec export --model model.npz --ratings ratings.csv --output top20.parquet -n 20
  privrec export --model model.npz --ratings ratings.parquet --output top10.parquet --approximate
"""


def register(subparsers) -> None:
    p = add_command(subparsers, "export", "write every user's top-N items to Parquet", EXPORT_DESCRIPTION)
    p.add_argument("--model", required=True, help="model file written by 'privrec fit --output'")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="Parquet file to write (atomically)")
    p.add_argument("-n", "--n", dest="n", type=int, default=10, help="items per user (default 10)")
    p.add_argument(
        "--batch-size",
        dest="batch_size",
        type=int,
        default=None,
        help="users per batch (default: about 64 MiB of scores per batch)",
    )
    p.add_argument("--keep-rated", dest="keep_rated", action="store_true", help="do not leave out rated items")
    p.add_argument(
        "--approximate",
        action="store_true",
        help="approximate nearest-neighbour search (faiss HNSW; needs pip install 'privrec[serving]')",
    )
    _data_args(p, split=False)
    _out_args(p)
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    return _run("export", _export, args)


def _export(args) -> int:
    from ..serving import ItemIndex, recommend_all

    args._warnings = []
    if args.n < 1:
        raise CommandError(f"-n must be >= 1, got {args.n}")
    if args.batch_size is not None and args.batch_size < 1:
        raise CommandError(f"--batch-size must be >= 1, got {args.batch_size}")
    _check_output_path(args.output, "--output")  # before any loading: a folder, /dev/null, ... fail at once
    _check_data_args(args)
    model = _load_model(args.model)
    name, data = _load(args)
    index = None
    if args.approximate:
        try:
            index = ItemIndex(model, "faiss", similar_items=False)
        except ImportError as exc:
            raise CommandError(str(exc)) from None
    summary = recommend_all(
        model,
        data,
        args.output,
        N=args.n,
        batch_size=args.batch_size,
        filter_already_liked_items=not args.keep_rated,
        index=index,
        show_progress=_progress_enabled(args),
    )
    summary.update(dataset=name, model=str(args.model), warnings=list(args._warnings))
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"wrote {summary['rows']:,} rows (top {args.n} for {summary['users']:,} users of {name}"
            f"{', approximate search' if index is not None else ''}) to {args.output}"
        )
    return 0
