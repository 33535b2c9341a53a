"""Batched statistics and linear algebra for the solvers (Krichene et al. 2023, Alg. 1): chunked Gramians,
PSD projection, pinv-style solves. float32 by default, memory bounded by task chunks.

Speed (issue 16): the Gramians are accumulated in GEMM blocks of at most
:data:`DEFAULT_BLOCK_EXAMPLES` examples -- a heavy task (a head item with 10^5 raters) is split
into several blocks, each gathered into a small per-thread buffer that stays in cache while BLAS
consumes it; light tasks (few examples each) are grouped by size and computed by one zero-padded
batched ``matmul`` per group. The per-matrix LAPACK kernels of the solves (Cholesky test, SPD
solve, tridiagonal reduction and eigensolver of the PSD projection) are called through ctypes on
``scipy.linalg.cython_lapack``'s function pointers, which releases the GIL during each call, so
the worker threads of :func:`map_chunks` run them in parallel (scipy's f2py wrappers hold the GIL,
which serialised this work across threads). Without the pointers (or with the environment variable
``PRIVREC_NO_CTYPES_LAPACK`` set, read once per process) everything falls back to scipy / numpy,
with the same results up to rounding.
"""

from __future__ import annotations

import ctypes
import math
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
# Examples per GEMM block of the Gramian step: the gathered (block, d) rows (1 MiB at d = 64,
# float32) stay in L2 while BLAS consumes them; tasks with fewer than LIGHT_TASK_EXAMPLES examples
# are grouped (similar sizes, zero-padded) into batched products of about this many rows.
DEFAULT_BLOCK_EXAMPLES = 4096
LIGHT_TASK_EXAMPLES = 1024


# ----------------------------------------------------------------------------------- GIL-free LAPACK
class _Lapack:
    """ctypes handles on scipy's LAPACK (Fortran calling convention: every argument by address).

    A C-contiguous symmetric matrix is its own Fortran transpose, so passing C memory is fine;
    ``uplo`` names the triangle in Fortran terms (Fortran ``"L"`` is C's upper triangle).
    ctypes releases the GIL for the duration of each call.
    """

    def __init__(self, prefix: str):
        from scipy.linalg import cython_lapack

        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        name = ctypes.pythonapi.PyCapsule_GetName
        name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]

        def fn(routine: str, nargs: int):
            cap = cython_lapack.__pyx_capi__[prefix + routine]
            ptr = get(cap, name(cap))
            if not ptr:
                raise RuntimeError(f"no pointer for {prefix}{routine}")
            return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))(ptr)

        self.potrf = fn("potrf", 5)  # uplo, n, a, lda, info
        self.posv = fn("posv", 8)  # uplo, n, nrhs, a, lda, b, ldb, info
        self.sytrd = fn("sytrd", 10)  # uplo, n, a, lda, d, e, tau, work, lwork, info
        self.stevd = fn("stevd", 11)  # jobz, n, d, e, z, ldz, work, lwork, iwork, liwork, info
        self.ormtr = fn("ormtr", 13)  # side, uplo, trans, m, n, a, lda, tau, c, ldc, work, lwork, info


_LAPACK: dict = {}
_CHARS = {c: ctypes.create_string_buffer(c.encode()) for c in ("L", "U", "V")}


def _lapack(dtype) -> _Lapack | None:
    """The GIL-free handles for float32 / float64, or None (then callers use scipy / numpy)."""
    key = np.dtype(dtype)
    if key not in _LAPACK:
        prefix = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}.get(key)
        try:
            _LAPACK[key] = None if prefix is None or os.environ.get("PRIVREC_NO_CTYPES_LAPACK") else _Lapack(prefix)
        except Exception:  # pragma: no cover - scipy without cython_lapack capsules
            _LAPACK[key] = None
    return _LAPACK[key]


def _ints(*values):
    return [ctypes.c_int(v) for v in values]


def task_chunks(
    indptr: np.ndarray, chunk_tasks: int = DEFAULT_CHUNK_TASKS, chunk_examples: int = DEFAULT_CHUNK_EXAMPLES
):
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


