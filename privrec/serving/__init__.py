"""Serving a fitted model: approximate nearest-neighbour search and batch export.

* :class:`ItemIndex`: an approximate nearest-neighbour index over the released item factors, for
  ``similar_items`` (cosine) and ``recommend`` (the model's ranking score, bias and exposure terms
  included), with ``backend="faiss"`` (HNSW; the optional extra ``pip install 'privrec[serving]'``)
  or ``backend="exact"``; :func:`recall_at_k` measures it against exact search.
* :func:`recommend_all`: every user's top-N to a Parquet file, in user batches with bounded memory
  (``privrec export`` on the command line).

Both read only the released item side and each user's own history: serving costs no privacy.
See docs/serving.md.
"""

from .ann import BACKENDS, INSTALL_HINT, ItemIndex, recall_at_k
from .batch import aligned_user_items, default_batch_size, recommend_all

__all__ = [
    "BACKENDS",
    "INSTALL_HINT",
    "ItemIndex",
    "recall_at_k",
    "recommend_all",
    "aligned_user_items",
    "default_batch_size",
]
