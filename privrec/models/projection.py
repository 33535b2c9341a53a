"""Updating a fitted :class:`~privrec.models.FactorizationModel` from new rows (a mixin of it).

A user's *own* ratings are free (the billboard projection, Krichene et al. 2023, Remark D.1):
``recalculate_user``, ``transform``, ``fit_transform``, ``partial_fit_users``. Items re-solved
from *other* users' ratings (``recalculate_item``, ``partial_fit_items``) are for non-private
models only: for a private one they would be releases no privacy ledger accounts for, refused
with :class:`PrivateReleaseError`. Importable from :mod:`privrec.models._base` too.
"""

from __future__ import annotations

import numpy as np

from .._validation import check_memory
from ._mixin_typing import MixinBase
from .ids import check_ids
from .inputs import _item_users, as_user_items, fit_input, with_item_catalogue


class PrivateReleaseError(ValueError, NotImplementedError):
    """The operation would compute a new function of other users' private training data after the
    release (e.g. re-solving an item from its ratings): a release that the model's privacy ledger
    does not account for. Subclasses both ``ValueError`` and ``NotImplementedError``."""


def _grown_bias(b: np.ndarray | None, n_new: int, ids, values, dtype) -> np.ndarray:
    """Bias table ``b`` (``None``: none yet) cut or grown with zeros to ``n_new`` entries, ``ids`` set to
    ``values`` (``None``: kept)."""
    out = np.zeros(n_new, dtype=dtype)
    if b is not None:
        out[: b.shape[0]] = b[:n_new]
    if values is not None:
        out[ids] = values
    return out


