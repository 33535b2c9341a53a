"""The size facts of a users x items sparse matrix, shared by every class that holds one."""

from __future__ import annotations

import scipy.sparse as sp


class MatrixShapeFacts:
    """``n_users``, ``n_items``, ``nnz`` and ``shape`` of a class's ``matrix`` attribute (a users x
    items sparse matrix), as plain Python ints. Used by :class:`privrec.data.Interactions` and by
    the per-worker :class:`privrec.distributed.partition.PartitionBlock` (whose ``matrix`` holds
    the partition's local users). The mixin has no state of its own."""

    matrix: sp.csr_matrix

    @property
    def n_users(self) -> int:
        """Rows of ``matrix`` (users)."""
        return int(self.matrix.shape[0])

    @property
    def n_items(self) -> int:
        """Columns of ``matrix`` (items)."""
        return int(self.matrix.shape[1])

    @property
    def nnz(self) -> int:
        """Stored entries of ``matrix`` (interactions)."""
        return int(self.matrix.nnz)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_users, n_items)``."""
        return self.n_users, self.n_items
