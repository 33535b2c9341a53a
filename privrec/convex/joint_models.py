"""The models :class:`~privrec.convex.joint.JointDPSGD` trains: a personal block per data owner and a
shared block, with per-example joint gradients (their residuals and squared norms) computed
without materialising them. Importable from :mod:`privrec.convex.joint` too.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_finite_array, check_int


class PersonalBiasSoftmax:
    """Multinomial logistic regression with shared weights W (d, K) and a personal bias b_j (K,).

    logits = x W + b_j; loss = softmax cross-entropy (see ``losses.SoftmaxLoss``).
    """

    def __init__(self, n_features: int, n_classes: int):
        self.n_features = check_int(n_features, "n_features", minimum=1)
        self.n_classes = check_int(n_classes, "n_classes", minimum=2)
        self.shared_shape = (self.n_features, self.n_classes)
        self.personal_shape = (self.n_classes,)

    def check_labels(self, y) -> np.ndarray:
        y = np.asarray(y)
        if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        if y.dtype.kind not in "iu" or (y.size and (y.min() < 0 or y.max() >= self.n_classes)):
            raise ValueError(f"labels must be integers in 0..{self.n_classes - 1}")
        return y.astype(np.int64)

    def scores(self, personal, shared, X):
        """personal: (B, K) rows aligned with X (B, d)."""
        return X @ shared + personal

    def gradient_parts(self, personal, shared, X, y):
        """Return (residual r (B, K), squared per-example joint gradient norms (B,)).

        grad_b = r, grad_W = x r^T, so ||(grad_b, grad_W)||^2 = ||r||^2 (1 + ||x||^2).
        """
        z = self.scores(personal, shared, X)
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(X.shape[0]), y] -= 1.0
        sq = np.einsum("ij,ij->i", p, p) * (1.0 + np.einsum("ij,ij->i", X, X))
        return p, sq

    def shared_grad_sum(self, r, X, scale):
        return X.T @ (r * scale[:, None])

    def personal_grads(self, r, X, scale):
        return r * scale[:, None]

    def loss(self, personal, shared, X, y) -> np.ndarray:
        z = self.scores(personal, shared, X)
        zmax = z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(z - zmax).sum(axis=1)) + zmax[:, 0]
        return lse - z[np.arange(X.shape[0]), y]

    def predict(self, personal, shared, X):
        return np.argmax(self.scores(personal, shared, X), axis=1)


class PersonalBiasLinear:
    """Least squares with shared weights w (d,) and a personal intercept b_j (1,): loss (1/2)(x w + b_j - y)^2."""

    def __init__(self, n_features: int):
        self.n_features = check_int(n_features, "n_features", minimum=1)
        self.shared_shape = (self.n_features,)
        self.personal_shape = (1,)

    def check_labels(self, y) -> np.ndarray:
        return check_finite_array(np.asarray(y, dtype=np.float64), "y")

    def scores(self, personal, shared, X):
        return X @ shared + personal[:, 0]

    def gradient_parts(self, personal, shared, X, y):
        r = self.scores(personal, shared, X) - y
        sq = r * r * (1.0 + np.einsum("ij,ij->i", X, X))
        return r, sq

    def shared_grad_sum(self, r, X, scale):
        return X.T @ (r * scale)

    def personal_grads(self, r, X, scale):
        return (r * scale)[:, None]

    def loss(self, personal, shared, X, y):
        r = self.scores(personal, shared, X) - y
        return 0.5 * r * r

    def predict(self, personal, shared, X):
        return self.scores(personal, shared, X)


def _parts_from_scores(model, s, P, Xb, yb):
    """Residuals and squared joint-gradient norms given precomputed shared scores (individual regime)."""
    if isinstance(model, PersonalBiasSoftmax):
        z = s + P
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(z.shape[0]), yb] -= 1.0
        return p, np.einsum("ij,ij->i", p, p) * (1.0 + np.einsum("ij,ij->i", Xb, Xb))
    r = s + P[:, 0] - yb
    return r, r * r * (1.0 + np.einsum("ij,ij->i", Xb, Xb))
