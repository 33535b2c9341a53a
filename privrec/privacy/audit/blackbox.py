"""The black-box audit (one concern: from per-run observables of a mechanism fitted on two
neighbouring datasets to a confidence-level lower bound on its epsilon).

Implements the distinguishing test of :mod:`privrec.privacy.audit`: :class:`AuditResult`;
:func:`audit_scores`, which chooses the test (orientation, threshold and, for vector observables,
a diagonal-LDA projection) on a calibration half and evaluates it once on the other half
(``method="split"``), or evaluates a grid of thresholds fixed in advance with a Bonferroni
correction (``method="grid"``), and attaches the design's power (:mod:`.power`); and
:func:`run_audit`, which fits the mechanism ``n_runs`` times on each dataset (interleaved) and
audits the observables. The bounds themselves are in :mod:`.bounds`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .bounds import (
    _alpha_per_rate,
    _check_delta,
    _eps_from_rates,
    clopper_pearson_upper,
    empirical_epsilon,
    epsilon_lower_bound,
    gdp_mu,
)
from .power import METHODS, _PowerModel, detectable_epsilon


@dataclass(frozen=True)
class AuditResult:
    """Outcome of an audit.

    ``eps_lower`` is the ``confidence``-level lower bound on epsilon (0 when nothing was found);
    ``fpr`` / ``fnr`` are the *empirical* rates of the evaluated test (``fpr_upper`` / ``fnr_upper``
    their Clopper-Pearson upper bounds); ``n_runs`` fits per dataset (the smaller sample);
    ``threshold`` and ``orientation`` (+1: score > threshold -> "canary present"; -1: score <
    threshold) define the test; ``n_eval`` runs per dataset entered the bound; ``eps_point`` is the
    same bound with the empirical rates (no confidence, for information).

    What the audit can detect (see :mod:`privrec.privacy.audit`): ``eps_max`` the largest ``eps_lower``
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
