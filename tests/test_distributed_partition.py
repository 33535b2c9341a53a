"""privrec.distributed.partition on a 2-process LocalCluster: layout, equality with the local
reader, Parquet round trip, validation. Skipped when dask.distributed (optional extra) is missing."""

import os

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed", reason="dask.distributed is optional (pip install 'privrec[dask]')")
dd = pytest.importorskip("dask.dataframe", reason="dask.dataframe is optional (pip install 'dask[dataframe]')")

from privrec.data import from_pandas  # noqa: E402
from privrec.distributed import (  # noqa: E402
    HASH_KEY,
    SerialClient,
    partition_interactions,
    partition_of,
    stable_hash,
)


def _ratings(n_rows=1500, n_users=120, n_items=40, seed=0, string_ids=True):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, n_users, n_rows)
    i = rng.integers(0, n_items, n_rows)
    df = pd.DataFrame(
        {
            "user": [f"user-{x}" for x in u] if string_ids else u * 7 - 300,  # negative ints too
            "item": [f"it{x:03d}" for x in i] if string_ids else i * 3 + 1000,
            "rating": rng.integers(1, 11, n_rows) / 2.0,
        }
    )
    return df.drop_duplicates(["user", "item"]).reset_index(drop=True)


def _blocks(parts, client):
    return client.gather(parts.blocks)


def _assert_same_layout(a, b, client_a, client_b=None):
    client_b = client_b or client_a
    assert a.n_partitions == b.n_partitions
    np.testing.assert_array_equal(a.item_ids, b.item_ids)
    np.testing.assert_array_equal(a.partition_sizes, b.partition_sizes)
    for x, y in zip(_blocks(a, client_a), _blocks(b, client_b)):
        np.testing.assert_array_equal(x.user_ids, y.user_ids)
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(x.matrix, name), getattr(y.matrix, name))
            np.testing.assert_array_equal(getattr(x.item_major, name), getattr(y.item_major, name))


def _assert_matches_local(parts, df, rating_col="rating", items=None):
    """to_local() equals the local reader's matrix with its rows put in the partitioned order."""
    local = parts.to_local()
    ref = from_pandas(df, "user", "item", rating_col, item_ids=items)
    np.testing.assert_array_equal(local.item_ids, ref.item_ids)
    assert local.user_ids.dtype.kind == ref.user_ids.dtype.kind
    rows = pd.Index(ref.user_ids).get_indexer(local.user_ids)
    assert np.all(rows >= 0) and len(np.unique(rows)) == ref.n_users == parts.n_users
    expected = ref.matrix[rows]
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(local.matrix, name), getattr(expected, name))
    assert local.matrix.dtype == np.float32
    return local


# ---------------------------------------------------------------------- stable hash


def test_stable_hash_pinned_and_dtype_independent(client):
    strings = ["alice", "bob", "u1"]
    pinned = [16730974585152296113, 15085312982200067767, 9032357615602753651]
    assert HASH_KEY == "privrec-users-v1"
    for form in (np.array(strings, dtype=object), np.array(strings), pd.Series(strings, dtype="string"), strings):
        assert stable_hash(form).tolist() == pinned
    ints = [0, 1, -5, 123456789]
    pinned_ints = [0, 6238072747940578789, 5185122842947594062, 17445968401720671584]
    for form in (
        np.array(ints, np.int64),
        np.array(ints, np.int32),
        pd.Series(ints, dtype="Int64"),
        np.array(ints, object),
    ):
        assert stable_hash(form).tolist() == pinned_ints
    assert partition_of(strings, 7).tolist() == [1, 6, 2]
    # the same on a worker process (independent of PYTHONHASHSEED / the process)
    remote = client.submit(partition_of, strings + ints, 7, pure=False).result()
    np.testing.assert_array_equal(remote, partition_of(strings + ints, 7))
    with pytest.raises(ValueError, match="n_partitions"):
        partition_of(strings, 0)


