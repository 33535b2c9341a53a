"""Private movie recommendations on MovieLens 100K trained by a Flower federation of user groups.

Each Flower client holds one group of users (consecutive users; ``--one-user``: a client per user)
and never sends a rating: it solves its users' embeddings against the released item factors and
sends only its users' summed per-item statistics. The server adds them, adds the noise once per
released statistic and keeps the user-level ledger (privrec.federated.flower). The run uses
Flower's simulation runtime (Ray) on this machine and checks the answer against the local
``DPALS.fit`` with the same noise seed.

    python examples/flower_movielens.py                              # ../shared/datasets/ml-100k or ./datasets
    python examples/flower_movielens.py --data-dir ~/data/ml-100k --clients 20
    python examples/flower_movielens.py --synthetic                  # generated ratings, no files
    python examples/flower_movielens.py --write-shards /tmp/shards --clients 4   # files for a deployment

``--write-shards`` writes one shard file per client (and the SuperNode commands that serve them)
for the localhost deployment of docs/federated-flower.md. Needs ``pip install "privrec[flower]"``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from privrec.data import DatasetNotFoundError, load_dataset
from privrec.models import DPALS

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "ml-100k"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="DP-ALS on MovieLens 100K over a (simulated) Flower federation.")
    p.add_argument("--data-dir", default=None, help="MovieLens 100K folder (default: ../shared/datasets/ml-100k)")
    p.add_argument("--synthetic", action="store_true", help="generated MovieLens-like ratings instead")
    p.add_argument("--clients", type=int, default=10, help="user groups, one per Flower client (default 10)")
    p.add_argument("--one-user", action="store_true", help="one client per user (slower: a SuperNode each)")
    p.add_argument("--epsilon", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=7, help="noise seed: experiments only (a known seed voids the DP)")
    p.add_argument("--write-shards", default=None, help="write one shard file per client here and exit")
    return p.parse_args(argv)


def load(args):
    if args.synthetic:
        return load_dataset("synthetic-skew", scale=0.2, random_state=0)
    folder = args.data_dir or (str(SHARED) if SHARED.is_dir() else None)
    try:
        return load_dataset("ml-100k", data_dir=folder)
    except DatasetNotFoundError as exc:
        print(
            f"MovieLens 100K not found: {exc}\nGet it with `privrec datasets prepare ml-100k --download`, pass its "
            "folder with --data-dir, or run with --synthetic.",
            file=sys.stderr,
        )
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        from privrec.federated import flower
    except ImportError as exc:
        print(f"{exc}", file=sys.stderr)
        return 2
    data = load(args)
    if data is None:
        return 2
    n_clients = data.shape[0] if args.one_user else args.clients
    if args.write_shards:
        out = Path(args.write_shards)
        out.mkdir(parents=True, exist_ok=True)
        for shard in flower.split_users(data, n_clients):
            path = out / f"shard-{shard.index}.npz"
            flower.save_shard(path, shard)
            print(
                f"flower-supernode --insecure --superlink 127.0.0.1:8000 --port {9094 + shard.index} "
                f"--node-config 'partition-id={shard.index} data-path=\"{path.resolve()}\"'"
            )
        return 0

    # axes="warn": the clients' users and items are the declared roster and catalogue, so the fit is
    # compared with the local fit of the same matrix (the default, "release", selects items privately)
    settings = dict(epsilon=args.epsilon, random_state=args.seed, axes="warn")
    if not args.synthetic:
        settings["rating_range"] = (1, 5)
    print(f"{data.shape[0]} users x {data.shape[1]} items, {data.nnz} ratings; {n_clients} Flower clients")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silence a Ray notice (telemetry: off by privrec)
    fed = flower.fit_simulation(DPALS(**settings), data, n_clients=n_clients)
    local = DPALS(**settings).fit(data, show_progress=False)

    print("\nround            clients  seconds  KiB to / from one client")
    for r in fed.federation_["rounds"]:
        print(
            f"{r['label']:<16} {r['answered']:>3}/{r['clients']:<4} {r['seconds']:7.3f}  "
            f"{r['bytes_to_client'] / 1024:7.1f} / {r['bytes_from_client'] / 1024:.1f}"
        )
    diff = max(
        float(np.abs(fed.item_factors_ - local.item_factors_).max(initial=0.0)),
        float(np.abs(fed.item_bias_ - local.item_bias_).max(initial=0.0)),
    )
    same = [(e.label, e.event) for e in fed.ledger_.entries] == [(e.label, e.event) for e in local.ledger_.entries]
    report = flower.privacy_report(fed)
    print(
        f"\nreleased item side vs the local DPALS.fit (same seed): largest difference {diff:.2g}; "
        f"ledger {'identical' if same else 'DIFFERENT'}; epsilon {report['epsilon']:.4f} at delta {report['delta']:g} "
        f"(local {local.privacy_report()['epsilon']:.4f})"
    )
    print(f"neighbouring relation: {report['neighbouring_relation']}")
    print(f"the server sees: {report['federation']['server_sees']}")
    short = report["federation"]["short_rounds"]
    print(f"releases with fewer users: {', '.join(short) if short else 'none'}")

    # a user ranks items on their own device from the released item side (no privacy cost)
    R = data.matrix if hasattr(data, "matrix") else data
    ids, _ = fed.recommend(0, R[0], N=5, filter_already_liked_items=True)
    titles = None
    meta = getattr(data, "item_metadata", None)
    if meta is not None and "title" in getattr(meta, "columns", []):
        titles = meta["title"].to_numpy()
    names = [str(titles[i]) if titles is not None else f"item {i}" for i in ids]
    print("top 5 for the first user: " + "; ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
