"""Privacy-utility trade-off, mu sweep, sliced metrics and neighbour overlap (spec 004 §7; paper Figs. 1-4, 9-11).

For every dataset and epsilon this fits non-private ALS (the reference) and the six private methods
(dpals-uniform, dpals-tail, ada-dpals, dpsgd-uniform, dpsgd-tail, ada-dpsgd; ada-* over a grid of
weight exponents mu), evaluates each with the dataset's protocol (random split -> RMSE; held-out
users -> Recall@20 / NDCG@20), per popularity bucket (bucket 0 = least popular) and the top-20
cosine neighbour overlap with ALS, and checks the paper's claims (issue 5 "Done when"):

1. ada (mu among 1/4, 1/3, 1/2 chosen on the validation fold) beats tail sampling, which beats
   uniform sampling, overall, at eps = 1 and eps = 5, for both the DPALS (SSP) and the DPSGD
   (noisy GD) family;
2. on the two least-popular buckets ada improves on tail by >= 10% relative.

Model selection never looks at the test data: every ada run is also scored on the split's
validation fold (random protocol: the 10% validation ratings, users projected from the training
ratings only; held-out users: the validation users' fold-in / targets), mu is chosen by that
validation metric, and the test metric is reported at the chosen mu. The non-private ALS
reference is tuned on the validation users likewise (``--tune-als``). Results files without
validation metrics (older runs) give no ada cell rather than a test-selected one.

Claims are *measured*, never forced: the generator and the hyper-parameters are fixed before the
run; the outcome is written as measured. Privacy noise uses a fixed seed per run (experiments
only — a known seed voids the DP guarantee).

    python benchmarks/bench_tradeoff.py --quick          # seconds: small synthetic data
    python benchmarks/bench_tradeoff.py                  # the documented full configuration
    python benchmarks/bench_tradeoff.py --part mu        # only the mu sweep

Outputs in ``benchmarks/results/``: ``tradeoff[_quick].json`` (every run, every bucket, ledger
epsilon), PNG plots (``tradeoff_*.png``, ``sliced_*.png``, ``mu_*.png``, ``overlap_*.png``) and
``tradeoff[_quick].md`` (tables + claims) which ``summary.md`` embeds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:  # package import (privrec.commands.benchmark) or script run
    from . import _common as C
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as C  # type: ignore

from privrec.evaluation import ReferenceNeighbours
from privrec.evaluation import experiment as X

ADA_MUS_CLAIM = (0.25, 1 / 3, 0.5)
FAMILIES = {
    "dpals": ("dpals-uniform", "dpals-tail", "ada-dpals"),
    "dpsgd": ("dpsgd-uniform", "dpsgd-tail", "ada-dpsgd"),
}
PARTS = ("all", "tradeoff", "mu", "sliced")
ALS_RIDGES = (40.0, 100.0, 200.0, 400.0)  # validation grid of the non-private reference (--tune-als)
ALS_GRAVITIES = (0.2,)


@dataclass
class DatasetRun:
    """One dataset of the benchmark and how it is loaded / split."""

    name: str
    protocol: str
    scale: float | None = None
    data_dir: str | None = None
    heldout_users: int | None = None
    label: str | None = None
    params: dict = field(default_factory=dict)  # model parameters shared by every method

    @property
    def key(self) -> str:
        return self.label or self.name


@dataclass
class Config:
    datasets: list
    epsilons: tuple = (1.0, 5.0, 20.0)
    mus: tuple = (0.0, 0.25, 1 / 3, 0.5, 1.0)
    seed: int = 0
    tag: str = ""
    mu_sweep_methods: tuple = ("ada-dpals", "ada-dpsgd")  # the others run the claim mus only
    methods: tuple | None = None  # run only these methods; merged into an existing results file
    tune_als: bool = False  # held-out users: choose the ALS reference on validation users
    als_ridges: tuple = ALS_RIDGES
    als_gravities: tuple = ALS_GRAVITIES


def quick_config() -> Config:
    """Seconds: the small embedded generator at reduced scale, both protocols, two epsilons."""
    common = {"iterations": 1, "factors": 4}
    return Config(
        datasets=[
            DatasetRun("synthetic-skew", "random", scale=0.1, label="synthetic-skew-rmse", params=common),
            DatasetRun(
                "synthetic-skew",
                "heldout-users",
                scale=0.15,
                heldout_users=60,
                label="synthetic-skew-topk",
                params=common,
            ),
        ],
        epsilons=(1.0, 5.0),
        mus=(0.0, 0.25, 0.5),
        tag="_quick",
        mu_sweep_methods=("ada-dpals",),
    )


def full_config(ml10m_scale: float = 1.0, ml20m_scale: float = 1.0) -> Config:
    """The documented full run: see summary.md for the exact commands, sizes and wall times.

    ``scale`` < 1 subsamples a ``*-like`` preset's users and interactions (the item catalogue and
    the skew target are kept), for the scale study and for machines where the full size is slow.
    """
    ds = [
        DatasetRun("ml10m-like", "random", scale=ml10m_scale, label=f"ml10m-like@{ml10m_scale:g}"),
        DatasetRun(
            "ml20m-like",
            "heldout-users",
            scale=ml20m_scale,
            label=f"ml20m-like@{ml20m_scale:g}",
            heldout_users=max(100, int(10_000 * ml20m_scale)),
        ),
    ]
    shared = C.shared_datasets()
    if shared is not None and (shared / "ml-100k").is_dir():
        ds.append(DatasetRun("ml-100k", "random", data_dir=str(shared / "ml-100k")))
    if shared is not None and (shared / "hetrec2011-lastfm-2k").is_dir():
        ds.append(
            DatasetRun("lastfm-2k", "heldout-users", data_dir=str(shared / "hetrec2011-lastfm-2k"), heldout_users=300)
        )
    return Config(datasets=ds, mu_sweep_methods=("ada-dpals",))


def metric_name(protocol: str) -> str:
    return "rmse" if protocol == "random" else "recall@20"


def sliced_name(protocol: str) -> str:
    return "rmse" if protocol == "random" else "recall"


def lower_is_better(protocol: str) -> bool:
    return protocol == "random"


def plan(cfg: Config, part: str) -> list[tuple[str, float | None, float | None]]:
    """(method, epsilon, mu) triples to run for one dataset."""
    runs = [("als", None, None)]
    need_mu = part in ("all", "mu")
    need_main = part in ("all", "tradeoff", "sliced")
    for eps in cfg.epsilons:
        if need_main:
            for fam in FAMILIES.values():
                runs += [(fam[0], eps, None), (fam[1], eps, None)]
        for ada in ("ada-dpals", "ada-dpsgd"):
            mus = set(cfg.mus) if need_mu and ada in cfg.mu_sweep_methods else set()
            if need_mu and ada not in cfg.mu_sweep_methods:
                mus |= set(ADA_MUS_CLAIM)
            if need_main:
                mus |= set(ADA_MUS_CLAIM)
            runs += [(ada, eps, mu) for mu in sorted(mus)]
    return runs


def tune_als(
    split,
    ridges=ALS_RIDGES,
    gravities=ALS_GRAVITIES,
    seed: int = 0,
    dataset: str = "",
    quiet: bool = False,
    base_params: dict | None = None,
) -> tuple[dict, tuple]:
    """Choose the non-private ALS reference's ridge / gravity on the *validation* users.

    Held-out-users protocol only: each grid point is fitted on ``split.train`` (the training users)
    and scored by Recall@20 on the validation fold-in / targets; the test users play no part.
    Returns ``(record, (best_model, fit_seconds))``; ``record`` (JSON) holds the whole grid, the
    chosen parameters and the spec §8 values they replace.
    """
    from privrec.evaluation.protocols import evaluate_heldout

    if split.protocol != "heldout-users" or split.validation_history is None:
        raise ValueError("tune_als needs a held-out-users split with a validation fold")
    grid, best = [], None
    for g in gravities:
        for r in ridges:
            params = {"regularization": float(r), "unobserved_weight": float(g)}
            model = X.make_model("als", params={**(base_params or {}), **params}, seed=seed, protocol=split.protocol)
            t0 = time.perf_counter()
            model.fit(split.train, show_progress=False)
            fit_s = time.perf_counter() - t0
            ev = evaluate_heldout(model, split.train, split.validation_history, split.validation_targets, k=20)
            row = {
                **params,
                "val_recall@20": ev["metrics"]["recall@20"],
                "val_ndcg@20": ev["metrics"]["ndcg@20"],
                "fit_seconds": round(fit_s, 1),
            }
            grid.append(row)
            C.log(
                f"{dataset} ALS tuning ridge={r:g} gravity={g:g}: val recall@20={row['val_recall@20']:.4f} "
                f"fit {fit_s:.1f}s",
                quiet,
            )
            if best is None or row["val_recall@20"] > best[0]["val_recall@20"]:
                best = (row, (model, fit_s))
            else:
                del model
    row, fitted = best
    defaults = {**X.HELDOUT_ALS_DEFAULTS, **(base_params or {})}
    record = {
        "selection": "max validation Recall@20 (validation users only; test users unused)",
        "n_validation_users": int(split.validation_history.shape[0]),
        "fixed": {k: v for k, v in defaults.items() if k not in ("regularization", "unobserved_weight")},
        "spec_8": {"regularization": 40.0, "unobserved_weight": 0.2},
        "grid": grid,
        "best": {"regularization": row["regularization"], "unobserved_weight": row["unobserved_weight"]},
    }
    return record, fitted


def validation_evaluator(split):
    """``model -> {metric: value}`` on the split's validation fold, or ``None`` without one.

    Random protocol: the validation ratings are ``projection - train`` (the split stores train and
    train + validation); their users are projected from the *training* ratings only, so nothing of
    the validation (let alone the test) fold leaks into the features. Held-out users: Recall@20 of
    the validation users (fold-in history / targets). Used to choose mu; the test fold is not read.
    """
    from privrec.evaluation.protocols import evaluate_heldout, evaluate_ratings

    if split.protocol == "random":
        if split.projection is None:
            return None
        val = (split.projection - split.train).tocsr()
        val.eliminate_zeros()
        if val.nnz == 0:
            return None
        return lambda model: {"rmse": evaluate_ratings(model, split.train, val, history=split.train)["metrics"]["rmse"]}
    if split.validation_history is None or split.validation_targets is None:
        return None
    return lambda model: {
        "recall@20": evaluate_heldout(model, split.train, split.validation_history, split.validation_targets, k=20)[
            "metrics"
        ]["recall@20"]
    }


def _merge_existing(path: Path, results: dict, methods) -> dict:
    """Replace ``methods``' runs in an existing results file by the new ones; keep every other run."""
    if not path.is_file():
        return results
    old = C.read_json(path)
    keys = {(r["dataset"], r["method"]) for r in results["runs"]}
    kept = [r for r in old["runs"] if (r["dataset"], r["method"]) not in keys]
    merged = dict(old)
    merged["runs"] = kept + results["runs"]
    merged["skipped"] = [s for s in old.get("skipped", []) if s.get("method") not in methods] + results["skipped"]
    merged["reruns"] = old.get("reruns", []) + [
        {"methods": list(methods), "wall_seconds": results["wall_seconds"], "environment": results["environment"]}
    ]
    if "als_tuning" in results:
        merged["als_tuning"] = {**old.get("als_tuning", {}), **results["als_tuning"]}
    return merged


