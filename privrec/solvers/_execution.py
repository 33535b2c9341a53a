"""How the solvers' batched work runs: contiguous task chunks bounded in tasks and examples, a
thread pool with single-threaded BLAS (longest chunks started first), and each worker thread's
reusable gather buffer.

Parallelism comes from :func:`map_chunks`' threads, not from BLAS: small (d x d) products and the
GIL-free LAPACK kernels of :mod:`privrec.solvers._linalg` run one per thread.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

try:  # threadpoolctl ships with scikit-learn (a privrec dependency)
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - degrade to the BLAS default threading
    threadpool_limits = None

DEFAULT_CHUNK_TASKS = 2048
DEFAULT_CHUNK_EXAMPLES = 1 << 18


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


_local = threading.local()


def _gather_buffer(n: int, d: int, dtype) -> np.ndarray:
    """A per-thread reusable (n, d) buffer: avoids re-faulting fresh pages for every chunk."""
    buf = getattr(_local, "buf", None)
    need = n * d
    if buf is None or buf.dtype != dtype or buf.size < need:
        buf = np.empty(max(need, 1), dtype=dtype)
        _local.buf = buf
    return buf[:need].reshape(n, d)
