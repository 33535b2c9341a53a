"""The automatic configuration applied to a DPALS fit: where the rule proposes a rank for explicit
ratings, the data decides by accounted private selection (issue 24).

:func:`privrec.tuning.auto_config` sees public inputs only. Whether the ratings carry interaction
structure at all shows only on held-out ratings: the released counts measure the noise, not the
structure, and a user's leave-one-out error on their own training ratings favours a part fitted
on them (measurements in docs/algorithms.md). So a private fit of explicit ratings that leaves
``factors`` and ``iterations`` to the rule, where the rule proposes a rank, compares the bias
model with that rank by :func:`privrec.tuning.select_private` (report-noisy-min over held-out
scores, Dwork & Roth 2014, Sec. 3.3; accounted as Papernot & Steinke, ICLR 2022, require) and
releases the winner with the whole procedure's ledger. Backends that do not run the selection
(Dask, Flower) fit the bias model there, with a warning.
"""

from __future__ import annotations

import warnings
from typing import Any

import scipy.sparse as sp

from .rule import SELECTION_RATING_CAP, selection_shares
from .selection import select_private

__all__ = ["backend_config", "fit_by_selection", "selects_rank"]


def selects_rank(model: Any, cfg: Any) -> bool:
    """Whether ``model`` (a DPALS with resolved settings ``cfg``) decides its rank by private
    selection: a private fit of explicit ratings whose rank and iterations are left to the rule,
    where the rule's public inputs admit a rank."""
    return bool(
        cfg.private and not cfg.implicit and cfg.factors > 0 and model.factors is None and model.iterations is None
    )


def backend_config(model: Any, shape: tuple[int, int], backend: str) -> Any:
    """The resolved settings of a fit on a backend that runs the pipeline but not the selection:
    where :func:`selects_rank` holds, the bias model's, with a warning (never below the private
    baselines; a rank must be asked for with ``factors`` and ``iterations``)."""
    cfg = model._resolve_config(shape)
    if not selects_rank(model, cfg):
        return cfg
    warnings.warn(
        f"on the {backend} backend the automatic configuration fits the private bias model (factors=0): "
        "choosing a rank needs private selection on held-out ratings, which runs on the local backend; "
        "pass factors= and iterations= to fit a rank here",
        UserWarning,
        stacklevel=4,
    )
    return model._resolve_config(shape, bias_model=True)


def fit_by_selection(model: Any, R: sp.csr_matrix, cfg: Any, show_progress: bool) -> Any:
    """The bias model against the rule's rank by :func:`~privrec.tuning.select_private`, with the
    shares and holdout of :func:`~privrec.tuning.rule.selection_shares` (public: the number of
    users, epsilon, delta), per-rating scores capped at
    :data:`~privrec.tuning.rule.SELECTION_RATING_CAP` held-out ratings per user and the label clip
    squared as the loss clip. The winning candidate, as fitted on the training parts, becomes
    ``model``'s release (its fitted attributes), with the whole procedure's ledger;
    ``selection_`` says what was compared and chosen."""
    from sklearn.base import clone

    base = clone(model).set_params(show_progress=False)
    candidates = [
        clone(base).set_params(factors=0, iterations=1),
        clone(base).set_params(factors=cfg.factors, iterations=cfg.iterations),
    ]
    shares = selection_shares(R.shape[0], cfg.epsilon, cfg.delta)
    if shares is None:  # the rule proposes a rank only where the selection can run
        raise RuntimeError("internal error: the automatic selection ran where the rule keeps the bias model")
    sel = select_private(
        candidates,
        R,
        epsilon=cfg.epsilon,
        delta=cfg.delta,
        random_state=model.random_state,
        show_progress=bool(show_progress),
        rating_cap=SELECTION_RATING_CAP,
        loss_clip=cfg.label_bound**2,
        **shares,
    )
    for name, value in vars(sel.best_estimator_).items():  # the fitted state (trailing underscore) is the release
        if name.endswith("_") and not name.startswith("__"):
            setattr(model, name, value)
    model.selection_["automatic"] = True
    return model