def run(
    cfg: Config,
    part: str = "all",
    out_dir: Path | None = None,
    quiet: bool = False,
    make_plots: bool = True,
    deadline_s: float | None = None,
) -> dict:
    """Run the configured benchmark and write JSON, plots and the markdown tables."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    out_dir = Path(out_dir or C.RESULTS)
    t_start = time.perf_counter()
    results = {
        "config": {
            "part": part,
            "epsilons": list(cfg.epsilons),
            "mus": list(cfg.mus),
            "seed": cfg.seed,
            "datasets": [asdict(d) for d in cfg.datasets],
        },
        "environment": C.environment(),
        "runs": [],
        "skipped": [],
    }
    for ds in cfg.datasets:
        C.log(f"{ds.key}: loading ({ds.name}, scale {ds.scale})", quiet)
        try:
            data = X.load_data(ds.name, ds.data_dir, ds.scale, seed=cfg.seed)
            split = X.make_split(data, ds.protocol, seed=cfg.seed, heldout_users=ds.heldout_users)
        except (ValueError, FileNotFoundError, ImportError, AttributeError) as exc:
            results["skipped"].append({"dataset": ds.key, "reason": f"{type(exc).__name__}: {exc}"})
            C.log(f"{ds.key}: skipped ({exc})", quiet)
            continue
        val_eval = validation_evaluator(split)
        reference, als_fitted, als_params = None, None, {}
        if cfg.tune_als and ds.protocol == "heldout-users" and (cfg.methods is None or "als" in cfg.methods):
            rec, als_fitted = tune_als(
                split, cfg.als_ridges, cfg.als_gravities, cfg.seed, ds.key, quiet, base_params=ds.params
            )
            results.setdefault("als_tuning", {})[ds.key] = rec
            als_params = dict(rec["best"])
        for method, eps, mu in plan(cfg, part):
            if cfg.methods is not None and method not in cfg.methods:
                continue
            if deadline_s is not None and time.perf_counter() - t_start > deadline_s:
                results["skipped"].append(
                    {"dataset": ds.key, "method": method, "epsilon": eps, "mu": mu, "reason": "time budget exhausted"}
                )
                continue
            params = dict(ds.params)
            if mu is not None:
                params["mu"] = mu
            if method == "als":
                params.update(als_params)
            try:
                model, res = X.run_experiment(
                    split,
                    method,
                    epsilon=eps,
                    params=params,
                    seed=cfg.seed,
                    reference=reference,
                    dataset=ds.key,
                    pld=False,
                    paper_sliced=ds.protocol == "heldout-users",
                    fitted=als_fitted if method == "als" else None,
                )
            except (ValueError, ImportError) as exc:
                results["skipped"].append(
                    {
                        "dataset": ds.key,
                        "method": method,
                        "epsilon": eps,
                        "mu": mu,
                        "reason": f"{type(exc).__name__}: {exc}",
                    }
                )
                C.log(f"{ds.key} {method} eps={eps}: skipped ({exc})", quiet)
                continue
            if method == "als":  # neighbours of the reference computed once per dataset
                reference = ReferenceNeighbours(model.item_factors_, k=20)
            res["mu"] = mu
            if mu is not None and val_eval is not None:  # a hyper-parameter to select: score it on validation
                res["validation"] = val_eval(model)
            if method == "als" and als_params:
                res["als_params"] = als_params
            res.pop("privacy_events_full", None)
            res["n_events"] = len(res.get("privacy_events", {}).get("events", []))
            res.pop("privacy_events", None)  # the JSON keeps epsilon_spent; the ledger is in the CLI output
            results["runs"].append(res)
            C.log(
                f"{ds.key} {method:<14} eps={eps} mu={mu}: {metric_name(ds.protocol)}="
                f"{res['metrics'][metric_name(ds.protocol)]:.4f} eps_spent={res['epsilon_spent']} "
                f"fit {res['fit_seconds']:.1f}s",
                quiet,
            )
    results["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.methods is not None:  # partial rerun: merge into the dataset's existing file
        results = _merge_existing(out_dir / f"tradeoff{cfg.tag}.json", results, cfg.methods)
    results["analysis"] = analyse(results)
    C.write_json(out_dir / f"tradeoff{cfg.tag}.json", results)
    md = markdown(results)
    if make_plots:
        results["plots"] = plots(results, out_dir, cfg.tag)
    C.write_text(out_dir / f"tradeoff{cfg.tag}.md", md)
    return results


def collect(out_dir: Path | None = None, make_plots: bool = True) -> dict:
    """Merge the per-dataset result files (``tradeoff_ds-*.json``) into ``tradeoff.json/.md`` + plots."""
    out_dir = Path(out_dir or C.RESULTS)
    files = sorted(out_dir.glob("tradeoff_ds-*.json"))
    if not files:
        raise ValueError(f"no tradeoff_ds-*.json files in {out_dir}; run with --datasets first")
    merged = {
        "config": [],
        "environment": C.environment(),
        "runs": [],
        "skipped": [],
        "wall_seconds": 0.0,
        "sources": [f.name for f in files],
    }
    for f in files:
        r = C.read_json(f)
        merged["config"].append(r["config"])
        merged["runs"] += r["runs"]
        merged["skipped"] += r["skipped"]
        merged["wall_seconds"] += r.get("wall_seconds", 0.0)
        for d in r["config"]["datasets"]:
            merged.setdefault("walls", {})[d.get("label") or d["name"]] = r.get("wall_seconds", 0.0) / len(
                r["config"]["datasets"]
            )
    merged["analysis"] = analyse(merged)
    C.write_json(out_dir / "tradeoff.json", merged)
    if make_plots:
        merged["plots"] = plots(merged, out_dir, "")
    C.write_text(out_dir / "tradeoff.md", markdown(merged))
    write_summary(merged, out_dir)
    return merged


ANALYSIS_MARKER = "<!-- analysis: hand-written below this line, kept by --collect -->"

REGENERATE = """\
# main run: full-size presets, eps 1/5/20, all methods, mu sweep (one process per dataset; may run in parallel)
python benchmarks/bench_tradeoff.py --datasets ml10m-like --ml10m-scale 1.0 --budget-minutes 40 --no-plots
python benchmarks/bench_tradeoff.py --datasets ml20m-like --ml20m-scale 1.0 --budget-minutes 40 --no-plots
python benchmarks/bench_tradeoff.py --datasets ml-100k --budget-minutes 20 --no-plots      # needs ../shared/datasets
python benchmarks/bench_tradeoff.py --datasets lastfm-2k --budget-minutes 20 --no-plots    # needs ../shared/datasets
# non-private ALS reference (held-out users): ridge / gravity chosen on the validation users, grid recorded
# under "als_tuning"; --methods als reruns only the ALS cell and merges it into the existing file
python benchmarks/bench_tradeoff.py --datasets ml20m-like --ml20m-scale 1.0 --methods als --tune-als --als-ridges 40 100 200 400 --als-gravities 0.05 0.2 --no-plots
python benchmarks/bench_tradeoff.py --datasets lastfm-2k --methods als --tune-als --als-ridges 0.5 1 2 5 10 20 40 100 --als-gravities 0.05 0.2 --no-plots
# optional scale study (users and interactions subsampled, catalogue kept; not in the current results:
# the earlier scale-study files were made with the previous, taste-blind generator and were removed)
python benchmarks/bench_tradeoff.py --datasets ml20m-like --ml20m-scale 0.1 --budget-minutes 45 --no-plots
# merge every results/tradeoff_ds-*.json into tradeoff.json/.md, the PNG plots and this summary
python benchmarks/bench_tradeoff.py --baselines --ml10m-scale 1.0 --ml20m-scale 1.0   # --ml20m-scale 0.1 likewise
python benchmarks/bench_tradeoff.py --collect
python benchmarks/bench_tradeoff.py --eval-speed       # evaluation speed at ml20m-like held-out size
python benchmarks/bench_tradeoff.py --quick            # seconds, used by tests/test_benchmarks_quick.py"""


