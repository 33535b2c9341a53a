"""Similar items and users (a mixin of :class:`~privrec.models.FactorizationModel`):
``similar_items`` / ``similar_users``, the cosine similarity of fitted factors, in query chunks
sized from the evaluation memory budget. Importable from :mod:`privrec.models._base` too.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_int
from ._mixin_typing import MixinBase
from .ids import check_ids
from .ranking import _as_ids, _distinct, _score_chunk_rows, _topk


def _normalised(F: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (all-zero rows stay zero: similarity 0 to everything)."""
    F = np.asarray(F, dtype=np.float32)
    norms = np.linalg.norm(F, axis=1)
    return F / np.where(norms > 0, norms, 1.0)[:, None]


def _embedding_for_similarity(F: np.ndarray, side: str) -> np.ndarray:
    """``F`` (``side`` factors), refused when it has no columns: cosine of empty embeddings is undefined."""
    if F.shape[1] == 0:
        raise ValueError(
            f"this model has no {side} factors (factors = 0: the bias / popularity model, which the automatic "
            f"configuration chooses when the privacy noise would swamp item embeddings), so {side} similarity is "
            "undefined; fit with a larger epsilon, more users or an explicit factors="
        )
    return F


class SimilarityMixin(MixinBase):
    """``similar_items`` / ``similar_users`` of :class:`~privrec.models.FactorizationModel`."""

    def _similar(self, F, query, N, filter_ids, candidates, n, what, memory_budget=None):
        Fn = _normalised(F)
        Qn = _normalised(query)
        fi = None if filter_ids is None else check_ids(filter_ids, n, f"filter_{what}s")[0]
        cand = None if candidates is None else _distinct(check_ids(candidates, n, f"{what}s")[0])
        step = _score_chunk_rows(n, memory_budget)
        tops, valss = [], []
        for a in range(0, max(Qn.shape[0], 1), step):
            scores = Qn[a : a + step] @ Fn.T
            if fi is not None:
                scores[:, fi] = -np.inf
            if cand is not None:
                t, v = _topk(scores[:, cand], N)
                t = cand[t]
            else:
                t, v = _topk(scores, N)
            tops.append(t)
            valss.append(v)
        top = np.concatenate(tops) if len(tops) > 1 else tops[0]
        vals = np.concatenate(valss) if len(valss) > 1 else valss[0]
        return _as_ids(top, n), vals

    def similar_items(
        self, itemid, N: int = 10, recalculate_item: bool = False, item_users=None, filter_items=None, items=None
    ):
        """Top-N items by cosine similarity of item factors: ``(ids, scores)`` (batched like recommend).

        Items with an all-zero factor (never seen in training) have similarity 0 to everything.
        ``recalculate_item=True`` first re-solves the query items from ``item_users`` (see
        :meth:`recalculate_item`: non-private models only).
        """
        self._check_fitted()
        N = check_int(N, "N", minimum=1)
        scalar = np.ndim(itemid) == 0
        V = _embedding_for_similarity(self.item_factors_, "item")
        if recalculate_item:
            query = np.atleast_2d(self.recalculate_item(itemid, item_users))
        else:
            ids, _ = check_ids(itemid, self.n_items_, "itemid")
            query = V[ids]
        top, vals = self._similar(V, query, N, filter_items, items, self.n_items_, "item")
        if scalar:
            ok = np.isfinite(vals[0])
            return top[0][ok], vals[0][ok]
        return top, vals

    def similar_users(self, userid, N: int = 10, filter_users=None, users=None):
        """Top-N users by cosine similarity of user factors: ``(ids, scores)`` (batched like recommend).

        Needs ``user_factors_`` (a loaded private model has none: use ``partial_fit_users`` first) with
        at least one factor (a ``factors=0`` model is refused, as by :meth:`similar_items`).
        """
        self._check_fitted()
        N = check_int(N, "N", minimum=1)
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(
                f"this {type(self).__name__} holds no user factors (a loaded private model keeps only the "
                "item side); add users with partial_fit_users(userids, user_items) first"
            )
        uf = _embedding_for_similarity(uf, "user")
        n = uf.shape[0]
        scalar = np.ndim(userid) == 0
        ids, _ = check_ids(userid, n, "userid")
        top, vals = self._similar(uf, uf[ids], N, filter_users, users, n, "user")
        if scalar:
            ok = np.isfinite(vals[0])
            return top[0][ok], vals[0][ok]
        return top, vals
