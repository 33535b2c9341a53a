"""privrec.data.splits.temporal_split (issue 40): per user by timestamp, every held-out rating
strictly later than the user's training ratings, users with one rating kept in training."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privrec.data import Interactions, load_dataset
from privrec.data.splits import temporal_split


def _data(rng, n_users=60, n_items=40, max_per_user=25, time_span=30):
    """Random ratings with many timestamp ties (a small time span), some users with one rating."""
    users, items, times = [], [], []
    for u in range(n_users):
        n = 1 if u % 7 == 0 else int(rng.integers(0, max_per_user + 1))
        for i in rng.choice(n_items, size=n, replace=False):
            users.append(u)
            items.append(int(i))
            times.append(int(rng.integers(0, time_span)))
    values = rng.integers(1, 6, size=len(users)).astype(float)
    return Interactions.from_arrays(
        users, items, values, user_ids=np.arange(n_users), item_ids=np.arange(n_items), timestamps=times
    )


def _times(part: Interactions, u: int) -> np.ndarray:
    a, b = part.matrix.indptr[u], part.matrix.indptr[u + 1]
    return part.timestamps[a:b]


def _check(x: Interactions, fractions=(0.8, 0.1, 0.1)) -> None:
    try:
        s = temporal_split(x, fractions)
    except ValueError as exc:  # tiny data: a part left empty is named
        assert "part empty" in str(exc)
        return
    # a partition of the ratings, same shape and indexing
    for part in (s.train, s.validation, s.test):
        assert part.shape == x.shape
        assert part.timestamps is not None
    total = s.train.matrix + s.validation.matrix + s.test.matrix
    assert (total != x.matrix).nnz == 0
    assert s.train.nnz + s.validation.nnz + s.test.nnz == x.nnz
    counts = x.user_counts
    for u in range(x.n_users):
        tr, va, te = _times(s.train, u), _times(s.validation, u), _times(s.test, u)
        if counts[u] == 0:
            continue
        assert tr.size > 0, f"user {u} lost every training rating"
        if counts[u] == 1:
            assert tr.size == 1 and va.size == 0 and te.size == 0
        if te.size:
            assert te.min() > tr.max(), f"user {u}: a test rating is not later than a training rating"
            if va.size:
                assert te.min() > va.max()
        if va.size:
            assert va.min() > tr.max()
        # never more held out than asked
        assert te.size <= round(fractions[2] * counts[u])


def test_each_users_test_ratings_are_later_than_their_training_ratings():
    _check(_data(np.random.default_rng(0)))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), span=st.integers(1, 50), f_test=st.sampled_from([0.1, 0.2, 0.5]))
def test_temporal_split_properties_hold_on_random_data(seed, span, f_test):
    x = _data(np.random.default_rng(seed), n_users=20, n_items=15, max_per_user=12, time_span=span)
    _check(x, (1.0 - f_test, f_test / 2, f_test / 2))
    _check(x, (1.0 - f_test, 0.0, f_test))


def test_without_ties_the_latest_fraction_is_held_out():
    # one user, 10 ratings at times 0..9 (item i at time 9 - i): the 8 earliest train, then 1 + 1
    x = Interactions.from_arrays(
        [0] * 10, list(range(10)), [3.0] * 10, item_ids=np.arange(10), timestamps=[9 - i for i in range(10)]
    )
    s = temporal_split(x)
    assert sorted(s.test.matrix.indices.tolist()) == [0]  # the latest (time 9)
    assert sorted(s.validation.matrix.indices.tolist()) == [1]  # time 8
    assert s.train.nnz == 8


def test_ratings_tied_in_time_stay_together():
    # user 0: five ratings at one time (all stay in train); user 1: ten at distinct times
    users = [0] * 5 + [1] * 10
    items = list(range(5)) + list(range(10))
    times = [7] * 5 + list(range(10))
    x = Interactions.from_arrays(users, items, [4.0] * 15, timestamps=times)
    s = temporal_split(x)
    assert s.train.user_counts.tolist() == [5, 8]
    assert s.test.user_counts.tolist() == [0, 1] and s.validation.user_counts.tolist() == [0, 1]
    # all ratings at one time: nothing can be held out, and the error names the empty part
    tied = Interactions.from_arrays([0] * 5, list(range(5)), [4.0] * 5, timestamps=[7] * 5)
    with pytest.raises(ValueError, match="test part empty"):
        temporal_split(tied)


def test_temporal_split_is_deterministic():
    x = _data(np.random.default_rng(3))
    a, b = temporal_split(x), temporal_split(x)
    assert (a.test.matrix != b.test.matrix).nnz == 0
    assert a.test.info["split"] == "temporal:test"


def test_data_without_timestamps_is_a_clear_error():
    x = load_dataset("synthetic-skew", scale=0.05)
    with pytest.raises(ValueError, match="needs timestamps"):
        temporal_split(x)


@pytest.mark.parametrize("fractions", [(0.5, 0.5), (0.8, 0.3, 0.1), (0.0, 0.5, 0.5), (0.8, -0.1, 0.3)])
def test_bad_fractions_are_refused(fractions):
    with pytest.raises(ValueError, match="fractions"):
        temporal_split(_data(np.random.default_rng(1)), fractions)