def check_execution(chunk_tasks, chunk_examples, num_threads) -> None:
    """ValueError unless chunk sizes are integers >= 1 and num_threads is None or a non-zero integer."""
    from .._validation import check_int

    check_int(chunk_tasks, "chunk_tasks", minimum=1)
    check_int(chunk_examples, "chunk_examples", minimum=1)
    if num_threads is not None and (check_int(num_threads, "num_threads") == 0):
        raise ValueError("num_threads must be None, a positive count, or negative (all cores but |num_threads| - 1)")


def resolve_jobs(num_threads) -> int:
    if num_threads is None or num_threads == 0:
        return max(1, min(os.cpu_count() or 1, 8))
    if num_threads < 0:
        return max(1, (os.cpu_count() or 1) + 1 + num_threads)
    return int(num_threads)


def map_chunks(fn, chunks: list, num_threads, costs=None) -> list:
    """``[fn(i, chunk) for i, chunk in enumerate(chunks)]`` on a thread pool (numpy releases the GIL
    in BLAS/LAPACK), with single-threaded BLAS; results in order. Memory: num_threads chunks in flight.

    ``costs`` (optional, one estimate per chunk): with several threads the chunks are *started*
    in decreasing order of cost (longest-processing-time-first scheduling), so the pool does not
    end with one thread finishing a long chunk while the others idle; results stay in the order of
    ``chunks``. Only the schedule changes: every chunk is computed exactly as without ``costs``.
    """
    jobs = min(resolve_jobs(num_threads), max(1, len(chunks)))
    try:
        with single_threaded_blas():
            if jobs == 1:
                return [fn(i, c) for i, c in enumerate(chunks)]
            order = range(len(chunks)) if costs is None else np.argsort(-np.asarray(costs, float), kind="stable")
            out: list = [None] * len(chunks)
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = {int(i): pool.submit(fn, int(i), chunks[i]) for i in order}
                for i, f in futures.items():
                    out[i] = f.result()
            return out
    finally:
        _local.__dict__.pop("buf", None)  # release this thread's gather buffer


#: relative cost of one task's d x d projected solve against one example of its Gramian: a
#: projected solve (tridiagonal reduction + eigensystem, about 150 us at d = 65) costs as much as
#: the Gramian rows of about 1200 examples (2 d^2 FLOPs each at ~70 GFLOP/s), measured on 2 cores
SOLVE_COST_IN_EXAMPLES = 1200
#: the same for the eigenvalue-shifted Cholesky solve (:func:`shifted_solve`, about 20 us at d = 65)
SHIFT_SOLVE_COST_IN_EXAMPLES = 160


def chunk_costs(indptr: np.ndarray, task_ranges: list, solve_cost: float = SOLVE_COST_IN_EXAMPLES) -> list[float]:
    """Estimated cost of each task range ``(t0, t1)`` for :func:`map_chunks`' scheduling: its
    examples plus ``solve_cost`` (default :data:`SOLVE_COST_IN_EXAMPLES`) per task."""
    return [float(indptr[t1] - indptr[t0]) + solve_cost * (t1 - t0) for t0, t1 in task_ranges]


