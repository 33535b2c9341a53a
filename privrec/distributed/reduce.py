"""Item-blocked, fixed-shape tree reductions over user partitions (the distributed item step).

In DP-ALS the item step needs, for every item i, statistics summed over *all* users (the SSP
Gramians ``sum_u w_ui x_u x_u^T`` and right-hand sides), then noise once per released statistic
and a solve. With users split into partitions (:mod:`privrec.distributed.partition`) each
partition contributes a partial sum. :func:`reduce_item_blocks` adds the partials up, one public
item block at a time, and calls ``finish`` once per block at the root of a tree:

* **bounded memory**: the items are cut into fixed public blocks (:func:`item_blocks`); a leaf
  task computes one partition's partial statistics of one block, an inner task adds at most
  ``fan_in`` partials of the same block, and the root adds at most ``fan_in`` and calls
  ``finish``. No task ever holds more than ``fan_in`` partials of one item block, and at most
  ``max_in_flight`` item blocks are being reduced at any time, so no worker holds all
  ``m * d^2`` Gramian entries at once;
* **fixed summation tree**: partials are grouped by partition index (consecutive groups of
  ``fan_in``, level by level, :func:`summation_tree`) and every task adds its inputs in index
  order, whatever order they arrive in. The floating-point result depends only on the
  partitioning, ``fan_in`` and the block boundaries -- not on the schedule, the number of
  workers, retries or lost workers;
* **pure tasks, explicit seeds**: every task is a pure function of its arguments. ``finish``
  receives the block's seed (``seeds[k]``, e.g. from :func:`block_seeds`) as an *argument*, so a
  root that is recomputed (its worker died, or its result was lost before the driver gathered
  it) draws exactly the same noise: a retry never produces a second, differently-noised release
  of the same statistic.

:func:`tree_sum` is the same fixed tree for small values (item counts, scalars, per-partition
norms) without item blocks.
"""

from __future__ import annotations

import numbers
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._client import as_completed, get_client, is_serial

DEFAULT_FAN_IN = 8


# ---------------------------------------------------------------------- public layout helpers


def item_blocks(n_items: int, block_size: int) -> list[slice]:
    """Contiguous item blocks ``[k * block_size, min((k + 1) * block_size, n_items))`` (public: they
    depend only on the number of items and the block size)."""
    n_items = _check_int(n_items, "n_items", 0)
    block_size = _check_int(block_size, "block_size", 1)
    return [slice(s, min(s + block_size, n_items)) for s in range(0, n_items, block_size)]


def summation_tree(n_leaves: int, fan_in: int = DEFAULT_FAN_IN) -> list[list[tuple[int, int]]]:
    """The fixed reduction tree: for each level above the leaves, the ``(start, stop)`` ranges of
    the previous level that one task adds (in index order). The last level has one group, the
    root; its range covers at most ``fan_in`` nodes. ``n_leaves == 1``: one root over the leaf."""
    n = _check_int(n_leaves, "n_leaves", 1)
    f = _check_fan_in(fan_in)
    levels = []
    while n > f:
        groups = [(s, min(s + f, n)) for s in range(0, n, f)]
        levels.append(groups)
        n = len(groups)
    levels.append([(0, n)])
    return levels


def block_seeds(entropy, n_blocks: int, *path: int) -> list[np.random.SeedSequence]:
    """One ``numpy.random.SeedSequence`` per item block: ``SeedSequence(entropy, spawn_key=(*path, k))``.

    ``entropy``: an int, a sequence of ints, or a ``SeedSequence`` (its entropy and spawn key are
    used; it is *not* mutated, unlike ``SeedSequence.spawn``, so calling this twice gives the same
    seeds). ``path`` names the release, e.g. ``(step,)`` for ALS step ``step``: seeds of different
    paths are independent streams. For a private release the entropy must come from the OS
    (``numpy.random.SeedSequence().entropy``) and never be published: anyone holding it can
    regenerate the noise.
    """
    n_blocks = _check_int(n_blocks, "n_blocks", 0)
    if isinstance(entropy, np.random.SeedSequence):
        base_key, pool = tuple(entropy.spawn_key), entropy.pool_size
        entropy = entropy.entropy
    else:
        base_key, pool = (), 4
    for p in path:
        _check_int(p, "seed path entry", 0)
    prefix = base_key + tuple(int(p) for p in path)
    return [np.random.SeedSequence(entropy, spawn_key=(*prefix, k), pool_size=pool) for k in range(n_blocks)]


