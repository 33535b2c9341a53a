"""``privrec datasets list | info NAME | prepare NAME``: find, inspect and prepare datasets.

* ``list``: every dataset name (real and synthetic) and whether a real one is found locally.
* ``info NAME [--data-dir DIR] [--json]``: users, items, interactions, density, share of the
  interactions held by the top 10% of items, min/median/max per user and per item.
* ``prepare NAME [--download] [--data-dir DIR]``: find (or, with ``--download``, fetch from the
  official URL) a real dataset, parse it once and fill the Parquet cache.

Real datasets are looked up in ``--data-dir`` (the dataset folder itself or a folder holding it),
else in ``$PRIVREC_DATA`` or ``./datasets``. Parsed data is cached in ``--cache-dir``, else
``$PRIVREC_CACHE``, else the user cache directory (never the working directory).

Every error a user can cause (missing or malformed files, a bad download, bad options) is one
line on stderr and exit status 2 (1 for operating-system I/O failures such as a full disk);
warnings (e.g. a corrupt cache entry being rebuilt) are one line each.
"""

from __future__ import annotations

import functools
import json
import sys
import warnings
import zipfile
import zlib
from typing import Any

from privrec._validation import check_random_state_seed
from privrec.commands._parsers import add_command
from privrec.data.download import SOURCES, default_data_root, download_dataset
from privrec.data.registry import DATASETS, find_dataset_folder, load_dataset, resolve_name
from privrec.data.stats import dataset_stats

DESCRIPTION = (
    "List known datasets, show statistics of one (users, items, interactions, skew), or prepare "
    "one: find it locally or download it from its official source, parse it once and cache it."
)


def register(subparsers) -> None:
    p = add_command(subparsers, "datasets", "list, describe and prepare datasets", DESCRIPTION)
    sub = p.add_subparsers(dest="datasets_command", metavar="SUBCOMMAND", required=True)

    q = sub.add_parser("list", help="list dataset names")
    q.add_argument("--data-dir", help="folder to look for real datasets in (default: $PRIVREC_DATA or ./datasets)")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=_user_errors(cmd_list))

    q = _dataset_command(sub, "info", "statistics of a dataset", cmd_info, "download a missing real dataset first")
    q.add_argument("--scale", type=float, default=1.0, help="synthetic presets: fraction of users kept (default 1)")
    q.add_argument("--seed", type=int, default=0, help="synthetic presets: generator seed (default 0)")
    q.add_argument("--json", action="store_true", help="print one JSON object")

    _dataset_command(
        sub,
        "prepare",
        "locate or download a real dataset and cache its parsed form",
        cmd_prepare,
        "download from the official URL if missing",
    )


def _dataset_command(sub, name: str, help: str, handler, download_help: str):
    """Subcommand ``name DATASET [--data-dir DIR] [--cache-dir DIR] [--no-cache] [--download]``."""
    q = sub.add_parser(name, help=help)
    q.add_argument("name", help="dataset name (see `privrec datasets list`)")
    q.add_argument(
        "--data-dir", help="folder holding the dataset (or a parent of it); default: $PRIVREC_DATA or ./datasets"
    )
    q.add_argument(
        "--cache-dir",
        help="Parquet cache folder (default: $PRIVREC_CACHE or the user cache directory, "
        "e.g. ~/.cache/privrec/datasets)",
    )
    q.add_argument("--no-cache", action="store_true", help="parse the source files without the Parquet cache")
    q.add_argument("--download", action="store_true", help=download_help)
    q.set_defaults(func=_user_errors(handler))
    return q


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"privrec datasets: warning: {_one_line(message)}", file=sys.stderr if file is None else file)


def _library_errors() -> tuple[type[BaseException], ...]:
    """Failures of the libraries under a subcommand (Arrow's only once pyarrow, an optional extra, is loaded)."""
    errors: list[type[BaseException]] = [zlib.error, zipfile.BadZipFile, EOFError, UnicodeError, OverflowError]
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        errors.append(pa.ArrowException)
    return tuple(errors)


def _user_errors(func):
    """Run a subcommand with one-line warnings, turning library failures that are not already
    ``ValueError`` / ``OSError`` (Arrow, zlib, zip, memory) into a one-line ``ValueError``."""

    @functools.wraps(func)
    def run(args):
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning
            try:
                return func(args)
            except (ValueError, OSError):
                raise
            except MemoryError:
                raise ValueError("not enough memory for this dataset") from None
            except _library_errors() as exc:
                raise ValueError(f"{type(exc).__name__}: {_one_line(exc)}") from None

    return run


def cmd_list(args) -> int:
    rows: list[dict[str, Any]] = []
    for name, d in DATASETS.items():
        found = None
        if d.kind == "real":
            folder = find_dataset_folder(name, args.data_dir)
            found = str(folder) if folder else None
        rows.append(
            {
                "name": name,
                "kind": d.kind,
                "description": d.description,
                "local": found,
                "downloadable": name in SOURCES,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        where = "generated" if r["kind"] == "synthetic" else (f"found: {r['local']}" if r["local"] else "not found")
        print(f"{r['name']:<{width}}  {r['kind']:<9}  {where:<28}  {r['description']}")
    return 0


def cmd_info(args) -> int:
    d = resolve_name(args.name)
    if d.kind == "synthetic":
        check_random_state_seed(args.seed, "--seed")
        if not (0 < args.scale <= 1):
            raise ValueError(f"--scale must be in (0, 1], got {args.scale:g}")
    x = load_dataset(
        d.name,
        data_dir=args.data_dir,
        download=args.download,
        cache=not args.no_cache,
        cache_dir=args.cache_dir,
        scale=args.scale,
        random_state=args.seed,
    )
    stats = dataset_stats(x)
    stats["name"] = d.name
    if d.rating_range is not None:
        stats["feedback"] = d.feedback
        stats["valid_values"] = d.rating_range.description
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    pu, pi = stats["per_user"], stats["per_item"]
    print(f"dataset        {d.name}  ({d.description})")
    if d.rating_range is not None:
        print(f"feedback       {d.feedback}: {d.rating_range.description}")
    print(f"users          {stats['users']:,}")
    print(f"items          {stats['items']:,}")
    print(f"interactions   {stats['interactions']:,}")
    print(f"density        {stats['density']:.6f}")
    print(f"top-10% items  hold {100 * stats['top10_item_share']:.1f}% of interactions")
    print(f"per user       min {pu['min']:,}  median {pu['median']:g}  max {pu['max']:,}")
    print(f"per item       min {pi['min']:,}  median {pi['median']:g}  max {pi['max']:,}")
    print(f"values         {stats['value_min']:g} .. {stats['value_max']:g}")
    return 0


def cmd_prepare(args) -> int:
    d = resolve_name(args.name)
    if d.kind == "synthetic":
        print(f"{d.name} is generated on the fly (seeded, no files); nothing to prepare")
        return 0
    folder = find_dataset_folder(d.name, args.data_dir)
    if folder is None and args.download:
        print(f"downloading {d.name} from {SOURCES[d.name].url} ...", flush=True)
        folder = download_dataset(d.name, args.data_dir if args.data_dir else default_data_root())
    x = load_dataset(
        d.name,
        data_dir=folder if folder is not None else args.data_dir,
        download=False,
        cache=not args.no_cache,
        cache_dir=args.cache_dir,
    )
    print(f"{d.name}: {x.n_users:,} users x {x.n_items:,} items, {x.nnz:,} interactions; source {folder}")
    return 0
