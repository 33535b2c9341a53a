"""Local vs Dask DP-ALS fit on ``msd-like``: time per sweep, bytes shuffled per sweep, peak memory.

Fits ``DPALS(epsilon=5, feedback="implicit")`` (default configuration: the automatic rule picks
the rank, steps and head for the shape) twice on the same data:

* **local** -- ``DPALS.fit`` on the in-memory ``Interactions`` (this process, all cores);
* **Dask** -- :func:`privrec.distributed.fit` on a ``LocalCluster`` of ``--workers`` worker
  processes (``--threads`` threads each), reading the ratings from partitioned Parquet written to
  a temporary folder (the dataset is generated once, then written; the driver never holds it).

Measured:

* time per ALS sweep (``fit_timings_["steps"]``) and pre-processing, for both;
* bytes shuffled per sweep: everything the workers send (to each other and to the driver: every
  worker's ``transfer_outgoing_log``), attributed to the sweep and stage named in the fit's task
  keys (leaf partials into the summation tree, inner sums, released block solutions, item factors,
  step data), plus the item factors the driver submits once per sweep;
* peak memory: RSS high-water mark of each worker process during the fit (sampled every 20 ms by a
  thread on the worker; also ``ru_maxrss`` since the worker started, which includes partitioning)
  and of this process during the local fit (absolute and above the pre-fit baseline, which holds
  the dataset);
* per-task compute costs from Dask's task stream (user step per partition, leaves, inner sums,
  roots) -- the inputs of ``benchmarks/results/scaling.md``.

``--quick`` runs a small ``msd-like`` (``--scale 0.01``) in well under a minute and checks the Dask
fit against the local fit on the partition-ordered matrix (same ledger, factors to float
tolerance): a correctness smoke test, not a timing. Timings need a quiet machine.

    python benchmarks/bench_distributed.py                   # msd-like, 2 workers (the full run)
    python benchmarks/bench_distributed.py --quick --out /tmp/dist
    python benchmarks/bench_distributed.py --workers 4 --partitions 8 --scale 0.5

Writes ``<out>/distributed[_quick].json`` and ``.md`` (``--out`` defaults to benchmarks/results).
"""

from __future__ import annotations

import argparse
import gc
import re
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, environment, log, write_json, write_text

import privrec
from privrec.data import load_dataset
from privrec.distributed import fit as distributed_fit
from privrec.distributed import partition_interactions
from privrec.models import DPALS

MiB = 2**20


# ---------------------------------------------------------------------- RSS sampling (driver and workers)


class PeakRSS:
    """A thread sampling this process's RSS every ``interval`` seconds; ``peak`` since the last reset."""

    def __init__(self, interval: float = 0.02):
        import psutil

        self._proc = psutil.Process()
        self.interval = interval
        self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="privrec-peak-rss")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def reset(self) -> int:
        now = self._proc.memory_info().rss
        self.peak = now
        return now

    def read(self) -> int:
        self.peak = max(self.peak, self._proc.memory_info().rss)
        return self.peak

    def stop(self) -> None:
        self._stop.set()


