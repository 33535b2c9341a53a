"""Known power of an audit design (one concern: what an audit with given sample sizes, method and
confidence could detect, before or after it runs).

Implements the "Known power" section of :mod:`privrec.privacy.audit`: simulated audits of an
ideal canary on a mu-Gaussian-DP mechanism (scores N(0, 1) without and N(mu, 1) with the canary,
Dong, Roth & Su 2022), run through the same test-selection rule and Clopper-Pearson bounds as a
real audit (:class:`_PowerModel`); :func:`audit_power`, the probability of refuting a claim at a
given true epsilon; and :func:`detectable_epsilon`, the smallest true epsilon flagged with
probability >= :data:`DETECTION_POWER`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .bounds import _alpha_per_rate, _check_delta, _eps_from_rates, clopper_pearson_upper, gdp_epsilon, gdp_mu

METHODS = ("split", "grid")
#: power of the "smallest detectable error" (``detectable_eps``)
DETECTION_POWER = 0.9


class _PowerModel:
    """Simulated audits of an ideal canary on a mu-GDP mechanism: scores N(0, 1) without and
    N(mu, 1) with the canary, ``n_without`` / ``n_with`` of them, audited with ``method``.

    Scores are binned on a fine grid of thresholds (the candidate tests), so one simulated audit
    costs a few multinomial draws whatever the number of runs: ``"split"`` picks the test on
    the calibration half with the rule of :func:`~privrec.privacy.audit.blackbox._choose_test`
    (best Clopper-Pearson bound, ties by the 50% bound) among the grid's thresholds and evaluates
    it on the other half; ``"grid"`` gives the
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
