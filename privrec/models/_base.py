"""Shared estimator API for privrec's factorisation models (Krichene et al., ICML 2023, App. D.1).

The API follows scikit-learn (hyper-parameters in ``__init__`` only, learned state with a trailing
underscore, ``get_params`` / ``set_params`` / ``sklearn.base.clone``, ``NotFittedError``,
``score``) and implicit 0.7's ``recommender_base`` (``fit(user_items, show_progress, callback)``,
``recommend``, ``similar_items``, ``similar_users``, ``recalculate_user`` / ``recalculate_item``,
``partial_fit_users`` / ``partial_fit_items``, ``rank_items``, ``user_factors`` / ``item_factors``,
``save`` / ``load`` of a path or file object; ids and scores returned as ``(ids, scores)`` arrays,
batched over arrays of ids), so a script written for ``implicit`` runs after swapping the import.

:class:`FactorizationModel` holds that contract: the fitted state every model shares and the
methods its concerns build on. The concerns are mixed in from their own modules:
:mod:`privrec.models.ranking` (``recommend`` / ``rank_items``), :mod:`privrec.models.similarity`
(``similar_items`` / ``similar_users``), :mod:`privrec.models.prediction` (``predict`` /
``score``), :mod:`privrec.models.projection` (the billboard projection of a user's own ratings,
and the item updates of non-private models), :mod:`privrec.models.inputs` (what ``fit`` and the
query methods accept: the fit wrapper, item catalogue, user roster, rating range),
:mod:`privrec.models.ids` (row indices and original ids, ``recommend_ids``) and
:mod:`privrec.models.persistence` (``save`` / ``load`` and safe pickling; the file format:
:mod:`privrec.models.model_file`). Names defined there are importable from here too.

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

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

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
from .prediction import (  # noqa: F401 (re-exported: importable from here, as before the split)
    PredictionMixin,
    PrivateSelectionWarning,
    _calling_search,
    _selection_warned,
    warn_private_selection,
)
from .projection import (  # noqa: F401 (re-exported: importable from here, as before the split)
    PrivateReleaseError,
    ProjectionMixin,
    _grown_bias,
)
from .ranking import (  # noqa: F401 (re-exported: importable from here, as before the split)
    ID_DTYPE,
    RankingMixin,
    _as_ids,
    _distinct,
    _score_chunk_rows,
    _topk,
)
from .similarity import (  # noqa: F401 (re-exported: importable from here, as before the split)
    SimilarityMixin,
    _embedding_for_similarity,
    _normalised,
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


def _array_or_none(value):
    return None if value is None else np.asarray(value)


def _implicit_alias(attr: str, note: str) -> property:
    """The fitted attribute ``attr`` under implicit's name (no trailing underscore), read and write.

    Reading gives ``None`` while ``attr`` is unset; assigning stores ``value`` as an array (``None`` as is).
    """

    def get(self):
        return getattr(self, attr, None)

    def set_(self, value):
        setattr(self, attr, _array_or_none(value))

    return property(get, set_, doc=f"``{attr}`` under implicit's name {note}.")


class FactorizationModel(
    RankingMixin,
    SimilarityMixin,
    PredictionMixin,
    ProjectionMixin,
    FitInputMixin,
    IdMapMixin,
    PersistenceMixin,
    BaseEstimator,
):
    """Base class: recommend / similar items and users / predict / score / projection / save / load.

    Subclasses implement ``fit`` (which receives a checked CSR: see :mod:`privrec.models.inputs`) and
    ``_project_users(user_items) -> (factors, user_bias)`` (the billboard projection of Krichene et al.
    2023, Remark D.1: a user's embedding recomputed from the fitted item side and that user's own
    ratings only). Non-private models may implement ``_solve_items(item_users) -> (factors,
    item_bias)`` (an exact item solve from the fitted user side) for ``recalculate_item`` and
    ``partial_fit_items``. Mixed in: ``recommend`` / ``rank_items`` (:class:`RankingMixin`),
    ``similar_items`` / ``similar_users`` (:class:`SimilarityMixin`), ``predict`` / ``score``
    (:class:`PredictionMixin`), the projection and item updates (:class:`ProjectionMixin`), the fit
    wrapper and input declarations (:class:`FitInputMixin`), the id maps and ``recommend_ids`` /
    ``similar_items_ids`` (:class:`IdMapMixin`), ``save`` / ``load`` and pickling
    (:class:`PersistenceMixin`).

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
