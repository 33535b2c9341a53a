"""Does the default get better (never worse) with more budget, and never fall below the private baselines?

Issues 24 and 43's monotonicity sweep. Per dataset and epsilon in ``--epsilons`` (default 0.5 ..
50) this fits ``DPALS()`` exactly as ``privrec fit`` builds it (automatic configuration) and the
private bias model (``_baselines.PrivateBias``; private popularity for implicit data) with
``--seeds`` noise seeds each, on one split (seed 0), and reports

* explicit ratings (random 80/10/10 split): test RMSE, and Recall@20 from the default's own
  ``recommend`` (relevant = test rating >= 4, the user's train + validation items filtered; the
  private baseline ranks by its noisy counts, on the whole budget);
* implicit feedback (held-out users): Recall@20;
* both: the Recall@20 of the popularity of the default's *own* released counts (``item_counts_``,
  free: the row ``privrec fit --evaluate`` prints as "this fit's released noisy counts").

then checks the properties of the issues: the default's mean never gets worse by more than
``--tolerance`` (0.005) as epsilon grows; its RMSE is never worse than the private bias model's by
more than the tolerance; its Recall@20 is at least ``--ratio`` (0.97) times both popularity
rankings at the same epsilon. Seeds make the sweep reproducible: **a known seed voids the privacy
guarantee**; only the measured utility is meaningful here. Nothing is tuned on these figures.

    python benchmarks/bench_monotone.py --quick      # seconds: synthetic-biases at 0.2, 3 epsilons
    python benchmarks/bench_monotone.py              # ml-100k, lastfm-2k, the synthetic presets, ml20m-like
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

try:
    from . import _common as C
    from ._baselines import PrivateBias
    from .bench_utility import _score, load_split
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as C  # type: ignore
    from _baselines import PrivateBias  # type: ignore
    from bench_utility import _score, load_split  # type: ignore

from privrec.commands._yardsticks import _Popularity, ranking_metrics_of
from privrec.evaluation import experiment as X
from privrec.evaluation.topk import popularity_topk

#: the default's Recall@20 must be at least this times both popularity rankings (issue 43)
RATIO = 0.97
EPSILONS = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 15.0, 20.0, 50.0)
DATASETS = (
    "ml-100k",
    "lastfm-2k",
    "synthetic-skew",
    "synthetic-biases",
    "synthetic-structured",
    "ml10m-like@0.2",
    "ml20m-like",
)


def explicit_recall(scores_fn, split, k: int = 20, threshold: float = 4.0) -> float:
    """Recall@k of ``scores_fn(users, history) -> (ids, scores)`` on the test ratings >= threshold,
    every user's train + validation items filtered (the random protocol's projection history)."""
    return C.rating_recall(scores_fn, split.test, split.projection, k, threshold)


def _popularity_recommender(prior: np.ndarray, k: int):
    """Top-k of one score per item, each user's history filtered, without users x items scores
    (:func:`privrec.evaluation.topk.popularity_topk`: wide catalogues fit in memory)."""

    def rank(users, history):
        return popularity_topk(np.asarray(prior, dtype=np.float64), k, history), None

    return rank


def run_dataset(spec: str, seeds: int, epsilons, quiet: bool) -> dict | None:
    split = load_split(spec)
    if split is None:
        C.log(f"{spec}: dataset files not found, skipped", quiet)
        return None
    implicit = split.protocol != "random"
    delta = X.default_delta(split)
    out: dict = {"dataset": spec, "protocol": split.protocol, "delta": delta, "cells": []}
    for eps in epsilons:
        t0 = time.perf_counter()
        rows = {"default": [], "private-baseline": [], "own-counts": []}
        factors = []
        for s in range(seeds):
            model = X.make_model("ada-dpals", eps, delta, seed=1000 + s, protocol=split.protocol)
            model.fit(split.train, show_progress=False)
            factors.append(int(model.config_["factors"]))
            base = PrivateBias(eps, delta, explicit=not implicit, random_state=1000 + s).fit(split.train)
            own = _Popularity(model.item_counts_, "popularity (this fit's released noisy counts)")
            if implicit:
                rows["default"].append([_score(model, split)])
                rows["private-baseline"].append([_score(base, split)])
                rows["own-counts"].append([ranking_metrics_of(own, split)["recall@20"]])
            else:
                rec = explicit_recall(lambda u, h, m=model: m.recommend(u, h, N=20), split)
                rows["default"].append([_score(model, split), rec])
                # the private baseline's ranking: its own noisy counts (private popularity)
                pop = PrivateBias(eps, delta, explicit=False, random_state=2000 + s).fit(split.train)
                rows["private-baseline"].append(
                    [_score(base, split), explicit_recall(_popularity_recommender(pop.item_bias_, 20), split)]
                )
                rows["own-counts"].append(
                    [math.nan, explicit_recall(_popularity_recommender(model.item_counts_, 20), split)]
                )
        cell = {"epsilon": eps, "factors": factors, "seconds": time.perf_counter() - t0}
        names = ["recall@20"] if implicit else ["rmse", "recall@20"]
        for model_name, vals in rows.items():
            arr = np.asarray(vals)
            cell[model_name] = {
                n: [float(arr[:, i].mean()), float(arr[:, i].std())]
                for i, n in enumerate(names)
                if not np.isnan(arr[:, i]).all()
            }
        out["cells"].append(cell)
        C.log(
            f"{spec} eps={eps:g} factors={factors} "
            + "  ".join(
                f"{m}: " + ", ".join(f"{n} {cell[m][n][0]:.4f}±{cell[m][n][1]:.4f}" for n in names if n in cell[m])
                for m in rows
            ),
            quiet,
        )
    return out


def checks(res: dict, tolerance: float, ratio: float = RATIO) -> list[str]:
    """Violations of monotonicity (default vs itself, within ``tolerance``), of 'RMSE never above the
    private bias model' (within ``tolerance``) and of 'Recall@20 at least ``ratio`` times both
    popularity rankings' (the private baseline's and the default's own released counts)."""
    bad = []
    names = ["recall@20"] if res["protocol"] != "random" else ["rmse", "recall@20"]
    for n in names:
        sign = 1.0 if n == "rmse" else -1.0  # +: lower is better
        means = [c["default"][n][0] for c in res["cells"]]
        for a, b, ca in zip(means, means[1:], res["cells"]):
            if sign * (b - a) > tolerance:
                bad.append(f"{res['dataset']} {n}: worse after eps {ca['epsilon']:g} ({a:.4f} -> {b:.4f})")
        for c in res["cells"]:
            d = c["default"][n][0]
            for key, what in (("private-baseline", "the private baseline"), ("own-counts", "its own counts")):
                if n not in c.get(key, {}):
                    continue
                p = c[key][n][0]
                worse = sign * (d - p) > tolerance if n == "rmse" else d < ratio * p
                if worse:
                    bad.append(f"{res['dataset']} {n}: below {what} at eps {c['epsilon']:g} ({d:.4f} vs {p:.4f})")
    return bad