def write_summary(merged: dict, out_dir: Path) -> Path:
    """``summary.md``: commands, what ran, claim verdicts, tables, plots; keeps the analysis section."""
    path = out_dir / "summary.md"
    kept = ""
    if path.is_file():
        text = path.read_text()
        if ANALYSIS_MARKER in text:
            kept = text.split(ANALYSIS_MARKER, 1)[1].strip()
    lines = [
        "# privrec benchmark summary: privacy-utility trade-off (spec 004 §7, issue 5)",
        "",
        "Generated by `python benchmarks/bench_tradeoff.py --collect` from the per-dataset result files "
        f"({', '.join(merged['sources'])}). Every epsilon below is computed by the RDP accountant over the "
        "DpEvents each fit recorded (target epsilon in the column header; `epsilon_spent` per run in "
        "`tradeoff.json`). Noise is seeded (seed 0) for reproducibility: a known seed voids the guarantee, "
        "so these are experiments, not private releases.",
        "",
        "## Regenerate",
        "",
        "```",
        REGENERATE,
        "```",
        "",
        "## What ran",
        "",
        "| dataset | protocol | users x items (train) | train interactions | runs | fit s (sum) "
        "| process wall min | trivial baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = C.read_json(out_dir / "baselines.json") if (out_dir / "baselines.json").is_file() else {}
    for ds in merged["analysis"]:
        rs = [r for r in merged["runs"] if r["dataset"] == ds]
        lines.append(
            f"| {ds} | {rs[0]['protocol']} | {rs[0]['n_users']} x {rs[0]['n_items']} | {rs[0]['n_train']} | "
            f"{len(rs)} | {sum(r['fit_seconds'] for r in rs):.0f} | "
            f"{merged.get('walls', {}).get(ds, float('nan')) / 60:.1f} | "
            + ", ".join(f"{k} {_f(v)}" for k, v in base.get(ds, {}).items())
            + " |"
        )
    lines += [
        "",
        f"Total wall time of the per-dataset processes: {merged['wall_seconds'] / 60:.1f} min "
        "(sum over processes; they ran concurrently on a shared 2-core machine).",
        "",
        "## Claim verdicts (issue 5 'Done when'; measured)",
        "",
        "| dataset | eps | family | ada > tail > uniform | ada vs tail b0 / b1 (>= 10%?) |",
        "|---|---|---|---|---|",
    ]
    for ds, e in merged["analysis"].items():
        for eps, v in e["by_epsilon"].items():
            if float(eps) not in (1.0, 5.0):
                continue
            for fam, c in v["claims"].items():
                lines.append(
                    f"| {ds} | {eps} | {fam} | {_f(c['ordering_ada>tail>uniform'])} | "
                    f"{_f(100 * c['ada_vs_tail_bucket0_rel'], 1)}% / {_f(100 * c['ada_vs_tail_bucket1_rel'], 1)}% "
                    f"({_f(c['tail_buckets_>=10%'])}) |"
                )
    lines += ["", "## Tables", "", markdown(merged), "## Plots", ""]
    for p in merged.get("plots", []):
        lines.append(f"- [{Path(p).name}]({Path(p).name})")
    others = [n for n in ("bench_speed.md", "appendix_c.md") if (out_dir / n).is_file()]
    if others:
        lines += ["", "## Other benchmarks of the suite", ""]
        lines += [
            f"- [{n}]({n})"
            + (" (speed vs implicit, issue 4)" if "speed" in n else " (Appendix C synthetic, RMSE vs mu)")
            for n in others
        ]
    lines += ["", ANALYSIS_MARKER, "", kept, ""]
    C.write_text(path, "\n".join(lines))
    return path


def eval_speed(
    n_users: int = 10_000,
    n_items: int = 20_108,
    factors: int = 64,
    history: int = 58,
    targets: int = 15,
    seed: int = 0,
    out_dir: Path | None = None,
    tag: str = "",
) -> dict:
    """Time the full held-out evaluation at ``ml20m-like`` size against a naive peer, same process.

    Sizes default to the ml20m-like held-out test fold (10,000 users x 20,108 items, ~58 fold-in and
    ~15 target items per user: 80/20 of the preset's ~73 items per user). privrec's path: batched
    float32 scores + ``np.partition`` top-k (Recall@20, NDCG@20, coverage) and the paper's sliced
    recall. Peer: the same scores ranked by a full ``np.argsort`` per row (the obvious approach),
    Recall@20 only. Factors are random: the timing does not depend on their values.
    """
    import numpy as np
    import scipy.sparse as sp

    from privrec.evaluation import PAPER_SLICED_KS, popularity_buckets, ranking_metrics, sliced_recall, top_items
    from privrec.evaluation.topk import iter_chunks, mask_history

    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n_users, factors), dtype=np.float32)
    V = rng.standard_normal((n_items, factors), dtype=np.float32)
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.9
    pop /= pop.sum()

    def sample(k):
        cols = rng.choice(n_items, size=n_users * k, p=pop)
        m = sp.csr_matrix(
            (np.ones(cols.size, np.float32), (np.repeat(np.arange(n_users), k), cols)), shape=(n_users, n_items)
        )
        m.data[:] = 1.0
        return m

    hist, targ = sample(history), sample(targets)
    targ = (targ - targ.multiply(hist)).tocsr()
    targ.eliminate_zeros()
    counts = np.asarray(hist.sum(axis=0)).ravel()
    t0 = time.perf_counter()
    ours = ranking_metrics(U, V, targ, hist, ks=(20,))
    t_rank = time.perf_counter() - t0
    t0 = time.perf_counter()
    buckets = popularity_buckets(counts, 5, items=top_items(counts, 0.1))
    sliced_recall(U, V, targ, buckets, history=hist, ks=list(PAPER_SLICED_KS))
    t_sliced = time.perf_counter() - t0
    # peer: full argsort per row, chunked the same way
    t0 = time.perf_counter()
    nt = np.diff(targ.indptr)
    total, users = 0.0, 0
    for a, b in iter_chunks(n_users, 2048):
        rows = np.arange(a, b)[nt[a:b] > 0]
        sc = U[rows] @ V.T
        mask_history(sc, hist, rows)
        top = np.argsort(-sc, axis=1)[:, :20]
        td = targ[rows].toarray() != 0
        hits = td[np.arange(rows.size)[:, None], top].sum(axis=1)
        total += float(np.sum(hits / np.minimum(20, nt[rows])))
        users += rows.size
    t_peer = time.perf_counter() - t0
    res = {
        "n_users": n_users,
        "n_items": n_items,
        "factors": factors,
        "seconds_ranking": round(t_rank, 3),
        "seconds_sliced_recall": round(t_sliced, 3),
        "seconds_total": round(t_rank + t_sliced, 3),
        "seconds_peer_argsort_recall_only": round(t_peer, 3),
        "ratio_ranking_vs_peer": round(t_rank / t_peer, 3) if t_peer else None,
        "recall@20_ours": ours["recall@20"],
        "recall@20_peer": total / max(users, 1),
        "environment": C.environment(),
    }
    if out_dir is not None:
        C.write_json(Path(out_dir) / f"eval_speed{tag}.json", res)
        C.write_text(
            Path(out_dir) / f"eval_speed{tag}.md",
            f"# Evaluation speed (held-out users, {n_users} x {n_items}, d={factors})\n\n"
            f"- Recall@20 + NDCG@20 + coverage: {res['seconds_ranking']:.2f} s "
            f"({res['ratio_ranking_vs_peer']:.2f}x the time of a full-argsort Recall@20 peer, "
            f"{res['seconds_peer_argsort_recall_only']:.2f} s, same process)\n"
            f"- paper sliced recall (k = 100..20 over the top-10% items): {res['seconds_sliced_recall']:.2f} s\n"
            f"- total {res['seconds_total']:.2f} s; Recall@20 ours {res['recall@20_ours']:.5f} = "
            f"peer {res['recall@20_peer']:.5f}\n",
        )
    return res


