"""Evaluation protocols of the paper's benchmarks (Krichene et al., ICML 2023, App. D.1 and Remark D.1).

* **Random split** (Lee et al. 2013; ML10M-style rating prediction): every test user is projected
  from their *training* history through the model's billboard projection (``model.transform``:
  user embedding recomputed from the released item factors and the user's own data only, no
  privacy cost), then ``RMSE`` over the test pairs plus per-bucket RMSE (buckets by training count).
* **Held-out users** (Liang et al. 2018; ML20M-style top-k): held-out users are projected from
  their fold-in history, the history is excluded from the candidates, and Recall@k / NDCG@k /
  coverage are computed on their targets, plus per-bucket recall (optionally the paper's
  ``k = [100, 80, 60, 40, 20]`` over the top-10% items).

The model contract used here (implicit-0.7 style, see ``privrec.models._base``): the released
``item_factors_`` (items x d; ``item_factors`` also accepted), optional ``item_bias_`` and
``global_mean_``, and the projection ``_project_users(csr) -> (factors, user_bias)`` (or the public
``transform(csr) -> factors`` when a model has no user bias). A predicted rating is
``global_mean_ + user_bias[u] + item_bias_[i] + <u, v_i>``; rankings use ``<u, v_i> + item_bias_[i]``
(the per-user terms do not change a user's ranking).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .metrics import pair_predictions, ranking_k, ranking_metrics, rmse
from .neighbours import ReferenceNeighbours, sliced_neighbour_overlap
from .slicing import PAPER_SLICED_KS, popularity_buckets, sliced_recall, sliced_rmse, top_items

#: items per popularity bucket used for the neighbour overlap (deterministic subsample; Krichene et al.
#: 2023, App. D.3, Fig. 11)
OVERLAP_ITEMS_PER_BUCKET = 400


def _matrix(x):
    m = getattr(x, "matrix", x)
    if not sp.issparse(m):
        raise ValueError("expected an Interactions object or a scipy sparse users x items matrix")
    return sp.csr_matrix(m)


def item_factors_of(model) -> np.ndarray:
    """The released item factors of a fitted model (``item_factors_`` or ``item_factors``)."""
    V = getattr(model, "item_factors_", None)
    if V is None:
        V = getattr(model, "item_factors", None)
    if V is None:
        raise ValueError(f"{type(model).__name__} has no item_factors: fit the model first")
    return np.asarray(V, dtype=np.float32)


def _reference(reference):
    """A reference model (or cached :class:`ReferenceNeighbours`) for the neighbour overlap."""
    return reference if isinstance(reference, ReferenceNeighbours) else item_factors_of(reference)


def item_bias_of(model):
    """The model's item bias vector, or ``None``."""
    b = getattr(model, "item_bias_", None)
    return None if b is None else np.asarray(b, dtype=np.float32)


def project_users(model, history, with_bias: bool = False):
    """Billboard projection of each row of ``history`` onto the model's item factors.

    Returns the user factors, or ``(factors, user_bias or None)`` with ``with_bias``.
    """
    H = _matrix(history).astype(np.float32)
    inner = getattr(model, "_project_users", None)
    if inner is not None:
        if hasattr(model, "_check_fitted"):
            model._check_fitted()
        U, ub = inner(H)
    else:
        fn = getattr(model, "transform", None)
        if fn is None:
            raise ValueError(f"{type(model).__name__} has no transform(user_items) projection")
        U, ub = fn(H), None
    U = np.asarray(U, dtype=np.float32)
    if U.shape[0] != H.shape[0]:
        raise ValueError("the model's projection returned a different number of rows than the history")
    return (U, None if ub is None else np.asarray(ub, dtype=np.float32)) if with_bias else U


def predict_pairs(model, user_factors, rows, cols, user_bias=None) -> np.ndarray:
    """Predicted ratings for (row, col) pairs including the model's offsets (module docstring)."""
    pred = pair_predictions(user_factors, item_factors_of(model), rows, cols)
    pred += np.float32(float(getattr(model, "global_mean_", 0.0) or 0.0))
    ib = item_bias_of(model)
    if ib is not None:
        pred += ib[np.asarray(cols)]
    if user_bias is not None:
        pred += user_bias[np.asarray(rows)]
    return pred


