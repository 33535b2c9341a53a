"""The release of a DPALS fit, from each item step's noisy statistics (post-processing only: no
event): the item side of every step (factors and biases; the bias model's empirical-Bayes
posterior biases), the exposure term kept from the noisy Gramian diagonals, and the released
attributes set on the model. The local fit, the Dask driver and the Flower server call these.
"""

from __future__ import annotations

import math

import numpy as np

from .. import allocation
from .bias_posterior import posterior_item_bias
from .dpals_config import DPALSConfig
from .exposure import item_exposure, step_counts

__all__ = ["collect_exposure", "exposure_of", "item_side", "release_item_side", "task_weights"]


def task_weights(cfg: DPALSConfig, counts: np.ndarray, n_users: int) -> np.ndarray:
    """Public estimate of each task's typical weight omega_i (GD step sizes, the exposure)."""
    if cfg.allocation == "adaptive":
        return allocation.adaptive_task_weights(counts, cfg.mu, cfg.budget, n_users)
    return np.ones_like(counts)


def collect_exposure(model, cfg: DPALSConfig, result, solver) -> None:
    """Keep this ALS step's noisy weighted counts (:func:`.exposure.step_counts`; no event)."""
    info = getattr(result, "info", None) or {}
    if "noisy_gramian_diagonal" not in info or not cfg.biases or not cfg.private:
        return
    part = step_counts(info, cfg.bias_feature, float(solver.noise_stds()["gramian"]))
    model.__dict__.setdefault("_exposure_parts", []).append(part)


def item_side(model, cfg: DPALSConfig, result, solver) -> tuple[np.ndarray, np.ndarray | None]:
    """``(V, item biases)`` from an item step's release (every backend calls this once per step):
    the factors and ``c`` times the bias coordinate of the solution; for the private bias model
    the biases are instead the empirical-Bayes posterior means from the same release
    (:func:`.bias_posterior.posterior_item_bias`). Also keeps the step's exposure counts.
    Post-processing only: no event."""
    collect_exposure(model, cfg, result, solver)
    d, dtype = cfg.factors, cfg.dtype
    params = np.asarray(result.params, dtype=dtype)
    V = np.ascontiguousarray(params[:, :d])
    if not cfg.biases:
        return V, None
    info = getattr(result, "info", None) or {}
    # (a global Gramian, unobserved_weight > 0, couples the items: keep the solver's solution)
    if d == 0 and cfg.reg_rule == "empirical-bayes" and cfg.unobserved_weight == 0 and "noisy_rhs" in info:
        stds = solver.noise_stds()
        b = posterior_item_bias(
            info["noisy_gramian_diagonal"][:, d], info["noisy_rhs"][:, d], cfg.bias_feature,
            stds["gramian"], stds["rhs"], cfg.label_bound,
        )  # fmt: skip
        return V, np.ascontiguousarray(b, dtype=dtype)
    return V, np.ascontiguousarray(params[:, d] * dtype.type(cfg.bias_feature))


def exposure_of(
    model, cfg: DPALSConfig, head, counts, n_users: int, n_items: int, count_scale: float = 0.0
) -> np.ndarray | None:
    """``item_exposure_`` from the kept step counts over the public task weights omega_i,
    combined with the released counts (noise std ``count_scale * sqrt(count_sample)``:
    :func:`.exposure.item_exposure`); None without them (noisy GD, no biases, eps = inf)."""
    parts = model.__dict__.pop("_exposure_parts", None)
    if not parts:
        return None
    counts_h = np.maximum(np.asarray(counts, dtype=np.float64)[head], 1.0)
    count_std = float(count_scale) * math.sqrt(cfg.count_sample)
    omega = task_weights(cfg, counts_h, max(1, int(round(n_users))))
    return item_exposure(parts, omega, head, n_items, counts=counts, count_std=count_std)


def release_item_side(
    model, cfg: DPALSConfig, head, counts, V, b_items, mu, norm_u, n_users, n_items, count_scale: float = 0.0
) -> None:
    """Set the released attributes (shared by the local and the distributed fit): item factors
    and biases scattered back to all ``n_items`` (zeros outside the trained ``head``), the
    implicit popularity prior (released counts / public n_users: post-processing), the mean,
    the user-ridge constants the billboard projection needs, the configuration."""
    dtype = cfg.dtype
    item_factors = np.zeros((n_items, cfg.factors), dtype=dtype)
    item_factors[head] = V
    model.item_factors_ = item_factors
    model.item_bias_ = None
    if cfg.biases:
        model.item_bias_ = np.zeros(n_items, dtype=dtype)
        model.item_bias_[head] = b_items
    elif cfg.popularity_prior:
        model.item_bias_ = (counts / n_users).astype(dtype)
    model.item_counts_ = np.asarray(counts, dtype=np.float64)
    model.item_exposure_ = exposure_of(model, cfg, head, counts, n_users, n_items, count_scale)
    model.global_mean_ = np.asarray(mu, dtype=np.float64)
    model.user_reg_norm_ = float(norm_u)
    model.user_regularization_ = float(cfg.user_reg)
    # the public shape (roster and catalogue sizes, public under the stated relation; the noisy count
    # where the roster is undeclared) with the settings
    users = float(n_users) if float(n_users) != int(n_users) else int(n_users)
    model.config_ = {**cfg.as_dict(), "n_users": users, "n_items": int(n_items)}
    model.trained_items_ = head
