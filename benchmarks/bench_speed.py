"""Speed of privrec's ALS and ada-DPALS sweeps against implicit's ALS, measured in one process.

Issue 4 "Done when" (spec 004 §7-§8 scale): on ``ml20m-like`` with factors = 64, float32 and
2 threads, one non-private ALS sweep <= 2.0x one ``implicit`` ALS iteration, one ada-DPALS
(SSP) sweep <= 3.0x, peak RSS <= 3 GB; also the achieved GFLOP/s of the Gramian step next to a
float32 GEMM measured in the same process.

    python benchmarks/bench_speed.py            # full: ml20m-like, factors 64 (a few minutes)
    python benchmarks/bench_speed.py --quick    # seconds: small preset (smoke test)

Writes ``benchmarks/results/bench_speed[_quick].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys

# thread counts must be fixed before numpy / BLAS load
_threads = "2"
for i, a in enumerate(sys.argv):
    if a == "--threads" and i + 1 < len(sys.argv):
        _threads = sys.argv[i + 1]
    elif a.startswith("--threads="):
        _threads = a.split("=", 1)[1]
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = _threads

import resource  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import numpy as np  # noqa: E402

from _common import RESULTS, environment, log, write_json, write_text  # noqa: E402
from privrec.data import load_dataset  # noqa: E402
from privrec.models import ALS, DPALS  # noqa: E402
from privrec.models._solve import _blas_single_thread, gather_padded, row_chunks  # noqa: E402


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def time_implicit_iteration(R, factors: int, threads: int, seed: int = 0) -> float:
    """Seconds of one implicit ALS iteration (fit with iterations=1; default CG solver)."""
    from implicit.cpu.als import AlternatingLeastSquares

    with _blas_single_thread():
        model = AlternatingLeastSquares(factors=factors, iterations=1, num_threads=threads, random_state=seed,
                                        dtype=np.float32)
        t = time.perf_counter()
        model.fit(R, show_progress=False)
        return time.perf_counter() - t


def time_als_sweep(R, factors: int, threads: int, solver: str) -> tuple[float, float]:
    """(seconds of one ALS sweep, seconds of setup+sweep) for privrec.ALS with ``solver``."""
    m = ALS(factors=factors, iterations=0, solver=solver, num_threads=threads, random_state=0)
    t = time.perf_counter()
    m.fit(R)
    setup = time.perf_counter() - t
    m.set_params(iterations=1)
    t = time.perf_counter()
    m.fit(R)
    total = time.perf_counter() - t
    return total - setup, total


def gramian_gflops(R, factors: int, threads: int, seed: int = 0) -> dict:
    """Achieved GFLOP/s of the user-step Gramian stage (gather + batched X^T X), useful FLOPs only."""
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((R.shape[1], factors)).astype(np.float32)
    F_ext = np.vstack([F, np.zeros((1, factors), np.float32)])
    counts = np.diff(R.indptr)

    def work(chunk):
        rows, length = chunk
        X, _ = gather_padded(R.indptr, R.indices, R.data, rows, length, F_ext)
        np.matmul(X.transpose(0, 2, 1), X)

    with _blas_single_thread():  # warm-up: BLAS library discovery is not part of the step
        work(next(iter(row_chunks(counts))))
    t = time.perf_counter()
    with _blas_single_thread(), ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, row_chunks(counts)))
    sec = time.perf_counter() - t
    flops = 2.0 * R.nnz * factors * factors
    return {"seconds": sec, "gflop": flops / 1e9, "gflops": flops / sec / 1e9}


def gemm_gflops(n: int = 2048, repeats: int = 3) -> float:
    """float32 GEMM throughput with the process's BLAS threads (best of ``repeats``)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2.0 * n**3 / best / 1e9


def main(argv=None) -> dict:
    from threadpoolctl import threadpool_limits

    args_threads = _parse(argv).threads
    # the environment variables above only act when this file is the program; when it is imported
    # (``privrec benchmark speed``) BLAS is already loaded, so limit its threads explicitly too
    with threadpool_limits(limits=args_threads, user_api="blas"):
        return _run(argv)


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small preset, seconds")
    ap.add_argument("--preset", default=None, help="dataset name (default ml20m-like; quick: synthetic-skew)")
    ap.add_argument("--factors", type=int, default=None)
    ap.add_argument("--threads", type=int, default=int(_threads))
    ap.add_argument("--epsilon", type=float, default=5.0)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


