"""Cost of the SSP item step's PSD projection: every LAPACK route to a noisy Gramian's eigensystem.

Spec 004 §2 projects every item's noisy d x d Gramian onto the PSD cone; at eps = 5 essentially
all of them have negative eigenvalues, so each needs an eigendecomposition (``item_projection=
"eigen"``), unless the eigenvalue shift replaces it (``"shift"``, the default: one Cholesky solve,
timed last). This times, on one
thread, the per-matrix cost of the tridiagonal reduction (``ssytrd``) and of each LAPACK solver of
the tridiagonal eigensystem (``sstevd`` -- the one privrec uses --, ``sstemr``, ``sstebz`` +
``sstein``, ``sstev``, ``dstevd``, eigenvalues only ``ssterf``), the dense ``ssyevd`` and numpy's
``eigh``, and privrec's whole projected ridge solve. Gramians are shaped like ada-dpals' at
eps = 5 (a rank-50 Gramian of clipped rows plus symmetric noise, about half the eigenvalues
negative), as in ``bench_speed.projection_seconds_per_task``.

    python benchmarks/bench_projection.py            # d = 65 (64 factors + bias), 256 matrices
    python benchmarks/bench_projection.py --quick    # d = 17, 64 matrices

Outputs ``<out>/projection[_quick].json`` and ``.md``. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.linalg import lapack

try:
    from . import _common as C
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as C  # type: ignore


def noisy_gramians(n: int, d: int, seed: int = 0) -> np.ndarray:
    """n noisy d x d Gramians like ada-dpals' at eps = 5 (float32)."""
    from privrec.privacy.mechanisms import add_symmetric_gaussian_noise

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 50, d)).astype(np.float32)
    x *= np.float32(0.7) / np.linalg.norm(x, axis=2, keepdims=True)
    G = np.matmul(x.transpose(0, 2, 1), x)
    add_symmetric_gaussian_noise(G, 7.0, rng)
    return G


def _best_us(fn, n: int, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6


def routes(G: np.ndarray) -> dict:
    """name -> zero-argument callable running that route over every matrix of ``G``."""
    from privrec.solvers._linalg import _sytrd_lwork, noise_edge, projected_ridge_solve, shifted_solve

    n, d = G.shape[0], G.shape[-1]
    lw = _sytrd_lwork(d)
    tri = [lapack.ssytrd(G[i], lower=1, lwork=lw)[1:3] for i in range(n)]
    tri64 = [(a.astype(np.float64), e.astype(np.float64)) for a, e in tri]
    b = np.random.default_rng(1).standard_normal((n, d)).astype(np.float32)
    return {
        "ssytrd (tridiagonal reduction)": lambda: [lapack.ssytrd(G[i], lower=1, lwork=lw) for i in range(n)],
        "sstevd (divide and conquer; used)": lambda: [lapack.sstevd(a, e) for a, e in tri],
        "sstemr (MRRR)": lambda: [lapack.sstemr(a, np.append(e, 0), 0, 0.0, 0.0, 1, a.size) for a, e in tri],
        "sstebz + sstein (bisection + inverse iteration)": lambda: [_stebz_stein(a, e) for a, e in tri],
        "sstev (implicit QL)": lambda: [lapack.sstev(a, e) for a, e in tri],
        "dstevd (double precision)": lambda: [lapack.dstevd(a, e) for a, e in tri64],
        "ssterf (eigenvalues only)": lambda: [lapack.ssterf(a, e) for a, e in tri],
        "ssyevd (dense)": lambda: [lapack.ssyevd(G[i]) for i in range(n)],
        "numpy eigh (dense, batched)": lambda: np.linalg.eigh(G),
        "privrec projected_ridge_solve (whole solve; item_projection='eigen')": lambda: projected_ridge_solve(
            G, b, 40.0
        ),
        "privrec shifted_solve (whole solve; item_projection='shift', the default)": lambda: shifted_solve(
            G, b, 40.0, noise_edge(7.0, d)
        ),
    }


def _stebz_stein(a, e):
    m, w, iblock, isplit, _ = lapack.sstebz(a, e, 0, 0.0, 0.0, 1, a.size, 0.0, b"B")
    return lapack.sstein(a, e, w[:m], iblock, isplit)


def main(argv=None) -> dict:
    from threadpoolctl import threadpool_limits

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=None, help="d (default 65; quick 17)")
    ap.add_argument("--matrices", type=int, default=None, help="matrices timed (default 256; quick 64)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(C.RESULTS))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    d = args.dim or (17 if args.quick else 65)
    n = args.matrices or (64 if args.quick else 256)
    G = noisy_gramians(n, d)
    negative = float(np.mean(np.linalg.eigvalsh(G)[:, 0] < 0))
    with threadpool_limits(limits=1):
        timings = {name: _best_us(fn, n, args.repeats) for name, fn in routes(G).items()}
    res = {"environment": C.environment(), "dim": d, "matrices": n, "share_with_negative_eigenvalues": negative}
    res["microseconds_per_matrix"] = timings
    name = "projection_quick" if args.quick else "projection"
    C.write_json(Path(args.out) / f"{name}.json", res)
    lines = [
        f"# {name}\n",
        f"One thread, {n} noisy {d} x {d} float32 Gramians shaped like ada-dpals' at eps = 5 "
        f"({negative:.0%} have negative eigenvalues). Best of {args.repeats}.\n",
        "| route | us per matrix |",
        "|---|---|",
        *(f"| {k} | {v:.1f} |" for k, v in timings.items()),
        "",
        "privrec's projected solve = ssytrd + sstevd + reflectors applied to vectors only; its shifted solve = one "
        "Cholesky solve (sposv) of the Gramian raised by the noise's spectral edge; see docs/performance.md.\n",
    ]
    C.write_text(Path(args.out) / f"{name}.md", "\n".join(lines))
    C.log("\n".join(lines), args.quiet)
    return res


if __name__ == "__main__":  # pragma: no cover
    main()
