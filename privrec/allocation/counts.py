"""Private pre-processing: noisy item counts, noisy global mean, head restriction.

Krichene et al. (ICML 2023), App. D.1, and the authors' reference implementation.

Every function returns a :class:`NoisyStatistic` carrying the value, the ``dp_accounting``
DpEvent(s) it costs, and the sensitivity / noise std used, so the caller records it in a
:class:`privrec.privacy.PrivacyLedger` (``stat.record(ledger)``).

Neighbouring relation: add or remove *all* data of one user. Each user contributes at most
``count_sample`` sampled interactions (uniform sampling without replacement inside the user's
row), which is what bounds the sensitivities below.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_fraction, check_int, check_positive
from ..privacy import make_rng
from ..privacy.clipping import clip_labels
from ..privacy.mechanisms import Release, gaussian_mechanism
from ._rows import check_user_items, sample_per_row, sampling_key

#: the private pre-processing statistics return the library's one release type
NoisyStatistic = Release


def _check_multiplier(noise_multiplier) -> float:
    return check_positive(noise_multiplier, "noise_multiplier", allow_zero=True)


def private_item_counts(
    user_items,
    count_sample: int,
    noise_multiplier: float,
    rng=None,
    label: str = "item counts",
    *,
    user_keys: np.ndarray | None = None,
) -> NoisyStatistic:
    """Noisy number of users per item (Krichene et al. 2023, App. D.1).

    Each user's row is subsampled to at most ``count_sample`` items uniformly at random; the
    per-item counts of the sample then change by at most ``sqrt(count_sample)`` in L2 when one
    user is removed. Gaussian noise with std ``noise_multiplier * sqrt(count_sample)`` is added
    (``count_stddev`` in the authors' reference implementation), and counts are floored at 1. The
    cost is one Gaussian event with multiplier ``noise_multiplier`` (= count_stddev / sqrt(count_sample)).

    ``noise_multiplier = 0`` returns exact sampled counts with a ``NonPrivateDpEvent``.
    ``rng``: ``None`` (OS entropy, private) or a seed / Generator (experiments only; a known seed
    voids the guarantee). ``user_keys``: one stable sampling key per row
    (:func:`~privrec.allocation.stable_user_keys` of the users' ids; default: the row index, see
    :func:`~privrec.allocation.keyed_uniform`). Returns ``value`` = float64 array of length ``n_items``.
    """
    k = check_int(count_sample, "count_sample", minimum=1)
    rng = make_rng(rng)
    exact = sampled_item_counts(user_items, k, sampling_key(rng), user_keys=user_keys)
    return release_item_counts(exact, k, noise_multiplier, rng, label)


def sampled_item_counts(
    user_items, count_sample: int, key: int, row_offset: int = 0, user_keys: np.ndarray | None = None
) -> np.ndarray:
    """Exact per-item counts of a per-user sample of at most ``count_sample`` items (the statistic
    :func:`private_item_counts` releases). A pure function of the rows, the sampling ``key`` and
    the users' sampling identities (``user_keys``, one per row, or else the rows' global index
    ``row_offset + row``), so it can be computed per block of users and summed."""
    m = check_user_items(user_items)
    keep = sample_per_row(m.indptr, m.indices, count_sample, key, row_offset, user_keys)
    return np.bincount(m.indices[keep], minlength=m.shape[1]).astype(np.float64)


def release_item_counts(
    exact_counts: np.ndarray, count_sample: int, noise_multiplier: float, rng, label: str = "item counts"
) -> Release:
    """The Gaussian release of sampled counts (sensitivity sqrt(count_sample)), floored at 1."""
    k = check_int(count_sample, "count_sample", minimum=1)
    z = _check_multiplier(noise_multiplier)
    exact = np.asarray(exact_counts, dtype=np.float64)
    release = gaussian_mechanism(exact, math.sqrt(k), z, rng, dtype=np.float64, label=label)
    for _, _, meta in release.events:
        meta["count_sample"] = k
    release.value = np.maximum(release.value, 1.0)
    release.info["n_sampled"] = int(exact.sum())
    return release


def private_global_mean(
    user_items,
    count_sample: int,
    noise_multiplier: float,
    rating_bound: float,
    rng=None,
    label: str = "global mean",
    *,
    user_keys: np.ndarray | None = None,
) -> NoisyStatistic:
    """Noisy mean rating for centering (Krichene et al. 2023, App. D.1), accounted as two Gaussian events.

    Ratings are clipped to ``[-rating_bound, rating_bound]`` (the bound is *enforced*, not
    assumed) and each user's row is subsampled to at most ``count_sample`` entries. Then

    * numerator  = sum of sampled clipped ratings + N(0, (z * count_sample * rating_bound)^2)
    * denominator = number of sampled ratings    + N(0, (z * count_sample)^2)

    Removing one user changes the (scalar) numerator by at most ``count_sample * rating_bound``
    and the denominator by at most ``count_sample``, so each release is a Gaussian mechanism with
    multiplier ``z``. Safe-value note: the std ``r_max * sqrt(count_sample) * count_stddev`` of the
    authors' reference implementation, with multiplier ``count_stddev``, would correspond to
    sensitivity ``sqrt(count_sample) * r_max``, which is the L2 bound of a *vector* of per-item sums,
    not of this scalar total; privrec uses the scalar's true sensitivity. The denominator is floored
    at 1. Returns ``value`` = float. ``rng``: ``None`` (OS entropy, private) or a seed / Generator
    (experiments only; a known seed voids the guarantee). ``user_keys`` as :func:`private_item_counts`.
    """
    k = check_int(count_sample, "count_sample", minimum=1)
    bound = check_positive(rating_bound, "rating_bound")
    rng = make_rng(rng)
    total, n = sampled_rating_sum(user_items, k, sampling_key(rng), bound, user_keys=user_keys)
    return release_global_mean(total, n, k, noise_multiplier, bound, rng, label)


def sampled_rating_sum(
    user_items,
    count_sample: int,
    key: int,
    rating_bound: float,
    row_offset: int = 0,
    user_keys: np.ndarray | None = None,
) -> tuple[float, float]:
    """``(sum of clipped sampled ratings, number sampled)`` of a per-user sample of at most
    ``count_sample`` entries: the exact statistics :func:`private_global_mean` releases (pure, per
    block of users as :func:`sampled_item_counts`)."""
    m = check_user_items(user_items)
    data = np.asarray(m.data, dtype=np.float64)
    if data.size and not np.all(np.isfinite(data)):
        raise ValueError("user_items contains NaN or infinite ratings")
    keep = sample_per_row(m.indptr, m.indices, count_sample, key, row_offset, user_keys)
    return float(clip_labels(data[keep], rating_bound).sum()), float(keep.sum())


def release_global_mean(
    total: float, n: float, count_sample: int, noise_multiplier: float, rating_bound: float, rng, label="global mean"
) -> Release:
    """The two Gaussian releases of :func:`private_global_mean` (sum, then count) and their ratio."""
    k = check_int(count_sample, "count_sample", minimum=1)
    z = _check_multiplier(noise_multiplier)
    bound = check_positive(rating_bound, "rating_bound")
    num = gaussian_mechanism(np.float64(total), k * bound, z, rng, dtype=np.float64, label=label + ": sum")
    den = gaussian_mechanism(np.float64(n), float(k), z, rng, dtype=np.float64, label=label + ": count")
    mean = float(np.clip(float(num.value) / max(float(den.value), 1.0), -bound, bound))
    events = num.events + den.events
    for _, _, meta in events:
        meta["count_sample"] = k
    return Release(mean, events, {"n_sampled": int(n)})


def head_items(counts, item_frac: float) -> np.ndarray:
    """Indices (sorted) of the top ``item_frac`` share of items by (noisy) count.

    Pure post-processing of released counts: no privacy cost. At least one item is kept.
    """
    f = check_fraction(item_frac, "item_frac")
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError("counts must be a non-empty 1-D array")
    n_keep = max(1, int(math.ceil(f * counts.size)))
    top = np.argpartition(-counts, n_keep - 1)[:n_keep]
    return np.sort(top)


def private_head_items(
    user_items, item_frac: float, count_sample: int, noise_multiplier: float, rng=None, label: str = "head item counts"
) -> NoisyStatistic:
    """Head restriction with its own count release (one more count event, as in the authors'
    reference implementation).

    Draws fresh noisy counts (:func:`private_item_counts`) and keeps the top ``item_frac`` items.
    ``value`` = sorted item indices; ``info['counts']`` holds the noisy counts (these *are*
    released, so they may be reused freely).
    """
    stat = private_item_counts(user_items, count_sample, noise_multiplier, rng, label=label)
    keep = head_items(stat.value, item_frac)
    return Release(keep, stat.events, {**stat.info, "counts": stat.value})
