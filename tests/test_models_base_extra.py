"""The shared model API (privrec.models._base) through its public methods: input errors, models
without user factors (a loaded DPALS), id-based recommendations, scoring, partial fits, and the
checks of ``load`` on hand-edited model files (each must fail with a one-line ValueError)."""

import io
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from privrec.data import Interactions, from_pandas
from privrec.models import ALS, DPALS, ImplicitALS, PrivateReleaseError, load_model


def _ratings(n_users=30, n_items=20, seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < 0.3
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
    vals = rng.integers(1, 6, size=(n_users, n_items)).astype(np.float32)
    return sp.csr_matrix(np.where(mask, vals, 0.0))


@pytest.fixture(scope="module")
def R():
    return _ratings()


@pytest.fixture(scope="module")
def als(R):
    return ALS(factors=3, iterations=2, random_state=0, num_threads=1).fit(R, show_progress=False)


@pytest.fixture(scope="module")
def loaded_dpals(R):
    """A non-private DPALS after save / load: item side only (no user factors)."""
    model = DPALS(epsilon=math.inf, factors=3, iterations=1, random_state=0).fit(R, show_progress=False)
    buf = io.BytesIO()
    model.save(buf)
    buf.seek(0)
    return model, load_model(buf)


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(1)
    rows = [(f"u{u}", f"i{i}", float(rng.integers(1, 6))) for u in range(12) for i in range(10) if rng.random() < 0.4]
    rows += [("u0", "i9", 4.0)] if not any(r[0] == "u0" and r[1] == "i9" for r in rows) else []
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


@pytest.fixture(scope="module")
def id_model(frame):
    return ALS(factors=3, iterations=2, random_state=0, num_threads=1).fit(frame, show_progress=False)


# ---------------------------------------------------------------------- input errors


def test_dense_inputs_with_bad_dtypes_or_shapes(als):
    n_items = als.n_items_
    with pytest.raises(ValueError, match="must hold numeric ratings"):
        als.recommend(0, np.full((1, n_items), np.datetime64("2020-01-01")))
    with pytest.raises(ValueError, match="Complex data not supported"):
        als.recommend(0, np.ones((1, n_items), dtype=complex))
    with pytest.raises(ValueError, match="2-D users x items"):
        als.transform(np.ones(n_items))
    with pytest.raises(ValueError, match="infinite"):
        als.transform(np.full((1, n_items), np.inf))
    with pytest.raises(ValueError, match="long-format rating table"):
        als.transform(pd.DataFrame(np.ones((1, n_items))))
    with pytest.raises(ValueError, match="user_items is None"):
        als.transform(None)


def test_dense_rows_use_nan_as_unrated_and_warn_about_zeros(als, R):
    dense = R[:2].toarray()
    dense[dense == 0] = np.nan
    np.testing.assert_allclose(als.transform(dense), als.transform(R[:2]), rtol=1e-5, atol=1e-6)
    zeros = np.where(np.isnan(dense), np.nan, dense)
    zeros[0, np.flatnonzero(np.isnan(zeros[0]))[0]] = 0.0
    with pytest.warns(UserWarning, match="taken as ratings of 0"):
        als.transform(zeros)


def test_rating_range_must_be_a_finite_increasing_pair(R):
    for bad, msg in [(5, "must be None or a"), ((1, math.inf), "two finite numbers"), ((5, 1), "low < high")]:
        with pytest.raises(ValueError, match=msg):
            ALS(factors=2, iterations=1, rating_range=bad).fit(R, show_progress=False)
    from privrec.models import RatingRangeWarning

    with pytest.warns(RatingRangeWarning, match="outside the declared rating range"):
        ALS(factors=2, iterations=1, rating_range=(1, 4)).fit(R, show_progress=False)


def test_fit_rejects_empty_inputs():
    for shape, msg in [((0, 4), "no users"), ((4, 0), "no items"), ((3, 4), "no ratings")]:
        with pytest.raises(ValueError, match=msg):
            ALS(factors=2, iterations=1).fit(sp.csr_matrix(shape, dtype=np.float32), show_progress=False)


def test_empty_candidate_list_gives_empty_recommendations(als, R):
    ids, scores = als.recommend(0, R[0], N=5, items=[])
    assert ids.shape == (0,) and scores.shape == (0,)
    ids, scores = als.recommend(np.arange(3), R[:3], N=5, items=np.array([], dtype=int))
    assert ids.shape == (3, 0)


def test_recalculate_user_needs_one_row_per_id(als, R):
    with pytest.raises(ValueError, match="one row per userid"):
        als.recalculate_user([0, 1, 2], R[:2])
    assert als.recalculate_user(4, R[4]).shape == (3,)


def test_query_rows_full_matrix_or_one_per_id(als, R):
    with pytest.raises(ValueError, match="one row per userid"):
        als.recommend(np.arange(4), R[:7], N=2)


# ---------------------------------------------------------------------- items from other users' data


def test_recalculate_item_matches_the_fitted_item(R):
    model = ALS(factors=3, iterations=3, solver="cholesky", random_state=0).fit(R, show_progress=False)
    RT = R.T.tocsr()
    np.testing.assert_allclose(model.recalculate_item(4, RT[4]), model.item_factors_[4], rtol=1e-3, atol=1e-4)
    # the full items x users matrix is accepted too (its rows ``itemid`` are used)
    np.testing.assert_allclose(model.recalculate_item([4, 5], RT), model.item_factors_[[4, 5]], rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="one row per itemid"):
        model.recalculate_item([1, 2], RT[:3])
    with pytest.raises(ValueError, match="user columns"):
        model.recalculate_item(0, sp.csr_matrix((1, R.shape[0] + 3), dtype=np.float32))
    with pytest.raises(ValueError, match="item_users .* is required"):
        model.recalculate_item(0, None)
    # similar_items after re-solving the query item: the item is still its own nearest neighbour
    ids, _ = model.similar_items(4, N=3, recalculate_item=True, item_users=RT[4])
    assert ids[0] == 4


def test_partial_fit_items_adds_and_updates_items(R):
    model = ALS(factors=3, iterations=2, solver="cholesky", random_state=0).fit(R, show_progress=False)
    RT = R.T.tocsr()
    n_items = R.shape[1]
    model.partial_fit_items([n_items + 1], RT[:1])
    assert model.item_factors_.shape[0] == n_items + 2
    np.testing.assert_array_equal(model.item_factors_[n_items], 0)  # the gap is an item without data
    assert model.item_bias_.shape == (n_items + 2,)
    np.testing.assert_allclose(model.item_factors_[n_items + 1], model.recalculate_item(0, RT[0]), rtol=1e-5)
    with pytest.raises(ValueError, match="repeated"):
        model.partial_fit_items([1, 1], RT[:2])
    with pytest.raises(ValueError, match="1 row for every item"):
        model.partial_fit_items([1, 2], RT[:3])


def test_partial_fit_users_adds_users(R):
    model = ALS(factors=3, iterations=2, random_state=0).fit(R, show_progress=False)
    n_users = R.shape[0]
    model.partial_fit_users([n_users + 2], R[:1])
    assert model.user_factors_.shape[0] == n_users + 3 and model.user_bias_.shape == (n_users + 3,)
    np.testing.assert_array_equal(model.user_factors_[n_users], 0)
    np.testing.assert_allclose(model.user_factors_[n_users + 2], model.recalculate_user(0, R[0]), rtol=1e-5)
    with pytest.raises(ValueError, match="repeated"):
        model.partial_fit_users([1, 1], R[:2])
    with pytest.raises(ValueError, match="1 row for every user"):
        model.partial_fit_users([1], R[:2])


def test_private_models_refuse_item_side_updates(R):
    model = DPALS(epsilon=4.0, factors=2, iterations=1, budget=5, random_state=0).fit(R, show_progress=False)
    with pytest.raises(PrivateReleaseError, match="recalculate_item is not available"):
        model.recalculate_item(0, R.T.tocsr()[:1])
    with pytest.raises(PrivateReleaseError, match="partial_fit_items"):
        model.partial_fit_items([0], R.T.tocsr()[:1])
    with pytest.raises(PrivateReleaseError, match="recalculate_item"):
        model.similar_items(0, recalculate_item=True, item_users=R.T.tocsr()[:1])


# ---------------------------------------------------------------------- models without user factors


def test_loaded_item_side_model_projects_users(loaded_dpals, R):
    fitted, loaded = loaded_dpals
    assert loaded.user_factors is None
    ids, scores = loaded.recommend(np.arange(5), R[:5], N=4)
    ref_ids, ref_scores = fitted.recommend(np.arange(5), R[:5], N=4)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)
    with pytest.raises(ValueError, match="holds no user factors"):
        loaded.predict([0], [1])
    with pytest.raises(ValueError, match="holds no user factors"):
        loaded.score(R)
    # the item side cannot be re-solved without the users
    with pytest.raises(ValueError, match="holds no user factors"):
        loaded.recalculate_item(0, R.T.tocsr()[:1])
    with pytest.raises(ValueError, match="holds no user factors"):
        loaded.partial_fit_items([0], R.T.tocsr()[:1])