def trivial_baselines(cfg: Config, out_dir: Path | None = None, quiet: bool = False) -> dict:
    """Data-only reference points per dataset: global-mean RMSE (random protocol) or the
    Recall@20 of ranking items by training count (held-out users). Written to ``baselines.json``
    (merged with existing entries) and shown by ``--collect`` in the summary."""
    import numpy as np

    from privrec.evaluation import ranking_metrics, rmse

    path = Path(out_dir or C.RESULTS) / "baselines.json"
    out = C.read_json(path) if path.is_file() else {}
    for ds in cfg.datasets:
        data = X.load_data(ds.name, ds.data_dir, ds.scale, seed=cfg.seed)
        split = X.make_split(data, ds.protocol, seed=cfg.seed, heldout_users=ds.heldout_users)
        if ds.protocol == "random":
            mean = float(split.train.data.mean())
            out[ds.key] = {"global_mean_rmse": rmse(np.full(split.test.nnz, mean), split.test.data)}
        else:
            counts = np.diff(split.train.tocsc().indptr).astype(np.float32)
            U = np.ones((split.history.shape[0], 1), np.float32)
            m = ranking_metrics(U, counts[:, None], split.targets, split.history, ks=(20,))
            out[ds.key] = {"popularity_recall@20": m["recall@20"], "popularity_ndcg@20": m["ndcg@20"]}
        C.log(f"{ds.key}: {out[ds.key]}", quiet)
    C.write_json(path, out)
    return out


