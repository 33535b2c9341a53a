"""Private movie recommendations on MovieLens with privrec.

Fits the default private model (DPALS: user-level DP item factors, automatic configuration) on a
random 80/10/10 split of the ratings, compares its test RMSE with two yardsticks (the training
global mean and non-private ALS), recommends movies for one user and explains the privacy
report.

    python examples/movielens.py --data-dir ~/data/ml-100k          # MovieLens 100K files
    python examples/movielens.py --dataset ml-1m --data-dir ~/data/ml-1m --epsilon 1
    python examples/movielens.py --synthetic                        # generated data, no files

Get the data with ``privrec datasets prepare ml-100k --download`` (it lands in ./datasets, which
is also where this script looks by default) or from https://grouplens.org/datasets/movielens/.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from privrec.data import DatasetNotFoundError, load_dataset
from privrec.evaluation.experiment import evaluate_split, make_split
from privrec.models import ALS, DPALS
from privrec.privacy import suggested_delta


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Private recommendations on MovieLens with privrec.")
    p.add_argument(
        "--data-dir", default=None, help="folder holding the MovieLens files (default: $PRIVREC_DATA or ./datasets)"
    )
    p.add_argument("--dataset", default="ml-100k", help="ml-100k (default), ml-1m, ml-10m, ml-20m, ml-latest-small")
    p.add_argument(
        "--synthetic", action="store_true", help="run on generated MovieLens-like ratings instead (no files needed)"
    )
    p.add_argument("--epsilon", type=float, default=5.0, help="privacy budget epsilon (default 5)")
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        help="privacy budget delta (default: a power of ten below 1 / (100 * number of users))",
    )
    p.add_argument("--user", default=None, help="user id to recommend for (default: the first test user)")
    p.add_argument("-n", type=int, default=10, help="number of recommendations (default 10)")
    return p.parse_args(argv)


def load(args):
    """The ratings as ``privrec.data.Interactions``, or ``None`` with a message when files are missing."""
    if args.synthetic:
        return load_dataset("synthetic-skew", scale=0.3, random_state=0)
    try:
        return load_dataset(args.dataset, data_dir=args.data_dir)
    except DatasetNotFoundError as exc:
        print(
            f"MovieLens data not found: {exc}\n"
            f"Download it with `privrec datasets prepare {args.dataset} --download`, pass its folder with "
            "--data-dir, or run this example on generated data with --synthetic.",
            file=sys.stderr,
        )
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    data = load(args)
    if data is None:
        return 2
    split = make_split(data, "random", seed=0)  # 80/10/10 of the ratings; test users projected from train + validation
    n_users, n_items = split.train.shape
    delta = args.delta if args.delta is not None else suggested_delta(n_users)
    print(f"{data.name}: {n_users:,} users x {n_items:,} items, {split.train.nnz:,} training ratings")

    # 1. the private model: only public quantities (n_users, n_items, epsilon, delta) configure it
    model = DPALS(epsilon=args.epsilon, delta=delta)
    model.fit(split.train, show_progress=False)
    private_rmse = evaluate_split(model, split)["metrics"]["rmse"]

    # 2. yardsticks: the training global mean (trivial) and non-private ALS (no privacy at all)
    mean = float(split.train.data.mean())
    trivial_rmse = math.sqrt(float(np.mean((split.test.data - mean) ** 2)))
    als = ALS(random_state=0).fit(split.train, show_progress=False)
    als_rmse = evaluate_split(als, split)["metrics"]["rmse"]

    print("\ntest RMSE (lower is better)")
    print(f"  private DPALS (epsilon {args.epsilon:g}) {private_rmse:.4f}")
    print(f"  trivial: global mean             {trivial_rmse:.4f}   (non-private)")
    print(f"  ALS                              {als_rmse:.4f}   (non-private)")
    if private_rmse >= trivial_rmse:
        print("  -> at this epsilon the private model does not beat the trivial baseline on this data")

    # 3. recommendations for one user, computed from the released item factors and the user's
    #    own history only (the user's embedding is never released: no privacy cost)
    user_ids = np.asarray(split.user_ids)
    if args.user is None:
        u = int(np.flatnonzero(np.diff(split.test.indptr) > 0)[0])
    else:
        hit = np.flatnonzero(user_ids.astype(str) == str(args.user))
        if hit.size == 0:
            print(f"user {args.user!r} not found", file=sys.stderr)
            return 2
        u = int(hit[0])
    history = split.projection[[u]]
    ids, scores = model.recommend(u, history, N=args.n, recalculate_user=True)
    titles = split.item_metadata["title"] if split.item_metadata is not None else None
    print(f"\ntop {len(ids)} for user {user_ids[u]} ({history.nnz} rated movies)")
    for rank, (i, s) in enumerate(zip(ids, scores), 1):
        title = f"  {titles.iloc[i]}" if titles is not None else ""
        print(f"  {rank:>2}. item {split.item_ids[i]!s:<8} score {s:7.3f}{title}")

    # 4. the privacy report: every noise event of the fit and the epsilon an accountant computed
    report = model.privacy_report()
    eps, acc = report["epsilon"], report["accountant"]
    print(f"\nprivacy: ({eps:.3g}, {report['delta']:.2g})-DP at the user level ({report['neighbouring_relation']})")
    print(
        f"  epsilon computed by the {acc.upper()} accountant over {len(report['events'])} recorded noise events "
        f"(RDP: {report['epsilon_rdp']:.3g}, PLD: {report['epsilon_pld']:.3g})"
    )
    print(
        f"  meaning: removing all of one user's ratings changes the probability of any released item factors "
        f"by at most a factor e^{eps:.3g} = {math.exp(eps):.3g}, except with probability {report['delta']:.2g}"
    )
    print("  released: item factors and item biases (plus the noisy counts and mean); user embeddings never")
    labels = sorted({e["label"].split(":")[0] for e in report["events"]})
    print("  noise events: " + ", ".join(labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
