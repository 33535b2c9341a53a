"""Long-format rating tables (issue 13 part 1): from_pandas / from_parquet, fitting from a DataFrame
or an Interactions with any hashable ids, recommending by id, id maps in model files."""

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from privrec.data import Interactions, from_pandas, from_parquet
from privrec.models import ALS, DPALS, RatingRangeWarning, load_model

ML100K = Path("/work/shared/datasets/ml-100k/u.data")


def _frame(seed=0, n_users=40, n_items=15, density=0.35):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((n_users, n_items)) < density)
    return pd.DataFrame(
        {
            "user": [f"user-{k}" for k in rows],
            "item": [f"item-{k}" for k in cols],
            "rating": rng.integers(1, 6, rows.size).astype(float),
        }
    )


@pytest.fixture(scope="module")
def df():
    return _frame()


def test_from_pandas_string_ids(df):
    x = from_pandas(df)
    assert x.shape == (df["user"].nunique(), df["item"].nunique()) and x.nnz == len(df)
    assert list(x.user_ids) == sorted(df["user"].unique()) and x.item_ids.dtype.kind == "U"
    u, i = x.user_index("user-3"), x.item_index(["item-2"])[0]
    want = df.loc[(df["user"] == "user-3") & (df["item"] == "item-2"), "rating"]
    assert x.matrix[u, i] == (want.iloc[0] if len(want) else 0.0)
    assert x.info["item_vocabulary"] == "data"


def test_from_pandas_custom_columns_and_implicit_feedback(df):
    other = df.rename(columns={"user": "uid", "item": "movie", "rating": "stars"})
    x = from_pandas(other, user_col="uid", item_col="movie", rating_col="stars")
    np.testing.assert_array_equal(x.matrix.toarray(), from_pandas(df).matrix.toarray())
    ones = from_pandas(df.drop(columns="rating"), rating_col=None)
    assert np.all(ones.matrix.data == 1.0)
    with pytest.raises(ValueError, match="rating_col=None"):
        from_pandas(df.drop(columns="rating"))
    with pytest.raises(ValueError, match="user_col='uid'"):
        from_pandas(df, user_col="uid")


def test_duplicates_are_an_error_naming_the_count_unless_a_policy_is_given(df):
    dup = pd.concat([df, df.iloc[:3].assign(rating=[5.0, 5.0, 5.0])], ignore_index=True)
    with pytest.raises(ValueError, match=r"^3 duplicate \(user, item\) row\(s\).*duplicates='sum'"):
        from_pandas(dup)
    with pytest.warns(UserWarning, match="3 duplicate"):
        last = from_pandas(dup, duplicates="last")
    with pytest.warns(UserWarning):
        summed = from_pandas(dup, duplicates="sum")
    first = df.iloc[0]
    u, i = last.user_index(first["user"]), last.item_index(first["item"])
    assert last.matrix[u, i] == 5.0 and summed.matrix[u, i] == first["rating"] + 5.0
    with pytest.raises(ValueError, match="duplicates must be one of"):
        from_pandas(df, duplicates="average")


def test_any_hashable_ids_and_missing_ids():
    mixed = pd.DataFrame({"user": [1, "a", (2, 3), 1], "item": ["x", 7, 7, 7], "rating": [1.0, 2.0, 3.0, 4.0]})
    x = from_pandas(mixed)
    assert x.nnz == 4 and x.user_ids.dtype == object and set(x.user_ids.tolist()) == {1, "a", (2, 3)}
    assert x.matrix[list(x.user_ids).index((2, 3)), x.item_index(7)] == 3.0
    m = ALS(factors=2, iterations=1, random_state=0).fit(mixed, show_progress=False)
    ids, _ = m.recommend_ids([(2, 3)], mixed, N=1)  # a tuple id goes inside a list
    assert ids.tolist() == [["x"]]
    with pytest.raises(ValueError, match="missing"):
        from_pandas(pd.DataFrame({"user": ["a", None], "item": ["x", "y"], "rating": [1.0, 2.0]}))
    with pytest.raises(ValueError, match="NaN"):
        from_pandas(pd.DataFrame({"user": ["a", "b"], "item": ["x", "y"], "rating": [1.0, np.nan]}))
    with pytest.raises(ValueError, match="empty"):
        from_pandas(mixed.iloc[:0])


