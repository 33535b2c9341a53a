"""implicit's evaluation runs unchanged on privrec models (issue 27): ``ranking_metrics_at_k``,
``precision_at_k``, ``mean_average_precision_at_k`` and ``AUC_at_k`` read the ids returned by
``recommend`` into C ``int`` buffers, so privrec returns int32 ids, as implicit's CPU models do."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

evaluation = pytest.importorskip("implicit.evaluation")

from privrec.data.synthetic import low_rank_interactions  # noqa: E402
from privrec.models import ALS, DPALS, ImplicitALS  # noqa: E402

K = 10


@pytest.fixture(scope="module")
def split():
    data = low_rank_interactions(300, 120, 9000, top10_share=0.35, random_state=0)
    train, test = evaluation.train_test_split(data.interactions.matrix, 0.8, random_state=0)
    return train.tocsr(), test.tocsr()


def _binary(m):
    b = m.copy()
    b.data[:] = 1.0
    return b


# name -> (model, fit on binarised data, non-private)
MODELS = {
    "DPALS": (lambda: DPALS(epsilon=5.0, random_state=0), False, False),  # automatic: bias model, exposure ranking
    "DPALS-factors": (lambda: DPALS(epsilon=5.0, factors=4, iterations=2, random_state=0), False, False),
    "DPALS-implicit": (
        lambda: DPALS(epsilon=5.0, feedback="implicit", unobserved_weight=0.1, random_state=0),
        False,
        False,
    ),
    "DPALS-inf": (lambda: DPALS(epsilon=math.inf, factors=8, iterations=3, random_state=0), False, True),
    "ALS": (lambda: ALS(factors=8, iterations=5, random_state=0), False, None),  # a rating predictor
    "ALS-ranker": (
        lambda: ALS(factors=8, iterations=8, unobserved_weight=0.1, center=False, random_state=0),
        True,
        True,
    ),
    "ImplicitALS": (lambda: ImplicitALS(factors=8, iterations=5, num_threads=1, random_state=0), True, True),
}


@pytest.fixture(scope="module")
def fitted(split):
    train, _ = split
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # implicit's BLAS-threads advice
        for name, (make, binary, _) in MODELS.items():
            out[name] = make().fit(_binary(train) if binary else train, show_progress=False)
    return out


def _random_ranker(train, test):
    """Expected implicit metrics of a ranker drawing K unseen items uniformly: precision = sum of
    expected hits / sum min(K, |T_u|); AUC 1/2."""
    n_items = train.shape[1]
    n_test = np.diff(test.indptr)
    n_seen = np.diff(train.indptr)
    users = n_test > 0
    hits = K * n_test[users] / (n_items - n_seen[users])
    return hits.sum() / np.minimum(K, n_test[users]).sum()


@pytest.mark.parametrize("name", list(MODELS))
def test_implicit_evaluation_runs_unchanged(name, fitted, split):
    train, test = split
    model = fitted[name]
    metrics = evaluation.ranking_metrics_at_k(model, train, test, K=K, show_progress=False)
    assert set(metrics) == {"precision", "map", "ndcg", "auc"}
    assert all(0.0 <= v <= 1.0 for v in metrics.values()), metrics
    assert evaluation.precision_at_k(model, train, test, K=K, show_progress=False) == pytest.approx(
        metrics["precision"]
    )
    assert evaluation.mean_average_precision_at_k(model, train, test, K=K, show_progress=False) == pytest.approx(
        metrics["map"]
    )
    assert evaluation.AUC_at_k(model, train, test, K=K, show_progress=False) == pytest.approx(metrics["auc"])
    non_private = MODELS[name][2]
    if non_private:  # rankers fitted without noise: well above a random ranker
        assert metrics["precision"] > 2 * _random_ranker(train, test), metrics
        assert metrics["auc"] > 0.6, metrics
    if name == "DPALS":  # the private default (exposure ranking) is a ranker too, at epsilon = 5
        assert metrics["precision"] > 1.5 * _random_ranker(train, test), metrics


@pytest.mark.parametrize("name", ["DPALS-factors", "DPALS-inf", "ALS", "ImplicitALS"])
def test_returned_ids_are_int32_like_implicit(name, fitted, split):
    train, _ = split
    model = fitted[name]
    users = np.arange(4)
    checks = {
        "recommend batch": model.recommend(users, train[users], N=5)[0],
        "recommend one": model.recommend(0, train[0], N=5)[0],
        "recommend items": model.recommend(users, train[users], N=3, items=np.array([5, 1, 9, 7]))[0],
        "recommend unfiltered": model.recommend(users, None, N=5, filter_already_liked_items=False)[0],
        "rank_items": model.rank_items(0, train[0], [3, 8, 2])[0],
        "similar_items": model.similar_items(np.arange(3), N=4)[0],
        "similar_items one": model.similar_items(2, N=4, items=[0, 2, 5, 6])[0],
        "similar_users": model.similar_users(np.arange(3), N=4)[0],
        "similar_users one": model.similar_users(1, N=4, users=[0, 1, 7])[0],
    }
    for what, ids in checks.items():
        assert ids.dtype == np.int32, what
        assert ids.size and ids.min() >= (-1 if what == "recommend items" else 0), what  # -1: padding
    assert sorted(checks["rank_items"].tolist()) == [2, 3, 8]
    assert set(checks["recommend items"].ravel().tolist()) <= {-1, 1, 5, 7, 9}
    # padding of users with fewer eligible items than N stays -1 (int32)
    short, scores = model.recommend([0, 1], train[[0, 1]], N=5, items=[train[0].indices[0], 119])
    assert short.dtype == np.int32 and np.all((short >= 0) | (short == -1))
    assert np.all(np.isfinite(scores) == (short >= 0))
