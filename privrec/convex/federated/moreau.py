"""Moreau-envelope smoothing for non-smooth convex losses, and two non-smooth margin losses.

Lowy & Razaviyayn (ICLR 2023), App. D.2: non-smooth losses are handled by running on the Moreau
envelope (f_beta <= f <= f_beta + L^2/(2 beta); Lemma D.7, after Nesterov 2005).

For a per-example loss f(theta; x, y) = phi(<x, theta>, y) the envelope is
``f_beta(theta) = min_u f(u) + (beta/2) ||u - theta||^2``; it is convex, beta-smooth, has the same
Lipschitz constant L, and its gradient is ``beta (theta - prox(theta)) = beta s x`` where the prox
moves theta along x: ``u = theta - s x`` with ``beta s in dphi(<x, theta> - s ||x||^2)``. The scalar
s is found per example by vectorised bisection on this monotone equation (it lies between 0 and
phi'(<x, theta>) / beta). Wrap a loss and pass it to any federated algorithm:
``mb_sgd(silos, MoreauEnvelope(HingeLoss(), beta=4.0), ...)``; per-example gradients still go
through the channel's clipping, so privacy does not depend on the smoothing.
"""

from __future__ import annotations

import numpy as np

from ..._validation import check_finite_array, check_int, check_positive


class _NonSmoothMargin:
    def __init__(self, l2: float = 0.0):
        self.l2 = check_positive(l2, "l2", allow_zero=True)

    def _prep(self, theta, X, y):
        X = check_finite_array(X, "X")
        theta = check_finite_array(theta, "theta")
        if X.ndim != 2 or theta.shape != (X.shape[1],):
            raise ValueError(f"X must be (n, d) and theta (d,), got {X.shape} and {theta.shape}")
        return theta, X, self._labels(np.asarray(y, dtype=np.float64))

    def _labels(self, y):
        return y

    def losses(self, theta, X, y):
        theta, X, y = self._prep(theta, X, y)
        return self.margin_values(X @ theta, y)

    def value(self, theta, X, y, sample_weight=None):
        vals = self.losses(theta, X, y)
        m = float(np.average(vals, weights=sample_weight)) if len(vals) else 0.0
        return m + 0.5 * self.l2 * float(np.dot(theta, theta))

    def per_example_gradients(self, theta, X, y):
        theta, X, y = self._prep(theta, X, y)
        return self.derivative(X @ theta, y)[:, None] * X

    def gradient(self, theta, X, y, sample_weight=None):
        G = self.per_example_gradients(theta, X, y)
        return np.average(G, axis=0, weights=sample_weight) + self.l2 * np.asarray(theta)

    def lipschitz(self, feature_bound: float, param_bound: float = 0.0, label_bound: float | None = None):
        return check_positive(feature_bound, "feature_bound")

    def strong_convexity(self) -> float:
        return self.l2


class HingeLoss(_NonSmoothMargin):
    """phi(z, y) = max(0, 1 - y z), labels in {0, 1} or {-1, +1} (0 is read as -1). L = max ||x||."""

    def _labels(self, y):
        if not np.all(np.isin(y, (-1.0, 0.0, 1.0))):
            raise ValueError("HingeLoss labels must be in {0, 1} or {-1, +1}")
        return np.where(y > 0, 1.0, -1.0)

    def margin_values(self, z, y):
        return np.maximum(0.0, 1.0 - y * z)

    def derivative(self, z, y):
        return np.where(y * z < 1.0, -y, 0.0)


class AbsoluteLoss(_NonSmoothMargin):
    """phi(z, y) = |z - y| (least absolute deviations). L = max ||x||."""

    def margin_values(self, z, y):
        return np.abs(z - y)

    def derivative(self, z, y):
        return np.sign(z - y)


class MoreauEnvelope:
    """beta-smooth Moreau envelope of a margin loss (one with ``margin_values`` and ``derivative``)."""

    def __init__(self, loss, beta: float, iterations: int = 60):
        if not (hasattr(loss, "margin_values") and hasattr(loss, "derivative")):
            raise ValueError("MoreauEnvelope needs a margin loss with margin_values(z, y) and derivative(z, y)")
        self.loss = loss
        self.beta = check_positive(beta, "beta")
        self.iterations = check_int(iterations, "iterations", minimum=1)
        self.l2 = getattr(loss, "l2", 0.0)

    def prox_shift(self, theta, X, y):
        """Per-example s with prox(theta) = theta - s x (bisection on beta s - phi'(z0 - s a) = 0)."""
        theta, X, y = self.loss._prep(theta, X, y)
        z0 = X @ theta
        a = np.einsum("ij,ij->i", X, X)
        g0 = self.loss.derivative(z0, y)
        lo = np.minimum(0.0, g0 / self.beta)
        hi = np.maximum(0.0, g0 / self.beta)
        for _ in range(self.iterations):
            mid = 0.5 * (lo + hi)
            pos = self.beta * mid - self.loss.derivative(z0 - mid * a, y) > 0
            hi = np.where(pos, mid, hi)
            lo = np.where(pos, lo, mid)
        return 0.5 * (lo + hi), z0, a, y, X

    def losses(self, theta, X, y):
        s, z0, a, yy, _ = self.prox_shift(theta, X, y)
        return self.loss.margin_values(z0 - s * a, yy) + 0.5 * self.beta * s**2 * a

    def value(self, theta, X, y, sample_weight=None):
        vals = self.losses(theta, X, y)
        m = float(np.average(vals, weights=sample_weight)) if len(vals) else 0.0
        return m + 0.5 * self.l2 * float(np.dot(theta, theta))

    def per_example_gradients(self, theta, X, y):
        s, _, _, _, X = self.prox_shift(theta, X, y)
        return (self.beta * s)[:, None] * X

    def gradient(self, theta, X, y, sample_weight=None):
        return np.average(self.per_example_gradients(theta, X, y), axis=0, weights=sample_weight) + self.l2 * theta

    def smoothness(self, feature_bound: float | None = None) -> float:
        return self.beta

    def lipschitz(self, feature_bound: float, param_bound: float = 0.0, label_bound: float | None = None):
        return self.loss.lipschitz(feature_bound, param_bound, label_bound)

    def strong_convexity(self) -> float:
        return self.l2
