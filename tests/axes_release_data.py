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
