"""Per-user sampling keyed on a stable user id (issue 25, item 3).

With a fixed (known) sampling key, removing one user must leave every other user's sample -- the
count / mean samples and the uniform / tail / adaptive allocations -- exactly unchanged. Keyed on
the row index (main e1944d7) it did not: deleting a user renumbered every later user."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from privrec import allocation
from privrec.allocation import (
    adaptive_weights,
    sampled_item_counts,
    sampled_rating_sum,
    stable_user_keys,
    tail_weights,
    uniform_weights,
)
from privrec.allocation._rows import sample_per_row
from privrec.data import from_pandas
from privrec.models import DPALS
from privrec.pipeline import PrivatePipeline


def _data(seed: int, n_users: int = 40, n_items: int = 30):
    """Ratings in 1..5 (many rows longer than the samples below) and shuffled string ids."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 16, n_users)
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    indices = np.concatenate([np.sort(rng.choice(n_items, n, replace=False)) for n in lengths]).astype(np.int32)
    data = rng.integers(1, 6, indices.size).astype(np.float32)
    R = sp.csr_matrix((data, indices, indptr), shape=(n_users, n_items))
    ids = np.array([f"user-{v}" for v in rng.permutation(10 * n_users)[:n_users]])
    counts = rng.integers(1, 20, n_items).astype(np.float64)  # released (public) counts, held fixed
    return R, ids, counts


def _without(R: sp.csr_matrix, ids: np.ndarray, j: int):
    keep = np.delete(np.arange(R.shape[0]), j)
    return R[keep], ids[keep], keep


def _rows_equal(a: sp.csr_matrix, b: sp.csr_matrix) -> None:
    """Same sampled entries and weights (explicit zeros are the dropped entries)."""
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)


SAMPLERS = {
    "uniform": lambda R, counts, key, keys: uniform_weights(R, 4, key=key, user_keys=keys),
    "tail": lambda R, counts, key, keys: tail_weights(R, counts, 4, key=key, user_keys=keys),
    "adaptive": lambda R, counts, key, keys: adaptive_weights(R, counts, 0.5, 4.0),
    "adaptive-global": lambda R, counts, key, keys: adaptive_weights(R, counts, 0.5, 4.0, mode="global", n_users=50),
    "count sample": lambda R, counts, key, keys: sp.csr_matrix(
        (sample_per_row(R.indptr, R.indices, 3, key, user_keys=keys).astype(np.float32), R.indices, R.indptr),
        shape=R.shape,
    ),
}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), key=st.integers(0, 2**63 - 2), j=st.integers(0, 39))
@pytest.mark.parametrize("kind", list(SAMPLERS))
def test_removing_a_user_leaves_every_other_users_sample_unchanged(kind, seed, key, j):
    R, ids, counts = _data(seed)
    R2, ids2, keep = _without(R, ids, j)
    full = SAMPLERS[kind](R, counts, key, stable_user_keys(ids))
    less = SAMPLERS[kind](R2, counts, key, stable_user_keys(ids2))
    _rows_equal(full[keep], less)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), key=st.integers(0, 2**63 - 2), j=st.integers(0, 39))
def test_sampled_statistics_change_by_the_removed_users_own_sample_only(seed, key, j):
    R, ids, _ = _data(seed)
    R2, ids2, _ = _without(R, ids, j)
    keys, keys2 = stable_user_keys(ids), stable_user_keys(ids2)
    k = 3
    diff = sampled_item_counts(R, k, key, user_keys=keys) - sampled_item_counts(R2, k, key, user_keys=keys2)
    own = sampled_item_counts(R[j : j + 1], k, key, user_keys=keys[j : j + 1])
    np.testing.assert_array_equal(diff, own)  # 0/1 on user j's items, at most k of them
    assert own.sum() == min(k, R[j].nnz) and set(np.flatnonzero(own)) <= set(R[j].indices)
    total, n = sampled_rating_sum(R, k, key, 4.0, user_keys=keys)
    total2, n2 = sampled_rating_sum(R2, k, key, 4.0, user_keys=keys2)
    own_total, own_n = sampled_rating_sum(R[j : j + 1], k, key, 4.0, user_keys=keys[j : j + 1])
    assert n - n2 == own_n and total - total2 == pytest.approx(own_total, abs=1e-9)


def test_row_keyed_sampling_renumbers_later_users():
    """The bare-matrix default keys on the row index (the id of a bare matrix): deleting row 0
    renumbers every later row and changes their samples -- why fits with ids pass user_keys."""
    R, ids, counts = _data(1)
    R2, _, keep = _without(R, ids, 0)
    full, less = uniform_weights(R, 4, key=123), uniform_weights(R2, 4, key=123)
    assert not np.array_equal(full[keep].data, less.data)


