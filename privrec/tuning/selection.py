"""Private model selection with its cost accounted: let the data decide what no rule can.

Hyper-parameters tuned on private data leak it, and a ``GridSearchCV`` over a private estimator
spends privacy that no ledger counts. :func:`select_private` runs the whole selection under
one ledger:

1. **Held-out parts.** Each user's ratings are split, by a keyed hash of the user's row and the
   item (no other user's data involved), into a training part and a held-out part (``holdout``
   of the ratings of users with at least two).
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
(:func:`privrec.tuning.auto.fit_by_selection`); call this when you would otherwise tune.

References: report-noisy-max selection (Dwork & Roth 2014, Sec. 3.3) with a Gaussian score
release; Papernot & Steinke (ICLR 2022) for why selection must be accounted.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from ..evaluation.protocols import predict_pairs, project_users
from ..privacy import PrivacyLedger, gaussian_event, make_rng
from ..privacy.ledger import epsilon_of_event
from ..privacy.mechanisms import gaussian_mechanism
from .rule import gaussian_multiplier, gaussian_rho

__all__ = ["PrivateSelection", "select_private", "holdout_mask"]


def holdout_mask(R: sp.csr_matrix, fraction: float, key: int) -> np.ndarray:
    """Boolean mask over ``R.data``: the held-out ratings, drawn by a keyed hash of (row, item) so
    each user's split depends on that user's own row only. Users with fewer than two ratings keep
    every rating for training."""
    rows = np.repeat(np.arange(R.shape[0], dtype=np.uint64), np.diff(R.indptr))
    cols = R.indices.astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (rows * np.uint64(0x9E3779B97F4A7C15)) ^ (cols * np.uint64(0xBF58476D1CE4E5B9)) ^ np.uint64(key)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(29)
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    mask = u < fraction
    small = np.repeat(np.diff(R.indptr) < 2, np.diff(R.indptr))
    mask &= ~small
    return mask


def _split(R: sp.csr_matrix, mask: np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``(training part, held-out part)`` of ``R`` by ``mask`` (same shape; genuine zero ratings kept)."""
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


def _user_losses(
    model, train: sp.csr_matrix, held: sp.csr_matrix, clip: float, rating_cap: int | None = None
) -> np.ndarray:
    """Each user's mean clipped squared error on their held-out ratings (0 for users without any),
    from the billboard projection of their own training part; times ``min(n_held, rating_cap)``
    when a cap is given (per-rating weighting, bounded)."""
    U, ub = project_users(model, train, with_bias=True)
    coo = held.tocoo()
    pred = predict_pairs(model, U, coo.row, coo.col, ub)
    err = np.minimum((pred - coo.data) ** 2, clip)
    n = np.bincount(coo.row, minlength=held.shape[0])
    sums = np.bincount(coo.row, weights=err, minlength=held.shape[0])
    mean = np.where(n > 0, sums / np.maximum(n, 1), 0.0)
    return mean if rating_cap is None else mean * np.minimum(n, int(rating_cap))


@dataclass
class PrivateSelection:
    """Outcome of :func:`select_private`: the released winner (refitted, or as fitted) and the whole
    procedure's ledger."""

    best_estimator_: Any
    best_index_: int
    noisy_scores_: np.ndarray
    ledger_: PrivacyLedger
    delta: float
    shares: dict[str, Any] = field(default_factory=dict)

    def privacy_report(self) -> dict:
        """The best estimator's report: every event of the procedure (candidates, score release,
        refit if any), epsilon computed over them."""
        return self.best_estimator_.privacy_report()