def _run(argv) -> dict:
    args = _parse(argv)
    preset = args.preset or ("synthetic-skew" if args.quick else "ml20m-like")
    factors = args.factors or (16 if args.quick else 64)
    threads = args.threads

    log(f"generating {preset}", args.quiet)
    t = time.perf_counter()
    R = load_dataset(preset, random_state=0).matrix.tocsr().astype(np.float32)
    gen_s = time.perf_counter() - t
    log(f"{R.shape[0]:,} x {R.shape[1]:,}, nnz {R.nnz:,} in {gen_s:.1f} s; rss {peak_rss_gb():.2f} GB", args.quiet)

    res = {"preset": preset, "factors": factors, "threads": threads, "n_users": R.shape[0], "n_items": R.shape[1],
           "nnz": int(R.nnz), "quick": bool(args.quick), "environment": environment()}
    res["gemm_gflops"] = gemm_gflops(1024 if args.quick else 2048)
    res["gramian"] = gramian_gflops(R, factors, threads)
    log(f"Gramian step {res['gramian']['gflops']:.1f} GFLOP/s vs GEMM {res['gemm_gflops']:.1f}", args.quiet)

    res["implicit_iteration_s"] = time_implicit_iteration(R, factors, threads)
    log(f"implicit iteration {res['implicit_iteration_s']:.2f} s", args.quiet)
    als_exact, _ = time_als_sweep(R, factors, threads, "cholesky")
    als_cg, _ = time_als_sweep(R, factors, threads, "cg")
    res["als_sweep_exact_s"], res["als_sweep_cg_s"] = als_exact, als_cg
    log(f"ALS sweep: exact {als_exact:.2f} s, cg {als_cg:.2f} s", args.quiet)

    dp = DPALS(method="ada-dpals", epsilon=args.epsilon, delta=1e-5, factors=factors, iterations=1, budget=100,
               center=False, rating_bound=5.0, num_threads=threads, random_state=0)
    t = time.perf_counter()
    dp.fit(R)
    res["dpals_fit_s"] = time.perf_counter() - t
    res["dpals_sweep_s"] = float(dp.fit_timings_["steps"][0])
    res["dpals_preprocess_s"] = float(dp.fit_timings_["preprocess"])
    res["dpals_epsilon"] = dp.privacy_report()["epsilon"]
    log(f"ada-dpals sweep {res['dpals_sweep_s']:.2f} s (preprocess {res['dpals_preprocess_s']:.2f} s)", args.quiet)

    imp = res["implicit_iteration_s"]
    res["ratio_als_exact_vs_implicit"] = als_exact / imp
    res["ratio_als_cg_vs_implicit"] = als_cg / imp
    res["ratio_dpals_vs_implicit"] = res["dpals_sweep_s"] / imp
    res["gramian_vs_gemm"] = res["gramian"]["gflops"] / res["gemm_gflops"]
    res["peak_rss_gb"] = peak_rss_gb()
    res["targets"] = {"ratio_als_vs_implicit": 2.0, "ratio_dpals_vs_implicit": 3.0, "peak_rss_gb": 3.0}

    name = "bench_speed_quick" if args.quick else "bench_speed"
    out = RESULTS if args.out == str(RESULTS) else __import__("pathlib").Path(args.out)
    write_json(out / f"{name}.json", res)
    md = (
        f"# {name}\n\n{preset}: {R.shape[0]:,} x {R.shape[1]:,}, nnz {R.nnz:,}; factors {factors}, float32, "
        f"{threads} threads, cpus {os.cpu_count()}\n\n"
        f"| measure | seconds | x implicit iteration | target |\n|---|---|---|---|\n"
        f"| implicit ALS iteration (CG) | {imp:.2f} | 1.00 | |\n"
        f"| privrec ALS sweep, exact (batched direct solves) | {als_exact:.2f} | {res['ratio_als_exact_vs_implicit']:.2f} | <= 2.0 |\n"
        f"| privrec ALS sweep, CG (3 steps) | {als_cg:.2f} | {res['ratio_als_cg_vs_implicit']:.2f} | <= 2.0 |\n"
        f"| ada-dpals sweep (SSP) | {res['dpals_sweep_s']:.2f} | {res['ratio_dpals_vs_implicit']:.2f} | <= 3.0 |\n\n"
        f"Gramian step {res['gramian']['gflops']:.1f} GFLOP/s vs float32 GEMM {res['gemm_gflops']:.1f} GFLOP/s "
        f"({res['gramian_vs_gemm']:.2f}x); peak RSS {res['peak_rss_gb']:.2f} GB (target <= 3); "
        f"ada-dpals eps={res['dpals_epsilon']:.3g}, pre-processing {res['dpals_preprocess_s']:.2f} s\n"
    )
    write_text(out / f"{name}.md", md)
    if not args.quiet:
        print(md)
    return res


if __name__ == "__main__":
    main()
