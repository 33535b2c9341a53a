"""Private model selection with its cost accounted: let the data decide what no rule can.

Hyper-parameters tuned on private data leak it, and a ``GridSearchCV`` over a private estimator
spends privacy that no ledger counts. :func:`select_private` runs the whole selection under
one ledger:

1. **Held-out parts.** Each user's ratings are split, by a keyed hash of the user's sampling key
   (the stable hash of their id; the row index of a bare matrix) and the item (no other user's
   data involved), into a training part and a held-out part (``holdout`` of the ratings of users
   with at least two). Deleting or zeroing one user leaves every other user's split unchanged.
2. **Candidates.** Every candidate (a private estimator such as ``DPALS(factors=0)``,
   ``DPALS(factors=8)``) is fitted on the training parts at its share of the budget (equal
   shares unless ``candidate_shares`` says otherwise).
3. **Noisy scores.** Each user computes, for every candidate, the mean clipped squared error
   of their held-out ratings against the candidate's release (the billboard projection of their
   own training part: free). So every user moves each of the K summed scores by at most the clip
   ``C``, and the score vector by at most ``sqrt(K) C`` in L2 norm. One Gaussian release of the
   vector is recorded. The candidate with the lowest noisy score wins (report noisy min:
   post-processing of that release), except that candidates are listed simplest first and a
   later one must beat the first by ``simplicity_margin`` noise standard deviations (default 3):
   where the candidates are equally good, the score noise alone would otherwise pick the more
   complex one about half the time.
4. **Release.** Either the winner's settings are refitted on all the data with the remaining
   budget (``refit_share`` > 0), or the winning candidate itself is released as fitted on the
   training parts (``refit_share = 0``): what was scored is then exactly what is released, and
   no budget goes to a refit.

The budget is split in zCDP terms. rho is the concentrated-DP parameter of a Gaussian
mechanism meeting (epsilon, delta) under the PLD accountant. The candidates get
``candidate_shares[k] rho`` (by default ``(1 - selection_share - refit_share) rho / K`` each),
the score release ``selection_share rho`` and the refit ``refit_share rho``. Every release is a Gaussian mechanism,
so the composition is again Gaussian. Every event is recorded in one ledger with its label, and
the reported epsilon is computed over them (``epsilon_from_report`` recomputes it). The released
model carries that ledger: its ``epsilon`` is the guarantee of the whole procedure.

Cost. Compared with one fit at epsilon, the released model is fitted with ``refit_share`` of the
budget (its noise std grows by ``1 / sqrt(refit_share)``: 1.41x at the default 0.5), or, without
a refit, with its candidate's share on ``1 - holdout`` of each user's ratings. Selection
pays off only where the automatic rule would otherwise pick a clearly worse model. A default
``DPALS()`` selects only where the rule proposes a rank for explicit ratings
(:func:`privrec.tuning.auto.run_automatic_selection`); call this when you would otherwise tune.

Plan and run. :func:`plan_selection` fixes, from public inputs only, everything the procedure
will do -- the candidates' shares and epsilons, their planned events, the score release's noise
and sensitivity -- as a :class:`SelectionPlan`; :func:`run_selection` runs a plan over a
:class:`SelectionData` (the local CSR here, user partitions on Dask, clients on Flower), so every
backend fits the same candidates on the same held-out split with the same ledger.

References: report-noisy-max selection (Dwork & Roth 2014, Sec. 3.3) with a Gaussian score
release; Papernot & Steinke (ICLR 2022) for why selection must be accounted.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from .._params import _param_fingerprint
from ..allocation import stable_user_keys
from ..allocation._rows import entry_user_keys
from ..data.fit_input import check_fit_matrix, fit_input
from ..evaluation.protocols import predict_pairs, project_users
from ..pipeline import check_ledger
from ..privacy import PrivacyLedger, gaussian_event, make_rng
from ..privacy.ledger import epsilon_of_event
from ..privacy.mechanisms import gaussian_mechanism
from .rule import gaussian_multiplier, gaussian_rho

__all__ = [
    "LocalSelectionData",
    "PrivateSelection",
    "SelectionData",
    "SelectionPlan",
    "holdout_mask",
    "plan_selection",
    "run_selection",
    "select_private",
]

#: label of the noisy score release
SCORES_LABEL = "selection scores"


def holdout_mask(R: sp.csr_matrix, fraction: float, key: int, user_keys: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask over ``R.data``: the held-out ratings, drawn by a keyed hash of (user, item) so
    each user's split depends on that user's own ratings only. ``user_keys``: one sampling key per
    row (:func:`privrec.allocation.stable_user_keys` of the users' ids), so the split does not move
    when other users are deleted or rows reordered; without them the row index is the user's key
    (a bare matrix). Users with fewer than two ratings keep every rating for training."""
    rows = np.repeat(np.arange(R.shape[0], dtype=np.int64), np.diff(R.indptr))
    users = entry_user_keys(rows, None if user_keys is None else np.asarray(user_keys, dtype=np.uint64))
    cols = R.indices.astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (users * np.uint64(0x9E3779B97F4A7C15)) ^ (cols * np.uint64(0xBF58476D1CE4E5B9)) ^ np.uint64(key)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(29)
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    mask = u < fraction
    small = np.repeat(np.diff(R.indptr) < 2, np.diff(R.indptr))
    mask &= ~small
    return mask


