"""The axes of a plain ratings file, released under add/remove DP: a noisy user count and a
private item selection (DP partition selection).

A ratings file with no declared user roster or item catalogue determines both axes: how many
users there are, and which items anybody rated. Under the *add or remove one user* relation
neither is public. The releases here make them so:

* :func:`release_user_count` -- the number of users plus Gaussian noise (sensitivity 1: one user
  more or less). Every rule that would read the user count reads this noisy count instead.
* :func:`release_item_selection` -- the *weighted Gaussian* partition selection of Gopi et al.
  (ICML 2020, "Differentially private set union", Sec. 3; Desfontaines et al., PoPETs 2022, call
  it Gaussian thresholding): each user's rated items are sampled to at most ``max_items``
  (keyed per user, as every per-user sample in privrec) and the user adds ``1 / sqrt(t)`` to
  each of their ``t`` sampled items, so one user's vector has L2 norm at most 1; Gaussian noise
  of std ``noise_multiplier`` is added to the weighted count of every item somebody sampled, and
  an item is released when its noisy count exceeds the threshold of :func:`selection_threshold`.
  Items that only the added user has (at most ``t``, each with weighted count ``1 / sqrt(t)``)
  pass with total probability at most ``delta``, the delta term the ledger records beside the
  Gaussian event; on the items both neighbours have, the release is a Gaussian mechanism of
  sensitivity 1. The selected items become the item axis of the fit (their ids are released;
  the noisy counts are not used further).
* :func:`release_catalogue_size` -- for implicit feedback, whose automatic head restriction is a
  fraction of the catalogue: the number of items somebody sampled plus Gaussian noise of
  sensitivity ``max_items`` (one user more or less adds or removes at most their ``t <= max_items``
  sampled items). The head of a selected axis is that fraction of this noisy size.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

from .._validation import check_int
from ..privacy.mechanisms import Release, gaussian_mechanism
from ._rows import check_user_items, row_ids, sample_per_row

__all__ = [
    "CATALOGUE_SIZE_LABEL",
    "ITEM_SELECTION_LABEL",
    "USER_COUNT_LABEL",
    "release_catalogue_size",
    "release_item_selection",
    "release_user_count",
    "selection_threshold",
    "weighted_item_counts",
]

#: ledger labels of the releases
USER_COUNT_LABEL = "user count"
ITEM_SELECTION_LABEL = "item selection: weighted counts"
CATALOGUE_SIZE_LABEL = "catalogue size: sampled items"


def _noisy_count(n: int, sensitivity: int, noise_multiplier: float, rng, label: str) -> Release:
    """A count plus Gaussian noise of std ``noise_multiplier * sensitivity``, kept as a float (a
    rounded count could equal the exact one) and at least 1."""
    release = gaussian_mechanism(
        np.float64(n), float(sensitivity), float(noise_multiplier), rng, dtype=np.float64, label=label
    )
    release.value = max(float(release.value), 1.0)
    return release


def release_user_count(n_users: int, noise_multiplier: float, rng) -> Release:
    """The noisy number of users (Gaussian, sensitivity 1 under add/remove), kept as a float: a
    rounded count could equal the exact one. ``value`` is at least 1."""
    return _noisy_count(check_int(n_users, "n_users", minimum=0), 1, noise_multiplier, rng, USER_COUNT_LABEL)


def release_catalogue_size(n_candidates: int, max_items: int, noise_multiplier: float, rng) -> Release:
    """The noisy number of items somebody sampled (Gaussian, sensitivity ``max_items`` under
    add/remove: a user samples at most ``max_items`` items, so adding or removing one changes the
    number by at most that), kept as a float and at least 1."""
    n = check_int(n_candidates, "n_candidates", minimum=0)
    k = check_int(max_items, "max_items", minimum=1)
    return _noisy_count(n, k, noise_multiplier, rng, CATALOGUE_SIZE_LABEL)


def weighted_item_counts(user_items, max_items: int, key: int, user_keys=None, row_offset: int = 0) -> np.ndarray:
    """Per item, the sum over users of ``1 / sqrt(t_u)`` where the user sampled the item among
    their ``t_u <= max_items`` sampled items (a keyed per-user sample, as
    :func:`~privrec.allocation.sampled_item_counts`); 0 for an item nobody sampled. Pure per block
    of users (sum the blocks)."""
    m = check_user_items(user_items)
    k = check_int(max_items, "max_items", minimum=1)
    keep = sample_per_row(m.indptr, m.indices, k, key, row_offset, user_keys)
    rows = row_ids(m.indptr)[keep]
    per_user = np.bincount(rows, minlength=m.shape[0]).astype(np.float64)
    weights = 1.0 / np.sqrt(np.maximum(per_user[rows], 1.0))
    return np.bincount(m.indices[keep], weights=weights, minlength=m.shape[1])


def selection_threshold(noise_std: float, max_items: int, delta: float) -> float:
    """The smallest threshold at which the items only one user has -- ``t <= max_items`` of them,
    each with weighted count ``1 / sqrt(t)`` -- pass with total probability at most ``delta``:
    ``max_t 1 / sqrt(t) + noise_std * Phi^-1(1 - delta / t)`` (a union bound over the ``t``)."""
    k = check_int(max_items, "max_items", minimum=1)
    if not (0.0 < float(delta) < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    t = np.arange(1, k + 1, dtype=np.float64)
    return float(np.max(1.0 / np.sqrt(t) - float(noise_std) * ndtri(float(delta) / t)))


def release_item_selection(weighted: np.ndarray, noise_multiplier: float, max_items: int, delta: float, rng) -> Release:
    """The items (sorted indices) whose noisy weighted count passes :func:`selection_threshold`,
    among those somebody sampled (``weighted > 0``). Events: one Gaussian (sensitivity 1) over the
    candidates; ``info``: the threshold, the delta term and the kept items' noisy counts (the
    number of candidates is not released)."""
    w = np.asarray(weighted, dtype=np.float64)
    candidates = np.flatnonzero(w > 0)
    release = gaussian_mechanism(
        w[candidates], 1.0, float(noise_multiplier), rng, dtype=np.float64, label=ITEM_SELECTION_LABEL
    )
    threshold = selection_threshold(float(noise_multiplier), max_items, delta)
    for _, _, meta in release.events:
        meta.update(max_items=int(max_items), threshold=threshold, delta=float(delta))
    noisy = np.asarray(release.value)
    keep = noisy > threshold
    # the kept items' noisy counts are part of the release (a partition selection may publish them);
    # the others' are not, and neither is the number of candidates
    info = {"threshold": threshold, "delta": float(delta), "counts": noisy[keep]}
    return Release(candidates[keep], release.events, info)
