"""Utility cost of add/remove DP for a plain ratings file: the default fit with nothing declared
(noisy user count + private item selection) against the same file with its roster and catalogue
declared (zero-out), on one split, mean +- std over noise seeds.

    python benchmarks/bench_addremove.py [--datasets ml-100k lastfm-2k ml10m-like ml20m-like]
        [--epsilons 1 5 20] [--seeds 3] [--out benchmarks/results/addremove.md]

Each dataset is written once as a CSV (and its user / item lists) in a temporary folder, then
``privrec fit --ratings FILE --json`` runs with and without ``--users`` / ``--items``: the same
split (``--seed 0``), the same noise seeds (``--noise-seed``). Real sets come from
``$PRIVREC_SHARED_DATASETS`` (default ``../shared/datasets``) and are skipped when absent;
synthetic presets are generated (``--scale`` per preset below).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

SHARED = Path(os.environ.get("PRIVREC_SHARED_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
#: dataset -> (how to load it, extra CLI flags)
SCALES = {"ml10m-like": 0.2, "ml20m-like": 0.2}


def _frame(name: str, scale: float | None):
    """(long DataFrame user / item / rating, extra flags) of a dataset, or None when absent."""
    import pandas as pd

    if name == "ml-100k":
        path = SHARED / "ml-100k" / "u.data"
        if not path.exists():
            return None
        df = pd.read_csv(path, sep="\t", names=["user", "item", "rating", "ts"])[["user", "item", "rating"]]
        return df, ["--rating-range", "1", "5"]
    if name == "lastfm-2k":
        path = SHARED / "hetrec2011-lastfm-2k" / "user_artists.dat"
        if not path.exists():
            return None
        first = path.open().readline()
        header = 0 if first.lower().startswith("user") else None
        df = pd.read_csv(path, sep="\t", header=header)
        df.columns = ["user", "item", "rating"]
        return df[["user", "item"]], ["--rating-col", "", "--method", "ada-dpals"]
    from privrec.data import load_dataset

    data = load_dataset(name, scale=scale if scale is not None else SCALES.get(name))
    coo = data.matrix.tocoo()
    df = pd.DataFrame({"user": coo.row, "item": coo.col, "rating": coo.data})
    implicit = bool(getattr(data, "info", {}).get("implicit", False)) or name == "ml20m-like"
    if implicit:
        return df[["user", "item"]], ["--rating-col", ""]
    return df, ["--rating-range", "0.5", "5"]


def _run(args: list[str]) -> dict:
    out = subprocess.run(
        [shutil.which("privrec") or "privrec", "fit", *args, "--json", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"privrec fit {' '.join(args)} failed: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["ml-100k", "lastfm-2k", "ml10m-like", "ml20m-like"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 5.0, 20.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=None, help="scale of the synthetic presets (default per preset)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.datasets:
            got = _frame(name, a.scale)
            if got is None:
                print(f"{name}: not found under {SHARED}, skipped", flush=True)
                continue
            df, flags = got
            csv, users, items = Path(tmp, f"{name}.csv"), Path(tmp, f"{name}.users"), Path(tmp, f"{name}.items")
            df.to_csv(csv, index=False)
            users.write_text("\n".join(map(str, sorted(df["user"].unique()))) + "\n")
            items.write_text("\n".join(map(str, sorted(df["item"].unique()))) + "\n")
            base = ["--ratings", str(csv), "--numeric-ids", "--seed", "0", *flags]
            for eps in a.epsilons:
                cells = {}
                for mode, extra in (("declared", ["--users", str(users), "--items", str(items)]), ("add/remove", [])):
                    rmse, recall, sel = [], [], []
                    for s in range(a.seeds):
                        try:
                            res = _run([*base, *extra, "--epsilon", f"{eps:g}", "--noise-seed", str(1000 + s)])
                        except RuntimeError as exc:  # e.g. no item passes the private selection
                            print(f"{name} eps {eps:g} {mode} seed {s}: {str(exc)[-200:]}", flush=True)
                            sel.append(0)
                            continue
                        m = res["non_private"]["metrics"]
                        if m.get("rmse") is not None:
                            rmse.append(float(m["rmse"]))
                        recall.append(float(m["recall@20"]))
                        sel.append((res.get("config") or {}).get("n_items"))
                    cells[mode] = (rmse, recall, sel)
                    print(name, eps, mode, rmse, recall, sel, flush=True)
                rows.append((name, eps, cells))
    lines = [
        "| dataset | eps | RMSE declared | RMSE add/remove | Recall@20 declared | Recall@20 add/remove | items (add/remove) |",
        "|---|---|---|---|---|---|---|",
    ]

    def ms(v):
        if not v:
            return "-"
        return f"{statistics.mean(v):.4f} ± {statistics.stdev(v) if len(v) > 1 else 0:.4f}"

    for name, eps, cells in rows:
        d, r = cells["declared"], cells["add/remove"]
        items = ", ".join(str(x) for x in r[2])
        lines.append(f"| {name} | {eps:g} | {ms(d[0])} | {ms(r[0])} | {ms(d[1])} | {ms(r[1])} | {items} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
