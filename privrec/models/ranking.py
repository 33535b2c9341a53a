"""Ranking items for users (a mixin of :class:`~privrec.models.FactorizationModel`):
``recommend`` and ``rank_items`` -- the queried users' rated rows and vectors (stored, or
projected from their own rows), their scores over the catalogue in chunks sized from the
evaluation memory budget (never a users x items matrix), and the top-N selection with the
returned ids' dtype. Importable from :mod:`privrec.models._base` too.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_int
from ._mixin_typing import MixinBase
from .ids import check_ids
from .inputs import as_user_items


def _distinct(ids: np.ndarray) -> np.ndarray:
    """Candidate ids with repeats removed (first occurrence kept): a candidate set, so a repeated
    candidate is ranked once, never returned twice."""
    if ids.size < 2:
        return ids
    _, first = np.unique(ids, return_index=True)
    return ids if first.size == ids.size else ids[np.sort(first)]


def _score_chunk_rows(n_items: int, memory_budget: int | None = None) -> int:
    """Users (or query items) scored at once by ``recommend`` / ``similar_*``: as many as the
    evaluation memory budget allows (:func:`privrec.evaluation.topk.chunk_rows`, 512 MiB unless
    configured), so their score buffers never hold a whole users x items matrix."""
    from ..evaluation.topk import RECOMMEND_BYTES_PER_ENTRY, chunk_rows

    return chunk_rows(n_items, memory_budget, RECOMMEND_BYTES_PER_ENTRY)


def _topk(scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-n (descending) of a 2-D score array; -inf entries are never returned."""
    n = min(n, scores.shape[1])
    if n == 0:
        return np.zeros((scores.shape[0], 0), dtype=np.int64), np.zeros((scores.shape[0], 0), dtype=scores.dtype)
    part = np.argpartition(-scores, n - 1, axis=1)[:, :n]
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    ids = np.take_along_axis(part, order, axis=1)
    vals = np.take_along_axis(part_scores, order, axis=1)
    return ids, vals


#: dtype of the ids returned by recommend / similar_items / similar_users / rank_items: implicit 0.7's
#: (its CPU models return int32 ids, and ``implicit.evaluation`` reads them into C ``int`` buffers)
ID_DTYPE = np.int32


def _as_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """Returned ids (indices < ``n``, -1 padding) as :data:`ID_DTYPE`; int64 kept only when ``n``
    exceeds the int32 range."""
    return ids.astype(ID_DTYPE, copy=False) if n <= np.iinfo(ID_DTYPE).max else ids