def split_holdout(
    R: sp.csr_matrix, fraction: float, key: int, user_keys: np.ndarray | None = None
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``(training part, held-out part)`` of ``R`` by :func:`holdout_mask` (same shape; genuine zero
    ratings kept)."""
    mask = holdout_mask(R, fraction, key, user_keys)
    shifted = sp.csr_matrix((R.data.astype(np.float64) + 1.0, R.indices.copy(), R.indptr.copy()), shape=R.shape)
    train, held = part_of(shifted, ~mask), part_of(shifted, mask)
    train.data -= 1.0
    held.data -= 1.0
    return train, held


def part_of(M: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """The entries of ``M`` where ``keep`` (aligned with ``M.data``); ``M`` must hold no zeros."""
    out = sp.csr_matrix((np.where(keep, M.data, 0.0), M.indices.copy(), M.indptr.copy()), shape=M.shape)
    out.eliminate_zeros()
    return out


def user_losses(
    model, train: sp.csr_matrix, held: sp.csr_matrix, clip: float, rating_cap: int | None = None
) -> np.ndarray:
    """Each user's mean clipped squared error on their held-out ratings (0 for users without any),
    from the billboard projection of their own training part; times ``min(n_held, rating_cap)``
    when a cap is given (per-rating weighting, bounded). Row j depends on user j's rows and the
    release only, so a backend holding users in blocks sums the blocks' totals."""
    U, ub = project_users(model, train, with_bias=True)
    coo = held.tocoo()
    pred = predict_pairs(model, U, coo.row, coo.col, ub)
    err = np.minimum((pred - coo.data) ** 2, clip)
    n = np.bincount(coo.row, minlength=held.shape[0])
    sums = np.bincount(coo.row, weights=err, minlength=held.shape[0])
    mean = np.where(n > 0, sums / np.maximum(n, 1), 0.0)
    return mean if rating_cap is None else mean * np.minimum(n, int(rating_cap))


# ---------------------------------------------------------------------- the plan


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


# ---------------------------------------------------------------------- the data a selection runs on


class SelectionData(Protocol):
    """Where a selection's users live. :func:`run_selection` calls ``split`` once, then per
    candidate ``fit`` (on the training parts) and ``score`` (the sum over users of
    :func:`user_losses`), then ``refit`` (all ratings) or ``finish`` (the winner as fitted)."""

    def split(self, fraction: float, key: int) -> None: ...

    def fit(self, model, show_progress: bool) -> Any: ...

    def score(self, model, clip: float, rating_cap: int | None) -> float: ...

    def refit(self, model, show_progress: bool) -> Any: ...

    def finish(self, model) -> None: ...


class LocalSelectionData:
    """A users x items CSR in this process, with the users' sampling keys (``None``: row indices)."""

    def __init__(self, R: sp.csr_matrix, user_keys: np.ndarray | None = None):
        self.R = R
        self.user_keys = user_keys
        self.train: sp.csr_matrix | None = None
        self.held: sp.csr_matrix | None = None

    def split(self, fraction: float, key: int) -> None:
        self.train, self.held = split_holdout(self.R, fraction, key, self.user_keys)

    def _fit(self, model, R, show_progress: bool):
        run = getattr(model, "_fit_matrix", None)
        if run is not None:  # a DPALS: the same users' keys as the whole fit (no id wrapper on the parts)
            return run(R, user_keys=self.user_keys, show_progress=show_progress)
        return model.fit(R, show_progress=show_progress)

    def fit(self, model, show_progress: bool):
        return self._fit(model, self.train, show_progress)

    def score(self, model, clip: float, rating_cap: int | None) -> float:
        return float(user_losses(model, self.train, self.held, clip, rating_cap).sum())

    def refit(self, model, show_progress: bool):
        return self._fit(model, self.R, show_progress)

    def finish(self, model) -> None:
        if hasattr(model, "_project_users"):  # users' own projection of all their ratings (free)
            model.user_factors_, model.user_bias_ = model._project_users(self.R)


# ---------------------------------------------------------------------- running a plan


@dataclass
class PrivateSelection:
    """Outcome of :func:`select_private`: the released winner (refitted, or as fitted) and the whole
    procedure's ledger. ``noisy_scores_``: each candidate's released summed held-out loss (squared
    rating error, clipped at ``loss_clip`` per rating; lower is better), ``score_noise_std`` its
    noise; a later candidate had to beat the first by ``simplicity_margin`` of those stds."""

    best_estimator_: Any
    best_index_: int
    noisy_scores_: np.ndarray
    ledger_: PrivacyLedger
    delta: float
    shares: dict[str, Any] = field(default_factory=dict)
    score_noise_std: float = 0.0
    simplicity_margin: float = 0.0

    def privacy_report(self) -> dict:
        """The best estimator's report: every event of the procedure (candidates, score release,
        refit if any), epsilon computed over them."""
        return self.best_estimator_.privacy_report()

    def explain(self) -> str:
        """One paragraph saying what the noisy scores are and why the winner won."""
        scores = ", ".join(f"{s:.4g}" for s in self.noisy_scores_)
        return (
            f"noisy summed held-out losses (clipped squared rating errors; lower is better): [{scores}], "
            f"noise std {self.score_noise_std:.4g}; a candidate after the first must beat it by "
            f"{self.simplicity_margin:g} std ({self.simplicity_margin * self.score_noise_std:.4g}); "
            f"chosen: candidate {self.best_index_}"
        )


def run_selection(
    plan: SelectionPlan,
    candidates: Sequence[Any],
    data: SelectionData,
    *,
    random_state=None,
    show_progress: bool = False,
    keys: str = "user ids",
) -> PrivateSelection:
    """Run ``plan`` over ``data`` (see :class:`SelectionData`): the noise draws, in order, are the
    candidates' seeds, the holdout key, the score release; the ledger is checked against
    ``plan.events()`` when the plan knows them. ``keys``: what the split and the sampling are keyed on
    (``"user ids"``, or ``"row positions"`` of a bare matrix), stated in ``selection_``."""
    K = plan.n_candidates
    rng = make_rng(random_state)
    seeds = rng.integers(0, 2**63 - 1, size=K + 2)
    data.split(plan.holdout, int(seeds[-1]) & 0xFFFFFFFF)
    ledger = PrivacyLedger()
    scores = np.zeros(K, dtype=np.float64)
    fitted: list[Any] = []
    for k, cand in enumerate(candidates):
        model = clone(cand).set_params(
            epsilon=plan.epsilons[k], delta=plan.delta, random_state=int(seeds[k]) if random_state is not None else None
        )
        model = data.fit(model, show_progress)
        ledger.extend(model.ledger_, prefix=f"selection candidate {k}: ")
        scores[k] = data.score(model, plan.loss_clip, plan.rating_cap)  # each user moves entry k by <= weight * clip
        fitted.append(None if plan.refit else model)
    release = gaussian_mechanism(
        scores, plan.score_sensitivity, plan.score_multiplier, rng, dtype=np.float64, label=SCORES_LABEL
    )
    release.record(ledger)
    noisy = np.asarray(release.value, dtype=np.float64)
    handicap = np.where(np.arange(K) > 0, plan.simplicity_margin * plan.score_std, 0.0)
    best = int(np.argmin(noisy + handicap))

    final: Any
    if plan.refit:
        final = clone(candidates[best]).set_params(
            epsilon=plan.refit_epsilon,
            delta=plan.delta,
            random_state=int(seeds[K]) if random_state is not None else None,
        )
        final = data.refit(final, show_progress)
        ledger.extend(final.ledger_, prefix="refit: ")
    else:  # the winner as fitted (its events are already in the ledger as a candidate's)
        final = fitted[best]
        data.finish(final)
    del fitted
    planned = plan.events()
    if planned is not None:
        check_ledger(ledger, planned)
    total = ledger.epsilon(plan.delta, "pld")
    if total > plan.epsilon * (1 + 1e-9):  # cannot happen with the margin above; never report beyond the target
        raise RuntimeError(f"internal error: selection spent epsilon {total:g} > target {plan.epsilon:g}")
    # the released model carries the whole procedure's ledger: its epsilon is the total guarantee
    final.ledger_ = ledger
    final.epsilon = float(plan.epsilon)
    if "_fitted_params" in final.__dict__:  # the fitted state now belongs to the total guarantee
        final._fitted_params = _param_fingerprint(final)
    candidate_params = []
    for k, c in enumerate(candidates):
        # the settings compared, at the epsilon each was fitted with; no random_state (a noise seed
        # kept beside a release would void it)
        params = {name: v for name, v in c.get_params().items() if name != "random_state"}
        params["epsilon"], params["delta"] = plan.epsilons[k], plan.delta
        candidate_params.append(params)
    final.selection_ = {
        "candidates": candidate_params,
        "chosen": best,
        "noisy_scores": noisy.tolist(),
        "scores": "summed held-out loss per candidate (clipped squared rating error; lower is better), noisy",
        "epsilon_candidates": list(plan.epsilons),
        "epsilon_refit": plan.refit_epsilon,
        "refit": plan.refit,
        "released": "refitted on every rating"
        if plan.refit
        else f"the winning candidate, as fitted on the training parts ({1 - plan.holdout:g} of each user's ratings)",
        "shares": {"candidates": list(plan.shares), "selection": plan.selection_share, "refit": plan.refit_share},
        "holdout": plan.holdout,
        "keys": keys,
        "loss_clip": plan.loss_clip,
        "rating_cap": plan.rating_cap,
        "simplicity_margin": plan.simplicity_margin,
        "score_noise_std": plan.score_std,
    }
    return PrivateSelection(
        final,
        best,
        noisy,
        ledger,
        float(plan.delta),
        dict(final.selection_["shares"]),
        score_noise_std=plan.score_std,
        simplicity_margin=plan.simplicity_margin,
    )


def _selection_input(X) -> tuple[sp.csr_matrix, np.ndarray | None, tuple[int, int]]:
    """``(CSR, user keys or None, shape)`` of any input ``DPALS.fit`` takes, converted and checked
    the same way (a long DataFrame, an ``Interactions``, a sparse matrix with no duplicate entries)."""
    if isinstance(X, np.ndarray) or not (sp.issparse(X) or hasattr(X, "matrix") or hasattr(X, "columns")):
        raise TypeError(
            f"X must be what DPALS.fit takes (a users x items sparse matrix, an Interactions or a long DataFrame "
            f"with user, item, rating columns), got {type(X).__name__}"
        )
    R, user_ids, _, _ = fit_input(X)
    R = check_fit_matrix(R)
    R = sp.csr_matrix(R, dtype=np.float64)
    R.sort_indices()
    keys = None if user_ids is None else stable_user_keys(user_ids)
    return R, keys, (int(R.shape[0]), int(R.shape[1]))


def select_private(
    candidates: Sequence[Any],
    X,
    *,
    epsilon: float,
    delta: float,
    selection_share: float = 0.1,
    refit_share: float = 0.5,
    holdout: float = 0.2,
    loss_clip: float | None = None,
    random_state=None,
    show_progress: bool = False,
    budget=None,
    label: str | None = None,
    rating_cap: int | None = None,
    simplicity_margin: float = 3.0,
    candidate_shares: Sequence[float] | None = None,
) -> PrivateSelection:
    """Accounted private selection among ``candidates`` (see the module docstring).

    ``candidates``: a list of unfitted private estimators with ``epsilon`` / ``delta`` /
    ``random_state`` parameters (DPALS). Their own ``epsilon`` and ``delta`` are replaced by the
    per-candidate budget. ``X``: anything ``DPALS.fit`` takes, converted the same way (a users x
    items sparse matrix, an ``Interactions``, a long DataFrame); the users' ids, when it has them,
    key the held-out split and the candidates' sampling. ``loss_clip``: the per-rating
    squared-error clip C (public, > 0). The default is the square of the first candidate's
    declared rating span (``rating_range``), else ``rating_bound^2``. ``random_state``: as for the
    estimators (a known seed voids the guarantee). ``budget``: a
    :class:`privrec.privacy.Budget` the whole selection is charged to: under its lock the plan's
    events (or, when a refit makes them unknown in advance, one Gaussian at the target, an upper
    bound) are checked before any candidate sees the data, and every recorded event after it
    (label ``label``).
    ``rating_cap``: ``None`` scores each user by the mean clipped error of their held-out ratings
    (every user weighs the same); an integer m scores each user by that mean times
    ``min(n_held, m)``, so users weigh by their number of held-out ratings up to m, as in a
    per-rating RMSE (sensitivity ``sqrt(K) m C``).
    ``simplicity_margin``: candidates are listed simplest first (e.g. the bias model, then
    ranks); any later candidate wins only if its noisy score beats the first one's by this many
    standard deviations of the score noise (public, post-processing of the noisy scores). With
    equal true scores the first is kept with probability Phi(margin / sqrt(2)) (98.3% at the
    default 3); 0 is plain report-noisy-min.
    ``refit_share = 0`` releases the winning candidate as fitted on the training parts (no
    refit). ``candidate_shares``: each candidate's share of rho (default: the rest split
    equally); with the selection and refit shares they sum to at most 1.

    The result's ``noisy_scores_`` are summed held-out losses (lower is better; ``explain()``
    says so with the noise std and the margin).
    """
    R, keys, shape = _selection_input(X)
    plan = plan_selection(
        candidates,
        shape,
        epsilon=epsilon,
        delta=delta,
        selection_share=selection_share,
        refit_share=refit_share,
        holdout=holdout,
        loss_clip=loss_clip,
        rating_cap=rating_cap,
        simplicity_margin=simplicity_margin,
        candidate_shares=candidate_shares,
    )
    with budget.lock() if budget is not None else contextlib.nullcontext():
        if budget is not None:  # refused before any candidate sees the data
            planned = plan.events()
            budget.check(
                planned
                if planned is not None
                else [("private model selection (planned, whole procedure)", plan.bound_event())]
            )
        sel = run_selection(
            plan,
            list(candidates),
            LocalSelectionData(R, keys),
            random_state=random_state,
            show_progress=show_progress,
            keys="row positions" if keys is None else "user ids",
        )
        if budget is not None:
            budget.record(sel.best_estimator_.privacy_report(), label or "private model selection")
    return sel
