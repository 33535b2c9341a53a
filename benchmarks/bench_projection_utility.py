"""Does the cheaper item-step estimator keep the validation utility? ``item_projection`` shift vs eigen.

Issue 29: the SSP item step makes every noisy Gramian that is not positive definite solvable
either by the exact PSD projection of spec 004 §2 (``item_projection="eigen"``, one
eigendecomposition per item) or by the eigenvalue shift (``"shift"``, one Cholesky solve; AdaSSP's
shift, Wang 2018). Both are post-processing of the same release (same events, same epsilon).
Per dataset and epsilon this fits ``DPALS()`` exactly as ``privrec fit`` builds it (automatic
configuration, including the private selection where it runs) with each estimator and
``--seeds`` noise seeds, plus optional extra rows with explicit ``factors`` (``--factors``: the
projection matters most at large d), and scores the **validation** fold (never the test fold):

* explicit ratings (random 80/10/10 split, seed 0): validation RMSE, and Recall@20 from the
  model's own ``recommend`` (relevant = validation rating >= 4, the user's train items filtered);
* implicit feedback (held-out users): Recall@20 on the validation users' targets.

Seeds make the comparison reproducible: **a known seed voids the privacy guarantee**; only the
measured utility is meaningful here.

    python benchmarks/bench_projection_utility.py --quick     # seconds: synthetic-skew at 0.2
    python benchmarks/bench_projection_utility.py             # ml-100k, ml10m-like@0.2, ml20m-like, eps 1/5/20
    python benchmarks/bench_projection_utility.py --factors 64 --factor-epsilons 5   # + the timed rank

Outputs ``<out>/projection_utility[_quick].json`` and ``.md``; docs/performance.md quotes them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

try:
    from . import _common as C
    from .bench_utility import load_split
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as C  # type: ignore
    from bench_utility import load_split  # type: ignore

from privrec.evaluation import experiment as X
from privrec.evaluation.protocols import evaluate_heldout, evaluate_ratings

EPSILONS = (1.0, 5.0, 20.0)
DATASETS = ("ml-100k", "ml10m-like@0.2", "ml20m-like")
PROJECTIONS = ("shift", "eigen")


def validation_ratings(split) -> sp.csr_matrix:
    """The random protocol's validation ratings: projection history minus the training part."""
    val = (sp.csr_matrix(split.projection) - sp.csr_matrix(split.train)).tocsr()
    val.eliminate_zeros()
    return val


def validation_recall(model, train: sp.csr_matrix, val: sp.csr_matrix, k: int = 20, threshold: float = 4.0) -> float:
    """Recall@k of ``model.recommend`` on the validation ratings >= threshold (train items filtered)."""
    return C.rating_recall(
        lambda u, h: model.recommend(u, h, N=k, filter_already_liked_items=True), val, train, k, threshold
    )


def score(model, split) -> dict:
    """Validation metrics of a fitted model."""
    if split.protocol == "random":
        train = sp.csr_matrix(split.train)
        val = validation_ratings(split)
        rmse = evaluate_ratings(model, train, val, history=train)["metrics"]["rmse"]
        return {"rmse": float(rmse), "recall@20": validation_recall(model, train, val)}
    res = evaluate_heldout(model, split.train, split.validation_history, split.validation_targets, k=20)
    return {"recall@20": float(res["metrics"]["recall@20"])}


def run_dataset(spec: str, seeds: int, epsilons, factors: list[int], quiet: bool, factor_epsilons=None) -> dict | None:
    split = load_split(spec)
    if split is None:
        C.log(f"{spec}: dataset files not found, skipped", quiet)
        return None
    delta = X.default_delta(split)
    out: dict = {"dataset": spec, "protocol": split.protocol, "delta": delta, "cells": []}
    for f in [None, *factors]:
        for eps in epsilons if f is None or not factor_epsilons else factor_epsilons:
            cell: dict = {"epsilon": eps, "factors": "default" if f is None else f}
            for proj in PROJECTIONS:
                t0 = time.perf_counter()
                rows, ranks = [], []
                for s in range(seeds):
                    params = {"item_projection": proj, **({} if f is None else {"factors": f})}
                    model = X.make_model("ada-dpals", eps, delta, params=params, seed=1000 + s, protocol=split.protocol)
                    model.fit(split.train, show_progress=False)
                    ranks.append(int(model.config_["factors"]))
                    rows.append(score(model, split))
                names = list(rows[0])
                cell[proj] = {
                    n: [float(np.mean([r[n] for r in rows])), float(np.std([r[n] for r in rows]))] for n in names
                }
                cell[proj]["factors"] = ranks
                cell[proj]["seconds"] = time.perf_counter() - t0
            out["cells"].append(cell)
            C.log(
                f"{spec} eps={eps:g} factors={cell['factors']} "
                + "  ".join(
                    f"{p}: " + ", ".join(f"{n} {cell[p][n][0]:.4f}±{cell[p][n][1]:.4f}" for n in names)
                    for p in PROJECTIONS
                ),
                quiet,
            )
    return out


def to_markdown(results: list[dict], command: str) -> str:
    lines = [
        "# Item-step estimator: eigenvalue shift vs exact PSD projection (validation fold)",
        "",
        f"`{command}`. Mean ± std over noise seeds; `shift` is the default `item_projection`.",
        "",
        "| dataset | eps | factors | metric | shift | eigen | shift - eigen |",
        "|---|---|---|---|---|---|---|",
    ]
    for res in results:
        for cell in res["cells"]:
            for n in [k for k in cell["shift"] if k not in ("factors", "seconds")]:
                a, b = cell["shift"][n], cell["eigen"][n]
                lines.append(
                    f"| {res['dataset']} | {cell['epsilon']:g} | {cell['factors']} (chosen {cell['shift']['factors']}) | "
                    f"{n} | {a[0]:.4f} ± {a[1]:.4f} | {b[0]:.4f} ± {b[1]:.4f} | {a[0] - b[0]:+.4f} |"
                )
    lines += ["", "RMSE: lower is better; Recall@20: higher is better.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="synthetic-skew at 0.2, 2 seeds, eps 1 and 20")
    p.add_argument("--datasets", nargs="+", default=None, help="dataset[@scale] list")
    p.add_argument("--epsilons", nargs="+", type=float, default=None)
    p.add_argument("--factors", nargs="*", type=int, default=None, help="extra rows with these explicit factors")
    p.add_argument("--factor-epsilons", nargs="+", type=float, default=None, help="epsilons of the --factors rows")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--out", default=None, help="output folder (default benchmarks/results)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    datasets = args.datasets or (["synthetic-skew@0.2"] if args.quick else list(DATASETS))
    epsilons = args.epsilons or ([1.0, 20.0] if args.quick else list(EPSILONS))
    seeds = args.seeds or (2 if args.quick else 3)
    factors = args.factors if args.factors is not None else ([8] if args.quick else [])
    results = [
        r
        for d in datasets
        if (r := run_dataset(d, seeds, epsilons, factors, args.quiet, args.factor_epsilons)) is not None
    ]
    out = Path(args.out) if args.out else C.RESULTS
    name = "projection_utility_quick" if args.quick else "projection_utility"
    command = "python benchmarks/bench_projection_utility.py " + " ".join(argv if argv is not None else sys.argv[1:])
    C.write_json(out / f"{name}.json", {"command": command.strip(), "results": results, "environment": C.environment()})
    md = to_markdown(results, command.strip())
    C.write_text(out / f"{name}.md", md)
    if not args.quiet:
        print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