class RankingMixin(MixinBase):
    """``recommend`` / ``rank_items`` of :class:`~privrec.models.FactorizationModel` and the scores
    they sort (``_score_all``: predicted ratings; a subclass may rank by other scores)."""

    def _query_rows(self, ids: np.ndarray, user_items, required: bool):
        """The rated-items rows of the queried users: ``user_items`` has one row per id, or is the
        full users x items matrix (then rows ``ids`` are taken); ``None`` allowed unless required."""
        if user_items is None:
            if required:
                raise ValueError(
                    "user_items (the users' rated items, one row per userid) is required with "
                    "filter_already_liked_items=True, recalculate_user=True, or for a model without "
                    "user factors"
                )
            return None
        mat = as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__)
        if mat.shape[0] == ids.size:
            return mat
        uf = getattr(self, "user_factors_", None)
        if uf is None or mat.shape[0] == uf.shape[0]:
            checked, _ = check_ids(ids, mat.shape[0], "userid")
            return mat[checked]
        raise ValueError(
            f"user_items must have one row per userid ({ids.size}) or one row per fitted user, got {mat.shape[0]} rows"
        )

    def _user_vectors(self, ids, rows, recalculate):
        uf = getattr(self, "user_factors_", None)
        if recalculate or uf is None:
            # a loaded private model keeps only the item side: project the given rows (free: Krichene et al.,
            # Remark D.1)
            if rows is None:
                raise ValueError(
                    f"this {type(self).__name__} holds no user factors (a loaded or released model keeps only item "
                    "factors): pass user_items, the users' rated items, to project them"
                )
            return self._project_users(rows)
        ids, _ = check_ids(ids, uf.shape[0], "userid")
        ub = self._user_bias()
        return uf[ids], (None if ub is None else ub[ids])

    def recommend(
        self,
        userid,
        user_items,
        N: int = 10,
        filter_already_liked_items: bool = True,
        filter_items=None,
        recalculate_user: bool = False,
        items=None,
    ):
        """Top-N items for one user (1-D outputs) or an array of users (2-D outputs): ``(ids, scores)``.

        ``user_items`` holds the users' rated items: either one row per ``userid`` (implicit 0.7
        convention) or the full training matrix (then rows ``userid`` are used); it may be ``None``
        when it is not needed (no filtering of rated items, stored user factors). Rated items are
        excluded when ``filter_already_liked_items``; ``filter_items`` are excluded for everybody;
        ``items`` restricts the candidates. Scores are the model's ranking scores: predicted ratings,
        except a DPALS ranking explicit ratings by exposure (``ranking="exposure"``, its default), whose
        scores are ``log(exposure) + (predicted - mean) / sigma_y`` (:mod:`privrec.models.exposure`). A
        model without user
        factors (a loaded private model) projects the ``user_items`` rows automatically, as
        ``recalculate_user=True`` does. When fewer than N items are eligible the output is
        shorter: columns that no user can fill are dropped (a row of a batched call may then still
        end in id -1 / score -inf padding, never an excluded item).
        """
        self._check_fitted()
        N = check_int(N, "N", minimum=1)
        scalar = np.ndim(userid) == 0
        ids = np.atleast_1d(np.asarray(userid))
        needs_rows = filter_already_liked_items or recalculate_user or getattr(self, "user_factors_", None) is None
        rows = self._query_rows(ids, user_items, needs_rows)
        uvec, ubias = self._user_vectors(ids, rows, recalculate_user)
        return self._rank(uvec, ubias, rows if filter_already_liked_items else None, N, filter_items, items, scalar)

    def _rank(self, uvec, ubias, liked_rows, N, filter_items, items, scalar, memory_budget=None):
        n_items = self.n_items_
        candidates = None
        if items is not None:
            candidates = _distinct(check_ids(items, n_items, "items")[0])
        fi = None
        if filter_items is not None:
            fi, _ = check_ids(filter_items, n_items, "filter_items")
        # users in chunks sized from the evaluation memory budget: never a users x items score matrix
        step = _score_chunk_rows(n_items, memory_budget)
        n_users = uvec.shape[0]
        tops, valss = [], []
        for a in range(0, max(n_users, 1), step):
            b = min(n_users, a + step)
            scores = self._score_all(uvec[a:b], None if ubias is None else ubias[a:b])
            if not np.isfinite(scores).all():  # a NaN / inf in the release would drop or reorder items silently
                raise ValueError(self._nonfinite_release_message())
            if fi is not None:
                scores[:, fi] = -np.inf
            if liked_rows is not None:
                sub = liked_rows[a:b]
                r_idx = np.repeat(np.arange(b - a), np.diff(sub.indptr))
                scores[r_idx, sub.indices] = -np.inf
            if candidates is not None:
                t, v = _topk(scores[:, candidates], N)
                t = candidates[t]
            else:
                t, v = _topk(scores, N)
            del scores
            tops.append(t)
            valss.append(v)
        top = np.concatenate(tops) if len(tops) > 1 else tops[0]
        vals = np.concatenate(valss) if len(valss) > 1 else valss[0]
        # drop columns that are -inf for every user (fewer eligible items than N)
        finite_cols = np.isfinite(vals).any(axis=0)
        keep = int(finite_cols.sum()) if finite_cols.size else 0
        top, vals = top[:, :keep], vals[:, :keep]
        top = _as_ids(np.where(np.isfinite(vals), top, -1), n_items)
        if scalar:
            row_ok = np.isfinite(vals[0])
            return top[0][row_ok], vals[0][row_ok]
        return top, vals

    def rank_items(self, userid, user_items, selected_items, recalculate_user: bool = False):
        """Rank ``selected_items`` for the user(s): ``(ids, scores)`` sorted by decreasing score.

        As implicit 0.7 (``recommend`` with ``items=selected_items`` and no filtering of rated
        items), except that every selected item is returned (implicit caps at N=10), once: a
        repeated item is ranked once.
        """
        sel = np.atleast_1d(np.asarray(selected_items))
        if sel.size == 0:
            raise ValueError("selected_items is empty")
        try:
            n_distinct = int(np.unique(sel).size) if sel.ndim == 1 else int(sel.size)
        except TypeError:  # mixed objects: check_ids refuses them in recommend
            n_distinct = int(sel.size)
        return self.recommend(
            userid,
            user_items,
            N=n_distinct,
            filter_already_liked_items=False,
            recalculate_user=recalculate_user,
            items=sel,
        )

    def _nonfinite_release_message(self) -> str:
        """One line naming the array of the release (or the user side) that made a score non-finite."""
        for name, value in (
            ("item_factors_", self.item_factors_),
            ("item_bias_", self._item_bias()),
            ("global_mean_", self._global()),
        ):
            arr = None if value is None else np.asarray(value, dtype=np.float64)
            if arr is not None and not np.isfinite(arr).all():
                bad: np.ndarray = (
                    np.flatnonzero((~np.isfinite(arr)).reshape(arr.shape[0], -1).any(axis=1))
                    if arr.ndim
                    else np.zeros(0, dtype=np.int64)
                )
                where = f" (item {int(bad[0])})" if len(bad) else ""
                return (
                    f"this model's {name} holds NaN or infinite values{where}: it cannot rank items; refit the model "
                    "or load an unmodified file"
                )
        return (
            "the user factors or biases hold NaN or infinite values: scores are not finite, so items cannot be ranked"
        )

    def _score_all(self, uvec, ubias):
        scores = uvec @ self.item_factors_.T
        ib = self._item_bias()
        if ib is not None:
            scores += ib[None, :]
        if ubias is not None:
            scores += ubias[:, None]
        scores += self._global()
        return scores.astype(np.float32, copy=False)
