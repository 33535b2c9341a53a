"""Popularity buckets, sliced RMSE / Recall and neighbour overlap on hand-computed cases (spec 004 §7-§8)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from test_evaluation_metrics import csr

from privrec.evaluation import (
    cosine_neighbours,
    neighbour_overlap,
    popularity_buckets,
    ranking_metrics,
    rmse,
    sliced_neighbour_overlap,
    sliced_recall,
    sliced_rmse,
    top_items,
)


def test_buckets_sorted_by_count_ties_by_index_equal_sizes():
    counts = np.array([5, 1, 5, 0, 3, 1, 9])
    b = popularity_buckets(counts, n_buckets=3)
    # order: 3(0), 1(1), 5(1), 4(3), 0(5), 2(5), 6(9) -> sizes 3, 2, 2
    np.testing.assert_array_equal(b, [1, 0, 2, 0, 1, 0, 2])
    np.testing.assert_array_equal(np.bincount(b), [3, 2, 2])


def test_buckets_restricted_to_items_and_more_buckets_than_items():
    counts = np.array([4, 3, 2, 1])
    b = popularity_buckets(counts, n_buckets=2, items=[0, 1])
    np.testing.assert_array_equal(b, [1, 0, -1, -1])
    b = popularity_buckets(np.array([2, 1]), n_buckets=4)  # buckets 2 and 3 empty
    np.testing.assert_array_equal(b, [1, 0])
    np.testing.assert_array_equal(top_items(np.array([1, 7, 7, 2]), 0.5), [1, 2])


def test_sliced_rmse_equals_weighted_per_item_mse_and_nan_for_empty():
    pred = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    y = np.array([0.0, 2.0, 1.0, 4.0, 0.0])
    items = np.array([0, 0, 1, 2, 2])
    buckets = np.array([0, 0, 1, -1])  # items 0,1 -> bucket 0; item 2 -> bucket 1; bucket 2 empty
    out = sliced_rmse(pred, y, items, buckets, n_buckets=3)
    mse0, n0 = (1 + 0) / 2, 2  # item 0
    mse1, n1 = 4.0, 1  # item 1
    assert out[0] == pytest.approx(math.sqrt((mse0 * n0 + mse1 * n1) / (n0 + n1)))
    assert out[1] == pytest.approx(0.0)
    assert math.isnan(out[2])
    # union of buckets = plain RMSE
    assert rmse(pred, y) == pytest.approx(math.sqrt((out[0] ** 2 * 3 + out[1] ** 2 * 2) / 5))


def test_sliced_recall_restricts_candidates_and_targets_to_bucket():
    # items 0,1 in bucket 0 (tail), 2,3 in bucket 1 (head)
    buckets = np.array([0, 0, 1, 1])
    S = np.array([[0.0, 1.0, 9.0, 8.0], [5.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    V = np.eye(4, dtype=np.float32)
    targets = csr([[1, 3], [0], []], 4)
    history = csr([[], [], [0]], 4)
    # bucket 0, k=1: user0 ranks {0,1} -> 1 (hit); user1 -> 0 (hit); user2 no target -> dropped
    # bucket 1, k=1: user0 ranks {2,3} -> 2, target {3}: miss; user1 has no bucket-1 target -> dropped
    rec, nd = sliced_recall(S, V, targets, buckets, history=history, ks=[1, 1], with_ndcg=True)
    assert rec == pytest.approx([1.0, 0.0])
    assert nd == pytest.approx([1.0, 0.0])
    # per-bucket ks (tail gets the larger k)
    assert sliced_recall(S, V, targets, buckets, ks=[2, 2]) == pytest.approx([1.0, 1.0])


def test_sliced_recall_single_bucket_equals_overall_recall_and_empty_bucket_nan():
    rng = np.random.default_rng(0)
    U = rng.normal(size=(30, 3)).astype(np.float32)
    V = rng.normal(size=(12, 3)).astype(np.float32)
    targets = sp.random(30, 12, density=0.2, random_state=1, format="csr")
    history = sp.random(30, 12, density=0.2, random_state=2, format="csr")
    history = history - history.multiply(targets != 0)  # disjoint, like a fold-in split
    overall = ranking_metrics(U, V, targets, history, ks=(4,))["recall@4"]
    one = sliced_recall(U, V, targets, np.zeros(12, int), history=history, ks=4)
    assert one[0] == pytest.approx(overall)
    out = sliced_recall(U, V, targets, np.zeros(12, int), history=history, ks=4, n_buckets=2)
    assert math.isnan(out[1])


def test_neighbour_overlap_identity_scaling_and_disjoint():
    rng = np.random.default_rng(3)
    V = rng.normal(size=(40, 5)).astype(np.float32)
    ov = neighbour_overlap(V, V * 3.0, k=5)  # cosine is scale-invariant
    np.testing.assert_allclose(ov, 1.0)
    nb = cosine_neighbours(V, k=5)
    assert not np.any(nb == np.arange(40)[:, None])  # self excluded


def test_neighbour_overlap_hand_case():
    # 1-D embeddings: cosine is +1 for same sign, -1 otherwise
    A = np.array([[1.0], [1.0], [-1.0], [1.0]])
    B = np.array([[1.0], [-1.0], [1.0], [1.0]])
    # k=1: A: 0->1, 1->0, 2->0 (all -1, lowest index), 3->0 ; B: 0->2, 1->0 (all -1), 2->0, 3->0
    ov = neighbour_overlap(A, B, k=1)
    np.testing.assert_array_equal(ov, [0.0, 1.0, 1.0, 1.0])
    per = sliced_neighbour_overlap(A, B, np.array([0, 0, 1, 1]), k=1, n_buckets=3)
    assert per[:2] == pytest.approx([0.5, 1.0]) and math.isnan(per[2])


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        popularity_buckets([1, 2], n_buckets=0)
    with pytest.raises(ValueError, match="different item counts"):
        neighbour_overlap(np.ones((3, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="one entry per item"):
        sliced_recall(np.ones((1, 2)), np.ones((3, 2)), csr([[0]], 3), np.zeros(2, int))


def test_reference_cache_and_per_bucket_subsample_agree_with_full_computation():
    from privrec.evaluation import ReferenceNeighbours, sample_per_bucket

    rng = np.random.default_rng(5)
    A = rng.normal(size=(60, 4)).astype(np.float32)
    B = (A + rng.normal(scale=0.5, size=A.shape)).astype(np.float32)
    buckets = popularity_buckets(rng.integers(0, 50, size=60), n_buckets=3)
    ref = ReferenceNeighbours(B, k=5)
    full = neighbour_overlap(A, B, k=5)
    np.testing.assert_allclose(neighbour_overlap(A, ref, k=5), full)
    assert len(ref._cache) == 1  # computed once, reused below
    np.testing.assert_allclose(neighbour_overlap(A * 2, ref, k=5), full)
    assert len(ref._cache) == 1
    items = sample_per_bucket(buckets, 4)
    assert np.all(np.bincount(buckets[items]) == 4)
    sub = sliced_neighbour_overlap(A, ref, buckets, k=5, per_bucket=4)
    expect = [full[items[buckets[items] == b]].mean() for b in range(3)]
    assert sub == pytest.approx(expect)
    assert sliced_neighbour_overlap(A, B, buckets, k=5) == pytest.approx([full[buckets == b].mean() for b in range(3)])