# ------------------------------------------------------------------------------------------ analysis
def _select(runs, dataset, method, eps):
    return [
        r for r in runs if r["dataset"] == dataset and r["method"] == method and (eps is None or r["epsilon"] == eps)
    ]


def _overall(r):
    return r["metrics"]["rmse" if r["protocol"] == "random" else "recall@20"]


def _validation(r):
    """The run's validation metric (the selection criterion), or None."""
    return (r.get("validation") or {}).get(metric_name(r["protocol"]))


def best_ada(runs, dataset, method, eps, protocol):
    """The ada run whose mu in {1/4, 1/3, 1/2} has the best *validation* metric (None if none has one).

    The test metric plays no part in the choice: it is reported at the validation-selected mu.
    """
    cands = [
        r
        for r in _select(runs, dataset, method, eps)
        if r.get("mu") is not None and any(math.isclose(r["mu"], m) for m in ADA_MUS_CLAIM)
    ]
    cands = [r for r in cands if _finite(_validation(r))]
    if not cands:
        return None
    key = (lambda r: _validation(r)) if lower_is_better(protocol) else (lambda r: -_validation(r))
    return min(cands, key=key)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _improvement(new, old, protocol) -> float:
    """Relative improvement of ``new`` over ``old`` (positive = better)."""
    if not (_finite(new) and _finite(old)) or old == 0:
        return float("nan")
    return (old - new) / old if lower_is_better(protocol) else (new - old) / old