def positive_definite_mask(M: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Per matrix: is M - floor I positive definite? (one LAPACK potrf each on a scratch copy of
    the lower triangle; no exception; the GIL is released during each factorisation)."""
    m, d = M.shape[0], M.shape[-1]
    ok = np.empty(m, dtype=bool)
    lp = _lapack(M.dtype)
    if lp is None or m == 0:
        potrf = lapack.spotrf if M.dtype == np.float32 else lapack.dpotrf
        eye = np.eye(d, dtype=M.dtype) * M.dtype.type(floor)
        for i in range(m):
            ok[i] = potrf(M[i] - eye if floor else M[i], lower=1, clean=0, overwrite_a=0)[1] == 0
        return ok
    work = np.empty((d, d), dtype=M.dtype)
    diag = np.arange(d)
    fl = M.dtype.type(floor)
    n, info = _ints(d, 0)
    pn, pinfo, pw, upper = ctypes.byref(n), ctypes.byref(info), work.ctypes.data, _CHARS["U"]
    for i in range(m):  # Fortran "U" on C memory = C's lower triangle (what scipy's lower=1 reads)
        np.copyto(work, M[i])
        if floor:
            work[diag, diag] -= fl
        lp.potrf(upper, pn, pw, pn, pinfo)
        ok[i] = info.value == 0
    return ok


def prepared_inputs(batch: TaskBatch, max_norm, label_bound, dtype, labels: bool = True):
    """Clipped features (units, d) and clipped labels, cast to ``dtype`` (Krichene et al. 2023, Alg. 1 step 1).

    ``labels=False`` returns ``(x, None)``: callers then pass ``label_bound`` to
    :func:`chunk_statistics`, which clips block by block (no clipped copy of all labels).
    """
    x = np.asarray(batch.features, dtype=dtype)
    if max_norm is not None:
        x = clip_rows(x, max_norm)
    if not labels:
        return x, None
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


def chunk_statistics(
    batch: TaskBatch,
    x: np.ndarray,
    y: np.ndarray,
    t0: int,
    t1: int,
    label_bound: float | None = None,
    block_examples: int = DEFAULT_BLOCK_EXAMPLES,
    light_examples: int = LIGHT_TASK_EXAMPLES,
):
    """Weighted Gramians sum_e w_e x_e x_e^T and RHS sum_e w_e y_e x_e for tasks [t0, t1).

    ``y`` holds the labels of all examples (already clipped, or clipped here block by block when
    ``label_bound`` is given, so no clipped copy of every label is needed). Never materialises
    (nnz, d, d) nor the chunk's (examples, d) rows:

    * a task with at least ``light_examples`` examples is accumulated over GEMM blocks of at most
      ``block_examples`` sqrt(w)-scaled rows (gathered into a per-thread buffer that stays in
      cache; ``Xs.T @ Xs`` is a BLAS rank-k update); a task of one block is computed exactly as a
      single product, so its Gramian is bit-identical to the unblocked one;
    * lighter tasks are sorted by size and grouped (lengths within a group differ by at most 25%
      or 4) into zero-padded (B, L, d) stacks of about ``block_examples`` rows, one batched
      ``matmul`` per group (padding rows have weight 0 and add exact zeros).
    """
    d = x.shape[1]
    dtype = x.dtype
    indptr = batch.indptr
    fid, w = batch.feature_ids, batch.weights
    m = t1 - t0
    starts = indptr[t0:t1]
    sizes = indptr[t0 + 1 : t1 + 1] - starts
    G = np.zeros((m, d, d), dtype=dtype)
    b = np.zeros((m, d), dtype=dtype)
    block = max(1, int(block_examples))

    def labels(s, e, sw):  # cast, then clip: the order of prepared_inputs
        ys = y[s:e].astype(dtype, copy=False)
        if label_bound is not None:
            ys = clip_labels(ys, label_bound).astype(dtype, copy=False)
        return ys * sw

    heavy = np.flatnonzero(sizes >= max(1, light_examples))
    if heavy.size:
        tmp = np.empty((d, d), dtype=dtype)
        # BLAS kernels work on 16-column panels: for d = 64 + r (r < 16, e.g. the bias feature)
        # a rank-k update of the first 64 columns plus a thin product for the last r is ~6% faster
        # than the rank-k update of all d columns
        d0 = d - d % 16 if d > 16 and d % 16 else d
        for i in heavy:
            s0, s1 = int(starts[i]), int(starts[i] + sizes[i])
            n_blocks = -(-(s1 - s0) // block)
            step = -(-(s1 - s0) // n_blocks)  # equal blocks: no tiny remainder
            for s in range(s0, s1, step):
                e = min(s + step, s1)
                xs = _gather_buffer(e - s, d, dtype)
                np.take(x, fid[s:e], axis=0, out=xs, mode="clip")  # ids validated by TaskBatch
                sw = np.sqrt(w[s:e].astype(dtype, copy=False))
                xs *= sw[:, None]
                ys = labels(s, e, sw)
                target = G[i] if s == s0 else tmp
                if d0 == d:
                    np.matmul(xs.T, xs, out=target)
                else:
                    _split_gramian(xs, d0, target)
                if s == s0:
                    np.matmul(ys, xs, out=b[i])
                else:
                    G[i] += tmp
                    b[i] += ys @ xs

    light = np.flatnonzero((sizes > 0) & (sizes < max(1, light_examples)))
    if light.size:
        light = light[np.argsort(sizes[light], kind="stable")]
        lsizes = sizes[light]
        n = light.size
        g0 = 0
        while g0 < n:
            c0 = int(lsizes[g0])
            cap = int(np.searchsorted(lsizes, max(int(c0 * 1.25), c0 + 4), side="right"))
            g1 = min(n, cap)
            length = int(lsizes[g1 - 1])
            g1 = min(g1, g0 + max(1, block // length))
            length = int(lsizes[g1 - 1])
            idx = light[g0:g1]
            slot = np.arange(length)
            mask = slot[None, :] < sizes[idx][:, None]
            pos = np.where(mask, starts[idx][:, None] + slot[None, :], starts[idx][:, None])
            xs = _gather_buffer(pos.size, d, dtype)
            np.take(x, fid[pos.ravel()], axis=0, out=xs, mode="clip")
            X = xs.reshape(idx.size, length, d)
            sw = np.where(mask, np.sqrt(w[pos].astype(dtype, copy=False)), dtype.type(0))
            X *= sw[:, :, None]
            ys = y[pos].astype(dtype, copy=False)
            if label_bound is not None:
                ys = clip_labels(ys, label_bound).astype(dtype, copy=False)
            ys = ys * sw
            Xt = X.transpose(0, 2, 1)
            G[idx] = np.matmul(Xt, X)
            b[idx] = np.matmul(Xt, ys[:, :, None])[:, :, 0]
            g0 = g1
    return G, b


def _split_gramian(xs: np.ndarray, d0: int, out: np.ndarray) -> None:
    """out = xs^T xs (exactly symmetric) from a rank-k update of the first d0 columns and one thin
    product xs^T xs[:, d0:] for the rest."""
    x0, x1 = xs[:, :d0], xs[:, d0:]
    np.matmul(x0.T, x0, out=out[:d0, :d0])
    t = xs.T @ x1  # (d, r)
    out[:d0, d0:] = t[:d0]
    out[d0:, :d0] = t[:d0].T
    corner = t[d0:]
    out[d0:, d0:] = (corner + corner.T) * out.dtype.type(0.5)


def weighted_statistics(
    batch: TaskBatch,
    max_norm=None,
    label_bound=None,
    dtype=np.float64,
    chunk_tasks: int = DEFAULT_CHUNK_TASKS,
    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES,
):
    """All tasks' clipped weighted statistics before noise: Gramians (m, d, d) and RHS (m, d).

    These are exactly what SSP perturbs (Krichene et al. 2023, Alg. 1); exposed for sensitivity tests and audits.
    """
    x, y = prepared_inputs(batch, max_norm, label_bound, dtype)
    G = np.empty((batch.n_tasks, batch.dim, batch.dim), dtype=dtype)
    b = np.empty((batch.n_tasks, batch.dim), dtype=dtype)
    with single_threaded_blas():
        for t0, t1 in task_chunks(batch.indptr, chunk_tasks, chunk_examples):
            G[t0:t1], b[t0:t1] = chunk_statistics(batch, x, y, t0, t1)
    return G, b


def global_gramian(x: np.ndarray) -> np.ndarray:
    """sum over units of x_u x_u^T (the gravity / unobserved-weight term, Krichene et al. 2023, App. D)."""
    return x.T @ x


def noisy_global_gramian(x: np.ndarray, std: float, weight: float, rng, dtype) -> np.ndarray:
    """weight * PSD(sum_u x_u x_u^T + symmetric N(0, std^2)): the released gravity term (Krichene et al. 2023, App. D)."""
    from ..privacy import symmetric_gaussian_noise

    g0 = global_gramian(x) + symmetric_gaussian_noise((), x.shape[1], std, rng, dtype)
    return psd_project(g0) * np.dtype(dtype).type(weight)


_TRIDIAG = {np.dtype(np.float32): ("ssytrd", "sstevd"), np.dtype(np.float64): ("dsytrd", "dstevd")}


def _sytrd_lwork(d: int) -> int:
    """Workspace of the tridiagonal reductions: 16 columns per panel (blocked ``sytrd``; about 20%
    faster than the unblocked default at d = 65). Every path (ctypes or scipy) passes the same value,
    so they run the same arithmetic."""
    return 16 * d


def projected_ridge_solve(
    G: np.ndarray, b: np.ndarray, shift, floor: float = 0.0, overwrite_g: bool = False
) -> np.ndarray:
    """theta_i = pinv(PSD_floor(G_i) + shift_i I) b_i for a stack of symmetric G (Krichene et al. 2023, Alg. 1).

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
    # A[i].T is F-contiguous and (G symmetric) equal to G[i]: sytrd overwrites it in place with
    # the reflectors, which then sit in A[i][k, k+2:] (column k below the subdiagonal, Fortran view)
    A = G if (overwrite_g and G.flags.c_contiguous and G.flags.writeable) else np.array(G, order="C")
    lam = np.empty((m, d), dtype=dtype)
    Zt = np.empty((m, d, d), dtype=dtype)  # Zt[i] = Z_i^T (LAPACK writes Z column-major)
    tau = np.empty((m, d - 1), dtype=dtype)
    lp = _lapack(dtype)
    if lp is not None:
        _tridiagonal_eigen(lp, A, lam, Zt, tau)
    else:
        sytrd, stevd = (getattr(lapack, n) for n in names)
        for i in range(m):
            _, diag, off, tau[i], _ = sytrd(A[i].T, lower=1, overwrite_a=1, lwork=_sytrd_lwork(d))
            w, z, info = stevd(diag, off)
            if info:  # D&C did not converge: dense eigh of the same tridiagonal T
                w, z = np.linalg.eigh(np.diag(diag) + np.diag(off, 1) + np.diag(off, -1))
            lam[i] = w
            Zt[i] = z.T
    y = np.array(b, dtype=dtype)
    v = np.empty((m, d), dtype=dtype)
    for k in range(d - 1):  # y <- Q^T y = H(d-2) ... H(0) y, H(k) = I - tau_k v_k v_k^T
        vk = v[:, : d - k - 1]
        vk[:] = A[:, k, k + 1 :]
        vk[:, 0] = 1
        y[:, k + 1 :] -= (tau[:, k] * np.einsum("bi,bi->b", vk, y[:, k + 1 :]))[:, None] * vk
    c = np.matmul(Zt, y[:, :, None])[:, :, 0] * _pinv_diag(np.maximum(lam, dtype.type(floor)) + shift[:, None])
    y = np.matmul(c[:, None, :], Zt)[:, 0, :]
    for k in range(d - 2, -1, -1):  # y <- Q y = H(0) ... H(d-2) y
        vk = v[:, : d - k - 1]
        vk[:] = A[:, k, k + 1 :]
        vk[:, 0] = 1
        y[:, k + 1 :] -= (tau[:, k] * np.einsum("bi,bi->b", vk, y[:, k + 1 :]))[:, None] * vk
    return y


def _tridiagonal_eigen(lp: _Lapack, A: np.ndarray, lam: np.ndarray, Zt: np.ndarray, tau: np.ndarray) -> None:
    """Per matrix: A[i] = Q T Q^T (``sytrd``, reflectors left in A[i]), T = Z diag(lam) Z^T
    (``stevd``); fills lam[i], Zt[i] = Z^T and tau[i]. GIL released inside each LAPACK call."""
    m, d = A.shape[0], A.shape[-1]
    dtype = A.dtype
    lwork = _sytrd_lwork(d)  # the same as the scipy fallback: the same arithmetic
    work = np.empty(max(lwork, 1 + 4 * d + d * d), dtype=dtype)
    iwork = np.empty(3 + 5 * d, dtype=np.intc)
    diag = np.empty(d, dtype=dtype)
    off = np.empty(d, dtype=dtype)
    t_diag, t_off = np.empty(d, dtype=dtype), np.empty(d, dtype=dtype)
    n, info, lw, lw2, liw = _ints(d, 0, lwork, 1 + 4 * d + d * d, 3 + 5 * d)
    pn, pinfo, plw, plw2, pliw = (ctypes.byref(v) for v in (n, info, lw, lw2, liw))
    pdiag, poff, pwork, piwork = diag.ctypes.data, off.ctypes.data, work.ctypes.data, iwork.ctypes.data
    pa, sa = A.ctypes.data, A.strides[0]
    pz, sz = Zt.ctypes.data, Zt.strides[0]
    pt, st = tau.ctypes.data, tau.strides[0]
    lower, vec = _CHARS["L"], _CHARS["V"]
    for i in range(m):
        lp.sytrd(lower, pn, pa + i * sa, pn, pdiag, poff, pt + i * st, pwork, plw, pinfo)
        if info.value:  # pragma: no cover - only on invalid arguments
            raise np.linalg.LinAlgError(f"sytrd failed (info {info.value})")
        np.copyto(t_diag, diag)
        np.copyto(t_off, off)
        lp.stevd(vec, pn, pdiag, poff, pz + i * sz, pn, pwork, plw2, piwork, pliw, pinfo)
        if info.value:  # D&C did not converge: dense eigh of the same tridiagonal T
            e = t_off[: d - 1]
            w, z = np.linalg.eigh(np.diag(t_diag) + np.diag(e, 1) + np.diag(e, -1))
            lam[i] = w
            Zt[i] = z.T
        else:
            lam[i] = diag


_PROJECTED_SOLVE_MIN_DIM = 32


def projected_solve(G: np.ndarray, b: np.ndarray, shift, extra: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """theta_i = (PSD_floor(G_i) + extra + shift_i I)^-1 b_i for a stack of symmetric G and one
    symmetric PSD ``extra`` (the SSP gravity term), pinv if singular.

    ``PSD_floor(G) = G + U U^T`` with U = V_-(floor - lam_-)^(1/2) over the eigenpairs below the
    floor only: per matrix one tridiagonal reduction (``sytrd``), its eigensystem (``stevd``),
    the reflectors applied to those k columns only (``ormtr``) and a rank-k update -- about half
    the work of a dense ``eigh`` with its full back-transformation and V diag(lam) V^T product.
    GIL-free LAPACK calls; numpy's ``eigh`` without them (same result up to rounding). ``G`` is
    left unchanged.
    """
    m, d = G.shape[0], G.shape[-1]
    dtype = G.dtype
    shift = np.broadcast_to(np.asarray(shift, dtype=dtype), (m,))
    diag_idx = np.arange(d)
    lp = _lapack(dtype) if d >= _PROJECTED_SOLVE_MIN_DIM else None  # smaller: numpy's eigh is as fast
    if m == 0:
        return np.zeros((0, d), dtype=dtype)
    if lp is None:
        lam, V = np.linalg.eigh(G)
        lam = np.maximum(lam, dtype.type(floor))
        A = (V * lam[:, None, :]) @ np.swapaxes(V, -1, -2)
        A += extra
        A[:, diag_idx, diag_idx] += shift[:, None]
        return spd_solve(A, b)
    A = np.array(G, dtype=dtype, order="C")  # becomes PSD_floor(G) + extra + shift I
    R = np.array(G, dtype=dtype, order="C")  # sytrd workspace (reflectors)
    Zt = np.empty((d, d), dtype=dtype)
    tau = np.empty(d, dtype=dtype)
    lam = np.empty(d, dtype=dtype)
    off = np.empty(d, dtype=dtype)
    t_diag, t_off = np.empty(d, dtype=dtype), np.empty(d, dtype=dtype)
    lwork = max(d * 64, 1 + 4 * d + d * d, _sytrd_lwork(d))
    work = np.empty(lwork, dtype=dtype)
    iwork = np.empty(3 + 5 * d, dtype=np.intc)
    n, info, lw_trd, lw_evd, liw, lw_orm = _ints(d, 0, _sytrd_lwork(d), 1 + 4 * d + d * d, 3 + 5 * d, lwork)
    pn, pinfo, plt, ple, pliw, plo = (ctypes.byref(v) for v in (n, info, lw_trd, lw_evd, liw, lw_orm))
    plam, poff, pz, ptau, pwork, piwork = (a.ctypes.data for a in (lam, off, Zt, tau, work, iwork))
    pr, sr = R.ctypes.data, R.strides[0]
    lower, vec, left, notrans = (
        _CHARS["L"],
        _CHARS["V"],
        ctypes.create_string_buffer(b"L"),
        ctypes.create_string_buffer(b"N"),
    )
    fl = dtype.type(floor)
    for i in range(m):
        lp.sytrd(lower, pn, pr + i * sr, pn, plam, poff, ptau, pwork, plt, pinfo)
        np.copyto(t_diag, lam)
        np.copyto(t_off, off)
        lp.stevd(vec, pn, plam, poff, pz, pn, pwork, ple, piwork, pliw, pinfo)
        if info.value:  # D&C did not converge: dense eigh of G_i itself
            w, V = np.linalg.eigh(G[i])
            k = int(np.searchsorted(w, fl))
            U = (V[:, :k] * np.sqrt(fl - w[:k])).T
        else:
            k = int(np.searchsorted(lam, fl))  # ascending eigenvalues: the first k are below the floor
            U = Zt[:k]  # rows = the k eigenvectors of T (Z column-major)
            U *= np.sqrt(fl - lam[:k])[:, None]
            if k:
                kk = ctypes.c_int(k)
                lp.ormtr(left, lower, notrans, pn, ctypes.byref(kk), pr + i * sr, pn, ptau, pz, pn, pwork, plo, pinfo)
        if k:
            A[i] += U.T @ U
    A += extra
    A[:, diag_idx, diag_idx] += shift[:, None]
    return spd_solve(A, b)


def noise_edge(std: float, d: int) -> float:
    """A high-probability bound on the spectral norm of d x d symmetric Gaussian noise of entry
    std ``std``: the semicircle edge ``2 std sqrt(d)`` plus four Tracy-Widom units ``std d^(-1/6)``
    (the smallest eigenvalue's fluctuation scale; none of 4,000 draws at d = 2, 5, 17, 65 passed it)."""
    return float(std) * (2.0 * math.sqrt(d) + 4.0 * d ** (-1.0 / 6.0))


def shifted_solve(
    G: np.ndarray, b: np.ndarray, reg, scale: float, extra=None, floor: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(theta, s)``: theta_i = (G_i + (s_i + floor + reg_i) I [+ extra])^-1 b_i with s_i the
    smallest of ``scale * 2**k`` (k = 0, 1, ...) that makes that matrix positive definite.

    The eigenvalue-shift counterpart of :func:`projected_ridge_solve` / :func:`projected_solve`
    for noisy Gramians that are not positive definite (issue 29): instead of clamping their
    negative eigenvalues (one eigendecomposition each), every eigenvalue is raised by ``scale``.
    With ``scale`` = :func:`noise_edge` of the calibrated noise, ``G_i + scale I`` is positive
    semi-definite with high probability, so the smallest eigenvalue of the solved matrix is at
    least ``floor + reg_i`` and k = 0: one Cholesky solve (``posv``) per matrix, about a tenth of
    the projection's time at d = 65. This is AdaSSP's eigenvalue shift (Wang 2018, Alg. 2) with
    its lower bound on the exact Gramian's smallest eigenvalue taken as 0. A matrix that is not
    finite gets NaN (the solvers' inputs are clipped, so their statistics are finite). ``G`` is
    left unchanged; ``reg``: scalar or (m,).
    """
    m, d = G.shape[0], G.shape[-1]
    dtype = G.dtype
    scale = float(scale)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    base = np.broadcast_to(np.asarray(reg, dtype=np.float64), (m,)) + float(floor)
    out = np.full((m, d), np.nan, dtype=dtype)
    s = np.full(m, np.nan)
    if m == 0:
        return out, s
    finite = np.isfinite(G).all(axis=(1, 2))
    if extra is not None:
        finite &= bool(np.isfinite(extra).all())
    limit = float(np.finfo(dtype).max) / (4 * d)
    work = np.empty((d, d), dtype=dtype)
    x = np.empty(d, dtype=dtype)
    diag = np.arange(d)
    lp = _lapack(dtype)
    if lp is not None:
        n, one, info = _ints(d, 1, 0)
        args = (_CHARS["U"], ctypes.byref(n), ctypes.byref(one), work.ctypes.data, ctypes.byref(n))
        px, tail = x.ctypes.data, (ctypes.byref(n), ctypes.byref(info))

        def solved(i: int, t: float) -> bool:  # x = (G_i + t I + extra)^-1 b_i if positive definite
            np.copyto(work, G[i])
            if extra is not None:
                np.add(work, extra, out=work)
            work[diag, diag] += dtype.type(t)
            x[:] = b[i]
            lp.posv(*args, px, *tail)
            return info.value == 0

    else:
        posv = lapack.sposv if dtype == np.float32 else lapack.dposv

        def solved(i: int, t: float) -> bool:
            np.copyto(work, G[i])
            if extra is not None:
                np.add(work, extra, out=work)
            work[diag, diag] += dtype.type(t)
            _, sol, info = posv(work, b[i], lower=1)
            x[:] = sol
            return info == 0

    for i in np.flatnonzero(finite).tolist():
        t = scale
        while t < limit and not solved(i, t + base[i]):
            t *= 2.0
        if t < limit:
            s[i] = t
            out[i] = x
    return out, s


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


# below this size numpy's batched LU (one gufunc call) beats a loop of per-matrix Cholesky calls
_POSV_MIN_DIM = 24


def spd_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched solve of symmetric PSD systems: Cholesky (``posv``) per matrix where A is positive
    definite, else LU, falling back to eigh-pinv if singular. ``A`` is left unchanged.

    The Cholesky solves go through the GIL-free LAPACK handles (about 2x less work than numpy's
    batched LU for d ~ 64, and they run in parallel in :func:`map_chunks`' threads); each matrix
    is factored in a scratch copy, so a failed factorisation falls back on the original. Systems
    smaller than 24 x 24 use numpy's batched LU directly (cheaper than one call per matrix there).
    """
    lp = _lapack(A.dtype) if A.ndim == 3 and np.ndim(b) == 2 and A.shape[-1] >= _POSV_MIN_DIM else None
    if lp is None or A.shape[0] == 0 or np.result_type(A.dtype, np.asarray(b).dtype) != A.dtype:
        return _lu_solve(A, b)
    m, d = A.shape[0], A.shape[-1]
    x = np.array(b, dtype=A.dtype, order="C")
    work = np.empty((d, d), dtype=A.dtype)
    ok = np.empty(m, dtype=bool)
    n, one, info = _ints(d, 1, 0)
    pn, p1, pinfo, upper, pw = ctypes.byref(n), ctypes.byref(one), ctypes.byref(info), _CHARS["U"], work.ctypes.data
    px, sx = x.ctypes.data, x.strides[0]
    for i in range(m):  # Fortran "U" on C memory = C's lower triangle
        np.copyto(work, A[i])
        lp.posv(upper, pn, p1, pw, pn, px + i * sx, pn, pinfo)
        ok[i] = info.value == 0
    if not ok.all():
        bad = np.flatnonzero(~ok)
        x[bad] = _lu_solve(A[bad], np.asarray(b)[bad].astype(A.dtype, copy=False))
    return x


def _lu_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """LU solve; matrices that are singular (or give non-finite solutions) use eigh-pinv instead,
    the others keep their LU solution (the reference path of :func:`spd_solve`)."""
    try:
        out = np.linalg.solve(A, b[..., None])[..., 0]
        finite = np.all(np.isfinite(out), axis=-1)
        if np.all(finite):
            return out
    except np.linalg.LinAlgError:
        if A.ndim != 3:
            lam, V = np.linalg.eigh(A)
            return eig_solve(lam, V, b, 0.0)
        out = np.empty(b.shape, dtype=np.result_type(A.dtype, b.dtype))
        finite = np.zeros(A.shape[0], dtype=bool)
        for i in range(A.shape[0]):
            try:
                out[i] = np.linalg.solve(A[i], b[i])
                finite[i] = np.all(np.isfinite(out[i]))
            except np.linalg.LinAlgError:
                pass
    if A.ndim != 3:
        lam, V = np.linalg.eigh(A)
        return eig_solve(lam, V, b, 0.0)
    bad = np.flatnonzero(~finite)
    lam, V = np.linalg.eigh(A[bad])
    out[bad] = eig_solve(lam, V, b[bad], 0.0)
    return out


def as_task_array(value, m: int, name: str, dtype) -> np.ndarray:
    """A scalar or (m,) array of non-negative per-task values (e.g. ridge regularisation)."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(m, float(arr))
    if arr.shape != (m,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be a non-negative scalar or an array of shape ({m},)")
    return arr.astype(dtype)
