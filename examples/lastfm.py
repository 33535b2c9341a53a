"""Private artist recommendations from Last.fm play counts (implicit feedback) with privrec.

Fits the default private model for implicit feedback (DPALS with ``feedback="implicit"``: play
counts binarised, a private popularity prior, user-level DP item factors) on held-out users
(Liang et al. 2018: each test user's history is split into fold-in items and targets), compares
its Recall@20 with two yardsticks (the exact popularity ranking and non-private ALS), recommends
artists for one held-out user and explains the privacy report.

    python examples/lastfm.py --data-dir ~/data/hetrec2011-lastfm-2k
    python examples/lastfm.py --synthetic                  # generated play counts, no files

Get the data with ``privrec datasets prepare lastfm-2k --download`` (it lands in ./datasets, which
is also where this script looks by default) or from https://grouplens.org/datasets/hetrec-2011/.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np
import scipy.sparse as sp

from privrec.data import DatasetNotFoundError, load_dataset, low_rank_interactions
from privrec.evaluation import recall_at_k
from privrec.evaluation.experiment import evaluate_split, make_split
from privrec.models import ALS, DPALS
from privrec.privacy import suggested_delta


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Private artist recommendations from Last.fm play counts.")
    p.add_argument(
        "--data-dir", default=None, help="folder holding user_artists.dat (default: $PRIVREC_DATA or ./datasets)"
    )
    p.add_argument("--synthetic", action="store_true", help="run on generated play counts instead (no files needed)")
    p.add_argument("--epsilon", type=float, default=5.0, help="privacy budget epsilon (default 5)")
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        help="privacy budget delta (default: a power of ten below 1 / (100 * number of users))",
    )
    p.add_argument("--heldout-users", type=int, default=150, help="validation and test users each (default 150)")
    p.add_argument("-n", type=int, default=10, help="number of recommendations (default 10)")
    return p.parse_args(argv)


def load(args):
    """Play counts as ``privrec.data.Interactions``, or ``None`` with a message when files are missing."""
    if args.synthetic:
        return low_rank_interactions(
            1500, 3000, 60_000, values="counts", random_state=0, name="lastfm-like"
        ).interactions
    try:
        return load_dataset("lastfm-2k", data_dir=args.data_dir)
    except DatasetNotFoundError as exc:
        print(
            f"Last.fm data not found: {exc}\n"
            "Download it with `privrec datasets prepare lastfm-2k --download`, pass its folder with --data-dir, "
            "or run this example on generated data with --synthetic.",
            file=sys.stderr,
        )
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    data = load(args)
    if data is None:
        return 2
    # held-out users; play counts are binarised (every listened artist is a positive)
    split = make_split(data, "heldout-users", seed=0, heldout_users=args.heldout_users)
    n_users, n_items = split.train.shape
    # The papers use delta = 1/n on held-out users; a deployment should use much less.
    delta = args.delta if args.delta is not None else suggested_delta(n_users)
    print(
        f"{data.name}: {n_users:,} training users x {n_items:,} artists, {split.train.nnz:,} positives; "
        f"{split.history.shape[0]} held-out test users"
    )

    # 1. the private model for implicit feedback (automatic configuration from public quantities)
    model = DPALS(feedback="implicit", unobserved_weight=0.2, epsilon=args.epsilon, delta=delta)
    model.fit(split.train, show_progress=False)
    private = evaluate_split(model, split)["metrics"]["recall@20"]

    # 2. yardsticks: exact popularity (trivial) and non-private ALS (no privacy at all)
    counts = np.diff(sp.csc_matrix(split.train).indptr).astype(np.float32)
    none = np.zeros((split.history.shape[0], 0), dtype=np.float32)
    popularity = recall_at_k(
        none, np.zeros((n_items, 0), np.float32), split.targets, split.history, k=20, item_bias=counts
    )
    # ridge 2 and gravity 0.05 were chosen on the Last.fm *validation* users
    # (benchmarks/bench_tradeoff.py --tune-als; never on test users)
    als = ALS(
        factors=64,
        regularization=2.0,
        unobserved_weight=0.05,
        iterations=15,
        biases=False,
        center=False,
        random_state=0,
    ).fit(split.train, show_progress=False)
    als_recall = evaluate_split(als, split)["metrics"]["recall@20"]

    print("\ntest Recall@20 (higher is better)")
    print(
        f"  private DPALS (epsilon {args.epsilon:g}) {private:.4f}"
        + (
            "   (the private popularity ranker: the noise left no room for personal factors)"
            if model.item_factors_.shape[1] == 0
            else ""
        )
    )
    print(f"  trivial: exact popularity        {popularity:.4f}   (non-private)")
    print(f"  ALS                              {als_recall:.4f}   (non-private)")

    # 3. recommendations for one held-out user: their embedding is computed from the released
    #    item side and their own history only (never released: no privacy cost)
    u = int(np.flatnonzero(np.diff(split.history.indptr) > 0)[0])
    history = split.history[[u]]
    ids, scores = model.recommend(0, history, N=args.n, recalculate_user=True)
    names = split.item_metadata["title"] if split.item_metadata is not None else None
    print(f"\ntop {len(ids)} artists for a held-out user who listened to {history.nnz} artists")
    for rank, (i, s) in enumerate(zip(ids, scores), 1):
        name = f"  {names.iloc[i]}" if names is not None else ""
        print(f"  {rank:>2}. artist {split.item_ids[i]!s:<8} score {s:7.4f}{name}")

    # 4. the privacy report: every noise event of the fit and the epsilon an accountant computed
    report = model.privacy_report()
    eps, acc = report["epsilon"], report["accountant"]
    print(f"\nprivacy: ({eps:.3g}, {report['delta']:.2g})-DP at the user level ({report['neighbouring_relation']})")
    print(
        f"  epsilon computed by the {acc.upper()} accountant over {len(report['events'])} recorded noise events "
        f"(RDP: {report['epsilon_rdp']:.3g}, PLD: {report['epsilon_pld']:.3g})"
    )
    print(
        f"  meaning: removing all of one user's plays changes the probability of any released item factors "
        f"by at most a factor e^{eps:.3g} = {math.exp(eps):.3g}, except with probability {report['delta']:.2g}"
    )
    print("  released: item factors and the popularity prior (noisy counts / n_users); user embeddings never")
    labels = sorted({e["label"].split(":")[0] for e in report["events"]})
    print("  noise events: " + ", ".join(labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
