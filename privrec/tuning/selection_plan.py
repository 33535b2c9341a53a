"""The plan of a private selection, fixed from public inputs only (:mod:`privrec.tuning.selection`):
the candidates' shares of the zCDP budget and their epsilons, their planned events, the score
release's noise and sensitivity -- :class:`SelectionPlan`, made and checked by
:func:`plan_selection`. Importable from :mod:`privrec.tuning.selection` too.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sklearn.base import clone

from ..privacy import gaussian_event
from ..privacy.ledger import epsilon_of_event
from .rule import gaussian_multiplier, gaussian_rho

#: label of the noisy score release
SCORES_LABEL = "selection scores"


def epsilon_of_rho(rho: float, delta: float) -> float:
    """Epsilon (PLD, at ``delta``) of the Gaussian mechanism with zCDP parameter ``rho``."""
    return float(epsilon_of_event(gaussian_event(math.sqrt(0.5 / rho)), delta, "pld"))


@dataclass(frozen=True)
class SelectionPlan:
    """What :func:`run_selection` will do, fixed from public inputs only (see the module docstring).

    ``epsilons[k]``: candidate k's target at its share ``shares[k]`` of rho; ``score_multiplier``
    and ``score_sensitivity``: the score release's Gaussian (noise std = their product);
    ``candidate_events[k]``: candidate k's planned ``[(label, DpEvent)]`` (``None`` for an
    estimator that cannot plan its events); :meth:`events`: the whole ledger the procedure will
    record (``None`` when a refit's events depend on which candidate wins)."""

    epsilon: float
    delta: float
    shares: tuple[float, ...]
    epsilons: tuple[float, ...]
    selection_share: float
    refit_share: float
    refit_epsilon: float | None
    holdout: float
    loss_clip: float
    rating_cap: int | None
    simplicity_margin: float
    score_multiplier: float
    score_sensitivity: float
    candidate_events: tuple[Any, ...] = ()

    @property
    def n_candidates(self) -> int:
        return len(self.shares)

    @property
    def refit(self) -> bool:
        return self.refit_share > 0

    @property
    def score_std(self) -> float:
        """Standard deviation of the noise on each candidate's summed score (the score's units)."""
        return self.score_multiplier * self.score_sensitivity

    def events(self) -> list | None:
        """Every ``(label, DpEvent)`` the procedure records, in order, or ``None`` when unknown in
        advance (a refit, or a candidate without a plan)."""
        if self.refit or any(ev is None for ev in self.candidate_events) or not self.candidate_events:
            return None
        out: list = []
        for k, evs in enumerate(self.candidate_events):
            out.extend((f"selection candidate {k}: {label}", ev) for label, ev in evs)
        out.append((SCORES_LABEL, gaussian_event(self.score_multiplier)))
        return out

    def bound_event(self):
        """One Gaussian at the target: an upper bound of the whole procedure (every part is a
        Gaussian mechanism and their rho sum to at most the target's)."""
        return gaussian_event(gaussian_multiplier(self.epsilon, self.delta))

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidates": len(self.shares),
            "shares": {"candidates": list(self.shares), "selection": self.selection_share, "refit": self.refit_share},
            "epsilon_candidates": list(self.epsilons),
            "epsilon_refit": self.refit_epsilon,
            "holdout": self.holdout,
            "loss_clip": self.loss_clip,
            "rating_cap": self.rating_cap,
            "simplicity_margin": self.simplicity_margin,
            "score_noise_std": self.score_std,
        }