def test_given_public_vocabulary(df):
    catalogue = [f"item-{k}" for k in range(20)] + ["never-rated"]
    x = from_pandas(df, item_ids=catalogue)
    assert x.n_items == len(catalogue) and list(x.item_ids) == catalogue and x.info["item_vocabulary"] == "given"
    assert x.item_counts[-1] == 0
    with pytest.raises(ValueError, match="not in the given item vocabulary"):
        from_pandas(df, item_ids=catalogue[:3])


def _write_parquet(frame, path, **kw):
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=9, **kw)


@pytest.mark.parametrize("batch_size", [7, 1 << 20])
def test_from_parquet_chunked_equals_from_pandas(df, tmp_path, batch_size):
    p = tmp_path / "r.parquet"
    _write_parquet(df, p)
    a, b = from_parquet(p, batch_size=batch_size), from_pandas(df)
    assert list(a.user_ids) == list(b.user_ids) and list(a.item_ids) == list(b.item_ids)
    assert (a.matrix != b.matrix).nnz == 0 and a.info["source"] == "parquet"


def test_from_parquet_dictionary_and_integer_ids_vocabulary_and_duplicates(df, tmp_path):
    frame = df.assign(user=df["user"].astype("category"), item=df["item"].str.slice(5).astype(np.int64))
    p = tmp_path / "d.parquet"
    _write_parquet(frame, p)
    x = from_parquet(p, batch_size=5)
    assert x.item_ids.dtype.kind == "i" and list(x.item_ids) == sorted(frame["item"].unique())
    assert (x.matrix != from_pandas(frame.astype({"user": str})).matrix).nnz == 0
    y = from_parquet(p, item_ids=np.arange(30), batch_size=5)
    assert y.n_items == 30 and y.info["item_vocabulary"] == "given"
    _write_parquet(pd.concat([df, df.iloc[:2]]), tmp_path / "dup.parquet")
    with pytest.raises(ValueError, match="^2 duplicate"):
        from_parquet(tmp_path / "dup.parquet", batch_size=4)
    with pytest.raises(ValueError, match="rating_col"):
        from_parquet(p, rating_col="stars")


@pytest.mark.skipif(not ML100K.exists(), reason="MovieLens 100K not available")
def test_real_data_round_trip_through_parquet(tmp_path):
    raw = pd.read_csv(ML100K, sep="\t", names=["user", "item", "rating", "ts"])
    x = from_pandas(raw, timestamp_col="ts")
    assert x.shape == (943, 1682) and x.nnz == 100_000 and x.timestamps is not None
    raw.to_parquet(tmp_path / "ml.parquet")
    y = from_parquet(tmp_path / "ml.parquet", timestamp_col="ts", batch_size=10_000)
    assert (x.matrix != y.matrix).nnz == 0 and np.array_equal(x.timestamps, y.timestamps)
    assert np.array_equal(x.user_ids, y.user_ids)


# ---------------------------------------------------------------------- models fitted with ids


def test_fit_accepts_csr_csc_coo_interactions_and_dataframe(df):
    x = from_pandas(df)
    ref = ALS(factors=3, iterations=2, random_state=0).fit(x.matrix, show_progress=False)
    assert ref.user_ids_ is None and ref.item_ids_ is None
    for data in (x.matrix.tocsc(), x.matrix.tocoo(), x, df):
        m = ALS(factors=3, iterations=2, random_state=0).fit(data, show_progress=False)
        np.testing.assert_allclose(m.item_factors_, ref.item_factors_, rtol=1e-5, atol=1e-6)
    assert list(m.item_ids_) == list(x.item_ids) and list(m.user_ids_) == list(x.user_ids)
    m.fit(x.matrix, show_progress=False)  # a refit from a bare matrix drops the old id maps
    assert m.user_ids_ is None


