"""Per-user budget allocations: uniform, tail and adaptive weights (Krichene et al., ICML 2023, Secs. 4-5).

Every allocation returns a weights CSR *aligned* with ``user_items``: same shape, ``indptr`` and
``indices``; ``data[e]`` is the weight of interaction ``e`` (explicit zeros mark dropped
interactions). The user-level RDP budget ``beta`` bounds every user's spend:
``sum_i w_ij^2 <= beta`` (Krichene et al. 2023, Thm 3.3). This invariant is **enforced in code** after the cast
to the output dtype (:func:`enforce_budget`), so float rounding can never push a user above beta.

Inputs other than the user's own row are the *released* noisy counts, so allocations are
post-processing and cost no privacy.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .._validation import check_finite_array, check_int, check_positive
from ..privacy import make_rng
from ._rows import check_user_items, keep_lowest_per_row, row_ids, row_sums, sample_per_row, sampling_key

# Relative safety margin applied only to users whose float-rounded spend exceeds beta.
_BUDGET_MARGIN = 1e-6


def _aligned(user_items: sp.csr_matrix, data: np.ndarray) -> sp.csr_matrix:
    w = sp.csr_matrix((data, user_items.indices.copy(), user_items.indptr.copy()), shape=user_items.shape)
    return w


def user_spend(user_items, weights) -> np.ndarray:
    """Per-user spend ``sum_i w_ij^2`` (float64) of a weights CSR aligned with ``user_items``."""
    w = weights.data if sp.issparse(weights) else np.asarray(weights)
    return row_sums(user_items.indptr, np.asarray(w, dtype=np.float64) ** 2)


def enforce_budget(indptr, data: np.ndarray, beta: float) -> np.ndarray:
    """Scale rows whose spend ``sum w^2`` (computed in float64 from ``data``'s dtype) exceeds beta.

    Returns ``data`` (same dtype) with ``max_row sum w^2 <= beta`` exactly; rows within budget
    are untouched. Applied by every allocation (Krichene et al. 2023, Sec. 4, eq. 12: per-user clipping).
    """
    beta = check_positive(beta, "beta")
    data = np.array(data, copy=True)
    for _ in range(4):
        spend = row_sums(indptr, data.astype(np.float64) ** 2)
        over = spend > beta
        if not np.any(over):
            return data
        scale = np.ones(spend.size)
        scale[over] = np.sqrt(beta / spend[over]) * (1.0 - _BUDGET_MARGIN)
        data = (data.astype(np.float64) * scale[row_ids(indptr)]).astype(data.dtype)
    raise AssertionError("could not enforce the per-user budget")  # pragma: no cover


def _check_counts(counts, n_items: int) -> np.ndarray:
    c = check_finite_array(np.asarray(counts, dtype=np.float64), "counts")
    if c.shape != (n_items,):
        raise ValueError(f"counts must have shape ({n_items},) (one per item), got {c.shape}")
    if np.any(c <= 0):
        raise ValueError("counts must be > 0 (private_item_counts floors them at 1)")
    return c


def uniform_weights(
    user_items,
    k: int,
    rng=None,
    dtype=np.float32,
    *,
    key: int | None = None,
    row_offset: int = 0,
    user_keys: np.ndarray | None = None,
) -> sp.csr_matrix:
    """Uniform sampling (Krichene et al., Sec. 5): each user keeps ``min(k, n_j)`` items uniformly at random, weight 1.

    Spend per user = number kept <= k, i.e. beta = k. ``rng``: ``None`` = OS entropy; a known
    seed makes the selection predictable (experiments only). ``key`` / ``row_offset``: the
    sampling key (default: drawn from ``rng``) and the global index of the first row, for a block
    of users processed on its own (distributed fits; see :func:`~privrec.allocation._rows.keyed_uniform`).
    ``user_keys``: one stable sampling key per row (:func:`~privrec.allocation.stable_user_keys` of
    the users' ids), so a user's sample does not depend on the other users; without it a user is
    identified by the global row index (the id of a bare matrix; ``row_offset`` is then used).
    """
    m = check_user_items(user_items)
    k = check_int(k, "k", minimum=1)
    key = sampling_key(make_rng(rng)) if key is None else int(key)
    keep = sample_per_row(m.indptr, m.indices, k, key, row_offset, user_keys)
    data = enforce_budget(m.indptr, keep.astype(dtype), float(k))
    return _aligned(m, data)


def tail_weights(
    user_items,
    counts,
    k: int,
    rng=None,
    dtype=np.float32,
    *,
    key: int | None = None,
    row_offset: int = 0,
    user_keys: np.ndarray | None = None,
) -> sp.csr_matrix:
    """Tail sampling (Chien et al. 2021; Krichene et al. 2023, Sec. 5): keep each user's k items of lowest noisy count.

    Ties between equal counts are broken uniformly at random (``rng``: ``None`` = OS entropy; a
    known seed makes the selection predictable, experiments only). Weight 1, beta = k.
    ``key`` / ``row_offset`` / ``user_keys`` as :func:`uniform_weights`.
    """
    m = check_user_items(user_items)
    k = check_int(k, "k", minimum=1)
    c = _check_counts(counts, m.shape[1])
    key = sampling_key(make_rng(rng)) if key is None else int(key)
    # dense integer levels of the noisy counts (equal counts -> equal level; ties broken per entry)
    uniq, level_of_item = np.unique(c, return_inverse=True)
    keep = keep_lowest_per_row(m.indptr, m.indices, k, level_of_item[m.indices], uniq.size, key, row_offset, user_keys)
    data = enforce_budget(m.indptr, keep.astype(dtype), float(k))
    return _aligned(m, data)


def adaptive_task_weights(
    counts, mu: float, beta: float, n_users: int, beta_bar: float | None = None, inflation: float = 0.0
) -> np.ndarray:
    """Unclipped adaptive task weights omega_i of eq. 11 (Krichene et al. 2023, Sec. 4,
    in the exponent-mu form of Sec. 5), float64.

    omega_i = nhat_i^-mu / sqrt( sum_i' nhat_i'^(1 - 2 mu) / (n * beta_bar) ), with
    nhat_i = counts_i + inflation (Appendix B: s-accurate estimates use nhat + s). The average
    user spend sum_i n_i omega_i^2 / n equals beta_bar (default ``beta``; the paper's theory uses
    beta / (c log n)). ``n_users`` is treated as public (the matrix's row count by default in
    :func:`adaptive_weights`).
    """
    mu = _check_mu(mu)
    beta = check_positive(beta, "beta")
    n = check_int(n_users, "n_users", minimum=1)
    bb = beta if beta_bar is None else check_positive(beta_bar, "beta_bar")
    s = check_positive(inflation, "inflation", allow_zero=True)
    nh = np.asarray(counts, dtype=np.float64) + s
    if np.any(nh <= 0) or not np.all(np.isfinite(nh)):
        raise ValueError("counts (+ inflation) must be finite and > 0")
    norm = math.sqrt(float(np.sum(nh ** (1.0 - 2.0 * mu))) / (n * bb))
    return nh ** (-mu) / norm


def _check_mu(mu) -> float:
    mu = check_positive(mu, "mu", allow_zero=True)
    if mu > 1.0:
        raise ValueError(f"mu must be in [0, 1], got {mu!r}")
    return mu


def adaptive_weights(
    user_items,
    counts,
    mu: float,
    beta: float,
    mode: str = "per_user",
    inflation: float = 0.0,
    beta_bar: float | None = None,
    n_users: int | None = None,
    dtype=np.float32,
) -> sp.csr_matrix:
    """Adaptive weights omega_i ∝ nhat_i^-mu (Krichene et al. 2023, Secs. 4-5), keeping every interaction.

    ``mode="per_user"`` (``_compute_adaptive_weights`` of the authors' reference implementation):
    inside each user's row, w_ij ∝ nhat_i^-mu normalised so the user spends exactly ``beta``
    (``sum_i w_ij^2 = beta``, up to a 1e-6 relative safety margin where float rounding would exceed it).

    ``mode="global"`` (eq. 11-12): w_ij = omega_i * min(1, sqrt(beta / sum_{i' in user j} omega_i'^2))
    with omega from :func:`adaptive_task_weights` (``beta_bar`` default ``beta``; ``n_users``
    default the matrix's row count, treated as public).

    ``inflation`` = s uses (nhat_i + s) in place of nhat_i (Appendix B). ``mu = 0`` gives uniform
    weights over all of a user's items. Raises ``ValueError`` for mu outside [0, 1], beta <= 0,
    negative inflation, bad counts or an unknown mode.
    """
    m = check_user_items(user_items)
    mu = _check_mu(mu)
    beta = check_positive(beta, "beta")
    s = check_positive(inflation, "inflation", allow_zero=True)
    c = _check_counts(counts, m.shape[1]) + s
    rows = row_ids(m.indptr)
    if mode == "per_user":
        raw = (c ** (-mu))[m.indices]  # power per item, then gather
        spend = np.bincount(rows, weights=raw * raw, minlength=m.shape[0]).astype(np.float64)
        scale = np.zeros_like(spend)  # users without interactions: nothing to scale
        np.sqrt(np.divide(beta, spend, out=scale, where=spend > 0), out=scale)
    elif mode == "global":
        n = m.shape[0] if n_users is None else n_users
        omega = adaptive_task_weights(c, mu, beta, n, beta_bar=beta_bar)
        raw = omega[m.indices]
        spend = np.bincount(rows, weights=raw * raw, minlength=m.shape[0]).astype(np.float64)
        scale = np.ones_like(spend)
        np.minimum(1.0, np.sqrt(np.divide(beta, spend, out=np.full_like(spend, np.inf), where=spend > 0)), out=scale)
    else:
        raise ValueError(f"mode must be 'per_user' or 'global', got {mode!r}")
    raw *= scale[rows]
    w = raw
    data = enforce_budget(m.indptr, w.astype(dtype), beta)
    return _aligned(m, data)
