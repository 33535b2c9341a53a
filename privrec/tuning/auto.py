"""The automatic configuration applied to a DPALS fit: where the rule proposes a rank for explicit
ratings, the data decides by accounted private selection (issue 24).

:func:`privrec.tuning.auto_config` sees public inputs only. Whether the ratings carry interaction
structure at all shows only on held-out ratings: the released counts measure the noise, not the
structure, and a user's leave-one-out error on their own training ratings favours a part fitted
on them (measurements in docs/algorithms.md). So a private fit of explicit ratings that leaves
``factors`` and ``iterations`` to the rule, where the rule proposes a rank, compares the bias
model with that rank by private selection (report-noisy-min over held-out scores, Dwork & Roth
2014, Sec. 3.3; accounted as Papernot & Steinke, ICLR 2022, require) and releases the winner with
the whole procedure's ledger. The candidates and the selection's plan come from here
(:func:`selection_candidates`, :func:`selection_plan`), once, in :func:`privrec.tuning.plan.plan_fit`;
every backend (local, Dask, Flower) runs that plan (:func:`privrec.tuning.selection.run_selection`).
"""

from __future__ import annotations

from typing import Any

from sklearn.base import clone

from .rule import SELECTION_RATING_CAP, selection_shares
from .selection import PrivateSelection, SelectionData, SelectionPlan, plan_selection, run_selection

__all__ = ["adopt_selection", "run_automatic_selection", "selection_candidates", "selection_plan", "selects_rank"]


def selects_rank(model: Any, cfg: Any) -> bool:
    """Whether ``model`` (a DPALS with resolved settings ``cfg``) decides its rank by private
    selection: a private fit of explicit ratings whose rank and iterations are left to the rule,
    where the rule's public inputs admit a rank."""
    return bool(
        cfg.private and not cfg.implicit and cfg.factors > 0 and model.factors is None and model.iterations is None
    )


def selection_candidates(model: Any, cfg: Any) -> list:
    """The bias model and the rule's rank (``cfg.factors``, ``cfg.iterations``), simplest first,
    as unfitted clones of ``model``."""
    base = clone(model).set_params(show_progress=False)
    return [
        clone(base).set_params(factors=0, iterations=1),
        clone(base).set_params(factors=cfg.factors, iterations=cfg.iterations),
    ]


def selection_plan(candidates: list, shape: tuple[int, int], cfg: Any) -> SelectionPlan:
    """The automatic selection's :class:`~privrec.tuning.selection.SelectionPlan`: the shares and
    holdout of :func:`~privrec.tuning.rule.selection_shares` (public: the number of users, epsilon,
    delta), per-rating scores capped at :data:`~privrec.tuning.rule.SELECTION_RATING_CAP` held-out
    ratings per user and the label clip squared as the loss clip."""
    shares = selection_shares(int(shape[0]), cfg.epsilon, cfg.delta)
    if shares is None:  # the rule proposes a rank only where the selection can run
        raise RuntimeError("internal error: the automatic selection ran where the rule keeps the bias model")
    return plan_selection(
        candidates,
        shape,
        epsilon=cfg.epsilon,
        delta=cfg.delta,
        rating_cap=SELECTION_RATING_CAP,
        loss_clip=cfg.label_bound**2,
        **shares,
    )


def adopt_selection(model: Any, sel: PrivateSelection) -> Any:
    """Make the winner's release ``model``'s -- one assignment: a DPALS holds its fit's release as one
    object, ``release_`` (:mod:`privrec.models.release`), and the winner's already carries the whole
    procedure's ledger (:func:`~privrec.tuning.selection.run_selection`); ``config_`` states the
    target epsilon and the epsilon spent (the candidates' own epsilons are under ``selection_``)."""
    model.release_ = sel.best_estimator_.release_
    model.selection_["automatic"] = True
    config = dict(getattr(model, "config_", None) or {})
    config["epsilon_candidate"] = config.get("epsilon")
    config["epsilon"] = float(model.epsilon)
    config["epsilon_spent"] = float(sel.ledger_.epsilon(float(model.delta), getattr(model, "accountant", "pld")))
    model.config_ = config
    return model


def run_automatic_selection(model: Any, plan: Any, data: SelectionData, show_progress: bool) -> Any:
    """Run ``plan`` (a :class:`privrec.tuning.plan.FitPlan` of kind ``"selection"``) over ``data``
    and make the winner ``model``'s release (:func:`adopt_selection`)."""
    sel = run_selection(
        plan.selection,
        list(plan.candidates),
        data,
        random_state=model.random_state,
        show_progress=bool(show_progress),
        keys=plan.keys,
    )
    return adopt_selection(model, sel)