def broadcast(value, client=None):
    """Scatter ``value`` to every worker once and return its future (pass it as a task argument
    instead of embedding a large array in every task).

    Scattered data has no lineage: hold the returned future for as long as any task that uses it
    may run *or be recomputed* (a task whose scattered input was released cannot be rebuilt after
    its worker dies). For inputs that must survive the loss of every replica, submit a task that
    produces them instead (``client.submit(fn, ...)``), which the scheduler can rerun."""
    client = get_client(client)
    return client.scatter(value, broadcast=True, hash=False)


# ---------------------------------------------------------------------- task bodies (pure)


def _copy(value):
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)  # inputs may be read-only buffers received from a peer
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _accumulate(acc, value):
    """``acc + value`` elementwise over arrays / scalars / tuples / lists / dicts (same structure);
    arrays are added in place into ``acc`` (a private copy)."""
    if isinstance(acc, np.ndarray):
        if acc.shape != np.shape(value):
            raise ValueError(f"partial statistics differ in shape: {acc.shape} vs {np.shape(value)}")
        np.add(acc, value, out=acc, casting="same_kind")
        return acc
    if isinstance(acc, (tuple, list)):
        if len(acc) != len(value):
            raise ValueError("partial statistics differ in structure")
        return type(acc)(_accumulate(a, v) for a, v in zip(acc, value))
    if isinstance(acc, dict):
        if acc.keys() != value.keys():
            raise ValueError("partial statistics differ in keys")
        return {k: _accumulate(acc[k], value[k]) for k in acc}
    return acc + value


def sum_in_order(*values):
    """``values[0] + values[1] + ...``, strictly left to right (the fixed order of every tree node)."""
    if not values:
        raise ValueError("nothing to add")
    acc = _copy(values[0])
    for v in values[1:]:
        acc = _accumulate(acc, v)
    return acc


def _leaf(partial, part, offset, items, per_partition, args, kwargs):
    return partial(part, offset, items, *per_partition, *args, **kwargs)


def _root(finish, k, seed, finish_args, finish_kwargs, *values):
    total = sum_in_order(*values)
    if finish is None:
        return total
    return finish(total, k, seed, *finish_args, **finish_kwargs)


# ---------------------------------------------------------------------- reductions


def _tree(client, leaves: list, fan_in: int, prefix: str, priority: int = 0) -> list:
    """Submit the inner levels over ``leaves``; return the (<= fan_in) futures the root adds."""
    level = leaves
    for depth, groups in enumerate(summation_tree(len(leaves), fan_in)[:-1]):
        level = [
            level[s]
            if e - s == 1
            else client.submit(sum_in_order, *level[s:e], key=f"{prefix}-sum{depth}-{j}", priority=priority)
            for j, (s, e) in enumerate(groups)
        ]
    return level


def tree_sum(futures: Sequence, fan_in: int = DEFAULT_FAN_IN, client=None, *, key: str | None = None):
    """Future of the sum of ``futures`` (arrays, scalars, or tuples / dicts of them) over the fixed
    tree of :func:`summation_tree` (bit-identical whatever the schedule)."""
    client = get_client(client)
    futures = list(futures)
    if not futures:
        raise ValueError("tree_sum needs at least one value")
    fan_in = _check_fan_in(fan_in)
    prefix = key or f"privrec-tree-sum-{uuid.uuid4().hex[:12]}"
    top = _tree(client, futures, fan_in, prefix)
    return client.submit(sum_in_order, *top, key=f"{prefix}-root")


