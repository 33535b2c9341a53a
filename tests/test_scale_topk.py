"""Streaming top-k (issue 44): the chunked, budget-sized path gives exactly the dense path's top-k
lists and metrics, on ML-100K and on the synthetic presets, and its chunks obey the memory budget.

The dense references below are the implementations before the streaming change (the whole score
matrix of the evaluated users at once, a dense target matrix), kept here as the reference.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.evaluation import experiment as X
from privrec.evaluation import ranking_metrics, sliced_recall
from privrec.evaluation import topk as T
from privrec.evaluation.protocols import item_bias_of, item_factors_of, project_users

ML100K = Path(os.environ.get("PRIVREC_DATA", "/work/shared/datasets")) / "ml-100k"


# ------------------------------------------------------------------------------------ the old dense path
def _old_topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """``topk_indices`` before issue 44 (int64 running tie ranks over every entry)."""
    rows, n = scores.shape
    out = np.full((rows, k), -1, dtype=np.int64)
    kk = min(k, n)
    if rows == 0 or kk == 0:
        return out
    kth = np.partition(scores, n - kk, axis=1)[:, n - kk][:, None]
    greater = scores > kth
    n_greater = greater.sum(axis=1, keepdims=True)
    ties = scores == kth
    tie_rank = np.cumsum(ties, axis=1)
    selected = greater | (ties & (tie_rank <= kk - n_greater))
    r, c = np.nonzero(selected)
    cols = c.reshape(rows, kk)
    vals = scores[r, c].reshape(rows, kk)
    order = np.argsort(-vals, axis=1, kind="stable")
    cols = np.take_along_axis(cols, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    cols[np.isneginf(vals)] = -1
    out[:, :kk] = cols
    return out


def _dense_scores(U, V, bias, history, rows):
    s = np.asarray(U, dtype=np.float32)[rows] @ np.asarray(V, dtype=np.float32).T
    if bias is not None:
        s += np.asarray(bias, dtype=np.float32)[None, :]
    if history is not None:
        h = history[rows].toarray() != 0
        s[h] = -np.inf
    return s


def _dense_ranking(U, V, targets, history, k, bias=None):
    """Recall@k / NDCG@k / Precision@k / MAP@k / coverage@k and the top-k lists, every evaluated
    user's scores at once (the old path with one chunk)."""
    targets = sp.csr_matrix(targets)
    targets.eliminate_zeros()
    n_t = np.diff(targets.indptr)
    rows = np.flatnonzero(n_t > 0)
    top = _old_topk_indices(_dense_scores(U, V, bias, history, rows), k)
    valid = top >= 0
    tdense = targets[rows].toarray() != 0
    hits = tdense[np.arange(rows.size)[:, None], np.where(valid, top, 0)] & valid
    nt = n_t[rows].astype(np.float64)
    disc = 1.0 / np.log2(np.arange(k) + 2.0)
    denom = np.minimum(k, nt)
    cum_hits = np.cumsum(hits, axis=1)
    ap = np.cumsum(hits * (cum_hits / np.arange(1, k + 1)), axis=1)[:, -1] / denom
    seen = np.zeros(V.shape[0], dtype=bool)
    seen[top[valid]] = True
    return top, {
        f"recall@{k}": float(np.mean(hits.sum(axis=1) / denom)),
        f"ndcg@{k}": float(np.mean((hits * disc).sum(axis=1) / np.cumsum(disc)[denom.astype(int) - 1])),
        f"precision@{k}": float(np.mean(hits.sum(axis=1) / k)),
        f"map@{k}": float(np.mean(ap)),
        f"coverage@{k}": float(seen.mean()),
        "n_users": int(rows.size),
    }


def _dense_sliced(U, V, targets, buckets, history, ks, bias=None):
    """The old per-bucket recall: the full score rows, then each bucket's columns."""
    targets = sp.csr_matrix(targets)
    targets.eliminate_zeros()
    nb = int(buckets.max()) + 1
    rows = np.arange(U.shape[0])
    s = _dense_scores(U, V, bias, history, rows)
    tdense = targets.toarray() != 0
    out = []
    for b in range(nb):
        cols = np.flatnonzero(buckets == b)
        td = tdense[:, cols]
        nt = td.sum(axis=1)
        has = nt > 0
        if not has.any():
            out.append(math.nan)
            continue
        top = _old_topk_indices(s[has][:, cols], ks[b])
        valid = top >= 0
        hits = td[has][np.arange(int(has.sum()))[:, None], np.where(valid, top, 0)] & valid
        out.append(float(np.mean(hits.sum(axis=1) / np.minimum(ks[b], nt[has]))))
    return out


