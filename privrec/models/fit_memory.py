"""The fit-memory estimate of a model, from its public settings and the shape it will be fitted on:
the one derivation of :func:`privrec.solvers.memory.fit_memory`'s options that each model's own
check (``DPALS``: :func:`privrec.models.dpals_fit.run_fit`; ``ALS.fit``) and a whole run's check
before the fit (:func:`privrec.evaluation.memory.check_run_memory`, called by ``privrec fit`` and
``privrec evaluate``) share.
"""

from __future__ import annotations

import numpy as np

from ..solvers.memory import fit_memory

__all__ = ["als_memory_options", "dpals_memory_options", "fit_memory_of", "planned_factors"]


def dpals_memory_options(cfg, num_threads) -> dict:
    """:func:`~privrec.solvers.memory.fit_memory`'s options of a DPALS fit with resolved settings ``cfg``."""
    return {
        "item_step": cfg.solver if cfg.private else "ridge",
        "gravity": cfg.unobserved_weight > 0,
        "ridge_positive": cfg.user_reg > 0 and (cfg.private or cfg.reg > 0),
        "num_threads": num_threads,
    }


def als_memory_options(model) -> dict:
    """:func:`~privrec.solvers.memory.fit_memory`'s options of an :class:`~privrec.models.ALS` fit."""
    return {
        "gravity": model.feedback == "implicit" or model.unobserved_weight > 0,
        "ridge_positive": model.regularization > 0,
        "num_threads": model.num_threads,
    }


def planned_factors(model, shape: tuple[int, int]) -> int:
    """The largest number of factors a fit of ``model`` on ``shape`` uses: its own, or for a DPALS the
    largest of its plan's settings and candidates (a selection fits each candidate)."""
    planner = getattr(model, "plan", None)
    if planner is None:
        return int(getattr(model, "factors", 0) or 0)
    plan = planner(shape=tuple(shape))
    return max([int(plan.config.factors)] + [int(c.factors) for c in plan.candidates])


def fit_memory_of(model, shape: tuple[int, int]) -> dict[str, int]:
    """:func:`~privrec.solvers.memory.fit_memory` (bytes by component) of fitting ``model`` -- a
    :class:`~privrec.models.DPALS` (its plan on ``shape``: settings, candidates) or an
    :class:`~privrec.models.ALS` -- on an ``(n_users, n_items)`` matrix; ``{}`` for another estimator
    (an ``ImplicitALS`` wrapper estimates nothing here)."""
    n_users, n_items = (int(v) for v in shape)
    planner = getattr(model, "plan", None)
    if planner is not None:
        cfg = planner(shape=(n_users, n_items)).config
        factors = planned_factors(model, (n_users, n_items))
        return fit_memory(n_users, n_items, factors, cfg.dtype.itemsize, **dpals_memory_options(cfg, model.num_threads))
    if hasattr(model, "regularization") and hasattr(model, "feedback") and hasattr(model, "unobserved_weight"):
        itemsize = np.dtype(model.dtype).itemsize
        return fit_memory(n_users, n_items, int(model.factors), itemsize, **als_memory_options(model))
    return {}
