"""The memory a command's whole run will need -- its fit, the evaluation, the yardsticks -- estimated
from the split's shape and the settings before anything is fitted (issue 44), and refused with one
line when it exceeds the machine's limit (:func:`privrec.evaluation.memory.check_run_memory`): a
refused ``privrec fit`` spends no budget and writes nothing.

The stages follow what :func:`privrec.commands.fit._fit` runs, in order: the fit; the evaluation of
the fitted model (every test user ranked in chunks of the evaluation memory budget); the
non-private ALS yardstick's fit and its ranking (on the sample of test users
:func:`privrec.commands._yardsticks.evaluation_sample` draws), each beside the fitted model. The
estimate reads exact sizes of the data, as the fit's own check does: it is printed among the
non-private figures and shapes no release.
"""

from __future__ import annotations

import os

import numpy as np

from ..evaluation.memory import RunStage, check_run_memory, evaluation_memory, model_memory, ratings_memory
from ..models.fit_memory import fit_memory_of, planned_factors
from ._yardsticks import (
    _want_als,
    _yardstick_seed,
    evaluation_sample,
    ranking_yardstick_params,
    yardstick_als_params,
)

__all__ = ["check_command_memory", "run_stages"]

_EVAL_HINT = "lower $PRIVREC_EVAL_MEMORY_MB (the ranking's score buffers, in MiB)"
_YARDSTICK_HINT = "pass --no-compare-als, or --yardstick-users N to rank fewer test users"


def _evaluated_users(split) -> int:
    """Test users the evaluation ranks (an upper bound: every user with a held-out rating)."""
    held = split.test if split.protocol == "random" else split.targets
    if held is None:
        return 0
    return int(np.count_nonzero(np.diff(held.indptr)))


def process_memory() -> int:
    """This process's resident memory now, in bytes (``/proc/self/statm``; elsewhere the peak so far,
    ``getrusage``): the interpreter, the libraries and the data already loaded, which every stage holds."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # pragma: no cover - non-Linux
        import resource
        import sys

        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        return peak if sys.platform == "darwin" else peak * 1024


def run_stages(args, split, model, params: dict, method: str, evaluate: bool, fit: bool = True) -> list[RunStage]:
    """The stages of a ``privrec fit`` (``fit=True``) or ``privrec evaluate`` (``fit=False``, ``model``
    fitted) run on ``split`` with ``model`` (unfitted for a fit), as :class:`RunStage` estimates."""
    train = split.train
    n_users, n_items = (int(v) for v in train.shape)
    base = {
        "this process (libraries, loaded data)": process_memory(),
        "rating copies": ratings_memory(train, split.test, split.projection, split.history, split.targets),
    }
    stages = []
    if fit:
        factors = planned_factors(model, (n_users, n_items))
        stages.append(RunStage("the fit", {**base, **fit_memory_of(model, (n_users, n_items))}, "use fewer factors"))
    else:
        factors = int(np.asarray(model.item_factors_).shape[1])
    if not evaluate:
        return stages
    kept_users = n_users if getattr(model, "user_factors_", None) is not None or method == "als" else 0
    held = {**base, "the fitted model": model_memory(kept_users, n_items, factors)}
    n_eval = _evaluated_users(split)
    stages.append(RunStage("the evaluation", {**held, **evaluation_memory(n_eval, n_items, factors)}, _EVAL_HINT))
    if _want_als(args, method, train.nnz):
        from ..models import ALS

        explicit = split.protocol == "random"
        als = ALS(**yardstick_als_params(params, model, explicit))
        fits = [als]
        if explicit:  # the ranking yardstick: implicit-feedback ALS, at most the rank of all training ratings
            fits.append(ALS(**ranking_yardstick_params(train)))
        for m in fits:
            stages.append(
                RunStage("the non-private ALS yardstick's fit", {**held, **fit_memory_of(m, (n_users, n_items))},
                         _YARDSTICK_HINT)
            )  # fmt: skip
        sample = evaluation_sample(n_eval, n_items, _yardstick_seed(args), getattr(args, "yardstick_users", None))
        n_ranked = n_eval if sample is None else int(sample.size)
        f_als = max(int(m.factors) for m in fits)
        stages.append(
            RunStage(
                "the non-private ALS yardstick's ranking",
                {**held, "the yardstick model": model_memory(n_users, n_items, f_als),
                 **evaluation_memory(n_ranked, n_items, f_als)},
                _YARDSTICK_HINT,
            )
        )  # fmt: skip
    return stages


def check_command_memory(stages: list[RunStage], what: str) -> dict:
    """``stages`` (:func:`run_stages`) checked against the limit (``FitMemoryError`` naming the largest
    stage, raised before anything runs); returns the estimate with ``peak_mb`` for the non-private footer."""
    est = check_run_memory(stages, what)
    est["peak_mb"] = round(est["peak_bytes"] / (1 << 20), 1)
    return est
