"""privrec.evaluation: metric values on hand-made cases and one-line errors for bad inputs."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.evaluation import metrics, neighbours, protocols, slicing, topk


def test_ranking_metrics_on_a_hand_made_case():
    # 2 users, 4 items; item scores are U @ V.T
    U = np.array([[1.0, 0.0], [0.0, 1.0]])
    V = np.array([[3.0, 0.0], [2.0, 0.0], [0.0, 3.0], [0.0, 2.0]])
    targets = sp.csr_matrix(np.array([[0, 1, 0, 0], [0, 0, 0, 1]], dtype=np.float32))
    history = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 0, 0, 0]], dtype=np.float32))
    out = metrics.ranking_metrics(U, V, targets, history, ks=(1, 2))
    # user 0: item 0 masked, top-1 = item 1 (hit); user 1: top-1 = item 2, top-2 adds item 3 (hit at rank 2)
    assert out["recall@1"] == pytest.approx(0.5) and out["recall@2"] == pytest.approx(1.0)
    assert out["ndcg@2"] == pytest.approx((1.0 + 1 / math.log2(3)) / 2)
    assert out["n_users"] == 2 and out["coverage@1"] == pytest.approx(0.5)
    # restricting to items 1 and 3: both users hit at rank 1
    sub = metrics.ranking_metrics(U, V, targets, history, ks=(1,), items=[3, 1], item_bias=np.zeros(4))
    assert sub["recall@1"] == pytest.approx(1.0)
    calls = []
    metrics.ranking_metrics(U, V, targets, ks=(1,), chunk=1, progress=calls.append)
    assert calls == [1, 1]
    assert metrics.recall_at_k(U, V, targets, history, k=2) == pytest.approx(1.0)
    assert metrics.ndcg_at_k(U, V, targets, history, k=1) == pytest.approx(0.5)
    none = metrics.ranking_metrics(U, V, sp.csr_matrix((2, 4)), ks=(1,))
    assert math.isnan(none["recall@1"]) and none["n_users"] == 0


def test_metric_input_errors():
    U, V = np.ones((2, 2)), np.ones((3, 2))
    with pytest.raises(ValueError, match="targets must be a scipy sparse matrix"):
        metrics.ranking_metrics(U, V, np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"targets has shape \(2, 2\), expected \(2, 3\)"):
        metrics.ranking_metrics(U, V, sp.csr_matrix((2, 2)))
    with pytest.raises(ValueError, match="factor shapes do not match"):
        metrics.ranking_metrics(U, np.ones((3, 4)), sp.csr_matrix((2, 3)))
    with pytest.raises(ValueError, match="differ in length"):
        metrics.rmse([1.0, 2.0], [1.0])
    assert math.isnan(metrics.rmse([], []))
    assert metrics.rmse([1.0, 3.0], [1.0, 1.0]) == pytest.approx(math.sqrt(2))
    assert metrics.catalogue_coverage([[0, -1], [2, 2]], 4) == pytest.approx(0.5)
    np.testing.assert_allclose(metrics.pair_predictions(np.eye(2), np.array([[1.0, 2.0]]), [0, 1], [0, 0]), [1.0, 2.0])


def test_topk_indices_padding_and_errors():
    s = np.array([[1.0, -np.inf, 3.0]])
    np.testing.assert_array_equal(topk.topk_indices(s, 5), [[2, 0, -1, -1, -1]])
    assert topk.topk_indices(np.zeros((0, 3)), 2).shape == (0, 2)
    with pytest.raises(ValueError, match="scores must be a 2-D array"):
        topk.topk_indices(np.ones(3), 1)
    with pytest.raises(ValueError, match="NaN"):
        topk.topk_indices(np.array([[np.nan, 1.0]]), 1)


def test_neighbours_and_overlap():
    V = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    nb = neighbours.cosine_neighbours(V, k=1)
    np.testing.assert_array_equal(nb[:, 0], [1, 0, 3, 2])
    np.testing.assert_allclose(neighbours.neighbour_overlap(V, V, k=1), 1.0)
    ref = neighbours.ReferenceNeighbours(V[::-1].copy(), k=1)
    assert ref.neighbours() is ref.neighbours()  # cached
    assert neighbours.neighbour_overlap(V, ref, k=1).shape == (4,)
    assert neighbours.neighbour_overlap(V[:1], V[:1], k=3).tolist() == [0.0]  # a single item has no neighbours
    with pytest.raises(ValueError, match="item_factors must be 2-D"):
        neighbours.cosine_neighbours(np.ones(3))
    with pytest.raises(ValueError, match="different item counts"):
        neighbours.neighbour_overlap(V, V[:2])
    with pytest.raises(ValueError, match="one entry per item"):
        neighbours.sliced_neighbour_overlap(V, V, buckets=[0, 1])
    sliced = neighbours.sliced_neighbour_overlap(V, V, buckets=[0, 0, 1, 1], k=1, n_buckets=3, per_bucket=1)
    assert sliced[:2] == [1.0, 1.0] and math.isnan(sliced[2])
    np.testing.assert_array_equal(neighbours.sample_per_bucket([0, 0, 0, 1], None), [0, 1, 2, 3])


def test_slicing_checks():
    b = slicing.popularity_buckets([5, 1, 3, 2], n_buckets=2)
    np.testing.assert_array_equal(b, [1, 0, 1, 0])
    np.testing.assert_array_equal(slicing.popularity_buckets([5, 1, 3, 2], 2, items=[0, 1]), [1, 0, -1, -1])
    with pytest.raises(ValueError, match="outside the catalogue"):
        slicing.popularity_buckets([1, 2], items=[5])
    np.testing.assert_array_equal(slicing.top_items([1, 5, 5, 0], 0.5), [1, 2])
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        slicing.top_items([1, 2], 0.0)
    with pytest.raises(ValueError, match="same length"):
        slicing.sliced_rmse([1.0], [1.0, 2.0], [0], [0])
    out = slicing.sliced_rmse([1.0, 2.0], [1.0, 0.0], [0, 1], [0, 1])
    assert out == [0.0, 2.0]


def test_protocol_helpers_reject_unfitted_or_wrong_inputs():
    class NoFactors:
        pass

    with pytest.raises(ValueError, match="NoFactors has no item_factors"):
        protocols.item_factors_of(NoFactors())
    with pytest.raises(ValueError, match="expected an Interactions object or a scipy sparse"):
        protocols.project_users(NoFactors(), np.ones((2, 2)))

    class Bad:
        item_factors_ = np.ones((3, 2))

        def transform(self, H):
            return np.ones((1, 2))

    with pytest.raises(ValueError, match="different number of rows"):
        protocols.project_users(Bad(), sp.csr_matrix(np.ones((2, 3))))
    with pytest.raises(ValueError, match="has no transform"):
        protocols.project_users(NoFactors(), sp.csr_matrix(np.ones((2, 3))))