# ---------------------------------------------------------------------- layout and equality


def test_string_ids_layout_and_local_equality(client):
    df = _ratings(string_ids=True)
    parts = partition_interactions(df, n_partitions=3, client=client)
    assert parts.n_partitions == 3 and parts.nnz == len(df) and parts.n_items == df["item"].nunique()
    assert parts.info["n_partitions"] == 3 and parts.info["item_vocabulary"] == "data"
    np.testing.assert_array_equal(parts.offsets, np.r_[0, np.cumsum(parts.partition_sizes)])
    uids = parts.user_ids()
    assert uids.dtype.kind == "U"
    # partition p holds exactly the users hashed to p, sorted by id
    where = partition_of(uids, 3)
    for p in range(3):
        s, e = parts.offsets[p], parts.offsets[p + 1]
        assert np.all(where[s:e] == p)
        assert list(uids[s:e]) == sorted(uids[s:e])
    for b in _blocks(parts, client):
        m = b.matrix
        assert m.dtype == np.float32 and m.indices.dtype == np.int32 and m.has_sorted_indices
        assert (b.item_major != m.T).nnz == 0
        np.testing.assert_array_equal(b.to_item_major(m.data), b.item_major.data)
        # per-entry arrays regrouped by item, sliced per item block: the block's own entries
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
        s, e = b.entry_range(slice(5, 12))
        sub = b.item_block(slice(5, 12))
        np.testing.assert_array_equal(b.to_item_major(rows)[s:e], sub.indices)
        np.testing.assert_array_equal(b.item_major.data[s:e], sub.data)
    local = _assert_matches_local(parts, df)
    np.testing.assert_array_equal(local.user_ids, uids)
    parts.release()


def test_int_ids_implicit_and_empty_partitions(client):
    df = _ratings(n_rows=200, n_users=9, string_ids=False)
    parts = partition_interactions(df, rating_col=None, n_partitions=16, client=client)  # more partitions than users
    assert (parts.partition_sizes == 0).any() and parts.n_users == 9
    local = _assert_matches_local(parts, df, rating_col=None)
    assert local.user_ids.dtype == np.int64 and local.item_ids.dtype == np.int64
    assert np.all(local.matrix.data == 1.0)
    # map_blocks: fn(csr, offset) where the block lives; offsets are the global row offsets
    shapes = client.gather(parts.map_blocks(lambda csr, off, k: (off, csr.shape, k), "x"))
    assert [s[0] for s in shapes] == list(parts.offsets[:-1])
    assert [s[1][0] for s in shapes] == list(parts.partition_sizes)
    assert all(s[1][1] == parts.n_items and s[2] == "x" for s in shapes)


def test_layout_independent_of_input_partitioning_and_shuffle(client):
    """The same data through differently partitioned inputs and shuffle methods: identical blocks."""
    df = _ratings(seed=1)
    a = partition_interactions(df, n_partitions=4, client=client)
    shuffled_rows = df.sample(frac=1.0, random_state=3)
    b = partition_interactions(
        dd.from_pandas(shuffled_rows, npartitions=7, sort=False), n_partitions=4, client=client, shuffle_method="tasks"
    )
    _assert_same_layout(a, b, client)
    # the in-process SerialClient builds the very same blocks
    s = partition_interactions(df, n_partitions=4, client=SerialClient())
    _assert_same_layout(a, s, client, s.client)


def test_parquet_round_trip(client, tmp_path):
    df = _ratings(seed=2)
    folder = tmp_path / "ratings"
    folder.mkdir()
    bounds = np.linspace(0, len(df), 4).astype(int)
    for k in range(3):  # a partitioned data set: three files
        df.iloc[bounds[k] : bounds[k + 1]].to_parquet(folder / f"part-{k}.parquet", index=False)
    ref = partition_interactions(df, n_partitions=3, client=client)
    from_dir = partition_interactions(str(folder), n_partitions=3, client=client)
    from_glob = partition_interactions(os.path.join(folder, "part-*.parquet"), n_partitions=3, client=client)
    _assert_same_layout(ref, from_dir, client)
    _assert_same_layout(ref, from_glob, client)
    _assert_matches_local(from_glob, df)


