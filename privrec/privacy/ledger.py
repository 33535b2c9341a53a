"""The privacy ledger: labelled DpEvents composed by a real accountant.

Every noisy release in privrec is recorded here with a human-readable label ("item counts",
"ALS step 3: local Gramians"). epsilon is always computed by ``dp_accounting`` over the recorded
events -- never typed in -- with the PLD accountant by default (the one the models calibrate with;
see :meth:`PrivacyLedger.default_accountant`) or the RDP accountant (orders 1.1..10.9 in steps of
0.1 plus 11..63, as the authors' reference implementation of Krichene et al., ICML 2023).
``report()`` returns a JSON record from which anyone can recompute epsilon with plain
``dp_accounting`` (see :func:`epsilon_from_report`).

**One accounting function for calibration and reports.** Both go through :func:`epsilon_of_event`,
which first rewrites the event into a canonical form (:func:`canonical_event`: plain Gaussians
merged into one, identical events gathered, a fixed order), so the nested composition a calibration
builds and the flat list a ledger records give bit-identical epsilons; the PLD grid is then a
function of that canonical event alone (:func:`pld_epsilon`: refined until it is at most 1% of the
epsilon it measures). A calibrated noise scale whose epsilon is <= the target therefore reports
an epsilon <= the target. The PLD accountant resolves delta down to :data:`PLD_MIN_DELTA` only.
"""

from __future__ import annotations

import json
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

#: Smallest delta the PLD accountant resolves. dp_accounting truncates the tails of every
#: privacy-loss distribution at mass 1e-15 and counts that mass against delta: at delta <= 1e-16 it
#: returns epsilon = inf for any noise (a calibration then adds ~1000x too much noise), and at
#: 1e-15 / 1e-14 it overstates epsilon by 1-3% / 0.05%. From 1e-13 on (100x the truncated mass,
#: room for the tails of many distinct events) a Gaussian's epsilon is within 1e-4 of the exact one.
PLD_MIN_DELTA = 1e-13

#: The PLD grid is refined until it is at most this fraction of the epsilon it measures.
PLD_RELATIVE_INTERVAL = 1e-2

#: The PLD grid is never refined below this (only events with epsilon < ~1e-10 would ask for it).
PLD_MIN_INTERVAL = 1e-12

#: The PLD grid is never refined to more than about this many points (see :func:`pld_loss_width`):
#: at a large delta (say 0.4) a tiny epsilon goes with a wide privacy-loss distribution, and a grid
#: of 1% of epsilon would take gigabytes. At a usual delta (< 1e-3) the bound never binds.
PLD_MAX_POINTS = 200_000

# standard deviations kept on each side of a Gaussian by dp_accounting (tail mass 1e-15)
_GAUSSIAN_TAIL_SDS = 8.0


def pld_interval(rdp_epsilon: float) -> float:
    """Starting value-discretisation interval of the PLD accountant for an event whose RDP epsilon is given.

    dp_accounting's PLD is pessimistic (the discretised loss is rounded up), so a coarser grid
    only loosens the bound, never breaks it. 1e-3 changes epsilon by < 1e-5 at epsilon <= 100
    against 1e-4 (measured) and is 5-15x cheaper; the grid is widened in proportion to epsilon
    beyond 50 so the cost stays bounded at large epsilon. Below epsilon ~ 0.1 :func:`pld_epsilon`
    refines it (a 1e-3 grid puts a floor of ~5e-4 under any epsilon).
    """
    return max(1e-3, 2e-5 * float(rdp_epsilon))


def check_pld_delta(delta: float, name: str = "delta") -> float:
    """``delta`` checked for the PLD accountant: ``ValueError`` (naming ``name`` and the minimum)
    below :data:`PLD_MIN_DELTA`."""
    d = check_delta(delta, name)
    if d < PLD_MIN_DELTA:
        raise ValueError(
            f"{name}={d:g} is below {PLD_MIN_DELTA:g}, the smallest delta the PLD accountant resolves "
            f"(dp_accounting truncates each privacy-loss tail at 1e-15, so smaller deltas give epsilon = inf "
            f"or a loose bound); use {name} >= {PLD_MIN_DELTA:g}, or accountant='rdp'"
        )
    return d


