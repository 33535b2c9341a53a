"""Sensitivity contracts enforced in code: clip embedding rows and labels (Krichene et al. 2023, Alg. 1)."""

from __future__ import annotations

import numpy as np

from .._validation import check_positive


def clip_rows(x: np.ndarray, max_norm: float, out: np.ndarray | None = None) -> np.ndarray:
    """Scale each row of ``x`` so its L2 norm is at most ``max_norm``: x * min(1, G / ||x||)."""
    g = check_positive(max_norm, "max_norm")
    x = np.asarray(x)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64)) if x.ndim == 2 else np.linalg.norm(x, axis=-1)
    with np.errstate(over="ignore", divide="ignore"):  # zero rows: g / tiny -> inf -> scale 1
        scale = g / np.maximum(norms, np.finfo(np.float64).tiny)
    # Rows that are scaled get a few ulps of slack so rounding in x.dtype (float32 by default)
    # cannot leave them above max_norm: the bound is the sensitivity, enforced, not approximate.
    if x.dtype.kind == "f":
        scale = np.where(scale < 1.0, scale * (1.0 - 4.0 * np.finfo(x.dtype).eps), 1.0)
    else:
        scale = np.minimum(1.0, scale)
    scale = scale.astype(x.dtype, copy=False) if x.dtype.kind == "f" else scale
    if out is None:
        return x * scale[..., None]
    np.multiply(x, scale[..., None], out=out)
    return out


def clip_labels(y: np.ndarray, bound: float) -> np.ndarray:
    """Clip labels to [-bound, bound] (the declared rating bound)."""
    b = check_positive(bound, "rating_bound")
    return np.clip(np.asarray(y), -b, b)


def clip_vector(v: np.ndarray, max_norm: float) -> np.ndarray:
    """Clip one vector (or the last axis of a batch) to L2 norm ``max_norm``."""
    v = np.asarray(v)
    if v.ndim == 1:
        return clip_rows(v[None, :], max_norm)[0]
    return clip_rows(v.reshape(-1, v.shape[-1]), max_norm).reshape(v.shape)
