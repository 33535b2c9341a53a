"""Convex losses with gradients and their constants on a bounded domain, plus gradient clipping.

Used by the multi-task layer (Krichene et al., ICML 2023, Sec. 3), joint DP (Huang et al.) and the
asynchronous learner (Farokhi et al.). Every loss is per example, ``loss(theta; x, y)``, with an
optional ridge term ``(l2 / 2) ||theta||^2`` added once to averaged objectives (never per example).

Constants are stated for the bounded domain a DP algorithm enforces by clipping:
``||x||_2 <= feature_bound``, ``||theta||_2 <= param_bound`` (Frobenius for matrices) and, for the
squared loss, ``|y| <= label_bound``. They are what the privacy analyses need:

* ``lipschitz(...)``: a bound on ``||grad_theta loss(theta; x, y)||_2`` over the domain (the
  per-example gradient sensitivity ``Gamma`` of noisy GD, ``L`` of Huang et al., ``Xi`` of Farokhi et al.);
* ``smoothness(...)``: a bound on the spectral norm of the Hessian in theta;
* ``strong_convexity()``: the modulus contributed by the ridge term (the data term is only
  convex in general, its Hessian can be singular).

API (stable; other packages import it):

``losses(theta, X, y)`` per-example values; ``value(theta, X, y, sample_weight=None)`` weighted
mean plus ridge; ``per_example_gradients(theta, X, y)`` shape ``(n, *theta.shape)``, no ridge;
``gradient(theta, X, y, sample_weight=None)`` gradient of ``value``. Scalar-margin losses
(squared, logistic) also expose ``derivative(z, y)`` = d loss / d z at margin ``z = <x, theta>``
so batched callers can form gradients as ``derivative * x`` without materialising them.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, log_expit, logsumexp

from .._validation import check_finite_array, check_positive
from ..privacy.clipping import clip_rows

__all__ = [
    "SquaredLoss",
    "LogisticLoss",
    "SoftmaxLoss",
    "clip_gradients",
    "clip_gradients_l1",
    "clipped_gradient_sum",
]


def _as_2d(X, name: str = "X") -> np.ndarray:
    X = check_finite_array(X, name)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_examples, n_features), got shape {X.shape}")
    if X.dtype.kind not in "fc":
        X = X.astype(np.float32)
    return X


def _weights(sample_weight, n: int, dtype) -> np.ndarray | None:
    return None if sample_weight is None else _checked_weights(sample_weight, n, dtype)


def _checked_weights(sample_weight, n: int, dtype) -> np.ndarray:
    w = check_finite_array(sample_weight, "sample_weight").astype(dtype, copy=False)
    if w.shape != (n,):
        raise ValueError(f"sample_weight must have shape ({n},), got {w.shape}")
    if np.any(w < 0):
        raise ValueError("sample_weight must be non-negative")
    return w


def _weighted_mean(values: np.ndarray, w: np.ndarray | None) -> float:
    if values.shape[0] == 0:
        return 0.0
    if w is None:
        return float(np.mean(values, dtype=np.float64))
    total = float(np.sum(w, dtype=np.float64))
    if total <= 0:
        raise ValueError("sample_weight must have a positive sum")
    return float(np.dot(w.astype(np.float64), values.astype(np.float64)) / total)


class _MarginLoss:
    """Shared machinery of losses that depend on theta only through z = <x, theta> (theta: (d,))."""

    def __init__(self, l2: float = 0.0):
        self.l2 = check_positive(l2, "l2", allow_zero=True)

    def _values(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example losses at margins ``z``: defined by each subclass."""
        raise NotImplementedError

    def derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """d loss / d z at margins ``z``: defined by each subclass."""
        raise NotImplementedError

    def _check(self, theta, X, y):
        X = _as_2d(X)
        theta = check_finite_array(theta, "theta")
        if theta.shape != (X.shape[1],):
            raise ValueError(f"theta must have shape ({X.shape[1]},), got {theta.shape}")
        y = self._check_labels(y, X.shape[0])
        return theta.astype(X.dtype, copy=False), X, y

    def _check_labels(self, y, n: int) -> np.ndarray:
        y = check_finite_array(y, "y")
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {y.shape}")
        return y

    def losses(self, theta, X, y) -> np.ndarray:
        theta, X, y = self._check(theta, X, y)
        return self._values(X @ theta, y)

    def value(self, theta, X, y, sample_weight=None) -> float:
        theta, X, y = self._check(theta, X, y)
        w = _weights(sample_weight, X.shape[0], X.dtype)
        reg = 0.5 * self.l2 * float(np.dot(theta, theta))
        return _weighted_mean(self._values(X @ theta, y), w) + reg

    def per_example_gradients(self, theta, X, y) -> np.ndarray:
        theta, X, y = self._check(theta, X, y)
        return self.derivative(X @ theta, y)[:, None] * X

    def gradient(self, theta, X, y, sample_weight=None) -> np.ndarray:
        theta, X, y = self._check(theta, X, y)
        w = _weights(sample_weight, X.shape[0], X.dtype)
        g = self.derivative(X @ theta, y)
        if X.shape[0] == 0:
            return self.l2 * theta
        if w is None:
            grad = X.T @ g / X.shape[0]
        else:
            grad = X.T @ (w * g) / float(np.sum(w, dtype=np.float64))
        return (grad + self.l2 * theta).astype(X.dtype, copy=False)

    def strong_convexity(self) -> float:
        """Modulus of strong convexity of the regularised average loss (the ridge term only)."""
        return self.l2


