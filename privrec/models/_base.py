"""Shared estimator API for privrec's factorisation models (Krichene et al., ICML 2023, App. D.1).

The API follows scikit-learn (hyper-parameters in ``__init__`` only, learned state with a trailing
underscore, ``get_params`` / ``set_params`` / ``sklearn.base.clone``, ``NotFittedError``,
``score``) and implicit 0.7's ``recommender_base`` (``fit(user_items, show_progress, callback)``,
``recommend``, ``similar_items``, ``similar_users``, ``recalculate_user`` / ``recalculate_item``,
``partial_fit_users`` / ``partial_fit_items``, ``rank_items``, ``user_factors`` / ``item_factors``,
``save`` / ``load`` of a path or file object; ids and scores returned as ``(ids, scores)`` arrays,
batched over arrays of ids), so a script written for ``implicit`` runs after swapping the import.

:class:`FactorizationModel` holds that contract and the logic every model shares: recommend /
similar items and users / rank / predict / score from the fitted factors, and the billboard
projection of a user's own ratings. Its other concerns are mixed in from their own modules:
:mod:`privrec.models.inputs` (what ``fit`` and the query methods accept: the fit wrapper, item
catalogue, user roster, rating range), :mod:`privrec.models.ids` (row indices and original ids,
``recommend_ids``) and :mod:`privrec.models.persistence` (``save`` / ``load`` and safe pickling;
the file format: :mod:`privrec.models.model_file`). Names defined there are importable from here
too.

Learned state common to all models: ``item_factors_`` (n_items, d), ``user_factors_`` (n_users, d)
and, where a model has them, ``global_mean_``, ``user_bias_``, ``item_bias_``. A prediction is
``global_mean_ + user_bias_[u] + item_bias_[i] + <user_factors_[u], item_factors_[i]>``.

Model selection over a private model: scores computed for scikit-learn's model selection
(``GridSearchCV``, ``cross_val_score``, ...) are functions of the private data that no privacy
ledger counts, and choosing among the candidates spends privacy that none of their (epsilon, delta)
guarantees covers; :class:`PrivateSelectionWarning` says so once per model and points to
:func:`privrec.tuning.select_private`, which accounts for the whole selection.

Private models (``epsilon`` finite) refuse operations that would compute something new from
*other* users' data after the release (``recalculate_item``, ``partial_fit_items``): those would be
releases no privacy ledger accounts for, so they raise :class:`PrivateReleaseError`. Operations on
a user's *own* data are free (billboard projection, Krichene et al. 2023, Remark D.1): ``recalculate_user``,
``partial_fit_users``, ``transform``, and ``recommend`` on a loaded model without user factors,
which projects the given ``user_items`` rows automatically.
"""

from __future__ import annotations

import math
import warnings
import weakref

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from .._validation import check_int, check_memory
from .ids import (  # noqa: F401 (re-exported: importable from here, as before the split)
    IdMapMixin,
    _dropped_item_ids,
    check_ids,
)
from .inputs import (  # noqa: F401 (re-exported: importable from here, as before the split)
    ITEM_AXIS_SOURCES,
    FitInput,
    FitInputMixin,
    ItemCatalogueWarning,
    RatingRangeWarning,
    UserRosterWarning,
    _check_fitted_factors,
    _dense_to_csr,
    _id_array,
    _is_identity_ids,
    _is_show_progress,
    _item_users,
    as_user_items,
    called_by_sklearn,
    check_fit_matrix,
    check_rating_range,
    fit_input,
    item_axis_source,
    user_axis_source,
    with_item_catalogue,
    with_user_roster,
)
from .model_file import (  # noqa: F401 (re-exported: importable from here, as before the split)
    _EPS_RTOL,
    _FLOAT_DTYPES,
    _MAX_EXPANSION,
    _MAX_JSON_DEPTH,
    _MAX_META_BYTES,
    _READABLE_VERSIONS,
    FORMAT_NAME,
    FORMAT_VERSION,
    _as_epsilon,
    _BadModelFile,
    _c_order,
    _check_declared_sizes,
    _check_member_size,
    _check_params,
    _content_hash,
    _json_depth,
    _npz_members,
    _one_line,
    _parse_meta,
    _read_array_member,
    _read_exact,
    _read_header,
    _read_text_member,
    _same_epsilon,
    _scalar_param,
    _verify_privacy_report,
)
from .persistence import (  # noqa: F401 (re-exported: importable from here, as before the split)
    _RUNTIME_PARAMS,
    PersistenceMixin,
    PrivateStateWarning,
    _ids_from_json,
    _ids_to_json,
    _jsonable,
    _param_fingerprint,
)