def _stream_top(U, V, targets, history, k, bias=None, **kw):
    n_t = np.diff(sp.csr_matrix(targets).indptr)
    rows = np.flatnonzero(n_t > 0)
    parts = [top for _, _, top in T.stream_topk(U, V, k, bias, history, rows, **kw)]
    return np.concatenate(parts) if parts else np.zeros((0, k), dtype=np.int64)


# ------------------------------------------------------------------------------------ top-k kernel
def test_topk_indices_equals_old_kernel_with_ties_and_exclusions():
    rng = np.random.default_rng(0)
    for rows, n, k in ((50, 40, 10), (30, 7, 12), (20, 300, 1), (5, 1, 3)):
        s = rng.integers(0, 4, size=(rows, n)).astype(np.float32)  # many ties
        s[rng.random((rows, n)) < 0.3] = -np.inf
        s[0] = 1.0  # a row that is one tie
        s[-1] = -np.inf  # a row with nothing admissible
        np.testing.assert_array_equal(T.topk_indices(s, k), _old_topk_indices(s, k))


def test_popularity_topk_equals_scored_path():
    rng = np.random.default_rng(1)
    n_items = 200
    scores = rng.integers(0, 30, n_items).astype(np.float32)  # ties between items
    hist = sp.random(60, n_items, density=0.2, format="lil", random_state=1)
    hist[3, :] = 1.0  # a user who has seen everything
    hist = sp.csr_matrix(hist)
    rows = np.array([5, 3, 0, 59, 5])
    dense = np.tile(scores, (rows.size, 1))
    dense[hist[rows].toarray() != 0] = -np.inf
    for k in (1, 20, 250):
        np.testing.assert_array_equal(T.popularity_topk(scores, k, hist, rows), _old_topk_indices(dense, k))
    np.testing.assert_array_equal(T.popularity_topk(scores, 5), _old_topk_indices(scores[None, :], 5))


# ------------------------------------------------------------------------------------ whole metrics
def _fitted_cases():
    """(name, split, model) on ML-100K (both protocols) and on the synthetic presets."""
    cases = []
    sources = [("synthetic-skew", 1.0), ("ml20m-like", 0.01), ("wide-catalogue", 0.01)]
    if (ML100K / "u.data").is_file():
        sources.insert(0, ("ml-100k", None))
    for name, scale in sources:
        if name == "ml-100k":
            data = X.load_data(name, data_dir=ML100K)
        else:
            data = X.load_data(name, scale=scale, seed=0)
        protocol = X.default_protocol(name)
        split = X.make_split(data, protocol, seed=0)
        model = X.make_model("als", params={"factors": 8, "iterations": 2}, seed=0, protocol=protocol)
        model.fit(split.train, show_progress=False)
        cases.append((name, split, model))
    return cases


@pytest.fixture(scope="module")
def cases():
    return _fitted_cases()


def _users_of(split):
    if split.protocol == "random":
        hist = split.projection
        targets = split.test.copy()
        targets.data = (targets.data >= 4).astype(np.float32)
        targets.eliminate_zeros()
        return hist, targets
    return split.history, split.targets


def _first_evaluated(targets, n: int):
    """``targets`` with only its first ``n`` users that have a target kept (the others' rows emptied)."""
    targets = sp.csr_matrix(targets)
    rows = np.flatnonzero(np.diff(targets.indptr) > 0)
    keep = np.zeros(targets.shape[0], dtype=targets.dtype)
    keep[rows[:n]] = 1
    out = sp.csr_matrix(sp.diags(keep) @ targets)
    out.eliminate_zeros()
    return out


def test_ranking_metrics_equal_the_dense_path(cases):
    for name, split, model in cases:
        hist, targets = _users_of(split)
        U = project_users(model, hist)
        V, bias = item_factors_of(model), item_bias_of(model)
        old_top, old = _dense_ranking(U, V, targets, hist, 20, bias)
        # same top-k lists, chunk by chunk (the default budget: two chunks on the wide catalogue)
        np.testing.assert_array_equal(_stream_top(U, V, targets, hist, 20, bias), old_top, err_msg=name)
        new = ranking_metrics(U, V, targets, hist, ks=(20,), item_bias=bias)
        # a tiny budget forces many chunks. With 300,000 items each of them is already one user, so
        # the wide catalogue checks it on its first 40 evaluated users (every user elsewhere)
        few = 40 if V.shape[0] > 100_000 else old_top.shape[0]
        sub = _first_evaluated(targets, few)
        np.testing.assert_array_equal(
            _stream_top(U, V, sub, hist, 20, bias, memory_budget=1 << 16), old_top[:few], err_msg=name
        )
        tiny = ranking_metrics(U, V, sub, hist, ks=(20,), item_bias=bias, memory_budget=1 << 16)
        default = new if few == old_top.shape[0] else ranking_metrics(U, V, sub, hist, ks=(20,), item_bias=bias)
        assert default == tiny and tiny["n_users"] == few, name  # per-user sums: chunking does not change a bit
        assert new["n_users"] == old["n_users"]
        for key, value in old.items():
            assert new[key] == pytest.approx(value, rel=1e-12, abs=1e-15), (name, key)


