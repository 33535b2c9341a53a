"""Empirical privacy auditing: a statistical *lower* bound on the epsilon a mechanism really has.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, stats

__all__ = [
    "AuditResult",
    "clopper_pearson_upper",
    "clopper_pearson_lower",
    "epsilon_lower_bound",
    "empirical_epsilon",
    "gdp_epsilon",
    "separation",
    "audit_scores",
    "run_audit",
]

METHODS = ("split", "grid")


@dataclass(frozen=True)
class AuditResult:
    """Outcome of an audit.

    ``eps_lower`` is the ``confidence``-level lower bound on epsilon (0 when nothing was found);
    ``fpr`` / ``fnr`` are the *empirical* rates of the evaluated test (``fpr_upper`` / ``fnr_upper``
    their Clopper-Pearson upper bounds); ``n_runs`` fits per dataset; ``threshold`` and
    ``orientation`` (+1: score > threshold -> "canary present"; -1: score < threshold) define the
    test; ``n_eval`` runs per dataset entered the bound; ``eps_point`` is the same bound with the
    empirical rates (no confidence, for information).
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
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    return float(optimize.brentq(excess, 0.0, hi, xtol=1e-10))


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
    pooled = np.unique(np.concatenate([s0, s1]))
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
) -> AuditResult:
    """Audit from per-run observables: ``scores_without`` from D (no canary), ``scores_with`` from D'.

    Each may be ``(n,)`` scalar scores or ``(n, k)`` vector observables. Runs must be iid (the
    order is used to split calibration / evaluation halves, so it must not depend on the outputs).

    ``method="split"``: the first half of each sample chooses the test (for vector observables a
    diagonal-LDA projection first, then the orientation and threshold maximising the bound), the
    second half evaluates that single test. ``method="grid"``: ``thresholds`` (fixed in advance,
    scalar scores only) are all evaluated on every run with the union bound over
    ``len(thresholds)`` x orientations tests; ``orientation`` (+1 / -1) restricts the grid to one
    orientation (default both).
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
        return AuditResult(
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
    return AuditResult(
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
):
    """Fit ``n_runs`` times on each neighbouring dataset and lower-bound epsilon.

    ``fit_release(dataset, seed)`` fits the mechanism on ``dataset`` with noise from OS entropy
    (``random_state=None``) and returns a scalar score or a 1-D observable; ``seed`` is the run
    index, to be used for data-side randomness only. Runs on D and D' are interleaved so a drift
    of the machine cannot masquerade as a canary effect. Returns an :class:`AuditResult` (and the
    two observable arrays when ``return_scores``).
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
    res = audit_scores(a0, a1, delta, confidence, method, thresholds, orientation)
    return (res, a0, a1) if return_scores else res