__all__ = [
    "FactorizationModel",
    "PrivateReleaseError",
    "PrivateSelectionWarning",
    "PrivateStateWarning",
    "ItemCatalogueWarning",
    "UserRosterWarning",
    "RatingRangeWarning",
    "NotFittedError",
    "as_user_items",
    "check_fit_matrix",
    "check_ids",
    "check_rating_range",
    "fit_input",
    "item_axis_source",
    "user_axis_source",
    "with_item_catalogue",
    "with_user_roster",
]


class PrivateReleaseError(ValueError, NotImplementedError):
    """The operation would compute a new function of other users' private training data after the
    release (e.g. re-solving an item from its ratings): a release that the model's privacy ledger
    does not account for. Subclasses both ``ValueError`` and ``NotImplementedError``."""


class PrivateSelectionWarning(UserWarning):
    """A private model is scored for scikit-learn's model selection (``GridSearchCV``,
    ``cross_val_score``, ...): the scores and the choice among candidates are computed from the
    private data, and no privacy ledger counts that spending. :func:`privrec.tuning.select_private`
    selects among private candidates with every release in one ledger."""


#: models that already warned (held weakly: a model is not kept alive, nor its state changed)
_selection_warned: weakref.WeakSet = weakref.WeakSet()


def _calling_search():
    """The scikit-learn search (``GridSearchCV``, ``RandomizedSearchCV``, ...) on the call stack, if any."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        # a search object of sklearn.model_selection (GridSearchCV, RandomizedSearchCV, the halving
        # searches): recognised by its public shape, without importing a private scikit-learn module
        if (
            candidate is not None
            and type(candidate).__module__.startswith("sklearn.model_selection")
            and hasattr(candidate, "estimator")
            and hasattr(candidate, "cv")
        ):
            return candidate
        frame = frame.f_back
    return None


def warn_private_selection(model, stacklevel: int = 3) -> None:
    """One :class:`PrivateSelectionWarning` per scikit-learn search (per private ``model``, finite
    epsilon, scored within ``sklearn.model_selection`` outside a search); nothing otherwise."""
    if not model._is_private() or not called_by_sklearn("sklearn.model_selection"):
        return
    owner = _calling_search() or model  # one warning per search (its candidates are clones), else per model
    if owner in _selection_warned:
        return
    _selection_warned.add(owner)
    warnings.warn(
        f"scoring a private {type(model).__name__} (epsilon={model.epsilon}) for scikit-learn's model selection: "
        "each candidate's (epsilon, delta) covers its own release only, while the scores and the choice among "
        "candidates are computed from the private training and held-out data, spending privacy that no privacy "
        "ledger counts. Select settings on public or synthetic data, or use privrec.tuning.select_private, "
        "which fits the candidates, releases their held-out scores with noise and refits the winner under one "
        "ledger",
        PrivateSelectionWarning,
        stacklevel=stacklevel,
    )


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


def _normalised(F: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (all-zero rows stay zero: similarity 0 to everything)."""
    F = np.asarray(F, dtype=np.float32)
    norms = np.linalg.norm(F, axis=1)
    return F / np.where(norms > 0, norms, 1.0)[:, None]


def _array_or_none(value):
    return None if value is None else np.asarray(value)


def _grown_bias(b: np.ndarray | None, n_new: int, ids, values, dtype) -> np.ndarray:
    """Bias table ``b`` (``None``: none yet) cut or grown with zeros to ``n_new`` entries, ``ids`` set to
    ``values`` (``None``: kept)."""
    out = np.zeros(n_new, dtype=dtype)
    if b is not None:
        out[: b.shape[0]] = b[:n_new]
    if values is not None:
        out[ids] = values
    return out


def _implicit_alias(attr: str, note: str) -> property:
    """The fitted attribute ``attr`` under implicit's name (no trailing underscore), read and write.

    Reading gives ``None`` while ``attr`` is unset; assigning stores ``value`` as an array (``None`` as is).
    """

    def get(self):
        return getattr(self, attr, None)

    def set_(self, value):
        setattr(self, attr, _array_or_none(value))

    return property(get, set_, doc=f"``{attr}`` under implicit's name {note}.")


def _embedding_for_similarity(F: np.ndarray, side: str) -> np.ndarray:
    """``F`` (``side`` factors), refused when it has no columns: cosine of empty embeddings is undefined."""
    if F.shape[1] == 0:
        raise ValueError(
            f"this model has no {side} factors (factors = 0: the bias / popularity model, which the automatic "
            f"configuration chooses when the privacy noise would swamp item embeddings), so {side} similarity is "
            "undefined; fit with a larger epsilon, more users or an explicit factors="
        )
    return F


