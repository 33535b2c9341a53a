"""Data-layer benchmark (issue 2): Parquet cache speed-up and synthetic generator cost.

1. Loading a MovieLens-20M-format ``ratings.csv`` (20,000,263 rows in full mode, like ML-20M;
   300,000 in ``--quick``), written from generated data into a temporary folder:
   * peer: ``pandas.read_csv`` of the same file (C parser, no validation, no matrix), same process;
   * privrec first load: parse + validate + build the CSR + write the Parquet cache;
   * privrec second load: read from the Parquet cache.
   Reported: times and the ratios second/first and first/peer.
2. Generators: ``synthetic-skew`` in process; ``ml20m-like`` (full size; ``--quick``: 5% of its
   users) in a fresh subprocess so that its wall time and peak RSS are its own; peer: drawing the
   same number of uniformly random distinct (user, item) pairs with numpy (no skew, no ground
   truth) in that same subprocess.

    python benchmarks/bench_data.py --quick    # seconds
    python benchmarks/bench_data.py            # full (a few minutes, ~1 GB of temporary files)

Writes ``benchmarks/results/bench_data[_quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

from privrec.data import load_dataset
from privrec.data.synthetic import PRESETS, generate_preset

_CHILD = r"""
import json, resource, sys, time
import numpy as np
from privrec.data.synthetic import generate_preset, PRESETS
scale = float(sys.argv[1])
t = time.perf_counter()
d = generate_preset("ml20m-like", scale=scale)
gen = time.perf_counter() - t
x = d.interactions
c = np.sort(x.item_counts)[::-1]
share = float(c[: int(np.ceil(0.1 * x.n_items))].sum() / c.sum())
def peak_mib():
    # VmHWM is this process image's own peak RSS; ru_maxrss would also count the parent's RSS
    # at fork time (Linux keeps it across exec)
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
rss = peak_mib()
del d, x
rng = np.random.default_rng(0)
n_pairs = int(round(PRESETS["ml20m-like"].n_interactions * scale))
n_users = int(round(PRESETS["ml20m-like"].n_users * scale))
t = time.perf_counter()
keys = np.sort(rng.integers(0, n_users * 20108, size=int(n_pairs * 1.01)))
keys = keys[np.r_[True, keys[1:] != keys[:-1]]][:n_pairs]
peer = time.perf_counter() - t
print(json.dumps({"seconds": gen, "peak_rss_mib": rss, "top10_share": share, "peer_uniform_pairs_seconds": peer,
                  "users": n_users, "interactions": n_pairs}))