class ProjectionMixin(MixinBase):
    """``recalculate_user`` / ``transform`` / ``fit_transform`` / ``partial_fit_users`` (free) and
    ``recalculate_item`` / ``partial_fit_items`` (non-private models only) of
    :class:`~privrec.models.FactorizationModel`."""

    def _private_refusal(self, what: str) -> PrivateReleaseError:
        return PrivateReleaseError(
            f"{what} is not available for a private {type(self).__name__} (epsilon={self.epsilon}): it would compute "
            f"a new function of other users' training data after the release, a private release that the "
            f"model's privacy ledger does not account for (the (epsilon, delta) guarantee covers fit only). Refit "
            f"the model (a new, accounted release) to include new data"
        )

    # ------------------------------------------------------------------ projection
    def _grown_factors(self, which: str, F: np.ndarray, n_new: int, ids, factors) -> np.ndarray:
        """``F`` (the ``which`` side's factors) grown with zero rows to ``n_new`` rows, rows ``ids`` set to ``factors``."""
        n_old, d = F.shape
        self._check_vocabulary_growth(which, n_new, n_old)
        check_memory(n_new, d + 1, F.dtype.itemsize, f"{which} factors")
        out = np.zeros((n_new, d), dtype=F.dtype)
        out[:n_old] = F
        out[ids] = factors
        return out

    def recalculate_user(self, userid, user_items):
        """Billboard projection of users' own histories onto the item factors (no privacy cost).

        ``user_items`` rows correspond to ``userid`` (implicit 0.7 convention). Returns the user
        factors (d,) for a scalar id or (len(userid), d).
        """
        self._check_fitted()
        ids = np.atleast_1d(np.asarray(userid))
        rows = as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__)
        if rows.shape[0] != ids.size:
            raise ValueError(f"user_items must have one row per userid ({ids.size}), got {rows.shape[0]}")
        factors, _ = self._project_users(rows)
        return factors[0] if np.ndim(userid) == 0 else factors

    def transform(self, user_items):
        """Project every row of ``user_items`` (users x items) onto the item factors (Krichene et al., Remark D.1)."""
        self._check_fitted()
        factors, _ = self._project_users(as_user_items(user_items, n_items=self.n_items_, model=type(self).__name__))
        return factors

    def fit_transform(self, X, y=None, **fit_params):
        """``fit(X)`` then ``transform`` of the training matrix: the users' embeddings (rows in the
        order of the fitted users, i.e. of ``user_ids_`` when ``X`` carried ids)."""
        items = fit_params.get("items")
        R = fit_input(X if items is None else with_item_catalogue(X, items))[0]
        return self.fit(X, **fit_params).transform(R)

    def partial_fit_users(self, userids, user_items):
        """Update (or add) users from their own histories: billboard projection, no privacy cost.

        implicit 0.7 convention: ``user_items`` has one row per id in ``userids``; ids beyond the
        fitted users extend ``user_factors_`` / ``user_bias_`` (users in between get zero factors
        and bias: the prediction of a user without data). A loaded private model (no user factors)
        starts from an empty user table.
        """
        self._check_fitted()
        n_items = self.n_items_
        ids = np.atleast_1d(np.asarray(userids))
        ids, _ = check_ids(ids, np.iinfo(np.int64).max, "userids")
        rows = as_user_items(user_items, n_items=n_items)
        if rows.shape[0] != ids.size:
            raise ValueError(
                f"user_items must contain 1 row for every user in userids ({ids.size}), got {rows.shape[0]}"
            )
        if np.unique(ids).size != ids.size:
            raise ValueError("userids holds repeated ids")
        factors, bias = self._project_users(rows)
        d = self.item_factors_.shape[1]
        uf = getattr(self, "user_factors_", None)
        uf = np.zeros((0, d), dtype=self.item_factors_.dtype) if uf is None else np.asarray(uf)
        n_old = uf.shape[0]
        n_new = max(n_old, int(ids.max()) + 1) if ids.size else n_old
        new_uf = self._grown_factors("user", uf, n_new, ids, factors)
        ub = self._user_bias()
        if bias is not None or ub is not None:
            self.user_bias_ = _grown_bias(ub, n_new, ids, bias, uf.dtype)
        self.user_factors_ = new_uf
        return self

    # ------------------------------------------------------------------ items from other users' data
    def recalculate_item(self, itemid, item_users):
        """Re-solve items from their ratings (``item_users``: items x users, one row per ``itemid``,
        or the full items x users matrix) with the fitted user side held fixed.

        Non-private models only: for a private model this would be a new, unaccounted release of
        the raters' data (:class:`PrivateReleaseError`).
        """
        self._check_fitted()
        if self._is_private():
            raise self._private_refusal("recalculate_item")
        rows, _ = self._item_rows(itemid, item_users)
        factors, _ = self._solve_items(rows)
        return factors[0] if np.ndim(itemid) == 0 else factors

    def _item_rows(self, itemid, item_users):
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(f"this {type(self).__name__} holds no user factors, so items cannot be re-solved")
        if item_users is None:
            raise ValueError("item_users (items x users ratings) is required to recalculate items")
        ids = np.atleast_1d(np.asarray(itemid))
        rows = _item_users(item_users, uf.shape[0])
        if rows.shape[0] != ids.size:
            if rows.shape[0] == self.n_items_:
                checked, _ = check_ids(ids, rows.shape[0], "itemid")
                rows = rows[checked]
            else:
                raise ValueError(
                    f"item_users must have one row per itemid ({ids.size}) or one per fitted item, "
                    f"got {rows.shape[0]} rows"
                )
        return rows, ids

    def partial_fit_items(self, itemids, item_users):
        """Update (or add) items from their ratings (``item_users``: one row per id in ``itemids``).

        Non-private models only (exact solve with the user side fixed); a private model raises
        :class:`PrivateReleaseError` (new items need a new, accounted release: refit).
        """
        self._check_fitted()
        if self._is_private():
            raise self._private_refusal("partial_fit_items")
        ids = np.atleast_1d(np.asarray(itemids))
        ids, _ = check_ids(ids, np.iinfo(np.int64).max, "itemids")
        if np.unique(ids).size != ids.size:
            raise ValueError("itemids holds repeated ids")
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(f"this {type(self).__name__} holds no user factors, so items cannot be solved")
        rows = _item_users(item_users, uf.shape[0])
        if rows.shape[0] != ids.size:
            raise ValueError(
                f"item_users must contain 1 row for every item in itemids ({ids.size}), got {rows.shape[0]}"
            )
        factors, bias = self._solve_items(rows)
        V = np.asarray(self.item_factors_)
        new_V = self._grown_factors("item", V, max(V.shape[0], int(ids.max()) + 1), ids, factors)
        ib = self._item_bias()
        if ib is not None:
            self.item_bias_ = _grown_bias(ib, new_V.shape[0], ids, bias, ib.dtype)
        self.item_factors_ = new_V
        return self
