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

**Undeclared axes (add/remove DP).** A fit given a plain ratings file -- no declared user roster,
no declared item catalogue -- has no public shape: how many users there are and which items
anybody rated are statistics of the data. :func:`plan_axes` then plans their releases first
(:mod:`privrec.allocation.partition`): a noisy user count (:data:`USER_COUNT_SHARE` of rho) where
the roster is undeclared, and a private item selection (:data:`ITEM_SELECTION_SHARE` of rho and
:data:`ITEM_SELECTION_DELTA_SHARE` of delta) where the catalogue is undeclared, with, for implicit
feedback and the automatic head restriction, the noisy catalogue size
(:data:`CATALOGUE_SIZE_SHARE` of rho). The fit's own plan
is made after them, from the noisy count and the selected items, at the (epsilon, delta) they
leave (:attr:`AxesPlan.epsilon`, :attr:`AxesPlan.delta`: every release is a Gaussian mechanism,
so their rho add up to at most the target's). Before the releases the plan is *two-stage*
(:func:`two_stage_plan`): the axes' events and one Gaussian bounding the fit, which is what a
budget checks; :meth:`FitPlan.covers` checks a fit's report against it. The guarantee is then
stated for adding or removing one user.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..allocation.partition import CATALOGUE_SIZE_LABEL, ITEM_SELECTION_LABEL, USER_COUNT_LABEL
from ..privacy import gaussian_event
from ..privacy.calibration import gaussian_rho as rho_of_event
from ..privacy.ledger import PrivacyLedger, event_to_dict
from .auto import selection_candidates, selection_plan, selects_rank
from .rule import gaussian_rho
from .selection import SelectionPlan, epsilon_of_rho

__all__ = ["AxesPlan", "FitPlan", "plan_axes", "plan_fit", "two_stage_plan"]

#: share of rho for the noisy user count of an undeclared roster (the count only feeds the
#: rule's thresholds and the popularity prior: a 1% share is within a few percent of the count
#: from about 1,000 users at epsilon = 1)
USER_COUNT_SHARE = 0.01
#: share of rho for the private item selection of an undeclared catalogue
ITEM_SELECTION_SHARE = 0.1
#: share of rho for the noisy catalogue size (implicit feedback with the automatic head
#: restriction, whose head is a fraction of the catalogue: the std is ``ITEM_SELECTION_MAX_ITEMS``
#: times the multiplier, about 5,400 / 1,300 / 420 items at epsilon = 1 / 5 / 20)
CATALOGUE_SIZE_SHARE = 0.02
#: share of delta for the selection's threshold (the rest is the accountant's)
ITEM_SELECTION_DELTA_SHARE = 0.25
#: items per user in the selection's sample (each sampled item gets 1 / sqrt(t) of the user's weight)
ITEM_SELECTION_MAX_ITEMS = 200
#: label of the bound event of a two-stage plan
FIT_BOUND_LABEL = "the fit after the axes' releases (bound)"
#: label of the selection's delta term
ITEM_SELECTION_DELTA_LABEL = "item selection: threshold"


@dataclass(frozen=True)
class AxesPlan:
    """The releases that make undeclared axes public, and what they leave to the fit.

    ``roster`` / ``catalogue``: whether each axis was declared; ``user_multiplier`` /
    ``item_multiplier``: the Gaussian multipliers of the noisy user count and of the item
    selection (``None``: that axis is declared); ``item_delta``: the selection's delta term;
    ``epsilon`` / ``delta``: the target the fit is calibrated to after them;
    ``catalogue_multiplier``: the multiplier of the noisy catalogue size (implicit feedback with
    the automatic head restriction on a selected axis; ``None``: not released)."""

    roster: bool
    catalogue: bool
    user_multiplier: float | None
    item_multiplier: float | None
    item_delta: float
    max_items: int
    epsilon: float
    delta: float
    catalogue_multiplier: float | None = None

    @property
    def relation(self) -> str:
        """The neighbouring relation the guarantee is stated for."""
        return "zero-out" if self.roster else "add/remove"

    def events(self) -> list:
        out = []
        if self.user_multiplier is not None:
            out.append((USER_COUNT_LABEL, gaussian_event(self.user_multiplier)))
        if self.item_multiplier is not None:
            out.append((ITEM_SELECTION_LABEL, gaussian_event(self.item_multiplier)))
        if self.catalogue_multiplier is not None:
            out.append((CATALOGUE_SIZE_LABEL, gaussian_event(self.catalogue_multiplier)))
        return out

    def delta_terms(self) -> list:
        return [(ITEM_SELECTION_DELTA_LABEL, self.item_delta)] if self.item_multiplier is not None else []

    def as_dict(self) -> dict[str, Any]:
        return {
            "relation": self.relation,
            "roster": "declared" if self.roster else "noisy count",
            "catalogue": "declared" if self.catalogue else "private selection",
            "user_count_multiplier": self.user_multiplier,
            "item_selection_multiplier": self.item_multiplier,
            "item_selection_delta": self.item_delta if self.item_multiplier is not None else None,
            "item_selection_max_items": self.max_items if self.item_multiplier is not None else None,
            "catalogue_size_multiplier": self.catalogue_multiplier,
            "fit_epsilon": self.epsilon,
            "fit_delta": self.delta,
        }


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
    #: the releases of undeclared axes (``None``: roster and catalogue declared)
    axes: AxesPlan | None = None
    #: ``(label, delta)`` spent outside the events (the item selection's threshold)
    delta_terms: tuple = ()
    #: the noisy user count the plan was made from (``None``: the declared roster's size)
    users_released: float | None = None

    @property
    def kind(self) -> str:
        if self.selection is not None:
            return "selection"
        return "two-stage" if self.axes is not None and self.calibration is None else "fit"

    @property
    def public_users(self) -> float:
        """The user count every rule of the fit reads: the noisy count, or the declared roster's size."""
        return float(self.users_released) if self.users_released is not None else float(self.n_users)

    def covers(self, report: dict) -> bool:
        """Whether a fit's privacy report is within this plan: the same events in order (and delta
        terms), or -- for a two-stage plan -- the axes' events and delta terms first, then events
        whose total rho is at most the bound's."""
        recorded = [(e["label"], e["event"]) for e in report.get("events", [])]
        terms = [(t["label"], float(t["delta"])) for t in report.get("delta_terms") or []]
        if terms != [(label, float(d)) for label, d in self.delta_terms]:
            return False
        if self.kind != "two-stage":
            return recorded == [(label, event_to_dict(ev)) for label, ev in self.events]
        head = [(label, event_to_dict(ev)) for label, ev in self.events[:-1]]
        if recorded[: len(head)] != head:
            return False
        from ..privacy.ledger import event_from_dict

        try:
            rest = sum(rho_of_event(event_from_dict(ev)) for _, ev in recorded[len(head) :])
        except TypeError:  # an event that is not a plain Gaussian cannot be bounded this way
            return False
        return rest <= rho_of_event(self.events[-1][1]) * (1 + 1e-9)

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
        for label, d in self.delta_terms:
            ledger.spend_delta(label, d)
        return float(ledger.epsilon(self.delta, self.accountant))

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary (what ``privrec fit --dry-run`` prints)."""
        from .._io import json_safe

        out: dict[str, Any] = {
            "estimator": self.estimator,
            "kind": self.kind,
            "n_users": self.n_users if self.axes is None or self.axes.roster else "released (noisy count)",
            "n_items": self.n_items if self.axes is None or self.axes.catalogue else "released (private selection)",
            "target_epsilon": self.epsilon if self.private else "inf",
            "delta": self.delta,
            "accountant": self.accountant,
            "planned_epsilon": self.planned_epsilon() if self.private else "inf",
            "keys": self.keys,
            "config": json_safe(self.config.as_dict()) if hasattr(self.config, "as_dict") else None,
            "events": [{"label": label, "event": type(ev).__name__} for label, ev in self.events],
        }
        if self.axes is not None:
            out["axes"] = json_safe(self.axes.as_dict())
        if self.delta_terms:
            out["delta_terms"] = [{"label": label, "delta": d} for label, d in self.delta_terms]
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


def _plan_key(
    model: Any, shape, keys: str, bias_model: bool, target, selected_items: bool = False, catalogue_size=None
) -> tuple | None:
    try:
        params = model.get_params(deep=False)
    except Exception:  # pragma: no cover - not a scikit-learn estimator
        return None
    items = tuple(sorted((k, repr(v)) for k, v in params.items() if k not in _NOT_PLANNED))
    return (
        type(model).__qualname__,
        items,
        None if shape is None else tuple(int(v) for v in shape),
        keys,
        bias_model,
        None if target is None else tuple(float(v) for v in target),
        bool(selected_items),
        None if catalogue_size is None else float(catalogue_size),
    )


def plan_fit(
    model: Any,
    shape: tuple[int, int] | None,
    *,
    keys: str = "row positions",
    bias_model: bool = False,
    target: tuple | None = None,
    selected_items: bool = False,
    catalogue_size: float | None = None,
) -> FitPlan:
    """The :class:`FitPlan` of ``model`` on a ``shape`` matrix (:func:`make_plan`), remembered for
    the same public inputs (a selection plans each candidate, then fits it). ``target``: the
    (epsilon, delta) left to the fit after the axes' releases (:class:`AxesPlan`);
    ``selected_items``: the item axis is their private selection; ``catalogue_size``: the released
    noisy size of the catalogue it was selected from (or ``None``)."""
    key = _plan_key(model, shape, keys, bias_model, target, selected_items, catalogue_size)
    if key is not None and key in _PLANS:
        model._resolve_config(
            shape, bias_model=bias_model, target=target, selected_items=selected_items, catalogue_size=catalogue_size
        )
        return _PLANS[key]
    plan = make_plan(
        model, shape, keys=keys, bias_model=bias_model, target=target, selected_items=selected_items,
        catalogue_size=catalogue_size,
    )  # fmt: skip
    if key is not None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
    return plan


def make_plan(
    model: Any,
    shape: tuple[int, int] | None,
    *,
    keys: str = "row positions",
    bias_model: bool = False,
    target: tuple | None = None,
    selected_items: bool = False,
    catalogue_size: float | None = None,
) -> FitPlan:
    """The :class:`FitPlan` of ``model`` (a DPALS) fitted on a ``shape = (n_users, n_items)`` matrix.

    ``shape``: the public roster and catalogue sizes (``None``: the default planning shape of
    ``DPALS._resolve_config``). ``keys``: see :class:`FitPlan`. ``bias_model``: the private bias
    model's settings instead of the automatic selection (a backend that cannot run it yet)."""
    cfg = model._resolve_config(
        shape, bias_model=bias_model, target=target, selected_items=selected_items, catalogue_size=catalogue_size
    )
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


def plan_axes(model: Any, *, roster: bool, catalogue: bool) -> AxesPlan | None:
    """The releases of the undeclared axes of a private ``model``'s fit (module docstring), or
    ``None`` when both are declared or the fit is not private. Public inputs only: epsilon,
    delta, the accountant, the feedback type and ``item_frac`` (whether the automatic head
    restriction may need the catalogue's size)."""
    if roster and catalogue:
        return None
    cfg = model._resolve_config(None)  # every parameter checked; epsilon and delta as given
    if not cfg.private:
        return None
    eps, delta = float(cfg.epsilon), float(cfg.delta)
    item_delta = 0.0 if catalogue else ITEM_SELECTION_DELTA_SHARE * delta
    fit_delta = delta - item_delta
    rho = gaussian_rho(eps, fit_delta) * 0.995  # a margin for the PLD discretisation of the parts
    user_share = 0.0 if roster else USER_COUNT_SHARE
    item_share = 0.0 if catalogue else ITEM_SELECTION_SHARE
    # the implicit rule's head is a fraction of the catalogue: its size is released with the selection
    size_share = CATALOGUE_SIZE_SHARE if (not catalogue and cfg.implicit and model.item_frac is None) else 0.0
    fit_epsilon = epsilon_of_rho((1.0 - user_share - item_share - size_share) * rho, fit_delta)
    return AxesPlan(
        roster=bool(roster),
        catalogue=bool(catalogue),
        user_multiplier=None if roster else math.sqrt(0.5 / (user_share * rho)),
        item_multiplier=None if catalogue else math.sqrt(0.5 / (item_share * rho)),
        item_delta=item_delta,
        max_items=ITEM_SELECTION_MAX_ITEMS,
        epsilon=fit_epsilon,
        delta=fit_delta,
        catalogue_multiplier=math.sqrt(0.5 / (size_share * rho)) if size_share else None,
    )


def two_stage_plan(model: Any, axes: AxesPlan, keys: str = "user ids") -> FitPlan:
    """The plan of a fit with undeclared axes before their releases: the axes' events, then one
    Gaussian bounding every event of the fit planned after them (its target's rho), and the
    selection's delta term; ``config`` holds the settings resolved at the default planning shape."""
    cfg = model._resolve_config(None, target=(axes.epsilon, axes.delta))
    # the fit is calibrated to (epsilon, delta) of the AxesPlan, i.e. its events' rho is at most that
    # of one Gaussian there; the bound takes 0.5% more (the PLD discretisation of a calibration), which
    # the 0.995 margin of plan_axes leaves room for
    bound = gaussian_event(math.sqrt(0.5 / (1.005 * gaussian_rho(axes.epsilon, axes.delta))))
    events = (*axes.events(), (FIT_BOUND_LABEL, bound))
    return FitPlan(
        type(model).__name__,
        0,
        0,
        float(model.epsilon),
        float(model.delta),
        cfg.accountant,
        cfg,
        None,
        events,
        keys=keys,
        axes=axes,
        delta_terms=tuple(axes.delta_terms()),
    )
