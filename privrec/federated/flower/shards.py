"""The clients' data of a Flower DP-ALS fit: a :class:`Shard` (one client's users and their rows),
:func:`split_users` (shards of consecutive users of a ratings matrix, ``Interactions`` or
DataFrame) and the one-file form a deployed client reads (:func:`save_shard` / :func:`load_shard`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["Shard", "load_shard", "save_shard", "split_users"]


@dataclass
class Shard:
    """What one DP-ALS client holds: ``index`` (its public partition number), its users' ids
    ``user_ids`` (public: on the roster; a user's sampling key is the stable hash of the id) and
    their ratings ``matrix`` (users x items CSR, the catalogue's item order)."""

    index: int
    user_ids: np.ndarray
    matrix: sp.csr_matrix

    @property
    def n_users(self) -> int:
        return int(self.matrix.shape[0])


def split_users(user_items, n_clients: int) -> list[Shard]:
    """``n_clients`` shards of consecutive users of ``user_items`` (a matrix, ``Interactions`` or
    DataFrame, read as ``DPALS.fit`` reads it). A bare matrix's user ids are its row numbers, as in
    the local fit, so the shards sample exactly the local fit's entries."""
    from ...models._base import check_fit_matrix, fit_input

    R = check_fit_matrix(user_items)
    ids = fit_input(user_items)[1]
    ids = np.arange(R.shape[0], dtype=np.int64) if ids is None else np.asarray(ids)
    n_clients = int(n_clients)
    if not 1 <= n_clients <= R.shape[0]:
        raise ValueError(f"n_clients must be between 1 and the number of users ({R.shape[0]}), got {n_clients}")
    bounds = np.linspace(0, R.shape[0], n_clients + 1).round().astype(int)
    return [Shard(k, ids[a:b], R[a:b].tocsr()) for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]


def save_shard(path, shard: Shard) -> None:
    """Write a shard as one ``.npz`` file (what a deployed client reads with :func:`load_shard`)."""
    m = shard.matrix.tocsr()
    np.savez(
        path,
        index=np.array(shard.index),
        user_ids=np.asarray(shard.user_ids),
        data=m.data,
        indices=m.indices,
        indptr=m.indptr,
        shape=np.array(m.shape),
    )


def load_shard(path) -> Shard:
    """The shard written by :func:`save_shard`."""
    with np.load(path, allow_pickle=False) as f:
        m = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(int(v) for v in f["shape"]))
        return Shard(int(f["index"]), f["user_ids"], m)
