"""Empirical privacy auditing: a statistical *lower* bound on the epsilon a mechanism really has,
and how large an accounting error a given audit can detect.

An (epsilon, delta)-DP mechanism M satisfies, for neighbouring datasets D, D' and every set S of
outputs, ``P[M(D) in S] <= e^eps P[M(D') in S] + delta`` and the same with D and D' swapped. A
distinguishing test "guess D' when the score of the output exceeds t" has false-positive rate
FPR = P[score(M(D)) > t] and false-negative rate FNR = P[score(M(D')) <= t]; taking S as the
rejection region and its complement gives

    eps >= log((1 - delta - FPR) / FNR)      and      eps >= log((1 - delta - FNR) / FPR).

:func:`run_audit` fits the mechanism many times on D (without the canary) and on D' (with it),
noise always from OS entropy, estimates FPR and FNR and replaces them by one-sided
Clopper-Pearson *upper* bounds, so ``eps_lower`` is a lower bound on the true epsilon that holds
with probability ``confidence`` over the audit's own randomness. If ``eps_lower`` exceeds the
epsilon a mechanism reports, the report is wrong (at that confidence); ``eps_lower <= eps`` says
only that this canary and this test did not find a violation (audits are lower bounds: a weak
canary gives a loose bound).

Statistical care (what makes the bound valid):

* the test (orientation, threshold and, for vector observables, the projection direction) is
  chosen on a *calibration* half of the runs and evaluated once on the other half
  (``method="split"``, default); or a fixed grid of thresholds given *before* the run is evaluated
  on all runs with a Bonferroni correction (``method="grid"``);
* both rates' upper bounds hold simultaneously: each is computed at level
  ``1 - (1 - confidence) / (2 * n_tests)`` (union bound over the two rates and the tests), so the
  maximum over the two inequalities above is one ``confidence``-level statement;
* every fit draws fresh noise: ``fit_release`` must not seed the mechanism's noise (the ``seed``
  it receives is the run index, for data-side randomness only).

**Known power.** An audit with n runs cannot report more than a ceiling set by n alone (zero
errors on every evaluated run): :func:`max_epsilon_lower`, e.g. 4.39 for the split audit with 600
runs per dataset at 95%. Whether it would catch a real accounting error also depends on how
close its canary and test come to the optimal ones. Given the claimed epsilon, every
:class:`AuditResult` states

* ``eps_max``: the ceiling above;
* ``power_2x``: the probability that the same design (runs, method, confidence) reports
  ``eps_lower > eps_claimed`` against an *ideal* canary on a Gaussian mechanism whose true epsilon
  is twice the claimed one (scores N(0, 1) without and N(mu, 1) with the canary, mu the GDP
  parameter of that epsilon: :func:`gdp_mu`), estimated by simulation (:func:`audit_power`);
* ``detectable_eps``: the smallest true epsilon such a mechanism may have and still be flagged
  with probability >= 90% (:func:`detectable_epsilon`; ``inf`` when ``eps_max <= eps_claimed``).

For a black-box canary that does not saturate the sensitivity these are *upper bounds* on the
real power (the ideal canary is the strongest possible); for the white-box audit below, whose
canaries saturate it, they are the power itself.

**White-box audit of a solver's release** (:func:`audit_solver_release`). The item step of
DP-ALS releases, per task (item), noisy statistics -- SSP: the Gramian ``G_i + Xi_i`` and the
right-hand side ``b_i + xi_i`` (spec 004 §2); noisy GD: one noisy gradient per step (spec 004 §3)
-- each with independent Gaussian noise. :func:`tap_solver` returns a copy of a solver whose
``solve`` runs the library's own code path unchanged and also records those noisy statistics
(a subclass hooking the per-block release; :class:`SolverTap`). Many canary units, each the
only contributor to its own tasks, are included independently with probability 1/2 (the auditor's
secret coin, as in Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training
run"). Each canary's score is the Gaussian likelihood-ratio statistic of its own tasks' released
statistics in the direction of its contribution, standardised by the *claimed* noise (a fixed
scaling, which the bound does not rely on). Because the noise of different tasks is
independent and every canary's tasks are its own, the canaries' scores are independent trials:
one solve gives as many trials as canaries, and the two-sample Clopper-Pearson bound above applies
directly (present canaries give FNR, absent ones FPR; random inclusion makes both sets random
halves of the same canary population, so the two rates refer to the same mixture of canaries).
This is the optimal test for a Gaussian release, so a canary that saturates the declared
sensitivity makes the audit as powerful as the Gaussian model predicts.

What the white-box audit does *not* cover: anything outside the tapped release (private counts,
centering, allocation, the user step, the composition over ALS steps, the final projection and
solve -- post-processing), the global Gramian of ``unobserved_weight > 0``, and inputs other
than the ones given (it audits the release for this batch's public inputs: features, weights,
initial iterate, step sizes).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
from scipy import optimize, stats

from .ledger import epsilon_of_event
from .mechanisms import compose
from .rng import make_rng

__all__ = [
    "AuditResult",
    "clopper_pearson_upper",
    "clopper_pearson_lower",
    "epsilon_lower_bound",
    "empirical_epsilon",
    "max_epsilon_lower",
    "gdp_epsilon",
    "gdp_mu",
    "gaussian_mu",
    "separation",
    "audit_power",
    "detectable_epsilon",
    "audit_scores",
    "run_audit",
    "CanaryDesign",
    "canary_design",
    "remove_units",
    "SolverTap",
    "tap_solver",
    "worst_case_gd_init",
    "SolverAudit",
    "audit_solver_release",
]

METHODS = ("split", "grid")
#: power of the "smallest detectable error" (``detectable_eps``)
DETECTION_POWER = 0.9


@dataclass(frozen=True)
class AuditResult:
    """Outcome of an audit.

    ``eps_lower`` is the ``confidence``-level lower bound on epsilon (0 when nothing was found);
    ``fpr`` / ``fnr`` are the *empirical* rates of the evaluated test (``fpr_upper`` / ``fnr_upper``
    their Clopper-Pearson upper bounds); ``n_runs`` fits per dataset (the smaller sample);
    ``threshold`` and ``orientation`` (+1: score > threshold -> "canary present"; -1: score <
    threshold) define the test; ``n_eval`` runs per dataset entered the bound; ``eps_point`` is the
    same bound with the empirical rates (no confidence, for information).

    What the audit can detect (see the module docstring): ``eps_max`` the largest ``eps_lower``
    this design can report (no error on any evaluated run); with ``eps_claimed`` given,
    ``power_2x`` the probability of reporting ``eps_lower > eps_claimed`` against an ideal canary
    on a Gaussian mechanism whose true epsilon is 2 x ``eps_claimed``, and ``detectable_eps`` the
    smallest such true epsilon flagged with probability >= 90% (``inf``: none; nan: no claim
    given). ``n_without`` / ``n_with`` are the sample sizes (runs or canary trials) per side.
    """

    eps_lower: float
    fpr: float
    fnr: float
    n_runs: int
    threshold: float
    confidence: float
    fpr_upper: float = float("nan")
    fnr_upper: float = float("nan")
    orientation: int = 1
    n_eval: int = 0
    delta: float = 0.0
    method: str = "split"
    n_tests: int = 1
    eps_point: float = float("nan")
    eps_max: float = float("nan")
    eps_claimed: float = float("nan")
    power_2x: float = float("nan")
    detectable_eps: float = float("nan")
    n_without: int = 0
    n_with: int = 0

    @property
    def detected(self) -> bool:
        """``eps_lower > eps_claimed``: the claim is refuted at the audit's confidence."""
        return bool(self.eps_lower > self.eps_claimed)

    def to_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------- bounds
