"""Data-parallel building blocks for DP-ALS on Dask (optional extra: ``pip install "privrec[dask]"``).

* :mod:`~privrec.distributed.partition` -- :func:`partition_interactions`: users hash-partitioned
  (stable hash of the id) into CSR blocks that stay on the workers (:class:`PartitionedInteractions`),
  from the inputs :mod:`~privrec.distributed.readers` reads and checks (DataFrames, Parquet);
* :mod:`~privrec.distributed.reduce` -- :func:`reduce_item_blocks`: per public item block, a
  fixed-shape tree sum of per-partition partial statistics with a seeded ``finish`` at the root
  (bounded memory, bit-identical across schedules and retries); :func:`tree_sum` for small values;
* :mod:`~privrec.distributed.fit` -- :func:`fit`: ``DPALS`` (every method) or ``ALS`` fitted on the
  partitions, with the local fit's random draws, releases and ledger (factors equal to float
  tolerance; user factors are not gathered), driving the worker-side task bodies of
  :mod:`~privrec.distributed.tasks`.

Importing this package does not import Dask; the functions need a ``distributed.Client`` (the
current one by default) or, for an in-process run of the same tasks, a :class:`SerialClient`.
"""

from ._client import SerialClient
from .fit import DEFAULT_BLOCK_TASKS, fit
from .partition import (
    HASH_KEY,
    PartitionBlock,
    PartitionedInteractions,
    partition_interactions,
    partition_of,
    stable_hash,
)
from .reduce import (
    DEFAULT_FAN_IN,
    block_seeds,
    broadcast,
    item_blocks,
    reduce_item_blocks,
    sum_in_order,
    summation_tree,
    tree_sum,
)

__all__ = [
    "DEFAULT_BLOCK_TASKS",
    "DEFAULT_FAN_IN",
    "HASH_KEY",
    "PartitionBlock",
    "PartitionedInteractions",
    "SerialClient",
    "block_seeds",
    "broadcast",
    "fit",
    "item_blocks",
    "partition_interactions",
    "partition_of",
    "reduce_item_blocks",
    "stable_hash",
    "sum_in_order",
    "summation_tree",
    "tree_sum",
]
