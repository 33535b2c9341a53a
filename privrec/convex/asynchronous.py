"""Asynchronous DP learning with per-owner Laplace budgets.

Farokhi, Wu, Smith, Kaafar, "The Cost of Privacy in Asynchronous Differentially-Private Machine
Learning": Algorithm 1 (Sec. 3) and Theorem 2 (Sec. 4).

A central learner and N data owners, owner i with n_i records and its own budget eps_i. At each
step one owner, chosen uniformly (rate-1 Poisson clocks), answers a gradient query at the midpoint
of its model and the learner's; its answer carries Laplace noise scaled to its own budget
(Algorithm 1). The objective is f(theta) = g(theta) + (1/n) sum over all records of loss,
with g(theta) = (sigma / 2) ||theta||^2 and theta in the box ||theta||_inf <= theta_max.

Privacy (per owner, record-level: one record of owner i replaced). Owner i answers at most T
queries; each answer is the Laplace mechanism on the average of per-example gradients. The paper
uses b_i = 2 Xi T / (n_i eps_i) with Xi an L2 bound, but Laplace noise needs the *L1* sensitivity,
which the paper does not address. privrec makes it rigorous in code, choosing with ``l1_mode``:

* ``"clip_l1"`` (default): every per-example gradient is clipped to L1 norm ``grad_bound`` = Xi,
  so replacing one record moves the average by at most 2 Xi / n_i in L1 and b_i = 2 Xi T/(n_i eps_i)
  exactly as in the paper;
* ``"sqrt_p"``: per-example gradients are clipped to L2 norm Xi and the L1 sensitivity is bounded
  by sqrt(p) times the L2 one, so b_i = 2 sqrt(p) Xi T / (n_i eps_i) (the safe, larger value).

Each answer is recorded in owner i's own ``PrivacyLedger`` as a Laplace event with noise multiplier
b_i / sensitivity = T / eps_i; owner i's epsilon comes from its ledger (RDP accountant at the
report's delta), and ``epsilon_pure`` is the basic-composition bound (answers / T) * eps_i <= eps_i
(the Laplace RDP curve depends only on scale / sensitivity, so the ledger's relation label
``add_or_remove_one`` does not change the numbers for the replace-one sensitivity used here).
The owner sequence is data-independent randomness, so counting actual answers is valid.

:meth:`AsyncDPLearner.simulate` (many independent runs at once, for benchmarks) accounts the same
way: every run's answers of owner i are one Laplace event in owner i's
``simulation_ledgers_[i]``, so :meth:`AsyncDPLearner.simulation_report` gives, from the
accountant, both the cost of publishing *all* simulated runs (the composition over runs) and the
largest single-run cost.

Fitted attributes: ``coef_`` (the release), ``owner_models_`` (the learner's copies of the owner
models, computed from the noisy answers only: post-processing), ``owner_sequence_`` (data-
independent), ``owners_``, ``epsilons_``, ``laplace_scales_`` (functions of the public n_i: the
neighbouring relation replaces a record, so the owners' sizes are public), ``ledgers_``. Nothing
else about the records is stored. ``random_state``: ``None`` (OS entropy) or an int seed
(experiments only); a ``numpy.random.Generator`` is rejected at fit time because
``sklearn.clone`` would copy it into every clone (identical noise).

Update (the paper's Algorithm 1; ``coefficient`` switches the learner's regulariser step between
c = (N - 1) / N (eq. 7) and c = 1/2 (the proof and the authors' code, default)):

    thetabar = (theta_L + theta_i) / 2
    Q = (1/n_i) sum_{D_i} clip(grad loss(thetabar)) + Laplace(b_i)
    theta_i <- Proj[thetabar - (N rho / (T^2 sigma)) ((1/(2N)) grad g(thetabar) + (n_i / n) Q)]
    theta_L <- Proj[thetabar - c rho / (T^2 sigma) grad g(thetabar)]

The loss is the squared loss of the paper's experiments (Sec. 5), (y - theta^T x)^2 (no 1/2); ``loss``
also accepts any margin loss of :mod:`privrec.convex.losses` (``derivative(z, y)``).
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._constraints import DELTA, NON_NEGATIVE, POSITIVE, POSITIVE_INT, POSITIVE_OR_INF, StrOptions
from .._params import Hyperparameters, param
from .._validation import check_delta, check_finite_array, check_int, check_positive
from ..privacy import PrivacyLedger, check_noise_random_state, epsilon_of_event, laplace_event, laplace_noise, make_rng

__all__ = [
    "AsyncDPLearner",
    "SpecSquaredLoss",
    "laplace_scale",
    "effective_noise_scale",
    "cost_bound",
    "ridge_optimum",
    "ridge_objective",
]

COEFFICIENTS = ("proof", "eq7")
L1_MODES = ("clip_l1", "sqrt_p")


class SpecSquaredLoss:
    """(y - <x, theta>)^2, the loss of the experiments of Farokhi et al. (Sec. 5) (derivative 2 (z - y))."""

    def losses(self, z, y):
        return (y - z) ** 2

    def derivative(self, z, y):
        return 2.0 * (z - y)


def laplace_scale(
    grad_bound: float, n_steps: int, n_records: int, epsilon: float, n_params: int | None = None
) -> float:
    """b_i = 2 Xi T / (n_i eps_i) (Farokhi et al., Alg. 1), times sqrt(p) when ``n_params`` = p is given (L2 bound)."""
    xi = check_positive(grad_bound, "grad_bound")
    T = check_int(n_steps, "n_steps", minimum=1)
    n_i = check_int(n_records, "n_records", minimum=1)
    eps = check_positive(epsilon, "epsilon", allow_inf=True)
    if eps == 0:
        raise ValueError("epsilon must be > 0")
    if math.isinf(eps):
        return 0.0
    factor = 1.0 if n_params is None else math.sqrt(check_int(n_params, "n_params", minimum=1))
    return 2.0 * factor * xi * T / (n_i * eps)


def effective_noise_scale(grad_bound: float, n_steps: int, n_total: int, epsilon: float) -> float:
    """Scale of (n_i / n) w: 2 Xi T / (n eps_i), independent of n_i."""
    return laplace_scale(grad_bound, n_steps, n_total, epsilon)


def cost_bound(n_steps: int, n_total: int, epsilons) -> float:
    """B(T) = 1/T^2 + N sum_i (1/T + 2 sqrt(2) / (n eps_i))^2 (Farokhi et al., Theorem 2)."""
    T = check_int(n_steps, "n_steps", minimum=1)
    n = check_int(n_total, "n_total", minimum=1)
    eps = np.asarray(epsilons, dtype=np.float64)
    if eps.ndim != 1 or eps.size == 0 or np.any(~(eps > 0)):
        raise ValueError("epsilons must be a non-empty 1-D array of positive values")
    N = eps.size
    return float(1.0 / T**2 + N * np.sum((1.0 / T + 2.0 * math.sqrt(2.0) / (n * eps)) ** 2))


def ridge_optimum(X, y, sigma: float) -> np.ndarray:
    """theta* = ((2/n) X^T X + sigma I)^{-1} (2/n) X^T y, the minimiser of ``ridge_objective``."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, p = X.shape
    A = (2.0 / n) * (X.T @ X) + sigma * np.eye(p)
    return np.linalg.solve(A, (2.0 / n) * (X.T @ y))