def clopper_pearson_upper(k, n, alpha: float = 0.05):
    """One-sided Clopper-Pearson upper bound on a binomial rate from ``k`` successes in ``n`` trials.

    ``P[p <= bound] >= 1 - alpha``: the (1 - alpha) quantile of Beta(k + 1, n - k); 1 when k = n.
    Vectorised over ``k`` (and ``n``).
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    _check_counts(k, n, alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = stats.beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
    out = np.where(k >= n, 1.0, out)
    return float(out) if out.ndim == 0 else out


def clopper_pearson_lower(k, n, alpha: float = 0.05):
    """One-sided Clopper-Pearson lower bound: the alpha quantile of Beta(k, n - k + 1); 0 when k = 0."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    _check_counts(k, n, alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = stats.beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1.0)
    out = np.where(k <= 0, 0.0, out)
    return float(out) if out.ndim == 0 else out


def _check_counts(k, n, alpha):
    if not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n) or np.any(k != np.round(k)):
        raise ValueError("counts must be integers with 0 <= k <= n and n >= 1")


def _eps_from_rates(fpr, fnr, delta: float):
    """max(log((1 - delta - fpr) / fnr), log((1 - delta - fnr) / fpr)), clipped at 0 (vectorised)."""
    fpr = np.asarray(fpr, dtype=np.float64)
    fnr = np.asarray(fnr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1.0 - delta - fpr, 0.0) / fnr)
        b = np.log(np.maximum(1.0 - delta - fnr, 0.0) / fpr)
    a = np.where(np.isnan(a), -np.inf, a)
    b = np.where(np.isnan(b), -np.inf, b)
    return np.maximum(np.fmax(a, b), 0.0)


def epsilon_lower_bound(
    false_positives: int,
    n_negative: int,
    false_negatives: int,
    n_positive: int,
    delta: float,
    confidence: float = 0.95,
    n_tests: int = 1,
) -> tuple[float, float, float]:
    """``(eps_lower, fpr_upper, fnr_upper)`` of one test at the given confidence.

    ``false_positives`` of ``n_negative`` runs on D (canary absent) were called "present",
    ``false_negatives`` of ``n_positive`` runs on D' were called "absent". Each rate gets a
    one-sided Clopper-Pearson upper bound at level ``1 - (1 - confidence) / (2 n_tests)`` so that
    both bounds (of all ``n_tests`` tests) hold together with probability >= ``confidence``; then
    ``eps_lower = max(log((1 - delta - FPR_up) / FNR_up), log((1 - delta - FNR_up) / FPR_up), 0)``.
    """
    alpha = _alpha_per_rate(confidence, n_tests)
    delta = _check_delta(delta)
    fpr_u = clopper_pearson_upper(false_positives, n_negative, alpha)
    fnr_u = clopper_pearson_upper(false_negatives, n_positive, alpha)
    return float(_eps_from_rates(fpr_u, fnr_u, delta)), float(fpr_u), float(fnr_u)


def empirical_epsilon(fpr: float, fnr: float, delta: float = 0.0) -> float:
    """Point estimate ``max(log((1 - delta - fpr) / fnr), log((1 - delta - fnr) / fpr), 0)`` (no confidence)."""
    return float(_eps_from_rates(fpr, fnr, delta))


def _gdp_delta(mu: float, eps: float) -> float:
    """delta(eps) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (log-space: no overflow)."""
    a = stats.norm.cdf(-eps / mu + mu / 2)
    b = math.exp(eps + stats.norm.logcdf(-eps / mu - mu / 2)) if math.isfinite(eps) else 0.0
    return float(a - b)