def test_user_keys_are_a_function_of_the_id_alone():
    ids = np.array([5, 17, 3, 40])
    np.testing.assert_array_equal(stable_user_keys(ids.astype(np.int32)), stable_user_keys(ids))
    np.testing.assert_array_equal(stable_user_keys(list(ids)), stable_user_keys(ids))
    np.testing.assert_array_equal(stable_user_keys(ids)[[2, 0]], stable_user_keys(ids[[2, 0]]))
    strings = np.array(["a", "b", "c"])
    np.testing.assert_array_equal(stable_user_keys(strings.astype(object)), stable_user_keys(strings))
    assert stable_user_keys(ids).dtype == np.uint64 and len(set(stable_user_keys(np.arange(1000)))) == 1000
    # row order does not matter either: the same user draws the same sample wherever its row is
    R, sids, counts = _data(2)
    perm = np.random.default_rng(0).permutation(R.shape[0])
    a = tail_weights(R, counts, 3, key=9, user_keys=stable_user_keys(sids))
    b = tail_weights(R[perm], counts, 3, key=9, user_keys=stable_user_keys(sids[perm]))
    _rows_equal(a[perm], b)


def test_user_keys_are_checked():
    R, ids, counts = _data(3)
    with pytest.raises(ValueError, match="one integer key per row"):
        uniform_weights(R, 2, key=1, user_keys=stable_user_keys(ids[:-1]))
    with pytest.raises(ValueError, match="one integer key per row"):
        sampled_item_counts(R, 2, 1, user_keys=ids)


def test_pipeline_threads_user_keys():
    R, ids, counts = _data(4)
    R2, ids2, keep = _without(R, ids, 7)

    def pipe():
        return PrivatePipeline(
            epsilon=2.0,
            delta=1e-5,
            pre_labels=["item counts"],
            train_plan=lambda s: [],
            count_fraction=0.5,
            rng=np.random.default_rng(0),
        )

    for kind in ("uniform", "tail", "adaptive"):
        a = pipe().allocate(R, counts, kind, 4.0, 0.5, user_keys=stable_user_keys(ids))
        b = pipe().allocate(R2, counts, kind, 4.0, 0.5, user_keys=stable_user_keys(ids2))
        _rows_equal(a[keep], b)


def _frame(seed: int = 0, n_users: int = 50, n_items: int = 15) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for u in rng.permutation(n_users):
        for i in rng.choice(n_items, int(rng.integers(2, 12)), replace=False):
            rows.append((f"u{u}", f"i{i}", float(rng.integers(1, 6))))
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


def test_dpals_fit_keys_its_samples_on_the_user_ids(monkeypatch):
    """End to end: a DPALS fit with a known seed, with and without one user (a public catalogue, so
    the item axis is the same): the exact sampled counts differ by that user's own sample, the mean's
    sample by that user's sampled ratings, and every other user's allocation is unchanged."""
    seen: dict[str, list] = {"counts": [], "mean": [], "weights": [], "keys": []}
    real_counts, real_sum, real_uniform = (
        allocation.sampled_item_counts,
        allocation.sampled_rating_sum,
        allocation.uniform_weights,
    )

    def counts(*args, **kw):
        seen["keys"].append((args[2], kw.get("user_keys")))
        out = real_counts(*args, **kw)
        seen["counts"].append(out)
        return out

    def rating_sum(*args, **kw):
        out = real_sum(*args, **kw)
        seen["mean"].append(out)
        return out

    def uniform(*args, **kw):
        out = real_uniform(*args, **kw)
        seen["weights"].append(out)
        return out

    monkeypatch.setattr(allocation, "sampled_item_counts", counts)
    monkeypatch.setattr(allocation, "sampled_rating_sum", rating_sum)
    monkeypatch.setattr(allocation, "uniform_weights", uniform)
    df = _frame()
    catalogue = [f"i{i}" for i in range(15)]
    full = from_pandas(df, item_ids=catalogue)
    gone = str(full.user_ids[3])  # not the last row: on main every later user was renumbered
    less = from_pandas(df[df["user"] != gone], item_ids=catalogue)
    settings_ = dict(method="dpals-uniform", epsilon=3.0, factors=2, iterations=1, budget=3, random_state=0)
    for data in (full, less):
        DPALS(**settings_).fit(data, show_progress=False)
    (key, keys), (key2, keys2) = seen["keys"]
    assert key == key2 and keys is not None
    np.testing.assert_array_equal(keys, stable_user_keys(full.user_ids))
    j = int(np.flatnonzero(full.user_ids == gone)[0])
    own = real_counts(full.matrix[j : j + 1], 3, key, user_keys=keys[j : j + 1])
    np.testing.assert_array_equal(seen["counts"][0] - seen["counts"][1], own)
    assert seen["mean"][0][1] - seen["mean"][1][1] == min(3, full.matrix[j].nnz)
    others = np.array([i for i in range(full.n_users) if i != j])
    np.testing.assert_array_equal(less.user_ids, full.user_ids[others])
    _rows_equal(seen["weights"][0][others], seen["weights"][1])


def test_bare_matrix_fit_keys_on_the_row_index(monkeypatch):
    """A bare matrix has no ids: its row index is the id (documented), i.e. the keys of ids 0..n-1."""
    seen = []
    real = allocation.sampled_item_counts

    def counts(*args, **kw):
        seen.append(kw.get("user_keys"))
        return real(*args, **kw)

    monkeypatch.setattr(allocation, "sampled_item_counts", counts)
    R, _, _ = _data(5)
    DPALS(epsilon=3.0, factors=2, iterations=1, budget=3, random_state=0).fit(R, show_progress=False)
    np.testing.assert_array_equal(seen[0], stable_user_keys(np.arange(R.shape[0])))