def test_dataframe_with_string_ids_end_to_end(df, tmp_path):
    m = DPALS(axes="warn", epsilon=5.0, factors=3, iterations=2, budget=10, random_state=0).fit(df, show_progress=False)
    rated = set(df.loc[df["user"] == "user-3", "item"])
    ids, scores = m.recommend_ids("user-3", df, N=4)
    assert len(ids) == 4 and all(isinstance(i, str) for i in ids) and not set(ids) & rated
    assert np.all(np.diff(scores) <= 1e-6)
    # same as the index API
    x = from_pandas(df)
    idx, _ = m.recommend(x.user_index("user-3"), x.matrix, N=4)
    assert list(ids) == list(x.item_ids[idx])
    ids2, _ = m.recommend_ids(["user-3", "user-5"], df, N=4, filter_items=["item-0"])
    assert ids2.shape == (2, 4) and "item-0" not in ids2 and list(ids2[0]) != list(ids2[1])
    only, _ = m.recommend_ids(
        "user-3", df, N=10, items=["item-1", "item-2", "item-14"], filter_already_liked_items=False
    )
    assert set(only) == {"item-1", "item-2", "item-14"}
    sim, s = m.similar_items_ids("item-2", N=3)
    assert sim[0] == "item-2" and s[0] == pytest.approx(1.0, abs=1e-5)
    # a new user, from their own ratings (billboard projection)
    new = pd.DataFrame({"user": ["newbie"] * 3, "item": ["item-1", "item-4", "item-9"], "rating": [5.0, 1.0, 4.0]})
    ids3, _ = m.recommend_ids("newbie", new, N=3)
    assert not set(ids3) & {"item-1", "item-4", "item-9"}
    with pytest.raises(ValueError, match="no fitted factors"):
        m.recommend_ids("stranger", df, N=3)
    with pytest.raises(ValueError, match="unknown item"):
        m.similar_items_ids("no-such-item")
    with pytest.raises(ValueError, match="filter_already_liked_items"):
        m.recommend_ids("user-3", None, N=3)
    assert len(m.recommend_ids("user-3", None, N=3, filter_already_liked_items=False)[0]) == 3
    with pytest.warns(UserWarning, match="not in the model's items"):
        m.recommend_ids("newbie", new.assign(item=["item-1", "item-4", "unknown"]), N=2)


def test_recommend_ids_pads_with_none_when_items_run_out(df):
    m = ALS(factors=2, iterations=1, random_state=0).fit(df, show_progress=False)
    ids, scores = m.recommend_ids(["user-1", "user-2"], df, N=m.n_items_)
    short = [sum(i is not None for i in row) for row in ids]
    for row, k, u in zip(ids, short, ["user-1", "user-2"]):
        assert k == m.n_items_ - df.loc[df["user"] == u, "item"].nunique()
        assert all(i is None for i in row[k:]) and np.all(np.isneginf(scores[ids == None]))  # noqa: E711