def test_given_item_vocabulary(client):
    df = _ratings(n_rows=300, seed=4)
    catalogue = np.array(sorted(set(df["item"]) | {"zz-unrated", "aa-unrated"}))[::-1]  # public order, extra items
    parts = partition_interactions(df, n_partitions=2, items=catalogue, client=client)
    np.testing.assert_array_equal(parts.item_ids, catalogue)
    assert parts.info["item_vocabulary"] == "given"
    _assert_matches_local(parts, df, items=catalogue)
    with pytest.raises(ValueError, match=r"not in the given item vocabulary"):
        partition_interactions(df, n_partitions=2, items=catalogue[:5], client=client)
    with pytest.raises(ValueError, match="repeated"):
        partition_interactions(df, n_partitions=2, items=["a", "a"], client=client)


# ---------------------------------------------------------------------- validation


def test_validation_errors(client):
    df = _ratings(n_rows=200, seed=5)
    with pytest.raises(ValueError, match=r"rating_col='score' is not a column.*rating_col=None"):
        partition_interactions(df, rating_col="score", n_partitions=2, client=client)
    with pytest.raises(ValueError, match="user_col='who' is not a column"):
        partition_interactions(df, user_col="who", n_partitions=2, client=client)
    with pytest.raises(ValueError, match="empty"):
        partition_interactions(df.iloc[:0], n_partitions=2, client=client)
    with pytest.raises(ValueError, match="duplicates must be one of"):
        partition_interactions(df, n_partitions=2, duplicates="last", client=client)
    with pytest.raises(ValueError, match="n_partitions"):
        partition_interactions(df, n_partitions=0, client=client)
    bad = df.copy()
    bad.loc[[3, 50, 120], "rating"] = [np.nan, np.inf, -np.inf]
    with pytest.raises(ValueError, match=r"^rating column 'rating' has 3 NaN or infinite value\(s\)$"):
        partition_interactions(bad, n_partitions=3, client=client)
    bad = df.copy()
    bad["rating"] = bad["rating"].astype(str) + "x"
    with pytest.raises(ValueError, match="must be numeric"):
        partition_interactions(bad, n_partitions=2, client=client)
    bad = df.astype({"user": object})
    bad.loc[[1, 2], "user"] = None
    with pytest.raises(ValueError, match=r"user column 'user' has 2 missing"):
        partition_interactions(bad, n_partitions=2, client=client)
    bad = df.astype({"item": object})
    bad.loc[7, "item"] = None
    with pytest.raises(ValueError, match=r"item column 'item' has 1 missing"):
        partition_interactions(bad, n_partitions=2, client=client)


def test_duplicates_policy_matches_local(client):
    df = _ratings(n_rows=400, seed=6)
    dup = pd.concat([df, df.iloc[:25].assign(rating=1.5), df.iloc[10:12]], ignore_index=True)
    with pytest.raises(ValueError, match=r"^27 duplicate \(user, item\) row\(s\) in the rating table"):
        partition_interactions(dup, n_partitions=3, client=client)
    for policy in ("sum", "max"):
        parts = partition_interactions(
            dup.sample(frac=1.0, random_state=0), n_partitions=3, duplicates=policy, client=client
        )
        local = parts.to_local()
        with pytest.warns(UserWarning, match="duplicate"):
            ref = from_pandas(dup, duplicates=policy)
        rows = pd.Index(ref.user_ids).get_indexer(local.user_ids)
        np.testing.assert_array_equal(local.matrix.indices, ref.matrix[rows].indices)
        np.testing.assert_allclose(local.matrix.data, ref.matrix[rows].data, rtol=1e-6)


