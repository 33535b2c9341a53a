"""Joint differential privacy across data owners: noisy SGD with personal and shared blocks.

Huang, Jiang, Liu, Mahdian, Mao, Mirrokni, "Learning across Data Owners with Joint Differential
Privacy" (Algorithm 1, Sec. 3.1).

n data owners each hold records; the model has a *personal* block x_j per owner and a *shared*
block u. In the billboard model the server publishes u and owner j keeps x_j to itself, so joint
DP asks that everything except x_j be private with respect to owner j's data. Algorithm 1
(A_NSGD) is projected SGD on (x_{j_t}, u) with Gaussian noise on the shared coordinates only.

What privrec runs (:class:`JointDPSGD`):

* each step picks ``owners_per_step`` = B distinct owners uniformly (B = 1 is the paper's
  algorithm) and ``records_per_owner`` = k uniformly random records (with replacement) from each,
  clips each record's joint gradient ``(grad_x, grad_u)`` to L2 norm ``clip_norm`` = L (this
  enforces the paper's L-Lipschitz assumption in code) and uses each owner's mean over its k
  records (k = 1 is the paper's algorithm; k > 1 costs nothing extra under the owner-level
  accounting below, since the mean of clipped gradients is still bounded by L);
* the whole update is ``theta <- Proj(theta - eta (sum of clipped gradients + noise) / B)``
  where noise ~ N(0, sigma^2) is added to the shared block only (``regime="joint"``), to every
  coordinate of every owner's block and the shared block (``regime="full"``, the full-DP
  baseline), or not at all (``regime="nonprivate"``, collaboration without DP);
  ``regime="individual"`` trains each owner alone with its own copy of u (no communication);
* projection onto L2 balls of radii ``personal_radius`` (per owner) and ``shared_radius``;
* the output is the average of the iterates t = 0..T-1 (Algorithm 1, line 8) or the last iterate.

Accounting. Neighbouring relation (joint DP, Huang et al., Definition 2.2): datasets S, S' that differ
only in owner j's data -- owner j's records replaced by any other records (any number, so adding or removing
records inside owner j is covered too); the set of owners, n and every other owner's data are
the same and public (ledger relation ``replace_one``). What must be indistinguishable:

* ``regime="joint"``: everything except x_j, i.e. the shared block u **and every other owner's
  personal block** x_i (i != j), which are released without noise;
* ``regime="full"``: every released parameter, x_j included (standard DP).

Per-step sensitivity (both regimes). Owner j enters step t only through its clipped mean gradient
g_j = (gP_j, gU_j), ||g_j|| <= L whatever x_j, u and the records are. g_j depends on x_j, which
in the joint regime is never noised and diverges between S and S' as soon as a changed record was
used; but x_j is a deterministic function of D_j, of the past released shared iterates and of
data-independent uniforms (which owners and which of j's records are drawn), so conditionally on
everything released before step t, g_j(S) and g_j(S') are two fixed vectors of norm <= L, at
distance <= 2L. The other sampled owners' gradients are functions of released state and of data
S and S' share. The noised part of step t (u for ``joint``; every block for ``full``) is thus
``released value - eta/B (sum of gradients + N(0, sigma^2 I))``: a Gaussian mechanism with L2
sensitivity 2L and noise multiplier z = sigma / (2L) (the projection is post-processing).

``regime="joint"``: **no amplification by owner sampling.** Other owners' personal blocks are
released without noise and change exactly when their owner is sampled, so they can reveal the
sampled set of every step (e.g. owners whose data pin their gradient to a constant nonzero
personal update), hence whether j was sampled: the sampling is not secret and the usual
subsampling lemmas, which need it hidden, do not apply (an audit's construction -- other owners
with x = 0 and a huge label, owner j one extreme record -- has an exact eps of 2.67 at delta =
1e-5, n = 20, T = 1, where the former subsampled accounting reported 1; the test
``test_joint_regime_audit_owner_sampling_is_revealed`` measures the leak on the real estimator).
privrec therefore accounts the joint regime as if the whole trajectory *and* the sampled sets
were published: each step is one ``GaussianDpEvent(z)`` (a step without owner j costs nothing,
so charging every step is an upper bound), composed over the T steps, whatever B and n are. The shared block is the only noised
output, and the other owners' blocks are functions of it, of the public sampled sets and of data
S and S' share, hence post-processing; x_j is excluded by the joint-DP definition. So the final
(or averaged) release is (eps, delta)-joint-DP with eps from RDP composition of T Gaussians. This
deliberately departs from accounting each step as a subsampled Gaussian at rate B/n,
which is unsound under joint DP for the reason above; the price is more noise at the same eps
when B/n is small (at B/n = 1/2 dp_accounting's without-replacement RDP bound is no tighter than
plain composition, so there the noise does not grow).

``regime="full"``: **amplification is kept, and is valid.** Every coordinate of every owner's
block and of u receives fresh noise at every step whether or not its owner is sampled, and
nothing is released unnoised, so the sampled set stays hidden. Each step is the base mechanism
"sum over a uniform B-subset of owners of their clipped contributions (gP_i placed in row i,
gU_i) + N(0, sigma^2 I)" whose input changes in one element (owner j) with L2 sensitivity 2L:
the subsampled Gaussian without replacement under ``replace_one`` (Wang, Balle, Kasiviswanathan
2019), recorded as ``SampledWithoutReplacementDpEvent(n, B, GaussianDpEvent(z))`` and composed
over the T steps (adaptive composition; the state is exactly the released iterate).

Every noise draw (one per step) emits its DpEvent; the fit records them in a ``replace_one``
:class:`~privrec.privacy.PrivacyLedger` (T identical per-step events as one self-composed
event) and epsilon is whatever the RDP accountant of dp_accounting computes from them. With a
target epsilon, z is calibrated by bisection over the exact events the fit records. In both
regimes the accounting ignores the extra amplification from sampling a record inside an owner (a
saving that is unsafe to claim when x_j is hidden state). The paper's own sigma formula
(:func:`paper_noise_std`) has unspecified constants and is reported only for comparison.

With record-level DP per owner the guarantee is per user when each user holds one record; for a
user holding r records within an owner of m records the conservative bound above already covers
any change of owner j's data (it never uses the record-sampling rate), so the same epsilon holds
at the user level. :func:`group_privacy` and :func:`user_level_budget` implement the paper's
group-privacy conversion (Lemma 3.6, Sec. 3.1.2) for callers who account record-level.

This module holds the estimator; the models it trains are in :mod:`privrec.convex.joint_models`,
the events, calibration and the paper's formulas in :mod:`privrec.convex.joint_accounting` (their
names are importable from here, as before the split).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._constraints import (
    DELTA,
    EPSILON,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    POSITIVE_OR_INF,
    HasMethods,
    StrOptions,
)
from .._params import Hyperparameters, param
from .._validation import check_delta, check_epsilon, check_finite_array, check_int, check_positive
from ..pipeline import check_ledger
from ..privacy import (
    PrivacyLedger,
    check_noise_random_state,
    gaussian_mechanism,
    gaussian_noise,
    make_rng,
)
from ..privacy.clipping import project_ball
from .joint_accounting import (
    _calibrated_multiplier,
    _fit_event,
    _step_event,
    group_privacy,
    paper_noise_std,
    user_level_budget,
)
from .joint_models import PersonalBiasLinear, PersonalBiasSoftmax, _parts_from_scores

__all__ = [
    "JointDPSGD",
    "PersonalBiasSoftmax",
    "PersonalBiasLinear",
    "paper_noise_std",
    "group_privacy",
    "user_level_budget",
    "REGIMES",
]

REGIMES = ("joint", "full", "nonprivate", "individual")


@dataclass
class JointFitInfo:
    noise_std: float
    noise_multiplier: float
    learning_rate: float
    n_steps: int
    owners_per_step: int


class JointDPSGD(Hyperparameters, BaseEstimator):
    """Joint-DP noisy SGD with a personal block per owner and a shared block (Huang et al., Algorithm 1).

    Parameters
    ----------
    model : ``PersonalBiasSoftmax`` or ``PersonalBiasLinear`` (or any object with the same methods).
    regime : ``"joint"`` (noise on the shared block only), ``"full"`` (noise on every coordinate,
        the full-DP baseline), ``"nonprivate"`` (collaboration without DP) or ``"individual"``
        (each owner trains alone with its own shared block; no communication, epsilon irrelevant).
    epsilon, delta : target budget for ``joint`` / ``full``; sigma is calibrated by the accountant
        over the exact events the fit records (see the module docstring: ``joint`` composes T plain
        Gaussian steps, since the other owners' unnoised blocks reveal which owners were sampled;
        ``full`` keeps amplification by owner sampling). Alternatively give ``noise_multiplier``
        (sigma / (2 clip_norm)) and read epsilon from :meth:`privacy_report`.
    n_steps : T (``individual``: steps per owner).
    owners_per_step : B distinct owners per step (1 = the paper's algorithm). In the ``joint``
        regime B does not change the noise multiplier (no amplification); the update's noise is
        still divided by B.
    records_per_owner : k records per selected owner per step, averaged (1 = the paper's algorithm;
        the ``individual`` regime always uses one record per owner per step).
    clip_norm : L, per-example bound on the joint gradient (enforced by clipping).
    personal_radius, shared_radius : L2-ball radii of X and U (``inf`` = no projection).
    learning_rate : float or ``"auto"``: eta = R / sqrt(T (L^2 + p sigma^2 / B^2)) with
        R = sqrt(n D_X^2 + D_U^2) (diameters) and p the number of noised coordinates
        (projected SGD's step for E||g~||^2 <= L^2 + p sigma^2 / B^2).
    average : return the average of iterates 0..T-1 (as in Algorithm 1) instead of the last iterate.
    random_state : ``None`` draws noise from OS entropy. A fixed int seed is for experiments only
        and voids the privacy guarantee for anyone who knows it. A numpy ``Generator`` /
        ``RandomState`` is rejected at fit time (``sklearn.clone`` deep-copies it, so clones would
        draw identical noise).
    """

    model: Any = param(HasMethods(["gradient_parts", "check_labels"]), kw_only=False)
    regime: str = param(StrOptions(set(REGIMES)), default="joint")
    epsilon: float | None = param(EPSILON, None, default=1.0)
    delta: float = param(DELTA, default=1e-5)
    n_steps: int = param(POSITIVE_INT, default=1000)
    owners_per_step: int = param(POSITIVE_INT, default=1)
    records_per_owner: int = param(POSITIVE_INT, default=1)
    clip_norm: float = param(POSITIVE, default=1.0)
    personal_radius: float = param(POSITIVE_OR_INF, default=math.inf)
    shared_radius: float = param(POSITIVE_OR_INF, default=math.inf)
    learning_rate: float | str = param(StrOptions({"auto"}), POSITIVE, default="auto")
    noise_multiplier: float | None = param(NON_NEGATIVE, None, default=None)
    average: bool = param("boolean", default=True)
    random_state: Any = param(default=None)  # check_noise_random_state

    # -- validation ---------------------------------------------------------------------------

    def _validate(self):
        """Constraint table (scikit-learn style), then the resolved values used by the fit."""
        self._validate_params()
        self.n_steps_ = check_int(self.n_steps, "n_steps", minimum=1)
        self.clip_ = check_positive(self.clip_norm, "clip_norm")
        self.rx_ = check_positive(self.personal_radius, "personal_radius", allow_inf=True)
        self.ru_ = check_positive(self.shared_radius, "shared_radius", allow_inf=True)
        check_int(self.owners_per_step, "owners_per_step", minimum=1)
        self.k_ = check_int(self.records_per_owner, "records_per_owner", minimum=1)
        if self.regime in ("joint", "full"):
            self.delta_ = check_delta(self.delta)
            if self.noise_multiplier is None:
                if self.epsilon is None:
                    raise ValueError("give epsilon or noise_multiplier for a private regime")
                check_epsilon(self.epsilon)
            else:
                check_positive(self.noise_multiplier, "noise_multiplier", allow_zero=True)

    def fit(self, X, y, owner):
        """Fit on records X (N, d), labels y, owner labels ``owner`` (N,) (any hashable values)."""
        check_noise_random_state(self.random_state, type(self).__name__)
        self._validate()
        X = check_finite_array(X, "X")
        if X.ndim != 2 or X.shape[1] != self.model.n_features:
            raise ValueError(f"X must have shape (N, {self.model.n_features}), got {X.shape}")
        X = X.astype(np.float64 if X.dtype == np.float64 else np.float32)
        y = self.model.check_labels(y)
        owner = np.asarray(owner)
        if y.shape != (X.shape[0],) or owner.shape != (X.shape[0],):
            raise ValueError("X, y and owner must have the same number of rows")
        if X.shape[0] == 0:
            raise ValueError("no records to fit")
        self.owners_, owner_idx = np.unique(owner, return_inverse=True)
        n = self.owners_.size
        B = int(self.owners_per_step)
        if self.regime != "individual" and n < B:
            raise ValueError(f"owners_per_step ({B}) exceeds the number of owners ({n})")
        order = np.argsort(owner_idx, kind="stable")
        Xs, ys = X[order], y[order]
        counts = np.bincount(owner_idx, minlength=n)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rng = make_rng(self.random_state)
        ledger = PrivacyLedger(neighboring="replace_one")
        T = self.n_steps_
        L = self.clip_

        # noise: calibrated over exactly the events the fit records (see _fit_joint)
        private = self.regime in ("joint", "full")
        if private:
            if self.noise_multiplier is not None:
                z = float(self.noise_multiplier)
            else:
                z = _calibrated_multiplier(self.regime, float(self.epsilon), self.delta_, n, B, T)
            sigma = 2.0 * L * z
        else:
            z, sigma = 0.0, 0.0
        p_shared = int(np.prod(self.model.shared_shape))
        p_personal = int(np.prod(self.model.personal_shape))
        noised = {"joint": p_shared, "full": p_shared + n * p_personal}.get(self.regime, 0)
        diam_x = 2 * self.rx_ if math.isfinite(self.rx_) else 2.0
        diam_u = 2 * self.ru_ if math.isfinite(self.ru_) else 2.0
        if self.learning_rate == "auto":
            n_eff = 1 if self.regime == "individual" else n
            Bq = 1 if self.regime == "individual" else B
            R = math.sqrt(n_eff * diam_x**2 + diam_u**2)
            eta = R / math.sqrt(T * (L**2 + noised * sigma**2 / Bq**2))
        else:
            eta = float(self.learning_rate)
        self.info_ = JointFitInfo(sigma, z, eta, T, B)
        self.ledger_ = ledger
        dtype = X.dtype
        if self.regime == "individual":
            self._fit_individual(Xs, ys, counts, starts, eta, rng, dtype)
        else:
            events = self._fit_joint(Xs, ys, counts, starts, eta, z, B, rng, dtype)
            # one entry per distinct per-step event, self-composed over the noise draws that emitted it
            for event, count in events.items():
                ledger.record(
                    self._ledger_label(count, B, n),
                    dp_accounting.SelfComposedDpEvent(event, count),
                    clip_norm=L,
                    noise_std=sigma,
                    sensitivity=2 * L,
                )
            if private:  # the recorded events must be exactly those calibration planned
                check_ledger(ledger, [(self._ledger_label(T, B, n), _fit_event(self.regime, z, n, B, T))])
        return self

    def _ledger_label(self, steps: int, B: int, n: int) -> str:
        return f"{self.regime}-DP SGD: {steps} noisy steps, {B} of {n} owners per step, noise on " + (
            "the shared block (sampling revealed: no amplification)"
            if self.regime == "joint"
            else "all coordinates (sampling hidden: subsampled without replacement)"
        )

    def _fit_joint(self, Xs, ys, counts, starts, eta, z, B, rng, dtype):
        """Run the shared-model regimes; return {per-step DpEvent: number of noise draws that emitted it}."""
        n = counts.size
        T, L = self.n_steps_, self.clip_
        model = self.model
        U = np.zeros(model.shared_shape, dtype=dtype)
        P = np.zeros((n, *model.personal_shape), dtype=dtype)
        U_sum = np.zeros_like(U, dtype=np.float64)
        P_sum = np.zeros_like(P, dtype=np.float64)
        full = self.regime == "full"
        private = self.regime in ("joint", "full")
        sigma = 2.0 * L * z
        events = collections.Counter()
        full_event = _step_event("full", z, n, B) if full else None
        chunk = max(1, min(T, 4096))
        for c0 in range(0, T, chunk):
            c = min(chunk, T - c0)
            if B == 1:
                sel = rng.integers(0, n, size=(c, 1))
            elif n == B:
                sel = np.broadcast_to(np.arange(n), (c, n))
            else:
                sel = np.argpartition(rng.random((c, n)), B - 1, axis=1)[:, :B]
            k = self.k_
            rows = starts[sel][..., None] + np.floor(rng.random((*sel.shape, k)) * counts[sel][..., None]).astype(
                np.int64
            )
            for t in range(c):
                if self.average:
                    U_sum += U
                    P_sum += P
                j = sel[t]
                rt = rows[t].reshape(-1)
                Xb, yb = Xs[rt], ys[rt]
                r, sq = model.gradient_parts(np.repeat(P[j], k, axis=0), U, Xb, yb)
                # clip each record, then average the owner's k records (norm of the mean <= L)
                with np.errstate(divide="ignore"):  # sq == 0 in float32 -> scale 1 (zero gradient)
                    scale = (np.minimum(1.0, L / np.maximum(np.sqrt(sq), 1e-300)) / k).astype(dtype)
                gU = model.shared_grad_sum(r, Xb, scale)
                gP = model.personal_grads(r, Xb, scale)
                if k > 1:
                    gP = gP.reshape(j.size, k, *gP.shape[1:]).sum(axis=1)
                if private and not full:
                    # joint: Gaussian mechanism on the shared block, sensitivity 2L (owner j's gU_j)
                    rel = gaussian_mechanism(gU, 2.0 * L, z, rng, dtype=dtype)
                    gU = rel.value
                    events[rel.event] += 1
                elif full:
                    # full: one Gaussian mechanism on every coordinate (u here, all personal rows
                    # below) of the sum over a hidden uniform B-subset of owners
                    if sigma > 0:
                        gU = gU + gaussian_noise(U.shape, sigma, rng, dtype)
                    events[full_event] += 1
                U -= (eta / B) * gU
                project_ball(U, self.ru_, rows=False, inplace=True)
                if full and sigma > 0:
                    noise = gaussian_noise(P.shape, sigma, rng, dtype)
                    noise[j] += gP
                    P -= (eta / B) * noise
                    project_ball(P, self.rx_, inplace=True)
                else:
                    P[j] -= (eta / B) * gP
                    P[j] = project_ball(P[j], self.rx_, inplace=True)
        if self.average:
            self.shared_ = (U_sum / T).astype(dtype)
            self.personal_ = (P_sum / T).astype(dtype)
        else:
            self.shared_, self.personal_ = U, P
        return events

    def _fit_individual(self, Xs, ys, counts, starts, eta, rng, dtype):
        """Every owner runs its own projected SGD on (x_j, u_j), all owners vectorised per step."""
        n = counts.size
        T, L = self.n_steps_, self.clip_
        model = self.model
        U = np.zeros((n, *model.shared_shape), dtype=dtype)
        P = np.zeros((n, *model.personal_shape), dtype=dtype)
        U_sum = np.zeros_like(U, dtype=np.float64)
        P_sum = np.zeros_like(P, dtype=np.float64)
        for _t in range(T):
            if self.average:
                U_sum += U
                P_sum += P
            rows = starts + np.floor(rng.random(n) * counts).astype(np.int64)
            Xb, yb = Xs[rows], ys[rows]
            # per-owner scores with per-owner shared blocks
            if len(model.shared_shape) == 2:
                s = np.einsum("nd,ndk->nk", Xb, U)
            else:
                s = np.einsum("nd,nd->n", Xb, U)
            r, sq = _parts_from_scores(model, s, P, Xb, yb)
            scale = np.minimum(1.0, L / np.maximum(np.sqrt(sq), 1e-300)).astype(dtype)
            if len(model.shared_shape) == 2:
                gU = Xb[:, :, None] * (r * scale[:, None])[:, None, :]
            else:
                gU = Xb * (r * scale)[:, None]
            U -= eta * gU
            project_ball(U, self.ru_, inplace=True)
            P -= eta * model.personal_grads(r, Xb, scale)
            project_ball(P, self.rx_, inplace=True)
        if self.average:
            U, P = (U_sum / T).astype(dtype), (P_sum / T).astype(dtype)
        self.shared_per_owner_ = U
        self.personal_ = P
        self.shared_ = None

    # -- inference ----------------------------------------------------------------------------
    def _owner_index(self, owner) -> np.ndarray:
        owner = np.asarray(owner)
        idx = np.searchsorted(self.owners_, owner)
        idx = np.clip(idx, 0, self.owners_.size - 1)
        if not np.all(self.owners_[idx] == owner):
            raise ValueError("owner contains values not seen in fit")
        return idx

    def decision_function(self, X, owner) -> np.ndarray:
        check_is_fitted(self, "personal_")
        X = check_finite_array(X, "X")
        j = self._owner_index(owner)
        if self.regime == "individual":
            Uj = self.shared_per_owner_[j]
            if Uj.ndim == 3:
                return np.einsum("nd,ndk->nk", X, Uj) + self.personal_[j]
            return np.einsum("nd,nd->n", X, Uj) + self.personal_[j][:, 0]
        return self.model.scores(self.personal_[j], self.shared_, X)

    def predict(self, X, owner) -> np.ndarray:
        s = self.decision_function(X, owner)
        return np.argmax(s, axis=1) if s.ndim == 2 else s

    def score(self, X, y, owner) -> float:
        """Accuracy (classification) or mean squared error (regression) on (X, y, owner)."""
        pred = self.predict(X, owner)
        y = np.asarray(y)
        if isinstance(self.model, PersonalBiasSoftmax):
            return float(np.mean(pred == y))
        return float(np.mean((pred - y) ** 2))

    def privacy_report(self) -> dict:
        """Ledger report (events, epsilon by RDP and PLD) plus the regime; epsilon = inf for nonprivate."""
        check_is_fitted(self, "ledger_")
        if self.regime in ("joint", "full"):
            rep = self.ledger_.report(self.delta_, include_pld=False)
        else:
            rep = {"events": [], "epsilon": "inf", "note": f"regime {self.regime!r} adds no noise"}
        rep["regime"] = self.regime
        rep["guarantee"] = {
            "joint": "joint DP (everything but owner j's personal block; no amplification by "
            "owner sampling, which the other owners' personal blocks reveal)",
            "full": "standard DP of all released parameters",
            "nonprivate": "none",
            "individual": "none (no communication)",
        }[self.regime]
        return rep
