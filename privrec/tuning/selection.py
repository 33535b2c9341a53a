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
backend fits the same candidates on the same held-out split with the same ledger. The plan is
in :mod:`privrec.tuning.selection_plan`, the held-out split, the losses and the data protocol in
:mod:`privrec.tuning.selection_data`; their names are importable from here, as before the split.

References: report-noisy-max selection (Dwork & Roth 2014, Sec. 3.3) with a Gaussian score
release; Papernot & Steinke (ICLR 2022) for why selection must be accounted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from .._params import _param_fingerprint
from ..allocation import stable_user_keys
from ..data.fit_input import check_fit_matrix, fit_input
from ..pipeline import check_ledger
from ..privacy import PrivacyLedger, make_rng
from ..privacy.mechanisms import gaussian_mechanism
from .selection_data import (  # noqa: F401 (re-exported: importable from here, as before the split)
    LocalSelectionData,
    SelectionData,
    holdout_mask,
    part_of,
    split_holdout,
    user_losses,
)
from .selection_plan import (  # noqa: F401 (re-exported: importable from here, as before the split)
    SCORES_LABEL,
    SelectionPlan,
    _fraction,
    _positive_finite,
    epsilon_of_rho,
    plan_selection,
)

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
