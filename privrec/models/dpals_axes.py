"""A DPALS fit whose axes were not declared: release them first, then run the fit's plan on them.

A plain ratings file (a DataFrame, a CSV, an ``Interactions`` read from one) declares neither the
user roster nor the item catalogue. :func:`fit_released_axes` releases what the fit needs to know
about them (:func:`privrec.tuning.plan.plan_axes`, mechanisms in
:mod:`privrec.allocation.partition`): a noisy user count where the roster is undeclared, a
private item selection where the catalogue is undeclared. The fit's plan is then made from the
noisy count and the selected items at the (epsilon, delta) they leave, and run on the ratings of
the selected items; the model's ledger holds the axes' releases first, then the fit's, so its
report composes to the model's target under add/remove of one user.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from ..allocation import sampling_key
from ..allocation.partition import release_item_selection, release_user_count, weighted_item_counts
from ..privacy import PrivacyLedger, make_rng
from ..tuning.plan import ITEM_SELECTION_DELTA_LABEL, AxesPlan, plan_fit
from .dpals_config import binarised

__all__ = ["fit_released_axes"]


def fit_released_axes(
    model, R_full: sp.csr_matrix, user_keys, axes: AxesPlan, keys_from: str, show_progress: bool, callback
) -> np.ndarray:
    """Release the undeclared axes of ``R_full`` (``axes``), fit ``model`` on the released ones
    and return the selected items' column indices (all columns when the catalogue is declared).
    ``ValueError`` when no item passes the selection (nothing can be fitted; nothing is returned)."""
    cfg = model._resolve_config(None)
    if cfg.implicit:  # the positives are the stored entries above zero
        R_full = binarised(R_full)
    else:  # every rating checked against the public range, whichever items are selected
        model._check_ratings(R_full, cfg)
    n_users, n_items = R_full.shape
    rng = make_rng(model.random_state)  # OS entropy unless a seed was given (experiments only)
    ledger = PrivacyLedger()
    info: dict = {"relation": axes.relation}
    users = float(n_users)
    if axes.user_multiplier is not None:
        count = release_user_count(n_users, axes.user_multiplier, rng)
        count.record(ledger)
        users = float(count.value)
        info["users_released"] = users
    items = np.arange(n_items)
    if axes.item_multiplier is not None:
        weighted = weighted_item_counts(R_full, axes.max_items, sampling_key(rng), user_keys)
        chosen = release_item_selection(weighted, axes.item_multiplier, axes.max_items, axes.item_delta, rng)
        chosen.record(ledger)
        ledger.spend_delta(ITEM_SELECTION_DELTA_LABEL, axes.item_delta)
        items = np.asarray(chosen.value, dtype=np.int64)
        info.update(items_selected=int(items.size), selection_threshold=float(chosen.info["threshold"]))
        if items.size == 0:
            raise ValueError(
                f"no item passed the private item selection (threshold {chosen.info['threshold']:.1f} in weighted "
                f"users, epsilon = {model.epsilon:g}): too few users rate each item for this epsilon; declare the item "
                "catalogue (fit(X, items=catalogue), or --items FILE) or use a larger epsilon"
            )
    R = R_full[:, items].tocsr() if items.size != n_items else R_full
    shape = (max(1, int(round(users))), int(items.size))
    plan = plan_fit(
        model,
        shape,
        keys=keys_from,
        target=(axes.epsilon, axes.delta),
        selected_items=axes.item_multiplier is not None,
    )
    if axes.user_multiplier is not None:
        plan = dataclasses.replace(plan, users_released=users)
    model._fit_matrix(R, user_keys=user_keys, show_progress=show_progress, callback=callback, plan=plan)
    full = PrivacyLedger()
    full.extend(ledger)
    full.extend(model.ledger_)
    model.ledger_ = full
    config = dict(model.config_)
    config["epsilon_fit"] = float(axes.epsilon)  # the fit's share of the target, after the axes' releases
    config["epsilon"] = float(model.epsilon)
    config["delta"] = float(model.delta)
    config["n_users"] = users if axes.user_multiplier is not None else config.get("n_users")
    config["n_items"] = int(items.size)
    config["epsilon_spent"] = float(full.epsilon(float(model.delta), getattr(model, "accountant", "pld")))
    model.config_ = config
    model.axes_ = {**info, **axes.as_dict()}
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
