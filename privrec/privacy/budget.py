"""A privacy budget odometer: every release made from one user population, across fits.

A fitted model's report gives the epsilon of *that* fit. Real deployments refit (weekly, after
tuning, ...), and every fit on the same users spends from the same guarantee. A :class:`Budget`
is a JSON file that records the DpEvents of every release made from one population, together with
a lifetime ``(epsilon, delta)``; the epsilon spent so far is always recomputed by the PLD
accountant (``dp_accounting``) over **all** recorded events at the lifetime delta -- never summed
from the per-fit epsilons, never typed in. Composing the events (rather than adding epsilons) is
what makes many small fits affordable: ten Gaussian releases of epsilon 1 each cost far less than
epsilon 10 together.

A fit that would exceed the lifetime epsilon is refused before it releases anything:
:meth:`Budget.charge` (or :func:`fit_with_budget`) plans the fit's events from public settings and
the (public) matrix shape -- the same plan the fit's calibration uses
(:meth:`privrec.models.DPALS.planned_events`, :class:`privrec.pipeline.PrivatePipeline`) -- checks
the composition, runs the fit and records the report, all under one exclusive lock on a sidecar
file (``<file>.lock``, ``fcntl.flock``), so concurrent processes charging the same budget are
serialised: each sees the spend of the previous one. Every write is atomic
(:func:`privrec._io.atomic_write_json`): a crash leaves the previous, valid file.

The file is checked whenever it is read: its schema, every event, a SHA-256 digest of the content
and the stored spend against the spend recomputed from the events. A malformed, truncated or
hand-edited file is an error that names the file (:class:`BudgetFileError`). The digest catches
accidental and careless edits (a release deleted to "free" budget); it is not a signature, so
protect the file like any other record of consequence (permissions, backups).

The per-fit delta is not added up: the lifetime guarantee is the single ``(epsilon, delta)`` of
the composition of every recorded event, at the lifetime delta. A failed fit (an exception inside
:meth:`Budget.charge`) records nothing: it released nothing.

:class:`Budget` is this module; its parts live beside it: the file format and the checks of every
read (:mod:`privrec.privacy.budget_file`), the lock (:mod:`privrec.privacy.budget_lock`) and the
composition of the events (:mod:`privrec.privacy.budget_accounting`).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dp_accounting

from .._io import json_safe
from .budget_accounting import (  # noqa: F401 (re-exported: importable from here, as before the split)
    _RTOL,
    ACCOUNTANT,
    BudgetRelease,
    Events,
    _all_events,
    _all_terms,
    _as_events,
    _as_terms,
    _close,
    _compose,
    _float,
    _fmt,
    _report_events,
)
from .budget_file import (  # noqa: F401 (re-exported: importable from here, as before the split)
    FORMAT,
    VERSION,
    BudgetFileError,
    _BudgetFile,
    _content,
    _digest,
    _new_state,
    _now,
    _parse,
    _State,
    _valid_event,
)
from .budget_lock import _BudgetLock, _check_lock_timeout, _lock_path
from .ledger import event_to_dict, report_neighboring


class BudgetExceededError(RuntimeError):
    """A release would take the lifetime epsilon of a :class:`Budget` above its limit.

    Attributes: ``path``, ``lifetime_epsilon``, ``delta``, ``spent`` (before the release),
    ``total`` (with it; ``inf`` for a non-private release) and ``n_releases`` (recorded so far).
    """

    def __init__(self, message: str, *, path, lifetime_epsilon, delta, spent, total, n_releases):
        super().__init__(message)
        self.path = Path(path)
        self.lifetime_epsilon = float(lifetime_epsilon)
        self.delta = float(delta)
        self.spent = float(spent)
        self.total = float(total)
        self.n_releases = int(n_releases)


@dataclass
class Charge:
    """What :meth:`Budget.charge` yields: the checked ``plan`` (labelled events), the lifetime epsilon
    ``spent_before`` it and the would-be ``total`` with it, the number of releases before it, and
    -- once the block has exited normally -- the recorded ``release`` (its ``spent_after``)."""

    plan: Events
    spent_before: float
    total: float
    releases_before: int
    release: BudgetRelease | None = None


class Budget(_BudgetFile, _BudgetLock):
    """A file-backed lifetime privacy budget for one user population (module docstring).

    Use :meth:`create`, :meth:`open` or :meth:`open_or_create`; the object holds only the path and
    re-reads the file on every call, so it never works on a stale spend.

    Parameters
    ----------
    path : the JSON budget file (its lock is ``<real path>.lock`` beside the file the path resolves
        to, so every path to one file -- through symlinks or from other folders -- takes the same
        lock; never delete that file while a process may hold it).
    lock_timeout : seconds (a finite number >= 0) to wait for the lock held by another process
        (``None``: wait as long as it takes, e.g. for another fit to finish); ``TimeoutError`` after that.
    """

    def __init__(self, path, *, lock_timeout: float | None = None):
        if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"a budget path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = Path(path)
        self.lock_path = _lock_path(self.path)  # one lock per budget file however it is reached
        self.lock_timeout = _check_lock_timeout(lock_timeout)
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._cache = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        path,
        epsilon: float,
        delta: float,
        *,
        neighboring: str = "add_or_remove_one",
        description: str = "",
        lock_timeout: float | None = None,
    ) -> Budget:
        """A new budget file with lifetime ``(epsilon, delta)`` and no release (``FileExistsError``
        if the file exists: a lifetime budget is never reset by accident).

        ``neighboring``: the relation every recorded report must state (that of privrec's user-level
        estimators by default).
        """
        state = _new_state(epsilon, delta, neighboring, description)
        budget = cls(path, lock_timeout=lock_timeout)
        with budget.lock():
            if budget.path.exists():
                raise FileExistsError(f"budget file {budget.path} already exists; open it with Budget.open")
            budget._write(state)
        return budget

    @classmethod
    def open(cls, path, *, lock_timeout: float | None = None) -> Budget:
        """An existing budget file, checked (``FileNotFoundError``, or :class:`BudgetFileError` for a
        file that is not a valid, unmodified privrec budget)."""
        budget = cls(path, lock_timeout=lock_timeout)
        budget._read()
        return budget

    @classmethod
    def open_or_create(
        cls,
        path,
        epsilon: float | None = None,
        delta: float | None = None,
        *,
        neighboring: str = "add_or_remove_one",
        description: str = "",
        lock_timeout: float | None = None,
    ) -> Budget:
        """Open ``path``, or create it with lifetime ``(epsilon, delta)`` when it does not exist.

        An existing file keeps its own lifetime: ``epsilon`` / ``delta``, when given, must equal it
        (``ValueError`` otherwise; a lifetime is a policy decision, not something a fit changes).
        A missing file needs both.
        """
        budget = cls(path, lock_timeout=lock_timeout)
        if not budget.path.exists():
            with budget.lock():  # two processes creating the same budget: the second one opens it
                if not budget.path.exists():
                    if epsilon is None or delta is None:
                        raise FileNotFoundError(
                            f"budget file {budget.path} does not exist; give its lifetime epsilon and delta to create it"
                        )
                    budget._write(_new_state(epsilon, delta, neighboring, description))
                    return budget
        state = budget._read()  # no lock needed to read: every write replaces the file atomically
        for name, given, have in (("epsilon", epsilon, state.epsilon), ("delta", delta, state.delta)):
            if given is not None and not math.isclose(float(given), have, rel_tol=1e-12):
                raise ValueError(
                    f"budget file {budget.path} has lifetime {name} {have:g}, not {float(given):g}; "
                    "an existing budget keeps its lifetime (omit the lifetime to use it as is)"
                )
        return budget

    # ------------------------------------------------------------------ reading
    @property
    def epsilon(self) -> float:
        """Lifetime epsilon."""
        return self._read().epsilon

    @property
    def delta(self) -> float:
        """Lifetime delta: every epsilon of this budget is computed at it."""
        return self._read().delta

    @property
    def neighboring(self) -> str:
        """The neighbouring relation of every recorded release."""
        return self._read().neighboring

    @property
    def releases(self) -> list[BudgetRelease]:
        """The recorded releases, oldest first."""
        return list(self._read().releases)

    def spent(self) -> float:
        """Lifetime epsilon spent: the PLD accountant over every recorded event, at the lifetime delta
        (0 before the first release; ``inf`` once a non-private release was recorded)."""
        return self._read().spent

    def remaining(self) -> float:
        """``lifetime epsilon - spent`` (at least 0). Epsilons compose sub-additively, so a fit
        calibrated to more than this may still fit, and the check, not this number, decides:
        see :meth:`total_with` and :meth:`check`."""
        state = self._read()
        return max(0.0, state.epsilon - state.spent)

    def total_with(self, planned) -> float:
        """Lifetime epsilon if ``planned`` were released too (recorded and planned events composed
        by the PLD accountant at the lifetime delta). ``planned``: ``[(label, DpEvent)]`` (e.g.
        :func:`plan_fit`), a list of DpEvents or one DpEvent."""
        state = self._read()
        return _compose(
            _all_events(state.releases) + _as_events(planned),
            state.delta,
            state.neighboring,
            _all_terms(state.releases) + _as_terms(planned),
        )

    def check(self, planned) -> float:
        """The would-be lifetime epsilon of ``planned`` (see :meth:`total_with`); raises
        :class:`BudgetExceededError` if it exceeds the lifetime epsilon. Releases nothing."""
        state = self._read()
        events = _as_events(planned)
        total = _compose(
            _all_events(state.releases) + events,
            state.delta,
            state.neighboring,
            _all_terms(state.releases) + _as_terms(planned),
        )
        if total <= state.epsilon:
            return total
        n = len(state.releases)
        where = f"privacy budget {self.path}"
        spent = f"spent so far {_fmt(state.spent)} over {n} release{'s' if n != 1 else ''}"
        if math.isinf(total) and math.isfinite(state.spent):
            msg = (
                f"{where}: this release is non-private (epsilon = inf at every delta) and cannot be charged to a "
                f"lifetime budget (epsilon {_fmt(state.epsilon)}, delta {state.delta:g}; {spent})"
            )
        else:
            msg = (
                f"{where}: lifetime epsilon {_fmt(state.epsilon)} at delta {state.delta:g}, {spent}; this release "
                f"({len(events)} events) would bring it to {_fmt(total)}; nothing was released"
            )
        raise BudgetExceededError(
            msg,
            path=self.path,
            lifetime_epsilon=state.epsilon,
            delta=state.delta,
            spent=state.spent,
            total=total,
            n_releases=n,
        )

    def summary(self) -> dict[str, Any]:
        """JSON-ready view: file, lifetime, spent, remaining, and one line per release."""
        state = self._read()
        return json_safe(
            {
                "file": str(self.path),
                "lifetime_epsilon": state.epsilon,
                "lifetime_delta": state.delta,
                "neighboring": state.neighboring,
                "accountant": ACCOUNTANT,
                "spent": state.spent,
                "remaining": max(0.0, state.epsilon - state.spent),
                "releases": [
                    {"label": r.label, "recorded": r.recorded, "spent_after": r.spent_after, **r.summary}
                    for r in state.releases
                ],
            }
        )

    def __repr__(self) -> str:
        try:
            s = self._read()
        except (OSError, ValueError) as exc:
            return f"Budget({str(self.path)!r}: unreadable: {exc})"
        return (
            f"Budget({str(self.path)!r}, lifetime epsilon={s.epsilon:g}, delta={s.delta:g}, "
            f"spent={_fmt(s.spent)}, releases={len(s.releases)})"
        )

    # ------------------------------------------------------------------ recording
    def record(self, report: dict[str, Any], label: str | None = None) -> BudgetRelease:
        """Record a release made from this population: ``report`` is its privacy report
        (``model.privacy_report()``, or any ``PrivacyLedger.report``).

        The report is checked (its events parse, its relation is this budget's, its stated epsilon
        is the one its events give) and recorded even when it takes the spend over the lifetime
        epsilon -- the release happened, and hiding it would be worse -- with a ``UserWarning``
        then. Use :meth:`check` / :meth:`charge` to refuse *before* a release.
        """
        events, summary, terms = _report_events(report)
        label = str(label if label is not None else summary.get("method") or "release")
        with self.lock():
            state = self._read()
            if report_neighboring(report) != state.neighboring:
                raise ValueError(
                    f"the report's neighbouring relation {report_neighboring(report)!r} is not the budget's "
                    f"{state.neighboring!r}: releases under different relations do not compose"
                )
            spent = _compose(
                _all_events(state.releases) + events,
                state.delta,
                state.neighboring,
                _all_terms(state.releases) + terms,
            )
            release = BudgetRelease(label, _now(), events, summary, spent, tuple(terms))
            new = _State(
                state.epsilon,
                state.delta,
                state.neighboring,
                state.description,
                state.created,
                (*state.releases, release),
                spent,
                "",
            )
            self._write(new)
        if spent > state.epsilon:
            warnings.warn(
                f"privacy budget {self.path}: recorded release {label!r} takes the lifetime epsilon to "
                f"{_fmt(spent)}, above its limit {_fmt(state.epsilon)}",
                UserWarning,
                stacklevel=2,
            )
        return release

    @contextlib.contextmanager
    def charge(self, model, shape=None, *, label: str | None = None, planned=None) -> Iterator[Charge]:
        """Plan, check, fit, record -- under the exclusive lock, so no other process can spend in between.

        ``with budget.charge(model, X.shape, label="week 3") as charge: model.fit(X)``: on entry the
        fit's events are planned (``planned``, or :func:`plan_fit` of ``model`` and the training
        ``shape``) and checked (:class:`BudgetExceededError`, before anything is released); on a
        normal exit ``model.privacy_report()`` is recorded (``charge.release``). Its events must be
        the plan's (a mismatch is recorded, then raised as ``RuntimeError``: the spend is real
        either way). An exception inside the block records nothing.
        """
        with self.lock():
            source = planned if planned is not None else _model_plan(model, shape)
            plan = _as_events(source)
            state = self._read()
            ticket = Charge(plan, state.spent, self.check(source), len(state.releases))
            yield ticket
            report = model.privacy_report()
            ticket.release = self.record(report, label)
            recorded = [(e["label"], e["event"]) for e in report["events"]]
            covers = getattr(source, "covers", None)
            if covers is not None and callable(covers):
                matches = covers(report)
            else:
                matches = recorded == [(lab, event_to_dict(ev)) for lab, ev in plan]
            if not matches:
                raise RuntimeError(
                    f"internal error: the fit recorded {len(recorded)} events that differ from its plan "
                    f"({len(plan)} events); its actual events were recorded in {self.path}"
                )

    # ------------------------------------------------------------------ locking
    @contextlib.contextmanager
    def lock(self) -> Iterator[Budget]:
        """Exclusive lock on the budget (``flock`` on ``<path>.lock``): re-entrant within this object
        and thread; other processes -- and other ``Budget`` objects on the same file -- wait."""
        with self._locked():
            yield self


# ---------------------------------------------------------------------------------------------
# planning and fitting
# ---------------------------------------------------------------------------------------------


def plan_fit(model, shape) -> Events:
    """The labelled DpEvents a fit of ``model`` on a ``shape = (n_users, n_items)`` matrix will record.

    From public inputs only: the model's own plan (``model.plan(shape=shape)``, e.g.
    :meth:`privrec.models.DPALS.plan`: its settings for that shape, the automatic selection when it
    runs, the noise scales its calibration picks), i.e. exactly what ``fit`` will record. A
    non-private estimator plans one ``NonPrivateDpEvent``. ``TypeError`` for a model privrec cannot
    plan (pass ``planned=`` to :meth:`Budget.charge`).
    """
    if not hasattr(model, "privacy_report"):
        return [(f"{type(model).__name__} fit (non-private)", dp_accounting.NonPrivateDpEvent())]
    planner = getattr(model, "plan", None)
    if planner is None or not callable(planner):
        raise TypeError(
            f"cannot plan the privacy events of a {type(model).__name__} fit; pass its planned events "
            "explicitly (Budget.charge(..., planned=[(label, DpEvent), ...]))"
        )
    if shape is None or len(tuple(shape)) != 2:
        raise ValueError(f"shape must be (n_users, n_items) of the training matrix, got {shape!r}")
    n_users, n_items = (int(v) for v in shape)
    return list(planner(shape=(n_users, n_items)).events)


def _model_plan(model, shape):
    """The model's own plan object for ``shape`` (its ``events``, and for a plan made in two stages
    -- the axes' releases first -- its ``delta_terms`` and ``covers``), or :func:`plan_fit`'s list."""
    planner = getattr(model, "plan", None)
    if hasattr(model, "privacy_report") and callable(planner) and shape is not None and len(tuple(shape)) == 2:
        return planner(shape=tuple(int(v) for v in shape))
    return plan_fit(model, shape)


def fit_with_budget(model, X, budget, label: str | None = None, **fit_params):
    """Fit ``model`` on ``X`` only if the budget allows it, and record the release; returns ``model``.

    ``budget``: a :class:`Budget` or the path of an existing budget file. The fit's events are
    the model's plan for ``X`` with the same declarations the fit gets (``users=`` roster,
    ``items=`` catalogue: ``model.plan(X, users=..., items=...)``), checked, fitted and recorded
    under the budget's lock (:meth:`Budget.charge`); :class:`BudgetExceededError` before the fit
    when they would exceed the lifetime epsilon.
    """
    if not isinstance(budget, Budget):
        budget = Budget.open(budget)
    planner = getattr(model, "plan", None)
    planned = None
    if planner is not None and callable(planner):
        declared = {k: fit_params[k] for k in ("users", "items") if fit_params.get(k) is not None}
        planned = planner(X, **declared)
    with budget.charge(model, None if planned is not None else _shape(X), label=label, planned=planned):
        model.fit(X, **fit_params)
    return model


def _shape(X) -> tuple[int, int]:
    import scipy.sparse as sp

    if sp.issparse(X):
        return tuple(X.shape)
    matrix = getattr(X, "matrix", None)
    if matrix is not None and sp.issparse(matrix):
        return tuple(matrix.shape)
    raise TypeError(
        f"cannot plan a fit on a {type(X).__name__}: pass a sparse matrix or an Interactions, or the planned events"
    )
