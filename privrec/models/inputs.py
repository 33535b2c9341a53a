"""Inputs of privrec's factorisation models: what ``fit`` and the query methods accept, and how.

Follows implicit 0.7's ``fit(user_items, show_progress, callback)`` (a users x items matrix; a
``callback(iteration, elapsed_seconds, loss)``) and scikit-learn's input conventions (sparse and
dense ``X``, NaN allowed where the estimator tags say so, a ``y`` accepted and ignored by an
unsupervised ``fit``, ``verbose``-like progress output). This module holds the conversion of every
input to one checked CSR (:func:`as_user_items`, :func:`fit_input`, in :mod:`privrec.data.fit_input`),
the explicit first and last step of every ``fit`` (:meth:`FitInputMixin._fit_input`,
:meth:`FitInputMixin._fitted`: no hidden wrapper, so ``inspect.signature(Model.fit)`` is the real
one and an unknown keyword is a ``TypeError``), and the declarations that come with an input: the
public item catalogue, the user roster and the rating range.

Inputs of ``fit``: a scipy sparse users x items matrix (CSR, CSC or COO; duplicates rejected), a
:class:`privrec.data.Interactions`, or a long-format pandas DataFrame with columns ``user`` /
``item`` / ``rating`` (the module defaults of :mod:`privrec.data.frames`; build the
``Interactions`` with :func:`privrec.data.from_pandas` for other column names or a public item
vocabulary), or a dense array in which NaN marks an unrated entry (0 is a rating).
scikit-learn's ``fit(X, y)`` calling convention is accepted too: a ``y`` (``None`` or an array)
in the ``show_progress`` position is ignored (the ratings are in ``X``).

Progress bars: ``fit(X, show_progress=True / False)`` decides for one fit (implicit 0.7's
signature); ``show_progress=None`` (or not given) falls back to the model's ``show_progress``
constructor parameter, as ``verbose`` in scikit-learn; its default ``None`` means **a bar when
``fit`` is called directly, none when scikit-learn calls it** (``GridSearchCV``,
``cross_validate``, a ``Pipeline``, ``check_estimator``: any scikit-learn function on the call
stack, or a ``y`` given as in ``fit(X, y)``), so a search prints no bar per fold. Estimators
cloned by scikit-learn keep the constructor value: ``show_progress=True`` asks for bars even there.

Item catalogue: ``fit(X, items=catalogue)`` declares the public item catalogue (the item axis is
then the catalogue, whatever items have ratings: :func:`with_item_catalogue`), as
``privrec.data.from_pandas(..., item_ids=catalogue)`` does. Without a declared catalogue (a DataFrame / CSV) a
private ``DPALS`` selects its items privately by default (``axes="release"``: add/remove DP,
:mod:`privrec.models.dpals_axes`); with ``axes="warn"`` (and for other private models) a private
fit on an item axis derived from the data warns with :class:`ItemCatalogueWarning`.
``fit(X, strict_catalogue=True)`` refuses any private fit without a declared catalogue.
:meth:`FactorizationModel.save` records where the axis came from (metadata ``item_axis``:
``{"source": "catalogue" | "selection" | "data" | "matrix", "public": bool}``). Likewise
``fit(X, users=roster)`` declares the public user roster (:func:`with_user_roster`); without it the
default DPALS fit releases a noisy user count, and with ``axes="warn"`` a private fit on a roster
taken from the data warns with :class:`UserRosterWarning`.
"""

from __future__ import annotations

import numbers
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .._params import _param_fingerprint
from ..data.fit_input import (  # noqa: F401 (the input conversion lives in the data layer; re-exported)
    ITEM_AXIS_SOURCES,
    PUBLIC_ITEM_AXES,
    _axis_source,
    _declared_ids,
    _dense_to_csr,
    _id_array,
    _is_identity_ids,
    _item_users,
    as_user_items,
    check_fit_matrix,
    check_rating_range,
    fit_input,
    item_axis_source,
    user_axis_source,
    with_item_catalogue,
    with_user_roster,
)


class RatingRangeWarning(UserWarning):
    """Ratings given to ``fit`` fall outside the model's declared (public) rating range."""


class ItemCatalogueWarning(UserWarning):
    """A private model was fitted on an item axis derived from the training data: a DataFrame / CSV
    (or an ``Interactions`` read from one) without a declared item catalogue indexes only the items
    that have at least one rating. Which items have ratings is a statistic of the data -- with one
    user as an item's only rater, the released arrays have a row more with that user than without --
    so the item axis -- and the item ids saved with the model, which name its rows -- is not
    covered by the privacy guarantee. Emitted with ``DPALS(axes="warn")`` (the default,
    ``"release"``, selects the items privately instead). Declare the public catalogue:
    ``model.fit(X, items=catalogue)``, ``privrec.data.from_pandas(..., item_ids=catalogue)`` or
    ``from_parquet(..., item_ids=catalogue)``; ``fit(X, strict_catalogue=True)`` refuses instead."""


