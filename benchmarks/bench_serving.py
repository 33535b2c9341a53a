"""Serving: recall@10 of the approximate item index, and peak memory of ``recommend_all``.

Recall: a non-private ``ALS`` and a private ``DPALS`` are fitted on ``ml20m-like`` (the item
catalogue is 20,108 items at any scale); :class:`privrec.serving.ItemIndex` (faiss HNSW) answers
``similar_items`` (cosine; query items with non-zero factors) and ``recommend`` (the model's
ranking score, bias / exposure terms included, rated items excluded) for random queries, and
recall@10 against the model's own exact ``similar_items`` / ``recommend`` is reported for a
range of ``ef_search``, twice: by ids, and tie-aware (a returned item counts when its exact
score reaches the exact 10th score: rarely rated items have parallel factors, cosine exactly 1,
and exact search breaks those ties arbitrarily). Target: recall@10 >= 0.95 at the default
``ef_search``.

Memory: a private implicit-feedback ``DPALS`` (play counts; epsilon 5, 32 factors) is fitted on a 5% user sample of
``msd-like`` (same 41,140 items) and saved; the full ``msd-like`` ratings (571,355 users,
33.6M play counts) are generated and saved as a sparse ``.npz`` (generation itself peaks near
3 GB and is not part of serving); then a child process, run under ``/usr/bin/time -v``, loads
the model and the ratings and writes every user's top 10 to Parquet with ``recommend_all``
(exact scores, billboard projection of each user's own history). Its "Maximum resident set
size" is the figure. Target: <= 2 GB.

    python benchmarks/bench_serving.py            # ml20m-like scale 0.2 + msd-like (minutes)
    python benchmarks/bench_serving.py --quick    # the embedded synthetic-skew for both (seconds)

Outputs ``<out>/serving[_quick].json`` and ``.md``. See docs/serving.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

try:
    from . import _common as C
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as C  # type: ignore

from privrec.serving.ann import DEFAULT_EF_SEARCH

RECALL_TARGET = 0.95
RSS_TARGET_GB = 2.0
EF_VALUES = (16, 32, 64, 128, 256)


def config(quick: bool) -> dict:
    if quick:  # the embedded default dataset: seconds
        return dict(
            recall_dataset="synthetic-skew",
            recall_scale=1.0,
            als_factors=16,
            dpals_factors=8,
            iterations=3,
            queries=200,
            ef_values=(32, DEFAULT_EF_SEARCH),
            variant_ef=128,
            memory_dataset="synthetic-skew",
            memory_scale=1.0,
            memory_fit_scale=1.0,
            memory_factors=8,
        )
    return dict(
        recall_dataset="ml20m-like",
        recall_scale=0.2,
        als_factors=64,
        dpals_factors=32,
        iterations=8,
        queries=2000,
        ef_values=EF_VALUES,
        variant_ef=128,
        memory_dataset="msd-like",
        memory_scale=1.0,
        memory_fit_scale=0.05,
        memory_factors=32,
    )


def _models(cfg: dict, quiet: bool):
    from privrec.data import load_dataset
    from privrec.models import ALS, DPALS

    data = load_dataset(cfg["recall_dataset"], scale=cfg["recall_scale"])
    C.log(f"{cfg['recall_dataset']}@{cfg['recall_scale']}: {data.n_users} x {data.n_items}, {data.nnz} ratings", quiet)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        als = ALS(factors=cfg["als_factors"], iterations=cfg["iterations"], random_state=0).fit(
            data, show_progress=False
        )
        dpals = DPALS(epsilon=5.0, factors=cfg["dpals_factors"], random_state=0).fit(data, show_progress=False)
    return data, {"ALS": als, "DPALS": dpals}


def measure_recall(cfg: dict, quiet: bool = False) -> dict:
    """Recall@10 of ItemIndex (faiss) against exact search, per model, query kind and ef_search."""
    from privrec.serving import ItemIndex, recall_at_k

    data, models = _models(cfg, quiet)
    rng = np.random.default_rng(0)
    users = np.sort(rng.choice(data.n_users, size=min(cfg["queries"], data.n_users), replace=False))
    rows = data.matrix[users]
    out: dict = {"dataset": f"{cfg['recall_dataset']}@{cfg['recall_scale']}", "n_items": data.n_items, "models": {}}
    for name, model in models.items():
        V = model.item_factors_
        nonzero = np.flatnonzero(np.any(V != 0, axis=1))
        items = np.sort(rng.choice(nonzero, size=min(cfg["queries"], nonzero.size), replace=False))
        exact_sim = model.similar_items(items, N=10)
        exact_rec = model.recommend(users, rows, N=10)
        index = ItemIndex(model, "faiss")
        entry: dict = {
            "factors": int(V.shape[1]),
            "items_with_factors": int(nonzero.size),
            "ranking": getattr(model, "_ranking_mode", lambda: "rating")(),
            "similar_items": {},
            "recommend": {},
            "similar_items_ties": {},
            "recommend_ties": {},
        }
        for ef in cfg["ef_values"]:
            index.ef_search = int(ef)
            for kind, approx, exact in (
                ("similar_items", index.similar_items(items, N=10), exact_sim),
                ("recommend", index.recommend(users, rows, N=10), exact_rec),
            ):
                entry[kind][str(ef)] = recall_at_k(approx[0], exact[0])
                entry[f"{kind}_ties"][str(ef)] = recall_at_k(approx[0], exact[0], approx[1], exact[1])
        C.log(f"{name}: similar {entry['similar_items_ties']}, recommend {entry['recommend_ties']}", quiet)
        entry["recommend_variants"] = recommend_variants(model, users, rows, cfg["variant_ef"])
        C.log(f"{name}: variants at ef={cfg['variant_ef']}: {entry['recommend_variants']}", quiet)
        out["models"][name] = entry
    out["queries"] = {"items": int(min(cfg["queries"], data.n_items)), "users": int(users.size)}
    out["default_ef_search"] = DEFAULT_EF_SEARCH
    return out


def recommend_variants(model, users, rows, ef: int) -> dict:
    """Recall@10 of the top 10 (rated items not excluded, so every graph answers the same 10-nearest
    query at the same ``ef_search``) of three graphs for ``recommend``: the one privrec builds (inner
    product, item term centred), the same without centring, and the Euclidean reduction of maximum
    inner product search (one extra coordinate that gives every item the same norm; Bachrach et al.
    2014, as implicit's ``augment_inner_product_matrix``)."""
    import faiss

    from privrec.serving import recall_at_k
    from privrec.serving._terms import ranking_terms

    exact_ids, _ = model.recommend(users, rows, N=10, filter_already_liked_items=False)
    terms = ranking_terms(model)
    items = terms.items()
    uvec, _ = model._user_vectors(users, rows, False)
    q = terms.queries(uvec)

    def recall(x: np.ndarray, queries: np.ndarray, metric) -> float:
        index = faiss.IndexHNSWFlat(x.shape[1], 32, metric)
        index.hnsw.efConstruction = 200
        index.add(np.ascontiguousarray(x, dtype=np.float32))
        params = faiss.SearchParametersHNSW(efSearch=ef)
        _, top = index.search(np.ascontiguousarray(queries, dtype=np.float32), 10, params=params)
        return recall_at_k(top, exact_ids)

    centred = items.copy()
    centred[:, -1] -= centred[:, -1].mean()
    sq = np.einsum("ij,ij->i", items, items, dtype=np.float64)
    euclid = np.hstack([items, np.sqrt(sq.max() - sq)[:, None].astype(np.float32)])
    return {
        "inner product, centred (privrec)": recall(centred, q, faiss.METRIC_INNER_PRODUCT),
        "inner product, uncentred": recall(items, q, faiss.METRIC_INNER_PRODUCT),
        "Euclidean reduction": recall(euclid, np.hstack([q, np.zeros((q.shape[0], 1), np.float32)]), faiss.METRIC_L2),
    }


# ---------------------------------------------------------------------------------------- memory
CHILD = """\
import sys, json, scipy.sparse as sp
from privrec.models import load_model
from privrec.serving import recommend_all
model = load_model(sys.argv[1])
ratings = sp.load_npz(sys.argv[2]).tocsr()
summary = recommend_all(model, ratings, sys.argv[3], N=10)
print(json.dumps(summary))
"""


def _max_rss_kb(stderr: str) -> int | None:
    m = re.search(r"Maximum resident set size \(kbytes\):\s*(\d+)", stderr)
    return int(m.group(1)) if m else None


def run_child(model_path: Path, ratings_path: Path, out_path: Path) -> dict:
    """Run ``recommend_all`` in a child process; ``{"summary", "max_rss_kb", "measured_by"}``."""
    cmd = [sys.executable, "-c", CHILD, str(model_path), str(ratings_path), str(out_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(C.ROOT), os.environ.get("PYTHONPATH", "")])}
    time_bin = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    if time_bin is not None:
        proc = subprocess.run([time_bin, "-v", *cmd], capture_output=True, text=True, env=env)
        rss, how = _max_rss_kb(proc.stderr), "/usr/bin/time -v"
    else:  # pragma: no cover - no GNU time on this machine
        import resource

        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        rss, how = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "getrusage(RUSAGE_CHILDREN)"
    if proc.returncode != 0:
        raise RuntimeError(f"recommend_all child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"summary": summary, "max_rss_kb": rss, "measured_by": how}


def measure_memory(cfg: dict, workdir: Path, quiet: bool = False) -> dict:
    import scipy.sparse as sp

    from privrec.data import load_dataset
    from privrec.models import DPALS

    name = cfg["memory_dataset"]
    fit_data = load_dataset(name, scale=cfg["memory_fit_scale"], random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPALS(epsilon=5.0, factors=cfg["memory_factors"], feedback="implicit", random_state=0).fit(
            fit_data, show_progress=False
        )
    model_path = workdir / "msd_model.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(model_path)
    del fit_data, model
    data = load_dataset(name, scale=cfg["memory_scale"])
    shape, nnz = data.matrix.shape, int(data.nnz)
    ratings_path = workdir / "msd_ratings.npz"
    sp.save_npz(ratings_path, data.matrix, compressed=False)
    del data
    C.log(f"{name}@{cfg['memory_scale']}: {shape[0]} users x {shape[1]} items, {nnz} ratings", quiet)
    res = run_child(model_path, ratings_path, workdir / "top10.parquet")
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(workdir / "top10.parquet").metadata
    res.update(
        dataset=f"{name}@{cfg['memory_scale']}",
        n_users=int(shape[0]),
        n_items=int(shape[1]),
        n_ratings=nnz,
        ratings_file_mb=round(ratings_path.stat().st_size / 2**20, 1),
        parquet_rows=int(meta.num_rows),
        parquet_row_groups=int(meta.num_row_groups),
        parquet_mb=round((workdir / "top10.parquet").stat().st_size / 2**20, 1),
        max_rss_gb=None if res["max_rss_kb"] is None else round(res["max_rss_kb"] / 2**20, 3),
    )
    C.log(f"recommend_all peak RSS {res['max_rss_gb']} GB", quiet)
    return res


def markdown(res: dict) -> str:
    lines = ["# serving", ""]
    rec = res.get("recall")
    if rec:
        lines += [
            f"Recall@10 of `privrec.serving.ItemIndex` (faiss HNSW, M=32, ef_construction=200) against exact search "
            f"on {rec['dataset']} ({rec['n_items']:,} items); {rec['queries']['items']} query items (with non-zero "
            f"factors) for `similar_items`, {rec['queries']['users']} users (rated items excluded) for `recommend`. "
            f"Target >= {RECALL_TARGET} at the default ef_search = {rec.get('default_ef_search', 128)}.",
            "",
            "| model | factors | ranking | query | recall | "
            + " | ".join(f"ef={ef}" for ef in res["config"]["ef_values"])
            + " |",
            "|---|---|---|---|---|" + "---|" * len(res["config"]["ef_values"]),
        ]
        for name, e in rec["models"].items():
            for kind in ("similar_items", "recommend"):
                for label, key in (("by ids", kind), ("tie-aware", f"{kind}_ties")):
                    cells = " | ".join(f"{e[key][str(ef)]:.4f}" for ef in res["config"]["ef_values"])
                    lines.append(f"| {name} | {e['factors']} | {e['ranking']} | {kind} | {label} | {cells} |")
        lines += [
            "",
            f"Graph choice for `recommend`: recall@10 by ids of the plain 10-nearest query (rated items not "
            f"excluded, so every graph answers the same query at the same cost), ef_search = "
            f"{res['config']['variant_ef']}, M = 32, ef_construction = 200:",
            "",
            "| model | " + " | ".join(next(iter(rec["models"].values()))["recommend_variants"]) + " |",
            "|---|" + "---|" * len(next(iter(rec["models"].values()))["recommend_variants"]),
        ]
        for name, e in rec["models"].items():
            lines.append(f"| {name} | " + " | ".join(f"{v:.4f}" for v in e["recommend_variants"].values()) + " |")
        lines.append("")
    mem = res.get("memory")
    if mem:
        lines += [
            f"Peak RSS of `recommend_all(model, ratings, 'top10.parquet', N=10)` in a child process "
            f"({mem['measured_by']}) on {mem['dataset']}: {mem['n_users']:,} users x {mem['n_items']:,} items, "
            f"{mem['n_ratings']:,} ratings loaded from a {mem['ratings_file_mb']} MB .npz; a private implicit-feedback "
            f"DPALS (epsilon 5, {res['config']['memory_factors']} factors) loaded from its file, every user projected "
            f"from their own history, exact scores, batches of at most {mem['summary']['batch_size']} users and "
            f"{mem['summary']['max_batch_ratings']:,} ratings. Target <= {RSS_TARGET_GB} GB.",
            "",
            "| peak RSS (GB) | Parquet rows | row groups | Parquet MB |",
            "|---|---|---|---|",
            f"| {mem['max_rss_gb']} | {mem['parquet_rows']:,} | {mem['parquet_row_groups']} | {mem['parquet_mb']} |",
            "",
        ]
    for part in ("recall", "memory"):
        if res.get(part, {}).get("measured"):
            lines.append(f"The {part} figures are carried over from the run of {res[part]['measured']}.")
    lines.append(f"Environment: {res['environment']}")
    return "\n".join(lines) + "\n"


def _measured(previous: dict, part: str) -> str:
    """When ``previous[part]`` was measured: its own stamp if it was carried over already, else the run's."""
    return previous[part].get("measured") or previous["environment"]["time_utc"]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small datasets (seconds)")
    ap.add_argument("--skip-recall", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    cfg = config(args.quick)
    name = "serving_quick" if args.quick else "serving"
    out = Path(args.out)
    previous = C.read_json(out / f"{name}.json") if (out / f"{name}.json").is_file() else {}
    res: dict = {"config": cfg, "environment": C.environment()}
    if not args.skip_recall:
        res["recall"] = measure_recall(cfg, args.quiet)
    elif "recall" in previous:  # a skipped part keeps its last measurement, marked as such
        res["recall"] = {**previous["recall"], "measured": _measured(previous, "recall")}
    if not args.skip_memory:
        with tempfile.TemporaryDirectory(prefix="privrec-serving-") as tmp:
            res["memory"] = measure_memory(cfg, Path(tmp), args.quiet)
    elif "memory" in previous:
        res["memory"] = {**previous["memory"], "measured": _measured(previous, "memory")}
    C.write_json(out / f"{name}.json", res)
    C.write_text(out / f"{name}.md", markdown(res))
    return res


if __name__ == "__main__":
    main()
