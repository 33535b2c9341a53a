"""A DPALS fit whose axes were not declared: release them first, then run the fit's plan on them.

A plain ratings file (a DataFrame, a CSV, an ``Interactions`` read from one) declares neither the
user roster nor the item catalogue. The releases of what the fit needs to know about them
(:func:`privrec.tuning.plan.plan_axes`, mechanisms in :mod:`privrec.allocation.partition`) are a
noisy user count where the roster is undeclared and a private item selection where the catalogue
is undeclared. The fit's plan is then made from the noisy count and the selected items at the
(epsilon, delta) they leave, and run on the ratings of the selected items; the model's ledger
holds the axes' releases first, then the fit's, so its report composes to the model's target
under add/remove of one user.

Every backend runs the same three steps, in this order:

1. :func:`release_axes` -- the releases (count, selection, and for implicit feedback the
   catalogue size), from the exact number of users and the per-item
   weighted counts (:func:`~privrec.allocation.partition.weighted_item_counts`: a sum over users,
   so the local fit computes it in one piece, the Dask driver sums it over partitions and the
   Flower server over clients);
2. :func:`plan_on_axes` -- the fit's one :class:`~privrec.tuning.plan.FitPlan`
   (:func:`~privrec.tuning.plan.plan_fit`) for the noisy count and the selected items;
3. the backend's fit of that plan on the selected items' ratings, then :func:`finish_axes` -- the
   composed ledger, the configuration and ``axes_``.

:func:`fit_released_axes` is the local fit's sequence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..allocation import sampling_key
from ..allocation.partition import (
    release_catalogue_size,
    release_item_selection,
    release_user_count,
    weighted_item_counts,
)
from ..privacy import PrivacyLedger, make_rng
from ..tuning.plan import ITEM_SELECTION_DELTA_LABEL, AxesPlan, FitPlan, plan_fit
from .dpals_config import binarised

__all__ = ["ReleasedAxes", "finish_axes", "fit_released_axes", "plan_on_axes", "release_axes", "set_selected_ids"]


@dataclass
class ReleasedAxes:
    """What :func:`release_axes` released: ``axes`` (the plan of the releases), ``ledger`` (their
    events and the selection's delta term), ``users`` (the noisy user count; the declared roster's
    size when it is declared), ``items`` (the selected column indices, sorted; every column when the
    catalogue is declared), ``n_items`` (the columns before the selection) and ``info`` (what
    ``axes_`` reports besides the plan)."""

    axes: AxesPlan
    ledger: PrivacyLedger
    users: float
    items: np.ndarray
    n_items: int
    info: dict[str, Any]

    @property
    def catalogue_size(self) -> float | None:
        """The noisy number of items somebody sampled, where the plan released it; else ``None``."""
        return self.info.get("catalogue_released")

    @property
    def selected(self) -> bool:
        """Whether the item axis is a private selection (the catalogue is undeclared)."""
        return self.axes.item_multiplier is not None

    @property
    def counted(self) -> bool:
        """Whether the user count is released (the roster is undeclared)."""
        return self.axes.user_multiplier is not None

    @property
    def shape(self) -> tuple[int, int]:
        """The public shape the fit is planned for: the rounded noisy count (at least 1) and the
        number of selected items."""
        return max(1, int(round(self.users))), int(self.items.size)


def release_axes(
    model, axes: AxesPlan, n_users: int, n_items: int, weighted_counts: Callable[[int], np.ndarray]
) -> ReleasedAxes:
    """Release the undeclared axes of ``model``'s fit (``axes``): the noisy count of the ``n_users``
    users (roster undeclared), then the private selection among the ``n_items`` columns (catalogue
    undeclared) from ``weighted_counts(key)`` -- the exact per-item sums over every user of
    :func:`~privrec.allocation.partition.weighted_item_counts` with the sampling ``key`` and the
    users' stable keys (computed in one piece or summed over blocks of users). The random draws
    come from a fresh ``make_rng(model.random_state)`` in this order: the count's noise, the
    sampling key, the selection's noise, the catalogue size's noise (where the plan releases the
    number of items somebody sampled). ``ValueError`` when no item passes the selection."""
    rng = make_rng(model.random_state)  # OS entropy unless a seed was given (experiments only)
    ledger = PrivacyLedger()
    info: dict[str, Any] = {"relation": axes.relation}
    users = float(n_users)
    if axes.user_multiplier is not None:
        count = release_user_count(n_users, axes.user_multiplier, rng)
        count.record(ledger)
        users = float(count.value)
        info["users_released"] = users
    items = np.arange(n_items)
    if axes.item_multiplier is not None:
        weighted = weighted_counts(sampling_key(rng))
        chosen = release_item_selection(weighted, axes.item_multiplier, axes.max_items, axes.item_delta, rng)
        chosen.record(ledger)
        ledger.spend_delta(ITEM_SELECTION_DELTA_LABEL, axes.item_delta)
        items = np.asarray(chosen.value, dtype=np.int64)
        info.update(items_selected=int(items.size), selection_threshold=float(chosen.info["threshold"]))
        if axes.catalogue_multiplier is not None:
            candidates = int(np.count_nonzero(np.asarray(weighted) > 0))
            noisy = release_catalogue_size(candidates, axes.max_items, axes.catalogue_multiplier, rng)
            noisy.record(ledger)
            info["catalogue_released"] = float(noisy.value)
        if items.size == 0:
            raise ValueError(
                f"no item passed the private item selection (threshold {chosen.info['threshold']:.1f} in weighted "
                f"users, epsilon = {model.epsilon:g}): too few users rate each item for this epsilon; declare the item "
                "catalogue (fit(X, items=catalogue); --items FILE; on Dask partition_interactions(..., items=); on "
                "Flower fit_dpals(..., catalogue=True)) or use a larger epsilon"
            )
    return ReleasedAxes(axes, ledger, users, items, int(n_items), info)


def plan_on_axes(model, released: ReleasedAxes, keys_from: str) -> FitPlan:
    """The fit's one plan (:func:`~privrec.tuning.plan.plan_fit`) after the releases: for the noisy
    count and the selected items, at the (epsilon, delta) the releases leave."""
    axes = released.axes
    plan = plan_fit(
        model,
        released.shape,
        keys=keys_from,
        target=(axes.epsilon, axes.delta),
        selected_items=released.selected,
        catalogue_size=released.catalogue_size,
    )
    if released.counted:
        plan = dataclasses.replace(plan, users_released=released.users)
    return plan


def finish_axes(model, released: ReleasedAxes) -> None:
    """After the fit of :func:`plan_on_axes`'s plan: the model's ledger is the axes' releases, then
    the fit's; ``config_`` states the fit's share of the target, the target, the noisy count, the
    number of selected items and the epsilon spent; ``axes_`` what was released and the plan."""
    axes = released.axes
    full = PrivacyLedger()
    full.extend(released.ledger)
    full.extend(model.ledger_)
    model.ledger_ = full
    config = dict(model.config_)
    config["epsilon_fit"] = float(axes.epsilon)  # the fit's share of the target, after the axes' releases
    config["epsilon"] = float(model.epsilon)
    config["delta"] = float(model.delta)
    config["n_users"] = released.users if released.counted else config.get("n_users")
    config["n_items"] = int(released.items.size)
    config["epsilon_spent"] = float(full.epsilon(float(model.delta), getattr(model, "accountant", "pld")))
    model.config_ = config
    model.axes_ = {**released.info, **axes.as_dict()}


def set_selected_ids(model, item_ids) -> None:
    """The id maps of a fit on a private item selection, as the local fit sets them: ``item_ids_``
    are the selected items' ids (released: the selection is public), not a declared catalogue;
    no user ids (no user factors are gathered by the backends that call this)."""
    model.user_ids_ = None
    model.item_ids_ = np.asarray(item_ids)
    model._item_ids_identity = False
    model._item_ids_given = False
    model._item_axis = "selection"
    model._id_lookup = {}


def fit_released_axes(
    model, R_full: sp.csr_matrix, user_keys, axes: AxesPlan, keys_from: str, show_progress: bool, callback
) -> np.ndarray:
    """The local fit: release the undeclared axes of ``R_full`` (``axes``), fit ``model`` on the
    released ones and return the selected items' column indices (all columns when the catalogue is
    declared). ``ValueError`` when no item passes the selection (nothing can be fitted; nothing is
    returned)."""
    cfg = model._resolve_config(None)
    if cfg.implicit:  # the positives are the stored entries above zero
        R_full = binarised(R_full)
    else:  # every rating checked against the public range, whichever items are selected
        model._check_ratings(R_full, cfg)
    n_users, n_items = R_full.shape

    def weighted(key: int) -> np.ndarray:
        return weighted_item_counts(R_full, axes.max_items, key, user_keys)

    released = release_axes(model, axes, n_users, n_items, weighted)
    items = released.items
    R = R_full[:, items].tocsr() if items.size != n_items else R_full
    plan = plan_on_axes(model, released, keys_from)
    model._fit_matrix(R, user_keys=user_keys, show_progress=show_progress, callback=callback, plan=plan)
    finish_axes(model, released)
    return items


def on_item_axis(model, columns, n_items: int):
    """A shallow copy of a fitted model whose released item arrays are placed on a wider axis of
    ``n_items`` columns (``columns[j]``: the column of released item j), for evaluating it on data
    indexed by that axis (the CLI's split of a file whose catalogue was selected privately). The
    items the release does not hold get no factors, a zero bias, count 1 and the smallest
    exposure: they predict the global mean plus the user's bias and rank after every released
    item. Evaluation only: the copy is not a release and has no item ids."""
    import copy

    columns = np.asarray(columns, dtype=np.int64)
    out = copy.copy(model)

    def widen(values, fill):
        if values is None:
            return None
        values = np.asarray(values)
        wide = np.full((int(n_items),) + values.shape[1:], fill, dtype=values.dtype)
        wide[columns] = values
        return wide

    out.item_factors_ = widen(model.item_factors_, 0)
    out.item_bias_ = widen(getattr(model, "item_bias_", None), 0)
    out.item_counts_ = widen(getattr(model, "item_counts_", None), 1.0)
    exposure = getattr(model, "item_exposure_", None)
    out.item_exposure_ = None if exposure is None else widen(exposure, float(np.min(exposure)) * 1e-6)
    trained = getattr(model, "trained_items_", None)
    if trained is not None:
        out.trained_items_ = columns[np.asarray(trained, dtype=np.int64)]
    out.item_ids_ = None
    out._item_ids_identity = True
    out._id_lookup = {}
    return out
