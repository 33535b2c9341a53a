"""Batched statistics and linear algebra for the solvers (spec 004 §2): chunked Gramians,
PSD projection, pinv-style solves. float32 by default, memory bounded by task chunks."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from scipy.linalg import lapack

try:  # threadpoolctl ships with scikit-learn (a privrec dependency)
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - degrade to the BLAS default threading
    threadpool_limits = None

from ..privacy.clipping import clip_labels, clip_rows
from .batch import TaskBatch

DEFAULT_CHUNK_TASKS = 2048
DEFAULT_CHUNK_EXAMPLES = 1 << 18


def task_chunks(indptr: np.ndarray, chunk_tasks: int = DEFAULT_CHUNK_TASKS, chunk_examples: int = DEFAULT_CHUNK_EXAMPLES):
    """Contiguous task ranges [t0, t1) with at most ``chunk_tasks`` tasks and, unless a single task
    is larger, at most ``chunk_examples`` examples (bounds the gathered (examples, d) block)."""
    m = indptr.size - 1
    t0 = 0
    while t0 < m:
        limit = indptr[t0] + chunk_examples
        t1 = int(np.searchsorted(indptr, limit, side="right")) - 1
        t1 = min(max(t1, t0 + 1), t0 + chunk_tasks, m)
        yield t0, t1
        t0 = t1


@contextmanager
def single_threaded_blas():
    """Run many small BLAS/LAPACK calls with one BLAS thread each.

    Small (d x d) products and factorisations lose badly to thread hand-offs (10-100x measured on
    a loaded 2-core machine); parallelism comes from :func:`map_chunks` instead.
    """
    if threadpool_limits is None:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def check_execution(chunk_tasks, chunk_examples, n_jobs) -> None:
    """ValueError unless chunk sizes are integers >= 1 and n_jobs is None or a non-zero integer."""
    from .._validation import check_int

    check_int(chunk_tasks, "chunk_tasks", minimum=1)
    check_int(chunk_examples, "chunk_examples", minimum=1)
    if n_jobs is not None and (check_int(n_jobs, "n_jobs") == 0):
        raise ValueError("n_jobs must be None, a positive count, or negative (all cores but |n_jobs| - 1)")


def resolve_jobs(n_jobs) -> int:
    if n_jobs is None or n_jobs == 0:
        return max(1, min(os.cpu_count() or 1, 8))
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return int(n_jobs)


def map_chunks(fn, chunks: list, n_jobs) -> list:
    """``[fn(i, chunk) for i, chunk in enumerate(chunks)]`` on a thread pool (numpy releases the GIL
    in BLAS/LAPACK), with single-threaded BLAS; results in order. Memory: n_jobs chunks in flight."""
    jobs = min(resolve_jobs(n_jobs), max(1, len(chunks)))
    try:
        with single_threaded_blas():
            if jobs == 1:
                return [fn(i, c) for i, c in enumerate(chunks)]
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                return list(pool.map(lambda ic: fn(*ic), enumerate(chunks)))
    finally:
        _local.__dict__.pop("buf", None)  # release this thread's gather buffer


def positive_definite_mask(M: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Per matrix: is M - floor I positive definite? (one LAPACK potrf each; no exception)."""
    potrf = lapack.spotrf if M.dtype == np.float32 else lapack.dpotrf
    eye = np.eye(M.shape[-1], dtype=M.dtype) * M.dtype.type(floor)
    ok = np.empty(M.shape[0], dtype=bool)
    for i in range(M.shape[0]):
        ok[i] = potrf(M[i] - eye if floor else M[i], lower=1, clean=0, overwrite_a=0)[1] == 0
    return ok


def prepared_inputs(batch: TaskBatch, max_norm, label_bound, dtype):
    """Clipped features (units, d) and clipped labels, cast to ``dtype`` (spec 004 §2 step 1)."""
    x = np.asarray(batch.features, dtype=dtype)
    if max_norm is not None:
        x = clip_rows(x, max_norm)
    y = np.asarray(batch.labels, dtype=dtype)
    if label_bound is not None:
        y = clip_labels(y, label_bound).astype(dtype, copy=False)
    return x, y


_local = threading.local()


def _gather_buffer(n: int, d: int, dtype) -> np.ndarray:
    """A per-thread reusable (n, d) buffer: avoids re-faulting fresh pages for every chunk."""
    buf = getattr(_local, "buf", None)
    need = n * d
    if buf is None or buf.dtype != dtype or buf.size < need:
        buf = np.empty(max(need, 1), dtype=dtype)
        _local.buf = buf
    return buf[:need].reshape(n, d)