def test_partial_fit_users_on_a_loaded_model_starts_an_empty_user_table(loaded_dpals, R):
    _, loaded = loaded_dpals
    import copy

    model = copy.deepcopy(loaded)
    model.partial_fit_users([0, 1], R[:2])
    assert model.user_factors_.shape == (2, 3)
    ids, _ = model.similar_users(0, N=2)
    assert ids[0] == 0


# ---------------------------------------------------------------------- predict / score


def test_predict_and_score_are_consistent(als, R):
    coo = R.tocoo()
    pred = als.predict(coo.row, coo.col)
    np.testing.assert_allclose(als.predict(R), pred, rtol=1e-6)  # entries of a matrix, in CSR order
    rmse = math.sqrt(np.mean((pred.astype(np.float64) - coo.data) ** 2))
    assert als.score(R) == pytest.approx(-rmse, rel=1e-5)
    with pytest.raises(ValueError, match="same length"):
        als.predict([0, 1], [0])
    with pytest.raises(ValueError, match="fitted users"):
        als.score(R[:5])
    with pytest.raises(ValueError, match="no ratings to score"):
        als.score(sp.csr_matrix(R.shape, dtype=np.float32))


def test_score_of_frames_with_ids(id_model, frame):
    assert id_model.score(frame) < 0
    # unseen users / items contribute no factors: a prediction of the mean plus the known side's bias
    unseen = pd.DataFrame({"user": ["nobody"], "item": ["i1"], "rating": [3.0]})
    expected = id_model.global_mean_ + id_model.item_bias_[list(id_model.item_ids_).index("i1")]
    assert id_model.predict(unseen)[0] == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="holds no ratings"):
        id_model.score(frame[["user", "item"]])
    inter = from_pandas(frame)
    np.testing.assert_allclose(
        id_model.predict(inter), id_model.predict(frame.sort_values(["user", "item"])), rtol=1e-6
    )


