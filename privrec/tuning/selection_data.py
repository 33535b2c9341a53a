"""The users a private selection runs over (:mod:`privrec.tuning.selection`): each user's ratings
split into a training and a held-out part by a keyed hash of the user's own entries, each user's
clipped held-out loss against a candidate's release, and :class:`SelectionData`, the protocol a
backend implements (:class:`LocalSelectionData`: a CSR in this process). Importable from
:mod:`privrec.tuning.selection` too.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from ..allocation._rows import entry_user_keys
from ..evaluation.protocols import predict_pairs, project_users


def holdout_mask(R: sp.csr_matrix, fraction: float, key: int, user_keys: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask over ``R.data``: the held-out ratings, drawn by a keyed hash of (user, item) so
    each user's split depends on that user's own ratings only. ``user_keys``: one sampling key per
    row (:func:`privrec.allocation.stable_user_keys` of the users' ids), so the split does not move
    when other users are deleted or rows reordered; without them the row index is the user's key
    (a bare matrix). Users with fewer than two ratings keep every rating for training."""
    rows = np.repeat(np.arange(R.shape[0], dtype=np.int64), np.diff(R.indptr))
    users = entry_user_keys(rows, None if user_keys is None else np.asarray(user_keys, dtype=np.uint64))
    cols = R.indices.astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (users * np.uint64(0x9E3779B97F4A7C15)) ^ (cols * np.uint64(0xBF58476D1CE4E5B9)) ^ np.uint64(key)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(29)
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    mask = u < fraction
    small = np.repeat(np.diff(R.indptr) < 2, np.diff(R.indptr))
    mask &= ~small
    return mask


def split_holdout(
    R: sp.csr_matrix, fraction: float, key: int, user_keys: np.ndarray | None = None
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``(training part, held-out part)`` of ``R`` by :func:`holdout_mask` (same shape; genuine zero
    ratings kept)."""
    mask = holdout_mask(R, fraction, key, user_keys)
    shifted = sp.csr_matrix((R.data.astype(np.float64) + 1.0, R.indices.copy(), R.indptr.copy()), shape=R.shape)
    train, held = part_of(shifted, ~mask), part_of(shifted, mask)
    train.data -= 1.0
    held.data -= 1.0
    return train, held


def part_of(M: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """The entries of ``M`` where ``keep`` (aligned with ``M.data``); ``M`` must hold no zeros."""
    out = sp.csr_matrix((np.where(keep, M.data, 0.0), M.indices.copy(), M.indptr.copy()), shape=M.shape)
    out.eliminate_zeros()
    return out


def user_losses(
    model, train: sp.csr_matrix, held: sp.csr_matrix, clip: float, rating_cap: int | None = None
) -> np.ndarray:
    """Each user's mean clipped squared error on their held-out ratings (0 for users without any),
    from the billboard projection of their own training part; times ``min(n_held, rating_cap)``
    when a cap is given (per-rating weighting, bounded). Row j depends on user j's rows and the
    release only, so a backend holding users in blocks sums the blocks' totals."""
    U, ub = project_users(model, train, with_bias=True)
    coo = held.tocoo()
    pred = predict_pairs(model, U, coo.row, coo.col, ub)
    err = np.minimum((pred - coo.data) ** 2, clip)
    n = np.bincount(coo.row, minlength=held.shape[0])
    sums = np.bincount(coo.row, weights=err, minlength=held.shape[0])
    mean = np.where(n > 0, sums / np.maximum(n, 1), 0.0)
    return mean if rating_cap is None else mean * np.minimum(n, int(rating_cap))


class SelectionData(Protocol):
    """Where a selection's users live. :func:`run_selection` calls ``split`` once, then per
    candidate ``fit`` (on the training parts) and ``score`` (the sum over users of
    :func:`user_losses`), then ``refit`` (all ratings) or ``finish`` (the winner as fitted)."""

    def split(self, fraction: float, key: int) -> None: ...

    def fit(self, model, show_progress: bool) -> Any: ...

    def score(self, model, clip: float, rating_cap: int | None) -> float: ...

    def refit(self, model, show_progress: bool) -> Any: ...

    def finish(self, model) -> None: ...


class LocalSelectionData:
    """A users x items CSR in this process, with the users' sampling keys (``None``: row indices)
    and the public shape the candidates plan for (``None``: ``R``'s; the noisy user count where
    the roster is undeclared)."""

    def __init__(self, R: sp.csr_matrix, user_keys: np.ndarray | None = None, shape: tuple | None = None):
        self.R = R
        self.user_keys = user_keys
        self.shape = None if shape is None else (int(shape[0]), int(shape[1]))
        self.train: sp.csr_matrix | None = None
        self.held: sp.csr_matrix | None = None

    def split(self, fraction: float, key: int) -> None:
        self.train, self.held = split_holdout(self.R, fraction, key, self.user_keys)

    def _fit(self, model, R, show_progress: bool):
        run = getattr(model, "_fit_matrix", None)
        if run is not None:  # a DPALS: the same users' keys as the whole fit (no id wrapper on the parts)
            return run(R, user_keys=self.user_keys, show_progress=show_progress, shape=self.shape)
        return model.fit(R, show_progress=show_progress)

    def fit(self, model, show_progress: bool):
        return self._fit(model, self.train, show_progress)

    def score(self, model, clip: float, rating_cap: int | None) -> float:
        return float(user_losses(model, self.train, self.held, clip, rating_cap).sum())

    def refit(self, model, show_progress: bool):
        return self._fit(model, self.R, show_progress)

    def finish(self, model) -> None:
        if hasattr(model, "_project_users"):  # users' own projection of all their ratings (free)
            model.user_factors_, model.user_bias_ = model._project_users(self.R)