def analyse(results: dict) -> dict:
    """Per dataset and epsilon: the table of overall metrics and the claims, measured."""
    runs = results["runs"]
    out = {}
    for ds in sorted({r["dataset"] for r in runs}):
        rs = [r for r in runs if r["dataset"] == ds]
        protocol = rs[0]["protocol"]
        als = _select(rs, ds, "als", None)
        entry = {
            "protocol": protocol,
            "metric": metric_name(protocol),
            "als": _overall(als[0]) if als else None,
            "by_epsilon": {},
        }
        for eps in sorted({r["epsilon"] for r in rs if r["epsilon"] is not None}):
            row, claims = {}, {}
            for fam, (uni, tail, ada) in FAMILIES.items():
                u = _select(rs, ds, uni, eps)
                t = _select(rs, ds, tail, eps)
                a = best_ada(rs, ds, ada, eps, protocol)
                vals = {
                    uni: _overall(u[0]) if u else None,
                    tail: _overall(t[0]) if t else None,
                    ada: _overall(a) if a else None,
                }
                row.update(vals)
                row[f"{ada}_best_mu"] = a["mu"] if a else None
                if u and t and a:
                    ok_order = (
                        _improvement(vals[ada], vals[tail], protocol) > 0
                        and _improvement(vals[tail], vals[uni], protocol) > 0
                    )
                    sk = sliced_name(protocol)
                    tail_b = [_improvement(a["sliced"][sk][b], t[0]["sliced"][sk][b], protocol) for b in (0, 1)]
                    claims[fam] = {
                        "ordering_ada>tail>uniform": bool(ok_order),
                        "ada_vs_tail_overall_rel": _improvement(vals[ada], vals[tail], protocol),
                        "tail_vs_uniform_overall_rel": _improvement(vals[tail], vals[uni], protocol),
                        "ada_vs_tail_bucket0_rel": tail_b[0],
                        "ada_vs_tail_bucket1_rel": tail_b[1],
                        "tail_buckets_>=10%": bool(all(_finite(x) and x >= 0.10 for x in tail_b)),
                    }
            entry["by_epsilon"][str(eps)] = {"overall": row, "claims": claims}
        out[ds] = entry
    return out


def _f(v, nd=4) -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    return "nan" if not math.isfinite(v) else f"{v:.{nd}f}"