def test_implicit_feedback_models_refuse_rmse(R):
    model = ImplicitALS(factors=2, iterations=1, random_state=0, num_threads=1).fit(R, show_progress=False)
    with pytest.raises(ValueError, match="implicit feedback"):
        model.score(R)


# ---------------------------------------------------------------------- by original id


def test_recommend_ids_by_original_ids(id_model, frame):
    assert list(id_model.user_ids_) == sorted(frame.user.unique())
    ids, scores = id_model.recommend_ids("u0", frame, N=3)
    liked = set(frame.item[frame.user == "u0"])
    assert len(ids) == 3 and not set(ids) & liked
    assert all(isinstance(i, str) for i in ids)
    # the same as index-based recommend
    u = list(id_model.user_ids_).index("u0")
    R = from_pandas(frame).matrix
    idx, sc = id_model.recommend(u, R[u], N=3)
    assert list(ids) == [id_model.item_ids_[i] for i in idx]
    np.testing.assert_allclose(scores, sc, rtol=1e-6)
    # batched, with item-id filters and candidates
    ids, _ = id_model.recommend_ids(["u0", "u1"], frame, N=2, filter_items=["i0"], items=["i0", "i1", "i2", "i3"])
    assert ids.shape[0] == 2 and "i0" not in set(ids.ravel()) - {None}
    # an Interactions holding the queried users works like the DataFrame
    ids2, _ = id_model.recommend_ids("u0", from_pandas(frame), N=3)
    assert list(ids2) == list(id_model.recommend_ids("u0", frame, N=3)[0])