"""


def _write_ratings_csv(path: Path, n_rows: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    n_users, n_items = 138_493, 26_744
    keys = np.sort(rng.integers(0, n_users * n_items, size=int(n_rows * 1.02)))
    keys = keys[np.r_[True, keys[1:] != keys[:-1]]]
    keys = rng.permutation(keys)[:n_rows]
    table = pa.table(
        {
            "userId": keys // n_items + 1,
            "movieId": keys % n_items + 1,
            "rating": rng.integers(1, 11, size=n_rows) / 2.0,
            "timestamp": rng.integers(789652009, 1427784002, size=n_rows),
        }
    )
    with open(path, "wb") as fh:
        fh.write(b"userId,movieId,rating,timestamp\n")
        pacsv.write_csv(table, fh, write_options=pacsv.WriteOptions(include_header=False))


def bench_loading(n_rows: int, quiet: bool) -> dict:
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="privrec-bench-data-") as tmp:
        folder = Path(tmp) / "ml-20m"
        folder.mkdir()
        C.log(f"writing a {n_rows:,}-row ratings.csv", quiet)
        _write_ratings_csv(folder / "ratings.csv", n_rows)
        size_mb = (folder / "ratings.csv").stat().st_size / 2**20
        t = time.perf_counter()
        df = pd.read_csv(folder / "ratings.csv")
        peer = time.perf_counter() - t
        del df
        t = time.perf_counter()
        a = load_dataset("ml-20m", data_dir=folder, cache_dir=Path(tmp) / "cache")
        first = time.perf_counter() - t
        t = time.perf_counter()
        b = load_dataset("ml-20m", data_dir=folder, cache_dir=Path(tmp) / "cache")
        second = time.perf_counter() - t
        assert "cache" in b.info and b.nnz == a.nnz == n_rows and (a.matrix != b.matrix).nnz == 0
    return {
        "rows": n_rows,
        "file_mib": size_mb,
        "peer_pandas_read_csv_s": peer,
        "first_load_s": first,
        "cached_load_s": second,
        "cached_over_first": second / first,
        "first_over_peer": first / peer,
    }


def bench_generators(quick: bool, quiet: bool) -> dict:
    t = time.perf_counter()
    x = generate_preset("synthetic-skew").interactions
    skew_s = time.perf_counter() - t
    scale = 0.05 if quick else 1.0
    C.log(f"generating ml20m-like at scale {scale} in a subprocess", quiet)
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(scale)], capture_output=True, text=True, check=True, cwd=C.ROOT
    )
    child = json.loads(res.stdout.strip().splitlines()[-1])
    child["scale"] = scale
    child["over_peer"] = child["seconds"] / child["peer_uniform_pairs_seconds"]
    return {
        "synthetic_skew": {"seconds": skew_s, "users": x.n_users, "items": x.n_items, "interactions": x.nnz},
        "ml20m_like": child,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--part",
        choices=("all", "loading", "generators"),
        default="all",
        help="run one part only and keep the other part's figures from the last results file",
    )
    args = ap.parse_args(argv)
    n_rows = 300_000 if args.quick else 20_000_263
    stem = "bench_data_quick" if args.quick else "bench_data"
    previous = C.read_json(C.RESULTS / f"{stem}.json") if (C.RESULTS / f"{stem}.json").is_file() else {}
    out = {"environment": C.environment(), "quick": args.quick}
    # generators first, while this process is still small
    out["generators"] = (
        bench_generators(args.quick, args.quiet) if args.part in ("all", "generators") else previous["generators"]
    )
    out["loading"] = bench_loading(n_rows, args.quiet) if args.part in ("all", "loading") else previous["loading"]
    C.write_json(C.RESULTS / f"{stem}.json", out)
    ld, g = out["loading"], out["generators"]["ml20m_like"]
    md = "\n".join(
        [
            f"# Data layer benchmark{' (quick)' if args.quick else ''}",
            "",
            f"Command: `python benchmarks/bench_data.py{' --quick' if args.quick else ''}"
            f"{' --part ' + args.part if args.part != 'all' else ''}` "
            f"({out['environment']['time_utc']}, {out['environment']['cpus']} CPUs, shared machine)"
            + ("; the other part's figures come from the previous run." if args.part != "all" else "."),
            "",
            f"## Loading a {ld['rows']:,}-row ML-20M-format ratings.csv ({ld['file_mib']:.0f} MiB)",
            "",
            "| step | seconds | ratio |",
            "|---|---|---|",
            f"| peer: pandas.read_csv (no validation, no CSR) | {ld['peer_pandas_read_csv_s']:.2f} | 1 |",
            f"| privrec first load (parse, validate, CSR, write cache) | {ld['first_load_s']:.2f} | "
            f"{ld['first_over_peer']:.2f} x peer |",
            f"| privrec second load (Parquet cache) | {ld['cached_load_s']:.2f} | "
            f"{ld['cached_over_first']:.3f} x first load |",
            "",
            "## Generators",
            "",
            f"- synthetic-skew ({PRESETS['synthetic-skew'].n_users:,} users): "
            f"{out['generators']['synthetic_skew']['seconds']:.2f} s",
            f"- ml20m-like at scale {g['scale']} ({g['users']:,} users, {g['interactions']:,} interactions): "
            f"{g['seconds']:.1f} s, peak RSS {g['peak_rss_mib']:.0f} MiB, top-10% item share {g['top10_share']:.3f}; "
            f"{g['over_peer']:.1f} x the peer (uniform distinct pairs with numpy, "
            f"{g['peer_uniform_pairs_seconds']:.2f} s)",
            "",
        ]
    )
    C.write_text(C.RESULTS / f"{stem}.md", md)
    if not args.quiet:
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
