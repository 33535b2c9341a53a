"""Issue 43: the CLI evaluates the ranking a model serves, never below the free private popularity of
its own release, against a ranking yardstick a practitioner would run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.cli import main
from privrec.commands._yardsticks import (
    _exact_counts,
    _Popularity,
    model_ranking,
    ranking_metrics_of,
    ranking_yardstick_params,
    relevance_threshold,
)
from privrec.evaluation import experiment as X
from privrec.models import ALS, DPALS

SMALL = ["--dataset", "synthetic-skew", "--scale", "0.4", "--quiet"]


@pytest.fixture(scope="module")
def split():
    return X.make_split(X.load_data("synthetic-skew", scale=0.4, seed=0), "random", seed=0)


def _served_recall(model, split, threshold: float, k: int = 20) -> float:
    """Recall@k of what ``model.recommend`` serves (the user's train + validation items filtered)."""
    rel = split.test.copy()
    rel.data = (rel.data >= threshold).astype(np.float32)
    rel.eliminate_zeros()
    users = np.flatnonzero(np.diff(rel.indptr) > 0)
    ids, _ = model.recommend(users, split.projection[users], N=k, recalculate_user=True)
    hits = [np.isin(ids[j], rel[u].indices).sum() / min(k, rel[u].nnz) for j, u in enumerate(users)]
    return float(np.mean(hits))


def _run_json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("epsilon", [1.0, 20.0])
def test_the_cli_scores_what_recommend_serves_and_beats_its_own_popularity(split, epsilon):
    model = DPALS(epsilon=epsilon, random_state=1).fit(split.train, show_progress=False)
    assert model.config_["factors"] == 0 and model._ranking_mode() == "exposure"
    t = relevance_threshold(model, split.train)
    cli = ranking_metrics_of(model, split, t)["recall@20"]
    assert cli == pytest.approx(_served_recall(model, split, t), abs=2e-3)  # ties may order differently
    own = ranking_metrics_of(_Popularity(model.item_counts_, "own"), split, t)["recall@20"]
    assert cli >= 0.95 * own
    # what the table printed before: the bias model ranked by predicted rating, far below (0.2-0.4 on the demo)
    by_rating = ranking_metrics_of(_ByRating(model), split, t)["recall@20"]
    assert cli > 1.3 * by_rating


class _ByRating(_Popularity):
    """A ranker by ``model``'s predicted item term alone (the old CLI evaluation of the bias model)."""

    def __init__(self, model):
        super().__init__(model.item_bias_, "by rating")


def test_model_ranking_reproduces_recommend_order_with_factors(split):
    model = DPALS(epsilon=5.0, factors=4, iterations=2, random_state=0).fit(split.train, show_progress=False)
    als = ALS(factors=4, iterations=3, random_state=0).fit(split.train, show_progress=False)
    users = np.arange(30)
    for m in (model, als):
        V, bias = model_ranking(m)
        U, _ = m._project_users(split.train[users])
        scores = U @ V.T + (0.0 if bias is None else bias[None, :])
        served = m._score_all(U, None)
        # the same order as the served scores, up to a per-user constant
        np.testing.assert_allclose(scores - scores[:, :1], served - served[:, :1], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("epsilon", ["1", "20"])
def test_fit_evaluate_default_is_at_least_its_own_release_popularity(capsys, epsilon):
    res = _run_json(capsys, ["fit", "--evaluate", "--json", "--epsilon", epsilon, "--noise-seed", "3", *SMALL])
    ev = res["non_private"]
    own = ev["baselines"]["private_popularity"]["metrics"]["recall@20"]
    assert ev["metrics"]["recall@20"] >= 0.95 * own


def test_ranking_yardstick_is_implicit_als_on_relevant_ratings(capsys):
    res = _run_json(capsys, ["fit", "--evaluate", "--json", "--epsilon", "5", "--noise-seed", "1", *SMALL])
    base = res["non_private"]["baselines"]
    # explicit ALS stays the rating yardstick: RMSE, no ranking columns (its ranking is no yardstick)
    assert "rmse" in base["als"]["metrics"] and "recall@20" not in base["als"]["metrics"]
    assert base["als"]["name"] == "ALS (explicit ratings)"
    rank = base["als_ranking"]
    assert rank["config"]["feedback"] == "implicit" and not rank["private"]
    assert rank["name"].startswith("ALS implicit (Hu et al. 2008) on training ratings >= ")
    # at least the exact popularity ranking, on the demo
    assert rank["metrics"]["recall@20"] >= base["popularity"]["metrics"]["recall@20"]
    assert res["non_private"]["metrics"]["rmse"] < base["trivial"]["metrics"]["rmse"]


def test_ranking_yardstick_rank_follows_the_positives():
    def positives(n_users, n_items, nnz):
        rng = np.random.default_rng(0)
        cells = rng.choice(n_users * n_items, nnz, replace=False)
        return sp.csr_matrix((np.ones(nnz), (cells // n_items, cells % n_items)), shape=(n_users, n_items))

    assert ranking_yardstick_params(positives(500, 200, 1000))["factors"] == 8  # sparse: the floor
    assert ranking_yardstick_params(positives(100, 100, 3400))["factors"] == 17  # one parameter per positive
    assert ranking_yardstick_params(positives(100, 100, 9000))["factors"] == 45
    assert ranking_yardstick_params(sp.csr_matrix(np.ones((300, 300))))["factors"] == 64  # the cap


def test_ranking_yardstick_beats_popularity_on_structured_data(split):
    # the rule's rank on the demo's training positives, evaluated as the CLI does
    t = 3.875
    pos = split.train.copy()
    pos.data = (pos.data >= t).astype(np.float32)
    pos.eliminate_zeros()
    m = ALS(**ranking_yardstick_params(pos), random_state=0).fit(pos, show_progress=False)
    got = ranking_metrics_of(m, split, t, fold_in_relevant=True)["recall@20"]
    pop = ranking_metrics_of(_Popularity(_exact_counts(split.train), "p"), split, t)["recall@20"]
    assert got >= pop
