"""Is the default private model worth using? Utility against baselines on the same split.

Per dataset and epsilon in {1, 5, 20} this fits, on one split (seed 0):

* ``default`` -- ``DPALS()`` exactly as ``privrec fit`` builds it (automatic configuration);
* ``private-bias`` -- an independent private bias model (``_baselines.PrivateBias``; private
  popularity for implicit data), PLD-calibrated, every release in a ledger;
* ``ref-dpals`` -- reference semantics (Krichene et al. 2023 / the google-research DPALS notebook):
  no biases, centering, the notebook's ML10M settings per epsilon (dimension 8/32/32, 2/3/4
  steps, ridge 60/40/40 on both sides with frequency exponent 0.25, max_norm 0.2/0.5/0.5), RDP
  accounting -- with its guarantee corrected the way privrec enforces it (labels clipped to 2.5
  and the right-hand-side noise scaled to that bound; no cross-user ridge normaliser). For
  implicit data: the notebook's ML20M settings (dim 64, ridge 30, gravity 0.2-0.4, max_norm 0.1,
  top 10% items, 3/4/5 steps);

and once per dataset (non-private yardsticks) ``als`` (privrec's ALS; random protocol defaults,
held-out protocol ``HELDOUT_ALS_DEFAULTS``) and ``trivial`` (training global mean for RMSE, exact
popularity for Recall@20). Private cells use ``--seeds`` noise seeds (default 3; mean +- std).
Seeds make the benchmark reproducible: **a known seed voids the privacy guarantee** -- only the
measured utility is meaningful here. Nothing is tuned on the test split: the default's rule and
every baseline setting are fixed in code before the run.

    python benchmarks/bench_utility.py --quick                 # seconds: synthetic-skew at 0.2
    python benchmarks/bench_utility.py                         # ml-100k, lastfm-2k, ml10m-like@0.2
    python benchmarks/bench_utility.py --datasets ml10m-like@1 ml20m-like@1

Outputs: ``--out`` (default ``benchmarks/results``) ``utility[_quick].json``, ``utility[_quick].md``
and ``utility_<dataset>.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

try:
    from . import _common as C
    from ._baselines import GlobalMean, Popularity, PrivateBias
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as C  # type: ignore
    from _baselines import GlobalMean, Popularity, PrivateBias  # type: ignore

from privrec.evaluation import experiment as X

EPSILONS = (1.0, 5.0, 20.0)
DEFAULT_DATASETS = ("ml-100k", "lastfm-2k", "ml10m-like@0.2")
REAL_FOLDERS = {"ml-100k": "ml-100k", "lastfm-2k": "hetrec2011-lastfm-2k"}


def _ref_params(eps: float, implicit: bool) -> dict:
    col = 0 if eps <= 2 else (1 if eps <= 10 else 2)
    if implicit:
        return dict(
            method="dpals-tail",
            feedback="implicit",
            biases=False,
            factors=64,
            iterations=(3, 4, 5)[col],
            regularization=(40.0, 30.0, 30.0)[col],
            user_regularization=(40.0, 30.0, 30.0)[col],
            unobserved_weight=(0.4, 0.2, 0.2)[col],
            max_norm=0.1,
            item_frac=0.1,
            reg_exponent=0.0,
            user_reg_exponent=0.0,
            gramian_ratio=1.0,
            accountant="rdp",
        )
    return dict(
        method="dpals-tail",
        biases=False,
        center=True,
        factors=(8, 32, 32)[col],
        iterations=(2, 3, 4)[col],
        regularization=(60.0, 40.0, 40.0)[col],
        user_regularization=(60.0, 40.0, 40.0)[col],
        reg_exponent=0.25,
        user_reg_exponent=0.25,
        max_norm=(0.2, 0.5, 0.5)[col],
        label_bound=2.5,
        gramian_ratio=1.0,
        accountant="rdp",
    )


def parse_dataset(spec: str):
    name, _, scale = spec.partition("@")
    return name, (float(scale) if scale else None)


def load_split(spec: str):
    name, scale = parse_dataset(spec)
    data_dir = None
    if name in REAL_FOLDERS:
        shared = C.shared_datasets()
        if shared is None or not (shared / REAL_FOLDERS[name]).is_dir():
            return None
        data_dir = shared / REAL_FOLDERS[name]
    data = X.load_data(name, data_dir=data_dir, scale=scale, seed=0)
    return X.make_split(data, X.default_protocol(name), seed=0)


def _metric(split) -> str:
    return "rmse" if split.protocol == "random" else "recall@20"


def _score(model, split) -> float:
    return float(X.evaluate_split(model, split)["metrics"][_metric(split)])


def run_dataset(spec: str, seeds: int, epsilons, quiet: bool, allocations: bool = False) -> dict | None:
    split = load_split(spec)
    if split is None:
        C.log(f"{spec}: dataset files not found, skipped", quiet)
        return None
    implicit = split.protocol != "random"
    delta = X.default_delta(split)
    metric = _metric(split)
    out = {
        "dataset": spec,
        "protocol": split.protocol,
        "metric": metric,
        "delta": delta,
        "n_users": int(split.train.shape[0]),
        "n_items": int(split.train.shape[1]),
        "n_train": int(split.train.nnz),
        "yardsticks": {},
        "cells": [],
    }
    trivial = (Popularity() if implicit else GlobalMean()).fit(split.train)
    out["yardsticks"]["trivial"] = _score(trivial, split)
    t0 = time.perf_counter()
    als = X.make_model("als", protocol=split.protocol, seed=0).fit(split.train, show_progress=False)
    out["yardsticks"]["als"] = _score(als, split)
    C.log(
        f"{spec}: trivial {out['yardsticks']['trivial']:.4f}  als {out['yardsticks']['als']:.4f} "
        f"({time.perf_counter() - t0:.1f}s)",
        quiet,
    )
    for eps in epsilons:
        names = ["default", "private-bias", "ref-dpals"] + (
            ["default:dpals-uniform", "default:dpals-tail"] if allocations else []
        )
        for name in names:
            vals, spent = [], []
            t1 = time.perf_counter()
            for s in range(seeds):
                if name.startswith("default"):  # "default" = ada-dpals; "default:<method>" same rule
                    method = name.partition(":")[2] or "ada-dpals"
                    model = X.make_model(method, eps, delta, seed=1000 + s, protocol=split.protocol)
                elif name == "private-bias":
                    model = PrivateBias(eps, delta, explicit=not implicit, random_state=1000 + s)
                else:
                    from privrec.models import DPALS

                    model = DPALS(epsilon=eps, delta=delta, random_state=1000 + s, **_ref_params(eps, implicit))
                model.fit(split.train, **({} if name == "private-bias" else {"show_progress": False}))
                vals.append(_score(model, split))
                spent.append(model.epsilon_spent() if name == "private-bias" else model.privacy_report()["epsilon"])
            cell = {
                "epsilon": eps,
                "model": name,
                "mean": float(np.mean(vals)),
                "std": float(np.std(vals)),
                "values": vals,
                "epsilon_spent": float(max(spent)),
                "seconds": time.perf_counter() - t1,
            }
            out["cells"].append(cell)
            C.log(
                f"{spec} eps={eps:g} {name:13s} {metric} {cell['mean']:.4f} ± {cell['std']:.4f} "
                f"(eps spent {cell['epsilon_spent']:.3f}, {cell['seconds']:.1f}s)",
                quiet,
            )
    return out


def verdicts(res: dict) -> list[str]:
    lower_better = res["metric"] == "rmse"
    better = (lambda a, b: a <= b) if lower_better else (lambda a, b: a >= b)
    lines = []
    for eps in sorted({c["epsilon"] for c in res["cells"]}):
        cells = {c["model"]: c for c in res["cells"] if c["epsilon"] == eps}
        d = cells["default"]["mean"]
        vs_trivial = better(d, res["yardsticks"]["trivial"])
        vs_bias = better(d, cells["private-bias"]["mean"])
        vs_ref = better(d, cells["ref-dpals"]["mean"])
        lines.append(
            f"eps={eps:g}: default {'>=' if vs_trivial else 'WORSE than'} trivial; "
            f"{'>=' if vs_bias else 'worse than'} private-bias; {'>=' if vs_ref else 'worse than'} ref-dpals"
        )
    return lines


def to_markdown(results: list[dict], command: str) -> str:
    lines = [
        "# Utility of the default private model against baselines",
        "",
        f"Command: `{command}`. Mean ± std over noise seeds (seeded for reproducibility: a known seed voids",
        "the guarantee); epsilon spent from each model's own ledger; same split per dataset (seed 0).",
        "`trivial` = training global mean (RMSE) / exact popularity (Recall@20); `als` = non-private ALS.",
        "",
    ]
    for r in results:
        lines += [
            f"## {r['dataset']} ({r['protocol']}, {r['metric']}, {r['n_users']:,} users x {r['n_items']:,} items, "
            f"{r['n_train']:,} train, delta {r['delta']:.3g})",
            "",
            f"Yardsticks: trivial {r['yardsticks']['trivial']:.4f}, non-private ALS {r['yardsticks']['als']:.4f}.",
            "",
            "| epsilon | default | private-bias | ref-dpals |",
            "|---|---|---|---|",
        ]
        for eps in sorted({c["epsilon"] for c in r["cells"]}):
            row = {c["model"]: c for c in r["cells"] if c["epsilon"] == eps}
            lines.append(
                f"| {eps:g} | "
                + " | ".join(
                    f"{row[m]['mean']:.4f} ± {row[m]['std']:.4f}" for m in ("default", "private-bias", "ref-dpals")
                )
                + " |"
            )
        extra = sorted({c["model"] for c in r["cells"]} - {"default", "private-bias", "ref-dpals"})
        if extra:
            lines += [
                "",
                "Allocations under the same automatic configuration (ada-dpals is `default`):",
                "",
                "| epsilon | " + " | ".join(extra) + " |",
                "|---" * (len(extra) + 1) + "|",
            ]
            for eps in sorted({c["epsilon"] for c in r["cells"]}):
                row = {c["model"]: c for c in r["cells"] if c["epsilon"] == eps}
                lines.append(
                    f"| {eps:g} | " + " | ".join(f"{row[m]['mean']:.4f} ± {row[m]['std']:.4f}" for m in extra) + " |"
                )
        lines += [""] + [f"- {v}" for v in verdicts(r)] + [""]
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plots are an optional extra
        return
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, colour in (("default", "C0"), ("private-bias", "C1"), ("ref-dpals", "C2")):
        cells = sorted((c for c in res["cells"] if c["model"] == name), key=lambda c: c["epsilon"])
        ax.errorbar(
            [c["epsilon"] for c in cells],
            [c["mean"] for c in cells],
            yerr=[c["std"] for c in cells],
            marker="o",
            color=colour,
            label=name,
            capsize=3,
        )
    ax.axhline(res["yardsticks"]["trivial"], color="grey", ls="--", label="trivial")
    ax.axhline(res["yardsticks"]["als"], color="black", ls=":", label="ALS (non-private)")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel(res["metric"])
    ax.set_title(res["dataset"])
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="synthetic-skew at scale 0.2, 2 seeds, eps 1 and 20")
    p.add_argument("--datasets", nargs="+", default=None, help="dataset[@scale] list")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--out", default=None, help="output folder (default benchmarks/results)")
    p.add_argument(
        "--allocations",
        action="store_true",
        help="also run dpals-uniform and dpals-tail under the default automatic configuration",
    )
    p.add_argument(
        "--collect",
        nargs="+",
        default=None,
        metavar="JSON",
        help="merge the results of earlier runs (utility.json files) into one table and plots",
    )
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if a.collect:
        out_dir = Path(a.out) if a.out else C.RESULTS
        runs = [C.read_json(Path(f)) for f in a.collect]
        results = [r for run in runs for r in run["results"]]
        commands = [run["command"] for run in runs]
        C.write_json(
            out_dir / "utility.json", {"environment": C.environment(), "commands": commands, "results": results}
        )
        C.write_text(out_dir / "utility.md", to_markdown(results, "; ".join(c.strip() for c in commands)))
        for r in results:
            plot(r, out_dir / f"utility_{r['dataset'].replace('@', '-')}.png")
        return 0
    datasets = a.datasets or (["synthetic-skew@0.2"] if a.quick else list(DEFAULT_DATASETS))
    seeds = a.seeds or (2 if a.quick else 3)
    epsilons = (1.0, 20.0) if a.quick else EPSILONS
    out_dir = Path(a.out) if a.out else C.RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    results = [r for r in (run_dataset(d, seeds, epsilons, a.quiet, a.allocations) for d in datasets) if r is not None]
    suffix = "_quick" if a.quick else ""
    command = "python benchmarks/bench_utility.py " + " ".join(argv if argv is not None else sys.argv[1:])
    C.write_json(
        out_dir / f"utility{suffix}.json", {"environment": C.environment(), "command": command, "results": results}
    )
    C.write_text(out_dir / f"utility{suffix}.md", to_markdown(results, command.strip()))
    for r in results:
        plot(r, out_dir / f"utility_{r['dataset'].replace('@', '-')}{suffix}.png")
    print(to_markdown(results, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
