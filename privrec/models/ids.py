"""Id maps of privrec's factorisation models: row indices and the original user / item ids.

Follows implicit 0.7's ``recommender_base`` for indices: the ids its methods take and return
(``userid``, ``itemid``, ``items``, ``filter_items``) are row indices of the fitted matrices, an
integer or a 1-D array of them (:func:`check_ids`). A model fitted from data with ids (a pandas
DataFrame or an ``Interactions``) also holds ``user_ids_`` / ``item_ids_`` (index -> original id,
``None`` when fitted from a bare matrix: the indices are the ids), as scikit-learn's
``feature_names_in_`` names the columns seen in ``fit``; :class:`IdMapMixin` maps ids to rows
through a cached ``pandas.Index`` and recommends by id (``recommend_ids``, ``similar_items_ids``).

User ids and sampling: per-user sampling in a private fit is keyed on each user's id
(:func:`privrec.allocation.stable_user_keys`); a bare matrix has no ids and its row index is the id.

How the id maps are written to a model file, and which a private model keeps, is
:mod:`privrec.models.persistence`.
"""

from __future__ import annotations

import numbers
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_int, unhashable_id_error
from .inputs import _id_array, as_user_items


def ignores_unknown_items_quietly(model) -> bool:
    """Whether ratings of items ``model`` does not know are dropped without a warning: its item
    axis is a private item selection, which leaves rated items out by design (they can be neither
    used nor recommended, and saying so on every call would be noise)."""
    return getattr(model, "_item_axis", None) == "selection"


def check_ids(ids, n: int, name: str) -> tuple[np.ndarray, bool]:
    """Return ``(ids as int64 1-D array, was_scalar)``; ``ValueError`` for negative / out-of-range ids."""
    scalar = np.ndim(ids) == 0
    arr = np.atleast_1d(np.asarray(ids))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be an integer or a 1-D array of integers, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        if (
            arr.dtype.kind == "f"
            and np.all(np.isfinite(arr))
            and np.all(arr == np.round(arr))
            and np.all(np.abs(arr) < 2.0**62)
        ):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"{name} must be in [0, {n}), got values in [{arr.min()}, {arr.max()}]")
    return arr, scalar


def _dropped_item_ids() -> ValueError:
    """The error of an id lookup in a model whose data-derived item ids were not kept."""
    return ValueError(
        "this model was saved without item ids (its item axis was not a declared catalogue, and the privrec that "
        "saved it did not keep ids derived from the training data), so ids cannot be mapped to rows; use row "
        "indices (similar_items, recommend), or refit and save it again (privrec now saves the item ids)"
    )