class SquaredLoss(_MarginLoss):
    """loss = (1/2) (<x, theta> - y)^2 (ridge regression with ``l2``).

    On ``||x|| <= X``, ``||theta|| <= R``, ``|y| <= Y``: gradient norm ``<= X (X R + Y)``,
    Hessian ``x x^T`` with norm ``<= X^2``.
    """

    def _values(self, z, y):
        r = z - y
        return 0.5 * r * r

    def derivative(self, z, y):
        return z - y

    def lipschitz(self, feature_bound: float, param_bound: float, label_bound: float) -> float:
        xb = check_positive(feature_bound, "feature_bound")
        rb = check_positive(param_bound, "param_bound", allow_zero=True)
        yb = check_positive(label_bound, "label_bound", allow_zero=True)
        return xb * (xb * rb + yb) + self.l2 * rb

    def smoothness(self, feature_bound: float) -> float:
        xb = check_positive(feature_bound, "feature_bound")
        return xb * xb + self.l2


class LogisticLoss(_MarginLoss):
    """Binary logistic loss with labels in {0, 1}: log(1 + exp(z)) - y z, z = <x, theta>.

    Gradient ``(sigmoid(z) - y) x`` has norm ``<= ||x|| <= X`` for every theta (no domain bound
    needed); Hessian ``sigmoid'(z) x x^T`` has norm ``<= X^2 / 4``.
    """

    def _check_labels(self, y, n: int) -> np.ndarray:
        y = super()._check_labels(y, n)
        if np.any((y != 0) & (y != 1)):
            raise ValueError("LogisticLoss labels must be 0 or 1")
        return y

    def _values(self, z, y):
        # log(1 + e^z) - y z = -log sigmoid(z) for y = 1, -log sigmoid(-z) for y = 0
        return -np.where(y == 1, log_expit(z), log_expit(-z))

    def derivative(self, z, y):
        return expit(z) - y

    def lipschitz(self, feature_bound: float, param_bound: float = 0.0, label_bound: float | None = None) -> float:
        xb = check_positive(feature_bound, "feature_bound")
        rb = check_positive(param_bound, "param_bound", allow_zero=True)
        return xb + self.l2 * rb

    def smoothness(self, feature_bound: float) -> float:
        xb = check_positive(feature_bound, "feature_bound")
        return 0.25 * xb * xb + self.l2