def chunk_statistics(batch: TaskBatch, x: np.ndarray, y: np.ndarray, t0: int, t1: int):
    """Weighted Gramians sum_e w_e x_e x_e^T and RHS sum_e w_e y_e x_e for tasks [t0, t1).

    Gathers the chunk's rows once, scaled by sqrt(w), then one BLAS product per task
    (``Xs.T @ Xs``: symmetric rank-k update, FLOPs ~ n_i d^2). Never materialises (nnz, d, d).
    """
    d = x.shape[1]
    indptr = batch.indptr
    e0, e1 = int(indptr[t0]), int(indptr[t1])
    sw = np.sqrt(batch.weights[e0:e1].astype(x.dtype, copy=False))
    xs = _gather_buffer(e1 - e0, d, x.dtype)
    np.take(x, batch.feature_ids[e0:e1], axis=0, out=xs, mode="clip")  # ids validated by TaskBatch; "clip" avoids a buffered copy
    xs *= sw[:, None]
    ys = y[e0:e1] * sw
    G = np.zeros((t1 - t0, d, d), dtype=x.dtype)
    b = np.zeros((t1 - t0, d), dtype=x.dtype)
    offs = indptr[t0 : t1 + 1] - e0
    for i in np.flatnonzero(np.diff(offs)):
        s, e = offs[i], offs[i + 1]
        blk = xs[s:e]
        np.matmul(blk.T, blk, out=G[i])
        np.matmul(ys[s:e], blk, out=b[i])
    return G, b


def weighted_statistics(batch: TaskBatch, max_norm=None, label_bound=None, dtype=np.float64,
                        chunk_tasks: int = DEFAULT_CHUNK_TASKS, chunk_examples: int = DEFAULT_CHUNK_EXAMPLES):
    """All tasks' clipped weighted statistics before noise: Gramians (m, d, d) and RHS (m, d).

    These are exactly what SSP perturbs (spec 004 §2); exposed for sensitivity tests and audits.
    """
    x, y = prepared_inputs(batch, max_norm, label_bound, dtype)
    G = np.empty((batch.n_tasks, batch.dim, batch.dim), dtype=dtype)
    b = np.empty((batch.n_tasks, batch.dim), dtype=dtype)
    with single_threaded_blas():
        for t0, t1 in task_chunks(batch.indptr, chunk_tasks, chunk_examples):
            G[t0:t1], b[t0:t1] = chunk_statistics(batch, x, y, t0, t1)
    return G, b


def global_gramian(x: np.ndarray) -> np.ndarray:
    """sum over units of x_u x_u^T (the gravity / unobserved-weight term, spec 004 §6)."""
    return x.T @ x


def noisy_global_gramian(x: np.ndarray, std: float, weight: float, rng, dtype) -> np.ndarray:
    """weight * PSD(sum_u x_u x_u^T + symmetric N(0, std^2)): the released gravity term (spec 004 §6)."""
    from ..privacy import symmetric_gaussian_noise

    g0 = global_gramian(x) + symmetric_gaussian_noise((), x.shape[1], std, rng, dtype)
    return psd_project(g0) * np.dtype(dtype).type(weight)


