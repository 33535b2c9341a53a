"""privrec.serving: the ranking decomposition, the approximate item index (recall against exact
search), recommend_all to Parquet (equal to the model's recommend, bounded memory, ids) and
``privrec export``."""

from __future__ import annotations

import json
import sys
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from privrec.cli import main
from privrec.data import from_pandas, load_dataset
from privrec.models import ALS, DPALS, ImplicitALS, load_model
from privrec.serving import ItemIndex, recall_at_k, recommend_all
from privrec.serving._terms import ranking_terms
from privrec.serving.batch import default_batch_ratings, default_batch_size, user_batches

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic-skew", scale=0.2)


@pytest.fixture(scope="module")
def models(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "als": ALS(factors=8, iterations=4, random_state=0).fit(data, show_progress=False),
            "dpals": DPALS(epsilon=5.0, factors=6, random_state=0).fit(data, show_progress=False),
            "dpals_rating": DPALS(epsilon=5.0, factors=6, ranking="rating", random_state=0).fit(
                data, show_progress=False
            ),
            "implicit": ImplicitALS(factors=8, iterations=3, random_state=0).fit(data, show_progress=False),
        }


def _faiss_or_skip():
    return pytest.importorskip("faiss", reason="faiss (privrec[serving]) not installed")


def _same_topn(a_ids, a_sc, e_ids, e_sc, tol=1e-4):
    """Same scores row by row, and the same ids wherever the scores are not tied."""
    assert a_ids.shape == e_ids.shape
    np.testing.assert_allclose(a_sc, e_sc, rtol=tol, atol=tol)
    assert recall_at_k(a_ids, e_ids, a_sc, e_sc) == 1.0


