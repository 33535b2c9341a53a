"""What a :class:`~privrec.models.DPALS` fit will do, from public inputs only: the body of
:meth:`DPALS.plan <privrec.models.DPALS.plan>` (the shape of a ``fit`` input and its declarations,
never its ratings, to a :class:`privrec.tuning.plan.FitPlan`, or the two-stage plan of a fit that
first releases its undeclared axes).
"""

from __future__ import annotations

from ..tuning.plan import plan_axes, plan_fit, two_stage_plan
from .inputs import fit_input, item_axis_source, user_axis_source, with_item_catalogue, with_user_roster


def plan_of(model, X=None, *, shape: tuple[int, int] | None = None, users=None, items=None):
    """:meth:`DPALS.plan <privrec.models.DPALS.plan>` of ``model``: the plan of a fit on ``X`` (any
    ``fit`` input with its ``users=`` / ``items=`` declarations) or on ``shape=(n_users, n_items)``."""
    keys = "row positions"
    if X is not None:
        if shape is not None:
            raise ValueError("give X or shape, not both")
        if users is not None:
            X = with_user_roster(X, users)
        if items is not None:
            X = with_item_catalogue(X, items)
        R, user_ids, _, _ = fit_input(X)
        shape = (int(R.shape[0]), int(R.shape[1]))
        keys = "user ids" if user_ids is not None else keys
        axes = plan_axes(model, roster=user_axis_source(X) != "data", catalogue=item_axis_source(X) != "data")
        if axes is not None and model._releases_axes:  # the fit's own plan follows the axes' releases
            return two_stage_plan(model, axes, keys)  # (a bound until then)
    elif shape is not None:
        if len(tuple(shape)) != 2 or any(isinstance(v, bool) or int(v) != v or v < 1 for v in shape):
            raise ValueError(f"shape must be (n_users, n_items) of positive integers, got {shape!r}")
        shape = (int(shape[0]), int(shape[1]))
    return plan_fit(model, shape, keys=keys)
