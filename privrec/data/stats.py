"""Summary statistics of an ``Interactions`` (the figures of Krichene et al., ICML 2023, App. D, Table 1)."""

from __future__ import annotations

import math

import numpy as np

from privrec.data.interactions import Interactions


def top_share(counts: np.ndarray, fraction: float = 0.1) -> float:
    """Share of all interactions held by the ``fraction`` most popular entries (ceil of fraction * n)."""
    counts = np.asarray(counts)
    if counts.sum() == 0:
        return float("nan")
    k = max(1, int(math.ceil(fraction * len(counts))))
    top = np.partition(counts, len(counts) - k)[len(counts) - k :]
    return float(top.sum() / counts.sum())


def _summary(c: np.ndarray) -> dict:
    return {"min": int(c.min()), "median": float(np.median(c)), "mean": float(c.mean()), "max": int(c.max())}


def dataset_stats(x: Interactions) -> dict:
    """Users, items, interactions, density, top-10% item share and per-user / per-item counts."""
    vals = x.matrix.data
    return {
        "name": x.name,
        "users": x.n_users,
        "items": x.n_items,
        "interactions": x.nnz,
        "density": x.density,
        "top10_item_share": top_share(x.item_counts, 0.1),
        "per_user": _summary(x.user_counts),
        "per_item": _summary(x.item_counts),
        "value_min": float(vals.min()),
        "value_max": float(vals.max()),
        "has_timestamps": x.timestamps is not None,
        "has_item_metadata": x.item_metadata is not None,
        "duplicate_rows": int(x.info.get("duplicate_rows", 0)),
    }