def reduce_item_blocks(
    parts,
    partial: Callable,
    blocks: Sequence[slice],
    finish: Callable | None = None,
    *,
    seeds: Sequence | None = None,
    args: tuple = (),
    kwargs: dict | None = None,
    per_partition: Sequence[Sequence] = (),
    finish_args: tuple = (),
    finish_kwargs: dict | None = None,
    offsets: Sequence[int | None] | None = None,
    fan_in: int = DEFAULT_FAN_IN,
    max_in_flight: int | None = None,
    gather: bool = True,
    client=None,
    key: str | None = None,
) -> list:
    """Per item block ``k``: ``finish(sum over partitions p of partial(part_p, offset_p, blocks[k], ...), k, seeds[k])``.

    ``parts``: a :class:`~privrec.distributed.partition.PartitionedInteractions` (its block futures,
    offsets and client) or a sequence of per-partition futures. Leaf ``(p, k)`` runs
    ``partial(part_p, offset_p, blocks[k], *per_partition_values_p, *args, **kwargs)`` where
    ``part_p`` is the partition's value (a :class:`~privrec.distributed.partition.PartitionBlock`
    for partitioned interactions: ``part.item_block(blocks[k])`` is its (items x local users) CSR
    slice), ``offset_p`` its global row offset (``offsets[p]``; ``None`` if not known) and
    ``per_partition`` a list of per-partition future lists (e.g. the user factors of each partition,
    from :meth:`~privrec.distributed.partition.PartitionedInteractions.map_blocks`). ``partial``
    returns an array, a scalar, or a tuple / list / dict of them, with the same shapes for every
    partition. ``finish(total, k, seed, *finish_args, **finish_kwargs)`` runs once per block at the
    root (``None``: return the sum); ``seed`` is ``seeds[k]`` (``None`` without ``seeds``).

    Tree, memory bound and determinism: see the module docstring (``fan_in`` >= 2; at most
    ``max_in_flight`` blocks reduced concurrently, default 4). Returns the ``finish`` results in
    block order, gathered to the driver (``gather=False``: the root futures). Every call uses fresh
    task keys (``key`` sets their prefix), so nothing is reused from an earlier call.
    """
    from .partition import PartitionedInteractions

    if isinstance(parts, PartitionedInteractions):
        client = client or parts.client
        offsets = parts.offsets[:-1].tolist() if offsets is None else offsets
        parts = parts.blocks
    client = get_client(client)
    parts = list(parts)
    n_parts = len(parts)
    if n_parts == 0:
        raise ValueError("reduce_item_blocks needs at least one partition")
    blocks = list(blocks)
    for b in blocks:
        if not isinstance(b, slice):
            raise ValueError(f"blocks must be slices (see item_blocks), got {type(b).__name__}")
    fan_in = _check_fan_in(fan_in)
    window = 4 if max_in_flight is None else _check_int(max_in_flight, "max_in_flight", 1)
    offs: list[int | None] = [None] * n_parts if offsets is None else [None if o is None else int(o) for o in offsets]
    if len(offs) != n_parts:
        raise ValueError(f"offsets has {len(offs)} entries for {n_parts} partitions")
    per_partition = [list(pp) for pp in per_partition]
    for i, pp in enumerate(per_partition):
        if len(pp) != n_parts:
            raise ValueError(f"per_partition[{i}] has {len(pp)} entries for {n_parts} partitions")
    if seeds is not None:
        seeds = list(seeds)
        if len(seeds) != len(blocks):
            raise ValueError(f"seeds has {len(seeds)} entries for {len(blocks)} item blocks")
    kwargs, finish_kwargs = dict(kwargs or {}), dict(finish_kwargs or {})
    args, finish_args = tuple(args), tuple(finish_args)
    prefix = key or f"privrec-reduce-{uuid.uuid4().hex[:12]}"

    def submit_block(k: int):
        """Leaves, inner sums and root of block k; returns (root, every future of the block)."""
        prio = len(blocks) - k  # earlier blocks first
        items = blocks[k]
        leaves = [
            client.submit(
                _leaf,
                partial,
                parts[p],
                offs[p],
                items,
                tuple(pp[p] for pp in per_partition),
                args,
                kwargs,
                key=f"{prefix}-b{k}-leaf-{p}",
                priority=prio,
            )
            for p in range(n_parts)
        ]
        top = _tree(client, leaves, fan_in, f"{prefix}-b{k}", prio)
        seed = None if seeds is None else seeds[k]
        root = client.submit(
            _root, finish, k, seed, finish_args, finish_kwargs, *top, key=f"{prefix}-b{k}-root", priority=prio
        )
        return root

    results: list[Any] = [None] * len(blocks)
    if not blocks:
        return results
    active: dict[Any, tuple[int, Any]] = {}  # root key -> (block, future); only unfinished roots are held
    next_k = 0

    def launch():
        nonlocal next_k
        root = submit_block(next_k)
        active[root.key] = (next_k, root)
        next_k += 1
        return root

    completed = as_completed(client, [launch() for _ in range(min(window, len(blocks)))])
    try:
        for fut in completed:
            k, _ = active.pop(fut.key)
            if gather:
                results[k] = fut.result()
                fut.release()
            else:
                if is_serial(client) or fut.status == "error":
                    fut.result()  # raises the task's error
                results[k] = fut
            if next_k < len(blocks):
                completed.add(launch())
    except BaseException:
        cancel = getattr(client, "cancel", None)
        if cancel is not None and active:
            cancel([f for _, f in active.values()])
        raise
    return results


# ---------------------------------------------------------------------- checks


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_fan_in(fan_in) -> int:
    return _check_int(fan_in, "fan_in", 2)


__all__ = [
    "DEFAULT_FAN_IN",
    "block_seeds",
    "broadcast",
    "item_blocks",
    "reduce_item_blocks",
    "sum_in_order",
    "summation_tree",
    "tree_sum",
]
