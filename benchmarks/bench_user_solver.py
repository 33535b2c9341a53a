"""Does the warm-started CG user step of DP-ALS cost accuracy? Exact vs CG on validation folds.

For each ``dataset[@scale]`` this fits the default ``ada-dpals`` model (automatic configuration,
as ``privrec fit`` builds it) twice per noise seed: once with ``user_solver="cholesky"`` (every
user step exact) and once with the default ``user_solver="cg"`` (``cg_steps`` warm-started
conjugate-gradient steps after an exact first step). The two runs of a seed share the noise seed.
Both are scored on the **validation** fold (random protocol: RMSE on the validation ratings,
users projected from their training ratings; held-out users: Recall@20 on the validation users),
never on test. Seeds make the run reproducible: **a known seed voids the privacy guarantee**;
only the measured utility means anything here.

    python benchmarks/bench_user_solver.py                                  # ml10m-like, ml20m-like@0.5
    python benchmarks/bench_user_solver.py --datasets ml-100k msd-like --seeds 2
    python benchmarks/bench_user_solver.py --quick      # seconds: synthetic-skew@0.2, 8 factors, 3 steps

Outputs ``<out>/user_solver[_quick].json`` and ``.md`` (``--out`` defaults to benchmarks/results).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

try:
    from . import _common as C
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as C  # type: ignore

from privrec.data.splits import random_split
from privrec.evaluation import experiment as X

VARIANTS = {"exact": {"user_solver": "cholesky"}, "cg": {"user_solver": "cg"}}


def validation_split(dataset: str, scale: float | None, data_dir):
    """(protocol, fitting split, split whose evaluation fold is the validation fold)."""
    data = X.load_data(dataset, data_dir=data_dir, scale=scale)
    protocol = X.default_protocol(dataset)
    split = X.make_split(data, protocol, seed=0)
    if protocol == "random":
        parts = random_split(data, random_state=0)  # the same parts make_split used
        val = replace(split, test=X._m(parts.validation), projection=split.train)
    else:
        val = replace(split, history=split.validation_history, targets=split.validation_targets)
    return protocol, split, val


def run_dataset(spec: str, epsilon: float, seeds: int, data_dir, quiet: bool, extra: dict | None = None) -> dict:
    name, _, scale_s = spec.partition("@")
    scale = float(scale_s) if scale_s else None
    protocol, split, val = validation_split(name, scale, data_dir)
    metric = "rmse" if protocol == "random" else "recall@20"
    delta = X.default_delta(split)
    out: dict = {"dataset": spec, "protocol": protocol, "metric": metric, "epsilon": epsilon, "variants": {}}
    for variant, params in VARIANTS.items():
        values, seconds = [], []
        for s in range(seeds):
            model = X.make_model(
                "ada-dpals", epsilon, delta, {**params, **(extra or {})}, seed=100 + s, protocol=protocol
            )
            t = time.perf_counter()
            model.fit(split.train, show_progress=False)
            seconds.append(time.perf_counter() - t)
            values.append(float(X.evaluate_split(model, val)["metrics"][metric]))
            out["config"] = {k: model.config_[k] for k in ("factors", "iterations", "cg_steps")}
        v = np.asarray(values)
        out["variants"][variant] = {
            "values": values,
            "mean": float(v.mean()),
            "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "fit_seconds": float(np.mean(seconds)),
        }
        C.log(f"{spec} eps={epsilon} {variant}: {metric} {v.mean():.4f} ± {out['variants'][variant]['std']:.4f}", quiet)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=None, help="dataset[@scale] list")
    ap.add_argument("--epsilon", type=float, default=5.0)
    ap.add_argument("--seeds", type=int, default=None, help="noise seeds per variant (default 3; quick 2)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    datasets = args.datasets or (["synthetic-skew@0.2"] if args.quick else ["ml10m-like", "ml20m-like@0.5"])
    seeds = args.seeds or (2 if args.quick else 3)
    data_dir = C.shared_datasets()
    # quick: a small factor model with several ALS steps (the automatic default there is the bias
    # model, whose one-dimensional user step any solver gets exactly right)
    extra = {"factors": 8, "iterations": 3} if args.quick else None
    rows = [run_dataset(d, args.epsilon, seeds, data_dir, args.quiet, extra) for d in datasets]
    res = {"environment": C.environment(), "seeds": seeds, "results": rows}
    name = "user_solver_quick" if args.quick else "user_solver"
    C.write_json(Path(args.out) / f"{name}.json", res)
    lines = [
        f"# {name}\n",
        f"Default ada-dpals at eps = {args.epsilon}, validation fold, mean ± std over {seeds} noise seeds "
        "(the same seeds for both user steps).\n",
        "| dataset | config (factors, ALS steps) | metric | exact user step | CG user step (default) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        e, c = r["variants"]["exact"], r["variants"]["cg"]
        lines.append(
            f"| {r['dataset']} | {r['config']['factors']}, {r['config']['iterations']} | {r['metric']} | "
            f"{e['mean']:.4f} ± {e['std']:.4f} | {c['mean']:.4f} ± {c['std']:.4f} |"
        )
    md = (
        "\n".join(lines)
        + "\n\nSpeed is measured by bench_speed.py (the json's fit seconds are not a speed benchmark).\n"
    )
    C.write_text(Path(args.out) / f"{name}.md", md)
    if not args.quiet:
        print(md)
    return res


if __name__ == "__main__":
    main()