def add_symmetric_noise(G: np.ndarray, std: float, rng) -> None:
    """In place ``G += symmetric_gaussian_noise(G.shape[:-2], d, std, rng, G.dtype)``, same draws.

    Draws exactly what :func:`privrec.privacy.symmetric_gaussian_noise` draws (the iid upper
    triangle, row by row, in ``G``'s noise precision) from the same generator, so a seeded run is
    bit-identical; it only skips materialising the (m, d, d) noise stack and its two fancy-index
    scatters (about 3x faster on the SSP item step). Noise distribution and sensitivities are
    unchanged (spec 004 §2, Algorithm 1 step 2).
    """
    if std == 0:
        return
    d = G.shape[-1]
    noise_dtype = np.float64 if G.dtype == np.float64 else np.float32
    upper = rng.standard_normal((*G.shape[:-2], d * (d + 1) // 2), dtype=noise_dtype)
    upper *= std
    upper = upper.astype(G.dtype, copy=False)
    s = 0
    for i in range(d):  # row i of the upper triangle holds (i, i), (i, i+1), ..., (i, d-1)
        n = d - i
        G[..., i, i:] += upper[..., s : s + n]
        G[..., i + 1 :, i] += upper[..., s + 1 : s + n]  # the mirrored lower entries (j, i), j > i
        s += n


_TRIDIAG = {np.dtype(np.float32): ("ssytrd", "sstevd"), np.dtype(np.float64): ("dsytrd", "dstevd")}


def projected_ridge_solve(G: np.ndarray, b: np.ndarray, shift, floor: float = 0.0, overwrite_g: bool = False) -> np.ndarray:
    """theta_i = pinv(PSD_floor(G_i) + shift_i I) b_i for a stack of symmetric G (spec 004 §2).

    ``PSD_floor(G) = V diag(max(lam, floor)) V^T`` with ``G = V diag(lam) V^T``: the same
    projection and the same pseudo-inverse as ``eig_solve(*eigh(G), b, shift)`` after flooring,
    computed without forming V. Each G is reduced to tridiagonal form G = Q T Q^T (LAPACK
    ``sytrd``), T = Z diag(lam) Z^T is diagonalised (``stevd``; numpy's ``eigh`` of T should it
    fail to converge), and theta = Q Z f(lam) Z^T Q^T b with the Householder reflectors of Q
    applied to vectors only (batched over the stack). This skips the O(d^3) back-transformation
    of the eigenvectors that ``eigh`` performs -- most of the SSP item step's cost when nearly
    every noisy Gramian needs the projection. ``G`` must be symmetric (one triangle is read);
    it is used as workspace when ``overwrite_g`` and C-contiguous, else left unchanged.
    ``shift``: scalar or (m,).
    """
    m, d = G.shape[0], G.shape[-1]
    dtype = G.dtype
    shift = np.broadcast_to(np.asarray(shift, dtype=dtype), (m,))
    if m == 0:
        return np.zeros((0, d), dtype=dtype)
    names = _TRIDIAG.get(np.dtype(dtype))
    if names is None or d < 3:
        lam, V = np.linalg.eigh(G)
        return eig_solve(np.maximum(lam, dtype.type(floor)), V, b, shift)
    sytrd, stevd = (getattr(lapack, n) for n in names)
    # A[i].T is F-contiguous and (G symmetric) equal to G[i]: sytrd overwrites it in place with
    # the reflectors, which then sit in A[i][k, k+2:] (column k below the subdiagonal, Fortran view)
    A = G if (overwrite_g and G.flags.c_contiguous) else np.array(G, order="C")
    lam = np.empty((m, d), dtype=dtype)
    Z = np.empty((m, d, d), dtype=dtype)
    tau = np.empty((m, d - 1), dtype=dtype)
    for i in range(m):
        _, diag, off, tau[i], _ = sytrd(A[i].T, lower=1, overwrite_a=1)
        w, z, info = stevd(diag, off)
        if info:  # D&C did not converge: dense eigh of the same tridiagonal T
            w, z = np.linalg.eigh(np.diag(diag) + np.diag(off, 1) + np.diag(off, -1))
        lam[i] = w
        Z[i] = z
    y = np.array(b, dtype=dtype)
    v = np.empty((m, d), dtype=dtype)
    for k in range(d - 1):  # y <- Q^T y = H(d-2) ... H(0) y, H(k) = I - tau_k v_k v_k^T
        vk = v[:, : d - k - 1]
        vk[:] = A[:, k, k + 1 :]
        vk[:, 0] = 1
        y[:, k + 1 :] -= (tau[:, k] * np.einsum("bi,bi->b", vk, y[:, k + 1 :]))[:, None] * vk
    c = np.matmul(y[:, None, :], Z)[:, 0, :] * _pinv_diag(np.maximum(lam, dtype.type(floor)) + shift[:, None])
    y = np.matmul(Z, c[:, :, None])[:, :, 0]
    for k in range(d - 2, -1, -1):  # y <- Q y = H(0) ... H(d-2) y
        vk = v[:, : d - k - 1]
        vk[:] = A[:, k, k + 1 :]
        vk[:, 0] = 1
        y[:, k + 1 :] -= (tau[:, k] * np.einsum("bi,bi->b", vk, y[:, k + 1 :]))[:, None] * vk
    return y


def psd_project(A: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Projection onto {A : eigenvalues >= floor} in Frobenius norm (eigenvalue floor), batched."""
    lam, V = np.linalg.eigh(A)
    lam = np.maximum(lam, floor)
    return (V * lam[..., None, :]) @ np.swapaxes(V, -1, -2)


def _pinv_diag(denom: np.ndarray) -> np.ndarray:
    scale = np.max(np.abs(denom), axis=-1, keepdims=True)
    tol = denom.shape[-1] * np.finfo(denom.dtype).eps * scale
    out = np.zeros_like(denom)
    np.divide(1.0, denom, out=out, where=denom > tol)
    return out


def eig_solve(lam: np.ndarray, V: np.ndarray, b: np.ndarray, shift) -> np.ndarray:
    """theta = pinv(V diag(lam + shift) V^T) b, batched; ``shift`` scalar or (batch,)."""
    shift = np.asarray(shift, dtype=lam.dtype)
    denom = lam + (shift[:, None] if shift.ndim == 1 else shift)
    coef = np.matmul(b[:, None, :], V)[:, 0, :] * _pinv_diag(denom)
    return np.matmul(V, coef[:, :, None])[:, :, 0]


def spd_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched solve of symmetric PSD systems: LU solve, falling back to eigh-pinv if singular."""
    try:
        out = np.linalg.solve(A, b[..., None])[..., 0]
        if np.all(np.isfinite(out)):
            return out
    except np.linalg.LinAlgError:
        pass
    lam, V = np.linalg.eigh(A)
    return eig_solve(lam, V, b, 0.0)


def as_task_array(value, m: int, name: str, dtype) -> np.ndarray:
    """A scalar or (m,) array of non-negative per-task values (e.g. ridge regularisation)."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(m, float(arr))
    if arr.shape != (m,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be a non-negative scalar or an array of shape ({m},)")
    return arr.astype(dtype)