class UserRosterWarning(UserWarning):
    """A private model was fitted on a user axis derived from the training data: a DataFrame / CSV
    (or an ``Interactions`` read from one) without a declared user roster lists only the users that
    have ratings. DPALS's guarantee is stated for the zero-out relation over a public roster (the
    number of users shapes the fit), and a user whose ratings are all removed would then vanish from
    the roster, changing its size. Emitted with ``DPALS(axes="warn")`` (the default, ``"release"``,
    releases a noisy user count instead). Declare the roster: ``model.fit(X, users=roster)`` or
    ``privrec.data.from_pandas(..., user_ids=roster)``."""


def called_by_sklearn(package: str = "sklearn") -> bool:
    """Whether a function of ``package`` (scikit-learn, or one of its subpackages such as
    ``"sklearn.model_selection"``) is on the current call stack."""
    frame = sys._getframe(1)
    while True:
        module = frame.f_globals.get("__name__") or ""
        if module == package or module.startswith(package + "."):
            return True
        if frame.f_back is None:
            return False
        frame = frame.f_back


def _is_show_progress(value) -> bool:
    return isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral) and value in (0, 1))


def _check_fitted_factors(model) -> None:
    """One-line ``ValueError`` (and the model left unfitted) when a fit produced NaN or infinite
    factors: a numerical overflow must not pass for a model (``recommend`` then returned ``[]``)."""
    for name in ("item_factors_", "user_factors_", "item_bias_", "user_bias_"):
        value = getattr(model, name, None)
        if value is not None and not np.isfinite(value).all():
            model.item_factors_ = None  # not fitted (sklearn's check and every method agree)
            raise ValueError(
                f"the fit of this {type(model).__name__} overflowed: {name} holds NaN or infinite values; rescale the "
                "ratings (e.g. to a 1-5 scale) or fit with dtype=np.float64"
            )


@dataclass
class FitInput:
    """A ``fit`` call's input after :meth:`FitInputMixin._fit_input`: the checked CSR ``matrix``,
    the users' and items' ids (``None``: the indices are the ids), whether the item vocabulary was
    a declared catalogue, where the item axis came from, and the resolved ``show_progress`` /
    ``callback``."""

    matrix: sp.csr_matrix
    user_ids: np.ndarray | None
    item_ids: np.ndarray | None
    given: bool
    axis: str
    show_progress: bool
    callback: Any = None
    #: where the user axis came from (:func:`user_axis_source`: "roster", "data" or "matrix")
    user_axis: str = "matrix"


_DEFAULT_COLUMNS = ("user", "item", "rating")


def _read_columns(user_items, columns: tuple):
    """A DataFrame read with the given (user, item, rating) column names; other inputs as they are
    (``TypeError`` when non-default column names come with an input that has no columns)."""
    if tuple(columns) == _DEFAULT_COLUMNS:
        return user_items
    import pandas as pd

    if not isinstance(user_items, pd.DataFrame):
        raise TypeError(
            f"user_col / item_col / rating_col name the columns of a DataFrame input, got {type(user_items).__name__}"
        )
    from ..data.frames import from_pandas

    user_col, item_col, rating_col = columns
    return from_pandas(user_items, user_col, item_col, rating_col)


