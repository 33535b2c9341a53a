"""Approximate nearest-neighbour index over a fitted model's released item side.

:class:`ItemIndex` answers the model's two item queries approximately, as implicit's
``approximate_als`` models do, but with privrec's scores:

* ``similar_items``: cosine similarity of the item factors (the model's ``similar_items``);
* ``recommend``: the model's own ranking score, including its additive item terms (item bias and
  global mean; for the explicit DPALS model the exposure term and the ``2 / label_bound`` scale), as
  one inner product of an augmented item vector ``[s * v_i, a_i]`` with the query ``[u, 1]``
  (:mod:`privrec.serving._terms`), searched on an inner-product HNSW graph (a non-metric
  similarity graph, as in Morozov & Babenko, NeurIPS 2018, "Non-metric similarity graphs for
  maximum inner product search"). The item term is centred first (a constant shift of every
  score, which leaves the ranking unchanged): uncentred, the global mean dominates the last
  coordinate of every item and the graph recalls less. The Euclidean reduction of maximum inner
  product search (Bachrach et al., RecSys 2014; implicit's ``augment_inner_product_matrix``)
  recalled far less at the same ``ef_search`` on ALS item factors; both alternatives are measured
  in ``benchmarks/results/serving.md``.

Candidates found by the index are re-scored exactly, so every returned score is the model's
score for that item (up to float32 rounding); only *which* items are returned is approximate.
Rated items (``filter_already_liked_items``) and ``filter_items`` are removed from a larger
candidate list (``N`` plus the number of excluded items, rounded up to a power of two); a user
whose candidates still leave fewer than ``N`` eligible items, or who excludes more than
``max_candidates`` items, is answered by exact search, so a row is never short of items that
exist.

Backends: ``"faiss"`` (HNSW graph, ``faiss.IndexHNSWFlat``; the optional extra
``pip install 'privrec[serving]'``) and ``"exact"`` (blocked numpy brute force, no extra: the
reference, and a fallback where faiss cannot be installed). Query cost and recall are set by
``ef_search`` (an attribute: change it without rebuilding); ``M`` and ``ef_construction`` set the
graph. Recall@10 against exact search is measured in ``benchmarks/bench_serving.py``
(``benchmarks/results/serving.md``).

Serving reads only the released item side (and each user's own history, for the billboard
projection of a model without user factors), so it costs no privacy.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validation import check_int
from ..models._base import _as_ids, _normalised, _topk, as_user_items, check_ids
from ._terms import RankingTerms, ranking_terms

BACKENDS = ("faiss", "exact")
#: default HNSW query beam: recall@10 >= 0.99 on ml20m-like ALS and DPALS factors (0.97 for ALS's
#: ``recommend`` at 128; benchmarks/results/serving.md)
DEFAULT_EF_SEARCH = 256
INSTALL_HINT = "pip install 'privrec[serving]'"
#: candidates (users x candidates) gathered and re-scored at once (x the vector width in floats)
_CANDIDATE_ENTRIES = 1 << 16
#: exact scores (users x items) computed at once
_SCORE_ENTRIES = 1 << 22


def _import_faiss():
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(
            f"privrec.serving's approximate index (backend='faiss') needs faiss: {INSTALL_HINT} "
            "(installs faiss-cpu); or use backend='exact'"
        ) from exc
    return faiss


class _ExactBackend:
    """No graph: every query goes to the blocked exact search of :meth:`ItemIndex._search`."""

    exact = True

    def __init__(self, vectors: np.ndarray):
        self.vectors = vectors


class _FaissBackend:
    """faiss HNSW graph of the vectors under the inner product (unit vectors: cosine)."""

    def __init__(self, vectors: np.ndarray, M: int, ef_construction: int):
        faiss = _import_faiss()
        self._faiss = faiss
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        self.index = faiss.IndexHNSWFlat(x.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = ef_construction
        self.index.add(x)

    def candidates(self, queries: np.ndarray, k: int, ef: int) -> np.ndarray:
        params = self._faiss.SearchParametersHNSW(efSearch=max(ef, k))
        _, ids = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)
        return ids


def _make_backend(name: str, vectors: np.ndarray, M: int, ef_construction: int):
    if name == "faiss":
        return _FaissBackend(vectors, M, ef_construction)
    return _ExactBackend(vectors)


def _sorted_unique(ids, n: int, name: str) -> np.ndarray:
    arr, _ = check_ids(ids, n, name)
    return np.unique(arr)


class _Exclusions:
    """Items excluded for each user of a batch: the user's row of ``liked`` (CSR, sorted indices)
    and the global ``filt`` (sorted unique indices)."""

    def __init__(self, n_users: int, n_items: int, liked: sp.csr_matrix | None, filt: np.ndarray | None):
        self.n_items = n_items
        self.filt = filt if filt is not None and filt.size else None
        counts = np.zeros(n_users, dtype=np.int64)
        self.keys = None
        if liked is not None:
            per_row = np.diff(liked.indptr)
            self.keys = np.repeat(np.arange(n_users, dtype=np.int64), per_row) * n_items + liked.indices
            counts += per_row
            if self.filt is not None:  # liked items that are filtered anyway count once
                both = np.isin(liked.indices, self.filt)
                counts -= np.bincount(np.repeat(np.arange(n_users), per_row)[both], minlength=n_users)
        if self.filt is not None:
            counts += self.filt.size
        self.count = counts  # items excluded per user

    def mask(self, rows: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """``True`` where candidate ``cand[j, k]`` (item indices, -1 = none) of user ``rows[j]`` is excluded."""
        out = cand < 0
        if self.keys is not None and self.keys.size:
            key = rows[:, None] * self.n_items + np.maximum(cand, 0)
            pos = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
            out |= self.keys[pos] == key
        if self.filt is not None:
            out |= np.isin(cand, self.filt)
        return out

    def dense(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(row positions, item indices)`` of the excluded entries of users ``rows`` (positions in ``rows``)."""
        r_parts, c_parts = [], []
        if self.keys is not None and self.keys.size:
            user = self.keys // self.n_items
            sel = np.isin(user, rows)
            pos = np.searchsorted(rows, user[sel])  # rows is sorted
            r_parts.append(pos)
            c_parts.append(self.keys[sel] % self.n_items)
        if self.filt is not None:
            r_parts.append(np.repeat(np.arange(rows.size), self.filt.size))
            c_parts.append(np.tile(self.filt, rows.size))
        if not r_parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(r_parts), np.concatenate(c_parts)