def evaluate_ratings(model, train, test, n_buckets: int = 5, reference=None, history=None) -> dict:
    """Random-split protocol: RMSE and per-bucket RMSE of ``test`` (module docstring).

    ``train`` and ``test`` are aligned users x items matrices (or ``Interactions``); buckets come
    from the training counts. The user factors come from projecting each user's ``history``
    (default: ``train``; the authors' reference implementation uses train + validation). With a
    ``reference`` model (e.g. non-private ALS) the per-bucket top-20 cosine neighbour overlap is added.
    """
    tr, te = _matrix(train), _matrix(test)
    hi = tr if history is None else _matrix(history)
    if tr.shape != te.shape or hi.shape != tr.shape:
        raise ValueError(f"train {tr.shape}, test {te.shape} and history {hi.shape} shapes differ")
    counts = np.diff(tr.tocsc().indptr)
    buckets = popularity_buckets(counts, n_buckets)
    users = np.flatnonzero(np.diff(te.indptr) > 0)
    U, ub = project_users(model, hi[users], with_bias=True)
    sub = te[users].tocoo()
    pred = predict_pairs(model, U, sub.row, sub.col, ub)
    out = {
        "metrics": {"rmse": rmse(pred, sub.data), "n_test": int(sub.nnz), "n_users": int(users.size)},
        "sliced": {"rmse": sliced_rmse(pred, sub.data, sub.col, buckets, n_buckets)},
        "bucket_items": np.bincount(buckets[buckets >= 0], minlength=n_buckets).tolist(),
    }
    if reference is not None:
        out["sliced"]["neighbour_overlap@20"] = sliced_neighbour_overlap(
            item_factors_of(model), _reference(reference), buckets, 20, n_buckets, OVERLAP_ITEMS_PER_BUCKET
        )
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
    the reference; otherwise every bucket uses ``k`` over all items. A catalogue of fewer than
    ``k`` items is evaluated at ``k = n_items`` (:func:`privrec.evaluation.metrics.ranking_k`;
    the metric keys name it, e.g. ``recall@12``).
    """
    tr, hi, ta = _matrix(train), _matrix(history), _matrix(targets)
    if not (tr.shape[1] == hi.shape[1] == ta.shape[1]) or hi.shape != ta.shape:
        raise ValueError("train, history and targets must share the item columns (and history/targets the rows)")
    counts = np.diff(tr.tocsc().indptr)
    U = project_users(model, hi)
    V = item_factors_of(model)
    ib = item_bias_of(model)
    k = ranking_k(k, ta.shape[1])  # ranking_metrics refuses k > n_items: a small catalogue at k = n_items
    m = ranking_metrics(U, V, ta, hi, ks=(k,), item_bias=ib)
    items: np.ndarray | None  # the head items the slices are restricted to (None: all items)
    ks: int | list[int]  # one k for every bucket, or one per bucket
    if paper_sliced:
        n_buckets = len(PAPER_SLICED_KS)
        items = top_items(counts, head_fraction or 0.1)
        ks = list(PAPER_SLICED_KS)
    else:
        items = None if head_fraction is None else top_items(counts, head_fraction)
        ks = k
    buckets = popularity_buckets(counts, n_buckets, items=items)
    rec, nd = sliced_recall(U, V, ta, buckets, history=hi, ks=ks, item_bias=ib, n_buckets=n_buckets, with_ndcg=True)
    sliced = {"recall": rec, "ndcg": nd, "k": np.broadcast_to(np.asarray(ks), (n_buckets,)).tolist()}
    if reference is not None:
        all_b = popularity_buckets(counts, n_buckets)
        sliced["neighbour_overlap@20"] = sliced_neighbour_overlap(
            V, _reference(reference), all_b, 20, n_buckets, OVERLAP_ITEMS_PER_BUCKET
        )
    return {
        "metrics": {
            f"recall@{k}": m[f"recall@{k}"],
            f"ndcg@{k}": m[f"ndcg@{k}"],
            f"coverage@{k}": m[f"coverage@{k}"],
            "n_users": m["n_users"],
        },
        "sliced": sliced,
        "bucket_items": np.bincount(buckets[buckets >= 0], minlength=n_buckets).tolist(),
    }
