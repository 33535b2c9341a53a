"""scikit-learn style federated private estimators over the convex losses.

Lowy & Razaviyayn (ICLR 2023): Noisy ISRL-DP MB-SGD (Algorithm 2), Accelerated Noisy MB-SGD
(Algorithm 1) and the baselines of the experiments (Sec. 6).

``FederatedDPRegressor`` (squared loss) and ``FederatedDPClassifier`` (logistic for two classes,
softmax otherwise) fit on ``(X, y, silos)`` where ``silos`` assigns each row to its data owner.
Each silo gets the budget ``(epsilon, delta)`` (``delta=None`` -> 1/n_i^2 per silo, the paper's
choice); per-silo reports end up in ``privacy_reports_`` and ``epsilons_`` (replace-one
neighbouring relation, as in Lowy & Razaviyayn's ISRL-DP; ``report["neighboring"]`` and
``report["accountant"]`` say how each epsilon was computed).

Public constants only. Every constant that shapes a released output is a public input, never a
statistic of the data: the accelerated algorithms take their smoothness (hence every step size)
from ``feature_bound``, which is **required** for them and enforced by clipping every feature row
to it (at fit and at predict time). privrec used to fall back on the data's largest row norm when
``feature_bound`` was None; one record of norm 1e4 then drove the released coefficients to ~0,
perfectly distinguishable from its neighbour (found by a privacy audit). ``clip`` (the gradient
bound the noise is scaled to), ``radius``, ``step_size`` and ``batch_size`` are public by
construction; silo sizes n_i are public under replace-one. The label set of a classifier is
treated as public.

``random_state`` is None (OS entropy, the private setting) or an int seed for experiments (a
known seed voids the privacy guarantee). A ``numpy.random.Generator`` / ``RandomState`` is
rejected at fit time: ``sklearn.base.clone`` deep-copies it, so every clone would draw identical
noise.

Algorithms: ``"mb_sgd"`` (ISRL-DP MB-SGD), ``"accelerated"`` (AC-SA, ERM), ``"accelerated_one_pass"``,
``"local_sgd"`` (ISRL-DP Local SGD); the suffix ``"_nonprivate"`` (or ``epsilon=inf``) gives the
non-private baselines.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

from ..._constraints import DELTA, EPSILON, NON_NEGATIVE, POSITIVE, POSITIVE_INT, POSITIVE_OR_INF, StrOptions
from ..._params import Hyperparameters, param
from ...privacy import check_noise_random_state, clip_rows
from ..losses import LogisticLoss, SoftmaxLoss, SquaredLoss
from .accelerated import accelerated_mb_sgd
from .calibration import SAMPLING_SCHEMES
from .mbsgd import local_sgd, mb_sgd
from .silos import SiloSet

ALGORITHMS = ("mb_sgd", "accelerated", "accelerated_one_pass", "local_sgd")


class _FederatedDP(Hyperparameters, BaseEstimator):
    algorithm: str = param(StrOptions({*ALGORITHMS, *(a + "_nonprivate" for a in ALGORITHMS)}), default="mb_sgd")
    epsilon: float = param(EPSILON, default=1.0)
    delta: float | None = param(DELTA, None, default=None)  # None: 1 / n_i^2 per silo
    rounds: int = param(POSITIVE_INT, default=35)
    batch_size: float = param(POSITIVE, default=0.1)  # a share of the silo (<= 1) or a count
    step_size: float = param(POSITIVE, default=0.1)
    clip: float = param(POSITIVE, default=1.0)
    radius: float | None = param(POSITIVE_OR_INF, None, default=None)
    n_available: Any = param(default=None)  # checked by the silo availability model
    local_steps: int = param(POSITIVE_INT, default=10)
    feature_bound: float | None = param(POSITIVE, None, default=None)
    l2: float = param(NON_NEGATIVE, default=0.0)
    fit_intercept: bool = param("boolean", default=True)
    sampling: str = param(StrOptions(set(SAMPLING_SCHEMES)), default="poisson")
    noise: str = param(StrOptions({"accountant", "paper"}), default="accountant")
    random_state: Any = param(default=None)  # check_noise_random_state

    def _design(self, X):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D, got shape {X.shape}")
        if self.feature_bound is not None:
            X = clip_rows(X, self.feature_bound)
        if self.fit_intercept:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        return X

    def _fit(self, X, y, silos, loss):
        self._validate_params()
        check_noise_random_state(self.random_state, type(self).__name__)
        algo = self.algorithm
        private = not algo.endswith("_nonprivate") and math.isfinite(self.epsilon)
        base = algo[: -len("_nonprivate")] if algo.endswith("_nonprivate") else algo
        if base not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS} (optionally + '_nonprivate'), got {algo!r}")
        if base.startswith("accelerated") and self.feature_bound is None:
            raise ValueError(
                f"algorithm {algo!r} needs a public feature_bound: its step sizes come from the loss's "
                "smoothness on {||x|| <= feature_bound} (rows are clipped to it); a bound read off the data "
                "would make the released coefficients depend on one record's norm"
            )
        Xd = self._design(X)
        if silos is None:
            raise ValueError("silos (one silo label per row) is required: federated data has owners")
        fed = SiloSet.from_groups(Xd, y, silos, epsilon=self.epsilon if private else math.inf, delta=self.delta)
        kw = dict(
            clip=self.clip,
            radius=self.radius,
            n_available=self.n_available,
            private=private,
            random_state=self.random_state,
            noise=self.noise,
            sampling=self.sampling,
        )
        sgd = dict(kw, rounds=self.rounds, step_size=self.step_size)  # the two (non-accelerated) SGD methods
        if base == "mb_sgd":
            res = mb_sgd(fed, loss, batch_size=self.batch_size, **sgd)
        elif base == "local_sgd":
            res = local_sgd(fed, loss, local_steps=self.local_steps, **sgd)
        else:
            # data independent: rows were clipped to feature_bound, plus the constant intercept column
            xb = float(self.feature_bound)
            xb = math.sqrt(xb**2 + 1.0) if self.fit_intercept else xb
            res = accelerated_mb_sgd(
                fed,
                loss,
                batch_size=self.batch_size,
                smoothness=max(loss.smoothness(xb), 1e-12),
                rounds=None if base == "accelerated_one_pass" else self.rounds,
                mode="one_pass" if base == "accelerated_one_pass" else "erm",
                **kw,
            )
        coef = res.coef
        if self.fit_intercept:
            self.coef_, self.intercept_ = coef[:-1], coef[-1]
        else:
            self.coef_, self.intercept_ = coef, np.zeros(coef.shape[1:]) if coef.ndim > 1 else 0.0
        self.result_ = res
        self.privacy_reports_ = res.reports
        self.epsilons_ = res.epsilons
        self.n_features_in_ = np.asarray(X).shape[1]
        return self

    def _decision(self, X):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have shape (n, {self.n_features_in_}), got {X.shape}")
        if self.feature_bound is not None:
            X = clip_rows(X, self.feature_bound)
        return X @ self.coef_ + self.intercept_


class FederatedDPRegressor(RegressorMixin, _FederatedDP):
    """Federated ISRL-DP linear regression (squared loss); see the module docstring for parameters."""

    def fit(self, X, y, silos=None):
        return self._fit(X, np.asarray(y, dtype=np.float64), silos, SquaredLoss(l2=self.l2))

    def predict(self, X):
        return self._decision(X)


class FederatedDPClassifier(ClassifierMixin, _FederatedDP):
    """Federated ISRL-DP logistic (2 classes) or softmax (more) regression."""

    def fit(self, X, y, silos=None):
        y = np.asarray(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        k = len(self.classes_)
        if k < 2:
            raise ValueError("FederatedDPClassifier needs at least two classes")
        loss = LogisticLoss(l2=self.l2) if k == 2 else SoftmaxLoss(k, l2=self.l2)
        return self._fit(X, codes.astype(np.float64) if k == 2 else codes, silos, loss)

    def decision_function(self, X):
        return self._decision(X)

    def predict_proba(self, X):
        z = self._decision(X)
        if z.ndim == 1:
            p = 1.0 / (1.0 + np.exp(-z))
            return np.column_stack([1 - p, p])
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, X):
        z = self._decision(X)
        idx = (z > 0).astype(int) if z.ndim == 1 else z.argmax(axis=1)
        return self.classes_[idx]