def _event_key(event: dp_accounting.DpEvent) -> str:
    """A deterministic sort key of an event (its JSON form, or its repr for foreign event types)."""
    try:
        return json.dumps(event_to_dict(event), sort_keys=True)
    except TypeError:
        return repr(event)


def _gather(event, count: int, gaussians: list[float], others: dict[str, list]) -> None:
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return
    if type(event) is dp_accounting.GaussianDpEvent:
        z = float(event.noise_multiplier)
        if math.isinf(z):
            return
        gaussians.append(count / (z * z))
        return
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        _gather(event.event, count * int(event.count), gaussians, others)
        return
    if isinstance(event, dp_accounting.ComposedDpEvent):
        for e in event.events:
            _gather(e, count, gaussians, others)
        return
    key = _event_key(event)
    if key in others:
        others[key][1] += count
    else:
        others[key] = [event, count]


def canonical_event(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """The same privacy loss as ``event`` in a canonical form, whatever the nesting or order.

    * every plain Gaussian (inside compositions and self-compositions) is merged into **one**
      ``GaussianDpEvent`` with ``1 / z^2 = sum_k count_k / z_k^2``: the composition of Gaussian
      mechanisms *is* a Gaussian mechanism (mu-GDP composes exactly, under either relation), so
      this is exact -- and one discretised distribution instead of one per release;
    * every other event is gathered with its identical copies into one ``SelfComposedDpEvent``;
    * the parts are put in a fixed order (composition is commutative).

    No-op events are dropped (an event with nothing left is ``NoOpDpEvent``). Non-private
    events are kept like any other (callers test for them first).
    """
    gaussians: list[float] = []
    others: dict[str, list] = {}
    _gather(event, 1, gaussians, others)
    parts: list[dp_accounting.DpEvent] = []
    rho = math.fsum(gaussians)  # exactly rounded: independent of the order of the releases
    if rho > 0:
        parts.append(dp_accounting.GaussianDpEvent(1.0 / math.sqrt(rho)))
    for key in sorted(others):
        e, n = others[key]
        parts.append(e if n == 1 else dp_accounting.SelfComposedDpEvent(e, n))
    if not parts:
        return dp_accounting.NoOpDpEvent()
    return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def pld_loss_width(event: dp_accounting.DpEvent, neighboring: str = "add_or_remove_one") -> float:
    """Upper bound on the width of the privacy-loss distribution the PLD accountant builds for a
    (canonical) event, so the number of grid points is about ``width / interval``.

    A Gaussian of multiplier z keeps +-8 standard deviations of a loss whose standard deviation is
    mu = s / z (s = 1, or 2 under replace-one as dp_accounting takes it): 16 mu; a Laplace of
    parameter b has its loss in [-s / b, s / b]; sampling only narrows the loss; a k-fold
    composition at most adds k widths. ``inf`` for any other event (its grid is then not refined).
    """
    s = 2.0 if neighboring == "replace_one" else 1.0
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return 0.0
    if type(event) is dp_accounting.GaussianDpEvent:
        return 2.0 * _GAUSSIAN_TAIL_SDS * s / float(event.noise_multiplier)
    if type(event) is dp_accounting.LaplaceDpEvent:
        return 2.0 * s / float(event.noise_multiplier)
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        return pld_loss_width(event.event, neighboring)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return int(event.count) * pld_loss_width(event.event, neighboring)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return math.fsum(pld_loss_width(e, neighboring) for e in event.events)
    return math.inf


def _pld_at(event, delta: float, relation, interval: float) -> float:
    acc = pld.PLDAccountant(neighboring_relation=relation, value_discretization_interval=interval)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _rdp_at(event, delta: float, orders, relation) -> float:
    acc = rdp.RdpAccountant(orders=list(orders), neighboring_relation=relation)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def pld_epsilon(
    event: dp_accounting.DpEvent,
    delta: float,
    orders=DEFAULT_RDP_ORDERS,
    neighboring: str = "add_or_remove_one",
) -> tuple[float, float | None]:
    """``(epsilon, interval)``: the PLD epsilon of a private event and the grid it was computed on.

    The grid is a function of the (canonical) event alone, so any two callers -- a calibration and
    a report -- get the same number: start from :func:`pld_interval` of the RDP epsilon, then while
    the grid is coarser than ``PLD_RELATIVE_INTERVAL`` x the epsilon just measured, recompute on the
    grid ``10^floor(log10(PLD_RELATIVE_INTERVAL x epsilon))`` (at most four refinements, none at
    epsilon >= 0.1), but never finer than :data:`PLD_MIN_INTERVAL` nor than about
    :data:`PLD_MAX_POINTS` points over the loss's width (:func:`pld_loss_width`). Every grid gives
    a valid (pessimistic) bound; refining only tightens it. ``interval`` is ``None`` when the RDP
    epsilon exceeds :data:`PLD_MAX_EPSILON` and that (valid, looser) RDP value is returned instead.
    """
    delta = check_pld_delta(delta)
    relation = _NEIGHBOURING[neighboring]
    event = canonical_event(event)
    try:
        eps_rdp: float | None = _rdp_at(event, delta, orders, relation)
    except Exception:  # e.g. Poisson-sampled events under replace-one: RDP cannot compose them
        eps_rdp = None
    if eps_rdp is not None and (not math.isfinite(eps_rdp) or eps_rdp > PLD_MAX_EPSILON):
        return eps_rdp, None
    interval = pld_interval(eps_rdp if eps_rdp is not None else 0.0)
    eps = _pld_at(event, delta, relation, interval)
    width = pld_loss_width(event, neighboring)
    finest = PLD_MIN_INTERVAL
    if math.isfinite(width) and width > 0:
        finest = max(finest, 10.0 ** math.ceil(math.log10(width / PLD_MAX_POINTS)))
    for _ in range(4):
        if not (0.0 < eps < math.inf) or interval <= PLD_RELATIVE_INTERVAL * eps or not math.isfinite(width):
            break
        finer = max(finest, 10.0 ** math.floor(math.log10(PLD_RELATIVE_INTERVAL * eps)))
        if finer >= interval:
            break
        interval = finer
        eps = _pld_at(event, delta, relation, interval)
    return eps, interval


def epsilon_of_event(
    event: dp_accounting.DpEvent,
    delta: float,
    accountant: str = "rdp",
    orders=DEFAULT_RDP_ORDERS,
    neighboring: str = "add_or_remove_one",
    pld_discretization: float | None = None,
) -> float:
    """epsilon(delta) of one (possibly composed) event, with the RDP or PLD accountant.

    The event is first put in canonical form (:func:`canonical_event`), so the result does not
    depend on how the releases are nested or ordered. ``pld_discretization=None`` picks the PLD
    grid from the event (:func:`pld_epsilon`); where the RDP epsilon exceeds
    :data:`PLD_MAX_EPSILON` the PLD accountant is skipped and the RDP epsilon returned (both are
    upper bounds; PLD is only the tighter one). PLD needs ``delta >= PLD_MIN_DELTA``.
    """
    delta = check_delta(delta)
    if accountant not in ("rdp", "pld"):
        raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    if _is_non_private(event):
        return math.inf
    relation = _NEIGHBOURING[neighboring]
    if accountant == "rdp":
        return _rdp_at(canonical_event(event), delta, orders, relation)
    if pld_discretization is None:
        return pld_epsilon(event, delta, orders, neighboring)[0]
    return _pld_at(canonical_event(event), check_pld_delta(delta), relation, float(pld_discretization))


def _legacy_pld_epsilon(event, delta: float, orders, neighboring: str) -> float:
    """The PLD epsilon of reports written before :func:`canonical_event` (no ``pld_discretization``
    key): the event as recorded, on the grid :func:`pld_interval` of its RDP epsilon. Kept so
    that such saved reports still recompute to the value they state."""
    relation = _NEIGHBOURING[neighboring]
    try:
        eps_rdp: float | None = _rdp_at(event, delta, orders, relation)
    except Exception:
        eps_rdp = None
    if eps_rdp is not None and (not math.isfinite(eps_rdp) or eps_rdp > PLD_MAX_EPSILON):
        return eps_rdp
    return _pld_at(event, delta, relation, pld_interval(eps_rdp if eps_rdp is not None else 0.0))


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

    ``epsilon()`` and ``report()`` use the PLD accountant unless told otherwise -- the accountant
    privrec's models calibrate with (see :meth:`default_accountant` for the two exceptions).
    """

    def __init__(self, orders=DEFAULT_RDP_ORDERS, neighboring: str = "add_or_remove_one"):
        if neighboring not in _NEIGHBOURING:
            raise ValueError(f"neighboring must be one of {sorted(_NEIGHBOURING)}, got {neighboring!r}")
        self.orders = tuple(float(o) for o in orders)
        self.neighboring = neighboring
        self.entries: list[LedgerEntry] = []
        #: ``(label, delta)`` spent outside the composed events: the failure probability of a
        #: release that is exact-DP only up to an event of probability ``delta`` (a partition
        #: selection's threshold). Epsilon is computed at ``delta - sum(delta_terms)``.
        self.delta_terms: list[tuple[str, float]] = []

    def spend_delta(self, label: str, delta: float) -> None:
        """Record ``delta`` spent by ``label`` outside the events (see :attr:`delta_terms`)."""
        d = float(delta)
        if not (math.isfinite(d) and 0.0 < d < 1.0):
            raise ValueError(f"a delta term must be in (0, 1), got {delta!r} for {label!r}")
        self.delta_terms.append((str(label), d))

    @property
    def delta_spent(self) -> float:
        """Sum of :attr:`delta_terms`."""
        return float(sum(d for _, d in self.delta_terms))

    def _events_delta(self, delta: float) -> float:
        """The delta left to the composed events once the delta terms are paid."""
        rest = float(delta) - self.delta_spent
        if self.delta_terms and not rest > 0:
            raise ValueError(
                f"delta={delta:g} does not cover the {self.delta_spent:g} spent by "
                f"{', '.join(label for label, _ in self.delta_terms)}"
            )
        return rest

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
        self.delta_terms.extend((prefix + label, d) for label, d in other.delta_terms)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def events(self) -> list[dp_accounting.DpEvent]:
        return [e.event for e in self.entries]

    def composed_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.ComposedDpEvent(self.events)

    def default_accountant(self) -> str:
        """The accountant used when none is named: ``"pld"`` (what :class:`~privrec.models.DPALS` and
        the private pipeline calibrate with), except ``"rdp"`` under ``replace_one`` (privrec's
        replace-one estimators calibrate with RDP, and dp_accounting's PLD takes a Gaussian's
        sensitivity as 2 under replace-one where its RDP takes 1) and for events the PLD accountant
        cannot compose (e.g. the tree aggregation of :mod:`privrec.privacy.tree`)."""
        if self.neighboring != "add_or_remove_one":
            return "rdp"
        acc = pld.PLDAccountant(neighboring_relation=_NEIGHBOURING[self.neighboring])
        return "pld" if all(acc.supports(e) for e in self.events) else "rdp"

    def _accountant(self, accountant: str | None) -> str:
        accountant = self.default_accountant() if accountant is None else accountant
        if accountant not in ("rdp", "pld"):
            raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
        return accountant

    def epsilon(self, delta: float, accountant: str | None = None) -> float:
        """epsilon(delta) of everything recorded so far (0 for an empty ledger); ``accountant=None``:
        :meth:`default_accountant` (PLD for the models' ledgers). PLD needs ``delta >= PLD_MIN_DELTA``."""
        check_delta(delta)
        accountant = self._accountant(accountant)
        if accountant == "pld":
            check_pld_delta(delta)
        if not self.entries:
            return 0.0
        delta = self._events_delta(delta)
        return epsilon_of_event(self.composed_event(), delta, accountant, self.orders, self.neighboring)

    def report(self, delta: float, include_pld: bool = True, accountant: str | None = None) -> dict[str, Any]:
        """JSON-serialisable record of every event and the epsilon of each accountant.

        ``epsilon`` is the value of ``accountant`` (the one the noise was calibrated with), also
        named in ``report["accountant"]``; ``epsilon_rdp`` and (with ``include_pld``) ``epsilon_pld``
        are both given, with ``pld_discretization`` the PLD grid (a function of the events alone,
        see :func:`pld_epsilon`; ``None`` where the RDP bound is reported instead).
        ``epsilon_from_report(report, report["accountant"])`` recomputes ``epsilon`` exactly.
        ``accountant=None``: :meth:`default_accountant`, or RDP with ``include_pld=False`` (the PLD
        accountant is then not run at all).
        """
        delta = check_delta(delta)
        if accountant is None and not include_pld:
            accountant = "rdp"
        accountant = self._accountant(accountant)
        if accountant == "pld":
            check_pld_delta(delta)
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
        if self.delta_terms:  # delta spent outside the events (epsilon is at delta minus their sum)
            out["delta_terms"] = [{"label": label, "delta": d} for label, d in self.delta_terms]
        if include_pld:
            try:
                out["epsilon_pld"], out["pld_discretization"] = self._pld(delta)
            except Exception as exc:  # e.g. an event type the PLD accountant does not support
                if accountant == "pld":
                    raise
                out["epsilon_pld"] = None
                out["epsilon_pld_error"] = f"{type(exc).__name__}: {exc}"
        out["accountant"] = accountant
        out["epsilon"] = out[f"epsilon_{accountant}"]
        return json_safe(out)

    def _pld(self, delta: float) -> tuple[float, float | None]:
        """``(epsilon_pld, grid)`` of the recorded events (grid ``None``: no PLD run was needed)."""
        check_pld_delta(delta)
        if not self.entries:
            return 0.0, None
        delta = self._events_delta(delta)
        event = self.composed_event()
        if _is_non_private(event):
            return math.inf, None
        return pld_epsilon(event, delta, self.orders, self.neighboring)

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> PrivacyLedger:
        ledger = cls(
            orders=report.get("rdp_orders", DEFAULT_RDP_ORDERS),
            neighboring=report_neighboring(report),
        )
        for e in report["events"]:
            ledger.record(e["label"], event_from_dict(e["event"]), **e.get("meta", {}))
        for term in report.get("delta_terms") or []:
            ledger.spend_delta(term["label"], term["delta"])
        return ledger


def report_neighboring(report: dict[str, Any]) -> str:
    """The accountant's composition mode of a report: ``"accountant_neighboring"`` (DPALS reports,
    which state their neighbouring relation separately) or ``"neighboring"`` (the relation itself,
    e.g. replace-one for the federated convex methods); add/remove when neither is given."""
    return str(report.get("accountant_neighboring", report.get("neighboring", "add_or_remove_one")))


def epsilon_from_report(report: dict[str, Any], accountant: str | None = None) -> float:
    """Recompute epsilon from a ``report()`` with plain dp_accounting (independent check).

    ``accountant=None`` (default) recomputes with the report's own accountant
    (``report["accountant"]``, RDP when absent), so the result equals ``report["epsilon"]``;
    ``"rdp"`` / ``"pld"`` recompute ``epsilon_rdp`` / ``epsilon_pld``. The PLD grid is re-derived from the events
    (:func:`pld_epsilon`), never read from the report (a forged grid could only make the check
    slower or looser); reports written before the canonical accounting (no ``pld_discretization``
    key) are recomputed the way they were computed.
    """
    if accountant is None:
        accountant = str(report.get("accountant", "rdp"))
    events = [event_from_dict(e["event"]) for e in report["events"]]
    if not events:
        return 0.0
    event = dp_accounting.ComposedDpEvent(events)
    orders = report.get("rdp_orders", DEFAULT_RDP_ORDERS)
    neighboring = report_neighboring(report)
    terms = report.get("delta_terms") or []
    if terms:  # delta spent outside the events (a partition selection's threshold)
        ledger = PrivacyLedger(orders=orders, neighboring=neighboring)
        for term in terms:
            ledger.spend_delta(term["label"], term["delta"])
        report = {**report, "delta": ledger._events_delta(check_delta(report["delta"]))}
    if accountant == "pld" and "epsilon_pld" in report and "pld_discretization" not in report:
        delta = check_delta(report["delta"])
        return math.inf if _is_non_private(event) else _legacy_pld_epsilon(event, delta, orders, neighboring)
    return epsilon_of_event(event, report["delta"], accountant, orders, neighboring)
