"""Protocols (spec 004 §7-§8): random-split RMSE via projection, held-out users recall, sliced outputs.

A minimal ridge "billboard" model stands in for the fitted estimators: it exposes the same
contract (``item_factors``, ``transform``) so the protocol code is checked independently of them.
"""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.evaluation.protocols import evaluate_heldout, evaluate_ratings


class RidgeBillboard:
    """Item factors fixed; users projected by ridge regression on their own history."""

    def __init__(self, item_factors, reg=1e-6):
        self.item_factors = np.asarray(item_factors, dtype=np.float32)
        self.reg = reg

    def transform(self, user_items):
        V = self.item_factors.astype(np.float64)
        d = V.shape[1]
        out = np.zeros((user_items.shape[0], d), dtype=np.float32)
        for r in range(user_items.shape[0]):  # tiny test data only
            row = user_items[r]
            Vi = V[row.indices]
            out[r] = np.linalg.solve(Vi.T @ Vi + self.reg * np.eye(d), Vi.T @ row.data)
        return out


def planted(n=60, m=40, d=3, density=0.5, seed=0):
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, d))
    V = rng.normal(size=(m, d))
    mask = rng.random((n, m)) < density
    R = sp.csr_matrix(np.where(mask, U @ V.T, 0.0))
    R.eliminate_zeros()
    return U, V, R


def test_random_split_recovers_exact_model_and_reports_buckets():
    U, V, R = planted()
    coo = R.tocoo()
    rng = np.random.default_rng(1)
    is_test = rng.random(coo.nnz) < 0.2
    mk = lambda sel: sp.csr_matrix((coo.data[sel], (coo.row[sel], coo.col[sel])), shape=R.shape)
    train, test = mk(~is_test), mk(is_test)
    out = evaluate_ratings(RidgeBillboard(V), train, test, n_buckets=4)
    assert out["metrics"]["rmse"] < 1e-3  # planted noiseless ratings: projection is exact
    assert len(out["sliced"]["rmse"]) == 4 and max(out["sliced"]["rmse"]) < 1e-3
    assert sum(out["bucket_items"]) == 40
    noisy = RidgeBillboard(V + np.random.default_rng(2).normal(scale=0.5, size=V.shape))
    worse = evaluate_ratings(noisy, train, test, n_buckets=4, reference=RidgeBillboard(V))
    assert worse["metrics"]["rmse"] > 0.1
    ov = worse["sliced"]["neighbour_overlap@20"]
    assert len(ov) == 4 and all(0.0 <= v <= 1.0 for v in ov)


def test_heldout_perfect_scores_give_recall_one_and_paper_ks():
    m = 50
    rng = np.random.default_rng(0)
    train = sp.random(30, m, density=0.3, random_state=3, format="csr")
    # each held-out user likes exactly the items of one "genre" (block of 10); factors = genre indicators
    genre = np.repeat(np.arange(5), 10)
    V = np.eye(5)[genre]
    users_genre = rng.integers(0, 5, size=12)
    likes = [np.flatnonzero(genre == g) for g in users_genre]
    hist_rows = [l[:6] for l in likes]
    targ_rows = [l[6:] for l in likes]

    def mk(rows):
        indptr = np.cumsum([0] + [len(r) for r in rows])
        return sp.csr_matrix((np.ones(indptr[-1]), np.concatenate(rows), indptr), shape=(12, m))

    out = evaluate_heldout(RidgeBillboard(V, reg=1e-3), train, mk(hist_rows), mk(targ_rows), k=4)
    assert out["metrics"]["recall@4"] == pytest.approx(1.0)
    assert out["metrics"]["ndcg@4"] == pytest.approx(1.0)
    assert out["metrics"]["n_users"] == 12
    paper = evaluate_heldout(
        RidgeBillboard(V, reg=1e-3), train, mk(hist_rows), mk(targ_rows), paper_sliced=True, head_fraction=1.0
    )
    assert paper["sliced"]["k"] == [100, 80, 60, 40, 20]
    assert all(math.isnan(v) or v == pytest.approx(1.0) for v in paper["sliced"]["recall"])


def test_protocol_input_errors():
    _, V, R = planted()
    with pytest.raises(ValueError, match="shapes differ"):
        evaluate_ratings(RidgeBillboard(V), R, R[:, :10])
    with pytest.raises(ValueError, match="no transform"):
        evaluate_ratings(object(), R, R)
