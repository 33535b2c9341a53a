"""Train / validation / test splits used by the published benchmarks (Krichene et al., ICML 2023, App. D.1).

* :func:`random_split` — Lee et al. (2013), used for ML-10M rating prediction: a seeded random
  80/10/10 split of the ratings. The three parts keep the full user and item indexing.
* :func:`heldout_users_split` — Liang et al. (2018), used for ML-20M top-k: optionally binarise
  (keep ratings > 3.5 as 1), keep users with at least 5 items, hold out ``n_heldout`` validation
  and ``n_heldout`` test users; training uses the other users; held-out users' items are
  restricted to items seen in training, and each held-out user with at least 5 such items has 20%
  of them (rounded down) drawn as targets, the rest forming the fold-in history (users with fewer
  keep everything as history and have no target).
* :func:`msd_heldout_users_split` — the MSD variant: songs listened to by >= 200 users, then
  users with >= 20 songs (one pass each, in that order, as Liang et al.), 50,000 held-out users each.
* :func:`temporal_split` — per user, by timestamp: each user's earliest ratings train, their latest
  ones test (and the ones just before, validation), so that every user's held-out ratings are
  strictly later than their training ratings. Needs timestamps (the MovieLens loaders keep them).

Splits are seeded (data partitioning, not privacy noise). All parts returned by the held-out
split share the item indexing (``item_ids``) of ``train``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privrec._validation import check_int
from privrec.data.interactions import Interactions

MIN_ITEMS_FOR_TARGETS = 5  # Liang et al.: held-out users with fewer items get no target


@dataclass
class RandomSplit:
    train: Interactions
    validation: Interactions
    test: Interactions


@dataclass
class FoldIn:
    """Held-out users: ``history`` (fold-in input) and ``targets`` (to predict); same rows and items."""

    history: Interactions
    targets: Interactions

    @property
    def n_users(self) -> int:
        return self.history.n_users


def _fold_part(fold: str, part: str) -> property:
    """Read-only shortcut ``split.<fold>_<part>`` for ``split.<fold>.<part>``."""
    return property(lambda split: getattr(getattr(split, fold), part), doc=f"``{fold}.{part}``")


@dataclass
class HeldOutSplit:
    train: Interactions  # training users x training items
    validation: FoldIn  # validation users x training items
    test: FoldIn  # test users x training items

    validation_history = _fold_part("validation", "history")
    validation_targets = _fold_part("validation", "targets")
    test_history = _fold_part("test", "history")
    test_targets = _fold_part("test", "targets")


def random_split(x: Interactions, fractions=(0.8, 0.1, 0.1), random_state=0) -> RandomSplit:
    """Random split of the interactions (not of users) into train/validation/test (Lee et al. 2013).

    Sizes are exact: ``round(f_train * nnz)``, ``round(f_val * nnz)`` and the rest. Each part keeps
    the full shape and indexing of ``x``.
    """
    f = np.asarray(fractions, dtype=np.float64)
    if f.shape != (3,) or np.any(~np.isfinite(f)) or np.any(f < 0) or not np.isclose(f.sum(), 1.0) or f[0] <= 0:
        raise ValueError(
            f"fractions must be three non-negative numbers summing to 1 with a positive train share, got {fractions!r}"
        )
    rng = np.random.default_rng(random_state)
    n = x.nnz
    n_train = int(round(f[0] * n))
    n_val = int(round(f[1] * n))
    part = np.empty(n, dtype=np.int8)
    perm = rng.permutation(n)
    part[perm[:n_train]] = 0
    part[perm[n_train : n_train + n_val]] = 1
    part[perm[n_train + n_val :]] = 2
    parts = [x.filter_entries(part == k) for k in range(3)]
    for p, label in zip(parts, ("train", "validation", "test")):
        p.info.update(split=f"random:{label}", split_seed=random_state)
    return RandomSplit(*parts)


def temporal_split(x: Interactions, fractions=(0.8, 0.1, 0.1)) -> RandomSplit:
    """Per-user temporal split into train / validation / test by timestamp (leave-last-out).

    Each user's ratings are ordered by time; the latest ``round(f_test * n_u)`` go to test, the
    ``round(f_val * n_u)`` before them to validation, the rest to train. Every user keeps at least
    one training rating, so a user with a single rating stays in train, and a part never takes a
    rating whose timestamp equals that of a rating in an earlier part: ratings tied with the last
    one of the earlier part stay there. Hence every test rating of a user is strictly later than
    all of that user's validation and training ratings, and every validation rating strictly later
    than all training ratings. Within a tie, the order is by item index, so the split is
    deterministic (no seed). Each part keeps the full shape and indexing of ``x`` and its
    timestamps. A part left without any rating (tiny data, or every user's ratings tied in time)
    is a ``ValueError`` that names it.

    This is per-user time (each user's own past predicts their own future), not a global cut-off
    date: another user's later ratings can still be in train.
    """
    f = np.asarray(fractions, dtype=np.float64)
    if f.shape != (3,) or np.any(~np.isfinite(f)) or np.any(f < 0) or not np.isclose(f.sum(), 1.0) or f[0] <= 0:
        raise ValueError(
            f"fractions must be three non-negative numbers summing to 1 with a positive train share, got {fractions!r}"
        )
    if x.timestamps is None:
        name = f" {x.name}" if getattr(x, "name", None) else ""
        raise ValueError(
            f"a temporal split needs timestamps, and the interactions{name} have none (the MovieLens loaders "
            "keep them; generated data and files without a time column do not): use a random split"
        )
    counts = x.user_counts.astype(np.int64)
    rows = np.repeat(np.arange(x.n_users), counts)
    ts = np.asarray(x.timestamps, dtype=np.int64)
    # time order within each user, ties by item index (the CSR order of a row)
    order = np.lexsort((np.asarray(x.matrix.indices), ts, rows))
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    pos = np.empty(x.nnz, dtype=np.int64)  # position of each entry in its user's time order
    pos[order] = np.arange(x.nnz) - np.repeat(starts, counts)
    n_test = np.minimum(np.rint(f[2] * counts), np.maximum(counts - 1, 0)).astype(np.int64)
    n_val = np.minimum(np.rint(f[1] * counts), np.maximum(counts - 1 - n_test, 0)).astype(np.int64)
    # tentative parts by position: 0 train, 1 validation, 2 test
    first_val = counts - n_test - n_val
    first_test = counts - n_test
    part = np.where(pos[order] >= first_test[rows[order]], 2, np.where(pos[order] >= first_val[rows[order]], 1, 0))
    # ties: a rating whose timestamp equals the previous rating's (same user) joins that rating's part
    ts_sorted = ts[order]
    same = np.zeros(x.nnz, dtype=bool)
    same[1:] = (rows[order][1:] == rows[order][:-1]) & (ts_sorted[1:] == ts_sorted[:-1])
    part = part.astype(np.int8)
    if same.any():
        # runs of equal (user, timestamp): every member takes the part of the run's first member
        run_id = np.cumsum(~same) - 1
        first_of_run = np.flatnonzero(~same)
        part = part[first_of_run][run_id]
    out = np.empty(x.nnz, dtype=np.int8)
    out[order] = part
    sizes = np.bincount(out, minlength=3)
    for k, label in ((2, "test"), (1, "validation")):
        if sizes[k] == 0:  # an Interactions holds at least one rating
            raise ValueError(
                f"the temporal split leaves the {label} part empty (share {f[k]:g}): no user has enough ratings at "
                "distinct times for it (ratings tied in time with a user's earlier ones stay with them)"
            )
    parts = [x.filter_entries(out == k) for k in range(3)]
    for p, label in zip(parts, ("train", "validation", "test")):
        p.info.update(split=f"temporal:{label}", split_fractions=[float(v) for v in f])
    return RandomSplit(*parts)


def _min_count_filter(x: Interactions, min_user_items: int, min_item_users: int) -> Interactions:
    if min_item_users > 1:
        keep = x.item_counts >= min_item_users
        if not keep.any():
            raise ValueError(f"no item has >= {min_item_users} users")
        x = x.subset_items(np.flatnonzero(keep))
    keep = x.user_counts >= max(min_user_items, 1)
    if not keep.any():
        raise ValueError(f"no user has >= {min_user_items} items")
    x = x.subset_users(np.flatnonzero(keep))
    return x.subset_items(np.flatnonzero(x.item_counts > 0))


def _fold_in(x: Interactions, rng, target_fraction: float, min_items_for_targets: int) -> FoldIn:
    counts = x.user_counts
    rows = np.repeat(np.arange(x.n_users), counts)
    order = np.lexsort((rng.random(x.nnz), rows))  # random order within each user
    rank = np.empty(x.nnz, dtype=np.int64)
    rank[order] = np.arange(x.nnz) - np.repeat(np.r_[0, np.cumsum(counts)[:-1]], counts)
    n_target = np.where(counts >= min_items_for_targets, np.floor(target_fraction * counts), 0).astype(np.int64)
    is_target = rank < n_target[rows]
    return FoldIn(history=x.filter_entries(~is_target), targets=x.filter_entries(is_target))


DEFAULT_HELDOUT = 10_000  # ML-20M protocol (Liang et al. 2018)


def heldout_users_split(
    x: Interactions,
    n_heldout: int | None = None,
    binarize_threshold: float | None = 3.5,
    min_user_items: int = 5,
    min_item_users: int = 0,
    target_fraction: float = 0.2,
    random_state=0,
) -> HeldOutSplit:
    """Strong-generalisation split of Liang et al. (2018); see the module docstring.

    ``n_heldout`` users go to validation and ``n_heldout`` others to test (10,000 each for ML-20M
    in Liang et al. 2018; ``None`` means 10,000, capped at 10% of the users passing the filters, so that
    small data still split). Held-out users left without any training item are dropped.
    """
    if n_heldout is not None:
        n_heldout = check_int(n_heldout, "n_heldout", 1)
    min_user_items = check_int(min_user_items, "min_user_items", 1)
    min_item_users = check_int(min_item_users, "min_item_users", 0)
    if not 0.0 < float(target_fraction) < 1.0:
        raise ValueError(f"target_fraction must be in (0, 1), got {target_fraction!r}")
    if binarize_threshold is not None:
        x = x.binarize(binarize_threshold)
    x = _min_count_filter(x, min_user_items, min_item_users)
    if n_heldout is None:
        n_heldout = max(1, min(DEFAULT_HELDOUT, x.n_users // 10))
    if 2 * n_heldout >= x.n_users:
        raise ValueError(f"n_heldout={n_heldout} leaves no training user: only {x.n_users} users pass the filters")
    rng = np.random.default_rng(random_state)
    perm = rng.permutation(x.n_users)
    n_train = x.n_users - 2 * n_heldout
    train = x.subset_users(np.sort(perm[:n_train]))
    train_items = np.flatnonzero(train.item_counts > 0)
    train = train.subset_items(train_items)
    folds = []
    for sel in (perm[n_train : n_train + n_heldout], perm[n_train + n_heldout :]):
        held = x.subset_users(np.sort(sel)).subset_items(train_items)
        nonempty = np.flatnonzero(held.user_counts > 0)
        if len(nonempty) == 0:
            raise ValueError("held-out users have no training items left")
        held = held.subset_users(nonempty)
        folds.append(_fold_in(held, rng, target_fraction, MIN_ITEMS_FOR_TARGETS))
    info = dict(
        split="heldout-users",
        split_seed=random_state,
        n_heldout=n_heldout,
        binarize_threshold=binarize_threshold,
        min_user_items=min_user_items,
        min_item_users=min_item_users,
    )
    for part in (train, folds[0].history, folds[0].targets, folds[1].history, folds[1].targets):
        part.info.update(info)
    return HeldOutSplit(train, folds[0], folds[1])


def msd_heldout_users_split(
    x: Interactions, n_heldout: int = 50_000, min_user_items: int = 20, min_item_users: int = 200, random_state=0
) -> HeldOutSplit:
    """Liang et al. (2018) protocol for the Million Song Dataset (used by Krichene et al. 2023, App. D):
    any play count is an implicit positive (binarised at > 0), songs with >= 200 users, users with >= 20 songs,
    ``n_heldout`` (50,000) validation and test users."""
    return heldout_users_split(
        x,
        n_heldout,
        binarize_threshold=0.0,
        min_user_items=min_user_items,
        min_item_users=min_item_users,
        random_state=random_state,
    )
