"""privrec compare / privrec.evaluation.compare (issue 40): several models on one split, one table,
one plot; every exact figure marked non-private; the private rows' epsilon from the accountant."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.cli import main
from privrec.data import Interactions, load_dataset
from privrec.evaluation.compare import (
    MARK,
    compare,
    foreign_ranking_metrics,
    make_split,
)

SHARED = Path(os.environ.get("PRIVREC_SHARED_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
ML100K = SHARED / "ml-100k"


@pytest.fixture(scope="module")
def small():
    return load_dataset("synthetic-skew", scale=0.2)  # 1,000 users x 2,000 items


@pytest.fixture(scope="module")
def result(small):
    return compare(small, epsilons=(1, 5), dataset="synthetic-skew@0.2")


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_one_table_with_the_private_model_at_each_epsilon_and_the_yardsticks(result):
    names = [r.name for r in result.rows]
    private = [r for r in result.rows if r.private]
    assert [r.epsilon for r in private] == [1, 1, 5, 5]  # each fit, then its noisy-count popularity
    for r in private:
        assert len(r.epsilon_spent) == 1 and 0 < r.epsilon_spent[0] <= r.epsilon * (1 + 1e-6)
    assert "trivial: training global mean" in names
    assert "popularity (exact training counts)" in names
    assert "ALS (explicit ratings)" in names
    assert any(n.startswith("ALS implicit") for n in names)
    assert result.metrics == ("rmse", "recall@20", "ndcg@20")
    for r in result.rows:
        shown = [m for m in result.metrics if r.metrics.get(m)]
        assert shown, r.name
        assert all(math.isfinite(r.mean(m)) for m in shown), r.name
    # the RMSE applies to rating predictors only; popularity rankers have none
    assert not result.row("popularity (exact training counts)").metrics.get("rmse")
    assert result.row("ALS (explicit ratings)").metrics["rmse"]


def test_trivial_row_is_the_training_mean(small, result):
    split = make_split(small, "random", seed=0)
    mean = split.train.data.mean()
    expected = float(np.sqrt(np.mean((split.test.data - mean) ** 2)))
    assert result.row("trivial: training global mean").mean("rmse") == pytest.approx(expected, rel=1e-5)


def test_exact_figures_are_marked_non_private(result):
    text = result.format()
    assert text.count(MARK) >= 3
    metrics_line = next(line for line in text.splitlines() if "held-out data" in line)
    assert metrics_line.startswith(MARK)
    for r in result.rows:
        line = next(line for line in text.splitlines() if line.strip().startswith(r.name))
        assert ("non-private" in line) != r.private
    d = result.to_dict()
    assert "table" in d["non_private"] and "note" in d["non_private"]
    assert all("rmse" not in m and "recall@20" not in m for m in d["models"])  # metrics only under non_private
    json.dumps(d)


def test_repeats_give_mean_and_std(small):
    c = compare(small, epsilons=(5,), repeats=2, yardsticks=("popularity",), dataset="s")
    r = c.rows[0]
    assert r.private and len(r.metrics["rmse"]) == 2 and len(r.epsilon_spent) == 2
    assert r.std("rmse") == pytest.approx(float(np.std(r.metrics["rmse"])))
    assert "±" in c.format()
    assert "±" not in next(line for line in c.format().splitlines() if "exact training counts" in line)


def test_a_seeded_comparison_is_reproducible(small):
    kw = dict(epsilons=(5,), yardsticks=(), random_state=3, dataset="s")
    a, b = compare(small, **kw), compare(small, **kw)
    assert a.rows[0].metrics == b.rows[0].metrics


class _PopularityRecommender:
    """A foreign estimator with the implicit 0.7 contract and no privrec internals: recommends by
    training counts (ties: lower item index first, as privrec's top-k)."""

    def fit(self, user_items):
        self.counts = np.diff(sp.csc_matrix(user_items).indptr).astype(np.float64)
        return self

    def recommend(self, userid, user_items, N=10, filter_already_liked_items=True, **kw):
        rows = sp.csr_matrix(user_items)
        ids = np.empty((rows.shape[0], N), dtype=np.int64)
        scores = np.empty((rows.shape[0], N), dtype=np.float32)
        order = np.argsort(-self.counts, kind="stable")
        for r in range(rows.shape[0]):
            seen = set(rows.indices[rows.indptr[r] : rows.indptr[r + 1]].tolist()) if filter_already_liked_items else ()
            top = [i for i in order if i not in seen][:N]
            ids[r], scores[r] = top, self.counts[top]
        return ids, scores


def test_any_estimator_with_the_implicit_contract_is_compared_by_its_own_recommend(small, result):
    c = compare(small, epsilons=(), yardsticks=("popularity",), models={"foreign popularity": _PopularityRecommender()})
    mine, ours = c.row("foreign popularity"), c.row("popularity (exact training counts)")
    assert not mine.private and not mine.metrics.get("rmse")
    for m in ("recall@20", "ndcg@20"):
        assert mine.mean(m) == pytest.approx(ours.mean(m), abs=1e-9)


def test_foreign_metrics_match_the_library_metrics_on_heldout_users(small):
    split = make_split(small, "heldout-users", seed=0)
    m = foreign_ranking_metrics(_PopularityRecommender().fit(split.train), split, k=20)
    from privrec.commands._yardsticks import _exact_counts, _Popularity, ranking_metrics_of

    ref = ranking_metrics_of(_Popularity(_exact_counts(split.train), "pop"), split)
    assert m["recall@20"] == pytest.approx(ref["recall@20"], abs=1e-9)
    assert m["ndcg@20"] == pytest.approx(ref["ndcg@20"], abs=1e-9)


def test_privrec_estimators_and_factories_can_be_added(small):
    from privrec.models import ALS, DPALS

    c = compare(
        small,
        epsilons=(),
        yardsticks=(),
        models={"ALS 8": ALS(factors=8, iterations=3), "DPALS eps 2": lambda seed: DPALS(epsilon=2.0)},
    )
    assert c.row("ALS 8").metrics["rmse"] and not c.row("ALS 8").private
    dp = c.row("DPALS eps 2")
    assert dp.private and 0 < dp.epsilon_spent[0] <= 2.0 * (1 + 1e-6) and dp.metrics["rmse"]


def test_temporal_split_in_compare():
    rng = np.random.default_rng(0)
    users = np.repeat(np.arange(300), 30)
    items = np.concatenate([rng.choice(200, 30, replace=False) for _ in range(300)])
    x = Interactions.from_arrays(
        users, items, rng.integers(1, 6, users.size).astype(float), timestamps=rng.integers(0, 10**6, users.size)
    )
    c = compare(x, epsilons=(5,), split="temporal", yardsticks=("trivial", "popularity"))
    assert c.split == "temporal" and "temporal" in c.format()
    assert c.n_train == pytest.approx(0.8 * x.nnz, rel=0.02)


def test_implicit_feedback_uses_ranking_metrics_only(small):
    c = compare(small, epsilons=(5,), split="heldout-users", yardsticks=("popularity", "private-popularity"))
    assert c.metrics == ("recall@20", "ndcg@20")
    assert c.relevance_threshold is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilons=(0,)), "epsilon must be > 0"),
        (dict(repeats=0), "repeats"),
        (dict(split="weekly"), "unknown split"),
        (dict(yardsticks=("oracle",)), "unknown yardstick"),
        (dict(models={"x": 3}), "neither an estimator"),
        (dict(split="temporal"), "needs timestamps"),
    ],
)
def test_bad_input_is_one_clear_error(small, kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare(small, **kwargs)


def test_cli_compare_prints_the_table_and_json(tmp_path):
    rc, out, err = _cli("compare", "--scale", "0.2", "--epsilon", "5", "--no-als", "--quiet")
    assert rc == 0, err
    assert "target eps 5" in out and "popularity (exact training counts)" in out and "ALS" not in out
    assert out.count(MARK) >= 3
    rc, out, err = _cli("compare", "--scale", "0.2", "--epsilon", "5", "--no-als", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["models"][0]["epsilon"] == 5 and d["non_private"]["table"]


def test_cli_compare_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "compare.png"
    rc, out, err = _cli("compare", "--scale", "0.2", "--epsilon", "5", "--no-als", "--quiet", "--plot", str(path))
    assert rc == 0, err
    assert path.stat().st_size > 1000 and f"plot      {path}" in out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--epsilon", "-1"], "--epsilon must be > 0"),
        (["--epsilon", "1", "1"], "lists a value twice"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--split", "temporal"], "needs timestamps"),
        (["--plot", "x.unknownext"], "unknown image type"),
        (["--delta", "2"], "--delta must be in"),
    ],
)
def test_cli_bad_input_is_one_line_and_status_2(argv, match):
    if "--plot" in argv:
        pytest.importorskip("matplotlib")
    rc, out, err = _cli("compare", "--scale", "0.05", *argv)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("privrec compare: error: ") and match in err


@pytest.mark.slow
@pytest.mark.skipif(not ML100K.is_dir(), reason=f"{ML100K} not present (set PRIVREC_SHARED_DATASETS)")
@pytest.mark.parametrize("split", ["random", "temporal"])
def test_ml100k_compare_at_three_epsilons(split):
    rc, out, err = _cli(
        "compare", "--dataset", "ml-100k", "--data-dir", str(ML100K), "--epsilon", "1", "5", "20", "--split", split,
        "--quiet", "--json",
    )  # fmt: skip
    assert rc == 0, err
    d = json.loads(out)
    rows = {r["name"]: r for r in d["non_private"]["table"]}
    assert sum(m["private"] and m["epsilon"] in (1, 5, 20) for m in d["models"]) == 6
    trivial = rows["trivial: training global mean"]["rmse"]["mean"]
    als = rows["ALS (explicit ratings)"]["rmse"]["mean"]
    assert als < trivial
    for m in d["models"]:
        if m["private"] and m["name"].startswith("ada-dpals"):
            assert rows[m["name"]]["rmse"]["mean"] < trivial  # the private model beats the training mean
    assert d["non_private"]["n_users"] == 943


def test_every_compare_option_is_documented():
    """docs/cli.md's section on privrec compare names every option of its own (not the data options)."""
    from privrec.cli import build_parser

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    section = text[text.index("## `privrec compare`") :]
    section = section[: section.index("\n## ", 5)]
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["compare"]
    groups = {g.title: g for g in sub._action_groups}
    own = [o for g in ("comparison", "output") for a in groups[g]._group_actions for o in a.option_strings]
    missing = [o for o in own if o.startswith("--") and o not in section and o not in ("--json", "--quiet")]
    assert missing == [], f"document {missing} in docs/cli.md"
