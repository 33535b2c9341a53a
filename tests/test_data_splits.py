"""Split invariants: disjointness, proportions, held-out users absent from train, fold-in partition."""

import numpy as np
import pytest

from privrec.data import Interactions
from privrec.data.splits import heldout_users_split, msd_heldout_users_split, random_split
from privrec.data.synthetic import low_rank_interactions


@pytest.fixture(scope="module")
def ratings():
    return low_rank_interactions(1500, 400, 30000, top10_share=0.6, random_state=2).interactions


def _pairs(x):
    df = x.to_pandas()
    return set(zip(df.user_id.tolist(), df.item_id.tolist()))


def test_random_split_partitions_exactly(ratings):
    s = random_split(ratings, random_state=4)
    parts = [s.train, s.validation, s.test]
    assert all(p.shape == ratings.shape for p in parts)
    assert [p.nnz for p in parts] == [24000, 3000, 3000]
    total = s.train.matrix + s.validation.matrix + s.test.matrix
    assert (total != ratings.matrix).nnz == 0  # disjoint and complete, values preserved
    assert s.train.matrix.multiply(s.test.matrix).nnz == 0
    again = random_split(ratings, random_state=4)
    assert (again.test.matrix != s.test.matrix).nnz == 0
    with pytest.raises(ValueError, match="fractions"):
        random_split(ratings, fractions=(0.8, 0.3, 0.1))


def test_random_split_keeps_timestamps():
    x = Interactions.from_arrays(np.arange(100) // 10, np.arange(100) % 10, np.ones(100), timestamps=np.arange(100))
    s = random_split(x, random_state=0)
    got = np.sort(np.concatenate([s.train.timestamps, s.validation.timestamps, s.test.timestamps]))
    np.testing.assert_array_equal(got, np.arange(100))


def test_heldout_users_split_invariants(ratings):
    n = 200
    s = heldout_users_split(ratings, n_heldout=n, binarize_threshold=3.5, random_state=1)
    binar = ratings.binarize(3.5)
    eligible = set(binar.user_ids[binar.user_counts >= 5].tolist())
    tr_users = set(s.train.user_ids.tolist())
    va_users = set(s.validation.history.user_ids.tolist())
    te_users = set(s.test.history.user_ids.tolist())
    # held-out users are absent from train and from each other; all come from the filtered set
    assert not (tr_users & va_users) and not (tr_users & te_users) and not (va_users & te_users)
    assert tr_users | va_users | te_users <= eligible
    assert len(tr_users) == len(eligible) - 2 * n
    assert len(va_users) <= n and len(te_users) <= n and len(va_users) > 0.9 * n
    # shared item indexing, restricted to items seen in training
    for fold in (s.validation, s.test):
        for part in (fold.history, fold.targets):
            np.testing.assert_array_equal(part.item_ids, s.train.item_ids)
            np.testing.assert_array_equal(part.user_ids, fold.history.user_ids)
    assert np.all(s.train.item_counts > 0)
    assert np.all(s.train.matrix.data == 1.0) and np.all(s.train.user_counts >= 5)
    # fold-in / target partition: disjoint, union = the user's training-item set, 20% rounded down
    for fold in (s.validation, s.test):
        h, t = fold.history, fold.targets
        assert h.matrix.multiply(t.matrix).nnz == 0
        n_all = h.user_counts + t.user_counts
        expected = np.where(n_all >= 5, np.floor(0.2 * n_all), 0)
        np.testing.assert_array_equal(t.user_counts, expected)
        full = binar.subset_users(binar.user_index(h.user_ids)).subset_items(binar.item_index(s.train.item_ids))
        assert ((h.matrix + t.matrix) != full.matrix).nnz == 0


def test_heldout_split_errors(ratings):
    with pytest.raises(ValueError, match="leaves no training user"):
        heldout_users_split(ratings, n_heldout=10_000)
    with pytest.raises(ValueError):
        heldout_users_split(ratings, n_heldout=0)
    with pytest.raises(ValueError, match="empty|no user"):
        heldout_users_split(ratings, n_heldout=1, binarize_threshold=10)


def test_msd_variant_filters_songs_then_users():
    x = low_rank_interactions(
        3000, 300, 90000, top10_share=0.5, min_per_user=5, values="counts", random_state=0
    ).interactions
    s = msd_heldout_users_split(x, n_heldout=100, min_user_items=20, min_item_users=200, random_state=0)
    kept_items = x.item_counts >= 200
    per_user = x.matrix[:, np.flatnonzero(kept_items)].getnnz(axis=1)
    eligible = set(x.user_ids[per_user >= 20].tolist())
    users = (
        set(s.train.user_ids.tolist())
        | set(s.validation.history.user_ids.tolist())
        | set(s.test.history.user_ids.tolist())
    )
    assert users <= eligible and len(s.train.user_ids) == len(eligible) - 200
    assert set(s.train.item_ids.tolist()) <= set(x.item_ids[kept_items].tolist())
    assert np.all(s.train.matrix.data == 1.0)


def test_default_heldout_size_and_named_parts(ratings):
    s = heldout_users_split(ratings, random_state=0)
    n_eligible = int(np.sum(ratings.binarize(3.5).user_counts >= 5))
    assert len(s.train.user_ids) == n_eligible - 2 * (n_eligible // 10)
    assert s.test_history is s.test.history and s.validation_targets is s.validation.targets
