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


def project_ball(a: np.ndarray, radius: float | None, *, rows: bool = True, inplace: bool = False) -> np.ndarray:
    """Euclidean projection onto the L2 ball of ``radius`` (the library's one ball projection).

    ``rows=True``: each row (leading axis; trailing axes flattened) is projected on its own, as
    for per-task iterates (Krichene et al. 2023, Algorithm 2's ``Proj_R``); ``rows=False``: the
    whole array (Frobenius norm), as for a shared parameter. ``radius`` ``None`` or ``inf``: no
    constraint. Points inside the ball are returned unchanged (bit for bit); outside points are
    scaled by ``radius / ||a||`` computed in ``a``'s dtype. Unlike :func:`clip_rows` (the
    sensitivity clip) no slack is applied: iterates are post-processing, not a sensitivity bound.
    """
    if radius is None or np.isinf(radius):
        return a
    r = check_positive(radius, "radius")
    out = a if inplace else np.array(a, copy=True)
    if not rows:
        nrm = float(np.linalg.norm(out))
        if nrm > r:
            out *= r / nrm
        return out
    flat = out.reshape(out.shape[0], -1)
    norms = np.sqrt(np.einsum("ij,ij->i", flat, flat))
    over = norms > r
    if np.any(over):
        flat[over] *= (r / norms[over])[:, None]
    return out
