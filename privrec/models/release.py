"""What one DPALS fit produced, held by the model as one object (issue 41).

A fit's fitted state -- the release (item factors and biases, noisy counts, exposure, the ledger
and report, the resolved settings) and the state of the fit that stays with the model (the
training users' projections, timings) -- is one :class:`FitRelease`, the model's ``release_``. The
familiar fitted attributes (``item_factors_``, ``config_``, ...) read and write it
(:class:`ReleaseHolder`: one data descriptor per field of :data:`RELEASE_FIELDS`), so every stage
and backend that sets ``model.item_factors_ = ...`` fills the fit's release, and adopting the
release of another fit is one assignment: the automatic selection fits its candidates, releases
their noisy scores and makes the winner's release the model's
(:func:`privrec.tuning.auto.adopt_selection`: ``model.release_ = winner.release_``), instead of
copying a clone's attributes one by one.

Each local fit (:meth:`DPALS._fit_matrix <privrec.models.DPALS._fit_matrix>`) starts a new release,
so nothing of an earlier fit survives a refit. The id maps (``item_ids_``, ``user_ids_``) are not
part of it: they name the axes of the data the model was fitted on, set by the fit's last step.
Pickling a fitted private model drops the unreleased fields as before
(:mod:`privrec.models.pickling` reads the release's fields by name); ``copy.copy`` copies the
release object too, so a copy's arrays can be replaced without touching the original's.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RELEASE_FIELDS", "FitRelease", "ReleaseHolder", "flat_state", "nested_state"]

#: the fitted attributes one fit produces, as the model names them
RELEASE_FIELDS: tuple[str, ...] = (
    "item_factors_",
    "item_bias_",
    "item_counts_",
    "item_exposure_",
    "global_mean_",
    "trained_items_",
    "ledger_",
    "privacy_report_",
    "noise_scales_",
    "config_",
    "selection_",
    "axes_",
    "federation_",
    "user_factors_",
    "user_bias_",
    "user_regularization_",
    "user_reg_norm_",
    "item_reg_norm_",
    "fit_timings_",
)


class FitRelease:
    """The fitted state of one fit: one attribute per field of :data:`RELEASE_FIELDS` it set
    (``axes_`` is ``None`` unless the fit released undeclared axes)."""

    axes_: Any = None

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            if name not in RELEASE_FIELDS:
                raise TypeError(f"{name!r} is not a field of a fit's release")
            setattr(self, name, value)

    def fields(self) -> dict[str, Any]:
        """The fields this release holds, by name."""
        return dict(vars(self))

    def __copy__(self) -> FitRelease:
        return FitRelease(**vars(self))

    def __repr__(self) -> str:
        return f"FitRelease({', '.join(sorted(vars(self)))})"


class _Released:
    """The data descriptor of one field: reads and writes the model's ``release_``."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        release = obj.__dict__.get("release_")
        try:
            return getattr(release, self.name) if release is not None else _missing(obj, self.name)
        except AttributeError:
            return _missing(obj, self.name)

    def __set__(self, obj, value) -> None:
        release = obj.__dict__.get("release_")
        if release is None:
            release = obj.__dict__["release_"] = FitRelease()
        setattr(release, self.name, value)

    def __delete__(self, obj) -> None:
        release = obj.__dict__.get("release_")
        if release is None or self.name not in vars(release):
            raise AttributeError(self.name)
        delattr(release, self.name)


def _missing(obj, name: str):
    raise AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r} (not fitted, or not set by its fit)")


class ReleaseHolder:
    """A model whose fitted state is one :class:`FitRelease` (``release_``); its fields are the
    attributes of :data:`RELEASE_FIELDS`."""

    item_factors_: Any = _Released()
    item_bias_: Any = _Released()
    item_counts_: Any = _Released()
    item_exposure_: Any = _Released()
    global_mean_: Any = _Released()
    trained_items_: Any = _Released()
    ledger_: Any = _Released()
    privacy_report_: Any = _Released()
    noise_scales_: Any = _Released()
    config_: Any = _Released()
    selection_: Any = _Released()
    axes_: Any = _Released()
    federation_: Any = _Released()
    user_factors_: Any = _Released()
    user_bias_: Any = _Released()
    user_regularization_: Any = _Released()
    user_reg_norm_: Any = _Released()
    item_reg_norm_: Any = _Released()
    fit_timings_: Any = _Released()

    def _new_release(self) -> None:
        """Start this fit's release (nothing of an earlier fit survives a refit)."""
        self.__dict__["release_"] = FitRelease()


def flat_state(state: dict) -> dict:
    """A model's ``__dict__`` with its ``release_`` spread into the fields it holds (what
    :mod:`privrec.models.pickling` filters by name)."""
    out = {k: v for k, v in state.items() if k != "release_"}
    release = state.get("release_")
    if release is not None:
        out.update(release.fields())
    return out


def nested_state(state: dict) -> dict:
    """The inverse of :func:`flat_state`: the fields of :data:`RELEASE_FIELDS` gathered into one
    :class:`FitRelease` (``release_``), everything else as it is."""
    fields = {k: state[k] for k in RELEASE_FIELDS if k in state}
    out = {k: v for k, v in state.items() if k not in fields}
    if fields or state.get("release_") is not None:
        held = state.get("release_")
        out["release_"] = FitRelease(**{**(held.fields() if held is not None else {}), **fields})
    return out