class FitInputMixin:
    """The input side of :class:`FactorizationModel`: the conversion every ``fit`` calls first
    (:meth:`_fit_input`) and last (:meth:`_fitted`), and the checks of the declared item axis,
    user roster and rating range."""

    if TYPE_CHECKING:

        def _is_private(self) -> bool: ...

    def _fit_input(
        self,
        user_items,
        show_progress=None,
        callback=None,
        *,
        items=None,
        users=None,
        strict_catalogue: bool = False,
        columns: tuple = _DEFAULT_COLUMNS,
        y=None,
    ) -> FitInput:
        """The first line of every ``fit``: the input converted once (module docstring) -- a
        DataFrame read with ``columns`` = (user, item, rating) column names, the declared roster
        (``users``) and catalogue (``items``), the axis warnings of a private model -- and
        ``show_progress`` resolved (``None``: the constructor's value, else a bar unless
        scikit-learn is the caller). scikit-learn's ``fit(X, y)`` puts ``y`` where
        ``show_progress`` stands: a value that is not a bool is that ``y``, and is ignored."""
        sklearn_style = y is not None
        if show_progress is not None and not _is_show_progress(show_progress):
            sklearn_style, show_progress = True, None  # scikit-learn's y in implicit's position
        if callback is not None and not callable(callback):
            raise ValueError(
                f"callback must be callable(iteration, elapsed_seconds, loss) or None, got {type(callback).__name__}"
            )
        user_items = _read_columns(user_items, columns)
        if users is not None:
            user_items = with_user_roster(user_items, users)
        if items is not None:
            user_items = with_item_catalogue(user_items, items)
        user_axis = user_axis_source(user_items)
        self._check_user_axis(user_axis)
        axis = item_axis_source(user_items)
        self._check_item_axis(axis, bool(strict_catalogue))
        R, user_ids, item_ids, given = fit_input(user_items)
        show = show_progress if show_progress is not None else getattr(self, "show_progress", None)
        if show is None:
            show = not (sklearn_style or called_by_sklearn())
        return FitInput(R, user_ids, item_ids, bool(given), axis, bool(show), callback, user_axis)

    def _fitted(self, inp: FitInput):
        """The last line of every ``fit``: the fitted factors checked, the id maps and the fitted
        parameters' fingerprint stored; returns the model."""
        _check_fitted_factors(self)
        self.user_ids_ = inp.user_ids
        self.item_ids_ = inp.item_ids
        # ids that are exactly 0..n-1 are kept as None (indices are the ids): not a dropped vocabulary
        self._item_ids_identity = inp.item_ids is None
        self._item_ids_given = inp.given
        self._item_axis: str | None = inp.axis
        self._id_lookup: dict = {}
        self._fitted_params = _param_fingerprint(self)  # save() refuses parameters changed since
        return self

    # ------------------------------------------------------------------ item axis and user roster
    def _check_user_axis(self, axis: str) -> None:
        """Before a fit: a private model warns (:class:`UserRosterWarning`) when its user axis (the
        roster, whose size is public under the zero-out relation) comes from the data."""
        if self._is_private() and axis == "data" and not getattr(self, "_releases_axes", False):
            warnings.warn(
                f"private {type(self).__name__} fitted on a user roster taken from the data (only the users that "
                "have ratings): the guarantee is stated for a public roster (zero-out of one user's ratings), "
                "and a user whose ratings are all removed would leave this one; declare the roster with "
                "fit(X, users=roster) or privrec.data.from_pandas(..., user_ids=roster), or let the fit release it "
                "privately (leave axes at its default, 'release': add/remove DP)",
                UserRosterWarning,
                stacklevel=3,
            )

    def _check_item_axis(self, axis: str, strict: bool) -> None:
        """Before a fit: a private model warns (:class:`ItemCatalogueWarning`) when its item axis comes
        from the data (``axis``: :func:`item_axis_source`); with ``strict`` it refuses (``ValueError``)
        any item axis that is not a declared catalogue. Non-private models fit any axis."""
        if not self._is_private() or axis == "catalogue":
            return
        how = (
            "the items that have ratings in the data"
            if axis == "data"
            else "the matrix's columns, which privrec cannot check against a catalogue"
        )
        advice = (
            "declare the public item catalogue with fit(X, items=catalogue) or privrec.data.from_pandas / "
            "from_parquet(..., item_ids=catalogue)"
        )
        if strict:
            raise ValueError(
                f"strict_catalogue: this private {type(self).__name__} needs a declared item catalogue, but its "
                f"item axis would be {how}; {advice}"
            )
        if axis == "data" and not getattr(self, "_releases_axes", False):
            warnings.warn(
                f"private {type(self).__name__} fitted on an item axis taken from the data (only the items that have "
                "ratings): which items have ratings is not covered by the privacy guarantee, and the released item "
                f"arrays have one row per such item, saved with its id; {advice}, or let the fit select items privately "
                "(leave axes at its default, 'release': add/remove DP; strict_catalogue=True refuses such fits)",
                ItemCatalogueWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ rating range
    @staticmethod
    def _check_rating_range(matrix, low: float, high: float, stacklevel: int = 3) -> int:
        """Warn (:class:`RatingRangeWarning`) when ratings fall outside ``[low, high]``; returns how many.

        For a model's public ``rating_range`` parameter (validate it with
        :func:`check_rating_range`). Data outside the declared scale usually means the wrong scale
        was declared (e.g. 0-10 data, 1-5 declared). The message gives the count only, no data
        values. (A private model may prefer an error: ``DPALS`` raises, since its noise is
        calibrated to the declared range.)
        """
        data = np.asarray(getattr(matrix, "matrix", matrix).data)
        n_out = int(np.count_nonzero((data < low) | (data > high)))
        if n_out:
            warnings.warn(
                f"{n_out} of {data.size} ratings ({n_out / data.size:.2%}) fall outside the declared rating range "
                f"[{low:g}, {high:g}]; check the model's rating_range",
                RatingRangeWarning,
                stacklevel=stacklevel,
            )
        return n_out
