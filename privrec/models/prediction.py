"""Predicting and scoring ratings (a mixin of :class:`~privrec.models.FactorizationModel`):
``predict`` of (user, item) pairs or of a matrix's entries from the fitted factors, ``score`` =
the negative RMSE of held-out ratings, and the :class:`PrivateSelectionWarning` a private model
gives once per scikit-learn search that scores it. Importable from :mod:`privrec.models._base`
too.
"""

from __future__ import annotations

import warnings
import weakref

import numpy as np

from ._mixin_typing import MixinBase
from .ids import check_ids
from .inputs import called_by_sklearn


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
        "ledger. privrec.tuning.search_privacy(search, X) composes what this search released",
        PrivateSelectionWarning,
        stacklevel=stacklevel,
    )


class PredictionMixin(MixinBase):
    """``predict`` / ``score`` of :class:`~privrec.models.FactorizationModel`."""

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
