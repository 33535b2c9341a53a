"""Confidence bounds and epsilon conversions of an empirical privacy audit (one concern: turning
error counts or score separations into statements about epsilon).

Implements the statistics of :mod:`privrec.privacy.audit` ("Statistical care"): one-sided
Clopper-Pearson bounds on a binomial rate (Clopper & Pearson 1934); the hypothesis-testing lower
bound of (epsilon, delta)-DP, ``eps >= max(log((1 - delta - FPR) / FNR), log((1 - delta - FNR) /
FPR))`` with both rates replaced by simultaneous upper bounds (the bound of Kairouz, Oh &
Viswanath 2015, used for auditing DP-SGD by Jagielski, Ullman & Oprea 2020); its ceiling when no
run errs (:func:`max_epsilon_lower`); and the conversions between mu-Gaussian DP and (epsilon,
delta) (Dong, Roth & Su 2022, Corollary 2.13: ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps
Phi(-eps/mu - mu/2)``), the mu of a composition of Gaussian mechanisms and the d' of two score
samples.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats


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