# ---------------------------------------------------------------------- bad inputs (issue 26)


def test_parquet_files_with_mixed_id_types_missing_columns_or_no_match(client, tmp_path):
    """Checked file by file before Dask reads them (they used to end in RuntimeError: P2P ... unpack,
    a KeyError, or "columns are []")."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pd.DataFrame({"user": [1, 2, 3], "item": [1, 2, 3], "rating": [1.0, 2.0, 3.0]}).to_parquet(mixed / "a.parquet")
    pd.DataFrame({"user": ["x", "y"], "item": [1, 2], "rating": [1.0, 2.0]}).to_parquet(mixed / "b.parquet")
    with pytest.raises(
        ValueError, match=r"user column 'user' has type int64 in .*a\.parquet but .*string in .*b\.parquet"
    ):
        partition_interactions(str(mixed), n_partitions=2, client=client)
    with pytest.raises(ValueError, match="one type"):
        partition_interactions(str(mixed / "*.parquet"), n_partitions=2, client=client)
    gap = tmp_path / "gap"
    gap.mkdir()
    pd.DataFrame({"user": [1, 2], "item": [1, 2], "rating": [1.0, 2.0]}).to_parquet(gap / "a.parquet")
    pd.DataFrame({"user": [4, 5], "item": [1, 2]}).to_parquet(gap / "b.parquet")
    with pytest.raises(ValueError, match=r"rating_col='rating' is not a column of .*b\.parquet"):
        partition_interactions(str(gap), n_partitions=2, client=client)
    with pytest.raises(ValueError, match="no files match"):
        partition_interactions(str(tmp_path / "nothing-*.parquet"), n_partitions=2, client=client)
    with pytest.raises(ValueError, match="no such file"):
        partition_interactions(str(tmp_path / "absent.parquet"), n_partitions=2, client=client)
    # integer ratings in one file and float ones in another are one kind: accepted
    pd.DataFrame({"user": [4, 5], "item": [1, 2], "rating": [1, 2]}).to_parquet(gap / "b.parquet")
    assert partition_interactions(str(gap), n_partitions=2, client=SerialClient()).nnz == 4


def test_datetime_ratings_and_unhashable_ids_are_refused(client, tmp_path):
    df = _ratings(n_rows=60, n_users=10, seed=7)
    for bad in (pd.date_range("2020", periods=len(df)), pd.to_timedelta(np.arange(len(df)), unit="s")):
        with pytest.raises(ValueError, match="rating column 'rating' must be numeric"):
            partition_interactions(df.assign(rating=bad), n_partitions=2, client=client)
    df.assign(rating=pd.date_range("2020", periods=len(df))).to_parquet(tmp_path / "dt.parquet")
    with pytest.raises(ValueError, match=r"rating column 'rating' of .*dt\.parquet has type timestamp"):
        partition_interactions(str(tmp_path / "dt.parquet"), n_partitions=2, client=client)
    with pytest.raises(ValueError, match="user column 'user' holds an id of type list"):
        partition_interactions(df.assign(user=[[k] for k in range(len(df))]), n_partitions=2, client=client)


def test_partitions_are_capped_by_the_number_of_users(client):
    """More partitions than users used to run every empty one (10000 partitions, 40 users: 81 s)."""
    df = _ratings(n_rows=60, n_users=5, seed=8, string_ids=False)
    parts = partition_interactions(df, n_partitions=500, client=client)
    assert parts.n_partitions == df["user"].nunique() == parts.n_users
    assert parts.info["n_partitions_requested"] == 500
    _assert_matches_local(parts, df)
    parts.release()


def test_a_closed_client_is_a_clear_error(client):
    other = distributed.Client(client.scheduler.address)
    other.close()
    with pytest.raises(ValueError, match="the Dask client is closed"):
        partition_interactions(_ratings(n_rows=20), n_partitions=2, client=other)
