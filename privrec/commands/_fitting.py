"""Fitting one method on a split.

The fitted model and its fit time, for ``run_experiment(fitted=...)``: the non-private ALS
yardstick or a private method, progress bars only when asked, and the charge to a lifetime privacy
budget when one is given.
"""

from __future__ import annotations

from contextlib import nullcontext

from ..evaluation import experiment as X


def _fit_model(
    split, method, epsilon, delta, params, seed, show_progress: bool, charged: dict | None = None, after_fit=None
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

    if method == "als":  # the non-private yardstick: implicit-feedback ALS on held-out users (X.make_yardstick)
        model = X.make_yardstick(split.train.shape, split.protocol, params, seed)
    else:
        model = X.make_model(method, epsilon, delta, params, seed, split.protocol)
    kwargs = (
        {"show_progress": bool(show_progress)} if "show_progress" in inspect.signature(model.fit).parameters else {}
    )
    with (
        charged["budget"].charge(model, split.train.shape, label=charged["label"]) if charged else nullcontext()
    ) as ticket:
        t0 = time.perf_counter()
        model.fit(split.train, **kwargs)
        seconds = time.perf_counter() - t0
        if after_fit is not None:
            after_fit(model)
    if charged:
        charged["charge"] = ticket
    return model, seconds