# ---------------------------------------------------------------------------------------- terms
@pytest.mark.parametrize("name", ["als", "dpals", "dpals_rating", "implicit"])
def test_ranking_terms_reproduce_the_models_scores(models, name):
    model = models[name]
    terms = ranking_terms(model)
    rng = np.random.default_rng(1)
    u = rng.standard_normal((5, model.item_factors_.shape[1])).astype(np.float32)
    ub = rng.standard_normal(5).astype(np.float32)
    want = model._score_all(u, ub)
    got = terms.queries(u) @ terms.items().T + terms.user_offset(ub, 5)[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dpals_exposure_terms_are_the_documented_ones(models):
    """DPALS's exposure ranking: log(exposure) + (prediction - mean) / sigma_y (sigma_y = label_bound / 2,
    the rating noise of the bias model's prior), the exposure being
    the released counts max(nhat, 1) (or the model's ``item_exposure_`` when it holds one)."""
    m = models["dpals"]
    assert m._ranking_mode() == "exposure"
    t = ranking_terms(m)
    scale = float(m.config_["label_bound"]) / 2.0
    assert t.linear_scale == pytest.approx(1 / scale, rel=1e-5)
    assert t.bias_scale == pytest.approx(1 / scale, rel=1e-5)
    exposure = getattr(m, "item_exposure_", None)
    if exposure is None:
        exposure = np.maximum(m.item_counts_, 1.0)
    want = np.log(exposure) + m.item_bias_ / scale
    np.testing.assert_allclose(t.item_term, want, rtol=1e-4, atol=1e-4)


def test_a_score_that_is_not_an_inner_product_is_refused(models):
    class Squared(ALS):
        def _score_all(self, uvec, ubias):
            return super()._score_all(uvec, ubias) ** 2

    m = Squared(factors=8)
    m.__dict__.update({k: v for k, v in models["als"].__dict__.items() if k.endswith("_")})
    with pytest.raises(ValueError, match="not an inner product"):
        ranking_terms(m)


# ---------------------------------------------------------------------------------------- index
@pytest.mark.parametrize("name", ["als", "dpals", "implicit"])
def test_exact_index_matches_the_model(models, data, name):
    model = models[name]
    index = ItemIndex(model, "exact")
    users = np.arange(0, 200, 3)
    rows = data.matrix[users]
    _same_topn(*index.recommend(users, rows, N=10), *model.recommend(users, rows, N=10))
    filt = [1, 2, 3, 50]
    _same_topn(
        *index.recommend(users, rows, N=7, filter_items=filt),
        *model.recommend(users, rows, N=7, filter_items=filt),
    )
    _same_topn(
        *index.recommend(users, rows, N=5, filter_already_liked_items=False),
        *model.recommend(users, rows, N=5, filter_already_liked_items=False),
    )
    items = np.flatnonzero(np.any(model.item_factors_ != 0, axis=1))[:50]
    _same_topn(*index.similar_items(items, N=10), *model.similar_items(items, N=10))
    ids, scores = index.recommend(4, data.matrix[[4]], N=3)  # a scalar query: 1-D, as the model
    e_ids, e_scores = model.recommend(4, data.matrix[[4]], N=3)
    assert ids.ndim == 1 and ids.dtype == e_ids.dtype == np.int32
    np.testing.assert_allclose(scores, e_scores, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["als", "dpals"])
def test_faiss_index_recall_at_10_against_exact_search(models, data, name):
    _faiss_or_skip()
    model = models[name]
    index = ItemIndex(model, "faiss")
    users = np.arange(300)
    rows = data.matrix[users]
    approx = index.recommend(users, rows, N=10)
    exact = model.recommend(users, rows, N=10)
    assert recall_at_k(approx[0], exact[0]) >= 0.95
    # re-scored exactly: a returned item's score is the model's score for it
    uvec, ubias = model._user_vectors(users, rows, False)
    full = model._score_all(uvec, ubias)
    ok = approx[0] >= 0
    np.testing.assert_allclose(
        approx[1][ok], np.take_along_axis(full, np.maximum(approx[0], 0), axis=1)[ok], rtol=1e-4, atol=1e-4
    )
    items = np.flatnonzero(np.any(model.item_factors_ != 0, axis=1))[:300]
    a_sim, e_sim = index.similar_items(items, N=10), model.similar_items(items, N=10)
    assert recall_at_k(a_sim[0], e_sim[0], a_sim[1], e_sim[1]) >= 0.95


def test_approximate_recommend_never_returns_excluded_items(models, data):
    _faiss_or_skip()
    model = models["als"]
    heavy = np.argsort(-np.diff(data.matrix.indptr))[:20]  # the users with the most rated items
    rows = data.matrix[heavy]
    filt = np.arange(0, 2000, 7)
    for max_candidates in (8, 512):  # 8: every heavy user goes to the exact fallback
        index = ItemIndex(model, "faiss", similar_items=False, max_candidates=max_candidates)
        ids, _ = index.recommend(heavy, rows, N=10, filter_items=filt)
        assert ids.shape == (20, 10) and np.all(ids >= 0)
        for r, u in enumerate(heavy):
            assert not set(ids[r]) & set(data.matrix[u].indices)
            assert not set(ids[r]) & set(filt)
        assert recall_at_k(ids, model.recommend(heavy, rows, N=10, filter_items=filt)[0]) >= 0.95


def test_fewer_eligible_items_than_n(models, data):
    model = models["als"]
    index = ItemIndex(model, "exact")
    keep = np.arange(5)
    filt = np.setdiff1d(np.arange(model.n_items_), keep)
    ids, scores = index.recommend(np.arange(3), None, N=10, filter_items=filt, filter_already_liked_items=False)
    e_ids, e_scores = model.recommend(np.arange(3), None, N=10, filter_items=filt, filter_already_liked_items=False)
    assert ids.shape == e_ids.shape == (3, 5)
    assert set(ids.ravel()) <= set(keep)
    np.testing.assert_allclose(np.sort(scores, axis=1), np.sort(e_scores, axis=1), rtol=1e-4)


def test_item_without_factors_is_answered_like_the_model(models):
    model = models["als"]
    zero = np.flatnonzero(~np.any(model.item_factors_ != 0, axis=1))
    if zero.size == 0:
        pytest.skip("every item has factors")
    index = ItemIndex(model, "exact", recommend=False)
    ids, scores = index.similar_items(int(zero[0]), N=5)
    assert np.all(scores == 0)


def test_index_arguments_are_checked(models):
    m = models["als"]
    with pytest.raises(ValueError, match="backend"):
        ItemIndex(m, "annoy")
    with pytest.raises(ValueError, match="at least one"):
        ItemIndex(m, "exact", similar_items=False, recommend=False)
    with pytest.raises(ValueError, match="M must be"):
        ItemIndex(m, "exact", M=1)
    only_sim = ItemIndex(m, "exact", recommend=False)
    with pytest.raises(ValueError, match="recommend=False"):
        only_sim.recommend(0, None, filter_already_liked_items=False)
    with pytest.raises(ValueError, match="similar_items=False"):
        ItemIndex(m, "exact", similar_items=False).similar_items(0)
    with pytest.raises(ValueError, match="itemid"):
        only_sim.similar_items(10**6)


def test_bias_only_model_has_no_similarity_index(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = DPALS(epsilon=1.0, factors=0, random_state=0).fit(data, show_progress=False)
    with pytest.raises(ValueError, match="factors = 0"):
        ItemIndex(m, "exact")
    index = ItemIndex(m, "exact", similar_items=False)  # recommend: the popularity / bias ranking
    _same_topn(
        *index.recommend(np.arange(20), data.matrix[:20], N=5), *m.recommend(np.arange(20), data.matrix[:20], N=5)
    )


def test_missing_faiss_names_the_extra(models, monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss -> ImportError
    with pytest.raises(ImportError, match=r"privrec\[serving\]"):
        ItemIndex(models["als"], "faiss")
    ItemIndex(models["als"], "exact")  # the exact backend needs no extra


def test_recall_at_k_facts():
    assert recall_at_k([[1, 2, 3]], [[3, 2, 1]]) == 1.0
    assert recall_at_k([[1, 2, 9], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]]) == pytest.approx(5 / 6)
    assert recall_at_k([[1, -1]], [[1, -1]]) == 1.0  # padding ignored
    # tie-aware: item 9 ties with the exact 3rd item
    assert recall_at_k([[1, 2, 9]], [[1, 2, 3]], [[0.9, 0.8, 0.5]], [[0.9, 0.8, 0.5]]) == 1.0
    assert recall_at_k([[1, 2, 9]], [[1, 2, 3]], [[0.9, 0.8, 0.4]], [[0.9, 0.8, 0.5]]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="one row per query"):
        recall_at_k([[1]], [[1], [2]])
    with pytest.raises(ValueError, match="both"):
        recall_at_k([[1]], [[1]], [[0.1]])


# ---------------------------------------------------------------------------------------- recommend_all
def _read(path) -> pd.DataFrame:
    return pd.read_parquet(path)


def _expected_rows(model, matrix, N, **kw) -> pd.DataFrame:
    ids, scores = model.recommend(np.arange(matrix.shape[0]), matrix, N=N, **kw)
    ok = ids >= 0
    r, c = np.nonzero(ok)
    return pd.DataFrame({"user": r, "rank": c + 1, "item": ids[ok], "score": scores[ok]})


@pytest.mark.parametrize("name", ["als", "dpals"])
def test_recommend_all_writes_every_users_top_n(models, data, tmp_path, name):
    model = models[name]
    out = tmp_path / "top.parquet"
    summary = recommend_all(model, data.matrix, out, N=5, batch_size=37, row_group_size=300)
    got = _read(out)
    want = _expected_rows(model, data.matrix, 5)
    assert summary["rows"] == len(got) == len(want) and summary["users"] == data.n_users
    assert list(got.columns) == ["user", "rank", "item", "score"]
    assert str(got["rank"].dtype) == "int32" and str(got["score"].dtype) == "float32"
    np.testing.assert_array_equal(got["user"], want["user"])
    np.testing.assert_array_equal(got["item"], want["item"])
    np.testing.assert_array_equal(got["score"], want["score"])
    assert pq.ParquetFile(out).metadata.num_row_groups > 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".privrec-")]  # atomic write, no leftovers


