"""privrec.distributed.reduce: fixed-tree, item-blocked reductions on a 2-process LocalCluster --
sums equal numpy's, results bit-identical across runs / schedules / executors / a killed worker,
seeded roots reproduce their noise. Skipped when dask.distributed (optional extra) is missing."""

import os

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed", reason="dask.distributed is optional (pip install 'privrec[dask]')")
dd = pytest.importorskip("dask.dataframe", reason="dask.dataframe is optional (pip install 'dask[dataframe]')")

from privrec.distributed import (  # noqa: E402
    SerialClient,
    block_seeds,
    item_blocks,
    partition_interactions,
    reduce_item_blocks,
    stable_hash,
    sum_in_order,
    summation_tree,
    tree_sum,
)
from privrec.distributed._client import SerialFuture  # noqa: E402

D = 4  # feature dimension of the test statistics
N_ITEMS = 45
BLOCK = 7  # 7 item blocks, the last one of 3 items


@pytest.fixture(scope="module")
def ratings():
    rng = np.random.default_rng(0)
    n = 2500
    df = pd.DataFrame(
        {
            "user": [f"u{x}" for x in rng.integers(0, 260, n)],
            "item": rng.integers(0, N_ITEMS, n),
            "rating": rng.normal(size=n).astype(np.float32),
        }
    )
    return df.drop_duplicates(["user", "item"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def parts(client, ratings):
    return partition_interactions(ratings, n_partitions=5, client=client)


# ---------------------------------------------------------------------- task functions (module level: picklable)


def user_features(block, offset, d=D):
    """Deterministic float32 features of each user, from its id only (independent of the partitioning)."""
    h = stable_hash(block.user_ids)
    cols = [((h >> np.uint64(8 * j)) & np.uint64(0xFFFF)).astype(np.float64) / 65535.0 - 0.5 for j in range(d)]
    return np.stack(cols, axis=1).astype(np.float32) if len(h) else np.zeros((0, d), np.float32)


def ssp_partial(block, offset, items, U):
    """float32 Gramians sum_u x_u x_u^T and RHS sum_u r_ui x_u of the items in ``items`` over this partition."""
    sub = block.item_block(items)
    d = U.shape[1]
    G = np.zeros((sub.shape[0], d, d), dtype=np.float32)
    b = np.zeros((sub.shape[0], d), dtype=np.float32)
    for i in range(sub.shape[0]):
        s, e = sub.indptr[i], sub.indptr[i + 1]
        X = U[sub.indices[s:e]]
        G[i] = X.T @ X
        b[i] = sub.data[s:e] @ X
    return G, b


def noisy_finish(stats, k, seed, std=0.5):
    """The root: add seeded Gaussian noise once to each released statistic of block k."""
    G, b = stats
    rng = np.random.default_rng(seed)
    return G + rng.normal(0.0, std, G.shape).astype(np.float32), b + rng.normal(0.0, std, b.shape).astype(np.float32), k


def crash_once(marker):
    """Kill this worker process the first time it is called (the marker file records it)."""
    if not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(str(os.getpid()))
        os._exit(1)


def crashing_partial(block, offset, items, U, marker):
    if offset == 0 and items.start == BLOCK:  # partition 0, item block 1
        crash_once(marker)
    return ssp_partial(block, offset, items, U)


def crashing_finish(stats, k, seed, marker):
    if k == 2:
        crash_once(marker)
    return noisy_finish(stats, k, seed)


def item_counts(csr, offset):
    return np.bincount(csr.indices, minlength=csr.shape[1]).astype(np.int64)


def column_sums(csr, offset):
    return np.asarray(csr.sum(axis=0, dtype=np.float32)).ravel()


# ---------------------------------------------------------------------- helpers


def _reference(parts):
    """numpy statistics on the whole matrix (driver side), in float64."""
    local = parts.to_local()
    U = np.concatenate(parts.client.gather(parts.map_partitions(user_features))).astype(np.float64)
    T = local.item_user  # items x users
    G = np.zeros((local.n_items, D, D))
    b = np.zeros((local.n_items, D))
    for i in range(local.n_items):
        s, e = T.indptr[i], T.indptr[i + 1]
        X = U[T.indices[s:e]]
        G[i], b[i] = X.T @ X, T.data[s:e].astype(np.float64) @ X
    return G, b


def _run(parts, seeds, **kw):
    U = parts.map_partitions(user_features)
    return reduce_item_blocks(
        parts, ssp_partial, item_blocks(parts.n_items, BLOCK), noisy_finish, seeds=seeds, per_partition=[U], **kw
    )


def _assert_identical(a, b):
    assert len(a) == len(b)
    for (Ga, ba, ka), (Gb, bb, kb) in zip(a, b):
        assert ka == kb
        assert Ga.tobytes() == Gb.tobytes() and ba.tobytes() == bb.tobytes()


# ---------------------------------------------------------------------- layout helpers (no cluster)


def test_summation_tree_and_blocks():
    assert summation_tree(1, 8) == [[(0, 1)]]
    assert summation_tree(8, 8) == [[(0, 8)]]
    assert summation_tree(9, 8) == [[(0, 8), (8, 9)], [(0, 2)]]
    for n in range(1, 40):
        for f in (2, 3, 8):
            levels = summation_tree(n, f)
            width = n
            for groups in levels:  # each level partitions the previous one into consecutive groups <= f
                assert groups[0][0] == 0 and groups[-1][1] == width
                assert all(e - s <= f and s < e for s, e in groups)
                assert all(g[1] == h[0] for g, h in zip(groups, groups[1:]))
                width = len(groups)
            assert width == 1
    assert item_blocks(10, 4) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert item_blocks(0, 4) == []
    with pytest.raises(ValueError, match="fan_in"):
        summation_tree(5, 1)
    with pytest.raises(ValueError, match="block_size"):
        item_blocks(5, 0)


def test_block_seeds_are_reproducible_and_independent():
    root = np.random.SeedSequence(1234)
    a = block_seeds(root, 3, 7)
    b = block_seeds(root, 3, 7)
    assert root.n_children_spawned == 0  # not mutated (SeedSequence.spawn would be)
    assert [s.generate_state(4).tolist() for s in a] == [s.generate_state(4).tolist() for s in b]
    # the k-th seed is what root.spawn would give at path (7, k); other paths differ
    assert a[1].spawn_key == (7, 1) and a[1].entropy == 1234
    c = block_seeds(1234, 3, 8)
    assert len({tuple(s.generate_state(4)) for s in a + c}) == 6
    draws = [np.random.default_rng(s).standard_normal(3) for s in (a[0], block_seeds(1234, 1, 7)[0])]
    np.testing.assert_array_equal(*draws)


def test_sum_in_order_structures_and_read_only_inputs():
    x = np.arange(4.0)
    x.flags.writeable = False  # as buffers received from a peer can be
    out = sum_in_order((x, {"n": 1}), (x, {"n": 2}), (x, {"n": 3}))
    np.testing.assert_array_equal(out[0], 3 * x)
    assert out[1] == {"n": 6}
    np.testing.assert_array_equal(x, np.arange(4.0))  # inputs untouched
    with pytest.raises(ValueError, match="shape"):
        sum_in_order(np.zeros(3), np.zeros(4))


class _RecordingClient(SerialClient):
    """SerialClient that records how many futures each task receives."""

    def __init__(self):
        self.calls = []

    def submit(self, fn, *args, key=None, **kw):
        n_futures = sum(isinstance(a, SerialFuture) for a in args)
        self.calls.append((fn.__name__, key, n_futures))
        return super().submit(fn, *args, key=key, **kw)


def test_no_task_adds_more_than_fan_in_partials(ratings):
    rec = _RecordingClient()
    parts = partition_interactions(ratings, n_partitions=11, client=rec)
    rec.calls.clear()
    U = parts.map_partitions(user_features)
    blocks = item_blocks(parts.n_items, BLOCK)
    reduce_item_blocks(parts, ssp_partial, blocks, None, per_partition=[U], fan_in=3)
    sums = [c for c in rec.calls if c[0] in ("sum_in_order", "_root")]
    leaves = [c for c in rec.calls if c[0] == "_leaf"]
    assert len(leaves) == 11 * len(blocks)
    assert all(n <= 3 for _, _, n in sums)
    # 11 leaves -> 4 sums (3+3+3+2) -> 1 sum (3) and 1 pass-through -> root over 2: 6 adding tasks per block
    assert len(sums) == len(blocks) * 6
    # every adding task belongs to one item block (its key names it), and so do its inputs' leaves
    for k in range(len(blocks)):
        assert sum(f"-b{k}-" in key for _, key, _ in sums) == 6


# ---------------------------------------------------------------------- on the cluster


def test_tree_sum_matches_numpy_and_is_reproducible(client, parts):
    local = parts.to_local()
    counts = tree_sum(parts.map_blocks(item_counts), fan_in=2).result()
    np.testing.assert_array_equal(counts, local.item_counts)
    sums = [tree_sum(parts.map_blocks(column_sums), fan_in=2).result() for _ in range(2)]
    assert sums[0].dtype == np.float32 and sums[0].tobytes() == sums[1].tobytes()
    np.testing.assert_allclose(
        sums[0], np.asarray(local.matrix.sum(axis=0, dtype=np.float64)).ravel(), rtol=1e-5, atol=1e-4
    )
    total = tree_sum([client.submit(lambda x: x, float(v)) for v in range(10)], fan_in=3).result()
    assert total == 45.0
    with pytest.raises(ValueError, match="at least one"):
        tree_sum([], client=client)


def test_reduction_equals_numpy_and_is_bit_identical(client, ratings, parts):
    G_ref, b_ref = _reference(parts)
    blocks = item_blocks(parts.n_items, BLOCK)
    exact = reduce_item_blocks(
        parts, ssp_partial, blocks, None, per_partition=[parts.map_partitions(user_features)], fan_in=2
    )
    np.testing.assert_allclose(np.concatenate([g for g, _ in exact]), G_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([b for _, b in exact]), b_ref, rtol=1e-5, atol=1e-5)

    seeds = block_seeds(np.random.SeedSequence(99), len(blocks), 1)
    first = _run(parts, seeds, fan_in=2)
    assert [k for _, _, k in first] == list(range(len(blocks)))
    _assert_identical(first, _run(parts, seeds, fan_in=2))  # a second run
    _assert_identical(first, _run(parts, seeds, fan_in=2, max_in_flight=1))  # another schedule
    _assert_identical(first, _run(parts, seeds, fan_in=2, max_in_flight=len(blocks)))
    # the same partitioning rebuilt from a differently partitioned input, with another shuffle method
    again = partition_interactions(
        dd.from_pandas(ratings.sample(frac=1.0, random_state=5), npartitions=6, sort=False),
        n_partitions=5,
        client=client,
        shuffle_method="tasks",
    )
    _assert_identical(first, _run(again, seeds, fan_in=2))
    # the same tasks in-process (SerialClient): the same bits as on the cluster
    serial = partition_interactions(ratings, n_partitions=5, client=SerialClient())
    _assert_identical(first, _run(serial, seeds, fan_in=2))
    # the noise is the only difference from the exact sums, and it depends on the seeds
    other = _run(parts, block_seeds(np.random.SeedSequence(100), len(blocks), 1), fan_in=2)
    assert not np.array_equal(first[0][0], other[0][0])
    # another partitioning changes the summation order only: equal within float tolerance
    three = partition_interactions(ratings, n_partitions=3, client=client)
    exact3 = reduce_item_blocks(
        three, ssp_partial, blocks, None, per_partition=[three.map_partitions(user_features)], fan_in=2
    )
    np.testing.assert_allclose(np.concatenate([g for g, _ in exact3]), G_ref, rtol=1e-5, atol=1e-5)
    # gather=False keeps the roots on the workers
    futs = _run(parts, seeds, fan_in=2, gather=False)
    _assert_identical(first, client.gather(futs))


def test_killed_worker_during_reduction_gives_identical_result(client, parts, tmp_path):
    blocks = item_blocks(parts.n_items, BLOCK)
    seeds = block_seeds(np.random.SeedSequence(7), len(blocks), 3)
    ref = _run(parts, seeds, fan_in=2)
    marker = str(tmp_path / "leaf-crashed")
    U = parts.map_partitions(user_features)
    out = reduce_item_blocks(
        parts, crashing_partial, blocks, noisy_finish, seeds=seeds, per_partition=[U], args=(marker,), fan_in=2
    )
    assert os.path.exists(marker)  # a worker process really died (and the blocks it held were rebuilt)
    _assert_identical(ref, out)
    client.wait_for_workers(2, timeout=180)  # a restarted worker re-imports under the suite's load
    # a root killed after summing, before returning: rerun with the same seed, the same noise
    marker = str(tmp_path / "root-crashed")
    out = reduce_item_blocks(
        parts,
        ssp_partial,
        blocks,
        crashing_finish,
        seeds=seeds,
        per_partition=[U],
        finish_args=(marker,),
        fan_in=2,
        max_in_flight=2,
    )
    assert os.path.exists(marker)
    _assert_identical(ref, out)
    client.wait_for_workers(2, timeout=180)  # a restarted worker re-imports under the suite's load


def test_argument_errors_and_task_errors(client, parts):
    blocks = item_blocks(parts.n_items, BLOCK)
    with pytest.raises(ValueError, match="seeds has 2 entries"):
        reduce_item_blocks(parts, ssp_partial, blocks, noisy_finish, seeds=[1, 2])
    with pytest.raises(ValueError, match="blocks must be slices"):
        reduce_item_blocks(parts, ssp_partial, [range(3)])
    with pytest.raises(ValueError, match="per_partition"):
        reduce_item_blocks(parts, ssp_partial, blocks, per_partition=[[None]])
    with pytest.raises(ValueError, match="fan_in"):
        reduce_item_blocks(parts, ssp_partial, blocks, fan_in=1)
    # a task error surfaces on the driver as itself
    with pytest.raises(ValueError, match="differ in shape"):
        reduce_item_blocks(
            parts,
            lambda block, off, items: np.zeros(1 + block.index % 2),
            blocks,
            max_in_flight=2,
        )
    assert reduce_item_blocks(parts, ssp_partial, []) == []
