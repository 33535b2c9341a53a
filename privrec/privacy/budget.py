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
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dp_accounting

from .._io import atomic_write_json, json_safe
from .._validation import check_epsilon
from .ledger import (
    PrivacyLedger,
    check_pld_delta,
    epsilon_from_report,
    epsilon_of_event,
    event_to_dict,
    report_neighboring,
)

FORMAT = "privrec-budget"
VERSION = 1
#: the accountant of every lifetime epsilon (the tightest dp_accounting offers for these events)
ACCOUNTANT = "pld"
#: relative tolerance between a stored epsilon and its recomputation (dp_accounting versions may differ
#: in the last digits; a forged spend is far outside it)
_RTOL = 1e-4

#: planned or recorded events: ``[(label, DpEvent)]``
Events = list[tuple[str, dp_accounting.DpEvent]]


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


class BudgetFileError(ValueError):
    """A budget file that cannot be trusted: unreadable, malformed, or changed outside privrec."""


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


@dataclass(frozen=True)
class _State:
    epsilon: float
    delta: float
    neighboring: str
    description: str
    created: str
    releases: tuple[BudgetRelease, ...]
    spent: float
    digest: str


class Budget:
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
        # one lock per budget file however it is reached (symlinks, relative paths, other folders)
        real = Path(os.path.realpath(self.path))
        self.lock_path = real.with_name(real.name + ".lock")
        self.lock_timeout = _check_lock_timeout(lock_timeout)
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._cache: tuple[str, _State] | None = None

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
        with self._thread_lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1
                return
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows
                raise OSError("privacy budget files need POSIX file locking (fcntl), not available here") from None
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                self._acquire(fd, fcntl)
                self._depth = 1
                try:
                    yield self
                finally:
                    self._depth = 0
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _acquire(self, fd: int, fcntl) -> None:
        if self.lock_timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + float(self.lock_timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"privacy budget {self.path} is locked by another process (waited {self.lock_timeout:g} s)"
                    ) from None
                time.sleep(0.05)

    # ------------------------------------------------------------------ file format
    def _write(self, state: _State) -> None:
        content = _content(state)
        content["digest"] = _digest(content)
        atomic_write_json(self.path, content)
        self._cache = (content["digest"], dataclasses.replace(state, digest=content["digest"]))

    def _read(self) -> _State:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"budget file {self.path} not found") from None
        except UnicodeDecodeError:
            raise BudgetFileError(f"budget file {self.path} is not UTF-8 text: not a privrec budget") from None
        except IsADirectoryError:
            raise BudgetFileError(f"budget file {self.path} is a directory, not a privrec budget") from None
        try:
            content = json.loads(text)
        except RecursionError:
            raise BudgetFileError(
                f"budget file {self.path} nests its JSON too deeply to be a privrec budget; restore it from a backup"
            ) from None
        except json.JSONDecodeError as exc:
            raise BudgetFileError(
                f"budget file {self.path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                "it may be truncated or corrupted: restore it from a backup"
            ) from None
        if not isinstance(content, dict) or content.get("format") != FORMAT:
            raise BudgetFileError(f'{self.path} is not a privrec budget file (no "format": "{FORMAT}")')
        digest = content.get("digest")
        if not isinstance(digest, str) or digest != _digest(content):
            raise BudgetFileError(
                f"budget file {self.path}: its content does not match its digest: the file was changed outside "
                "privrec (a budget file must only be written by privrec); restore it from a backup"
            )
        if self._cache is not None and digest == self._cache[0]:
            return self._cache[1]
        state = _parse(content, self.path)
        self._cache = (state.digest, state)
        return state


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


# ---------------------------------------------------------------------------------------------
# accounting
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# (de)serialisation
# ---------------------------------------------------------------------------------------------


def _content(state: _State) -> dict[str, Any]:
    return json_safe(
        {
            "format": FORMAT,
            "version": VERSION,
            "description": state.description,
            "created": state.created,
            "lifetime": {"epsilon": state.epsilon, "delta": state.delta},
            "neighboring": state.neighboring,
            "accountant": ACCOUNTANT,
            "spent_epsilon": state.spent,
            "releases": [
                {
                    "label": r.label,
                    "recorded": r.recorded,
                    "summary": r.summary,
                    "spent_after": r.spent_after,
                    "events": [{"label": lab, "event": event_to_dict(ev)} for lab, ev in r.events],
                    **(
                        {"delta_terms": [{"label": lab, "delta": d} for lab, d in r.delta_terms]}
                        if r.delta_terms
                        else {}
                    ),
                }
                for r in state.releases
            ],
        }
    )