def test_recommend_ids_new_users_are_projected(id_model):
    new = pd.DataFrame({"user": ["new", "new"], "item": ["i1", "i2"], "rating": [5.0, 4.0]})
    ids, scores = id_model.recommend_ids("new", new, N=4)
    assert len(ids) == 4 and not {"i1", "i2"} & set(ids)
    # projection: the same as recalculating from the row
    R = sp.csr_matrix(
        ([5.0, 4.0], ([0, 0], [list(id_model.item_ids_).index("i1"), list(id_model.item_ids_).index("i2")])),
        shape=(1, id_model.n_items_),
    )
    _, sc = id_model.recommend(0, R, N=4, recalculate_user=True)
    np.testing.assert_allclose(scores, sc, rtol=1e-5)
    # a sparse matrix with one row per requested user is accepted
    ids3, _ = id_model.recommend_ids("new", R, N=4)
    assert list(ids3) == list(ids)
    with pytest.raises(ValueError, match="one row per requested user"):
        id_model.recommend_ids(["new", "u1"], R, N=4)
    with pytest.raises(ValueError, match="no fitted factors"):
        id_model.recommend_ids("stranger", None, N=2, filter_already_liked_items=False)
    with pytest.raises(ValueError, match="needs the users' rated items"):
        id_model.recommend_ids("u0", None, N=2)
    # ratings of items the model does not know are dropped, with a warning
    odd = pd.DataFrame({"user": ["new", "new"], "item": ["i1", "zzz"]})
    with pytest.warns(UserWarning, match="not in the model's items"):
        ids4, _ = id_model.recommend_ids("new", odd, N=2)
    assert "i1" not in set(ids4)


def test_recommend_ids_pads_short_rows_with_none(id_model, frame):
    users = ["u0", "u1"]
    ids, scores = id_model.recommend_ids(users, frame, N=id_model.n_items_)
    assert ids.dtype == object
    for row, user in enumerate(users):
        n_liked = int((frame.user == user).sum())
        n_ok = id_model.n_items_ - n_liked
        assert all(x is None for x in ids[row, n_ok:])
        assert np.all(np.isneginf(scores[row, n_ok:]))


def test_similar_items_ids(id_model):
    ids, scores = id_model.similar_items_ids("i3", N=3)
    assert ids[0] == "i3" and scores[0] == pytest.approx(1.0, abs=1e-4)
    ids, _ = id_model.similar_items_ids(["i3", "i4"], N=3, filter_items=["i5"], items=["i3", "i4", "i5", "i6"])
    assert ids.shape == (2, 3) and "i5" not in set(ids.ravel())
    with pytest.raises(ValueError, match="unknown item id"):
        id_model.similar_items_ids("nope")


def test_models_fitted_from_a_bare_matrix_use_indices_as_ids(als, R):
    ids, _ = als.recommend_ids(0, R[0], N=3)
    np.testing.assert_array_equal(ids, als.recommend(0, R[0], N=3)[0])
    ids, _ = als.similar_items_ids(2, N=3)
    np.testing.assert_array_equal(ids, als.similar_items(2, N=3)[0])
    with pytest.raises(ValueError, match="unknown item id"):
        als.similar_items_ids(R.shape[1] + 4)
    with pytest.raises(ValueError, match="unknown item id"):
        als.similar_items_ids("a-string")


def test_id_vocabularies_cannot_grow(id_model, frame):
    import copy

    model = copy.deepcopy(id_model)
    row = sp.csr_matrix(([3.0], ([0], [0])), shape=(1, model.n_items_), dtype=np.float32)
    with pytest.raises(ValueError, match="maps user ids"):
        model.partial_fit_users([len(model.user_ids_) + 1], row)


def test_save_load_keeps_the_id_maps(id_model, tmp_path):
    id_model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert list(loaded.user_ids_) == list(id_model.user_ids_)
    assert list(loaded.item_ids_) == list(id_model.item_ids_)
    assert list(loaded.similar_items_ids("i2", N=3)[0]) == list(id_model.similar_items_ids("i2", N=3)[0])