def _worker_sampler(dask_worker, action: str):
    """Run on every worker (``client.run``): start / reset / read its :class:`PeakRSS` sampler."""
    import resource

    sampler = getattr(dask_worker, "_privrec_peak_rss", None)
    if action == "start" or sampler is None:
        sampler = dask_worker._privrec_peak_rss = PeakRSS()
    if action == "reset":
        return sampler.reset()
    return {"peak_rss": sampler.read(), "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _transfer_log(dask_worker):
    """Bytes sent by this worker, per task key (``transfer_outgoing_log``)."""
    out: dict[str, int] = {}
    for entry in list(dask_worker.transfer_outgoing_log):
        for key, nbytes in entry["keys"].items():
            out[str(key)] = out.get(str(key), 0) + int(nbytes)
    return out


# ---------------------------------------------------------------------- attribution of keys to sweeps and stages


def key_stage(key: str) -> tuple[int | None, str]:
    """``(sweep, stage)`` of a task key of :func:`privrec.distributed.fit` (``None``: pre-processing)."""
    if "-reduce-" in key:
        step = int(re.search(r"-reduce-(\d+)", key).group(1))
        kind = "leaf" if "-leaf-" in key else "sum" if "-sum" in key else "root" if key.endswith("-root") else "reduce"
        return step, kind
    m = re.search(r"-(user|items|spend|gram)-(\d+)", key) or re.search(r"-(gram-sum)-(\d+)", key)
    if m:
        return int(m.group(2)), "user-step" if m.group(1) == "user" else m.group(1)
    return None, "preprocess"


def task_costs(stream: list) -> dict[str, list[float]]:
    """Compute seconds per task kind of the fit's sweeps (Dask task stream, no scheduler wait)."""
    out: dict[str, list[float]] = {}
    for rec in stream:
        step, kind = key_stage(str(rec["key"]))
        if step is None:
            continue
        secs = sum(s["stop"] - s["start"] for s in rec["startstops"] if s["action"] == "compute")
        out.setdefault(kind, []).append(secs)
    return out


def summary(values: list[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"n": int(v.size), "median_s": float(np.median(v)), "max_s": float(v.max()), "total_s": float(v.sum())}


# ---------------------------------------------------------------------- the runs


def write_parquet(inter, folder: Path, n_files: int) -> int:
    """The ratings as ``n_files`` Parquet files (user, item, rating), row chunks in user-major order."""
    df = inter.to_pandas().rename(columns={"user_id": "user", "item_id": "item", "value": "rating"})
    folder.mkdir(parents=True, exist_ok=True)
    for i, chunk in enumerate(np.array_split(np.arange(len(df)), n_files)):
        df.iloc[chunk].to_parquet(folder / f"part-{i:03d}.parquet", index=False)
    n = len(df)
    del df
    return n


def run_local(inter, seed) -> dict:
    gc.collect()
    rss = PeakRSS()
    base = rss.reset()
    t0 = time.perf_counter()
    model = DPALS(epsilon=5.0, feedback="implicit", random_state=seed).fit(inter, show_progress=False)
    wall = time.perf_counter() - t0
    peak = rss.read()
    rss.stop()
    return {
        "model": model,
        "wall_s": wall,
        "preprocess_s": model.fit_timings_["preprocess"],
        "steps_s": list(model.fit_timings_["steps"]),
        "projection_s": model.fit_timings_["projection"],
        "baseline_rss": base,
        "peak_rss": peak,
    }


def run_dask(parquet: Path, items, args, seed) -> dict:
    from distributed import Client, LocalCluster, get_task_stream

    res: dict = {}
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=args.threads,
            processes=True,
            dashboard_address=None,
            silence_logs=40,
            memory_limit=0,  # no spilling / pausing: measure what the fit needs
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: [__import__(m) for m in ("privrec.distributed", "privrec.models", "privrec.solvers.ssp")])
        client.run(_worker_sampler, action="start")
        t0 = time.perf_counter()
        # the preset's item catalogue is public: the same item axis as the local fit (no data-derived vocabulary)
        parts = partition_interactions(str(parquet), n_partitions=args.partitions, items=items, client=client)
        res["partition_s"] = time.perf_counter() - t0
        res["partitions"] = {"n": parts.n_partitions, "users": parts.partition_sizes.tolist()}
        res["partition_nnz"] = parts.partition_nnz.tolist()
        after_partition = client.run(_worker_sampler, action="read")
        client.run(_worker_sampler, action="reset")
        log(f"partitioned in {res['partition_s']:.1f}s: {parts}")
        t0 = time.perf_counter()
        with get_task_stream(client) as ts:
            model = distributed_fit(
                DPALS(epsilon=5.0, feedback="implicit", random_state=seed),
                parts,
                client=client,
                fan_in=args.fan_in,
                block_tasks=args.block_tasks,
            )
        res["wall_s"] = time.perf_counter() - t0
        res["model"] = model
        res["preprocess_s"] = model.fit_timings_["preprocess"]
        res["steps_s"] = list(model.fit_timings_["steps"])
        peaks = client.run(_worker_sampler, action="read")
        res["workers"] = {
            addr: {
                "peak_rss_fit": peaks[addr]["peak_rss"],
                "peak_rss_partition": after_partition[addr]["peak_rss"],
                "ru_maxrss": peaks[addr]["ru_maxrss"],
            }
            for addr in peaks
        }
        sent = client.run(_transfer_log)
        per_step: dict[int, dict[str, int]] = {}
        for log_ in sent.values():
            for key, nbytes in log_.items():
                step, stage = key_stage(key)
                if step is None:
                    stage, step = "preprocess", 0
                per_step.setdefault(step, {}).setdefault(stage, 0)
                per_step[step][stage] += nbytes
        res["transfer_bytes"] = per_step
        res["task_costs"] = {k: summary(v) for k, v in task_costs(ts.data).items()}
        if args.check:
            res["check"] = check_equal(model, parts, seed)
        parts.release()
    return res


def check_equal(dist, parts, seed) -> dict:
    """The local fit on the partition-ordered matrix: the same ledger, factors to float tolerance."""
    local = DPALS(epsilon=5.0, feedback="implicit", random_state=seed).fit(parts.to_local(), show_progress=False)
    diff = float(np.abs(dist.item_factors_.astype(np.float64) - local.item_factors_).max(initial=0.0))
    scale = float(np.abs(local.item_factors_).max(initial=0.0))
    same_ledger = [(e.label, e.event) for e in dist.ledger_.entries] == [
        (e.label, e.event) for e in local.ledger_.entries
    ]
    out = {
        "max_abs_diff": diff,
        "scale": scale,
        "same_ledger": same_ledger,
        "same_epsilon": dist.privacy_report()["epsilon"] == local.privacy_report()["epsilon"],
    }
    if not (same_ledger and out["same_epsilon"] and diff <= 1e-4 * max(1.0, scale)):
        raise AssertionError(f"distributed fit differs from the local fit: {out}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="msd-like")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the preset's users (items kept)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per worker")
    ap.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="user partitions (default: 4 per worker: smaller per-task temporaries)",
    )
    ap.add_argument("--fan-in", type=int, default=8)
    ap.add_argument("--block-tasks", type=int, default=1024)
    ap.add_argument("--parquet-files", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0, help="noise seed of both fits (a benchmark, not a release)")
    ap.add_argument("--check", action="store_true", help="also compare with the local fit on the partition order")
    ap.add_argument("--quick", action="store_true", help="msd-like at scale 0.01, with --check (smoke test)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.scale, args.check, args.parquet_files = min(args.scale, 0.01), True, 4

    args.partitions = args.partitions or 4 * args.workers
    res: dict = {
        "environment": environment(),
        "privrec": privrec.__version__,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    t0 = time.perf_counter()
    inter = load_dataset(args.dataset, scale=args.scale)
    res["generate_s"] = time.perf_counter() - t0
    res["shape"] = {"users": inter.n_users, "items": inter.n_items, "nnz": inter.nnz}
    log(f"{args.dataset} x {args.scale}: {inter} in {res['generate_s']:.1f}s")
    with tempfile.TemporaryDirectory(prefix="privrec-bench-dist-") as tmp:
        folder = Path(tmp) / "ratings"
        t0 = time.perf_counter()
        write_parquet(inter, folder, args.parquet_files)
        res["parquet_s"] = time.perf_counter() - t0
        res["parquet_bytes"] = sum(p.stat().st_size for p in folder.iterdir())
        log(f"parquet: {res['parquet_bytes'] / MiB:.0f} MiB in {res['parquet_s']:.1f}s")

        log("local fit")
        local = run_local(inter, args.seed)
        items = np.asarray(inter.item_ids)
        del inter
        gc.collect()
        log(f"local: {local['wall_s']:.1f}s, steps {np.round(local['steps_s'], 2).tolist()}")
        log("Dask fit")
        dask = run_dask(folder, items, args, args.seed)
        log(f"Dask: {dask['wall_s']:.1f}s, steps {np.round(dask['steps_s'], 2).tolist()}")

    cfg = local["model"].config_
    res["fit_config"] = {"method": local["model"].method, **{k: cfg[k] for k in ("factors", "iterations", "item_frac")}}
    res["trained_items"] = int(local["model"].trained_items_.size)
    res["local"] = {k: v for k, v in local.items() if k != "model"}
    res["dask"] = {k: v for k, v in dask.items() if k != "model"}
    n_steps = len(local["steps_s"])
    sweep_local = float(np.mean(local["steps_s"])) if n_steps else float("nan")
    sweep_dask = float(np.mean(dask["steps_s"])) if dask["steps_s"] else float("nan")
    worker_peak = max(w["peak_rss_fit"] for w in dask["workers"].values())
    steps_bytes = {s: sum(v.values()) for s, v in dask["transfer_bytes"].items() if s}
    m, d = res["trained_items"], int(cfg["factors"])
    driver_bytes = 2 * m * d * 4  # item factors out to the workers, released block solutions back
    res["ratios"] = {
        "sweep_dask_over_local": sweep_dask / sweep_local,
        "worker_peak_over_local_peak": worker_peak / local["peak_rss"],
        "worker_peak_over_local_increase": worker_peak / max(1, local["peak_rss"] - local["baseline_rss"]),
    }
    res["bytes_per_sweep"] = {
        "worker_to_worker": float(np.mean(list(steps_bytes.values()))) if steps_bytes else 0.0,
        "driver": driver_bytes,
    }

    name = "distributed_quick" if args.quick else "distributed"
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"{name}.json", res)
    lines = [
        f"# Local vs Dask DP-ALS fit ({name})",
        "",
        f"{args.dataset} at scale {args.scale}: {res['shape']['users']:,} users x {res['shape']['items']:,} items, "
        f"{res['shape']['nnz']:,} interactions. `DPALS(epsilon=5, feedback='implicit')`, automatic configuration: "
        f"{res['fit_config']}, {res['trained_items']:,} trained items. Dask: {args.workers} worker processes x "
        f"{args.threads} thread(s), {dask['partitions']['n']} user partitions, fan-in {args.fan_in}, "
        f"{args.block_tasks} item tasks per reduction block; local: this process, all cores. "
        f"{environment()['cpus']} CPUs.",
        "",
        "| | local | Dask | Dask / local |",
        "|---|---|---|---|",
        f"| pre-processing (s) | {local['preprocess_s']:.2f} | {dask['preprocess_s']:.2f} | "
        f"{dask['preprocess_s'] / local['preprocess_s']:.2f} |",
        f"| time per sweep (s, mean of {n_steps}) | {sweep_local:.2f} | {sweep_dask:.2f} | "
        f"{res['ratios']['sweep_dask_over_local']:.2f} |",
        f"| whole fit (s, wall) | {local['wall_s']:.2f} | {dask['wall_s']:.2f} | "
        f"{dask['wall_s'] / local['wall_s']:.2f} |",
        f"| peak RSS (MiB): local process / largest worker | {local['peak_rss'] / MiB:.0f} | "
        f"{worker_peak / MiB:.0f} | {res['ratios']['worker_peak_over_local_peak']:.2f} |",
        f"| local RSS above its baseline with the data loaded (MiB) | "
        f"{(local['peak_rss'] - local['baseline_rss']) / MiB:.0f} | - | - |",
        "",
        f"Partitioning (Parquet -> CSR blocks on the workers): {dask['partition_s']:.1f} s wall "
        f"(not part of the fit); Parquet written once: {res['parquet_bytes'] / MiB:.0f} MiB.",
        "",
        "Bytes shuffled per sweep (MiB sent by the workers, to other workers or to the driver, by the stage of "
        "the task whose result was sent; from the workers' `transfer_outgoing_log`. `leaf`: partial statistics "
        "into the summation tree, `sum`: inner sums, `root`: released block solutions gathered by the driver, "
        "`items`: the item factors fetched by the workers that did not compute them, `user-step`: step data that "
        f"had to move). The driver also sends the item factors once per sweep ({driver_bytes / 2 / MiB:.2f} MiB):",
        "",
        "| sweep | " + " | ".join(("user-step", "items", "leaf", "sum", "root", "spend", "gram", "total")) + " |",
        "|---|" + "---|" * 8,
    ]
    for step in sorted(s for s in dask["transfer_bytes"] if s):
        row = dask["transfer_bytes"][step]
        cells = [row.get(k, 0) / MiB for k in ("user-step", "items", "leaf", "sum", "root", "spend", "gram")]
        lines.append(f"| {step} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {sum(row.values()) / MiB:.2f} |")
    lines += [
        "",
        "Peak RSS per worker (MiB): "
        + ", ".join(
            f"{a.split(':')[-1]}: fit {w['peak_rss_fit'] / MiB:.0f}, partitioning {w['peak_rss_partition'] / MiB:.0f}, "
            f"process max {w['ru_maxrss'] / MiB:.0f}"
            for a, w in dask["workers"].items()
        ),
        "",
        "Per-task compute (Dask task stream, all sweeps):",
        "",
        "| task | n | median s | max s | total s |",
        "|---|---|---|---|---|",
    ]
    for kind, s in sorted(dask["task_costs"].items()):
        lines.append(f"| {kind} | {s['n']} | {s['median_s']:.4f} | {s['max_s']:.4f} | {s['total_s']:.3f} |")
    if "check" in dask:
        c = dask["check"]
        lines += [
            "",
            f"Check against the local fit on the partition-ordered matrix: max |diff| of the item factors "
            f"{c['max_abs_diff']:.2e} (scale {c['scale']:.2f}), same ledger {c['same_ledger']}, same epsilon "
            f"{c['same_epsilon']}.",
        ]
    write_text(args.out / f"{name}.md", "\n".join(lines) + "\n")
    log(f"wrote {args.out / name}.json / .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
