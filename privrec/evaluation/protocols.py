"""Evaluation protocols of the paper's benchmarks (spec 004 §6 "billboard model", §7, §8).

* **Random split** (Lee et al. 2013; ML10M-style rating prediction): every test user is projected
  from their *training* history through the model's billboard projection (``model.transform``:
  user embedding recomputed from the released item factors and the user's own data only, no
  privacy cost), then ``RMSE`` over the test pairs plus per-bucket RMSE (buckets by training count).
* **Held-out users** (Liang et al. 2018; ML20M-style top-k): held-out users are projected from
  their fold-in history, the history is excluded from the candidates, and Recall@k / NDCG@k /
  coverage are computed on their targets, plus per-bucket recall (optionally the paper's
  ``k = [100, 80, 60, 40, 20]`` over the top-10% items).

The model contract used here (implicit-0.7 style, issue 4): ``model.item_factors`` (items x d),
``model.transform(user_items_csr)`` -> user factors (rows aligned with the CSR), and for ratings
``model.predict_pairs(user_factors, rows, cols)`` when the model adds offsets (global mean, item
bias, mean rating for untrained items); without it predictions are plain dot products.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .metrics import pair_predictions, ranking_metrics, rmse
from .neighbours import sliced_neighbour_overlap
from .slicing import PAPER_SLICED_KS, popularity_buckets, sliced_recall, sliced_rmse, top_items


def _matrix(x):
    m = getattr(x, "matrix", x)
    if not sp.issparse(m):
        raise ValueError("expected an Interactions object or a scipy sparse users x items matrix")
    return sp.csr_matrix(m)


def item_factors_of(model) -> np.ndarray:
    """The released item factors of a fitted model (``item_factors`` attribute)."""
    V = getattr(model, "item_factors", None)
    if V is None:
        raise ValueError(f"{type(model).__name__} has no item_factors: fit the model first")
    return np.asarray(V, dtype=np.float32)


def project_users(model, history) -> np.ndarray:
    """Billboard projection of each row of ``history`` onto the model's item factors."""
    fn = getattr(model, "transform", None)
    if fn is None:
        raise ValueError(f"{type(model).__name__} has no transform(user_items) projection")
    U = np.asarray(fn(_matrix(history)), dtype=np.float32)
    if U.shape[0] != _matrix(history).shape[0]:
        raise ValueError("model.transform returned a different number of rows than the history")
    return U


def predict_pairs(model, user_factors, rows, cols) -> np.ndarray:
    """Predicted ratings for (row, col) pairs: the model's own offsets when it defines them."""
    fn = getattr(model, "predict_pairs", None)
    if fn is not None:
        return np.asarray(fn(user_factors, rows, cols), dtype=np.float32)
    return pair_predictions(user_factors, item_factors_of(model), rows, cols)


def evaluate_ratings(model, train, test, n_buckets: int = 5, reference=None) -> dict:
    """Random-split protocol: RMSE and per-bucket RMSE of ``test`` (module docstring).

    ``train`` and ``test`` are aligned users x items matrices (or ``Interactions``); the user
    factors come from projecting each user's training history. With a ``reference`` model
    (e.g. non-private ALS) the per-bucket top-20 cosine neighbour overlap is added.
    """
    tr, te = _matrix(train), _matrix(test)
    if tr.shape != te.shape:
        raise ValueError(f"train {tr.shape} and test {te.shape} shapes differ")
    counts = np.diff(tr.tocsc().indptr)
    buckets = popularity_buckets(counts, n_buckets)
    users = np.flatnonzero(np.diff(te.indptr) > 0)
    U = project_users(model, tr[users])
    sub = te[users].tocoo()
    pred = predict_pairs(model, U, sub.row, sub.col)
    out = {
        "metrics": {"rmse": rmse(pred, sub.data), "n_test": int(sub.nnz), "n_users": int(users.size)},
        "sliced": {"rmse": sliced_rmse(pred, sub.data, sub.col, buckets, n_buckets)},
        "bucket_items": np.bincount(buckets[buckets >= 0], minlength=n_buckets).tolist(),
    }
    if reference is not None:
        out["sliced"]["neighbour_overlap@20"] = sliced_neighbour_overlap(
            item_factors_of(model), item_factors_of(reference), buckets, 20, n_buckets)
    return out


def evaluate_heldout(
    model,
    train,
    history,
    targets,
    k: int = 20,
    n_buckets: int = 5,
    paper_sliced: bool = False,
    head_fraction: float | None = None,
    reference=None,
) -> dict:
    """Held-out-users protocol: Recall@k, NDCG@k, coverage and per-bucket recall (module docstring).

    ``history`` / ``targets`` are the held-out users' fold-in and target matrices (same item
    columns as ``train``). ``paper_sliced`` uses ``k = [100, 80, 60, 40, 20]`` per bucket (tail
    first) restricted to the top ``head_fraction`` (default 10%) of items by training count, as in
    the reference; otherwise every bucket uses ``k`` over all items.
    """
    tr, hi, ta = _matrix(train), _matrix(history), _matrix(targets)
    if not (tr.shape[1] == hi.shape[1] == ta.shape[1]) or hi.shape != ta.shape:
        raise ValueError("train, history and targets must share the item columns (and history/targets the rows)")
    counts = np.diff(tr.tocsc().indptr)
    U = project_users(model, hi)
    V = item_factors_of(model)
    m = ranking_metrics(U, V, ta, hi, ks=(k,))
    if paper_sliced:
        n_buckets = len(PAPER_SLICED_KS)
        items = top_items(counts, head_fraction or 0.1)
        ks = list(PAPER_SLICED_KS)
    else:
        items = None if head_fraction is None else top_items(counts, head_fraction)
        ks = k
    buckets = popularity_buckets(counts, n_buckets, items=items)
    rec, nd = sliced_recall(U, V, ta, buckets, history=hi, ks=ks, n_buckets=n_buckets, with_ndcg=True)
    sliced = {"recall": rec, "ndcg": nd, "k": np.broadcast_to(np.asarray(ks), (n_buckets,)).tolist()}
    if reference is not None:
        all_b = popularity_buckets(counts, n_buckets)
        sliced["neighbour_overlap@20"] = sliced_neighbour_overlap(V, item_factors_of(reference), all_b, 20, n_buckets)
    return {
        "metrics": {f"recall@{k}": m[f"recall@{k}"], f"ndcg@{k}": m[f"ndcg@{k}"],
                    f"coverage@{k}": m[f"coverage@{k}"], "n_users": m["n_users"]},
        "sliced": sliced,
        "bucket_items": np.bincount(buckets[buckets >= 0], minlength=n_buckets).tolist(),
    }