def test_private_model_saves_the_item_ids_it_was_fitted_on(frame, tmp_path):
    model = DPALS(axes="warn", epsilon=4.0, factors=2, iterations=1, budget=5, random_state=0).fit(
        frame, show_progress=False
    )
    model.save(tmp_path / "p.npz")
    assert list(load_model(tmp_path / "p.npz").item_ids_) == list(model.item_ids_)
    # with a public catalogue the ids are part of the release
    catalogue = [f"i{i}" for i in range(12)]
    public = DPALS(axes="warn", epsilon=4.0, factors=2, iterations=1, budget=5, random_state=0).fit(
        from_pandas(frame, item_ids=catalogue), show_progress=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        public.save(tmp_path / "q.npz")
    assert list(load_model(tmp_path / "q.npz").item_ids_) == catalogue


def test_unsavable_ids_are_dropped_with_a_warning(R, tmp_path):
    inter = Interactions(R, user_ids=np.arange(R.shape[0]) + 0.5, item_ids=[f"i{i}" for i in range(R.shape[1])])
    model = ALS(factors=2, iterations=1, random_state=0).fit(inter, show_progress=False)
    with pytest.warns(UserWarning, match="user ids of dtype float64 are not saved"):
        model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert getattr(loaded, "user_ids_", None) is None and list(loaded.item_ids_) == list(model.item_ids_)


def test_save_refuses_arrays_outside_the_file_schema(R, tmp_path):
    model = ALS(factors=2, iterations=1, random_state=0).fit(R, show_progress=False)
    model.item_factors_ = model.item_factors_.astype(np.float16)
    with pytest.raises(ValueError, match="cannot save ALS: item_factors_ has dtype float16"):
        model.save(tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()


def test_save_writes_numpy_and_dtype_params_as_json(R, tmp_path):
    model = ALS(factors=np.int64(2), iterations=1, random_state=np.random.default_rng(0), dtype=np.float64)
    model.fit(R, show_progress=False)
    model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert loaded.factors == 2 and loaded.random_state is None
    assert loaded.item_factors_.dtype == np.float64 and np.dtype(loaded.dtype) == np.float64


# ---------------------------------------------------------------------- hand-edited model files


def _members(model):
    buf = io.BytesIO()
    model.save(buf)
    buf.seek(0)
    with np.load(buf) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    arrays.pop("__sha256__", None)
    return meta, arrays


def _write(path, meta, arrays):
    """A model file without a content hash (accepted: hashes are optional), from edited members."""
    meta = dict(meta)
    meta["arrays"] = {k: {"shape": list(v.shape), "dtype": v.dtype.str} for k, v in arrays.items()}
    np.savez(path, __meta__=np.array(json.dumps(meta)), **arrays)
    return path


def _load_error(path, needle):
    with pytest.raises(ValueError, match=needle) as info:
        load_model(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


@pytest.fixture(scope="module")
def als_members(als):
    return _members(als)


@pytest.fixture(scope="module")
def dpals_members(R):
    return _members(DPALS(epsilon=3.0, factors=2, iterations=1, budget=4, random_state=0).fit(R, show_progress=False))


def test_unedited_members_without_a_hash_load(als, als_members, tmp_path):
    meta, arrays = als_members
    loaded = load_model(_write(tmp_path / "ok.npz", meta, arrays))
    np.testing.assert_array_equal(loaded.item_factors_, als.item_factors_)


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda m, a: m.update({"class": "Nope"}), "unknown model class 'Nope'"),
        (lambda m, a: m.update({"params": {**m["params"], "dtype": "not-a-dtype"}}), "unknown dtype"),
        (lambda m, a: m.update({"params": {**m["params"], "factors": 7}}), "params say factors=7"),
        (lambda m, a: a.update({"user_factors_": a["user_factors_"][:, :2].copy()}), "user_factors_ has"),
        (lambda m, a: a.update({"item_bias_": a["item_bias_"][:3].copy()}), "item_bias_ has shape"),
        (lambda m, a: a.update({"user_bias_": a["user_bias_"][:3].copy()}), "user_bias_ does not match"),
        (lambda m, a: a.pop("item_factors_"), "item_factors_ missing"),
        (lambda m, a: a.update({"item_factors_": np.zeros((0, 3), np.float32)}), "has no items"),
        (lambda m, a: a.update({"item_factors_": np.full_like(a["item_factors_"], np.nan)}), "NaN or infinite"),
        (lambda m, a: m.update({"user_ids": {"kind": "int", "values": [1, 2]}}), "must list"),
        (lambda m, a: m.update({"item_ids": ["a"]}), "must be {'kind'"),
        (lambda m, a: m.update({"item_ids": {"kind": "str", "values": [1] * 20}}), "do not match"),
        (lambda m, a: m.update({"item_ids": {"kind": "int", "values": [1] * 20}}), "repeated ids"),
    ],
)
def test_edited_als_files_are_rejected(als_members, tmp_path, edit, needle):
    meta, arrays = json.loads(json.dumps(als_members[0])), dict(als_members[1])
    edit(meta, arrays)
    _load_error(_write(tmp_path / "bad.npz", meta, arrays), needle)


