"""Baselines of ``bench_utility.py``: trivial predictors and an independent private-bias model.

* :class:`GlobalMean` -- predicts the training mean (non-private; the RMSE yardstick);
* :class:`Popularity` -- ranks by exact training counts (non-private; the Recall yardstick);
* :class:`PrivateBias` -- written independently of DPALS's item step: each user contributes at
  most ``k`` sampled ratings; one Gaussian release of per-item counts, two of the global mean
  (sum, count), one of per-item sums of clipped residuals; item bias = noisy sum / (noisy count +
  ridge); user bias computed by each user from their own ratings against the released item biases
  (free). For implicit feedback only the counts are released and items rank by them (private
  popularity). Noise is calibrated with the PLD accountant and every release is a DpEvent in a
  :class:`~privrec.privacy.PrivacyLedger`.

Each exposes what :mod:`privrec.evaluation.protocols` reads: ``item_factors_`` (zero columns),
``item_bias_``, ``global_mean_`` and ``_project_users(rows) -> (factors, user_bias)``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from privrec.allocation import private_global_mean, private_item_counts
from privrec.allocation._rows import sample_per_row, sampling_key
from privrec.privacy import (
    PrivacyLedger,
    calibrate_noise_multiplier,
    clip_labels,
    compose,
    gaussian_event,
    gaussian_noise,
    make_rng,
)


class _Offsets:
    """Common part: zero-dimensional factors plus offsets."""

    item_bias_: np.ndarray
    global_mean_: float = 0.0
    user_ridge: float = 5.0

    def _project_users(self, rows: sp.csr_matrix):
        rows = sp.csr_matrix(rows)
        n = rows.shape[0]
        if not self.explicit:
            return np.zeros((n, 0), dtype=np.float32), None
        resid = rows.data - self.global_mean_ - self.item_bias_[rows.indices]
        r_idx = np.repeat(np.arange(n), np.diff(rows.indptr))
        sums = np.bincount(r_idx, weights=resid, minlength=n)
        return np.zeros((n, 0), dtype=np.float32), (sums / (np.diff(rows.indptr) + self.user_ridge)).astype(np.float32)


class GlobalMean(_Offsets):
    explicit = True

    def fit(self, R: sp.csr_matrix):
        self.global_mean_ = float(R.data.mean())
        self.item_bias_ = np.zeros(R.shape[1], dtype=np.float32)
        self.item_factors_ = np.zeros((R.shape[1], 0), dtype=np.float32)
        self.user_ridge = math.inf  # no user bias
        return self

    def _project_users(self, rows):
        return np.zeros((rows.shape[0], 0), dtype=np.float32), None


class Popularity(_Offsets):
    explicit = False

    def fit(self, R: sp.csr_matrix):
        self.item_bias_ = np.diff(sp.csc_matrix(R).indptr).astype(np.float32) / R.shape[0]
        self.item_factors_ = np.zeros((R.shape[1], 0), dtype=np.float32)
        return self


class PrivateBias(_Offsets):
    """See the module docstring. ``random_state``: seed for experiments (voids the guarantee)."""

    def __init__(
        self,
        epsilon: float,
        delta: float,
        k: int = 50,
        explicit: bool = True,
        rating_bound: float = 5.0,
        item_ridge: float | None = None,
        user_ridge: float = 5.0,
        random_state=None,
    ):
        self.epsilon, self.delta, self.k, self.explicit = epsilon, delta, k, explicit
        self.rating_bound, self.item_ridge, self.user_ridge = rating_bound, item_ridge, user_ridge
        self.random_state = random_state

    def fit(self, R: sp.csr_matrix):
        R = sp.csr_matrix(R)
        rng = make_rng(self.random_state)
        n_events = 4 if self.explicit else 1
        z = calibrate_noise_multiplier(
            self.epsilon, self.delta, lambda s: compose([gaussian_event(s)] * n_events), accountant="pld"
        )
        ledger = PrivacyLedger()
        counts = private_item_counts(R, self.k, z, rng)
        counts.record(ledger)
        n_hat = np.asarray(counts.value, dtype=np.float64)
        self.item_factors_ = np.zeros((R.shape[1], 0), dtype=np.float32)
        if not self.explicit:
            self.item_bias_ = (n_hat / R.shape[0]).astype(np.float32)
            self.ledger_ = ledger
            return self
        mean = private_global_mean(R, self.k, z, self.rating_bound, rng)
        mean.record(ledger)
        self.global_mean_ = float(mean.value)
        bound = self.rating_bound / 2.0
        keep = sample_per_row(R.indptr, R.indices, self.k, sampling_key(rng))
        resid = clip_labels(R.data[keep].astype(np.float64) - self.global_mean_, bound)
        sums = np.bincount(R.indices[keep], weights=resid, minlength=R.shape[1])
        sens = math.sqrt(self.k) * bound  # L2 change of the per-item sums when one user is removed
        sums = sums + gaussian_noise(sums.shape, z * sens, rng, np.float64)
        ledger.record("item residual sums", gaussian_event(z), sensitivity=sens, noise_std=z * sens)
        # ridge: 15 count-noise stds unless given (public: from z and k only; the multiplier was
        # picked on the ML-100K *validation* split from {2, 5, 10, 20}, k = 50 from {20, 50})
        ridge = 15.0 * z * math.sqrt(self.k) if self.item_ridge is None else self.item_ridge
        self.item_bias_ = (sums / (n_hat + ridge)).astype(np.float32)
        self.ledger_ = ledger
        return self

    def epsilon_spent(self) -> float:
        return self.ledger_.epsilon(self.delta, "pld")