def _digest(content: dict[str, Any]) -> str:
    body = {k: v for k, v in content.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _parse(content: dict[str, Any], path: Path) -> _State:
    """Validate a budget file's content (module docstring) and return its state."""

    def bad(what: str) -> BudgetFileError:
        return BudgetFileError(f"budget file {path}: {what}")

    if content.get("version") != VERSION:
        raise bad(f"unsupported version {content.get('version')!r} (this privrec reads version {VERSION})")
    digest = str(content.get("digest"))
    lifetime = content.get("lifetime")
    if not isinstance(lifetime, dict):
        raise bad("no 'lifetime' {epsilon, delta}")
    try:
        eps = check_epsilon(lifetime.get("epsilon"), "lifetime epsilon", allow_inf=False)
        delta = check_pld_delta(lifetime["delta"], "lifetime delta")
        neighboring = str(content.get("neighboring"))
        PrivacyLedger(neighboring=neighboring)
    except KeyError:
        raise bad("its lifetime has no delta") from None
    except ValueError as exc:
        raise bad(str(exc)) from None
    if content.get("accountant") != ACCOUNTANT:
        raise bad(f"accountant must be {ACCOUNTANT!r}, got {content.get('accountant')!r}")
    raw = content.get("releases")
    if not isinstance(raw, list):
        raise bad("'releases' must be a list")
    releases = []
    for i, r in enumerate(raw, 1):
        try:
            ledger = PrivacyLedger.from_report(
                {"events": r["events"], "neighboring": neighboring, "delta_terms": r.get("delta_terms") or []}
            )
            release = BudgetRelease(
                str(r["label"]),
                str(r["recorded"]),
                [(e.label, e.event) for e in ledger.entries],
                dict(r.get("summary") or {}),
                _float(r.get("spent_after")),
                tuple(ledger.delta_terms),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"release {i} is malformed ({type(exc).__name__}: {exc})") from None
        bad_event = next((lab for lab, ev in release.events if not _valid_event(ev)), None)
        if bad_event is not None:
            raise bad(f"release {i} has an event with a zero, negative or non-finite noise multiplier ({bad_event!r})")
        releases.append(release)
    try:
        spent = _compose(_all_events(releases), delta, neighboring, _all_terms(releases))
    except (ArithmeticError, RecursionError, ValueError, TypeError) as exc:
        raise bad(f"its releases cannot be composed ({type(exc).__name__}: {exc})") from None
    stored = _float(content.get("spent_epsilon"))
    if not _close(stored, spent):
        raise bad(
            f"it states a spend of epsilon {content.get('spent_epsilon')} but its {len(releases)} releases give "
            f"{_fmt(spent)}: the file is inconsistent; restore it from a backup"
        )
    description, created = str(content.get("description", "")), str(content.get("created", ""))
    return _State(eps, delta, neighboring, description, created, tuple(releases), spent, digest)


def _new_state(epsilon, delta, neighboring: str, description: str) -> _State:
    """The state of a new budget (lifetime and relation checked), with no release."""
    eps = check_epsilon(epsilon, "lifetime epsilon", allow_inf=False)
    d = check_pld_delta(delta, "lifetime delta")
    PrivacyLedger(neighboring=neighboring)  # validates the relation
    return _State(eps, d, neighboring, str(description), _now(), (), 0.0, "")


def _valid_event(event) -> bool:
    """A recorded event privrec could have written: Gaussian / Laplace parameters finite and > 0,
    nested events valid (``NonPrivateDpEvent`` is valid: it makes the spend infinite)."""
    for name in ("noise_multiplier", "parameter"):
        value = getattr(event, name, None)
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            return False
    inner = getattr(event, "events", None)
    if inner is not None:
        return all(_valid_event(e) for e in inner)
    nested = getattr(event, "event", None)
    if isinstance(nested, dp_accounting.DpEvent):
        return _valid_event(nested)
    return True


def _check_lock_timeout(value) -> float | None:
    """``lock_timeout``: ``None`` or a finite number of seconds >= 0 (one-line ``ValueError`` /
    ``TypeError`` naming it otherwise: a NaN would wait forever)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"lock_timeout must be a number of seconds or None, got {type(value).__name__} {value!r}")
    if not math.isfinite(float(value)) or value < 0:
        raise ValueError(f"lock_timeout must be a finite number of seconds >= 0 or None, got {value!r}")
    return float(value)


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