def test_metadata_level_checks(als_members, tmp_path):
    meta, arrays = als_members

    def raw(path, meta_obj, arrays_decl=None, text=None):
        m = dict(meta_obj)
        if arrays_decl is not None:
            m["arrays"] = arrays_decl
        np.savez(path, __meta__=np.array(text if text is not None else json.dumps(m)), **arrays)
        return path

    _load_error(raw(tmp_path / "a.npz", meta, arrays_decl=[1, 2]), "'arrays' must be an object")
    decl = {k: {"shape": [-1], "dtype": "<f4"} for k in arrays}
    _load_error(raw(tmp_path / "b.npz", meta, arrays_decl=decl), "shape must be a list of non-negative")
    decl = {k: {"shape": list(v.shape), "dtype": "<i4"} for k, v in arrays.items()}
    _load_error(raw(tmp_path / "c.npz", meta, arrays_decl=decl), "is not float32/float64")
    decl = {k: {"shape": list(v.shape), "dtype": "<f8"} for k, v in arrays.items()}
    _load_error(raw(tmp_path / "d.npz", meta, arrays_decl=decl), "metadata says")
    decl = {k: {"shape": [s + 1 for s in v.shape], "dtype": v.dtype.str} for k, v in arrays.items()}
    _load_error(raw(tmp_path / "e.npz", meta, arrays_decl=decl), "metadata says")
    decl = {k: {"shape": list(v.shape), "dtype": v.dtype.str} for k, v in arrays.items()}
    decl["user_bias_extra_"] = {"shape": [1], "dtype": "<f4"}
    _load_error(raw(tmp_path / "f.npz", meta, arrays_decl=decl), "not a saved array of ALS")
    decl = {k: {"shape": list(v.shape), "dtype": v.dtype.str} for k, v in arrays.items()}
    decl2 = dict(decl)
    np.savez(
        tmp_path / "g.npz",
        __meta__=np.array(json.dumps({**meta, "arrays": decl2})),
        item_factors_=arrays["item_factors_"],
    )
    _load_error(tmp_path / "g.npz", "missing from the file")
    _load_error(raw(tmp_path / "h.npz", meta, text="{not json"), "not valid JSON")
    _load_error(raw(tmp_path / "i.npz", meta, text=json.dumps({"format": "other"})), "format tag missing")
    deep = {"format": "privrec-model", "version": 2, "x": [[[[[[[[[[[[]]]]]]]]]]]] * 1}
    for _ in range(70):
        deep = {"format": "privrec-model", "version": 2, "x": deep}
    _load_error(raw(tmp_path / "j.npz", meta, text=json.dumps(deep)), "nested too deeply")


def test_file_objects_must_be_binary_and_may_be_unseekable(als, tmp_path):
    path = tmp_path / "m.npz"
    als.save(path)
    with open(path, encoding="latin-1") as fh, pytest.raises(ValueError, match="binary mode"):
        load_model(fh)

    class Stream(io.RawIOBase):
        def __init__(self, data):
            self._buf = io.BytesIO(data)

        def readable(self):
            return True

        def seekable(self):
            return False

        def readinto(self, b):
            return self._buf.readinto(b)

    loaded = load_model(io.BufferedReader(Stream(path.read_bytes())))
    np.testing.assert_array_equal(loaded.item_factors_, als.item_factors_)


def test_loading_through_the_wrong_class_is_refused(als, tmp_path):
    als.save(tmp_path / "m.npz")
    with pytest.raises(ValueError, match="holds a ALS, not a DPALS"):
        DPALS.load(tmp_path / "m.npz")


