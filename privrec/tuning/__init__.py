"""Configuration and accounted private model selection (the "configure" stage of the data flow).

:func:`auto_config`, :func:`empirical_bayes_item_ridge`, :func:`spectral_ridge` and
:func:`bias_gramian_ratio` are the
automatic rule of :class:`~privrec.models.DPALS` (public inputs and released statistics only;
:mod:`privrec.tuning.rule`).

:func:`plan_fit` is the one plan of a DPALS fit that every backend runs and the budget charges
(:mod:`privrec.tuning.plan`).

:func:`select_private` compares candidate private estimators on a held-out loss released under
DP and releases the winner (refitted, or as fitted), with every release in one ledger (see
:mod:`privrec.tuning.selection`). :func:`search_privacy` states what a scikit-learn search over a
private estimator released, and why its choice has no guarantee (:mod:`privrec.tuning.search`).
"""

from .plan import FitPlan, plan_fit
from .rule import SPECTRAL_RIDGE_SCALE, auto_config, bias_gramian_ratio, empirical_bayes_item_ridge, spectral_ridge
from .search import search_privacy
from .selection import PrivateSelection, SelectionPlan, holdout_mask, plan_selection, run_selection, select_private

__all__ = [
    "SPECTRAL_RIDGE_SCALE",
    "FitPlan",
    "PrivateSelection",
    "SelectionPlan",
    "auto_config",
    "bias_gramian_ratio",
    "empirical_bayes_item_ridge",
    "holdout_mask",
    "plan_fit",
    "plan_selection",
    "run_selection",
    "search_privacy",
    "select_private",
    "spectral_ridge",
]
