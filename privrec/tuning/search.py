"""What a scikit-learn search over a private estimator spent (issue 40): the composition of every
release the search made, and why no (epsilon, delta) covers its result.

``GridSearchCV(DPALS(epsilon=1), grid, cv=RatingSplitCV(5)).fit(ratings)`` fits every candidate on
every fold and refits the best one. Each fit is a release at its own (epsilon, delta), and the
candidates share their users, so the releases compose: :func:`search_privacy` composes every fit's
planned events (the same events each fit records, from :meth:`DPALS.plan`, which reads the settings
and the shape only) with the accountant the fits calibrate with. That composition is what the
search *released*; it is not a guarantee for what the search *chose*. ``best_params_`` is picked
from exact held-out scores, a function of the private data that no mechanism noised, so
``best_estimator_`` carries no finite (epsilon, delta) at all. :func:`privrec.tuning.select_private`
makes the same choice with noisy scores under one ledger.
"""

from __future__ import annotations

import math
from typing import Any

from sklearn.base import clone
from sklearn.model_selection import ParameterGrid, ParameterSampler, check_cv

from ..privacy.ledger import PrivacyLedger

__all__ = ["search_privacy"]

UNACCOUNTED = (
    "the choice among candidates (best_params_, and so best_estimator_) is computed from exact held-out "
    "scores of the private data: no (epsilon, delta) covers it, whatever each fit's own epsilon. "
    "privrec.tuning.select_private makes the choice with noisy scores under one ledger"
)


def _rows(X, index):
    """The rows ``index`` of a fit input (a DataFrame by position, an array or a sparse matrix by row)."""
    iloc = getattr(X, "iloc", None)
    if iloc is not None:
        return iloc[index]
    return X[index]


def _candidates(search) -> list[dict]:
    """The parameter settings the search tries: those it tried (fitted), else the ones it will try."""
    results = getattr(search, "cv_results_", None)
    if results is not None:
        return [dict(p) for p in results["params"]]
    if hasattr(search, "param_grid"):
        return [dict(p) for p in ParameterGrid(search.param_grid)]
    if hasattr(search, "param_distributions"):
        return [
            dict(p)
            for p in ParameterSampler(search.param_distributions, search.n_iter, random_state=search.random_state)
        ]
    raise TypeError(
        f"{type(search).__name__} is not a scikit-learn search over parameter settings "
        "(no cv_results_, param_grid or param_distributions)"
    )


def search_privacy(search, X, y=None, *, groups=None, delta: float | None = None) -> dict[str, Any]:
    """The privacy spent by a scikit-learn search (``GridSearchCV``, ``RandomizedSearchCV``) over a
    private estimator on ``X``, fitted or not.

    Every candidate setting is planned on every training fold of ``search.cv`` and, when the search
    refits, once more on all of ``X`` with the best setting (a fitted search) or the costliest one
    (an unfitted search: the refit's setting is not known yet). The events of all these fits are
    composed in one :class:`~privrec.privacy.ledger.PrivacyLedger`.

    Returns a dict: ``"fits"`` (one row per fit: setting, fold, its own epsilon), ``"n_fits"``,
    ``"epsilon_released"`` (the composition of every release at ``delta``; default the estimator's),
    ``"delta"``, ``"accountant"``, ``"epsilon"`` (``inf``: the search's result has no finite
    guarantee) and ``"unaccounted"`` (why). With a non-private setting among the fits
    ``"epsilon_released"`` is ``inf`` too.

    ``X``, ``y``, ``groups``: what was (or will be) passed to ``search.fit``; only shapes and the
    fold indices are read.
    """
    base = search.estimator
    if not hasattr(base, "plan"):
        raise TypeError(f"{type(base).__name__} has no plan(): search_privacy needs a privrec private estimator")
    target_delta = float(base.delta if delta is None else delta)
    cv = check_cv(search.cv, y, classifier=False)
    folds = [train for train, _ in cv.split(X, y, groups)]
    settings = _candidates(search)
    ledger = PrivacyLedger()
    fits: list[dict[str, Any]] = []
    accountant = None

    def plan_one(params: dict, data, label: str, fold) -> float:
        nonlocal accountant
        plan = clone(base).set_params(**params).plan(data)
        if not plan.private:
            fits.append({"params": params, "fold": fold, "epsilon": math.inf})
            return math.inf
        accountant = accountant or plan.accountant
        for event_label, event in plan.events:
            ledger.record(f"{label}: {event_label}", event)
        for term_label, d in plan.delta_terms:
            ledger.spend_delta(f"{label}: {term_label}", d)
        eps = plan.planned_epsilon()
        fits.append({"params": params, "fold": fold, "epsilon": eps})
        return eps

    own: list[float] = []
    for i, params in enumerate(settings):
        for k, train in enumerate(folds):
            own.append(plan_one(params, _rows(X, train), f"candidate {i}, fold {k}", k))
    if getattr(search, "refit", False):
        if hasattr(search, "best_params_"):
            plan_one(dict(search.best_params_), X, "refit", "refit")
        elif settings:  # not fitted yet: the refit is one of the settings; bound it by the costliest
            costliest = settings[max(range(len(settings)), key=lambda i: own[i * len(folds)] if folds else 0.0)]
            plan_one(costliest, X, "refit (costliest setting: the best is not known yet)", "refit")
    if any(math.isinf(f["epsilon"]) for f in fits):
        released = math.inf  # a non-private fit released its data
    else:
        released = float(ledger.epsilon(target_delta, accountant)) if ledger.entries else 0.0
    return {
        "fits": fits,
        "n_fits": len(fits),
        "epsilon_released": released,
        "delta": target_delta,
        "accountant": accountant or "none",
        "epsilon": math.inf,  # the choice is unaccounted (module docstring)
        "unaccounted": UNACCOUNTED,
    }