def test_truncated_and_padded_members(als_members, tmp_path):
    import zipfile

    meta, arrays = als_members
    good = _write(tmp_path / "good.npz", meta, arrays)
    with zipfile.ZipFile(good) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}

    def rezip(path, mutate):
        data = dict(members)
        mutate(data)
        with zipfile.ZipFile(path, "w") as zf:
            for n, b in data.items():
                zf.writestr(n, b)
        return path

    _load_error(
        rezip(tmp_path / "t.npz", lambda d: d.update({"item_factors_.npy": d["item_factors_.npy"][:-8]})),
        "holds only|truncated",
    )
    _load_error(
        rezip(tmp_path / "p.npz", lambda d: d.update({"item_factors_.npy": d["item_factors_.npy"] + b"\0" * 4})),
        "trailing data",
    )
    _load_error(
        rezip(
            tmp_path / "h.npz",
            # padded: the member is as large as its declared array, so the header itself is what fails
            lambda d: d.update({"item_factors_.npy": b"\x93NUMPY\x01\x00\x10\x00{'descr': <<<  }\n" + b"\0" * 512}),
        ),
        "corrupt .npy header",
    )
    _load_error(
        rezip(
            tmp_path / "v.npz",
            lambda d: d.update({"item_factors_.npy": b"\x93NUMPY\x03\x00" + d["item_factors_.npy"][8:]}),
        ),
        "unsupported .npy version|corrupt",
    )
    _load_error(rezip(tmp_path / "s.npz", lambda d: d.update({"sub/x.npy": b""})), "unexpected member")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda r, p: r.clear() or r.update({"x": 1}), "'events' must be a list"),
        (lambda r, p: r.update({"delta": 2.0}), "delta must be in"),
        (lambda r, p: r.update({"delta": r["delta"] / 10}), "differs from the model's delta"),
        (lambda r, p: r.pop("epsilon_rdp"), "lacks epsilon_rdp"),
        (lambda r, p: r.update({"epsilon_rdp": -1}), "non-negative number"),
        (lambda r, p: r.update({"accountant": "magic"}), "unknown accountant"),
        (lambda r, p: r.update({"accountant": "pld", "epsilon_pld": None}), "lacks epsilon_pld"),
        (lambda r, p: r.update({"epsilon": 123.0}), "epsilon differs"),
        (lambda r, p: r.update({"target_epsilon": 9.0}), "target_epsilon differs"),
        (lambda r, p: r.update({"events": []}), "records no events"),
        (lambda r, p: r.update({"events": [{"event": {"name": "Bogus"}}]}), "malformed"),
    ],
)
def test_edited_privacy_reports_are_rejected(dpals_members, tmp_path, edit, needle):
    meta, arrays = json.loads(json.dumps(dpals_members[0])), dict(dpals_members[1])
    edit(meta["privacy_report"], meta["params"])
    _load_error(_write(tmp_path / "bad.npz", meta, arrays), needle)


def test_dpals_files_need_their_report_and_regularisation(dpals_members, tmp_path):
    for key, needle in [
        ("privacy_report", "lacks its privacy report"),
        ("user_regularization", "lacks its user regularization"),
    ]:
        meta, arrays = json.loads(json.dumps(dpals_members[0])), dict(dpals_members[1])
        meta.pop(key)
        _load_error(_write(tmp_path / f"{key}.npz", meta, arrays), needle)
    meta, arrays = json.loads(json.dumps(dpals_members[0])), dict(dpals_members[1])
    meta["privacy_report"] = "nope"
    _load_error(_write(tmp_path / "r.npz", meta, arrays), "must be an object")


# ---------------------------------------------------------------------- more id kinds and file checks


def test_one_dimensional_sparse_arrays_are_rejected(als):
    with pytest.raises(ValueError, match="must be 2-D"):
        als.transform(sp.coo_array(np.ones(als.n_items_, dtype=np.float32)))


@pytest.fixture(scope="module")
def mixed_frame():
    rng = np.random.default_rng(3)
    users = ["a", 3, "b", 7, "c", 11]
    items = [100, 200, "x", 300, "y", 400, 500]
    rows = [(u, i, float(rng.integers(1, 6))) for u in users for i in items if rng.random() < 0.5]
    rows += [(u, 100, 3.0) for u in users if not any(r[0] == u and r[1] == 100 for r in rows)]
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


def test_mixed_type_ids_round_trip(mixed_frame, tmp_path):
    model = ALS(factors=2, iterations=2, random_state=0).fit(mixed_frame, show_progress=False)
    assert model.user_ids_.dtype == object and model.item_ids_.dtype == object
    ids, _ = model.recommend_ids(["a", 3], mixed_frame, N=2)
    assert ids.shape == (2, 2)
    model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert list(loaded.user_ids_) == list(model.user_ids_) and list(loaded.item_ids_) == list(model.item_ids_)
    np.testing.assert_array_equal(loaded.recommend_ids(["a", 3], mixed_frame, N=2)[0], ids)