def test_model_files_keep_public_ids_only(df, tmp_path):
    als = ALS(factors=2, iterations=1, random_state=0).fit(df, show_progress=False)
    als.save(tmp_path / "als.npz")
    loaded = load_model(tmp_path / "als.npz")
    assert list(loaded.user_ids_) == list(als.user_ids_) and list(loaded.item_ids_) == list(als.item_ids_)
    np.testing.assert_array_equal(loaded.recommend_ids("user-3", df, N=3)[0], als.recommend_ids("user-3", df, N=3)[0])
    # a private model: the item ids seen in training are saved (marked not public); user ids never are
    dp = DPALS(axes="warn", epsilon=5.0, factors=2, iterations=1, budget=10, random_state=0).fit(
        df, show_progress=False
    )
    dp.save(tmp_path / "dp.npz")
    plain = load_model(tmp_path / "dp.npz")
    assert list(plain.item_ids_) == list(dp.item_ids_) and getattr(plain, "user_ids_", None) is None
    catalogue = sorted(df["item"].unique()) + ["unrated-item"]
    dp2 = DPALS(axes="warn", epsilon=5.0, factors=2, iterations=1, budget=10, random_state=0).fit(
        from_pandas(df, item_ids=catalogue), show_progress=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dp2.save(tmp_path / "dp2.npz")
    with np.load(tmp_path / "dp2.npz") as npz:
        meta = json.loads(str(npz["__meta__"]))
    assert meta["item_ids"] == {"kind": "str", "values": catalogue} and "user_ids" not in meta
    released = load_model(tmp_path / "dp2.npz")
    assert list(released.item_ids_) == catalogue
    ids, _ = released.recommend_ids("user-3", df, N=3)  # projected from the given ratings
    np.testing.assert_array_equal(ids, dp2.recommend_ids("user-3", df, N=3)[0])


def test_tampered_id_maps_are_rejected(df, tmp_path):
    m = ALS(factors=2, iterations=1, random_state=0).fit(df, show_progress=False)
    m.save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    arrays.pop("__sha256__")  # a forged file without the content hash
    for bad in (
        {"kind": "str", "values": meta["item_ids"]["values"][:-1]},
        {"kind": "int", "values": meta["item_ids"]["values"]},
        {"kind": "str", "values": [meta["item_ids"]["values"][0]] * m.n_items_},
        ["not", "a", "dict"],
    ):
        forged = dict(meta, item_ids=bad)
        np.savez(tmp_path / "bad.npz", __meta__=np.array(json.dumps(forged)), **arrays)
        with pytest.raises(ValueError, match="item_ids"):
            load_model(tmp_path / "bad.npz")


def test_integer_and_mixed_ids_survive_save_load(tmp_path):
    frame = pd.DataFrame({"user": [10, 10, 20, 30], "item": ["a", 5, 5, "a"], "rating": [1.0, 2.0, 3.0, 4.0]})
    m = ALS(factors=2, iterations=1, random_state=0).fit(frame, show_progress=False)
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert back.user_ids_.dtype.kind == "i" and list(back.user_ids_) == [10, 20, 30]
    assert back.item_ids_.dtype == object and sorted(map(str, back.item_ids_)) == ["5", "a"]
    assert back.recommend_ids(20, frame, N=1)[0].tolist() == ["a"]


def test_interactions_ids_are_kept(df):
    x = from_pandas(df)
    m = ALS(factors=2, iterations=1, random_state=0).fit(x, show_progress=False)
    assert m.user_ids_ is not None
    plain = Interactions(x.matrix)  # identity ids: no map stored
    assert ALS(factors=2, iterations=1).fit(plain, show_progress=False).user_ids_ is None


def test_als_rating_range_warns_on_data_outside_it(df):
    with pytest.warns(RatingRangeWarning, match="outside the declared rating range"):
        ALS(factors=2, iterations=1, rating_range=(1, 4)).fit(df, show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ALS(factors=2, iterations=1, rating_range=(1, 5)).fit(df, show_progress=False)
    with pytest.raises(ValueError, match="rating_range"):
        ALS(rating_range=(5, 1)).fit(df, show_progress=False)
    with pytest.warns(RatingRangeWarning, match="1 of 2 ratings"):  # the base helper, for any model
        assert ALS._check_rating_range(sp.csr_matrix(np.array([[0.0, 6.0, 3.0]])), 1, 5) == 1


def test_a_given_vocabulary_changed_by_the_data_is_not_released(df, tmp_path):
    catalogue = sorted(df["item"].unique()) + ["unrated-item"]
    x = from_pandas(df, item_ids=catalogue).drop_empty()  # keeps info, but the item axis now depends on the data
    assert x.info["item_vocabulary"] == "given" and "unrated-item" not in x.item_ids
    dp = DPALS(axes="warn", epsilon=5.0, factors=2, iterations=1, budget=10, random_state=0).fit(x, show_progress=False)
    dp.save(tmp_path / "dp.npz")
    assert list(load_model(tmp_path / "dp.npz").item_ids_) == list(dp.item_ids_)