def _pm(entry: dict, n: str) -> str:
    return f"{entry[n][0]:.4f} ± {entry[n][1]:.4f}" if n in entry else ""


def to_markdown(results: list[dict], command: str, tolerance: float, ratio: float = RATIO) -> str:
    lines = [
        "# Monotonicity sweep of the default DPALS (issues 24, 43)",
        "",
        f"Command: `{command}`. Mean ± std over noise seeds; the private baseline is the private bias",
        "model (RMSE) / private popularity on the whole budget (Recall@20); 'own counts' ranks by the",
        "default's own released noisy counts. Explicit Recall@20 comes from the default's `recommend`",
        f"(relevant = test rating >= 4). Checks: monotone and RMSE within {tolerance:g}; Recall@20 >=",
        f"{ratio:g} x both popularity rankings.",
        "",
    ]
    for res in results:
        names = ["recall@20"] if res["protocol"] != "random" else ["rmse", "recall@20"]
        lines += [f"## {res['dataset']}", ""]
        head = (
            "| eps | factors | " + " | ".join(f"default {n} | private {n}" for n in names) + " | own counts recall@20 |"
        )
        lines += [head, "|" + "---|" * (3 + 2 * len(names))]
        for c in res["cells"]:
            vals = " | ".join(f"{_pm(c['default'], n)} | {_pm(c['private-baseline'], n)}" for n in names)
            own = _pm(c.get("own-counts", {}), "recall@20")
            lines.append(f"| {c['epsilon']:g} | {c['factors']} | {vals} | {own} |")
        bad = checks(res, tolerance, ratio)
        lines += ["", "Violations: " + ("none" if not bad else ""), *[f"- {b}" for b in bad], ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=0.005)
    ap.add_argument("--ratio", type=float, default=RATIO, help="Recall@20 >= ratio x popularity (default 0.97)")
    ap.add_argument("--quick", action="store_true", help="synthetic-biases at 0.2, eps 1/5/20, 1 seed")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.datasets, args.epsilons, args.seeds = ["synthetic-biases@0.2"], [1.0, 5.0, 20.0], 1
    results = [r for r in (run_dataset(d, args.seeds, args.epsilons, args.quiet) for d in args.datasets) if r]
    command = "python benchmarks/bench_monotone.py " + " ".join(argv if argv is not None else sys.argv[1:])
    suffix = "_quick" if args.quick else ""
    C.write_json(args.out / f"monotone{suffix}.json", {"environment": C.environment(), "results": results})
    C.write_text(args.out / f"monotone{suffix}.md", to_markdown(results, command.strip(), args.tolerance, args.ratio))
    for res in results:
        for b in checks(res, args.tolerance, args.ratio):
            C.log("VIOLATION " + b, args.quiet)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