def _epsilon_of_rho(rho: float, delta: float) -> float:
    return float(epsilon_of_event(gaussian_event(math.sqrt(0.5 / rho)), delta, "pld"))


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

    ``candidates``: unfitted private estimators with ``epsilon`` / ``delta`` / ``random_state``
    parameters (DPALS). Their own ``epsilon`` and ``delta`` are replaced by the per-candidate
    budget. ``X``: a users x items rating matrix (CSR; the public roster and catalogue are its
    rows and columns). ``loss_clip``: the per-rating squared-error clip C (public). The default
    is the square of the first candidate's declared rating span (``rating_range``), else
    ``(2 rating_bound)^2 / 4``. ``random_state``: as for the estimators (a known seed voids the
    guarantee). ``budget``: a :class:`privrec.privacy.Budget` the whole selection is charged to.
    Under its lock, the selection is checked before any candidate sees the data (as one Gaussian
    at the target: every part of the procedure is Gaussian and together they meet (epsilon,
    delta)), and the report of every event is recorded after it (label ``label``).
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
    """
    with budget.lock() if budget is not None else contextlib.nullcontext():
        if budget is not None:  # refused before any candidate sees the data
            budget.check(
                [
                    (
                        "private model selection (planned, whole procedure)",
                        gaussian_event(gaussian_multiplier(epsilon, delta)),
                    )
                ]
            )
        K = len(candidates)
        if K < 2:
            raise ValueError("select_private needs at least two candidates")
        if not (0 < selection_share < 1 and 0 <= refit_share < 1 and selection_share + refit_share < 1):
            raise ValueError("selection_share must be in (0, 1) and refit_share in [0, 1), with a sum below 1")
        rest = 1.0 - selection_share - refit_share
        shares = [rest / K] * K if candidate_shares is None else [float(c) for c in candidate_shares]
        if len(shares) != K or not all(math.isfinite(c) and c > 0 for c in shares) or sum(shares) > rest + 1e-9:
            raise ValueError(
                f"candidate_shares must give each of the {K} candidates a positive share, summing to at most "
                f"1 - selection_share - refit_share = {rest:g}; got {candidate_shares!r}"
            )
        if not 0 < holdout < 1:
            raise ValueError(f"holdout must be in (0, 1), got {holdout!r}")
        if not (math.isfinite(float(simplicity_margin)) and simplicity_margin >= 0):
            raise ValueError(f"simplicity_margin must be finite and >= 0, got {simplicity_margin!r}")
        if not math.isfinite(float(epsilon)) or epsilon <= 0:
            raise ValueError("select_private is for private fits: epsilon must be finite and > 0")
        R = sp.csr_matrix(X, dtype=np.float64)
        R.sort_indices()
        rng = make_rng(random_state)
        seeds = rng.integers(0, 2**63 - 1, size=K + 2)
        first = candidates[0]
        if loss_clip is None:
            rr = getattr(first, "rating_range", None)
            loss_clip = float(rr[1] - rr[0]) ** 2 if rr is not None else float(getattr(first, "rating_bound", 5.0)) ** 2
        clip = float(loss_clip)

        rho = gaussian_rho(float(epsilon), float(delta)) * 0.995  # a margin for the PLD discretisation of the parts
        refit = refit_share > 0
        eps_cs = [_epsilon_of_rho(c * rho, delta) for c in shares]
        eps_r = _epsilon_of_rho(refit_share * rho, delta) if refit else None

        mask = holdout_mask(R, holdout, int(seeds[-1]) & 0xFFFFFFFF)
        train, held = _split(R, mask)
        ledger = PrivacyLedger()
        losses: list[np.ndarray] = []
        fitted: list[Any] = []
        for k, cand in enumerate(candidates):
            model = clone(cand).set_params(
                epsilon=eps_cs[k], delta=delta, random_state=int(seeds[k]) if random_state is not None else None
            )
            model.fit(train, show_progress=show_progress)
            ledger.extend(model.ledger_, prefix=f"selection candidate {k}: ")
            losses.append(_user_losses(model, train, held, clip, rating_cap))
            fitted.append(None if refit else model)
        scores = np.stack(losses, axis=1).sum(axis=0)  # (K,): each user moves each entry by <= weight * clip
        weight = 1.0 if rating_cap is None else float(rating_cap)
        z_s = math.sqrt(0.5 / (selection_share * rho))
        release = gaussian_mechanism(
            scores, math.sqrt(K) * weight * clip, z_s, rng, dtype=np.float64, label="selection scores"
        )
        release.record(ledger)
        noisy = np.asarray(release.value, dtype=np.float64)
        score_std = z_s * math.sqrt(K) * weight * clip
        handicap = np.where(np.arange(K) > 0, float(simplicity_margin) * score_std, 0.0)
        best = int(np.argmin(noisy + handicap))

        final: Any
        if refit:
            final = clone(candidates[best]).set_params(
                epsilon=eps_r, delta=delta, random_state=int(seeds[K]) if random_state is not None else None
            )
            final.fit(R, show_progress=show_progress)
            ledger.extend(final.ledger_, prefix="refit: ")
        else:  # the winner as fitted (its events are already in the ledger as a candidate's)
            final = fitted[best]
            if hasattr(final, "_project_users"):  # users' own projection of all their ratings (free)
                final.user_factors_, final.user_bias_ = final._project_users(R)
        del fitted
        total = ledger.epsilon(delta, "pld")
        if total > float(epsilon) * (1 + 1e-9):  # cannot happen with the margin above; never report beyond the target
            raise RuntimeError(f"internal error: selection spent epsilon {total:g} > target {epsilon:g}")
        # the released model carries the whole procedure's ledger: its epsilon is the total guarantee
        final.ledger_ = ledger
        final.epsilon = float(epsilon)
        if "_fitted_params" in final.__dict__:  # the fitted state now belongs to the total guarantee
            from ..models._base import _param_fingerprint

            final._fitted_params = _param_fingerprint(final)
        final.selection_ = {
            # the settings compared, without random_state: a noise seed kept beside a release would void it
            "candidates": [{k: v for k, v in c.get_params().items() if k != "random_state"} for c in candidates],
            "chosen": best,
            "noisy_scores": noisy.tolist(),
            "epsilon_candidates": eps_cs,
            "epsilon_refit": eps_r,
            "refit": refit,
            "released": "refitted on every rating"
            if refit
            else f"the winning candidate, as fitted on the training parts ({1 - holdout:g} of each user's ratings)",
            "shares": {
                "candidates": shares,
                "selection": selection_share,
                "refit": refit_share,
            },
            "holdout": holdout,
            "loss_clip": clip,
            "rating_cap": rating_cap,
            "simplicity_margin": float(simplicity_margin),
            "score_noise_std": score_std,
        }
        if budget is not None:
            budget.record(final.privacy_report(), label or "private model selection")
        return PrivateSelection(final, best, noisy, ledger, float(delta), dict(final.selection_["shares"]))