def gdp_epsilon(mu: float, delta: float) -> float:
    """epsilon(delta) of mu-Gaussian DP: the smallest eps >= 0 with
    ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) <= delta`` (0 for mu <= 0, inf for mu = inf).

    With :func:`separation` this turns an observed mean shift of Gaussian-looking scores into an
    *indicative* epsilon (a point estimate under a Gaussian model, not a bound).
    """
    mu = float(mu)
    delta = _check_delta(delta)
    if not mu > 0:
        return 0.0
    if math.isinf(mu):
        return math.inf

    def excess(eps):
        return _gdp_delta(mu, eps) - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    return float(optimize.brentq(excess, 0.0, hi, xtol=1e-10))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu of the mu-GDP (Gaussian) mechanism whose epsilon at ``delta`` is ``epsilon``: the inverse of
    :func:`gdp_epsilon` (a Gaussian mechanism with noise multiplier z is 1/z-GDP)."""
    eps = float(epsilon)
    delta = _check_delta(delta)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if math.isinf(eps):
        return math.inf
    if delta <= 0:
        raise ValueError("a finite epsilon of a Gaussian mechanism needs delta > 0")
    hi = 1.0
    while _gdp_delta(hi, eps) < delta:
        hi *= 2.0
    return float(optimize.brentq(lambda mu: _gdp_delta(mu, eps) - delta, 1e-12, hi, xtol=1e-12, rtol=1e-12))


def separation(scores_without, scores_with) -> float:
    """|mean difference| / pooled standard deviation of two score samples (d', the mu of a
    Gaussian model of the scores)."""
    a = np.asarray(scores_without, dtype=np.float64)
    b = np.asarray(scores_with, dtype=np.float64)
    sd = math.sqrt(0.5 * (a.var(ddof=1) + b.var(ddof=1)))
    return float(abs(b.mean() - a.mean()) / sd) if sd > 0 else math.inf


def _alpha_per_rate(confidence: float, n_tests: int) -> float:
    c = float(confidence)
    if not (0.0 < c < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if int(n_tests) < 1:
        raise ValueError("n_tests must be >= 1")
    return (1.0 - c) / (2.0 * int(n_tests))


def _check_delta(delta) -> float:
    d = float(delta)
    if not (0.0 <= d < 1.0):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    return d


def max_epsilon_lower(n_without: int, n_with: int, delta: float, confidence: float = 0.95, n_tests: int = 1) -> float:
    """The largest ``eps_lower`` a test evaluated on ``n_without`` runs without and ``n_with`` runs
    with the canary can report: no false positive and no false negative at all.

    Audits with ``n`` runs per dataset evaluate the split test on ``n - n // 2`` of them; a grid
    audit evaluates ``n_tests`` tests on all of them. A mechanism whose claimed epsilon is at or above
    this ceiling can never be refuted by the audit, whatever its true epsilon.
    """
    n0, n1 = int(n_without), int(n_with)
    if n0 < 1 or n1 < 1:
        raise ValueError("n_without and n_with must be >= 1")
    return epsilon_lower_bound(0, n0, 0, n1, delta, confidence, n_tests)[0]


def gaussian_mu(event) -> float:
    """mu of the Gaussian-DP guarantee of a composition of Gaussian mechanisms (a ``dp_accounting``
    event): ``sqrt(sum_j steps_j / z_j^2)``; nan when the event contains anything else
    (subsampling, Laplace, ...), inf for a non-private event. A canary whose contribution reaches
    every release's declared sensitivity has exactly this separation (d')."""
    import dp_accounting

    def mu2(ev) -> float:
        if isinstance(ev, dp_accounting.NoOpDpEvent):
            return 0.0
        if isinstance(ev, dp_accounting.NonPrivateDpEvent):
            return math.inf
        if isinstance(ev, dp_accounting.GaussianDpEvent):
            z = float(ev.noise_multiplier)
            return math.inf if z == 0 else 1.0 / z**2
        if isinstance(ev, dp_accounting.SelfComposedDpEvent):
            return int(ev.count) * mu2(ev.event)
        if isinstance(ev, dp_accounting.ComposedDpEvent):
            return float(sum(mu2(e) for e in ev.events))
        return math.nan

    return math.sqrt(mu2(event))


# ------------------------------------------------------------------------------------- power
class _PowerModel:
    """Simulated audits of an ideal canary on a mu-GDP mechanism: scores N(0, 1) without and
    N(mu, 1) with the canary, ``n_without`` / ``n_with`` of them, audited with ``method``.

    Scores are binned on a fine grid of thresholds (the candidate tests), so one simulated audit
    costs a few multinomial draws whatever the number of runs: ``"split"`` picks the test on
    the calibration half with :func:`_choose_test`'s rule (best Clopper-Pearson bound, ties by the
    50% bound) among the grid's thresholds and evaluates it on the other half; ``"grid"`` gives the
    best single threshold (chosen knowing mu, evaluated on all runs at the Bonferroni level of
    ``n_tests`` tests): an upper bound on a fixed-grid audit's power. Each evaluation reseeds
    the model's generator (``seed``), so power is a deterministic, smooth function of mu.
    """

    def __init__(
        self,
        n_without: int,
        n_with: int,
        delta: float,
        confidence: float,
        method: str,
        n_tests: int,
        orientation: int | None,
        simulations: int,
        seed: int,
        n_grid: int = 240,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        n0, n1 = int(n_without), int(n_with)
        if method == "split" and (n0 < 4 or n1 < 4):
            raise ValueError("the split audit needs at least 4 runs per dataset")
        if n0 < 1 or n1 < 1:
            raise ValueError("n_without and n_with must be >= 1")
        self.delta = _check_delta(delta)
        self.method = method
        self.split = method == "split"
        tests = 1 if self.split else int(n_tests)
        self.alpha = _alpha_per_rate(confidence, tests)
        self.alpha_tie = _alpha_per_rate(0.5, 1)
        self.cal = (n0 // 2, n1 // 2) if self.split else None
        self.ev = (n0 - n0 // 2, n1 - n1 // 2) if self.split else (n0, n1)
        self.orients = (1, -1) if orientation is None else (int(orientation),)
        self.sims = int(simulations)
        if self.sims < 10:
            raise ValueError("simulations must be >= 10")
        self.seed = seed
        self.n_grid = int(n_grid)
        self._tables: dict[tuple[int, float], np.ndarray] = {}
        up0, up1 = (clopper_pearson_upper(0, n, self.alpha) for n in self.ev)
        self.eps_max = float(_eps_from_rates(up0, up1, self.delta))

    def _cp(self, k: np.ndarray, n: int, alpha: float) -> np.ndarray:
        """Clopper-Pearson upper bounds of integer counts 0 <= k <= n: a table per (n, alpha) filled
        on demand (each distinct count is computed once over all simulations and separations)."""
        table = self._tables.get((n, alpha))
        if table is None:
            table = self._tables[(n, alpha)] = np.full(n + 1, np.nan)
        missing = np.zeros(n + 1, dtype=bool)
        missing[k] = True
        missing &= np.isnan(table)
        todo = np.flatnonzero(missing)
        if todo.size:
            table[todo] = clopper_pearson_upper(todo, n, alpha)
        return table[k]

    def _below(self, rng, n: int, p: np.ndarray) -> np.ndarray:
        """(sims, K) counts of scores <= each threshold."""
        return np.cumsum(rng.multinomial(n, p, size=self.sims), axis=1)[:, :-1]

    def _errors(self, below0, below1, n0, n1):
        """(sims, K * len(orients)) false positives and false negatives of every candidate test."""
        fp, fn = [], []
        for o in self.orients:
            fp.append(n0 - below0 if o == 1 else below0)
            fn.append(below1 if o == 1 else n1 - below1)
        return np.concatenate(fp, axis=1), np.concatenate(fn, axis=1)

    def _eps(self, fp, fn, n0, n1, alpha):
        return _eps_from_rates(self._cp(fp, n0, alpha), self._cp(fn, n1, alpha), self.delta)

    def lower_bounds(self, mu: float) -> np.ndarray:
        """``eps_lower`` of ``simulations`` simulated audits at separation ``mu`` (for "grid": of
        every candidate threshold, shape (sims, K))."""
        rng = np.random.default_rng(self.seed)
        n_max = max(self.ev) if self.cal is None else max(self.cal + self.ev)
        z = float(stats.norm.isf(0.05 / n_max))
        t = np.linspace(-z - 1.0, mu + z + 1.0, self.n_grid)

        def probs(shift):
            c = stats.norm.cdf(t - shift)
            return np.clip(np.diff(np.concatenate([[0.0], c, [1.0]])), 0.0, 1.0)

        p0, p1 = probs(0.0), probs(mu)
        if self.cal is not None:
            h0, h1 = self.cal
            fp, fn = self._errors(self._below(rng, h0, p0), self._below(rng, h1, p1), h0, h1)
            key = self._eps(fp, fn, h0, h1, self.alpha)
            tie = self._eps(fp, fn, h0, h1, self.alpha_tie)
            best = key.max(axis=1, keepdims=True)
            pick = np.argmax(np.where(key >= best, tie, -np.inf), axis=1)
        e0, e1 = self.ev
        fp, fn = self._errors(self._below(rng, e0, p0), self._below(rng, e1, p1), e0, e1)
        if self.cal is None:
            return self._eps(fp, fn, e0, e1, self.alpha)
        rows = np.arange(self.sims)
        return self._eps(fp[rows, pick], fn[rows, pick], e0, e1, self.alpha)

    def power(self, mu: float, eps_claimed: float) -> float:
        if self.eps_max <= eps_claimed:
            return 0.0
        hit = self.lower_bounds(mu) > eps_claimed
        return float(hit.mean()) if self.cal is not None else float(hit.mean(axis=0).max())


def audit_power(
    epsilon_claimed: float,
    epsilon_true: float,
    n_without: int,
    n_with: int,
    delta: float,
    confidence: float = 0.95,
    method: str = "split",
    n_tests: int = 1,
    orientation: int | None = None,
    simulations: int = 400,
    seed: int = 0,
) -> float:
    """Probability that an audit reports ``eps_lower > epsilon_claimed`` when the mechanism is a
    Gaussian mechanism with true epsilon ``epsilon_true`` (at ``delta``) and the canary is ideal
    (it reaches the sensitivity and the score is the likelihood ratio): the best power any canary
    can give this design.

    ``n_without`` / ``n_with``: runs (or canary trials) per side; ``method``, ``confidence``,
    ``n_tests``, ``orientation`` as in :func:`audit_scores`. Estimated from ``simulations``
    simulated audits (binned scores; ``seed`` fixes the simulation, which is not a privacy
    mechanism). 0 when the claim is at or above :func:`max_epsilon_lower`.
    """
    model = _PowerModel(n_without, n_with, delta, confidence, method, n_tests, orientation, simulations, seed)
    return model.power(gdp_mu(epsilon_true, delta), float(epsilon_claimed))


def detectable_epsilon(
    epsilon_claimed: float,
    n_without: int,
    n_with: int,
    delta: float,
    confidence: float = 0.95,
    method: str = "split",
    n_tests: int = 1,
    orientation: int | None = None,
    power: float = DETECTION_POWER,
    simulations: int = 400,
    seed: int = 0,
    _model: _PowerModel | None = None,
) -> float:
    """The smallest true epsilon of a Gaussian mechanism that this audit design flags (``eps_lower >
    epsilon_claimed``) with probability >= ``power``, with an ideal canary: the smallest accounting
    error it can detect. ``inf`` when no true epsilon is enough (``epsilon_claimed >=``
    :func:`max_epsilon_lower`, or a separation mu = 20 still falls short). Arguments as
    :func:`audit_power`; bisection on mu to 1% (plus the simulation's error)."""
    if not (0.0 < float(power) < 1.0):
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    model = _model or _PowerModel(n_without, n_with, delta, confidence, method, n_tests, orientation, simulations, seed)
    claim = float(epsilon_claimed)
    if model.eps_max <= claim:
        return math.inf
    lo = gdp_mu(claim, delta)
    hi = max(20.0, 2.0 * lo)
    if model.power(hi, claim) < power:
        return math.inf
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        if model.power(mid, claim) >= power:
            hi = mid
        else:
            lo = mid
    return gdp_epsilon(hi, delta)


def _with_power(res: AuditResult, n0: int, n1: int, eps_claimed, simulations: int, orientation) -> AuditResult:
    """``res`` with ``eps_max`` (always) and, given a claim, ``power_2x`` / ``detectable_eps``."""
    model_args = (n0, n1, res.delta, res.confidence, res.method, res.n_tests, orientation, simulations, 0)
    model = _PowerModel(*model_args)
    extra: dict[str, Any] = {"eps_max": model.eps_max, "n_without": int(n0), "n_with": int(n1)}
    if eps_claimed is not None:
        claim = float(eps_claimed)
        extra["eps_claimed"] = claim
        extra["power_2x"] = model.power(gdp_mu(2.0 * claim, res.delta), claim) if res.delta > 0 else math.nan
        extra["detectable_eps"] = (
            detectable_epsilon(claim, *model_args[:7], simulations=simulations, _model=model)
            if res.delta > 0
            else math.nan
        )
    return AuditResult(**{**asdict(res), **extra})


# ------------------------------------------------------------------------------------- tests
def _rates(s0: np.ndarray, s1: np.ndarray, t, orientation: int):
    """(false positives, false negatives) of "present iff orientation * (score - t) > 0" (vectorised in t)."""
    t = np.asarray(t, dtype=np.float64)
    a0 = np.sort(orientation * s0)
    a1 = np.sort(orientation * s1)
    tt = orientation * t
    fp = a0.size - np.searchsorted(a0, tt, side="right")  # orientation * s0 > orientation * t
    fn = np.searchsorted(a1, tt, side="right")  # orientation * s1 <= orientation * t
    return fp, fn


def _candidate_thresholds(s0, s1, max_candidates: int = 2000) -> np.ndarray:
    """Midpoints between consecutive distinct pooled scores (subsampled to ``max_candidates``)."""
    pooled = np.sort(np.concatenate([s0, s1]))
    pooled = pooled[np.concatenate([[True], pooled[1:] != pooled[:-1]])]  # distinct (np.unique's hash is slow)
    if pooled.size == 1:
        return pooled.copy()
    mids = 0.5 * (pooled[1:] + pooled[:-1])
    if mids.size > max_candidates:
        mids = mids[np.unique(np.linspace(0, mids.size - 1, max_candidates).round().astype(int))]
    return np.concatenate([[pooled[0] - 1.0], mids, [pooled[-1] + 1.0]])


def _choose_test(s0, s1, delta, confidence, orientations=(1, -1)):
    """Orientation and threshold maximising the Clopper-Pearson epsilon bound on these (calibration)
    runs; ties (typically all zero when the signal is weak) are broken by the same bound at 50%
    confidence, which still penalises thresholds resting on a handful of runs."""
    cands = _candidate_thresholds(s0, s1)
    alpha = _alpha_per_rate(confidence, 1)
    alpha_tie = _alpha_per_rate(0.5, 1)
    best = None
    for orientation in orientations:
        fp, fn = _rates(s0, s1, cands, orientation)
        eps = _eps_from_rates(
            clopper_pearson_upper(fp, s0.size, alpha), clopper_pearson_upper(fn, s1.size, alpha), delta
        )
        tie = _eps_from_rates(
            clopper_pearson_upper(fp, s0.size, alpha_tie), clopper_pearson_upper(fn, s1.size, alpha_tie), delta
        )
        j = int(np.lexsort((tie, eps))[-1])  # max eps, then max tie-break
        key = (float(eps[j]), float(tie[j]))
        if best is None or key > best[0]:
            best = (key, orientation, float(cands[j]))
    return best[1], best[2]


def _as_scores(obs) -> np.ndarray:
    a = np.asarray(obs, dtype=np.float64)
    if a.ndim == 1:
        return a
    if a.ndim == 2 and a.shape[1] == 1:
        return a[:, 0]
    raise ValueError("scores must be scalars per run")


def _projection(o0: np.ndarray, o1: np.ndarray) -> np.ndarray:
    """Diagonal linear discriminant direction (m1 - m0) / pooled variance, from calibration runs."""
    m0, m1 = o0.mean(axis=0), o1.mean(axis=0)
    var = 0.5 * (o0.var(axis=0) + o1.var(axis=0))
    var = np.maximum(var, 1e-12 * max(float(var.max(initial=0.0)), 1e-300))
    return (m1 - m0) / var


def audit_scores(
    scores_without,
    scores_with,
    delta: float,
    confidence: float = 0.95,
    method: str = "split",
    thresholds=None,
    orientation: int | None = None,
    epsilon_claimed: float | None = None,
    power_simulations: int = 400,
) -> AuditResult:
    """Audit from per-run observables: ``scores_without`` from D (no canary), ``scores_with`` from D'.

    Each may be ``(n,)`` scalar scores or ``(n, k)`` vector observables. Runs must be iid (the
    order is used to split calibration / evaluation halves, so it must not depend on the outputs).

    ``method="split"``: the first half of each sample chooses the test (for vector observables a
    diagonal-LDA projection first, then the orientation and threshold maximising the bound), the
    second half evaluates that single test. ``method="grid"``: ``thresholds`` (fixed in advance,
    scalar scores only) are all evaluated on every run with the union bound over
    ``len(thresholds)`` x orientations tests; ``orientation`` (+1 / -1) restricts the test to one
    orientation (default both).

    The result always carries ``eps_max`` (:func:`max_epsilon_lower` of this design); with
    ``epsilon_claimed`` (the epsilon the mechanism reports) also ``power_2x`` and
    ``detectable_eps`` (:func:`audit_power`, :func:`detectable_epsilon`, from
    ``power_simulations`` simulated audits; about a second).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    delta = _check_delta(delta)
    _alpha_per_rate(confidence, 1)
    o0 = np.asarray(scores_without, dtype=np.float64)
    o1 = np.asarray(scores_with, dtype=np.float64)
    if o0.ndim not in (1, 2) or o1.ndim != o0.ndim or (o0.ndim == 2 and o0.shape[1] != o1.shape[1]):
        raise ValueError("scores_without and scores_with must both be (n,) or (n, k) with the same k")
    if not (np.all(np.isfinite(o0)) and np.all(np.isfinite(o1))):
        raise ValueError("observables must be finite")
    n_runs = min(o0.shape[0], o1.shape[0])
    if method == "grid":
        if thresholds is None:
            raise ValueError('method="grid" needs a thresholds grid fixed before the runs')
        s0, s1 = _as_scores(o0), _as_scores(o1)
        grid = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
        orients = (1, -1) if orientation is None else (int(orientation),)
        n_tests = grid.size * len(orients)
        alpha = _alpha_per_rate(confidence, n_tests)
        # (epsilon, orientation, threshold, fp, fn, fpr upper, fnr upper) of the best grid test
        best: tuple[float, int, float, int, int, float, float] | None = None
        for orient in orients:
            fp, fn = _rates(s0, s1, grid, orient)
            fpr_u = clopper_pearson_upper(fp, s0.size, alpha)
            fnr_u = clopper_pearson_upper(fn, s1.size, alpha)
            eps_grid = np.atleast_1d(_eps_from_rates(fpr_u, fnr_u, delta))
            j = int(np.argmax(eps_grid))
            if best is None or eps_grid[j] > best[0]:
                best = (
                    float(eps_grid[j]),
                    orient,
                    float(grid[j]),
                    int(np.atleast_1d(fp)[j]),
                    int(np.atleast_1d(fn)[j]),
                    float(np.atleast_1d(fpr_u)[j]),
                    float(np.atleast_1d(fnr_u)[j]),
                )
        assert best is not None  # orients is never empty, so the first test always sets it
        eps, orient, t, fp, fn, fpr_u, fnr_u = best
        res = AuditResult(
            eps,
            fp / s0.size,
            fn / s1.size,
            n_runs,
            t,
            float(confidence),
            fpr_u,
            fnr_u,
            orient,
            min(s0.size, s1.size),
            delta,
            "grid",
            n_tests,
            empirical_epsilon(fp / s0.size, fn / s1.size, delta),
        )
        return _with_power(res, s0.size, s1.size, epsilon_claimed, power_simulations, orientation)
    h0, h1 = o0.shape[0] // 2, o1.shape[0] // 2
    if h0 < 2 or h1 < 2:
        raise ValueError("the split audit needs at least 4 runs per dataset")
    c0, e0, c1, e1 = o0[:h0], o0[h0:], o1[:h1], o1[h1:]
    if o0.ndim == 2 and o0.shape[1] > 1:
        w = _projection(c0, c1)
        c0, e0, c1, e1 = c0 @ w, e0 @ w, c1 @ w, e1 @ w
    else:
        c0, e0, c1, e1 = (_as_scores(a) for a in (c0, e0, c1, e1))
    orient, t = _choose_test(c0, c1, delta, confidence, (1, -1) if orientation is None else (int(orientation),))
    fp, fn = _rates(e0, e1, t, orient)
    fp, fn = int(fp), int(fn)
    eps, fpr_u, fnr_u = epsilon_lower_bound(fp, e0.size, fn, e1.size, delta, confidence)
    res = AuditResult(
        eps,
        fp / e0.size,
        fn / e1.size,
        n_runs,
        t,
        float(confidence),
        fpr_u,
        fnr_u,
        orient,
        min(e0.size, e1.size),
        delta,
        "split",
        1,
        empirical_epsilon(fp / e0.size, fn / e1.size, delta),
    )
    return _with_power(res, o0.shape[0], o1.shape[0], epsilon_claimed, power_simulations, orientation)


# ------------------------------------------------------------------------------------- runner
def run_audit(
    fit_release: Callable,
    dataset_without,
    dataset_with,
    n_runs: int = 500,
    delta: float = 1e-5,
    confidence: float = 0.95,
    method: str = "split",
    thresholds=None,
    orientation: int | None = None,
    progress: Callable | None = None,
    return_scores: bool = False,
    epsilon_claimed: float | None = None,
    power_simulations: int = 400,
):
    """Fit ``n_runs`` times on each neighbouring dataset and lower-bound epsilon.

    ``fit_release(dataset, seed)`` fits the mechanism on ``dataset`` with noise from OS entropy
    (``random_state=None``) and returns a scalar score or a 1-D observable; ``seed`` is the run
    index, to be used for data-side randomness only. Runs on D and D' are interleaved so a drift
    of the machine cannot masquerade as a canary effect. Returns an :class:`AuditResult` (and the
    two observable arrays when ``return_scores``); ``epsilon_claimed`` (the reported epsilon) adds
    the power fields (:func:`audit_scores`).
    """
    n = int(n_runs)
    if n < 4:
        raise ValueError("n_runs must be >= 4")
    o0, o1 = [], []
    for i in range(n):
        o0.append(np.asarray(fit_release(dataset_without, i), dtype=np.float64).ravel())
        o1.append(np.asarray(fit_release(dataset_with, i), dtype=np.float64).ravel())
        if progress is not None:
            progress(i + 1, n)
    if len({o.size for o in o0 + o1}) != 1:
        raise ValueError("fit_release must return observables of one fixed size")
    a0, a1 = np.stack(o0), np.stack(o1)
    if a0.shape[1] == 1:
        a0, a1 = a0[:, 0], a1[:, 0]
    res = audit_scores(a0, a1, delta, confidence, method, thresholds, orientation, epsilon_claimed, power_simulations)
    return (res, a0, a1) if return_scores else res


# ------------------------------------------------------------------------------------- white box
@dataclass(frozen=True)
class CanaryDesign:
    """Canary units of a :class:`~privrec.solvers.TaskBatch` and their exact contributions.

    ``canaries`` (unit ids, i.e. ``feature_ids`` values); ``task_canary`` (m,) the position in
    ``canaries`` of the canary that owns task i (-1: no canary); ``delta_gramian`` (m, d, d) /
    ``delta_rhs`` (m, d) what the canary adds to each task's clipped weighted statistics;
    ``base_gramian`` / ``base_rhs`` the statistics of the batch without any canary (float64).
    """

    canaries: np.ndarray
    task_canary: np.ndarray
    delta_gramian: np.ndarray
    delta_rhs: np.ndarray
    base_gramian: np.ndarray
    base_rhs: np.ndarray


def remove_units(batch, units):
    """The batch without any example of the given units (same tasks, features and public side
    information): the neighbouring dataset in which those units are absent."""
    from ..solvers import TaskBatch

    keep = ~np.isin(batch.feature_ids, np.asarray(units))
    sizes = np.bincount(batch.task_ids()[keep], minlength=batch.n_tasks)
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    return TaskBatch(
        indptr,
        batch.feature_ids[keep],
        batch.features,
        batch.labels[keep],
        batch.weights[keep],
        task_sizes=batch.task_sizes,
        task_weights=batch.task_weights,
    )


def _unique_ids(ids) -> np.ndarray:
    """Sorted distinct integer ids (a counting pass for dense non-negative ids, else a sort)."""
    a = np.asarray(ids).ravel()
    if a.dtype.kind not in "iu":
        raise ValueError("unit ids must be integers")
    if a.size and a.min() >= 0 and a.max() < 4 * a.size + 1_000_000:
        return np.flatnonzero(np.bincount(a)).astype(a.dtype, copy=False)
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if a.size else a


def canary_design(batch, canaries, max_norm, label_bound) -> CanaryDesign:
    """Exact contributions of ``canaries`` (unit ids) to ``batch``'s clipped statistics
    (:func:`~privrec.solvers.weighted_statistics` with and without them).

    Every canary must have at least one example and be the only canary in each of its tasks
    (other, non-canary units may share them): then its contribution is the difference of the
    two statistics on its own tasks. ``ValueError`` otherwise.
    """
    from ..solvers import weighted_statistics

    canaries = _unique_ids(canaries)
    if canaries.size < 1:
        raise ValueError("at least one canary unit is needed")
    fid = batch.feature_ids
    pos = np.minimum(np.searchsorted(canaries, fid), canaries.size - 1)
    is_canary = canaries[pos] == fid
    if np.any(np.bincount(pos[is_canary], minlength=canaries.size) == 0):
        raise ValueError("every canary unit needs at least one example in the batch")
    m = batch.n_tasks
    starts = batch.indptr[:-1][batch.sizes > 0]
    hi = np.full(m, -1, dtype=np.int64)
    lo = np.full(m, -1, dtype=np.int64)
    if starts.size:
        big = np.iinfo(np.int64).max
        hi[batch.sizes > 0] = np.maximum.reduceat(np.where(is_canary, pos, -1), starts)
        lo[batch.sizes > 0] = np.minimum.reduceat(np.where(is_canary, pos, big), starts)
    if np.any((hi >= 0) & (lo != hi)):
        raise ValueError("two canaries share a task: each task may hold at most one canary")
    G1, b1 = weighted_statistics(batch, max_norm, label_bound)
    G0, b0 = weighted_statistics(remove_units(batch, canaries), max_norm, label_bound)
    return CanaryDesign(canaries, hi, G1 - G0, b1 - b0, G0, b0)


class SolverTap:
    """What a tapped solver released in its last ``solve`` (see :func:`tap_solver`).

    After a solve, :meth:`released` gives, per task: SSP ``{"gramian": (m, d, d), "rhs": (m, d)}``,
    the noisy statistics before the PSD projection and the ridge; noisy GD ``{"theta": (T, m, d),
    "gradient": (T, m, d)}``, the iterate each step started from and its noisy data gradient (the
    public ridge and gravity terms removed). Thread-safe: the solver's worker threads record
    their own blocks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self.clear()

    def clear(self) -> None:
        """Forget the last solve."""
        with self._lock:
            self._block_of: dict[Any, int] = {}
            self._records: dict[int, dict[str, list[np.ndarray]]] = {}
            self.n_tasks = 0

    # ------------------------------------------------------ called from the tapped solver
    def _seeds(self, seeds: Sequence, n_tasks: int) -> None:
        with self._lock:
            self._block_of = {tuple(s.spawn_key): k for k, s in enumerate(seeds)}
            self._records = {}
            self.n_tasks = int(n_tasks)

    def _enter(self, seed) -> None:
        self._local.block = self._block_of[tuple(seed.spawn_key)]

    def _leave(self) -> None:
        self._local.block = None

    def _record(self, name: str, value: np.ndarray) -> None:
        k = getattr(self._local, "block", None)
        if k is None:
            raise RuntimeError("a tapped release outside a noise block")
        with self._lock:
            self._records.setdefault(k, {}).setdefault(name, []).append(np.array(value, dtype=np.float64))

    # ------------------------------------------------------ results
    def released(self, block_tasks: Callable[[int, int, int], tuple[int, int]]) -> dict[str, np.ndarray]:
        """Per-task arrays of the last solve (``block_tasks`` = the solver's ``block_tasks``)."""
        m = self.n_tasks
        out: dict[str, np.ndarray] = {}
        for k, rec in sorted(self._records.items()):
            t0, t1 = block_tasks(k, k + 1, m)
            for name, parts in rec.items():
                if name in ("theta", "gradient"):  # one record per GD step
                    value = np.stack(parts)
                    if name not in out:
                        out[name] = np.zeros((value.shape[0], m, *value.shape[2:]))
                    out[name][:, t0:t1] = value
                else:  # SSP: consecutive slices of the block
                    value = np.concatenate(parts)
                    if name not in out:
                        out[name] = np.zeros((m, *value.shape[1:]))
                    out[name][t0:t1] = value
        if set(self._records) != set(self._block_of.values()):
            raise RuntimeError("the tap did not see every noise block of the last solve")
        return out


def tap_solver(solver: Any) -> tuple[Any, SolverTap]:
    """``(tapped, tap)``: a copy of ``solver`` (an :class:`~privrec.solvers.SSPSolver` or a squared-loss
    :class:`~privrec.solvers.NoisyGDSolver`) whose ``solve`` runs the same code -- same noise, same
    result -- and records the noisy statistics it releases in ``tap`` (:class:`SolverTap`).

    White-box instrumentation for audits: the copy is an instance of a subclass that wraps the
    per-block release (``release_block``) and the step after the noise (SSP: the solve of the noisy
    systems; noisy GD: each noisy step). ``tapped.with_noise_multiplier(z)`` stays tapped.
    """
    from ..solvers import NoisyGDSolver, SSPSolver

    tap = SolverTap()
    cls = type(solver)
    if issubclass(cls, SSPSolver):

        class TappedSSP(cls):  # type: ignore[valid-type,misc]
            @staticmethod
            def noise_seeds(rng, n_tasks):
                seeds = cls.noise_seeds(rng, n_tasks)
                tap._seeds(seeds, n_tasks)
                return seeds

            def release_block(self, G, b, reg, gram, seed, **kwargs):
                tap._enter(seed)
                try:
                    return super().release_block(G, b, reg, gram, seed, **kwargs)
                finally:
                    tap._leave()

            @staticmethod
            def _solve_systems(G, b, reg, gram, floor, out):
                tap._record("gramian", G)
                tap._record("rhs", b)
                return cls._solve_systems(G, b, reg, gram, floor, out)

        tapped_cls: type = TappedSSP
    elif issubclass(cls, NoisyGDSolver):
        if solver.loss is not None:
            raise ValueError("tap_solver supports noisy GD with the squared loss (loss=None) only")

        class TappedGD(cls):  # type: ignore[valid-type,misc]
            @staticmethod
            def noise_seeds(rng, n_tasks):
                seeds = cls.noise_seeds(rng, n_tasks)
                tap._seeds(seeds, n_tasks)
                return seeds

            def release_block(self, G, b, reg, gram, seed, theta0, steps):
                tap._enter(seed)
                try:
                    return super().release_block(G, b, reg, gram, seed, theta0, steps)
                finally:
                    tap._leave()

            def _noisy_step(self, theta: np.ndarray, g: np.ndarray, std: float, stream, r, gram, step) -> np.ndarray:
                start = np.array(theta, copy=True)
                out = super()._noisy_step(theta, g, std, stream, r, gram, step)
                noisy = g.astype(np.float64) - np.asarray(r, dtype=np.float64) * start  # g += noise, ridge, gravity
                if gram is not None:
                    noisy -= start.astype(np.float64) @ np.asarray(gram, dtype=np.float64)
                tap._record("theta", start)
                tap._record("gradient", noisy)
                return out

        tapped_cls = TappedGD
    else:
        raise TypeError(f"tap_solver supports SSPSolver and NoisyGDSolver, got {cls.__name__}")
    tapped_cls.__name__ = tapped_cls.__qualname__ = f"Tapped{cls.__name__}"
    tapped = tapped_cls(**{f.name: getattr(solver, f.name) for f in fields(solver) if f.init})
    return tapped, tap


def worst_case_gd_init(design: CanaryDesign, radius: float) -> np.ndarray:
    """Initial iterate (m, d) that maximises a one-example canary's first noisy-GD gradient: on each
    canary task theta = -radius * b_c / ||b_c|| (b_c the canary's right-hand side w y x), so that
    <theta, x> = -radius ||x|| sign(y) and the per-example gradient w (<theta, x> - y) x reaches
    w ||x|| (radius ||x|| + |y|), the solver's bound; zero elsewhere. The initial iterate is a public
    input (in DP-ALS, the previously released item factors), so any value is allowed."""
    b = design.delta_rhs
    nrm = np.linalg.norm(b, axis=1, keepdims=True)
    return np.where(nrm > 0, -float(radius) * b / np.where(nrm > 0, nrm, 1.0), 0.0)


@dataclass(frozen=True)
class SolverAudit:
    """Outcome of :func:`audit_solver_release`.

    ``result`` the :class:`AuditResult` over all canary trials (``eps_claimed`` = the claimed
    solver's epsilon of the audited releases); ``releases`` their ledger labels; ``mu_claimed``
    the GDP mu of those events (:func:`gaussian_mu`), ``mu_canary`` the mean separation of the
    canaries' standardised scores under the claimed noise (``mu_canary / mu_claimed`` = 1: the
    canaries reach the declared sensitivity); ``separation`` the measured d' of the scores
    (:func:`separation`; about ``mu_canary`` when the noise is as claimed, larger when the
    mechanism adds less); ``n_canaries`` per solve, ``solves``, ``epsilon_accountant``.
    """

    result: AuditResult
    releases: tuple[str, ...]
    mu_claimed: float
    mu_canary: float
    separation: float
    n_canaries: int
    solves: int
    epsilon_accountant: str
    scores_without: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    scores_with: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def eps_lower(self) -> float:
        return self.result.eps_lower

    @property
    def eps_claimed(self) -> float:
        return self.result.eps_claimed

    @property
    def detected(self) -> bool:
        return self.result.detected

    def to_dict(self) -> dict:
        """JSON-ready summary (without the score arrays)."""
        return {
            **self.result.to_dict(),
            "releases": list(self.releases),
            "mu_claimed": self.mu_claimed,
            "mu_canary": self.mu_canary,
            "separation": self.separation,
            "n_canaries": self.n_canaries,
            "solves": self.solves,
            "epsilon_accountant": self.epsilon_accountant,
        }


_AUDITED = {"SSPSolver": ("SSP local Gramians", "SSP right-hand sides"), "NoisyGDSolver": ("noisy GD gradients",)}


def _solver_kind(solver) -> str:
    from ..solvers import NoisyGDSolver, SSPSolver

    if isinstance(solver, SSPSolver):
        return "SSPSolver"
    if isinstance(solver, NoisyGDSolver):
        return "NoisyGDSolver"
    raise TypeError(f"audit_solver_release supports SSPSolver and NoisyGDSolver, got {type(solver).__name__}")


def _canary_scores(kind: str, released: dict, design: CanaryDesign, claimed) -> tuple[np.ndarray, np.ndarray]:
    """(likelihood-ratio score, mu^2) per canary of one solve, in units of the claimed noise."""
    own = design.task_canary >= 0
    if kind == "SSPSolver":
        std = claimed.noise_stds()
        sg, sb = float(std["gramian"]), float(std["rhs"])
        iu = np.triu_indices(design.delta_gramian.shape[-1])
        dG = design.delta_gramian[own][:, iu[0], iu[1]]  # the iid coordinates of symmetric noise
        rG = (released["gramian"][own] - design.base_gramian[own])[:, iu[0], iu[1]]
        db = design.delta_rhs[own]
        rb = released["rhs"][own] - design.base_rhs[own]
        score = (dG * rG).sum(axis=1) / sg**2 + (db * rb).sum(axis=1) / sb**2
        mu2 = (dG * dG).sum(axis=1) / sg**2 + (db * db).sum(axis=1) / sb**2
    else:
        s = float(claimed.noise_std())
        theta = released["theta"][:, own]  # (T, k, d)
        G0, b0 = design.base_gramian[own], design.base_rhs[own]
        dG, db = design.delta_gramian[own], design.delta_rhs[own]
        base = np.einsum("kij,tkj->tki", G0, theta) - b0  # exact gradient without the canary
        contrib = np.einsum("kij,tkj->tki", dG, theta) - db  # the canary's gradient at the same iterate
        resid = released["gradient"][:, own] - base
        score = (contrib * resid).sum(axis=(0, 2)) / s**2
        mu2 = (contrib * contrib).sum(axis=(0, 2)) / s**2
    who = design.task_canary[own]
    n = design.canaries.size
    return np.bincount(who, weights=score, minlength=n), np.bincount(who, weights=mu2, minlength=n)


def audit_solver_release(
    solver,
    batch,
    canaries,
    delta: float,
    *,
    claimed=None,
    solves: int = 1,
    confidence: float = 0.95,
    include_probability: float = 0.5,
    accountant: str = "pld",
    rng=None,
    power_simulations: int = 400,
    progress: Callable | None = None,
) -> SolverAudit:
    """White-box audit of one solver release with many canaries (see the module docstring).

    ``solver``: the mechanism to audit (an SSP or squared-loss noisy-GD solver, e.g. the item-step
    solver of a DP-ALS fit); ``claimed``: the solver whose ledger events are the claim (default
    ``solver``; pass the correctly calibrated one to audit a deliberately under-noised copy).
    ``batch``: a :class:`~privrec.solvers.TaskBatch` holding every canary; ``canaries``: unit ids,
    each the only canary in its tasks, or their :class:`CanaryDesign` (:func:`canary_design` with
    the claimed solver's clip bounds; pass it to reuse it over several audits of one batch). For each of ``solves`` solves every canary is kept with probability
    ``include_probability`` (coins from ``rng``; ``None`` = OS entropy), the others are removed
    (:func:`remove_units`), the tapped solver (:func:`tap_solver`) solves with noise from OS entropy,
    and each canary's score is its likelihood-ratio statistic under the claimed noise. Absent
    canaries' scores are the "without" sample, present ones the "with" sample; the split test with
    orientation +1 (the canary raises its score by construction) gives ``eps_lower``, compared with
    the claimed solver's epsilon of the audited releases at ``delta`` (``accountant``). Returns a
    :class:`SolverAudit`.
    """
    claimed = solver if claimed is None else claimed
    kind = _solver_kind(solver)
    if _solver_kind(claimed) != kind:
        raise ValueError("solver and claimed must be the same kind of solver")
    p = float(include_probability)
    if not (0.0 < p < 1.0):
        raise ValueError(f"include_probability must be in (0, 1), got {include_probability!r}")
    solves = int(solves)
    if solves < 1:
        raise ValueError("solves must be >= 1")
    labels = _AUDITED[kind]
    events = [ev for label, ev, _ in claimed.labelled_events() if label in labels]
    if len(events) != len(labels) or math.isinf(gaussian_mu(compose(events))):
        raise ValueError("the claimed solver must add noise to every audited release (noise_multiplier > 0)")
    eps_claimed = epsilon_of_event(compose(events), delta, accountant)
    design = (
        canaries
        if isinstance(canaries, CanaryDesign)
        else canary_design(batch, canaries, claimed.max_norm, claimed.label_bound)
    )
    tapped, tap = tap_solver(solver)
    coins = make_rng(rng)
    absent, present, strength = [], [], []
    for s in range(solves):
        keep = coins.random(design.canaries.size) < p
        tapped.solve(remove_units(batch, design.canaries[~keep]), rng=None)
        score, mu2 = _canary_scores(kind, tap.released(tapped.block_tasks), design, claimed)
        tap.clear()
        mu = np.sqrt(mu2)
        z = np.divide(score, mu, out=np.zeros_like(score), where=mu > 0)
        absent.append(z[~keep])
        present.append(z[keep])
        strength.append(mu[keep])
        if progress is not None:
            progress(s + 1, solves)
    s0, s1 = np.concatenate(absent), np.concatenate(present)
    res = audit_scores(
        s0,
        s1,
        delta,
        confidence,
        orientation=1,
        epsilon_claimed=eps_claimed,
        power_simulations=power_simulations,
    )
    return SolverAudit(
        result=res,
        releases=labels,
        mu_claimed=gaussian_mu(compose(events)),
        mu_canary=float(np.mean(np.concatenate(strength))) if s1.size else math.nan,
        separation=separation(s0, s1),
        n_canaries=int(design.canaries.size),
        solves=solves,
        epsilon_accountant=accountant,
        scores_without=s0,
        scores_with=s1,
    )
