"""The automatic private selection on Dask: the plan's candidates fitted on the users' training
parts, their held-out losses summed over partitions, one noisy score release at the driver.

:class:`DaskSelectionData` is the :class:`privrec.tuning.selection.SelectionData` of partitioned
data: each partition splits its users' ratings by :func:`privrec.tuning.selection.split_holdout`
keyed on the stable hash of each user's id (so the split of a user is the local fit's, whatever
the partitioning), each candidate is a :func:`privrec.distributed.fit` of the training parts, and
each partition returns only the sum of its users' clipped held-out losses
(:func:`privrec.tuning.selection.user_losses`): the driver sees aggregates, as for every other
release. With the same ``random_state`` the candidates, the split, the ledger and the chosen
design equal the local fit's; the factors agree to float tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..allocation import stable_user_keys
from ..tuning.selection import split_holdout, user_losses
from .partition import PartitionBlock, PartitionedInteractions, block_from_matrix

__all__ = ["DaskSelectionData"]


def _holdout_parts(block: PartitionBlock, offset: int, fraction: float, key: int):
    """``(training block, held-out CSR, training nnz)`` of one partition (keys: its users' ids)."""
    R = sp.csr_matrix(block.matrix, dtype=np.float64)
    train, held = split_holdout(R, fraction, key, stable_user_keys(block.user_ids))
    train32 = sp.csr_matrix(
        (train.data.astype(np.float32), train.indices.astype(np.int32), train.indptr), shape=train.shape
    )
    return block_from_matrix(block.index, block.user_ids, train32), held, int(train.nnz)


def _part(value, i: int):
    return value[i]


def _losses(train: PartitionBlock, held: sp.csr_matrix, model, clip: float, rating_cap) -> float:
    """The sum of the partition's users' selection losses against ``model``'s release."""
    if held.shape[0] == 0:
        return 0.0
    return float(user_losses(model, train.matrix, held, clip, rating_cap).sum())


class DaskSelectionData:
    """Partitioned users for :func:`privrec.tuning.selection.run_selection` (module docstring)."""

    def __init__(
        self,
        parts: PartitionedInteractions,
        client,
        fit: Callable[..., Any],
        fit_kwargs: dict[str, Any],
    ):
        self.parts = parts
        self.client = client
        self.fit_fn = fit  # privrec.distributed.fit (passed in: this module sits below the driver)
        self.fit_kwargs = fit_kwargs
        self.train: PartitionedInteractions | None = None
        self.held: list = []

    def split(self, fraction: float, key: int) -> None:
        parts, client = self.parts, self.client
        offsets = parts.offsets
        pieces = [client.submit(_holdout_parts, b, int(offsets[p]), fraction, key) for p, b in enumerate(parts.blocks)]
        blocks = [client.submit(_part, f, 0) for f in pieces]
        self.held = [client.submit(_part, f, 1) for f in pieces]
        nnz = client.gather([client.submit(_part, f, 2) for f in pieces])
        self.train = PartitionedInteractions(
            client, blocks, parts.item_ids, parts.partition_sizes, np.asarray(nnz, dtype=np.int64), parts.info
        )

    def _fit(self, model, data, show_progress: bool):
        return self.fit_fn(model, data, client=self.client, show_progress=show_progress, **self.fit_kwargs)

    def fit(self, model, show_progress: bool):
        return self._fit(model, self.train, show_progress)

    def score(self, model, clip: float, rating_cap) -> float:
        assert self.train is not None
        client = self.client
        futs = [
            client.submit(_losses, b, h, model, clip, rating_cap)
            for b, h in zip(self.train.blocks, self.held, strict=True)
        ]
        return float(sum(client.gather(futs)))

    def refit(self, model, show_progress: bool):
        return self._fit(model, self.parts, show_progress)

    def finish(self, model) -> None:
        """Nothing to gather: users project themselves (``user_factors_`` stays ``None``)."""
        self.release()

    def release(self) -> None:
        for f in [*(self.train.blocks if self.train is not None else []), *self.held]:
            release = getattr(f, "release", None)
            if release is not None:
                release()
