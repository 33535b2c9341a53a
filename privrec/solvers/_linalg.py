"""Batched linear algebra of the solvers (Krichene et al. 2023, Alg. 1): PSD projection, the
projected and eigenvalue-shifted ridge solves, SPD solves with a pinv fallback, the released
gravity term.

The per-matrix LAPACK kernels of the solves (Cholesky test, SPD solve, tridiagonal reduction and
eigensolver of the PSD projection) are called through ctypes on ``scipy.linalg.cython_lapack``'s
function pointers, which releases the GIL during each call, so the worker threads of
:func:`map_chunks` run them in parallel (scipy's f2py wrappers hold the GIL, which serialised this
work across threads). Without the pointers (or with the environment variable
``PRIVREC_NO_CTYPES_LAPACK`` set, read once per process) everything falls back to scipy / numpy,
with the same results up to rounding.

Its neighbours, importable from here as before the split: how the chunks run
(:mod:`privrec.solvers._execution`: task chunks, the thread pool, per-thread buffers) and the
statistics the solves consume (:mod:`privrec.solvers._statistics`: chunked Gramians and
right-hand sides).
"""

from __future__ import annotations

import ctypes
import math
import os

import numpy as np
from scipy.linalg import lapack

from ._execution import (  # noqa: F401 (re-exported: importable from here, as before the split)
    DEFAULT_CHUNK_EXAMPLES,
    DEFAULT_CHUNK_TASKS,
    SHIFT_SOLVE_COST_IN_EXAMPLES,
    SOLVE_COST_IN_EXAMPLES,
    _gather_buffer,
    _local,
    check_execution,
    chunk_costs,
    map_chunks,
    resolve_jobs,
    single_threaded_blas,
    task_chunks,
)
from ._statistics import (  # noqa: F401 (re-exported: importable from here, as before the split)
    DEFAULT_BLOCK_EXAMPLES,
    LIGHT_TASK_EXAMPLES,
    _split_gramian,
    chunk_statistics,
    global_gramian,
    prepared_inputs,
    weighted_statistics,
)


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
