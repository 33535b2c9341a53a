"""Offline evaluation: metrics, popularity slicing, neighbour overlap, protocols.

As in Krichene et al. (ICML 2023), Sec. 5 and App. D.
"""

from .metrics import (
    catalogue_coverage,
    ndcg_at_k,
    pair_predictions,
    ranking_metrics,
    recall_at_k,
    rmse,
)
from .neighbours import (
    ReferenceNeighbours,
    cosine_neighbours,
    neighbour_overlap,
    sample_per_bucket,
    sliced_neighbour_overlap,
)
from .slicing import PAPER_SLICED_KS, popularity_buckets, sliced_recall, sliced_rmse, top_items
from .topk import topk_indices

__all__ = [
    "PAPER_SLICED_KS",
    "ReferenceNeighbours",
    "catalogue_coverage",
    "cosine_neighbours",
    "ndcg_at_k",
    "neighbour_overlap",
    "pair_predictions",
    "popularity_buckets",
    "ranking_metrics",
    "recall_at_k",
    "rmse",
    "sample_per_bucket",
    "sliced_neighbour_overlap",
    "sliced_recall",
    "sliced_rmse",
    "top_items",
    "topk_indices",
]