class FactorizationModel(FitInputMixin, IdMapMixin, PersistenceMixin, BaseEstimator):
    """Base class: recommend / similar items and users / predict / score / projection / save / load.

    Subclasses implement ``fit`` (which receives a checked CSR: see :mod:`privrec.models.inputs`) and
    ``_project_users(user_items) -> (factors, user_bias)`` (the billboard projection of Krichene et al.
    2023, Remark D.1: a user's embedding recomputed from the fitted item side and that user's own
    ratings only). Non-private models may implement ``_solve_items(item_users) -> (factors,
    item_bias)`` (an exact item solve from the fitted user side) for ``recalculate_item`` and
    ``partial_fit_items``. Mixed in: the fit wrapper and input declarations (:class:`FitInputMixin`),
    the id maps and ``recommend_ids`` / ``similar_items_ids`` (:class:`IdMapMixin`), ``save`` /
    ``load`` and pickling (:class:`PersistenceMixin`).

    scikit-learn conventions: ``fit`` returns ``self``; methods of an unfitted model raise
    ``sklearn.exceptions.NotFittedError`` (a ``ValueError`` and ``AttributeError``);
    ``score(X)`` is the negative RMSE of the held-out ratings in ``X`` (see :meth:`score`);
    use :class:`privrec.data.RatingSplitCV` to cross-validate over ratings with ``GridSearchCV``.
    """

    # ------------------------------------------------------------------ state helpers
    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "item_factors_", None) is not None

    def _check_fitted(self):
        check_is_fitted(self, msg=f"this {type(self).__name__} is not fitted yet; call fit(user_items) first")

    def __sklearn_tags__(self):
        # Input: a users x items ratings matrix, sparse (CSR/CSC/COO) or dense (NaN = unrated, 0 is a
        # rating), or an Interactions / long-format DataFrame.
        # No target (requires_y False; a y given to fit is ignored).
        # A transformer: ``transform(user_items)`` maps each user's rating row to that user's
        # d-dimensional embedding (the billboard projection of Krichene et al. 2023, Remark D.1: row by row,
        # from the fitted item side), so ``fit(X).transform(X)`` works in a Pipeline that feeds
        # user embeddings to a downstream estimator. The output dtype is the model's ``dtype``
        # (float32 by default), not the input's, hence ``preserves_dtype=[]``.
        # Not a regressor: ``predict`` takes (user, item) pairs or the entries of a ratings matrix,
        # not rows of features; ``score`` is the negative RMSE of held-out ratings.
        from sklearn.utils import TransformerTags

        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True  # NaN marks an unrated entry of a dense matrix (infinity is rejected)
        tags.target_tags.required = False
        tags.requires_fit = True
        tags.transformer_tags = TransformerTags(preserves_dtype=[])
        tags.non_deterministic = "random_state" in self.get_params(deep=False) and self.random_state is None
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"requires_y": False, "X_types": ["2darray", "sparse"], "allow_nan": True, "requires_fit": True}

    @property
    def n_items_(self) -> int:
        self._check_fitted()
        return int(self.item_factors_.shape[0])

    @property
    def n_features_in_(self) -> int:
        """scikit-learn's name for the number of columns of ``X``: the number of items."""
        return self.n_items_

    item_factors = _implicit_alias("item_factors_", "(``None`` before fit, as in implicit)")
    user_factors = _implicit_alias("user_factors_", "(``None`` before fit, or for a loaded private model)")

    def _item_bias(self):
        return _array_or_none(getattr(self, "item_bias_", None))

    def _user_bias(self):
        return _array_or_none(getattr(self, "user_bias_", None))

    def _global(self) -> float:
        return float(getattr(self, "global_mean_", 0.0) or 0.0)

    def _project_users(self, user_items: sp.csr_matrix):
        raise NotImplementedError

    def _solve_items(self, item_users: sp.csr_matrix):
        raise NotImplementedError(
            f"{type(self).__name__} cannot re-solve item factors (recalculate_item / partial_fit_items)"
        )

    def _is_private(self) -> bool:
        """Whether the model carries a (finite) privacy guarantee: its parameter ``epsilon`` < inf."""
        eps = getattr(self, "epsilon", None)
        if eps is None:
            return False
        try:
            return math.isfinite(float(eps))
        except (TypeError, ValueError):
            return True

    def _is_implicit_feedback(self) -> bool:
        return getattr(self, "feedback", "explicit") == "implicit"

    def describe(self):
        """What was fitted: a dict (``model``, ``label``, ``method``, ``feedback``, ``shape``,
        ``factors``, ``personal``, ``personal_part``, ``config`` = the resolved ``config_``,
        ``privacy`` = the guarantee in plain words with epsilon, delta, accountant, relation,
        public and released parts) whose ``str()`` is printable text
        (:mod:`privrec.models._describe`). Reads the model only: no privacy cost."""
        from ._describe import describe

        return describe(self)

    def model_card(self, path=None, metrics=None, dataset: str | None = None) -> str:
        """Markdown model card (data shape, relation, epsilon / delta, accountant, settings, the
        ``metrics`` against the yardsticks when given as ``{row: {metric: value}}``, what is released
        and what is not); written atomically to ``path`` when given. Returns the text."""
        from ._describe import model_card

        return model_card(self, path, metrics=metrics, dataset=dataset)

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

    # ------------------------------------------------------------------ scoring
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

    def _require_user_factors(self) -> np.ndarray:
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(
                f"this {type(self).__name__} holds no user factors (a loaded private model keeps only the item side): "
                "predictions need the fitted users; project users from their own histories with transform() or "
                "partial_fit_users(), or evaluate with privrec.evaluation.evaluate_ratings(model, train, test)"
            )
        return uf

    def _predict_indices(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """Predictions for index pairs; ``-1`` marks an unknown user / item (its terms are zero)."""
        uf = self._require_user_factors()
        V = self.item_factors_
        ku, ki = u >= 0, i >= 0
        both = ku & ki
        pred = np.full(u.shape, self._global(), dtype=np.float64)
        pred[both] += np.einsum("ij,ij->i", uf[u[both]], V[i[both]])
        ib = self._item_bias()
        if ib is not None:
            pred[ki] += ib[i[ki]]
        ub = self._user_bias()
        if ub is not None:
            pred[ku] += ub[u[ku]]
        return pred.astype(np.float32)

    def predict(self, users, items=None):
        """Predicted ratings.

        ``predict(users, items)``: aligned arrays of (user, item) index pairs. ``predict(X)``: one
        prediction per entry of ``X`` (a sparse matrix indexed like the training matrix, in CSR
        order; or a long-format DataFrame / ``Interactions`` with ids, in row order; ids unseen in
        training contribute zero factors and bias).
        """
        self._check_fitted()
        if items is None:
            u, i, _ = self._entries(users)
            return self._predict_indices(u, i)
        uf = self._require_user_factors()
        u, _ = check_ids(users, uf.shape[0], "users")
        i, _ = check_ids(items, self.n_items_, "items")
        if u.shape != i.shape:
            raise ValueError(f"users and items must have the same length, got {u.size} and {i.size}")
        return self._predict_indices(u, i)

    def score(self, X, y=None) -> float:
        """Negative RMSE of the predicted ratings on the ratings held in ``X`` (higher is better).

        The rule: each rating of ``X`` is predicted from the *fitted* factors of its user and item
        (``user_factors_``, never a projection from ``X`` itself, which would use the held-out
        ratings to predict them). So ``X`` holds held-out ratings of the training users: a sparse
        matrix indexed like the training matrix, or a long-format DataFrame / ``Interactions`` with
        ids (ratings of users or items unseen in training are predicted without that side's
        factors and bias). For ``GridSearchCV`` split ratings, not users:
        ``GridSearchCV(model, grid, cv=privrec.data.RatingSplitCV(5)).fit(ratings_df)``. ``y`` is
        ignored. Defined for explicit ratings; an implicit-feedback model raises ``ValueError``
        (its scores are rankings, evaluate them with ``privrec.evaluation``).
        """
        self._check_fitted()
        if self._is_implicit_feedback():
            raise ValueError(
                f"score(X) is the negative RMSE of predicted ratings; this {type(self).__name__} models "
                "implicit feedback (scores rank items, they are not ratings): evaluate it with "
                "privrec.evaluation.evaluate_topk or ranking_metrics"
            )
        u, i, truth = self._entries(X)
        if truth is None:
            from ..data.frames import RATING_COL

            raise ValueError(f"X holds no ratings (a DataFrame needs a {RATING_COL!r} column)")
        if truth.size == 0:
            raise ValueError("X holds no ratings to score")
        bad = ~np.isfinite(truth)
        if bad.any():
            raise ValueError(
                f"X holds {int(np.count_nonzero(bad))} NaN or infinite rating(s) (e.g. entry {int(np.flatnonzero(bad)[0])}): "
                "score() needs every held-out rating; drop the missing ones first"
            )
        err = self._predict_indices(u, i).astype(np.float64) - truth
        return -float(np.sqrt(np.mean(err * err)))

    # ------------------------------------------------------------------ similarity
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
