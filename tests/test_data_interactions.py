"""Behaviour of privrec.data.Interactions (CONTRIBUTING.md contract)."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from privrec.data import Interactions


def _small():
    users = np.array(["b", "a", "a", "c", "b", "a"])
    items = np.array([30, 10, 20, 10, 10, 30])
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    ts = np.array([100, 101, 102, 103, 104, 105])
    return Interactions.from_arrays(users, items, vals, timestamps=ts, name="small")


def test_layout_and_id_maps():
    x = _small()
    m = x.matrix
    assert sp.isspmatrix_csr(m) and m.data.dtype == np.float32 and m.indices.dtype == np.int32
    assert m.has_sorted_indices
    assert list(x.user_ids) == ["a", "b", "c"] and list(x.item_ids) == [10, 20, 30]
    dense = m.toarray()
    np.testing.assert_array_equal(dense, [[2, 3, 6], [5, 0, 1], [4, 0, 0]])
    # timestamps follow matrix.data
    np.testing.assert_array_equal(x.timestamps, [101, 102, 105, 104, 100, 103])
    assert (x.n_users, x.n_items, x.nnz) == (3, 3, 6)
    np.testing.assert_array_equal(x.user_counts, [3, 2, 1])
    np.testing.assert_array_equal(x.item_counts, [3, 1, 2])
    assert x.density == pytest.approx(6 / 9)


def test_item_user_is_cached_transpose():
    x = _small()
    t = x.item_user
    assert t is x.item_user
    assert t.shape == (3, 3) and t.indices.dtype == np.int32 and t.data.dtype == np.float32
    np.testing.assert_array_equal(t.toarray(), x.matrix.toarray().T)


def test_to_pandas_roundtrip():
    x = _small()
    df = x.to_pandas(indices=True)
    assert list(df.columns) == ["user_id", "item_id", "value", "timestamp", "user_index", "item_index"]
    y = Interactions.from_arrays(
        df.user_id.to_numpy(), df.item_id.to_numpy(), df.value.to_numpy(), timestamps=df.timestamp.to_numpy()
    )
    assert (y.matrix != x.matrix).nnz == 0
    np.testing.assert_array_equal(y.timestamps, x.timestamps)


def test_index_lookup():
    x = _small()
    np.testing.assert_array_equal(x.user_index(["c", "a"]), [2, 0])
    assert x.item_index(20) == 1
    with pytest.raises(ValueError, match="unknown item"):
        x.item_index([99])


@pytest.mark.parametrize("policy,expected,ts", [("last", 7.0, 3), ("first", 1.0, 1), ("sum", 13.0, 3), ("max", 7.0, 3)])
def test_duplicate_policies_are_reported(policy, expected, ts):
    users = [1, 1, 2, 1]
    items = [5, 5, 5, 5]
    vals = [1.0, 5.0, 2.0, 7.0]
    with pytest.warns(UserWarning, match="2 duplicate"):
        x = Interactions.from_arrays(users, items, vals, timestamps=[1, 2, 9, 3], duplicates=policy)
    assert x.info["duplicate_rows"] == 2 and x.info["duplicate_policy"] == policy
    assert x.matrix[0, 0] == expected and x.nnz == 2
    assert x.timestamps[0] == (ts if policy != "max" else 3)


def test_duplicates_error_and_no_warning_when_clean():
    with pytest.raises(ValueError, match="duplicate"):
        Interactions.from_arrays([1, 1], [2, 2], duplicates="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = Interactions.from_arrays([1, 2], [2, 2])
    assert x.info["duplicate_rows"] == 0
    np.testing.assert_array_equal(x.matrix.data, [1.0, 1.0])


def test_bad_input():
    with pytest.raises(ValueError, match="empty"):
        Interactions.from_arrays([], [])
    with pytest.raises(ValueError, match="NaN"):
        Interactions.from_arrays([1, 2], [1, 2], [1.0, np.nan])
    with pytest.raises(ValueError, match="numeric"):
        Interactions.from_arrays([1, 2], [1, 2], np.array(["x", "y"]))
    with pytest.raises(ValueError, match="length"):
        Interactions.from_arrays([1, 2], [1])
    with pytest.raises(ValueError, match="duplicates must be"):
        Interactions.from_arrays([1], [1], duplicates="mean")
    with pytest.raises(ValueError, match="empty"):
        Interactions(sp.csr_matrix((2, 2), dtype=np.float32))
    dup = sp.csr_matrix((np.ones(2), np.array([1, 1]), np.array([0, 2])), shape=(1, 3))
    with pytest.raises(ValueError, match="duplicate"):
        Interactions(dup)


def test_vocabulary_fixes_indexing():
    x = Interactions.from_arrays([1, 2], ["b", "a"], item_ids=np.array(["z", "a", "b"]))
    assert x.n_items == 3 and x.matrix[0, 2] == 1 and x.matrix[1, 1] == 1
    with pytest.raises(ValueError, match="not in the given vocabulary"):
        Interactions.from_arrays([1], ["q"], item_ids=np.array(["a"]))


def test_subset_users_keeps_items_and_timestamps():
    x = _small()
    s = x.subset_users([2, 0])
    assert list(s.user_ids) == ["c", "a"] and s.n_items == 3
    np.testing.assert_array_equal(s.matrix.toarray(), x.matrix.toarray()[[2, 0]])
    np.testing.assert_array_equal(s.timestamps, [103, 101, 102, 105])
    m = x.subset_users(np.array([False, True, False]))
    assert list(m.user_ids) == ["b"]
    with pytest.raises(ValueError):
        x.subset_users([5])
    with pytest.raises(ValueError):
        x.subset_users([0, 0])


def test_subset_items_reindexes_and_carries_metadata():
    x = _small()
    meta = pd.DataFrame({"title": ["t10", "t20", "t30"], "genres": ["g", "h", "i"]})
    x = Interactions(x.matrix, x.user_ids, x.item_ids, x.timestamps, meta, name="m")
    s = x.subset_items([2, 0])
    assert list(s.item_ids) == [30, 10] and list(s.item_metadata.title) == ["t30", "t10"]
    np.testing.assert_array_equal(s.matrix.toarray(), x.matrix.toarray()[:, [2, 0]])
    assert s.matrix.has_sorted_indices
    # timestamp of (a, 30) is 105, (a, 10) is 101; row a now [30, 10] -> columns [0, 1]
    df = s.to_pandas()
    got = dict(zip(zip(df.user_id, df.item_id), df.timestamp))
    assert got[("a", 30)] == 105 and got[("a", 10)] == 101 and got[("c", 10)] == 103
    with pytest.raises(ValueError, match="empty"):
        Interactions.from_arrays([1, 2], [1, 2]).subset_items([0]).subset_users([1])


def test_binarize_and_drop_empty():
    x = _small()
    b = x.binarize(3.5)
    assert b.shape == x.shape
    np.testing.assert_array_equal(b.matrix.toarray(), (x.matrix.toarray() > 3.5).astype(np.float32))
    d = b.drop_empty()
    assert d.n_items == 2 and list(d.item_ids) == [10, 30]
    with pytest.raises(ValueError, match="empty"):
        x.binarize(100)


def test_large_random_equivalence_with_scipy():
    rng = np.random.default_rng(0)
    u = rng.integers(0, 500, 20000)
    i = rng.integers(0, 300, 20000)
    v = rng.random(20000)
    with pytest.warns(UserWarning):
        x = Interactions.from_arrays(u, i, v, duplicates="sum")
    ref = sp.coo_matrix((v, (u, i))).tocsr()  # coo->csr sums duplicates
    ref = ref[np.unique(u)][:, np.unique(i)]
    np.testing.assert_allclose(x.matrix.toarray(), ref.toarray(), rtol=1e-5)
    assert x.info["duplicate_rows"] == 20000 - ref.nnz


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(-3, 4), st.integers(0, 9)), min_size=1, max_size=40),
    st.sampled_from(["last", "first", "sum", "max"]),
)
def test_duplicate_policy_matches_pandas_groupby(rows, policy):
    df = pd.DataFrame(rows, columns=["u", "i", "v"])
    df["t"] = np.arange(len(df)) * 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = Interactions.from_arrays(
            df.u.to_numpy(), df.i.to_numpy(), df.v.to_numpy(), timestamps=df.t.to_numpy(), duplicates=policy
        )
    g = df.groupby(["u", "i"], sort=True)
    ref = {
        "last": g.last(),
        "first": g.first(),
        "sum": g.agg({"v": "sum", "t": "max"}),
        "max": g.agg({"v": "max", "t": "max"}),
    }[policy]
    got = x.to_pandas().set_index(["user_id", "item_id"])
    assert x.info["duplicate_rows"] == len(df) - len(ref)
    np.testing.assert_array_equal(got.value.to_numpy(), ref.v.to_numpy().astype(np.float32))
    np.testing.assert_array_equal(got.timestamp.to_numpy(), ref.t.to_numpy())
    assert list(got.index) == list(ref.index)