def test_recommend_all_projects_a_loaded_private_model(models, data, tmp_path):
    m = models["dpals"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert loaded.user_factors_ is None
    recommend_all(loaded, data, tmp_path / "a.parquet", N=4, batch_size=100)
    got = _read(tmp_path / "a.parquet")
    want = _expected_rows(loaded, data.matrix, 4, recalculate_user=True)
    np.testing.assert_array_equal(got["item"], want["item"])
    np.testing.assert_allclose(got["score"], want["score"], rtol=1e-6)
    with pytest.raises(ValueError, match="recalculate_user=False"):
        recommend_all(loaded, data, tmp_path / "b.parquet", recalculate_user=False)


def test_recommend_all_uses_stored_factors_only_for_the_same_users(models, data, tmp_path):
    m = models["als"]
    # the training users: stored factors (as model.recommend with stored users)
    recommend_all(m, data, tmp_path / "a.parquet", N=3)
    stored = _expected_rows(m, data.matrix, 3)
    np.testing.assert_array_equal(_read(tmp_path / "a.parquet")["item"], stored["item"])
    # other users (a subset): projected from their rows, not matched to stored users by position
    sub = data.matrix[:50]
    recommend_all(m, sub, tmp_path / "b.parquet", N=3)
    projected = _expected_rows(m, sub, 3, recalculate_user=True)
    np.testing.assert_array_equal(_read(tmp_path / "b.parquet")["item"], projected["item"])
    with pytest.raises(ValueError, match="fitted users"):
        recommend_all(m, sub, tmp_path / "c.parquet", recalculate_user=False)


def test_recommend_all_with_the_approximate_index(models, data, tmp_path):
    _faiss_or_skip()
    m = models["dpals"]
    index = ItemIndex(m, "faiss", similar_items=False)
    s = recommend_all(m, data.matrix, tmp_path / "a.parquet", N=10, batch_size=64, index=index)
    assert s["approximate"]
    got = _read(tmp_path / "a.parquet")
    want = _expected_rows(m, data.matrix, 10)
    assert len(got) == len(want)
    a = got.pivot(index="user", columns="rank", values="item").to_numpy()
    e = want.pivot(index="user", columns="rank", values="item").to_numpy()
    assert recall_at_k(a, e) >= 0.95
    with pytest.raises(ValueError, match="another model"):
        recommend_all(models["als"], data.matrix, tmp_path / "b.parquet", index=index)


def test_recommend_all_maps_ids(tmp_path):
    """String user and item ids: the Parquet file holds the data's user ids and the model's item ids;
    data whose items come in another order (or include unknown items) is matched by id."""
    d = load_dataset("synthetic-skew", scale=0.05)
    df = d.to_pandas().rename(columns={"user_id": "user", "item_id": "item", "value": "rating"})
    df["user"] = "u" + df["user"].astype(str)
    df["item"] = "i" + df["item"].astype(str)
    catalogue = sorted(df["item"].unique())
    m = ALS(factors=4, iterations=2, random_state=0).fit(from_pandas(df, item_ids=catalogue), show_progress=False)
    recommend_all(m, from_pandas(df, item_ids=catalogue), tmp_path / "a.parquet", N=3)
    a = _read(tmp_path / "a.parquet")
    assert a["user"].str.startswith("u").all() and a["item"].isin(catalogue).all()
    # the items in reversed order, plus one item the model does not know
    extra = pd.concat([df, pd.DataFrame({"user": ["u0"], "item": ["unknown-item"], "rating": [3.0]})])
    other = from_pandas(extra, item_ids=[*catalogue[::-1], "unknown-item"])
    with pytest.warns(UserWarning, match="does not know"):
        recommend_all(m, other, tmp_path / "b.parquet", N=3)
    b = _read(tmp_path / "b.parquet")
    merged = a.merge(b, on=["user", "rank"])
    assert (merged["item_x"] == merged["item_y"]).mean() > 0.99
    disjoint = from_pandas(df.assign(item="x" + df["item"]))
    with pytest.raises(ValueError, match="none of the data's"):
        recommend_all(m, disjoint, tmp_path / "c.parquet")


def test_model_without_item_ids_warns_and_writes_indices(data, tmp_path):
    m = ALS(factors=4, iterations=2, random_state=0).fit(data.matrix, show_progress=False)  # no ids
    shifted = from_pandas(
        data.to_pandas()
        .rename(columns={"user_id": "user", "item_id": "item", "value": "rating"})
        .assign(item=lambda f: f["item"] + 1000),
        item_ids=np.arange(1000, 1000 + data.n_items),
    )
    with pytest.warns(UserWarning, match="holds no item ids"):
        recommend_all(m, shifted, tmp_path / "a.parquet", N=2)
    assert _read(tmp_path / "a.parquet")["item"].max() < data.n_items


def test_recommend_all_argument_checks(models, data, tmp_path):
    m = models["als"]
    with pytest.raises(ValueError, match="N must be"):
        recommend_all(m, data.matrix, tmp_path / "a.parquet", N=0)
    with pytest.raises(ValueError, match="batch_size"):
        recommend_all(m, data.matrix, tmp_path / "a.parquet", batch_size=0)
    with pytest.raises(ValueError, match="item columns"):
        recommend_all(m, data.matrix[:, :10], tmp_path / "a.parquet")
    assert not (tmp_path / "a.parquet").exists()


def test_empty_user_set_writes_an_empty_file(models, tmp_path):
    m = models["als"]
    s = recommend_all(m, sp.csr_matrix((0, m.n_items_), dtype=np.float32), tmp_path / "a.parquet")
    assert s["rows"] == 0 and len(_read(tmp_path / "a.parquet")) == 0


def test_user_batches_bound_users_and_ratings():
    indptr = np.array([0, 3, 4, 100, 101, 102, 103, 110])
    got = list(user_batches(indptr, batch_size=3, max_ratings=5))
    assert got[0][0] == 0 and got[-1][1] == 7
    assert all(b0 < b1 for b0, b1 in got) and all(a[1] == b[0] for a, b in zip(got, got[1:]))
    for b0, b1 in got:
        assert b1 - b0 <= 3
        assert indptr[b1] - indptr[b0] <= 5 or b1 - b0 == 1  # a heavy user alone
    # the evaluation memory budget (512 MiB of scores and top-N temporaries, 16 bytes per entry)
    assert default_batch_size(41_140) * 41_140 * 16 <= 512 << 20 and default_batch_size(1) == 8192
    assert default_batch_size(300_000, memory_budget=300_000 * 16 * 7) == 7
    assert default_batch_ratings(32) * 33**2 <= 1 << 25


def test_recommend_all_memory_is_bounded_by_the_batch(models, data, tmp_path):
    """Peak numpy allocation with small batches stays far below one users x items score matrix."""
    m = models["als"]
    full = data.n_users * data.n_items * 4  # one float32 score matrix over all users
    recommend_all(m, data.matrix, tmp_path / "warm.parquet", N=5, batch_size=20)  # imports, caches
    tracemalloc.start()
    try:
        recommend_all(m, data.matrix, tmp_path / "a.parquet", N=5, batch_size=20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < full / 4


# ---------------------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    d = load_dataset("synthetic-skew", scale=0.05)
    df = d.to_pandas().rename(columns={"user_id": "user", "item_id": "item", "value": "rating"})
    df["user"] = "u" + df["user"].astype(str)
    df.to_csv(tmp / "ratings.csv", index=False)
    rc = main(
        ["fit", "--ratings", str(tmp / "ratings.csv"), "--method", "als", "--factors", "4", "--quiet"]
        + ["--output", str(tmp / "m.npz")]
    )
    assert rc == 0
    return tmp


def test_cli_export(cli_files, capsys):
    out = cli_files / "top.parquet"
    capsys.readouterr()
    rc = main(
        ["export", "--model", str(cli_files / "m.npz"), "--ratings", str(cli_files / "ratings.csv")]
        + ["--output", str(out), "-n", "3", "--json"]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    got = _read(out)
    assert summary["rows"] == len(got) and summary["N"] == 3
    assert got["user"].str.startswith("u").all() and got.groupby("user").size().max() == 3
    ratings = pd.read_csv(cli_files / "ratings.csv")
    rated = set(zip(ratings["user"], ratings["item"]))
    assert not any((u, i) in rated for u, i in zip(got["user"], got["item"]))  # rated items left out
    rc = main(
        ["export", "--model", str(cli_files / "m.npz"), "--ratings", str(cli_files / "ratings.csv")]
        + ["--output", str(cli_files / "keep.parquet"), "--keep-rated"]
    )
    assert rc == 0 and "wrote" in capsys.readouterr().out


def test_cli_export_approximate(cli_files, capsys):
    _faiss_or_skip()
    rc = main(
        ["export", "--model", str(cli_files / "m.npz"), "--ratings", str(cli_files / "ratings.csv")]
        + ["--output", str(cli_files / "ann.parquet"), "--approximate"]
    )
    assert rc == 0 and "approximate" in capsys.readouterr().out


def test_cli_export_errors(cli_files, capsys, monkeypatch):
    base = ["export", "--model", str(cli_files / "m.npz"), "--ratings", str(cli_files / "ratings.csv")]
    assert main([*base, "--output", str(cli_files / "x.parquet"), "-n", "0"]) == 2
    assert "-n must be >= 1" in capsys.readouterr().err
    assert main([*base, "--output", str(cli_files / "x.parquet"), "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err
    assert main([*base, "--output", str(cli_files)]) == 2  # a folder: refused before loading anything
    assert "--output" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert main([*base, "--output", str(cli_files / "x.parquet"), "--approximate"]) == 2
    assert "privrec[serving]" in capsys.readouterr().err
    assert main(["export", "--model", str(cli_files / "m.npz"), "--output", "x.parquet"]) == 2  # 2000 vs n items
    assert not (cli_files / "x.parquet").exists()


# ---------------------------------------------------------------------------------------- benchmark
@pytest.mark.slow
def test_bench_serving_quick(tmp_path):
    """benchmarks/bench_serving.py --quick: recall@10 of the faiss index against exact search and
    the peak RSS of recommend_all in a child process, written to serving_quick.json / .md."""
    _faiss_or_skip()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_serving as S

    res = S.main(["--quick", "--quiet", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "serving_quick.json").read_text())
    for entry in saved["recall"]["models"].values():
        for kind in ("similar_items_ties", "recommend_ties"):
            assert entry[kind][str(S.DEFAULT_EF_SEARCH)] >= S.RECALL_TARGET
    mem = res["memory"]
    assert mem["max_rss_kb"] > 0 and mem["max_rss_gb"] < S.RSS_TARGET_GB
    assert mem["parquet_rows"] == mem["summary"]["rows"] == 10 * mem["n_users"]
    assert "recall" in (tmp_path / "serving_quick.md").read_text()
