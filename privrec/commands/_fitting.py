"""Fitting one method on a split.

The fitted model and its fit time, for ``run_experiment(fitted=...)``: the non-private ALS
yardstick or a private method, progress bars only when asked, and the charge to a lifetime privacy
budget when one is given.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from ..evaluation import experiment as X


def fit_input(split, model):
    """What ``model`` is fitted on: the split's training matrix, or -- for a model that releases
    undeclared axes (DPALS) when the split's ``info["axes"]`` says the roster or the catalogue came
    from the data (``--ratings`` without ``--users`` / ``--items``) -- an ``Interactions`` whose
    undeclared axes are marked as the data's, so the fit releases them (add/remove DP)."""
    axes = split.info.get("axes") or {}
    if "axes" not in getattr(model, "get_params", dict)() or (axes.get("roster", True) and axes.get("catalogue", True)):
        return split.train
    model.set_params(axes="release")
    from ..data import Interactions

    n_users, n_items = split.train.shape
    info = {}
    if not axes.get("roster", True):
        info["user_vocabulary"] = "data"
    if not axes.get("catalogue", True):
        info["item_vocabulary"] = "data"
    user_ids = split.user_ids if split.user_ids is not None and len(split.user_ids) == n_users else np.arange(n_users)
    item_ids = split.item_ids if split.item_ids is not None and len(split.item_ids) == n_items else np.arange(n_items)
    return Interactions(split.train, user_ids=user_ids, item_ids=item_ids, info=info)


def columns_of(model_ids, data_ids) -> np.ndarray:
    """The column of each of a model's item ids in a dataset's item ids (``-1``: absent), ids
    compared as text (a CSV's ids and a saved model's may differ in type): one pandas lookup, as
    the models' own id maps (``privrec.models.ids.IdMapMixin._codes``)."""
    import pandas as pd

    index = pd.Index(np.asarray(data_ids).astype(str))
    return index.get_indexer(np.asarray(model_ids).astype(str)).astype(np.int64)


def on_split_axis(model, split):
    """``model`` as evaluated on the split's item axis: a model whose catalogue was selected
    privately holds fewer items than the split's columns; its arrays are placed on them
    (:func:`privrec.models.dpals_axes.on_item_axis`). Other models are returned as they are."""
    n_items = split.train.shape[1]
    factors = getattr(model, "item_factors_", None)
    if factors is None or factors.shape[0] == n_items or getattr(model, "item_ids_", None) is None:
        return model
    from ..models.dpals_axes import on_item_axis

    ids = split.item_ids if split.item_ids is not None else np.arange(n_items)
    return on_item_axis(model, columns_of(model.item_ids_, ids), n_items)


def command_model(split, method, epsilon, delta, params, seed):
    """The (unfitted) model a command fits on ``split``: ``method="als"`` is the non-private yardstick
    (implicit-feedback ALS on held-out users: ``X.make_yardstick``), any other a private model."""
    if method == "als":
        return X.make_yardstick(split.train.shape, split.protocol, params, seed)
    return X.make_model(method, epsilon, delta, params, seed, split.protocol)


def _fit_model(
    split,
    method,
    epsilon,
    delta,
    params,
    seed,
    show_progress: bool,
    charged: dict | None = None,
    after_fit=None,
    model=None,
):
    """``(model, fit seconds)`` for ``run_experiment(fitted=...)``: progress bars only when asked
    (models whose ``fit`` shows progress by default, as implicit's, stay quiet under --json / -q).

    ``charged = {"budget": Budget, "label": str}``: the fit is planned, checked, run and recorded
    under the budget's lock (:meth:`privrec.privacy.Budget.charge`), refused before it starts when
    it would exceed the lifetime epsilon; ``charged["charge"]`` is then the recorded charge.
    ``after_fit(model)`` runs inside the charge right after the fit (e.g. saving the model): when it
    raises, nothing is recorded."""
    import inspect
    import time

    if model is None:  # else the caller's command_model(...) of the same arguments (checked for memory first)
        model = command_model(split, method, epsilon, delta, params, seed)
    kwargs = (
        {"show_progress": bool(show_progress)} if "show_progress" in inspect.signature(model.fit).parameters else {}
    )
    data = fit_input(split, model)
    planned = model.plan(data) if charged and data is not split.train else None
    with (
        charged["budget"].charge(model, split.train.shape, label=charged["label"], planned=planned)
        if charged
        else nullcontext()
    ) as ticket:
        t0 = time.perf_counter()
        model.fit(data, **kwargs)
        seconds = time.perf_counter() - t0
        if after_fit is not None:
            after_fit(model)
    if charged:
        charged["charge"] = ticket
    return model, seconds
