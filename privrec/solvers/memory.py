"""How much memory a fit will need, estimated before any array is allocated (from the public shape
and settings), and the refusal of a fit whose estimate exceeds the machine's memory.

It lives with what it estimates: the batched exact solves (:mod:`privrec.solvers.ridge`), the
chunked private item step (:mod:`privrec.solvers._linalg`) and the noise blocks
(:mod:`privrec.solvers._base`).
"""

from __future__ import annotations

from .._validation import FitMemoryError, _gib, check_int, memory_limit
from ._base import NOISE_BLOCK
from ._linalg import DEFAULT_CHUNK_TASKS, resolve_jobs
from .ridge import _MAX_CHUNK_ROWS, chunk_slots, default_threads

__all__ = ["check_fit_memory", "fit_memory"]

#: copies of each side's factor matrix alive at once during a half-step (the fixed side, its
#: augmented [F, 1] copy and the padded copy the gather reads; the solved side's previous value,
#: its warm start, the solve's output and its contiguous slices), in units of (rows x (d + 1))
_FACTOR_COPIES = 4
#: arrays the size of one chunk's gathered neighbour block in flight per worker thread of the
#: batched ridge solves (the block, its scaled / rotated copy, the products and the solves)
_RIDGE_BLOCKS = 4


def fit_memory(
    n_users,
    n_items,
    factors,
    itemsize,
    *,
    item_step: str = "ridge",
    gravity: bool = False,
    ridge_positive: bool = True,
    num_threads: int | None = None,
) -> dict[str, int]:
    """Estimated peak bytes of an ALS / DP-ALS fit, by component (exact Python-int arithmetic).

    ``item_step``: ``"ridge"`` (the batched exact solves of :mod:`privrec.solvers.ridge`: ALS,
    DPALS at epsilon = inf), ``"ssp"`` or ``"noisy_gd"`` (the private item steps, which form one
    d x d Gramian per item of a chunk). Every dimension counts the bias / constant column
    (``w = factors + 1``). Components:

    * ``factor matrices``: ``4 (n_users + n_items) w`` values (the copies alive in a half-step);
    * ``per-user solve workspace``: per worker thread of the ridge engine, 4 gathered neighbour
      blocks of ``max(256, 4 MiB / (w * itemsize))`` padded slots x ``w`` (its chunking,
      :func:`privrec.solvers.ridge.chunk_slots`), plus, when a row's ridge may be 0
      (``ridge_positive=False``; the dual solve is then off), that many (w x w) systems;
    * ``gravity Gramian`` (``gravity=True``): the w x w float64 Gramian, its eigenvectors and the
      solver's copies (4 w^2 x 8 bytes);
    * private item step: ``item Gramians`` -- the (tasks, w, w) statistics of the chunks in flight
      (``chunk_tasks // 256`` whole noise blocks of 256 items per chunk, one chunk per worker thread
      of :func:`privrec.solvers._linalg.map_chunks`), and for SSP ``Gramian noise and solve copies``
      -- per thread, the upper-triangle noise of one 256-item block and the copies of <= 256 systems
      its solves make; with ``gravity``, the released global Gramian and its noise.

    An estimate of the dominant terms (small vectors are left out); it is meant to refuse a fit
    that cannot fit in memory before it allocates anything, not to predict the RSS to the byte.
    """

    if item_step not in ("ridge", "ssp", "noisy_gd"):
        raise ValueError(f"item_step must be 'ridge', 'ssp' or 'noisy_gd', got {item_step!r}")
    u = check_int(n_users, "n_users", 0)
    i = check_int(n_items, "n_items", 0)
    d = check_int(factors, "factors", 0)
    s = check_int(itemsize, "itemsize", 1)
    w = d + 1
    threads = default_threads() if num_threads is None else max(1, int(num_threads))
    slots = chunk_slots(w, s)
    ridge = _RIDGE_BLOCKS * slots * w * s
    if not ridge_positive:
        ridge += min(_MAX_CHUNK_ROWS, slots) * w * w * s
    out = {
        "factor matrices": _FACTOR_COPIES * (u + i) * w * s,
        "per-user solve workspace": threads * ridge,
    }
    if gravity:
        out["gravity Gramian"] = 4 * w * w * 8
    if item_step != "ridge" and i:
        jobs = resolve_jobs(num_threads)
        per_chunk = max(1, DEFAULT_CHUNK_TASKS // NOISE_BLOCK) * NOISE_BLOCK
        n_chunks = -(-i // per_chunk)
        in_flight = min(i, min(jobs, n_chunks) * per_chunk)
        out["item Gramians"] = in_flight * w * w * s
        if item_step == "ssp":
            block = min(i, NOISE_BLOCK) * min(jobs, n_chunks)
            out["Gramian noise and solve copies"] = block * (w * (w + 1) // 2 + w * w) * s
        if gravity:
            out["global Gramian and its noise"] = 2 * w * w * s
    return out


def check_fit_memory(
    n_users, n_items, factors, itemsize, what: str = "the fit", limit: int | None = None, **options
) -> int:
    """Raise :class:`FitMemoryError` (a ``ValueError``) naming ``factors`` when :func:`fit_memory`'s
    estimated peak exceeds ``limit`` (default :func:`memory_limit`); else return the estimate.

    Called once per fit, before anything of the fit's size is allocated (a 10**6-factor DPALS on a
    2000 x 80 matrix used to grow to 24 GB and be killed by the kernel). ``options`` are those of
    :func:`fit_memory`.
    """
    parts = fit_memory(n_users, n_items, factors, itemsize, **options)
    need = sum(parts.values())
    cap = memory_limit() if limit is None else check_int(limit, "limit", 1)
    if need > cap:
        top = sorted(parts.items(), key=lambda kv: -kv[1])
        detail = ", ".join(f"{name} {_gib(n)}" for name, n in top if n)
        raise FitMemoryError(
            f"{what} with factors={int(factors):,} on {int(n_users):,} users x {int(n_items):,} items would need "
            f"about {_gib(need)} at its peak ({detail}), more than the limit of {_gib(cap)} "
            f"(set PRIVREC_MAX_ARRAY_BYTES to change it); use fewer factors or less data"
        )
    return need
