"""Hand-computed checks of the ranking / rating metrics and the deterministic top-k (spec 004 §7)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.evaluation import (
    catalogue_coverage,
    ndcg_at_k,
    pair_predictions,
    ranking_metrics,
    recall_at_k,
    rmse,
    topk_indices,
)
from privrec.evaluation.metrics import map_at_k, precision_at_k


def csr(rows, n_items):
    """CSR users x items from a list of item lists."""
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if indptr[-1] else np.zeros(0, int)
    return sp.csr_matrix((np.ones(indptr[-1], np.float32), indices, indptr), shape=(len(rows), n_items))


def scores_as_factors(S):
    """Factors whose product reproduces the score matrix S exactly (U = S, V = I)."""
    S = np.asarray(S, dtype=np.float32)
    return S, np.eye(S.shape[1], dtype=np.float32)


def test_topk_orders_by_score_then_lower_index_on_ties():
    s = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    np.testing.assert_array_equal(topk_indices(s, 2), [[1, 2], [0, 1]])
    np.testing.assert_array_equal(topk_indices(s, 4), [[1, 2, 4, 3], [0, 1, 2, 3]])


def test_topk_marks_excluded_and_pads_when_short():
    s = np.array([[-np.inf, 5.0, -np.inf]], dtype=np.float32)
    np.testing.assert_array_equal(topk_indices(s, 2), [[1, -1]])
    np.testing.assert_array_equal(topk_indices(s, 5), [[1, -1, -1, -1, -1]])


def test_topk_matches_full_sort_on_random_data():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, size=(50, 30)).astype(np.float32)  # many ties
    ref = np.lexsort((np.broadcast_to(np.arange(30), s.shape), -s), axis=1)[:, :7]
    np.testing.assert_array_equal(topk_indices(s, 7), ref)


def test_topk_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        topk_indices(np.array([[np.nan, 1.0]]), 1)


def test_recall_divides_by_min_k_and_test_size_and_drops_users_without_targets():
    S = [
        [5, 4, 3, 2, 1, 0],  # top2 = {0,1}; targets {1,5}: 1 hit / min(2,2)
        [5, 4, 3, 2, 1, 0],  # history {0}: top2 = {1,2}; target {2}: 1 / min(2,1) = 1
        [0, 0, 0, 0, 0, 9],  # no targets: dropped
        [1, 2, 3, 4, 5, 6],  # top2 = {5,4}; targets {0,1,2}: 0 / 2
    ]
    U, V = scores_as_factors(S)
    targets = csr([[1, 5], [2], [], [0, 1, 2]], 6)
    history = csr([[], [0], [], []], 6)
    r = recall_at_k(U, V, targets, history, k=2)
    assert r == pytest.approx((0.5 + 1.0 + 0.0) / 3)


def test_ndcg_hand_computed():
    U, V = scores_as_factors([[5, 4, 3, 2]])
    targets = csr([[1, 3]], 4)
    # k=3: ranking 0,1,2 -> hit at rank 1; IDCG over min(3,2)=2 slots
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(U, V, targets, k=3) == pytest.approx(expected)


def test_history_never_counted_and_coverage():
    U, V = scores_as_factors([[9, 8, 1, 0], [9, 8, 1, 0]])
    targets = csr([[0, 2], [3]], 4)
    history = csr([[0], [0, 1]], 4)
    m = ranking_metrics(U, V, targets, history, ks=(1, 2))
    # user0 candidates 1,2,3 -> top1 {1}: 0/1, top2 {1,2}: 1/2; user1 candidates 2,3 -> top1 {2}: 0, top2 {2,3}: 1/1
    assert m["recall@1"] == pytest.approx(0.0)
    assert m["recall@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["coverage@1"] == pytest.approx(2 / 4)  # items {1, 2}
    assert m["coverage@2"] == pytest.approx(3 / 4)  # items {1, 2, 3}
    assert m["n_users"] == 2


def test_chunking_does_not_change_results():
    rng = np.random.default_rng(1)
    U = rng.normal(size=(37, 4)).astype(np.float32)
    V = rng.normal(size=(25, 4)).astype(np.float32)
    targets = sp.random(37, 25, density=0.15, random_state=2, format="csr")
    history = sp.random(37, 25, density=0.2, random_state=3, format="csr")
    a = ranking_metrics(U, V, targets, history, ks=(5, 10), chunk=4)
    b = ranking_metrics(U, V, targets, history, ks=(5, 10), chunk=1000)
    assert a == pytest.approx(b)


def test_perfect_model_has_recall_one():
    targets = csr([[0, 3], [1], [2, 4]], 5)
    U = targets.toarray().astype(np.float32)
    m = ranking_metrics(U, np.eye(5, dtype=np.float32), targets, ks=(2,))
    assert m["recall@2"] == 1.0 and m["ndcg@2"] == pytest.approx(1.0)


def test_no_targets_gives_nan_and_shape_errors():
    U, V = scores_as_factors([[1, 2]])
    assert math.isnan(recall_at_k(U, V, csr([[]], 2), k=1))
    with pytest.raises(ValueError, match="shape"):
        recall_at_k(U, V, csr([[0], [1]], 2), k=1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        recall_at_k(U, V, csr([[0]], 2), k=0)


def test_rmse_and_pair_predictions():
    assert rmse([1.0, 2.0], [1.0, 4.0]) == pytest.approx(math.sqrt(2.0))
    assert math.isnan(rmse([], []))
    with pytest.raises(ValueError, match="length"):
        rmse([1.0], [1.0, 2.0])
    U = np.array([[1.0, 0.0], [0.0, 2.0]])
    V = np.array([[3.0, 1.0], [1.0, 5.0]])
    np.testing.assert_allclose(pair_predictions(U, V, [0, 1, 1], [1, 0, 1], chunk=2), [1.0, 2.0, 10.0])


def test_catalogue_coverage():
    assert catalogue_coverage([[0, 1], [1, -1]], 4) == 0.5
    with pytest.raises(ValueError, match="out of range"):
        catalogue_coverage([5], 4)


def test_precision_and_map_hand_computed():
    S = [
        [6, 5, 4, 3, 2, 1],  # top3 = 0,1,2; targets {1, 2, 5}: hits at ranks 2, 3
        [6, 5, 4, 3, 2, 1],  # history {0}: top3 = 1,2,3; target {3}: hit at rank 3
        [1, 2, 3, 4, 5, 6],  # top3 = 5,4,3; targets {0, 1}: no hit
        [0, 0, 0, 0, 0, 9],  # no targets: dropped
    ]
    U, V = scores_as_factors(S)
    targets = csr([[1, 2, 5], [3], [0, 1], []], 6)
    history = csr([[], [0], [], []], 6)
    m = ranking_metrics(U, V, targets, history, ks=(1, 3))
    assert m["precision@3"] == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
    assert precision_at_k(U, V, targets, history, k=3) == pytest.approx(m["precision@3"])
    # AP: user 0 (1/2 + 2/3) / min(3, 3); user 1 (1/3) / min(3, 1); user 2: 0
    assert m["map@3"] == pytest.approx(((1 / 2 + 2 / 3) / 3 + 1 / 3 + 0) / 3)
    assert map_at_k(U, V, targets, history, k=3) == pytest.approx(m["map@3"])
    assert m["precision@1"] == 0.0 and m["map@1"] == 0.0  # no first slot is a hit
    perfect = csr([[0, 3], [1], [2, 4]], 5)
    best = ranking_metrics(perfect.toarray().astype(np.float32), np.eye(5, dtype=np.float32), perfect, ks=(2,))
    assert best["map@2"] == pytest.approx(1.0)
    assert best["precision@2"] == pytest.approx((1 + 0.5 + 1) / 3)  # one target only: at most 1/2
    assert math.isnan(precision_at_k(U, V, csr([[]] * 4, 6), k=2)) and math.isnan(map_at_k(U, V, csr([[]] * 4, 6), k=2))


class _FixedLists:
    """An ``implicit``-style model whose ``recommend`` returns fixed top-k lists (int32, as implicit's)."""

    def __init__(self, top):
        self.top = np.asarray(top, dtype=np.int32)

    def recommend(self, userid, user_items, N=10, **kwargs):
        rows = self.top[np.asarray(userid)][:, :N]
        return rows, np.zeros(rows.shape, dtype=np.float32)


@pytest.mark.parametrize("k", [1, 5, 10])
def test_precision_and_map_agree_with_implicit_on_the_same_lists(k):
    evaluation = pytest.importorskip("implicit.evaluation")
    rng = np.random.default_rng(k)
    n_users, n_items = 60, 40
    U = rng.normal(size=(n_users, 3)).astype(np.float32)
    V = rng.normal(size=(n_items, 3)).astype(np.float32)
    history = sp.random(n_users, n_items, density=0.15, random_state=1, format="csr", dtype=np.float32)
    history.data[:] = 1
    # targets: k or more held-out items per user (where Precision@k and implicit's "precision" coincide),
    # disjoint from the history; some users have none (both libraries skip them)
    rows = []
    for u in range(n_users):
        free = np.setdiff1d(np.arange(n_items), history[u].indices)
        size = 0 if u % 7 == 0 else int(rng.integers(k, k + 6))
        rows.append(rng.choice(free, size=size, replace=False))
    targets = csr(rows, n_items)
    scores = U @ V.T
    scores[history.nonzero()] = -np.inf
    model = _FixedLists(topk_indices(scores, k))
    theirs = evaluation.ranking_metrics_at_k(model, history, targets, K=k, show_progress=False)
    ours = ranking_metrics(U, V, targets, history, ks=(k,))
    assert ours["precision@" + str(k)] == pytest.approx(theirs["precision"], rel=1e-9)
    assert ours["map@" + str(k)] == pytest.approx(theirs["map"], rel=1e-9)
    assert ours["ndcg@" + str(k)] == pytest.approx(theirs["ndcg"], rel=1e-9)
    assert evaluation.precision_at_k(model, history, targets, K=k, show_progress=False) == pytest.approx(
        precision_at_k(U, V, targets, history, k=k), rel=1e-9
    )
    assert evaluation.mean_average_precision_at_k(model, history, targets, K=k, show_progress=False) == pytest.approx(
        map_at_k(U, V, targets, history, k=k), rel=1e-9
    )


def test_map_agrees_with_implicit_when_users_have_fewer_targets_than_k():
    # MAP normalises by min(k, |T|) in both libraries; implicit's "precision" then divides the hits by
    # sum_j min(k, |T_j|) instead of k per user, so only MAP (and NDCG) are compared here
    evaluation = pytest.importorskip("implicit.evaluation")
    U, V = scores_as_factors([[6, 5, 4, 3, 2, 1], [1, 2, 3, 4, 5, 6], [6, 1, 5, 2, 4, 3]])
    targets = csr([[1], [0, 4], [2, 3]], 6)
    history = csr([[], [5], []], 6)
    top = topk_indices(np.where(history.toarray() > 0, -np.inf, U @ V.T), 4)
    theirs = evaluation.ranking_metrics_at_k(_FixedLists(top), history, targets, K=4, show_progress=False)
    ours = ranking_metrics(U, V, targets, history, ks=(4,))
    assert ours["map@4"] == pytest.approx(theirs["map"]) and ours["ndcg@4"] == pytest.approx(theirs["ndcg"])
    hits = [1, 1, 1]  # user 0: item 1 at rank 2; user 1: item 4 at rank 1; user 2: item 2 at rank 2
    assert theirs["precision"] == pytest.approx(sum(hits) / (1 + 2 + 2))
    assert ours["precision@4"] == pytest.approx(sum(h / 4 for h in hits) / 3)