def markdown(results: dict) -> str:
    """Tables of overall metrics, claims and per-bucket values, as measured."""
    lines = [
        "ada columns: the test metric at the mu (of 1/4, 1/3, 1/2) with the best *validation* metric; "
        "the test fold is never used to choose a hyper-parameter.\n"
    ]
    an = results["analysis"]
    runs = results["runs"]
    for ds, e in an.items():
        lines.append(f"### {ds} ({e['protocol']} protocol, {e['metric']}; ALS = {_f(e['als'])})\n")
        methods = [m for fam in FAMILIES.values() for m in fam]
        lines.append("| eps | " + " | ".join(methods) + " | mu chosen on validation (ada-dpals / ada-dpsgd) |")
        lines.append("|---" * (len(methods) + 2) + "|")
        for eps, v in e["by_epsilon"].items():
            o = v["overall"]
            lines.append(
                f"| {eps} | "
                + " | ".join(_f(o.get(m)) for m in methods)
                + f" | {_f(o.get('ada-dpals_best_mu'), 3)} / {_f(o.get('ada-dpsgd_best_mu'), 3)} |"
            )
        lines.append("")
        lines.append(
            "| eps | family | ada > tail > uniform | ada vs tail (overall) | ada vs tail bucket 0 | "
            "bucket 1 | both >= 10% |"
        )
        lines.append("|---|---|---|---|---|---|---|")
        for eps, v in e["by_epsilon"].items():
            for fam, c in v["claims"].items():
                lines.append(
                    f"| {eps} | {fam} | {_f(c['ordering_ada>tail>uniform'])} | "
                    f"{_f(100 * c['ada_vs_tail_overall_rel'], 1)}% | "
                    f"{_f(100 * c['ada_vs_tail_bucket0_rel'], 1)}% | "
                    f"{_f(100 * c['ada_vs_tail_bucket1_rel'], 1)}% | {_f(c['tail_buckets_>=10%'])} |"
                )
        lines.append("")
        # per-bucket table at the smallest epsilon (plus ALS)
        rs = [r for r in runs if r["dataset"] == ds]
        eps0 = min((r["epsilon"] for r in rs if r["epsilon"] is not None), default=None)
        sk = sliced_name(e["protocol"])
        sel = [r for r in rs if r["method"] == "als"]
        for m in methods:
            cand = [r for r in rs if r["method"] == m and r["epsilon"] == eps0]
            if m.startswith("ada"):
                b = best_ada(rs, ds, m, eps0, e["protocol"])
                cand = [b] if b else []
            sel += cand[:1]
        if sel:
            nb = len(sel[0]["sliced"][sk])
            lines.append(
                f"Per-bucket {sk} at eps = {eps0} (bucket 0 = least popular; neighbour overlap with ALS in brackets):\n"
            )
            lines.append("| method | " + " | ".join(f"b{b}" for b in range(nb)) + " |")
            lines.append("|---" * (nb + 1) + "|")
            for r in sel:
                ov = r["sliced"].get("neighbour_overlap@20")
                cells = [_f(r["sliced"][sk][b]) + (f" ({_f(ov[b], 2)})" if ov else "") for b in range(nb)]
                name = r["method"] + (f" mu={r['mu']:.3g}" if r.get("mu") is not None else "")
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            lines.append("")
    if results.get("skipped"):
        lines.append(
            "Skipped: "
            + "; ".join(
                f"{s['dataset']} {s.get('method', '')} {s.get('epsilon', '') or ''}: {s['reason']}"
                for s in results["skipped"][:20]
            )
            + ("" if len(results["skipped"]) <= 20 else " ...")
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ plots
def plots(results: dict, out_dir: Path, tag: str = "") -> list[str]:
    """Trade-off, sliced, mu and overlap plots (matplotlib imported lazily, Agg backend)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - plots extra not installed
        return []
    written = []
    runs = results["runs"]
    for ds, e in results["analysis"].items():
        rs = [r for r in runs if r["dataset"] == ds]
        protocol, metric = e["protocol"], e["metric"]
        eps_list = sorted(float(x) for x in e["by_epsilon"])
        if not eps_list:  # no private run finished: nothing to plot
            continue
        # trade-off
        fig, ax = plt.subplots(figsize=(6, 4))
        for fam, ms in FAMILIES.items():  # colour = allocation, line style = family
            for m, colour, marker in zip(ms, ("C0", "C1", "C2"), ("o", "s", "^")):
                ys = [e["by_epsilon"][str(x)]["overall"].get(m) for x in eps_list]
                ax.plot(
                    eps_list,
                    [math.nan if y is None else y for y in ys],
                    "-" if fam == "dpals" else "--",
                    marker=marker,
                    color=colour,
                    label=m,
                )
        if e["als"] is not None:
            ax.axhline(e["als"], color="k", lw=1, label="ALS (non-private)")
        ax.set_xscale("log")
        ax.set_xlabel("epsilon")
        ax.set_ylabel(metric)
        ax.set_title(f"{ds}: privacy-utility trade-off")
        ax.legend(fontsize=7)
        written.append(_save(fig, out_dir / f"tradeoff_{ds}{tag}.png", plt))
        # sliced + overlap bars, one figure per epsilon
        sk = sliced_name(protocol)
        for eps0, what, fname in [
            (e_, w_, f_) for e_ in eps_list for w_, f_ in ((sk, "sliced"), ("neighbour_overlap@20", "overlap"))
        ]:
            sel = [
                (m, r)
                for m in [x for f in FAMILIES.values() for x in f]
                for r in (
                    [best_ada(rs, ds, m, eps0, protocol)]
                    if m.startswith("ada")
                    else [x for x in rs if x["method"] == m and x["epsilon"] == eps0][:1]
                )
                if r
            ]
            if what == sk:
                sel = [("als", r) for r in rs if r["method"] == "als"][:1] + sel
            sel = [(m, r) for m, r in sel if what in r.get("sliced", {})]
            if not sel:
                continue
            nb = len(sel[0][1]["sliced"][what])
            fig, ax = plt.subplots(figsize=(7, 4))
            w = 0.8 / len(sel)
            for j, (m, r) in enumerate(sel):
                vals = [math.nan if v is None else v for v in r["sliced"][what]]
                ax.bar([b + j * w for b in range(nb)], vals, w, label=m)
            ax.set_xticks([b + 0.4 - w / 2 for b in range(nb)])
            ax.set_xticklabels([f"b{b}" + (" (tail)" if b == 0 else "") for b in range(nb)])
            ax.set_ylabel(what)
            ax.set_title(f"{ds}: {what} per popularity bucket, eps = {eps0}")
            ax.legend(fontsize=6, ncol=4, loc="lower center", bbox_to_anchor=(0.5, -0.32))
            written.append(_save(fig, out_dir / f"{fname}_{ds}_eps{eps0:g}{tag}.png", plt))
        # mu sweep
        mus = sorted({r["mu"] for r in rs if r.get("mu") is not None})
        if len(mus) > 1:
            fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
            for ax, m in zip(axes, ("ada-dpals", "ada-dpsgd")):
                for eps in eps_list:
                    pts = sorted((r["mu"], _overall(r)) for r in rs if r["method"] == m and r["epsilon"] == eps)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"eps={eps:g}")
                ax.set_xlabel("mu (weight exponent)")
                ax.set_title(m)
            axes[0].set_ylabel(metric)
            axes[0].legend(fontsize=7)
            fig.suptitle(f"{ds}: mu sweep")
            written.append(_save(fig, out_dir / f"mu_{ds}{tag}.png", plt))
    return written


def _save(fig, path: Path, plt) -> str:
    from privrec._io import atomic_path

    with atomic_path(path, suffix=".png") as tmp:
        fig.tight_layout()
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
    return str(path)


# ------------------------------------------------------------------------------------------ CLI
def build_parser(p=None):
    p = p or argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small synthetic configuration (seconds)")
    p.add_argument("--part", choices=PARTS, default="all", help="which runs (default: all)")
    p.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    p.add_argument("--ml10m-scale", type=float, default=1.0, help="subsampling of the ml10m-like preset's users")
    p.add_argument("--ml20m-scale", type=float, default=1.0, help="subsampling of the ml20m-like preset's users")
    p.add_argument("--epsilons", type=float, nargs="+", default=None)
    p.add_argument("--datasets", nargs="+", default=None, help="restrict to these dataset keys")
    p.add_argument("--budget-minutes", type=float, default=None, help="skip remaining runs after this time")
    p.add_argument(
        "--label-suffix", default="", help="appended to the dataset labels (e.g. '@0.5' for a second, larger-scale run)"
    )
    p.add_argument(
        "--collect",
        action="store_true",
        help="merge results/tradeoff_ds-*.json (one per dataset) into tradeoff.json/.md and plots",
    )
    p.add_argument(
        "--eval-speed",
        action="store_true",
        help="time the full ml20m-like held-out evaluation against a full-argsort peer",
    )
    p.add_argument(
        "--baselines",
        action="store_true",
        help="global-mean RMSE / popularity Recall@20 per dataset into results/baselines.json",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        default=None,
        choices=X.METHODS,
        help="run only these methods and merge them into the existing per-dataset results file "
        "(other methods' runs are kept); e.g. --methods als",
    )
    p.add_argument(
        "--tune-als",
        action="store_true",
        help="held-out users: choose the ALS reference's ridge (and gravity) on the validation users "
        "and record the grid under 'als_tuning' in the results JSON",
    )
    p.add_argument("--als-ridges", type=float, nargs="+", default=list(ALS_RIDGES))
    p.add_argument("--als-gravities", type=float, nargs="+", default=list(ALS_GRAVITIES))
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true")
    return p


def main_from_args(args) -> int:
    if args.eval_speed:
        kw = dict(n_users=300, n_items=2000, factors=16) if args.quick else {}
        res = eval_speed(out_dir=args.out or C.RESULTS, tag="_quick" if args.quick else "", **kw)
        print(json.dumps(C.json_safe(res), indent=1))
        return 0
    if args.collect:
        print(markdown(collect(args.out, make_plots=not args.no_plots)))
        return 0
    cfg = quick_config() if args.quick else full_config(args.ml10m_scale, args.ml20m_scale)
    if args.baselines:
        cfg.datasets = [
            d for d in cfg.datasets if not args.datasets or d.key in args.datasets or d.name in args.datasets
        ]
        print(json.dumps(trivial_baselines(cfg, args.out, args.quiet), indent=1))
        return 0
    if args.epsilons:
        cfg.epsilons = tuple(args.epsilons)
    if args.methods:
        cfg.methods = tuple(args.methods)
    cfg.tune_als = args.tune_als
    cfg.als_ridges, cfg.als_gravities = tuple(args.als_ridges), tuple(args.als_gravities)
    if args.datasets:
        cfg.datasets = [d for d in cfg.datasets if d.key in args.datasets or d.name in args.datasets]
        if not cfg.datasets:
            print("bench_tradeoff: error: no dataset left after --datasets", file=sys.stderr)
            return 2
        if args.label_suffix:
            for d in cfg.datasets:
                d.label = d.key + args.label_suffix
        if not args.quick and len(cfg.datasets) == 1:  # one file per dataset, merged by --collect
            cfg.tag = f"_ds-{cfg.datasets[0].key}"
    res = run(
        cfg,
        args.part,
        args.out,
        quiet=args.quiet,
        make_plots=not args.no_plots,
        deadline_s=None if args.budget_minutes is None else 60 * args.budget_minutes,
    )
    print(markdown(res))
    return 0


def main(argv=None) -> int:
    return main_from_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
