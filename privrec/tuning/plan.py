"""One plan per fit: what a DPALS fit will do, decided once from public inputs (the configure stage).

:func:`plan_fit` resolves a DPALS's settings for the public shape (the declared roster and
catalogue sizes), decides whether the automatic selection runs (:func:`privrec.tuning.auto`),
calibrates the noise and lists every labelled DpEvent the fit will record. The result, a
:class:`FitPlan`, is what every consumer reads instead of re-deriving it:

* ``DPALS.fit`` runs it (one fit with the plan's settings and calibration, or the selection's
  candidates) and checks its recorded events against ``plan.events``;
* the Dask driver and the Flower server run the same plan (the same candidates, shares, holdout
  and ledger);
* :class:`privrec.privacy.Budget` charges ``plan.events`` (the selection included), so a budget
  check is a check of the fit that will run;
* ``privrec fit --dry-run`` and ``DPALS.plan(X)`` show it before anything is spent.

A plan is public: it is computed from the settings, epsilon, delta, the rating range and the
shape only -- never from the ratings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..privacy.ledger import PrivacyLedger
from .auto import selection_candidates, selection_plan, selects_rank
from .selection import SelectionPlan

__all__ = ["FitPlan", "plan_fit"]


@dataclass(frozen=True)
class FitPlan:
    """What one fit of a private estimator will do (module docstring).

    ``kind``: ``"fit"`` (one fit with ``config`` at the ``calibration``'s noise scales) or
    ``"selection"`` (``selection`` among ``candidates``; ``config`` is then the template's settings
    before the selection); ``events``: every ``(label, DpEvent)`` the fit records, in order;
    ``keys``: what per-user sampling and the held-out split are keyed on (``"user ids"`` or
    ``"row positions"`` of a bare matrix)."""

    estimator: str
    n_users: int
    n_items: int
    epsilon: float
    delta: float
    accountant: str
    config: Any
    calibration: Any
    events: tuple
    selection: SelectionPlan | None = None
    candidates: tuple = ()
    keys: str = "row positions"

    @property
    def kind(self) -> str:
        return "selection" if self.selection is not None else "fit"

    @property
    def private(self) -> bool:
        return not math.isinf(self.epsilon)

    def planned_epsilon(self) -> float:
        """Epsilon of ``events`` at ``delta`` by the plan's accountant (inf when non-private)."""
        if not self.private:
            return math.inf
        ledger = PrivacyLedger()
        for label, event in self.events:
            ledger.record(label, event)
        return float(ledger.epsilon(self.delta, self.accountant))

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary (what ``privrec fit --dry-run`` prints)."""
        from .._io import json_safe

        out: dict[str, Any] = {
            "estimator": self.estimator,
            "kind": self.kind,
            "n_users": self.n_users,
            "n_items": self.n_items,
            "target_epsilon": self.epsilon if self.private else "inf",
            "delta": self.delta,
            "accountant": self.accountant,
            "planned_epsilon": self.planned_epsilon() if self.private else "inf",
            "keys": self.keys,
            "config": json_safe(self.config.as_dict()) if hasattr(self.config, "as_dict") else None,
            "events": [{"label": label, "event": type(ev).__name__} for label, ev in self.events],
        }
        if self.calibration is not None:
            out["noise_scales"] = {"count": self.calibration.count_scale, "train": self.calibration.train_scale}
        if self.selection is not None:
            out["selection"] = json_safe(self.selection.as_dict())
            out["candidates"] = [
                {"factors": int(c.factors), "iterations": int(c.iterations), "epsilon": e}
                for c, e in zip(self.candidates, self.selection.epsilons, strict=True)
            ]
        return out


#: plans already made in this process, by (estimator, parameters, shape, keys, bias_model): a plan
#: is a pure function of public inputs, and a selection plans each candidate before fitting it
_PLANS: dict[tuple, FitPlan] = {}
_MAX_PLANS = 64
#: parameters that do not change a plan (the noise seed is drawn from at fit time only)
_NOT_PLANNED = frozenset({"random_state", "show_progress", "num_threads"})


def _plan_key(model: Any, shape, keys: str, bias_model: bool) -> tuple | None:
    try:
        params = model.get_params(deep=False)
    except Exception:  # pragma: no cover - not a scikit-learn estimator
        return None
    items = tuple(sorted((k, repr(v)) for k, v in params.items() if k not in _NOT_PLANNED))
    return (type(model).__qualname__, items, None if shape is None else tuple(int(v) for v in shape), keys, bias_model)


def plan_fit(
    model: Any, shape: tuple[int, int] | None, *, keys: str = "row positions", bias_model: bool = False
) -> FitPlan:
    """The :class:`FitPlan` of ``model`` on a ``shape`` matrix (:func:`make_plan`), remembered for
    the same public inputs (a selection plans each candidate, then fits it)."""
    key = _plan_key(model, shape, keys, bias_model)
    if key is not None and key in _PLANS:
        model._resolve_config(shape, bias_model=bias_model)  # every parameter checked, as without the memo
        return _PLANS[key]
    plan = make_plan(model, shape, keys=keys, bias_model=bias_model)
    if key is not None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
    return plan


def make_plan(
    model: Any, shape: tuple[int, int] | None, *, keys: str = "row positions", bias_model: bool = False
) -> FitPlan:
    """The :class:`FitPlan` of ``model`` (a DPALS) fitted on a ``shape = (n_users, n_items)`` matrix.

    ``shape``: the public roster and catalogue sizes (``None``: the default planning shape of
    ``DPALS._resolve_config``). ``keys``: see :class:`FitPlan`. ``bias_model``: the private bias
    model's settings instead of the automatic selection (a backend that cannot run it yet)."""
    cfg = model._resolve_config(shape, bias_model=bias_model)
    n_users, n_items = (int(v) for v in shape) if shape is not None else (0, 0)
    name = type(model).__name__
    if not bias_model and selects_rank(model, cfg) and shape is not None:
        candidates = selection_candidates(model, cfg)
        sel = selection_plan(candidates, shape, cfg)
        events = sel.events()
        if events is None:  # pragma: no cover - the automatic selection never refits
            raise RuntimeError("internal error: the automatic selection's events cannot be planned")
        return FitPlan(
            name, n_users, n_items, cfg.epsilon, cfg.delta, cfg.accountant, cfg, None, tuple(events), sel,
            tuple(candidates), keys,
        )  # fmt: skip
    pipe = model._pipeline(cfg, None)
    cal = pipe.calibrate()
    planned: tuple
    if not pipe.private:
        import dp_accounting

        planned = ((f"{name} fit at epsilon = inf (non-private)", dp_accounting.NonPrivateDpEvent()),)
    else:
        planned = tuple(pipe.planned_events(cal.count_scale, cal.train_scale))
    return FitPlan(name, n_users, n_items, cfg.epsilon, cfg.delta, cfg.accountant, cfg, cal, planned, keys=keys)
