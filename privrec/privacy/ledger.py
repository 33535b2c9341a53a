"""The privacy ledger: labelled DpEvents composed by a real accountant.

Every noisy release in privrec is recorded here with a human-readable label ("item counts",
"ALS step 3: local Gramians"). epsilon is always computed by ``dp_accounting`` over the recorded
events -- RDP by default (orders 1.1..10.9 in steps of 0.1 plus 11..63, as the authors'
reference implementation of Krichene et al., ICML 2023), PLD on request -- never typed in.
``report()`` returns a JSON record from which anyone can recompute epsilon with plain
``dp_accounting`` (see :func:`epsilon_from_report`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp
from dp_accounting.privacy_accountant import NeighboringRelation

from .._io import json_safe
from .._validation import check_delta

DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [round(1.1 + 0.1 * i, 1) for i in range(99)] + [float(o) for o in range(11, 64)]
)

_NEIGHBOURING = {
    "add_or_remove_one": NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": NeighboringRelation.REPLACE_ONE,
}

# ---------------------------------------------------------------------------------------------
# Event (de)serialisation: a small, explicit JSON schema so reports can be recomputed anywhere.
# ---------------------------------------------------------------------------------------------

_LEAF_EVENTS = {
    "gaussian": (dp_accounting.GaussianDpEvent, ("noise_multiplier",)),
    "laplace": (dp_accounting.LaplaceDpEvent, ("noise_multiplier",)),
    "no_op": (dp_accounting.NoOpDpEvent, ()),
    "non_private": (dp_accounting.NonPrivateDpEvent, ()),
}


def event_to_dict(event: dp_accounting.DpEvent) -> dict[str, Any]:
    """Serialise a DpEvent (the subset privrec emits) to plain JSON types."""
    for name, (cls, fields) in _LEAF_EVENTS.items():
        if type(event) is cls:
            return {"type": name, **{f: float(getattr(event, f)) for f in fields}}
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return {"type": "self_composed", "count": int(event.count), "event": event_to_dict(event.event)}
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return {"type": "composed", "events": [event_to_dict(e) for e in event.events]}
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        return {
            "type": "poisson_sampled",
            "sampling_probability": float(event.sampling_probability),
            "event": event_to_dict(event.event),
        }
    if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
        return {
            "type": "sampled_without_replacement",
            "source_dataset_size": int(event.source_dataset_size),
            "sample_size": int(event.sample_size),
            "event": event_to_dict(event.event),
        }
    if isinstance(event, dp_accounting.SingleEpochTreeAggregationDpEvent):
        steps = event.step_counts
        return {
            "type": "single_epoch_tree_aggregation",
            "noise_multiplier": float(event.noise_multiplier),
            "step_counts": [int(s) for s in np.atleast_1d(steps)],
        }
    raise TypeError(f"privrec cannot serialise DpEvent of type {type(event).__name__}")


def event_from_dict(d: dict[str, Any]) -> dp_accounting.DpEvent:
    """Inverse of :func:`event_to_dict`."""
    t = d["type"]
    if t in _LEAF_EVENTS:
        cls, fields = _LEAF_EVENTS[t]
        return cls(*[d[f] for f in fields])
    if t == "self_composed":
        return dp_accounting.SelfComposedDpEvent(event_from_dict(d["event"]), int(d["count"]))
    if t == "composed":
        return dp_accounting.ComposedDpEvent([event_from_dict(e) for e in d["events"]])
    if t == "poisson_sampled":
        return dp_accounting.PoissonSampledDpEvent(float(d["sampling_probability"]), event_from_dict(d["event"]))
    if t == "sampled_without_replacement":
        return dp_accounting.SampledWithoutReplacementDpEvent(
            int(d["source_dataset_size"]), int(d["sample_size"]), event_from_dict(d["event"])
        )
    if t == "single_epoch_tree_aggregation":
        steps = d["step_counts"]
        return dp_accounting.SingleEpochTreeAggregationDpEvent(
            float(d["noise_multiplier"]), steps[0] if len(steps) == 1 else list(steps)
        )
    raise ValueError(f"unknown DpEvent type in report: {t!r}")


def _is_non_private(event) -> bool:
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
        return True
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return any(_is_non_private(e) for e in event.events)
    inner = getattr(event, "event", None)
    return inner is not None and _is_non_private(inner)


#: Above this RDP epsilon the PLD accountant is not run (its grid grows like epsilon / interval and
#: took minutes and gigabytes at epsilon ~ 1e3); the RDP value, also a valid upper bound, is used.
PLD_MAX_EPSILON = 500.0


def pld_interval(rdp_epsilon: float) -> float:
    """Value-discretisation interval of the PLD accountant for an event whose RDP epsilon is given.

    dp_accounting's PLD is pessimistic (the discretised loss is rounded up), so a coarser grid
    only loosens the bound, never breaks it. 1e-3 changes epsilon by < 1e-5 at epsilon <= 100
    against 1e-4 (measured) and is 5-15x cheaper; the grid is widened in proportion to epsilon
    beyond 50 so the cost stays bounded at large epsilon.
    """
    return max(1e-3, 2e-5 * float(rdp_epsilon))


def epsilon_of_event(
    event: dp_accounting.DpEvent,
    delta: float,
    accountant: str = "rdp",
    orders=DEFAULT_RDP_ORDERS,
    neighboring: str = "add_or_remove_one",
    pld_discretization: float | None = None,
) -> float:
    """epsilon(delta) of one (possibly composed) event, with the RDP or PLD accountant.

    ``pld_discretization=None`` picks the PLD grid from the RDP epsilon (:func:`pld_interval`);
    where the RDP epsilon exceeds :data:`PLD_MAX_EPSILON` the PLD accountant is skipped and the
    RDP epsilon returned (both are upper bounds; PLD is only the tighter one).
    """
    delta = check_delta(delta)
    if _is_non_private(event):
        return math.inf
    relation = _NEIGHBOURING[neighboring]
    if accountant not in ("rdp", "pld"):
        raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    if accountant == "pld" and pld_discretization is None:
        try:
            eps_rdp = epsilon_of_event(event, delta, "rdp", orders, neighboring)
        except Exception:  # e.g. Poisson-sampled events under replace-one: RDP cannot compose them
            eps_rdp = None
        if eps_rdp is not None and (not math.isfinite(eps_rdp) or eps_rdp > PLD_MAX_EPSILON):
            return eps_rdp
        pld_discretization = pld_interval(eps_rdp if eps_rdp is not None else 0.0)
    if accountant == "rdp":
        acc = rdp.RdpAccountant(orders=list(orders), neighboring_relation=relation)
    else:
        acc = pld.PLDAccountant(neighboring_relation=relation, value_discretization_interval=pld_discretization)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


@dataclass
class LedgerEntry:
    label: str
    event: dp_accounting.DpEvent
    meta: dict[str, Any] = field(default_factory=dict)


class PrivacyLedger:
    """Records labelled DpEvents and answers epsilon(delta) over their composition.

    Parameters
    ----------
    orders : RDP orders used by the RDP accountant.
    neighboring : ``"add_or_remove_one"`` (default; user-level DP = remove all of one user's data)
        or ``"replace_one"``.
    """

    def __init__(self, orders=DEFAULT_RDP_ORDERS, neighboring: str = "add_or_remove_one"):
        if neighboring not in _NEIGHBOURING:
            raise ValueError(f"neighboring must be one of {sorted(_NEIGHBOURING)}, got {neighboring!r}")
        self.orders = tuple(float(o) for o in orders)
        self.neighboring = neighboring
        self.entries: list[LedgerEntry] = []

    def record(self, label: str, event: dp_accounting.DpEvent, **meta) -> dp_accounting.DpEvent:
        """Append one labelled event (``meta`` is free JSON-able context: sensitivity, std, ...)."""
        if not isinstance(event, dp_accounting.DpEvent):
            raise TypeError(f"expected a dp_accounting DpEvent, got {type(event).__name__}")
        event_to_dict(event)  # fail early on events the report could not carry
        self.entries.append(LedgerEntry(str(label), event, dict(meta)))
        return event

    def extend(self, other: PrivacyLedger, prefix: str = "") -> None:
        for e in other.entries:
            self.entries.append(LedgerEntry(prefix + e.label, e.event, dict(e.meta)))

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def events(self) -> list[dp_accounting.DpEvent]:
        return [e.event for e in self.entries]

    def composed_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.ComposedDpEvent(self.events)

    def epsilon(self, delta: float, accountant: str = "rdp") -> float:
        """epsilon(delta) of everything recorded so far (0 for an empty ledger)."""
        check_delta(delta)
        if not self.entries:
            return 0.0
        return epsilon_of_event(self.composed_event(), delta, accountant, self.orders, self.neighboring)

    def report(self, delta: float, include_pld: bool = True, accountant: str = "rdp") -> dict[str, Any]:
        """JSON-serialisable record of every event and the epsilon of each accountant.

        ``epsilon`` is the value of ``accountant`` (the one the noise was calibrated with), also
        named in ``report["accountant"]``; ``epsilon_rdp`` and (with ``include_pld``) ``epsilon_pld``
        are both given. ``epsilon_from_report(report, report["accountant"])`` recomputes it.
        """
        delta = check_delta(delta)
        if accountant not in ("rdp", "pld"):
            raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
        include_pld = include_pld or accountant == "pld"
        out: dict[str, Any] = {
            "delta": delta,
            "neighboring": self.neighboring,
            "rdp_orders": list(self.orders),
            "events": [
                {"label": e.label, "event": event_to_dict(e.event), **({"meta": e.meta} if e.meta else {})}
                for e in self.entries
            ],
            "epsilon_rdp": self.epsilon(delta, "rdp"),
        }
        if include_pld:
            try:
                out["epsilon_pld"] = self.epsilon(delta, "pld")
            except Exception as exc:  # e.g. an event type the PLD accountant does not support
                if accountant == "pld":
                    raise
                out["epsilon_pld"] = None
                out["epsilon_pld_error"] = f"{type(exc).__name__}: {exc}"
        out["accountant"] = accountant
        out["epsilon"] = out[f"epsilon_{accountant}"]
        return json_safe(out)

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> PrivacyLedger:
        ledger = cls(
            orders=report.get("rdp_orders", DEFAULT_RDP_ORDERS),
            neighboring=report.get("neighboring", "add_or_remove_one"),
        )
        for e in report["events"]:
            ledger.record(e["label"], event_from_dict(e["event"]), **e.get("meta", {}))
        return ledger


def epsilon_from_report(report: dict[str, Any], accountant: str = "rdp") -> float:
    """Recompute epsilon from a ``report()`` with plain dp_accounting (independent check)."""
    events = [event_from_dict(e["event"]) for e in report["events"]]
    if not events:
        return 0.0
    return epsilon_of_event(
        dp_accounting.ComposedDpEvent(events),
        report["delta"],
        accountant,
        report.get("rdp_orders", DEFAULT_RDP_ORDERS),
        report.get("neighboring", "add_or_remove_one"),
    )