class SoftmaxLoss:
    """Multinomial logistic (softmax cross-entropy) loss; theta is a (d, K) matrix, labels in 0..K-1.

    loss = logsumexp(x^T theta) - (x^T theta)_y. Gradient ``x (p - e_y)^T`` has Frobenius norm
    ``||x|| ||p - e_y|| <= sqrt(2) X`` for every theta; the Hessian of logsumexp has spectral norm
    ``<= 1/2``, so the smoothness constant is ``X^2 / 2``.
    """

    def __init__(self, n_classes: int, l2: float = 0.0):
        if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
        self.n_classes = int(n_classes)
        self.l2 = check_positive(l2, "l2", allow_zero=True)

    def _check(self, theta, X, y):
        X = _as_2d(X)
        theta = check_finite_array(theta, "theta")
        if theta.shape != (X.shape[1], self.n_classes):
            raise ValueError(f"theta must have shape ({X.shape[1]}, {self.n_classes}), got {theta.shape}")
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        if y.dtype.kind not in "iu":
            if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
                y = y.astype(np.int64)
            else:
                raise ValueError("SoftmaxLoss labels must be integers in 0..n_classes-1")
        if y.size and (y.min() < 0 or y.max() >= self.n_classes):
            raise ValueError(f"SoftmaxLoss labels must be in 0..{self.n_classes - 1}")
        return theta.astype(X.dtype, copy=False), X, y

    def _probs_and_values(self, theta, X, y):
        logits = X @ theta
        lse = logsumexp(logits, axis=1)
        values = lse - logits[np.arange(X.shape[0]), y]
        probs = np.exp(logits - lse[:, None])
        return probs, values

    def losses(self, theta, X, y) -> np.ndarray:
        theta, X, y = self._check(theta, X, y)
        return self._probs_and_values(theta, X, y)[1]

    def value(self, theta, X, y, sample_weight=None) -> float:
        theta, X, y = self._check(theta, X, y)
        w = _weights(sample_weight, X.shape[0], X.dtype)
        reg = 0.5 * self.l2 * float(np.sum(theta * theta))
        return _weighted_mean(self._probs_and_values(theta, X, y)[1], w) + reg

    def residuals(self, theta, X, y) -> np.ndarray:
        """p - e_y per example, shape (n, K): the gradient is ``x (p - e_y)^T``."""
        theta, X, y = self._check(theta, X, y)
        probs, _ = self._probs_and_values(theta, X, y)
        probs[np.arange(X.shape[0]), y] -= 1.0
        return probs

    def per_example_gradients(self, theta, X, y) -> np.ndarray:
        r = self.residuals(theta, X, y)
        X = _as_2d(X)
        return X[:, :, None] * r[:, None, :]

    def gradient(self, theta, X, y, sample_weight=None) -> np.ndarray:
        theta, X, y = self._check(theta, X, y)
        w = _weights(sample_weight, X.shape[0], X.dtype)
        r = self.residuals(theta, X, y)
        if X.shape[0] == 0:
            return self.l2 * theta
        if w is None:
            grad = X.T @ r / X.shape[0]
        else:
            grad = X.T @ (w[:, None] * r) / float(np.sum(w, dtype=np.float64))
        return (grad + self.l2 * theta).astype(X.dtype, copy=False)

    def lipschitz(self, feature_bound: float, param_bound: float = 0.0, label_bound: float | None = None) -> float:
        xb = check_positive(feature_bound, "feature_bound")
        rb = check_positive(param_bound, "param_bound", allow_zero=True)
        return math.sqrt(2.0) * xb + self.l2 * rb

    def smoothness(self, feature_bound: float) -> float:
        xb = check_positive(feature_bound, "feature_bound")
        return 0.5 * xb * xb + self.l2

    def strong_convexity(self) -> float:
        return self.l2


# -------------------------------------------------------------------------------------------------
# Per-example gradient clipping (the sensitivity contract of noisy GD / SGD)
# -------------------------------------------------------------------------------------------------


def clip_gradients(grads, max_norm: float) -> np.ndarray:
    """Scale each per-example gradient (leading axis) to L2 (Frobenius) norm at most ``max_norm``."""
    g = np.asarray(grads)
    return clip_rows(g.reshape(g.shape[0], -1), max_norm).reshape(g.shape)


def clip_gradients_l1(grads, max_norm: float) -> np.ndarray:
    """Scale each per-example gradient to L1 norm at most ``max_norm`` (for Laplace mechanisms)."""
    c = check_positive(max_norm, "max_norm")
    g = np.asarray(grads)
    flat = g.reshape(g.shape[0], -1)
    norms = np.abs(flat).sum(axis=1, dtype=np.float64)
    scale = c / np.maximum(norms, np.finfo(np.float64).tiny)
    slack = 1.0 - 4.0 * np.finfo(g.dtype).eps if g.dtype.kind == "f" else 1.0  # rounding cannot exceed c
    scale = np.where(scale < 1.0, scale * slack, 1.0).astype(g.dtype if g.dtype.kind == "f" else np.float64)
    return (flat * scale[:, None]).reshape(g.shape)


def clipped_gradient_sum(loss, theta, X, y, max_norm: float, sample_weight=None, norm: str = "l2") -> np.ndarray:
    """sum_e w_e clip(grad loss(theta; x_e, y_e)): the bounded-sensitivity statistic of noisy GD.

    With ``norm="l2"`` removing one example with weight ``w`` changes the sum by at most
    ``w * max_norm`` in L2; with ``norm="l1"`` the same bound holds in L1.
    """
    G = loss.per_example_gradients(theta, X, y)
    if norm == "l2":
        G = clip_gradients(G, max_norm)
    elif norm == "l1":
        G = clip_gradients_l1(G, max_norm)
    else:
        raise ValueError(f"norm must be 'l2' or 'l1', got {norm!r}")
    if sample_weight is None:
        return G.sum(axis=0)
    w = _checked_weights(sample_weight, G.shape[0], G.dtype)
    return np.tensordot(w, G, axes=(0, 0))