def ridge_objective(theta, X, y, sigma: float) -> np.ndarray:
    """f(theta) = (sigma/2)||theta||^2 + (1/n) sum (y - theta^T x)^2; theta may be (..., p)."""
    theta = np.asarray(theta, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = X.shape[0]
    # (1/n)||y - X theta||^2 via sufficient statistics (theta batched)
    G = X.T @ X / n
    c = X.T @ y / n
    yy = float(y @ y) / n
    quad = np.einsum("...i,ij,...j->...", theta, G, theta)
    return 0.5 * sigma * np.sum(theta * theta, axis=-1) + yy - 2.0 * theta @ c + quad


class AsyncDPLearner(Hyperparameters, BaseEstimator):
    """Asynchronous learner with per-owner Laplace budgets (Farokhi et al., Algorithm 1).

    Parameters
    ----------
    epsilon : a number (every owner) or one value per owner (order of ``np.unique(owner)``);
        ``inf`` turns an owner's noise off.
    n_steps : T.
    rho : step-size constant; the step is rho / (T^2 sigma) (``rho = 0``: nothing moves).
    sigma : strong-convexity modulus of g(theta) = (sigma/2)||theta||^2.
    theta_max : box radius of the projection.
    grad_bound : Xi, the per-example gradient clip (L1 or L2 per ``l1_mode``).
    l1_mode : ``"clip_l1"`` or ``"sqrt_p"`` (see module docstring).
    coefficient : ``"proof"`` (c = 1/2, default, as the authors' code) or ``"eq7"`` (c = (N-1)/N).
    delta : delta at which the per-owner accountant epsilon is reported.
    random_state : ``None`` draws noise and the owner sequence from OS entropy. An int seed is for
        experiments only and voids the guarantee for anyone who knows it; a Generator is rejected
        at fit time (``sklearn.clone`` would give every clone the same noise).
    """

    epsilon: Any = param(default=1.0)  # a number or one per owner: checked in _prepare
    n_steps: int = param(POSITIVE_INT, default=1000)
    rho: float = param(NON_NEGATIVE, default=1.0)
    sigma: float = param(POSITIVE, default=1e-5)
    theta_max: float = param(POSITIVE_OR_INF, default=1e5)
    grad_bound: float = param(POSITIVE, default=1.0)
    l1_mode: str = param(StrOptions(set(L1_MODES)), default="clip_l1")
    coefficient: str = param(StrOptions(set(COEFFICIENTS)), default="proof")
    loss: Any = param(default=None)  # None = squared loss; checked in _prepare
    delta: float = param(DELTA, default=1e-6)
    random_state: Any = param(default=None)  # check_noise_random_state

    # ------------------------------------------------------------------------------------------
    def _prepare(self, X, y, owner):
        self._validate_params()
        check_noise_random_state(self.random_state, type(self).__name__)
        if self.l1_mode not in L1_MODES:
            raise ValueError(f"l1_mode must be one of {L1_MODES}, got {self.l1_mode!r}")
        if self.coefficient not in COEFFICIENTS:
            raise ValueError(f"coefficient must be one of {COEFFICIENTS}, got {self.coefficient!r}")
        T = check_int(self.n_steps, "n_steps", minimum=1)
        check_positive(self.rho, "rho", allow_zero=True)
        check_positive(self.sigma, "sigma")
        check_positive(self.theta_max, "theta_max", allow_inf=True)
        check_positive(self.grad_bound, "grad_bound")
        check_delta(self.delta)
        X = check_finite_array(X, "X")
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_records, n_features), got shape {X.shape}")
        X = X.astype(np.float64)
        y = check_finite_array(np.asarray(y, dtype=np.float64), "y")
        owner = np.asarray(owner)
        if y.shape != (X.shape[0],) or owner.shape != (X.shape[0],):
            raise ValueError("X, y and owner must have the same number of rows")
        if X.shape[0] == 0:
            raise ValueError("no records to fit")
        owners, owner_idx = np.unique(owner, return_inverse=True)
        N = owners.size
        eps = np.asarray(self.epsilon, dtype=np.float64)
        if eps.ndim == 0:
            eps = np.full(N, float(eps))
        if eps.shape != (N,):
            raise ValueError(f"epsilon must be a number or have one value per owner ({N}), got shape {eps.shape}")
        if np.any(np.isnan(eps)) or np.any(eps <= 0):
            raise ValueError("every owner's epsilon must be > 0 (inf = no noise)")
        order = np.argsort(owner_idx, kind="stable")
        counts = np.bincount(owner_idx, minlength=N)
        starts = np.concatenate([[0], np.cumsum(counts)])
        p = X.shape[1]
        xi = float(self.grad_bound)
        factor = math.sqrt(p) if self.l1_mode == "sqrt_p" else 1.0
        with np.errstate(divide="ignore"):
            b = np.where(np.isinf(eps), 0.0, 2.0 * factor * xi * T / (counts * eps))
        return X[order], y[order], owners, counts, starts, eps, b, T

    def _clipped_mean_gradients(self, Xi_, yi, theta_bar):
        """Average of clipped per-example gradients of one owner, for a batch of runs.

        Xi_: (n_i, p), theta_bar: (R, p) -> (R, p).
        """
        loss = self.loss or SpecSquaredLoss()
        Z = theta_bar @ Xi_.T  # (R, n_i)
        D = loss.derivative(Z, yi[None, :])  # (R, n_i); per-example gradient = D * x
        if self.l1_mode == "clip_l1":
            xnorm = np.abs(Xi_).sum(axis=1)
        else:
            xnorm = np.sqrt(np.einsum("ij,ij->i", Xi_, Xi_))
        gn = np.abs(D) * xnorm[None, :]
        scale = np.minimum(1.0, self.grad_bound / np.maximum(gn, 1e-300))
        return (D * scale) @ Xi_ / Xi_.shape[0]

    def _run(self, X, y, counts, starts, b, T, n_runs, rng, checkpoints=None):
        """Vectorised over ``n_runs`` independent runs; returns final theta_L, selections, trajectory."""
        N = counts.size
        n = int(counts.sum())
        p = X.shape[1]
        step = self.rho / (T**2 * self.sigma)
        c = 0.5 if self.coefficient == "proof" else (N - 1) / N
        tmax = float(self.theta_max)
        theta_L = np.zeros((n_runs, p))
        theta_O = np.zeros((n_runs, N, p))
        sel = rng.integers(0, N, size=(T, n_runs))
        runs = np.arange(n_runs)
        ckpt = set() if checkpoints is None else {int(k) for k in checkpoints}
        traj = {}
        for k in range(1, T + 1):
            i = sel[k - 1]
            theta_bar = 0.5 * (theta_L + theta_O[runs, i])
            G = np.empty((n_runs, p))
            for owner in np.unique(i):
                rr = np.flatnonzero(i == owner)
                s0, s1 = starts[owner], starts[owner + 1]
                G[rr] = self._clipped_mean_gradients(X[s0:s1], y[s0:s1], theta_bar[rr])
            bi = b[i]
            if np.any(bi > 0):
                G += laplace_noise((n_runs, p), 1.0, rng) * bi[:, None]
            grad_g = self.sigma * theta_bar
            new_i = theta_bar - (N * step) * (grad_g / (2 * N) + (counts[i] / n)[:, None] * G)
            new_L = theta_bar - (c * step) * grad_g
            theta_O[runs, i] = np.clip(new_i, -tmax, tmax)
            theta_L = np.clip(new_L, -tmax, tmax)
            if k in ckpt:
                traj[k] = theta_L.copy()
        return theta_L, theta_O, sel, traj

    # ------------------------------------------------------------------------------------------
    def _owner_ledgers(self, owners, eps, b, T, answers, label_runs: bool) -> list:
        """One ledger per owner; ``answers`` (n_runs, N): each run's answers of an owner are one
        ``SelfComposed(Laplace(T / eps_i), answers)`` event (multiplier 0 -> NonPrivate when eps = inf)."""
        ledgers = []
        for j in range(owners.size):
            ledger = PrivacyLedger()
            z = T / eps[j] if np.isfinite(eps[j]) else 0.0
            for r in range(answers.shape[0]):
                a = int(answers[r, j])
                if a == 0:
                    continue
                event = laplace_event(z)
                if a > 1:
                    event = dp_accounting.SelfComposedDpEvent(event, a)
                prefix = f"run {r}: " if label_runs else ""
                ledger.record(
                    f"{prefix}owner {owners[j]!r}: {a} Laplace gradient answers",
                    event,
                    laplace_scale=float(b[j]),
                    l1_sensitivity=float(b[j] * eps[j] / T) if z else None,
                    l1_mode=self.l1_mode,
                )
            ledgers.append(ledger)
        return ledgers

    @staticmethod
    def _answers(sel: np.ndarray, n_owners: int) -> np.ndarray:
        """(n_runs, N) number of answers of each owner in each run, from the (T, n_runs) sequence."""
        runs = np.broadcast_to(np.arange(sel.shape[1]), sel.shape)
        out = np.zeros((sel.shape[1], n_owners), dtype=np.int64)
        np.add.at(out, (runs.ravel(), sel.ravel()), 1)
        return out

    def fit(self, X, y, owner):
        """Run Algorithm 1 once; ``coef_`` is the learner's model theta_{L,T}."""
        Xs, ys, owners, counts, starts, eps, b, T = self._prepare(X, y, owner)
        rng = make_rng(self.random_state)
        theta_L, theta_O, sel, _ = self._run(Xs, ys, counts, starts, b, T, 1, rng)
        self.coef_ = theta_L[0]
        self.owner_models_ = theta_O[0]
        self.owners_ = owners
        self.owner_sequence_ = sel[:, 0]
        self.laplace_scales_ = b
        self.epsilons_ = eps
        self.ledgers_ = self._owner_ledgers(owners, eps, b, T, self._answers(sel, owners.size), label_runs=False)
        return self

    def simulate(self, X, y, owner, n_runs: int = 100, checkpoints=None):
        """Independent runs at once (for benchmarks): returns {k: (n_runs, p) learner models at step k}.

        Every noisy answer is accounted: ``simulation_ledgers_[i]`` holds one Laplace event per run
        for owner i (see :meth:`simulation_report`); ``simulation_answers_`` is (n_runs, N).
        """
        Xs, ys, owners, counts, starts, eps, b, T = self._prepare(X, y, owner)
        R = check_int(n_runs, "n_runs", minimum=1)
        rng = make_rng(self.random_state)
        checkpoints = [T] if checkpoints is None else list(checkpoints)
        _, _, sel, traj = self._run(Xs, ys, counts, starts, b, T, R, rng, checkpoints)
        answers = self._answers(sel, owners.size)
        self.simulation_owners_ = owners
        self.simulation_epsilons_ = eps
        self.simulation_answers_ = answers
        self.simulation_n_steps_ = T
        self.simulation_ledgers_ = self._owner_ledgers(owners, eps, b, T, answers, label_runs=True)
        return traj

    def simulation_report(self, owner=None) -> dict:
        """Per-owner accounting of the last :meth:`simulate` call, every epsilon by the accountant.

        ``epsilon``: the cost for owner i of publishing all simulated runs (RDP composition over
        runs, at ``delta``); ``epsilon_per_run_max``: the largest single-run cost (the run in which
        owner i answered most); ``answers_total``, ``runs``; ``events`` etc. as a ledger report.
        """
        check_is_fitted(self, "simulation_ledgers_", msg="call simulate before simulation_report")
        T = self.simulation_n_steps_

        def report(j: int) -> dict:
            ledger = self.simulation_ledgers_[j]
            rep = ledger.report(self.delta, include_pld=False)
            a = self.simulation_answers_[:, j]
            rep["runs"] = int(a.size)
            rep["answers_total"] = int(a.sum())
            e = self.simulation_epsilons_[j]
            if a.max(initial=0) == 0:
                rep["epsilon_per_run_max"] = 0.0
            elif not np.isfinite(e):
                rep["epsilon_per_run_max"] = rep["epsilon"] = "inf"
            else:
                event = laplace_event(T / e)
                if a.max() > 1:
                    event = dp_accounting.SelfComposedDpEvent(event, int(a.max()))
                rep["epsilon_per_run_max"] = epsilon_of_event(event, self.delta, orders=ledger.orders)
            return rep

        return _per_owner(self.simulation_owners_, owner, report)

    def predict(self, X):
        check_is_fitted(self, "coef_")
        return check_finite_array(X, "X") @ self.coef_

    def privacy_report(self, owner=None) -> dict:
        """Per-owner ledger reports: accountant epsilon (RDP at ``delta``) and the pure basic-composition bound."""
        check_is_fitted(self, "ledgers_")

        def report(j: int) -> dict:
            rep = self.ledgers_[j].report(self.delta, include_pld=False)
            answers = int(np.sum(self.owner_sequence_ == j))
            rep["answers"] = answers
            rep["epsilon_pure"] = (
                float(answers / self.n_steps * self.epsilons_[j]) if np.isfinite(self.epsilons_[j]) else "inf"
            )
            if answers and not np.isfinite(self.epsilons_[j]):
                rep["epsilon"] = "inf"
            return rep

        return _per_owner(self.owners_, owner, report)


def _per_owner(owners, owner, report) -> dict:
    """``{owner id: report(j)}`` over the owners (ids as Python scalars); only ``owner``'s report when given."""
    out = {}
    for j, o in enumerate(owners):
        key = o.item() if hasattr(o, "item") else o
        if owner is None or key == owner:
            out[key] = report(j)
    if owner is not None:
        if not out:
            raise ValueError(f"unknown owner {owner!r}")
        return next(iter(out.values()))
    return out
