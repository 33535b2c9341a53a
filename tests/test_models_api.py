"""Shared estimator API: recommend / similar_items / predict, sklearn params, save / load, bad input."""

import json
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from privrec.data import Interactions
from privrec.models import ALS, DPALS, ImplicitALS, load_model


def _ratings(n_users=50, n_items=30, density=0.25, seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < density
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
    vals = rng.integers(1, 6, size=mask.shape).astype(np.float32)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


@pytest.fixture(scope="module")
def R():
    return _ratings()


@pytest.fixture(scope="module")
def als(R):
    return ALS(factors=4, iterations=4, random_state=0).fit(R)


@pytest.fixture(scope="module")
def dpals(R):
    return DPALS(method="ada-dpals", epsilon=4.0, factors=4, iterations=2, budget=5, random_state=0).fit(R)


@pytest.mark.parametrize("recalc", [False, True])
def test_recommend_never_returns_liked_items(als, R, recalc):
    users = np.arange(R.shape[0])
    ids, scores = als.recommend(users, R, N=R.shape[1], recalculate_user=recalc)
    for u in users:
        liked = set(R[u].indices.tolist())
        got = ids[u][ids[u] >= 0]
        assert not (set(got.tolist()) & liked)
        assert len(got) == R.shape[1] - len(liked)  # every other item is returned
        assert np.all(np.diff(scores[u][np.isfinite(scores[u])]) <= 0)  # sorted by score


def test_recommend_batched_matches_single_and_scores_are_predictions(als, R):
    ids, scores = als.recommend(np.arange(5), R[:5], N=3)
    for u in range(5):
        i1, s1 = als.recommend(u, R[u], N=3)
        np.testing.assert_array_equal(i1, ids[u])
        np.testing.assert_allclose(s1, scores[u], rtol=1e-6)
        np.testing.assert_allclose(als.predict(np.full(3, u), i1), s1, rtol=1e-5)


def test_recommend_filter_items_and_candidates(als, R):
    ids, _ = als.recommend(0, R[0], N=30, filter_already_liked_items=False, filter_items=[1, 2, 3])
    assert not ({1, 2, 3} & set(ids.tolist())) and len(ids) == 27
    cand = np.array([5, 6, 7, 8])
    ids, _ = als.recommend(0, R[0], N=10, filter_already_liked_items=False, items=cand)
    assert set(ids.tolist()) <= set(cand.tolist()) and len(ids) == 4


def test_similar_items_cosine(als):
    ids, scores = als.similar_items(3, N=5)
    assert ids[0] == 3 and scores[0] == pytest.approx(1.0, abs=1e-5)
    V = als.item_factors_ / np.linalg.norm(als.item_factors_, axis=1, keepdims=True)
    np.testing.assert_allclose(scores, V[ids] @ V[3], rtol=1e-5)
    ids2, _ = als.similar_items([3, 4], N=5)
    assert ids2.shape == (2, 5)


def test_dpals_uses_billboard_projection(dpals, R):
    np.testing.assert_allclose(dpals.transform(R), dpals.user_factors_, rtol=1e-6)
    a, _ = dpals.recommend(np.arange(4), R[:4], N=5)
    b, _ = dpals.recommend(np.arange(4), R[:4], N=5, recalculate_user=True)
    np.testing.assert_array_equal(a, b)


def test_accepts_interactions(R):
    users, items = R.nonzero()
    inter = Interactions.from_arrays(users, items, np.asarray(R[users, items]).ravel())
    m = ALS(factors=3, iterations=2, random_state=0).fit(inter)
    assert m.item_factors_.shape[0] == inter.n_items


def test_get_set_params_and_clone():
    m = DPALS(method="dpals-tail", epsilon=2.0, factors=7)
    c = clone(m)
    assert c.get_params() == m.get_params() and c is not m
    c.set_params(epsilon=3.0, mu=0.5)
    assert c.epsilon == 3.0 and c.mu == 0.5 and m.epsilon == 2.0
    assert not hasattr(c, "item_factors_")
    assert clone(ALS(regularization=3.0)).regularization == 3.0


def test_save_load_round_trip_als(als, R, tmp_path):
    p = tmp_path / "als.npz"
    als.save(p)
    m = load_model(p)
    assert isinstance(m, ALS) and m.get_params() == als.get_params()
    np.testing.assert_array_equal(m.predict([0, 1], [2, 3]), als.predict([0, 1], [2, 3]))
    np.testing.assert_allclose(m.transform(R), als.transform(R), rtol=1e-6)
    assert ALS.load(p).factors == 4


def test_save_load_round_trip_dpals_releases_only_items(dpals, R, tmp_path):
    p = tmp_path / "dp.npz"
    dpals.save(p)
    with np.load(p) as npz:
        assert "user_factors_" not in npz.files
    with np.load(p) as npz:
        meta = json.loads(str(npz["__meta__"]))
    assert dpals.random_state == 0 and meta["params"]["random_state"] is None  # the noise seed is not released
    m = DPALS.load(p)
    assert m.random_state is None
    np.testing.assert_array_equal(m.item_factors_, dpals.item_factors_)
    assert m.privacy_report()["epsilon"] == dpals.privacy_report()["epsilon"]
    # a loaded private model has no user factors: the given rows are projected automatically (free)
    np.testing.assert_array_equal(m.recommend(0, R[0])[0], dpals.recommend(0, R[0], recalculate_user=True)[0])
    with pytest.raises(ValueError, match="user_items"):
        m.recommend(0, None, filter_already_liked_items=False)
    a, _ = m.recommend(np.arange(3), R[:3], N=4, recalculate_user=True)
    b, _ = dpals.recommend(np.arange(3), R[:3], N=4, recalculate_user=True)
    np.testing.assert_array_equal(a, b)
    c, _ = m.recommend(np.arange(3), R, N=4)  # the full matrix: rows userid are taken
    np.testing.assert_array_equal(a, c)


def test_save_load_round_trip_implicit_wrapper(R, tmp_path):
    m = ImplicitALS(factors=6, iterations=2, num_threads=1, random_state=0).fit(R)
    m.save(tmp_path / "imp.npz")
    m2 = load_model(tmp_path / "imp.npz")
    assert isinstance(m2, ImplicitALS) and m2.get_params() == m.get_params()
    a = m.recommend(np.arange(4), R[:4], N=3, recalculate_user=True)
    b = m2.recommend(np.arange(4), R[:4], N=3, recalculate_user=True)
    np.testing.assert_array_equal(a[0], b[0])


def test_corrupt_truncated_and_mismatched_files_rejected(als, dpals, tmp_path):
    good = tmp_path / "m.npz"
    als.save(good)
    data = good.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="trunc.npz"):
        load_model(tmp_path / "trunc.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="junk.npz"):
        load_model(tmp_path / "junk.npz")
    # metadata that disagrees with the arrays
    with np.load(good) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    meta["arrays"]["item_factors_"] = [99, 4]
    bad = tmp_path / "mismatch.npz"
    np.savez(bad, __meta__=np.array(json.dumps(meta)), **arrays)
    with pytest.raises(ValueError, match="shape"):
        load_model(bad)
    # a DPALS file is not an ALS
    dp = tmp_path / "dp.npz"
    dpals.save(dp)
    with pytest.raises(ValueError, match="not a ALS"):
        ALS.load(dp)
    assert zipfile.is_zipfile(good)


@pytest.mark.parametrize("model", [ALS(factors=2, iterations=1), DPALS(epsilon=2.0, factors=2, iterations=1, budget=3)])
def test_bad_fit_input(model):
    R = _ratings(10, 8)
    with pytest.raises(ValueError, match="2-D"):
        model.fit(R.toarray()[0])
    with pytest.raises(ValueError, match="CSR"):
        model.fit(None)
    with pytest.raises(ValueError, match="duplicate"):  # COO duplicates are rejected, not summed
        model.fit(sp.coo_matrix((np.ones(2), ([0, 0], [1, 1])), shape=(2, 3)))
    with pytest.raises(ValueError, match="infinite"):
        model.fit(np.full((3, 3), np.inf))
    bad = R.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.fit(bad)
    with pytest.raises(ValueError, match="no ratings"):
        model.fit(sp.csr_matrix((5, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="no users"):
        model.fit(sp.csr_matrix((0, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="no items"):
        model.fit(sp.csr_matrix((4, 0), dtype=np.float32))


def test_bad_query_input(als, R):
    with pytest.raises(ValueError, match="userid"):
        als.recommend(-1, R, N=3)
    with pytest.raises(ValueError, match="userid"):
        als.recommend(10_000, R, N=3)
    with pytest.raises(ValueError, match="item columns"):
        als.recommend(0, R[:, :10], N=3)
    with pytest.raises(ValueError, match="one row per userid"):
        als.recommend([0, 1, 2], R[:2], N=3)
    with pytest.raises(ValueError, match="items"):
        als.predict([0], [-3])
    with pytest.raises(ValueError, match="same length"):
        als.predict([0, 1], [2])
    with pytest.raises(ValueError, match="N"):
        als.recommend(0, R[0], N=0)
    with pytest.raises(ValueError, match="not fitted"):
        ALS().recommend(0, R[0])
    with pytest.raises(NotFittedError):
        DPALS().similar_items(0)
    with pytest.raises(AttributeError):  # NotFittedError is also an AttributeError (old callers keep working)
        ALS().transform(R)


# ---------------------------------------------------------------------- issue 13: implicit / sklearn parity


def test_factor_properties_are_implicit_aliases(als):
    assert als.item_factors is als.item_factors_ and als.user_factors is als.user_factors_
    m = clone(als)
    assert m.item_factors is None and m.user_factors is None  # implicit: None before fit
    m.item_factors = als.item_factors_.copy()
    m.user_factors = als.user_factors_.copy()
    np.testing.assert_array_equal(m.user_factors_, als.user_factors_)


def test_similar_users_is_cosine_of_user_factors(als):
    ids, scores = als.similar_users(4, N=6)
    U = als.user_factors_ / np.linalg.norm(als.user_factors_, axis=1, keepdims=True)
    np.testing.assert_allclose(scores, U[ids] @ U[4], rtol=1e-5)
    assert ids[0] == 4 and np.all(np.diff(scores) <= 1e-6)
    ids, _ = als.similar_users(4, N=6, filter_users=[4, 5])
    assert not {4, 5} & set(ids.tolist())
    ids, _ = als.similar_users([1, 2], N=3, users=np.arange(10, 20))
    assert ids.shape == (2, 3) and np.all((ids >= 10) & (ids < 20))


def test_rank_items_returns_every_selected_item_sorted(als, R):
    sel = np.array([3, 9, 1, 20, 11, 12, 13, 14, 15, 16, 17, 18])  # more than implicit's N=10 cap
    ids, scores = als.rank_items(0, R[0], sel)
    assert sorted(ids.tolist()) == sorted(sel.tolist()) and np.all(np.diff(scores) <= 0)
    np.testing.assert_allclose(scores, als.predict(np.zeros(len(ids), int), ids), rtol=1e-5)


def test_partial_fit_users_is_the_billboard_projection(R):
    m = ALS(factors=3, iterations=2, random_state=0).fit(R, show_progress=False)
    U, b = m._project_users(R[[2, 7]])
    m.partial_fit_users([2, R.shape[0] + 2], R[[2, 7]])
    np.testing.assert_allclose(m.user_factors_[[2, R.shape[0] + 2]], U, rtol=1e-6)
    np.testing.assert_allclose(m.user_bias_[[2, R.shape[0] + 2]], b, rtol=1e-6)
    assert m.user_factors_.shape[0] == m.user_bias_.shape[0] == R.shape[0] + 3
    np.testing.assert_array_equal(m.user_factors_[R.shape[0]], 0.0)
    with pytest.raises(ValueError, match="1 row for every user"):
        m.partial_fit_users([0, 1], R[[0]])
    with pytest.raises(ValueError, match="repeated"):
        m.partial_fit_users([0, 0], R[[0, 1]])


def test_partial_fits_cannot_grow_an_id_vocabulary(R):
    users, items = R.nonzero()
    x = Interactions.from_arrays(np.array([f"u{u}" for u in users]), items + 100, np.asarray(R[users, items]).ravel())
    m = ALS(factors=2, iterations=1, random_state=0).fit(x, show_progress=False)
    m.partial_fit_users([0], R[[0]])  # an existing user: fine
    with pytest.raises(ValueError, match="user ids"):
        m.partial_fit_users([x.n_users], R[[0]])
    with pytest.raises(ValueError, match="item ids"):
        m.partial_fit_items([x.n_items], R.T.tocsr()[[0]])


def test_fit_accepts_sklearn_y_and_returns_self(R):
    m = ALS(factors=2, iterations=1, random_state=0)
    assert m.fit(R, None) is m
    assert m.fit(R, np.zeros(R.shape[0])) is m  # y is ignored (ratings are in X)
    a = m.item_factors_.copy()
    assert m.fit(R, y=np.ones(3)) is m
    np.testing.assert_array_equal(m.item_factors_, a)


def test_corrupt_csc_and_coo_are_rejected_before_conversion():
    csc = sp.csc_matrix((np.ones(3, dtype=np.float32), np.array([0, 7, 1]), np.array([0, 1, 2, 3])), shape=(2, 3))
    with pytest.raises(ValueError, match="CSC"):
        ALS(factors=2, iterations=1).fit(csc)
    coo = sp.coo_matrix((np.ones(2), (np.array([0, 1]), np.array([0, 1]))), shape=(2, 3))
    coo.col[1] = 9
    with pytest.raises(ValueError, match="outside its shape"):
        ALS(factors=2, iterations=1).fit(coo)