def test_integer_ids_round_trip(tmp_path):
    df = pd.DataFrame({"user": [10, 10, 20, 30, 30], "item": [5, 6, 6, 5, 7], "rating": [1.0, 2.0, 3.0, 4.0, 5.0]})
    model = ALS(factors=2, iterations=1, random_state=0).fit(df, show_progress=False)
    model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    assert loaded.user_ids_.dtype.kind == "i" and list(loaded.item_ids_) == [5, 6, 7]
    ids, _ = loaded.recommend_ids(10, df, N=3)
    assert list(ids) == [7]  # the only item user 10 has not rated


def test_recommend_ids_with_recalculate_user(id_model, frame):
    ids, scores = id_model.recommend_ids("u1", frame, N=3, recalculate_user=True)
    u = list(id_model.user_ids_).index("u1")
    R = from_pandas(frame).matrix
    idx, sc = id_model.recommend(u, R[u], N=3, recalculate_user=True)
    assert list(ids) == [id_model.item_ids_[i] for i in idx]
    np.testing.assert_allclose(scores, sc, rtol=1e-6)


def test_more_edited_files(dpals_members, als_members, tmp_path):
    import zipfile

    meta, arrays = json.loads(json.dumps(dpals_members[0])), dict(dpals_members[1])
    meta["user_ids"] = {"kind": "int", "values": [0]}
    _load_error(_write(tmp_path / "u.npz", meta, arrays), "user ids are stored without user factors")
    meta, arrays = json.loads(json.dumps(dpals_members[0])), dict(dpals_members[1])
    meta["user_regularization"] = [1.0]
    _load_error(_write(tmp_path / "r.npz", meta, arrays), "malformed DPALS metadata")

    meta, arrays = als_members
    good = _write(tmp_path / "good.npz", meta, arrays)
    with zipfile.ZipFile(good) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}

    def rezip(path, items):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
            with zipfile.ZipFile(path, "w") as zf:
                for n, b in items:
                    zf.writestr(n, b)
        return path

    _load_error(
        rezip(tmp_path / "dup.npz", [*members.items(), ("item_factors_.npy", members["item_factors_.npy"])]),
        "appears twice",
    )
    _load_error(
        rezip(tmp_path / "sha.npz", [*members.items(), ("__sha256__.npy", _npy(np.array("f" * 400)))]), "too large"
    )
    # a version 2.0 .npy header is read like a 1.0 one
    v2 = io.BytesIO()
    np.lib.format.write_array(v2, arrays["item_factors_"], version=(2, 0))
    ok = rezip(
        tmp_path / "v2.npz",
        [*[(n, b) for n, b in members.items() if n != "item_factors_.npy"], ("item_factors_.npy", v2.getvalue())],
    )
    np.testing.assert_array_equal(load_model(ok).item_factors_, arrays["item_factors_"])
    # a header claiming more data than the member holds (declared shape consistent with it)
    n_items, d = arrays["item_factors_"].shape
    big = (n_items * 1000, d)
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": big})
    meta2 = json.loads(json.dumps(meta))
    meta2["arrays"] = {k: {"shape": list(v.shape), "dtype": v.dtype.str} for k, v in arrays.items()}
    meta2["arrays"]["item_factors_"]["shape"] = list(big)
    items = [(n, b) for n, b in members.items() if n not in ("item_factors_.npy", "__meta__.npy")]
    items += [
        ("__meta__.npy", _npy(np.array(json.dumps(meta2)))),
        ("item_factors_.npy", b"\x93NUMPY\x01\x00" + head.getvalue()[8:] + b"\0" * 16),
    ]
    _load_error(rezip(tmp_path / "claims.npz", items), "claims shape|metadata says shape")


def _npy(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_object_ids_that_are_not_str_or_int_are_not_saved(R, tmp_path):
    ids = np.empty(R.shape[0], dtype=object)
    ids[:] = ["a"] + [float(u) + 0.5 for u in range(1, R.shape[0])]
    model = ALS(factors=2, iterations=1, random_state=0).fit(Interactions(R, user_ids=ids), show_progress=False)
    with pytest.warns(UserWarning, match="user ids of dtype object are not saved"):
        model.save(tmp_path / "m.npz")
    assert getattr(load_model(tmp_path / "m.npz"), "user_ids_", None) is None
