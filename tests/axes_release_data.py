"""Shared by the Dask and Flower tests of ``DPALS(axes="release")`` (issue 42): the settings both
compare with the local fit, and the plain ratings table they fit (not a test module)."""

from __future__ import annotations

import numpy as np
import pandas as pd

BASE = dict(epsilon=20.0, rating_range=(1, 5), random_state=3, axes="release")
SETTINGS = {
    "bias model": dict(factors=0),
    "rank": dict(factors=2, iterations=2),
    "implicit": dict(feedback="implicit", rating_range=None, factors=2, iterations=1, unobserved_weight=0.2),
    "noisy GD": dict(method="ada-dpsgd", factors=2, iterations=2, gd_iterations=2),
}


def plain_ratings(n_users=400, n_items=60, per_user=25, seed=0) -> pd.DataFrame:
    """Ratings 1-5 with a popular head, plus items only one user rated (never selected)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_items + 1) ** 0.8
    p /= p.sum()
    rows = []
    for u in range(n_users):
        for i in rng.choice(n_items, size=per_user, replace=False, p=p):
            rows.append((f"u{u}", f"i{i}", float(rng.integers(1, 6))))
    for u in range(0, n_users, 10):
        rows.append((f"u{u}", f"rare{u}", 4.0))
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


def hold_axes_releases(monkeypatch) -> dict:
    """Hold the noisy user count, the selected items and the noisy catalogue size at their first
    released values (the remove-one-user property tests): later fits reuse them, their events
    unchanged."""
    from privrec.models import dpals_axes
    from privrec.privacy.mechanisms import Release

    real_count, real_select = dpals_axes.release_user_count, dpals_axes.release_item_selection
    real_size = dpals_axes.release_catalogue_size
    held: dict = {}

    def count(n, z, rng):
        rel = real_count(n, z, rng)
        rel.value = held.setdefault("count", rel.value)
        return rel

    def select(weighted, z, k, delta, rng):
        rel = real_select(weighted, z, k, delta, rng)
        return Release(held.setdefault("items", rel.value), rel.events, rel.info)

    def size(n, k, z, rng):
        rel = real_size(n, k, z, rng)
        rel.value = held.setdefault("catalogue", rel.value)
        return rel

    monkeypatch.setattr(dpals_axes, "release_user_count", count)
    monkeypatch.setattr(dpals_axes, "release_item_selection", select)
    monkeypatch.setattr(dpals_axes, "release_catalogue_size", size)
    return held
