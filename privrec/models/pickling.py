"""What a pickled model keeps (a mixin of :class:`~privrec.models.FactorizationModel`, through
:class:`~privrec.models.persistence.PersistenceMixin`): everything for a non-private or unfitted
model; for a fitted private model the release and the item ids only -- the training users'
factors, biases and ids, fit timings and the noise seed are dropped, with one
:class:`PrivateStateWarning`, as a saved file drops them. In-memory copies (``copy.copy`` /
``copy.deepcopy``) keep everything. Importable from :mod:`privrec.models.persistence` too.
"""

from __future__ import annotations

import copy
import warnings

from .release import ReleaseHolder, flat_state, nested_state


class PrivateStateWarning(UserWarning):
    """Pickling (``pickle``, ``joblib.dump``, ...) a fitted private model dropped the state its privacy
    guarantee does not cover (the training users' factors, biases and ids, fit timings, the noise
    seed): the unpickled model holds the release and the item ids, as a loaded one does."""


class PicklingMixin:
    """``__getstate__`` (what ``pickle`` / ``joblib.dump`` keep), ``__copy__`` and ``__deepcopy__``."""

    #: Fitted state of a private model that its (epsilon, delta) guarantee does not cover -- computed
    #: from the exact training data, not part of the release -- dropped when the model is pickled.
    #: Subclasses extend the tuple.
    _private_state: tuple[str, ...] = (
        "user_factors_",  # billboard projection of every training user: each user's exact ratings
        "user_bias_",  # the same for the user biases
        "user_ids_",  # the training roster
        "fit_timings_",  # wall-clock times, which grow with the exact data size
        "_id_lookup",  # cached index of user_ids_ / item_ids_
    )
    #: Fitted attributes a private model keeps when pickled: the release (item side, noisy counts,
    #: privacy ledger / report) and values computed from public settings alone. Any other fitted
    #: (``name_``) attribute is dropped as well, so state added later is private until listed here;
    #: ``item_ids_`` is kept, as :meth:`save` keeps it (public only for a declared catalogue).
    _released_state: tuple[str, ...] = (
        "item_factors_",
        "item_bias_",
        "global_mean_",
        "item_counts_",
        "item_exposure_",
        "selection_",
        "axes_",  # the released axes of a fit with undeclared ones (noisy user count, selected items)
        "trained_items_",
        "ledger_",
        "privacy_report_",
        "noise_scales_",
        "config_",
        "user_reg_norm_",
        "user_regularization_",
        "item_reg_norm_",
    )
    #: attributes the API reads with ``getattr(..., None)``: set to ``None`` when dropped
    _none_when_dropped = ("user_factors_", "user_bias_", "user_ids_", "item_ids_")

    def __getstate__(self):
        """The pickled state: everything for a non-private or unfitted model; for a fitted private
        model the release only (:attr:`_private_state` and every fitted attribute not in
        :attr:`_released_state` dropped, the user side ``None`` as in a loaded model, the noise seed
        removed as :meth:`save` does) and one :class:`PrivateStateWarning` naming what was dropped.

        The unpickled model recommends for a user from the user's own rows (billboard projection,
        free: ``recommend(userid, user_items, recalculate_user=True)``, ``transform``), and ranks
        similar items, exactly as the original. In-memory copies (``copy.copy`` / ``copy.deepcopy``)
        keep everything: they do not leave the process.
        """
        raw = dict(super().__getstate__())
        if not (self._is_private() and self.__sklearn_is_fitted__()):
            return raw
        state = flat_state(raw)  # a fit's release (models/release.py), field by field
        dropped = []
        for name in list(state):
            if name == "item_ids_":
                drop = False  # kept, as save() keeps them (the item axis they name is released too)
            elif name in self._private_state:
                drop = True
            else:
                drop = name.endswith("_") and not name.startswith("_") and name not in self._released_state
            if drop:
                value = state.pop(name)
                if value is not None and not (isinstance(value, dict) and not value):
                    dropped.append(name)
        for name in self._none_when_dropped:
            state.setdefault(name, None)
        state["_id_lookup"] = {}
        for name, value in self._saved_params().items():  # e.g. DPALS: no noise seed in a private release
            if name in state and state[name] is not value:
                state[name] = value
                dropped.append(f"the {name} parameter")
        if dropped:
            warnings.warn(
                f"pickling a private {type(self).__name__} (epsilon={self.epsilon}): dropped {', '.join(dropped)} -- "
                "state computed from the exact training data that its privacy guarantee does not cover. The "
                "unpickled model holds the release only; recommend for a user from the user's own rows with "
                "recommend(userid, user_items, recalculate_user=True) or transform(user_items)",
                PrivateStateWarning,
                stacklevel=2,
            )
        return nested_state(state) if isinstance(self, ReleaseHolder) else state

    def __setstate__(self, state):
        # the fields of a fit's release go back into one release (also from a flat, older pickle)
        super().__setstate__(nested_state(state) if isinstance(self, ReleaseHolder) else state)

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        if "release_" in new.__dict__:  # a copy's fields can be replaced without touching the original's
            new.__dict__["release_"] = copy.copy(self.__dict__["release_"])
        return new

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new
