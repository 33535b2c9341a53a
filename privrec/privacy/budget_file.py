"""The budget file of :class:`privrec.privacy.budget.Budget`: its format and the checks of every read.

A budget file is JSON (``"format": "privrec-budget"``, version 1): the lifetime ``(epsilon,
delta)``, the neighbouring relation, the accountant, the stored spend and every release with its
events, plus a SHA-256 ``digest`` of the rest (:func:`_digest`). :class:`_BudgetFile` (a mixin of
``Budget``) writes it atomically (:func:`privrec._io.atomic_write_json`) and reads it back through
every check, in order: UTF-8 text, JSON, the format name, the digest, then :func:`_parse` (version,
lifetime, relation, accountant, each release and event -- :func:`_valid_event` refuses noise
parameters privrec never writes -- and the stored spend against its recomputation). Any failure is
a :class:`BudgetFileError` naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dp_accounting

from .._io import atomic_write_json, json_safe
from .._validation import check_epsilon
from .budget_accounting import (
    ACCOUNTANT,
    BudgetRelease,
    _all_events,
    _all_terms,
    _close,
    _compose,
    _float,
    _fmt,
)
from .ledger import PrivacyLedger, check_pld_delta, event_to_dict

FORMAT = "privrec-budget"
VERSION = 1


class BudgetFileError(ValueError):
    """A budget file that cannot be trusted: unreadable, malformed, or changed outside privrec."""


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


class _BudgetFile:
    """Reading and writing the budget file at ``self.path`` (the last state read or written is kept
    in ``self._cache`` under its digest, and re-used while the file's digest is unchanged)."""

    path: Path
    _cache: tuple[str, _State] | None

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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