def test_popularity_rankers_equal_the_dense_path(cases):
    for name, split, _ in cases:
        hist, targets = _users_of(split)
        counts = np.diff(split.train.tocsc().indptr).astype(np.float32)
        U = np.zeros((hist.shape[0], 0), dtype=np.float32)
        V = np.zeros((counts.size, 0), dtype=np.float32)
        old_top, old = _dense_ranking(U, V, targets, hist, 20, counts)
        np.testing.assert_array_equal(_stream_top(U, V, targets, hist, 20, counts), old_top, err_msg=name)
        new = ranking_metrics(U, V, targets, hist, ks=(20,), item_bias=counts)
        for key, value in old.items():
            assert new[key] == pytest.approx(value, rel=1e-12, abs=1e-15), (name, key)


def test_sliced_recall_equals_the_dense_path(cases):
    from privrec.evaluation import popularity_buckets

    for name, split, model in cases[:2]:
        hist, targets = _users_of(split)
        U = project_users(model, hist)
        V, bias = item_factors_of(model), item_bias_of(model)
        buckets = popularity_buckets(np.diff(split.train.tocsc().indptr), 5)
        ks = [100, 80, 60, 40, 20]
        old = _dense_sliced(U, V, targets, buckets, hist, ks, bias)
        new = sliced_recall(U, V, targets, buckets, history=hist, ks=ks, item_bias=bias)
        tiny = sliced_recall(U, V, targets, buckets, history=hist, ks=ks, item_bias=bias, memory_budget=1 << 15)
        assert new == tiny
        np.testing.assert_allclose(new, old, rtol=1e-12, atol=1e-15, err_msg=name)


# ------------------------------------------------------------------------------------ the budget
def test_chunks_of_a_wide_catalogue_fit_the_default_budget(monkeypatch):
    """Evaluating a 300k-item model over 20,000 users: every chunk's score buffer <= 512 MB."""
    monkeypatch.delenv(T.MEMORY_ENV, raising=False)
    n_users, n_items, d = 20_000, 300_000, 8
    rows = T.chunk_rows(n_items)
    assert rows * n_items * 4 <= T.DEFAULT_MEMORY_BUDGET == 512 << 20
    assert rows * n_items * T.BYTES_PER_ENTRY <= T.DEFAULT_MEMORY_BUDGET
    assert 1 < rows < n_users  # the users really are split
    shapes = []
    real = T.score_block

    def spy(u, v, b=None):
        s = real(u, v, b)
        shapes.append(s.shape)
        return s

    monkeypatch.setattr(T, "score_block", spy)
    rng = np.random.default_rng(0)
    U = rng.standard_normal((n_users, d)).astype(np.float32)
    V = rng.standard_normal((n_items, d)).astype(np.float32)
    gen = T.stream_topk(U, V, 20)
    a, b, top = next(gen)  # the first chunk only: the others are the same size
    gen.close()
    assert (a, b) == (0, rows) and top.shape == (rows, 20)
    assert shapes == [(rows, n_items)]
    assert shapes[0][0] * shapes[0][1] * np.dtype(np.float32).itemsize <= 512 << 20
    assert -(-n_users // rows) == len(list(T.iter_chunks(n_users, rows)))


def test_budget_is_configurable(monkeypatch):
    monkeypatch.setenv(T.MEMORY_ENV, "64")
    assert T.memory_budget() == 64 << 20
    assert T.chunk_rows(1000) == (64 << 20) // (1000 * T.BYTES_PER_ENTRY)
    assert T.chunk_rows(1000, budget=12_000) == 1
    assert T.chunk_rows(10**9, budget=1) == 1  # one huge row is still one chunk
    monkeypatch.setenv(T.MEMORY_ENV, "lots")
    with pytest.raises(ValueError, match="PRIVREC_EVAL_MEMORY_MB"):
        T.memory_budget()
    monkeypatch.setenv(T.MEMORY_ENV, "-1")
    with pytest.raises(ValueError, match="positive"):
        T.memory_budget()
