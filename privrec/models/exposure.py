"""Exposure-aware ranking of explicit ratings: how likely an item is to be consumed, from releases
already recorded (post-processing only, no new DpEvent).

A rating predictor is not a ranker: which items a user rates is the strongest ranking signal.
Every private item step of DPALS (Krichene et al., ICML 2023, Alg. 1) releases a noisy Gramian
per item; the bias feature's diagonal entry is ``c^2 sum_j w_ij`` plus Gaussian noise, so over
``c^2`` it is a noisy weighted count of the item's raters. :func:`step_counts` reads it from one
step's release, :func:`item_exposure` averages the steps (independent noise of the same quantity)
and divides by the public task weight, and :func:`exposure_scores` ranks by
``log(exposure_i) + (r_hat_ui - mean) / label_bound``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["exposure_scores", "item_exposure", "step_counts"]


def step_counts(info: dict, bias_feature: float, gramian_std: float) -> tuple[np.ndarray, float]:
    """One ALS step's noisy weighted counts and their noise std, from the solver's released
    ``noisy_gramian_diagonal``."""
    diag = info["noisy_gramian_diagonal"]
    c2 = float(bias_feature) ** 2
    return np.asarray(diag)[:, -1] / c2, float(gramian_std) / c2


def item_exposure(parts, omega: np.ndarray, head: np.ndarray, n_items: int) -> np.ndarray:
    """Mean of the steps' noisy weighted counts (``parts`` from :func:`step_counts`) over the
    public task weights ``omega`` of the trained ``head`` (adaptive allocation: ``w_ij = omega_i
    s_j``, so the ratio sums the raters' normalisers ``s_j``, a count in which each user weighs
    about ``sqrt(budget / n_u)``). Values within one noise std of zero are floored at that std;
    items outside the head get the smallest value."""
    mean = np.mean([p for p, _ in parts], axis=0)
    std = float(parts[0][1]) / math.sqrt(len(parts))
    omega = np.maximum(np.asarray(omega, dtype=np.float64), 1e-12)
    exposure = np.full(n_items, np.nan)
    exposure[head] = np.maximum(mean / omega, std / omega)
    floor = np.nanmin(exposure) if np.isfinite(exposure).any() else 1.0
    return np.where(np.isnan(exposure), floor, exposure)


def exposure_scores(scores, global_mean: float, label_bound: float, exposure, counts) -> np.ndarray:
    """Ranking scores ``log(exposure_i) + (scores - global_mean) / label_bound``; without an
    exposure estimate (noisy GD) the released counts ``log(max(n_i, 1))`` stand in."""
    if exposure is None and counts is None:
        raise ValueError("ranking='exposure' needs the released item counts, which this model does not hold")
    if exposure is not None:
        log_exposure = np.log(np.asarray(exposure, dtype=np.float64)).astype(np.float32)
    else:
        log_exposure = np.log(np.maximum(np.asarray(counts, dtype=np.float64), 1.0)).astype(np.float32)
    return (scores - np.float32(global_mean)) / np.float32(label_bound) + log_exposure[None, :]
