"""How much memory an evaluation holds, and the check of a whole run -- fit, evaluation, yardsticks --
against the machine's limit before anything of its size is allocated.

A fit checks its own peak (:func:`privrec.solvers.memory.check_fit_memory`), but what a user runs
is more than a fit: ``privrec fit --evaluate`` keeps the released model while it ranks every test
user and fits and ranks its non-private yardsticks. :func:`check_run_memory` takes the run's stages
(each a ``{component: bytes}`` estimate of what is alive at once in it) and refuses the run when
its largest stage exceeds :func:`privrec._validation.memory_limit`, naming that stage, its largest
components and what would shrink it -- before the fit starts, so a refused run spends no privacy
budget and writes nothing.

The evaluation's own part (:func:`evaluation_memory`) follows the streaming top-k of
:mod:`privrec.evaluation.topk`: users are scored in chunks of :func:`~privrec.evaluation.topk.chunk_rows`
rows, so its score buffers are at most the evaluation memory budget (512 MiB by default,
``$PRIVREC_EVAL_MEMORY_MB``) whatever the number of users and items. Like the fit's estimate, it
counts the dominant terms (small vectors are left out): it is meant to refuse a run that cannot fit,
not to predict the resident set size to the byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import FitMemoryError, _gib, check_int, memory_limit
from .topk import BYTES_PER_ENTRY, chunk_rows

__all__ = ["RunStage", "check_run_memory", "evaluation_memory", "model_memory", "ratings_memory", "run_memory"]

#: bytes per stored rating of a CSR matrix held by a run: the float32 value and the int32 column
#: index, twice (the matrix and the transposed / reindexed copy the fits and projections make)
_BYTES_PER_RATING = 16


@dataclass(frozen=True)
class RunStage:
    """One stage of a run: what is alive at once in it (``parts``: component -> bytes) and a
    ``hint`` saying what would shrink it."""

    name: str
    parts: dict[str, int]
    hint: str = ""

    @property
    def total(self) -> int:
        return sum(int(v) for v in self.parts.values())


def ratings_memory(*matrices) -> int:
    """Bytes of the sparse rating matrices a run holds (``None`` entries skipped): per stored rating
    :data:`_BYTES_PER_RATING`, per row an int64 pointer."""
    out = 0
    for m in matrices:
        if m is None:
            continue
        out += int(m.nnz) * _BYTES_PER_RATING + (int(m.shape[0]) + 1) * 8
    return out


def model_memory(n_users: int, n_items: int, factors: int, itemsize: int = 4) -> int:
    """Bytes of a fitted factor model's arrays: ``(n_users + n_items) x (factors + 1)`` values (the
    factors with the bias column; ``n_users = 0`` for a release that keeps no user factors) plus the
    items' count and exposure vectors."""
    u = check_int(n_users, "n_users", 0)
    i = check_int(n_items, "n_items", 0)
    w = check_int(factors, "factors", 0) + 1
    s = check_int(itemsize, "itemsize", 1)
    return (u + i) * w * s + 2 * i * 8


def evaluation_memory(n_users: int, n_items: int, factors: int, *, budget: int | None = None) -> dict[str, int]:
    """Estimated peak bytes of ranking ``n_users`` users over ``n_items`` items with a ``factors``-factor
    model (the streaming top-k of :func:`privrec.evaluation.metrics.ranking_metrics`), by component:

    * ``ranking score buffers``: one chunk of :func:`~privrec.evaluation.topk.chunk_rows` users
      (``budget`` bytes, default :func:`~privrec.evaluation.topk.memory_budget`) times
      :data:`~privrec.evaluation.topk.BYTES_PER_ENTRY` bytes per (user, item) entry -- at most the
      budget, or one row when a single user's scores exceed it;
    * ``fold-in user factors``: every evaluated user's float32 projection and its scaled copy;
    * ``ranking item terms``: the float32 item factors as ranked (scaled) and the item term.
    """
    u = check_int(n_users, "n_users", 0)
    i = check_int(n_items, "n_items", 0)
    w = check_int(factors, "factors", 0) + 1
    rows = max(1, min(u, chunk_rows(i, budget))) if u else 0
    return {
        "ranking score buffers": rows * i * BYTES_PER_ENTRY,
        "fold-in user factors": 2 * u * w * 4,
        "ranking item terms": i * (w + 1) * 4,
    }


def _stages(stages) -> tuple[list[RunStage], RunStage]:
    out = [s if isinstance(s, RunStage) else RunStage(*s) for s in stages]
    if not out:
        raise ValueError("a run needs at least one stage")
    return out, max(out, key=lambda s: s.total)


def run_memory(stages, limit: int | None = None) -> dict:
    """The estimate of a run of ``stages`` (:class:`RunStage` values or ``(name, parts[, hint])``
    tuples, in the run's order): ``{"peak_bytes", "peak_stage", "limit_bytes", "stages": {name: bytes}}``
    -- the peak is the largest stage's total (what is alive at once in it)."""
    stages, worst = _stages(stages)
    cap = memory_limit() if limit is None else check_int(limit, "limit", 1)
    totals: dict[str, int] = {}
    for s in stages:  # a stage that runs twice (two yardstick fits) counts at its larger estimate
        totals[s.name] = max(totals.get(s.name, 0), s.total)
    return {"peak_bytes": worst.total, "peak_stage": worst.name, "limit_bytes": cap, "stages": totals}


def check_run_memory(stages, what: str = "this run", limit: int | None = None) -> dict:
    """Refuse a run whose largest stage is estimated above ``limit`` (default
    :func:`~privrec._validation.memory_limit`: ``$PRIVREC_MAX_ARRAY_BYTES`` or half the physical
    memory) with a one-line :class:`~privrec._validation.FitMemoryError` (a ``ValueError``) naming the
    stage, its largest components and its hint; else return :func:`run_memory`'s estimate."""
    stages, worst = _stages(stages)
    est = run_memory(stages, limit)
    if worst.total > est["limit_bytes"]:
        top = sorted(worst.parts.items(), key=lambda kv: -kv[1])[:4]
        detail = ", ".join(f"{name} {_gib(n)}" for name, n in top if n)
        hint = f"; {worst.hint}" if worst.hint else ""
        raise FitMemoryError(
            f"{what} would need about {_gib(worst.total)} at its peak, in {worst.name} ({detail}), more than "
            f"the limit of {_gib(est['limit_bytes'])} (set PRIVREC_MAX_ARRAY_BYTES to change it){hint}; "
            "nothing was started"
        )
    return est
