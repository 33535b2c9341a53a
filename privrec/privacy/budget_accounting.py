"""The composition arithmetic of a privacy budget (:mod:`privrec.privacy.budget`).

A budget's spend is never a sum of epsilons: :func:`_compose` composes every recorded (and planned)
DpEvent through the ledger's one accounting function, at the lifetime delta, after paying the
``(label, delta)`` terms spent outside the events (a partition selection's threshold). This module
holds that composition, the record of one release (:class:`BudgetRelease`), the normalisation of
what a caller plans (:func:`_as_events`, :func:`_as_terms`), the check of a privacy report before it
is recorded (:func:`_report_events`) and the tolerance and formatting of the epsilons compared.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import dp_accounting

from .ledger import PrivacyLedger, epsilon_from_report, epsilon_of_event

#: the accountant of every lifetime epsilon (the tightest dp_accounting offers for these events)
ACCOUNTANT = "pld"
#: relative tolerance between a stored epsilon and its recomputation (dp_accounting versions may differ
#: in the last digits; a forged spend is far outside it)
_RTOL = 1e-4

#: planned or recorded events: ``[(label, DpEvent)]``
Events = list[tuple[str, dp_accounting.DpEvent]]


@dataclass(frozen=True)
class BudgetRelease:
    """One recorded release: its label, time (UTC, ISO 8601), events, summary of its own report
    (method, epsilon, delta, accountant) and the lifetime epsilon spent after it."""

    label: str
    recorded: str
    events: Events
    summary: dict[str, Any] = field(default_factory=dict)
    spent_after: float = math.nan
    #: ``(label, delta)`` the release spent outside its events (a partition selection's threshold)
    delta_terms: tuple = ()


def _as_terms(planned) -> list:
    """The ``(label, delta)`` terms of a plan object (none for a list of events)."""
    return [(str(label), float(d)) for label, d in (getattr(planned, "delta_terms", None) or ())]


def _all_terms(releases: Iterable[BudgetRelease]) -> list:
    return [term for r in releases for term in r.delta_terms]


def _as_events(planned) -> Events:
    if not isinstance(planned, (list, tuple)) and hasattr(planned, "events"):  # a plan object (FitPlan)
        planned = list(planned.events)
    if isinstance(planned, dp_accounting.DpEvent):
        return [("planned release", planned)]
    if isinstance(planned, (str, bytes)) or not isinstance(planned, Iterable):
        raise TypeError(
            f"planned events must be a DpEvent or a list of (label, DpEvent) pairs, got {type(planned).__name__}"
        )
    out: Events = []
    for item in planned:
        if isinstance(item, dp_accounting.DpEvent):
            out.append(("planned release", item))
            continue
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(
                f"planned events are (label, DpEvent) pairs or DpEvents, got {type(item).__name__} {item!r}"
            )
        label, event = item
        if not isinstance(event, dp_accounting.DpEvent):
            raise TypeError(f"planned events are (label, DpEvent) pairs, got {type(event).__name__} for {label!r}")
        out.append((str(label), event))
    return out


def _all_events(releases: Iterable[BudgetRelease]) -> Events:
    return [pair for r in releases for pair in r.events]


def _compose(events: Events, delta: float, neighboring: str, terms=()) -> float:
    """PLD epsilon at ``delta`` of all ``events`` (0 for none), through the ledger's one accounting
    function (:func:`privrec.privacy.ledger.epsilon_of_event`: canonical form, then PLD); ``terms``:
    ``(label, delta)`` spent outside the events, paid from ``delta`` first (inf when they exhaust it)."""
    if not events:
        return 0.0
    delta = float(delta) - float(sum(d for _, d in terms))
    if not delta > 0:
        return math.inf
    composed = dp_accounting.ComposedDpEvent([ev for _, ev in events])
    return epsilon_of_event(composed, delta, ACCOUNTANT, neighboring=neighboring)


def _report_events(report) -> tuple[Events, dict[str, Any], list]:
    """``(events, summary)`` of a privacy report, checked: parseable events, a stated epsilon that
    its events give (a report whose epsilon was edited is refused)."""
    if not isinstance(report, dict) or not isinstance(report.get("events"), list):
        raise ValueError("expected a privacy report (a dict with an 'events' list, e.g. model.privacy_report())")
    if not report["events"]:
        raise ValueError("the privacy report has no events: nothing was released privately (a non-private model?)")
    try:
        ledger = PrivacyLedger.from_report(report)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed privacy report: {type(exc).__name__}: {exc}") from None
    summary: dict[str, Any] = {"n_events": len(ledger)}
    for key in ("method", "epsilon", "delta", "accountant", "target_epsilon"):
        if key in report:
            summary[key] = report[key]
    claimed, delta = report.get("epsilon"), report.get("delta")
    if claimed is not None and delta is not None:
        accountant = str(report.get("accountant", "rdp"))
        actual = epsilon_from_report(report, None)  # the report's own accountant
        if not _close(_float(claimed), actual):
            raise ValueError(
                f"the privacy report states epsilon {claimed} but its events give {_fmt(actual)} "
                f"({accountant.upper()} at delta {delta}): the report was altered"
            )
    return [(e.label, e.event) for e in ledger.entries], summary, list(ledger.delta_terms)


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=_RTOL, abs_tol=1e-9)


def _fmt(eps: float) -> str:
    return "inf" if math.isinf(eps) else f"{eps:.4g}"
