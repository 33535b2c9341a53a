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
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import numpy as np

from .._validation import check_fraction, check_int, check_positive
from ..privacy import gaussian_event, make_rng
from ..privacy.clipping import clip_labels
from ._rows import check_user_items, sample_per_row


@dataclass(frozen=True)
class NoisyStatistic:
    """A privatised pre-processing statistic.

    ``value``: the released value; ``events``: list of ``(label, DpEvent, meta)`` to record;
    ``info``: non-released diagnostics (e.g. how many interactions were sampled) — *not* private,
    do not publish.
    """

    value: Any
    events: list
    info: dict = field(default_factory=dict)

    @property
    def event(self) -> dp_accounting.DpEvent:
        """The composed event of this statistic (a single event when there is one)."""
        evs = [e for _, e, _ in self.events]
        return evs[0] if len(evs) == 1 else dp_accounting.ComposedDpEvent(evs)

    def record(self, ledger, prefix: str = "") -> None:
        """Record every event in ``ledger`` with its label and meta."""
        for label, event, meta in self.events:
            ledger.record(prefix + label, event, **meta)


def _check_multiplier(noise_multiplier) -> float:
    return check_positive(noise_multiplier, "noise_multiplier", allow_zero=True)


def private_item_counts(
    user_items, count_sample: int, noise_multiplier: float, rng=None, label: str = "item counts"
) -> NoisyStatistic:
    """Noisy number of users per item (Krichene et al. 2023, App. D.1).

    Each user's row is subsampled to at most ``count_sample`` items uniformly at random; the
    per-item counts of the sample then change by at most ``sqrt(count_sample)`` in L2 when one
    user is removed. Gaussian noise with std ``noise_multiplier * sqrt(count_sample)`` is added
    (``count_stddev`` in the authors' reference implementation), and counts are floored at 1. The
    cost is one Gaussian event with multiplier ``noise_multiplier`` (= count_stddev / sqrt(count_sample)).

    ``noise_multiplier = 0`` returns exact sampled counts with a ``NonPrivateDpEvent``.
    ``rng``: ``None`` (OS entropy, private) or a seed / Generator (experiments only; a known seed
    voids the guarantee). Returns ``value`` = float64 array of length ``n_items``.
    """
    m = check_user_items(user_items)
    k = check_int(count_sample, "count_sample", minimum=1)
    z = _check_multiplier(noise_multiplier)
    rng = make_rng(rng)
    keep = sample_per_row(m.indptr, k, rng)
    exact = np.bincount(m.indices[keep], minlength=m.shape[1]).astype(np.float64)
    sens = math.sqrt(k)
    std = z * sens
    noisy = exact + rng.standard_normal(exact.size) * std if std > 0 else exact.copy()
    counts = np.maximum(noisy, 1.0)
    meta = {"sensitivity": sens, "noise_std": std, "count_sample": k, "mechanism": "gaussian"}
    return NoisyStatistic(counts, [(label, gaussian_event(z), meta)], {"n_sampled": int(keep.sum())})


def private_global_mean(
    user_items,
    count_sample: int,
    noise_multiplier: float,
    rating_bound: float,
    rng=None,
    label: str = "global mean",
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
    (experiments only; a known seed voids the guarantee).
    """
    m = check_user_items(user_items)
    k = check_int(count_sample, "count_sample", minimum=1)
    z = _check_multiplier(noise_multiplier)
    bound = check_positive(rating_bound, "rating_bound")
    rng = make_rng(rng)
    data = np.asarray(m.data, dtype=np.float64)
    if data.size and not np.all(np.isfinite(data)):
        raise ValueError("user_items contains NaN or infinite ratings")
    keep = sample_per_row(m.indptr, k, rng)
    total = float(clip_labels(data[keep], bound).sum())
    n = float(keep.sum())
    std_num = z * k * bound
    std_den = z * k
    noisy_total = total + (rng.standard_normal() * std_num if std_num > 0 else 0.0)
    noisy_n = n + (rng.standard_normal() * std_den if std_den > 0 else 0.0)
    mean = float(np.clip(noisy_total / max(noisy_n, 1.0), -bound, bound))
    ev = gaussian_event(z)
    events = [
        (label + ": sum", ev, {"sensitivity": k * bound, "noise_std": std_num, "count_sample": k}),
        (label + ": count", ev, {"sensitivity": float(k), "noise_std": std_den, "count_sample": k}),
    ]
    return NoisyStatistic(mean, events, {"n_sampled": int(n)})


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
    return NoisyStatistic(keep, stat.events, {**stat.info, "counts": stat.value})