class IdMapMixin:
    """The id side of :class:`FactorizationModel`: original ids <-> rows (``user_ids_`` /
    ``item_ids_``), per-user sampling keys, and ``recommend`` / ``similar_items`` by original id."""

    if TYPE_CHECKING:
        item_factors_: Any

        @property
        def n_items_(self) -> int: ...

        def _check_fitted(self) -> None: ...

        def _user_bias(self) -> Any: ...

        def _project_users(self, user_items: sp.csr_matrix) -> Any: ...

        def _rank(self, *args: Any, **kwargs: Any) -> Any: ...

        def similar_items(self, *args: Any, **kwargs: Any) -> Any: ...

    # ------------------------------------------------------------------ id maps
    def _sampling_user_keys(self, n_users: int, ids=None) -> np.ndarray:
        """Stable per-user sampling keys of the users being fitted
        (:func:`privrec.allocation.stable_user_keys` of their ids, one per row).

        The ids are those of the fit input (an ``Interactions`` or a DataFrame); a bare matrix has
        none, and its row index is then the id. Keyed on the id, a user's sample does not depend on
        the other users, so removing a user leaves every other user's sample unchanged even for
        someone who knows the sampling key (a fixed ``random_state``).
        """
        from ..allocation import stable_user_keys

        if ids is None or len(ids) != n_users:
            ids = np.arange(n_users, dtype=np.int64)
        return stable_user_keys(ids)

    def _lookup(self, which: str):
        """``pandas.Index`` of ``user_ids_`` / ``item_ids_`` (cached), or ``None`` without ids."""
        import pandas as pd

        ids = getattr(self, f"{which}_ids_", None)
        if ids is None:
            return None
        cache = self.__dict__.setdefault("_id_lookup", {})
        hit = cache.get(which)
        if hit is None or hit[0] is not ids:
            hit = (ids, pd.Index(ids))
            cache[which] = hit
        return hit[1]

    def _codes(self, which: str, ids, n: int, strict: bool = True) -> np.ndarray:
        """Indices of original ids (``-1`` for unknown ones unless ``strict``: then ``ValueError``)."""
        arr = _id_array(ids)
        index = self._lookup(which)
        if index is None and which == "item" and self._item_ids_dropped():
            raise _dropped_item_ids()
        if index is None:  # fitted from a bare matrix: ids are indices
            codes = np.full(arr.shape, -1, dtype=np.int64)
            if arr.dtype.kind in "iu":
                ok = (arr >= 0) & (arr < n)
            else:
                ok = np.array(
                    [
                        isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)) and 0 <= int(x) < n
                        for x in arr.tolist()
                    ],
                    dtype=np.bool_,
                )
            codes[ok] = arr[ok].astype(np.int64)
        else:
            try:
                codes = index.get_indexer(arr).astype(np.int64)
            except TypeError:
                raise (
                    unhashable_id_error(arr, f"the {which} ids") or ValueError(f"{which} ids cannot be hashed")
                ) from None
        if strict and np.any(codes < 0):
            missing = list(arr[codes < 0][:5])
            raise ValueError(f"unknown {which} id(s) {missing}: not in the model's {which}_ids_")
        return codes

    def _item_ids_dropped(self) -> bool:
        """Whether the model had item ids that were not kept: its item axis came from the data (no
        declared catalogue) and it was saved or pickled by a privrec that dropped those ids from a
        private model (issue 27; they are kept since issue 39)."""
        return (
            getattr(self, "_item_axis", None) == "data"
            and getattr(self, "item_ids_", None) is None
            and not self.__dict__.get("_item_ids_identity", False)  # fitted in memory on ids 0..n-1
        )

    def _item_id_values(self, idx: np.ndarray) -> np.ndarray:
        if self._item_ids_dropped():
            raise _dropped_item_ids()
        ids = getattr(self, "item_ids_", None)
        return idx if ids is None else np.asarray(ids)[idx]

    def _check_vocabulary_growth(self, which: str, n_new: int, n_old: int):
        if n_new > n_old and getattr(self, f"{which}_ids_", None) is not None:
            raise ValueError(
                f"this model maps {which} ids ({which}_ids_ has {n_old} entries); indices >= {n_old} "
                f"would be {which}s without an id: refit with the new {which}s instead"
            )

    # ------------------------------------------------------------------ by original id
    def _id_rows(self, req: np.ndarray, user_items):
        """Rows (one per requested user) of ``user_items`` given by id: a long DataFrame or an
        ``Interactions``; items unknown to the model are dropped (with a warning, unless the model's
        items are a private item selection, which leaves items out by design)."""
        import pandas as pd

        if isinstance(user_items, pd.DataFrame):
            from ..data.frames import frame_triples

            users, items, vals = frame_triples(user_items, rating_required=False)
        else:
            m = as_user_items(user_items)
            coo = m.tocoo()
            users, items, vals = (
                np.asarray(user_items.user_ids)[coo.row],
                np.asarray(user_items.item_ids)[coo.col],
                coo.data,
            )
        if vals is None:
            vals = np.ones(len(users), dtype=np.float32)
        req_codes, req_uniques = pd.factorize(req)
        pos = pd.Index(req_uniques).get_indexer(users)
        keep = pos >= 0
        item_idx = self._codes("item", np.asarray(items)[keep], self.n_items_, strict=False)
        unknown = int(np.count_nonzero(item_idx < 0))
        if unknown and not ignores_unknown_items_quietly(self):
            warnings.warn(
                f"{unknown} rated item(s) of the queried users are not in the model's items and are ignored",
                UserWarning,
                stacklevel=3,
            )
        ok = item_idx >= 0
        r, c, v = pos[keep][ok], item_idx[ok], np.asarray(vals, dtype=np.float32)[keep][ok]
        # duplicate (user, item) rows are rejected by the COO check, not summed
        mat = as_user_items(sp.coo_matrix((v, (r, c)), shape=(len(req_uniques), self.n_items_)), name="user_items")
        return mat[req_codes]

    def _entries(self, X):
        """``(user index, item index, ratings or None)`` of the entries of ``X`` (unknown ids: -1).

        ``X``: a long-format DataFrame (``user`` / ``item`` [/ ``rating``] columns, ids mapped
        through ``user_ids_`` / ``item_ids_``; ids never seen in training get index -1), an
        ``Interactions`` (same, through its own id maps), or a sparse users x items matrix indexed
        like the training matrix (one row per fitted user).
        """
        import pandas as pd

        uf = getattr(self, "user_factors_", None)
        n_users = None if uf is None else uf.shape[0]
        if isinstance(X, pd.DataFrame):
            from ..data.frames import frame_triples

            users, items, vals = frame_triples(X, rating_required=False)
        elif not sp.issparse(X) and hasattr(X, "matrix") and hasattr(X, "user_ids"):
            m = as_user_items(X, name="X")
            coo = m.tocoo()
            users, items, vals = np.asarray(X.user_ids)[coo.row], np.asarray(X.item_ids)[coo.col], coo.data
        else:
            m = as_user_items(X, name="X", n_items=self.n_items_, model=type(self).__name__)
            if n_users is not None and m.shape[0] != n_users:
                raise ValueError(
                    f"X has {m.shape[0]} rows but the model has {n_users} fitted users: a matrix X is indexed like the "
                    "training matrix (its entries are held-out ratings of the training users). To cross-validate, "
                    "split ratings, not users: pass a long-format DataFrame with privrec.data.RatingSplitCV"
                )
            coo = m.tocoo()
            return coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data
        u = self._codes("user", users, n_users if n_users is not None else 0, strict=False)
        i = self._codes("item", items, self.n_items_, strict=False)
        return u, i, (None if vals is None else np.asarray(vals, dtype=np.float32))

    def recommend_ids(
        self,
        user_id,
        user_items=None,
        N: int = 10,
        filter_already_liked_items: bool = True,
        filter_items=None,
        items=None,
        recalculate_user: bool = False,
    ):
        """Top-N items for users given by their original ids: ``(item ids, scores)``.

        For a model fitted from a DataFrame / ``Interactions`` with ids (``user_ids_`` /
        ``item_ids_``); a model fitted from a bare matrix uses indices as ids. ``user_items``: the
        users' rated items, as a long-format DataFrame (``user`` / ``item`` [/ ``rating``]
        columns, e.g. the training table itself), an ``Interactions``, or a sparse matrix with one
        row per requested user (indexed like the model's items); ``None`` when not needed (known
        users, ``filter_already_liked_items=False``). Users absent from ``user_ids_`` (new users),
        ``recalculate_user=True`` and models without user factors are projected from their rows
        (billboard, free). ``filter_items`` / ``items`` are item ids. Batched calls return 2-D
        arrays; if a row has fewer than N eligible items its tail holds id ``None`` (score -inf).
        """
        self._check_fitted()
        import pandas as pd

        N = check_int(N, "N", minimum=1)
        scalar = not isinstance(user_id, (list, tuple)) and np.ndim(user_id) == 0
        req = _id_array([user_id] if scalar else user_id)
        uf = getattr(self, "user_factors_", None)
        n_users = 0 if uf is None else uf.shape[0]
        codes = self._codes("user", req, n_users, strict=False) if uf is not None else np.full(req.shape, -1)
        rows = None
        if user_items is not None:
            by_id = isinstance(user_items, pd.DataFrame) or (
                not sp.issparse(user_items) and hasattr(user_items, "user_ids")
            )
            if by_id:
                rows = self._id_rows(req, user_items)
            else:
                rows = as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__)
                if rows.shape[0] != req.size:
                    raise ValueError(
                        f"a sparse user_items must have one row per requested user ({req.size}), got {rows.shape[0]}"
                    )
        projected = np.ones(req.size, dtype=bool) if (recalculate_user or uf is None) else codes < 0
        if projected.any():
            no_data = projected if rows is None else projected & (np.diff(rows.indptr) == 0)
            if no_data.any():
                raise ValueError(
                    f"user id(s) {list(req[no_data][:5])} have no fitted factors (unknown users, "
                    f"recalculate_user=True, or a model without user factors) and no ratings in "
                    f"user_items to project them from"
                )
        if filter_already_liked_items and rows is None:
            raise ValueError(
                "filter_already_liked_items=True needs the users' rated items: pass user_items (e.g. the "
                "training DataFrame), or filter_already_liked_items=False"
            )
        if recalculate_user or uf is None:
            uvec, ubias = self._project_users(rows)
        else:
            d = self.item_factors_.shape[1]
            uvec = np.zeros((req.size, d), dtype=self.item_factors_.dtype)
            ub_all = self._user_bias()
            ubias = None if ub_all is None else np.zeros(req.size, dtype=ub_all.dtype)
            known = codes >= 0
            uvec[known] = uf[codes[known]]
            if ubias is not None:
                ubias[known] = ub_all[codes[known]]
            if not known.all():
                assert rows is not None  # unknown users without user_items rows raised above (no_data)
                pu, pb = self._project_users(rows[np.flatnonzero(~known)])
                uvec[~known] = pu
                if pb is not None:
                    if ubias is None:
                        ubias = np.zeros(req.size, dtype=pb.dtype)
                    ubias[~known] = pb
        fi = None if filter_items is None else self._codes("item", filter_items, self.n_items_)
        cand = None if items is None else self._codes("item", items, self.n_items_)
        top, vals = self._rank(uvec, ubias, rows if filter_already_liked_items else None, N, fi, cand, False)
        out = self._item_id_values(np.where(top >= 0, top, 0))
        if np.any(top < 0):
            out = out.astype(object)
            out[top < 0] = None
        if scalar:
            ok = np.isfinite(vals[0])
            return out[0][ok], vals[0][ok]
        return out, vals

    def similar_items_ids(self, item_id, N: int = 10, filter_items=None, items=None):
        """``similar_items`` by original item ids: ``(item ids, scores)`` (``filter_items`` / ``items`` are ids)."""
        self._check_fitted()
        scalar = not isinstance(item_id, (list, tuple)) and np.ndim(item_id) == 0
        q = self._codes("item", [item_id] if scalar else item_id, self.n_items_)
        fi = None if filter_items is None else self._codes("item", filter_items, self.n_items_)
        cand = None if items is None else self._codes("item", items, self.n_items_)
        top, vals = self.similar_items(q[0] if scalar else q, N=N, filter_items=fi, items=cand)
        return self._item_id_values(top), vals
