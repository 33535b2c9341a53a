"""Exposure-aware ranking of explicit ratings: how likely an item is to be consumed, from releases
already recorded (post-processing only, no new DpEvent).

A rating predictor is not a ranker: which items a user rates is the strongest ranking signal.
Every private item step of DPALS (Krichene et al., ICML 2023, Alg. 1) releases a noisy Gramian
per item; the bias feature's diagonal entry is ``c^2 sum_j w_ij`` plus Gaussian noise, so over
``c^2`` it is a noisy weighted count of the item's raters. :func:`step_counts` reads it from one
step's release, :func:`item_exposure` averages the steps (independent noise of the same quantity)
and divides by the public task weight, and :func:`exposure_scores` ranks by
``log(exposure_i) + (r_hat_ui - mean) / sigma_y``: the log of how likely the user is to consume
item i plus the log-odds of liking it, ``log Phi((r_hat - t) / sigma_y)``, whose slope near the
threshold ``t`` is about ``0.8 / sigma_y`` (``sigma_y = label_bound / 2``, the rating noise of
the bias model's empirical-Bayes prior). Validation (ML-100K, 6 noise seeds), Recall@20 with the
slope 1 / label_bound, 2 / label_bound: 0.1925 / 0.1945 at eps = 1, 0.2104 / 0.2119 at eps = 5.

**What the scores are** (what ``recommend`` returns for explicit ratings; :func:`score_description`
says it in one line). Not ratings: a log-scale ranking score, ``log(exposure_i)`` (the log of the
item's released noisy weighted count of raters, e.g. 6.2 for about 500) plus the predicted rating's
distance from the global mean in units of ``sigma_y``. One unit more is ``e`` (2.7) times the
exposure at the same predicted rating, or ``sigma_y`` rating points more at the same exposure; only
differences between items mean anything. ``predict`` returns the ratings.

**Evaluated as served** (issue 43). The ranking metrics of ``privrec fit --evaluate`` scored the
bias model by predicted rating, not by these scores: on the demo (``synthetic-skew``) Recall@20
0.32 / 0.21 / 0.21 at eps = 1 / 5 / 20 (noise seed 1) against 0.57 / 0.58 / 0.58 for the
popularity of the same release's counts, falling with epsilon because the empirical-Bayes shrinkage
that lends rarely rated items the lower prior mean -- a popularity signal -- weakens as the noise
falls. ``recommend`` (this ranking) scores 0.588 at all three. The CLI now reads the ranking off the
model's own scoring function (``privrec.commands._yardsticks.model_ranking``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["exposure_scores", "item_exposure", "score_description", "step_counts"]


def step_counts(info: dict, bias_feature: float, gramian_std: float) -> tuple[np.ndarray, float]:
    """One ALS step's noisy weighted counts and their noise std, from the solver's released
    ``noisy_gramian_diagonal``."""
    diag = info["noisy_gramian_diagonal"]
    c2 = float(bias_feature) ** 2
    return np.asarray(diag)[:, -1] / c2, float(gramian_std) / c2


def item_exposure(
    parts, omega: np.ndarray, head: np.ndarray, n_items: int, counts=None, count_std: float = 0.0
) -> np.ndarray:
    """Mean of the steps' noisy weighted counts (``parts`` from :func:`step_counts`) over the
    public task weights ``omega`` of the trained ``head`` (adaptive allocation: ``w_ij = omega_i
    s_j``, so the ratio sums the raters' normalisers ``s_j``, a count in which each user weighs
    about ``sqrt(budget / n_u)``; the bias model's ``mu = 0`` makes omega constant).

    With the released item ``counts`` (noise std ``count_std``), both measurements of how often
    each item is consumed are combined by inverse-variance weighting, the counts first put on the
    weighted count's scale by the ratio of their sums over the items both see above twice their
    noise (the two weigh users differently: a sampled user counts one per item, a weighted one
    ``s_j``). Values within one noise std of zero are floored at that std; items outside the head
    get the smallest value."""
    mean = np.mean([p for p, _ in parts], axis=0)
    omega = np.maximum(np.asarray(omega, dtype=np.float64), 1e-12)
    value = mean / omega
    var = (float(parts[0][1]) / omega) ** 2 / len(parts)
    if counts is not None and count_std > 0:
        c = np.asarray(counts, dtype=np.float64)[head]
        seen = (value > 2.0 * np.sqrt(var)) & (c > 2.0 * count_std)
        if int(seen.sum()) >= 3:
            scale = float(value[seen].sum() / c[seen].sum())
            var_c = (scale * count_std) ** 2
            value = (value / var + scale * c / var_c) / (1.0 / var + 1.0 / var_c)
            var = 1.0 / (1.0 / var + 1.0 / var_c)
    exposure = np.full(n_items, np.nan)
    exposure[head] = np.maximum(value, np.sqrt(var))
    floor = np.nanmin(exposure) if np.isfinite(exposure).any() else 1.0
    return np.where(np.isnan(exposure), floor, exposure)


def exposure_scores(scores, global_mean: float, rating_noise: float, exposure, counts) -> np.ndarray:
    """Ranking scores ``log(exposure_i) + (scores - global_mean) / rating_noise``; without an
    exposure estimate (noisy GD) the released counts ``log(max(n_i, 1))`` stand in."""
    if exposure is None and counts is None:
        raise ValueError("ranking='exposure' needs the released item counts, which this model does not hold")
    if exposure is not None:
        log_exposure = np.log(np.asarray(exposure, dtype=np.float64)).astype(np.float32)
    else:
        log_exposure = np.log(np.maximum(np.asarray(counts, dtype=np.float64), 1.0)).astype(np.float32)
    return (scores - np.float32(global_mean)) / np.float32(rating_noise) + log_exposure[None, :]


def score_description(rating_noise: float) -> str:
    """One line on what the exposure ranking's scores are (module docstring), for output next to them;
    ``rating_noise`` is ``sigma_y`` (``label_bound / 2``)."""
    return (
        f"score = log(exposure) + (predicted rating - mean) / {rating_noise:g}: a ranking score, not a rating "
        f"(+1 = e times the exposure, or {rating_noise:g} rating points more); only differences between items count"
    )