def _positive_finite(value, name: str, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if float(value) <= 0:
        raise ValueError(
            f"{name} must be > 0 (a zero clip or cap would make the noisy scores exact zeros), got {value!r}"
        )
    return float(value)


def _fraction(value, name: str, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a number in {'[0, 1)' if allow_zero else '(0, 1)'}, got {value!r}")
    v = float(value)
    if not ((v >= 0 if allow_zero else v > 0) and v < 1):
        raise ValueError(f"{name} must be in {'[0, 1)' if allow_zero else '(0, 1)'}, got {value!r}")
    return v


def plan_selection(
    candidates: Sequence[Any],
    shape: tuple[int, int] | None,
    *,
    epsilon,
    delta,
    selection_share=0.1,
    refit_share=0.0,
    holdout=0.2,
    loss_clip=None,
    rating_cap=None,
    simplicity_margin=3.0,
    candidate_shares=None,
) -> SelectionPlan:
    """The :class:`SelectionPlan` of a selection among ``candidates`` on a ``shape`` (public: the
    roster and catalogue sizes) matrix; every argument checked with a one-line ``ValueError`` /
    ``TypeError`` naming it (arguments as :func:`select_private`)."""
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise TypeError(
            f"candidates must be a list of unfitted estimators, got {type(candidates).__name__} "
            "(a generator or set has no order to report the winner in: pass a list)"
        )
    K = len(candidates)
    if K < 2:
        raise ValueError("select_private needs at least two candidates")
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"epsilon must be a number, got {type(epsilon).__name__} {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
        raise TypeError(f"delta must be a number, got {type(delta).__name__} {delta!r}")
    epsilon, delta = float(epsilon), float(delta)
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"select_private is for private fits: epsilon must be finite and > 0, got {epsilon!r}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    selection_share = _fraction(selection_share, "selection_share")
    refit_share = _fraction(refit_share, "refit_share", allow_zero=True)
    if selection_share + refit_share >= 1:
        raise ValueError("selection_share must be in (0, 1) and refit_share in [0, 1), with a sum below 1")
    rest = 1.0 - selection_share - refit_share
    if candidate_shares is None:
        shares = [rest / K] * K
    else:
        if isinstance(candidate_shares, (str, bytes)) or not isinstance(candidate_shares, Sequence):
            raise TypeError(f"candidate_shares must be a list of {K} numbers, got {type(candidate_shares).__name__}")
        if any(isinstance(c, bool) or not isinstance(c, numbers.Real) for c in candidate_shares):
            raise TypeError(f"candidate_shares must be a list of {K} numbers, got {list(candidate_shares)!r}")
        shares = [float(c) for c in candidate_shares]
    if len(shares) != K or not all(math.isfinite(c) and c > 0 for c in shares) or sum(shares) > rest + 1e-9:
        raise ValueError(
            f"candidate_shares must give each of the {K} candidates a positive share, summing to at most "
            f"1 - selection_share - refit_share = {rest:g}; got {candidate_shares!r}"
        )
    holdout = _fraction(holdout, "holdout")
    margin = (
        float(simplicity_margin)
        if isinstance(simplicity_margin, numbers.Real) and not isinstance(simplicity_margin, bool)
        else math.nan
    )
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"simplicity_margin must be finite and >= 0, got {simplicity_margin!r}")
    if rating_cap is not None:
        cap = (
            float(rating_cap) if isinstance(rating_cap, numbers.Real) and not isinstance(rating_cap, bool) else math.nan
        )
        if not math.isfinite(cap) or cap < 1 or int(cap) != cap:
            raise ValueError(
                f"rating_cap must be a positive integer (held-out ratings per user) or None, got {rating_cap!r}"
            )
        rating_cap = int(cap)
    first = candidates[0]
    if loss_clip is None:
        rr = getattr(first, "rating_range", None)
        loss_clip = float(rr[1] - rr[0]) ** 2 if rr is not None else float(getattr(first, "rating_bound", 5.0)) ** 2
    clip = _positive_finite(loss_clip, "loss_clip")
    rho = gaussian_rho(epsilon, delta) * 0.995  # a margin for the PLD discretisation of the parts
    eps_cs = tuple(epsilon_of_rho(c * rho, delta) for c in shares)
    eps_r = epsilon_of_rho(refit_share * rho, delta) if refit_share > 0 else None
    weight = 1.0 if rating_cap is None else float(rating_cap)
    events: list = []
    for k, cand in enumerate(candidates):
        planner = getattr(cand, "plan", None)
        if planner is None or shape is None:
            events.append(None)
            continue
        model = clone(cand).set_params(epsilon=eps_cs[k], delta=delta)
        events.append(tuple(model.plan(shape=shape).events))
    return SelectionPlan(
        epsilon=epsilon,
        delta=delta,
        shares=tuple(shares),
        epsilons=eps_cs,
        selection_share=selection_share,
        refit_share=refit_share,
        refit_epsilon=eps_r,
        holdout=holdout,
        loss_clip=clip,
        rating_cap=rating_cap,
        simplicity_margin=margin,
        score_multiplier=math.sqrt(0.5 / (selection_share * rho)),
        score_sensitivity=math.sqrt(K) * weight * clip,
        candidate_events=tuple(events),
    )