class ItemIndex:
    """Approximate nearest-neighbour index over ``model``'s item factors (module docstring).

    Parameters
    ----------
    model : a fitted privrec model (``ALS``, ``ImplicitALS``, ``DPALS``; loaded or in memory).
    backend : ``"faiss"`` (HNSW, needs ``privrec[serving]``; ``ImportError`` naming the extra
        otherwise) or ``"exact"`` (brute force, no extra).
    similar_items, recommend : which of the two indices to build (``similar_items`` needs
        ``factors >= 1``).
    M, ef_construction : HNSW graph degree and construction beam (faiss defaults are 32 and 40;
        a wider construction beam buys recall at query time).
    ef_search : HNSW query beam (at least the number of candidates asked for; default
        :data:`DEFAULT_EF_SEARCH`); an attribute.
    max_candidates : users that exclude so many items that more candidates than this would be
        needed are answered by exact search.
    """

    def __init__(
        self,
        model,
        backend: str = "faiss",
        *,
        similar_items: bool = True,
        recommend: bool = True,
        M: int = 32,
        ef_construction: int = 200,
        ef_search: int = DEFAULT_EF_SEARCH,
        max_candidates: int = 512,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not (similar_items or recommend):
            raise ValueError("build at least one of the similar_items and recommend indices")
        M = check_int(M, "M", minimum=2)
        ef_construction = check_int(ef_construction, "ef_construction", minimum=1)
        self.ef_search = check_int(ef_search, "ef_search", minimum=1)
        self.max_candidates = check_int(max_candidates, "max_candidates", minimum=1)
        if backend == "faiss":
            _import_faiss()  # fail before any work
        model._check_fitted()
        self.model = model
        self.backend = backend
        V = np.asarray(model.item_factors_)
        self.n_items = int(V.shape[0])
        self._unit = None
        self._similar = None
        if similar_items:
            if V.shape[1] == 0:
                raise ValueError(
                    "this model has no item factors (factors = 0, the bias / popularity model): item similarity "
                    "is undefined; build the index with similar_items=False"
                )
            self._unit = _normalised(V)
            self._similar = _make_backend(backend, self._unit, M, ef_construction)
        self.terms: RankingTerms | None = None
        self._items = None
        self._recommend = None
        if recommend:
            self.terms = ranking_terms(model)
            self._items = self.terms.items()
            centred = self._items.copy()
            centred[:, -1] -= np.float32(centred[:, -1].mean(dtype=np.float64)) if self.n_items else 0
            self._recommend = _make_backend(backend, centred, M, ef_construction)

    # ------------------------------------------------------------------ queries
    def similar_items(self, itemid, N: int = 10, filter_items=None):
        """Top-N items by cosine similarity of item factors, ``(ids, scores)``, as ``model.similar_items``
        (the query item itself included; batched over an array of ids)."""
        if self._similar is None:
            raise ValueError("this index was built with similar_items=False")
        N = check_int(N, "N", minimum=1)
        ids, scalar = check_ids(itemid, self.n_items, "itemid")
        assert self._unit is not None
        filt = None if filter_items is None else _sorted_unique(filter_items, self.n_items, "filter_items")
        excl = _Exclusions(ids.size, self.n_items, None, filt)
        q = self._unit[ids]
        # an item without factors has similarity 0 to every item: a tie that only exact search breaks
        # as the model does
        zero = ~np.any(q != 0, axis=1)
        top, vals = self._search(self._similar, self._unit, q, N, excl, zero)
        return self._shaped(top, vals, scalar)

    def recommend(
        self,
        userid,
        user_items,
        N: int = 10,
        filter_already_liked_items: bool = True,
        filter_items=None,
        recalculate_user: bool = False,
    ):
        """Top-N items for user(s) by the model's ranking score, ``(ids, scores)``, as ``model.recommend``
        (same arguments except ``items``; scores are the model's scores)."""
        N = check_int(N, "N", minimum=1)
        model = self.model
        scalar = np.ndim(userid) == 0
        ids = np.atleast_1d(np.asarray(userid))
        needs_rows = filter_already_liked_items or recalculate_user or getattr(model, "user_factors_", None) is None
        rows = model._query_rows(ids, user_items, needs_rows)
        uvec, ubias = model._user_vectors(ids, rows, recalculate_user)
        top, vals = self.top_n(uvec, ubias, N, rows if filter_already_liked_items else None, filter_items)
        return self._shaped(top, vals, scalar)

    def top_n(self, uvec, ubias, N: int, liked=None, filter_items=None) -> tuple[np.ndarray, np.ndarray]:
        """Top-N item indices and scores for user vectors ``uvec`` (and biases ``ubias`` or ``None``):
        ``(ids (b, N) int64, -1 padded; scores (b, N) float32, -inf padded)``. ``liked``: a CSR with one
        row per user whose items are excluded (or ``None``)."""
        if self._recommend is None or self.terms is None:
            raise ValueError("this index was built with recommend=False")
        assert self._items is not None
        q = self.terms.queries(uvec)
        filt = None if filter_items is None else _sorted_unique(filter_items, self.n_items, "filter_items")
        if liked is not None:
            liked = as_user_items(liked, name="liked", n_items=self.n_items)  # sorted indices (a copy if needed)
            if liked.shape[0] != q.shape[0]:
                raise ValueError(f"liked must have one row per user vector ({q.shape[0]}), got {liked.shape[0]}")
        excl = _Exclusions(q.shape[0], self.n_items, liked, filt)
        top, vals = self._search(self._recommend, self._items, q, N, excl)
        offset = self.terms.user_offset(ubias, q.shape[0])
        vals = np.where(top >= 0, vals + offset[:, None], -np.inf).astype(np.float32)
        return top, vals

    # ------------------------------------------------------------------ search
    def _search(self, backend, vectors: np.ndarray, q: np.ndarray, N: int, excl: _Exclusions, force_exact=None):
        """Top-N of ``q @ vectors.T`` without the excluded items: candidates from ``backend``, re-scored
        exactly; exact search for the rows of ``force_exact`` and for rows short of eligible items."""
        n_q, n = q.shape[0], self.n_items
        top = np.full((n_q, N), -1, dtype=np.int64)
        vals = np.full((n_q, N), -np.inf, dtype=np.float32)
        target = np.minimum(N, n - excl.count)  # items each user can get
        want = N + excl.count
        k = np.minimum(2 ** np.ceil(np.log2(np.maximum(want, 1))).astype(np.int64), n)
        exact = (want > self.max_candidates) | (k >= n) | getattr(backend, "exact", False)
        if force_exact is not None:
            exact |= force_exact
        for kk in np.unique(k[~exact]):
            users = np.flatnonzero((k == kk) & ~exact)
            step = max(1, _CANDIDATE_ENTRIES // int(kk))
            for s in range(0, users.size, step):
                rows = users[s : s + step]
                cand = backend.candidates(q[rows], int(kk), self.ef_search)
                bad = excl.mask(rows, cand)
                safe = np.maximum(cand, 0)
                score = np.einsum("bj,bkj->bk", q[rows], vectors[safe])
                score[bad] = -np.inf
                order = np.argsort(-score, axis=1, kind="stable")[:, :N]
                got_ids = np.take_along_axis(cand, order, axis=1)
                got = np.take_along_axis(score, order, axis=1)
                width = got.shape[1]
                top[rows, :width] = np.where(np.isfinite(got), got_ids, -1)
                vals[rows, :width] = got
                short = np.isfinite(got).sum(axis=1) < target[rows]
                exact[rows[short]] = True
        users = np.flatnonzero(exact)
        step = max(1, _SCORE_ENTRIES // n)
        for s in range(0, users.size, step):
            rows = users[s : s + step]
            score = q[rows] @ vectors.T
            r, c = excl.dense(rows)
            score[r, c] = -np.inf
            got_ids, got = _topk(score, N)
            width = got.shape[1]
            top[rows, :width] = np.where(np.isfinite(got), got_ids, -1)
            vals[rows, :width] = got
        return top, vals

    def _shaped(self, top: np.ndarray, vals: np.ndarray, scalar: bool):
        """As the model's methods: columns no row can fill dropped; int32 ids; 1-D for a scalar query."""
        keep = int(np.isfinite(vals).any(axis=0).sum()) if vals.size else 0
        top, vals = top[:, :keep], vals[:, :keep]
        top = _as_ids(top, self.n_items)
        if scalar:
            ok = np.isfinite(vals[0])
            return top[0][ok], vals[0][ok]
        return top, vals


def recall_at_k(approx_ids, exact_ids, approx_scores=None, exact_scores=None, tol: float = 1e-5) -> float:
    """Recall@k of an approximate top-k against the exact top-k, averaged over queries (rows; ids -1
    are padding).

    Without scores: ``|approx ∩ exact| / |exact|``. With both score arrays (the exact scores of
    the returned items, as :class:`ItemIndex` and the models return): tie-aware, an approximate
    item counts when its score reaches the exact k-th score (within ``tol``, relative), so that
    items tied at the k-th place are equally right -- item factors of rarely rated items are often
    parallel (cosine exactly 1), and exact search breaks such ties arbitrarily.
    """
    a = np.atleast_2d(np.asarray(approx_ids))
    e = np.atleast_2d(np.asarray(exact_ids))
    if a.shape[0] != e.shape[0]:
        raise ValueError(f"approx_ids and exact_ids need one row per query, got {a.shape[0]} and {e.shape[0]}")
    if (approx_scores is None) != (exact_scores is None):
        raise ValueError("pass both approx_scores and exact_scores, or neither")
    want = (e >= 0).sum(axis=1)
    if approx_scores is None:
        hits = sum(len(set(re[re >= 0].tolist()).intersection(ra[ra >= 0].tolist())) for ra, re in zip(a, e))
    else:
        sa = np.atleast_2d(np.asarray(approx_scores, dtype=np.float64))
        se = np.atleast_2d(np.asarray(exact_scores, dtype=np.float64))
        if sa.shape != a.shape or se.shape != e.shape:
            raise ValueError("score arrays must have the shapes of their id arrays")
        kth = np.array([row[ids >= 0].min() if np.any(ids >= 0) else np.inf for row, ids in zip(se, e)])
        ok = (a >= 0) & np.isfinite(sa) & (sa >= (kth - tol * (1.0 + np.abs(kth)))[:, None])
        hits = int(np.minimum(ok.sum(axis=1), want).sum())
    total = int(want.sum())
    return hits / total if total else 1.0
