"""Every stage around the sweep, bounded in memory and time (issue 44): ``privrec fit --evaluate`` on
wide catalogues and large rosters, each run in its own subprocess.

For every dataset (default: ``wide-catalogue``, ``msd-like``, ``ml20m-like``) three command lines
run one after the other, each in a fresh ``privrec`` process:

1. ``privrec fit --epsilon 5 --output M.npz`` -- the private fit alone (the default model, no
   evaluation): the reference wall time;
2. ``privrec fit --epsilon 5 --evaluate --compare-als`` -- the same fit, evaluated, with every
   yardstick (trivial, popularity, the released noisy counts' popularity, non-private ALS);
3. ``privrec fit --method als --evaluate`` -- the non-private reference fitted and evaluated.

Each child's peak resident set size comes from ``os.wait4`` (the child's own ``ru_maxrss``, not the
maximum over all children) and its wall time from the parent's clock. Printed: peak RSS (target
<= 3 GB) and wall(2) / wall(1), wall(3) / wall(1) (target <= 3x the private fit alone).

    python benchmarks/bench_scale.py                              # all three datasets, full size
    python benchmarks/bench_scale.py --datasets wide-catalogue    # one of them
    python benchmarks/bench_scale.py --quick                      # wide-catalogue at 5% of the users
    python benchmarks/bench_scale.py --out /tmp/scale             # write elsewhere

Writes ``<out>/scale[_quick].json`` (``--out`` defaults to benchmarks/results; the measured figures
and their command lines are kept in ``benchmarks/results/scale.md``). Timings move with other load
on the machine: run it alone.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, environment, log, write_json

DATASETS = ("wide-catalogue", "msd-like", "ml20m-like")
#: targets of issue 44
TARGET_PEAK_GB = 3.0
TARGET_WALL_RATIO = 3.0


def run_child(argv: list[str], env: dict | None = None) -> dict:
    """Run ``argv``; return ``{"argv", "returncode", "wall_s", "peak_rss_gb", "tail"}`` (the child's own
    peak RSS from ``os.wait4``; Linux reports KiB)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = out.read().splitlines()
    scale = 1 << 30 if sys.platform == "darwin" else 1 << 20
    return {
        "command": shlex.join(argv),
        "returncode": proc.returncode,
        "wall_s": round(wall, 2),
        "peak_rss_gb": round(usage.ru_maxrss / scale, 3),
        "tail": lines[-12:],
    }


def commands(dataset: str, epsilon: float, scale: float | None, model_path: str, als: bool) -> dict[str, list[str]]:
    base = [sys.executable, "-m", "privrec.cli", "fit", "--dataset", dataset]  # no TTY: no progress bars
    if scale is not None:
        base += ["--scale", str(scale)]
    private = base + ["--epsilon", str(epsilon)]
    return {
        "private_fit_alone": private + ["--output", model_path],
        "private_fit_evaluate": private + ["--evaluate"] + (["--compare-als"] if als else []),
        "als_evaluate": base + ["--method", "als", "--evaluate"],
    }


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=None, help=f"default: {' '.join(DATASETS)}")
    ap.add_argument("--quick", action="store_true", help="wide-catalogue at 5%% of the users (about a minute)")
    ap.add_argument("--scale", type=float, default=None, help="--scale of the synthetic presets")
    ap.add_argument("--epsilon", type=float, default=5.0)
    ap.add_argument("--no-compare-als", action="store_true", help="leave the ALS yardstick to its default rule")
    ap.add_argument("--runs", nargs="+", default=None, help="subset of the three runs (by name)")
    ap.add_argument("--out", default=str(RESULTS), help="output folder (default benchmarks/results)")
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = _parse(argv)
    datasets = args.datasets or (["wide-catalogue"] if args.quick else list(DATASETS))
    scale = 0.05 if args.quick and args.scale is None else args.scale
    res: dict = {"epsilon": args.epsilon, "scale": scale, "environment": environment(), "datasets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in datasets:
            cmds = commands(name, args.epsilon, scale, str(Path(tmp) / f"{name}.npz"), not args.no_compare_als)
            runs: dict = {}
            for key, argv_ in cmds.items():
                if args.runs and key not in args.runs:
                    continue
                log(f"{name}: {key}: {shlex.join(argv_[1:])}", args.quiet)
                runs[key] = r = run_child(argv_)
                log(
                    f"  -> exit {r['returncode']}, wall {r['wall_s']:.1f} s, peak RSS {r['peak_rss_gb']:.2f} GB",
                    args.quiet,
                )
                if r["returncode"] != 0:
                    log("\n".join(r["tail"]), args.quiet)
            alone = runs.get("private_fit_alone", {}).get("wall_s")
            ratios = {}
            for key in ("private_fit_evaluate", "als_evaluate"):
                if alone and key in runs:
                    ratios[f"{key}_vs_private_fit_alone"] = round(runs[key]["wall_s"] / alone, 2)
            peak = max((r["peak_rss_gb"] for r in runs.values()), default=float("nan"))
            res["datasets"][name] = {
                "runs": runs,
                "ratios": ratios,
                "peak_rss_gb": peak,
                "meets_peak_target": peak <= TARGET_PEAK_GB,
                "meets_wall_target": all(v <= TARGET_WALL_RATIO for v in ratios.values()) if ratios else None,
            }
    res["targets"] = {"peak_rss_gb": TARGET_PEAK_GB, "wall_vs_private_fit_alone": TARGET_WALL_RATIO}
    lines = ["| dataset | run | wall (s) | peak RSS (GB) | wall / private fit alone |", "|---|---|---|---|---|"]
    for name, d in res["datasets"].items():
        for key, r in d["runs"].items():
            ratio = d["ratios"].get(f"{key}_vs_private_fit_alone", 1.0 if key == "private_fit_alone" else None)
            lines.append(
                f"| {name} | {key} | {r['wall_s']:.1f} | {r['peak_rss_gb']:.2f} | "
                + ("" if ratio is None else f"{ratio:.2f}")
                + " |"
            )
    table = "\n".join(lines)
    res["table"] = table
    if not args.quiet:
        print(table)
        print(f"targets: peak RSS <= {TARGET_PEAK_GB} GB, wall <= {TARGET_WALL_RATIO}x the private fit alone")
    write_json(Path(args.out) / ("scale_quick.json" if args.quick else "scale.json"), res)
    return res


if __name__ == "__main__":
    main()
