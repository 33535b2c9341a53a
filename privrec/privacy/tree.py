"""Binary-tree (continual counting) mechanism for private prefix sums.

Dwork, Naor, Pitassi, Rothblum (STOC 2010) and Chan, Shi, Song (ACM TISSEC 2011), as used by
Choquette-Choo et al. (ALT 2025), Sec. 5.3.

Leaves ``x_1, ..., x_T`` arrive one at a time. The tree has a node ``(j, k)`` for every odd ``j``
covering leaves ``(j-1) 2^k + 1 .. j 2^k``; each node's exact partial sum gets its own fresh
``N(0, sigma^2 I)`` noise when the node is complete. The noisy prefix sum after leaf ``m`` is the
sum of the noisy nodes for the set bits of ``m`` (``popcount(m) <= ceil(log2 T)`` nodes; e.g.
``g_7 = s_{1,2} + s_{3,1} + s_{7,0}``), so its noise variance is ``popcount(m) sigma^2`` per
coordinate.

Privacy (the DpEvent). One user/example changes exactly one leaf by at most ``sensitivity`` in
L2, and a leaf lies in at most ``1 + floor(log2 T) <= 1 + ceil(log2 T)`` nodes. Stacking all node
sums into one vector, the whole release (every prefix sum is post-processing of it) is a single
Gaussian mechanism with L2 sensitivity ``sensitivity * sqrt(1 + ceil(log2 T))`` and noise std
``sigma``, i.e. noise multiplier ``sigma / (sensitivity sqrt(1 + ceil(log2 T)))``. This holds
for adaptively chosen leaves as well (the node noise is fresh and each node sum depends on the
changed leaf at most once), which is how Accelerated-DP-SRGD and DP-FTRL use it. privrec emits
that ``GaussianDpEvent``. ``dp_accounting``'s ``SingleEpochTreeAggregationDpEvent`` describes the
same release but is only accepted by the accountant under the REPLACE_SPECIAL relation, which
privrec's ledger does not use; its RDP is never smaller than ours for the same tree (we use the
rounded-up depth), see ``tests/test_privacy_tree.py``. Using ``ceil`` rather than the exact
per-leaf maximum costs at most one node of slack and is always safe.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np

from .._validation import check_int, check_positive
from .mechanisms import gaussian_event, gaussian_noise
from .rng import make_rng


def tree_depth(num_leaves: int) -> int:
    """``1 + ceil(log2 T)``: the bound on the number of tree nodes that contain one leaf."""
    t = check_int(num_leaves, "num_leaves", minimum=1)
    return 1 + (t - 1).bit_length()  # (t-1).bit_length() == ceil(log2 t) for t >= 1


def prefix_nodes(m: int) -> list[tuple[int, int]]:
    """Nodes ``(j, k)`` (odd ``j``) whose sums make up prefix ``m``: one per set bit ``k`` of ``m``.

    Node ``(j, k)`` covers leaves ``(j-1) 2^k + 1 .. j 2^k``; returned from the highest level down,
    so the covered ranges are consecutive and exactly tile ``1..m``.
    """
    m = check_int(m, "m", minimum=0)
    return [(m >> k, k) for k in range(m.bit_length() - 1, -1, -1) if (m >> k) & 1]


def node_range(j: int, k: int) -> tuple[int, int]:
    """Inclusive leaf range ``((j-1) 2^k + 1, j 2^k)`` of node ``(j, k)``."""
    return (j - 1) * (1 << k) + 1, j * (1 << k)


def leaf_nodes(leaf: int, num_leaves: int) -> list[tuple[int, int]]:
    """All tree nodes (odd ``j``, complete within ``T`` leaves) that contain ``leaf`` (1-based)."""
    leaf = check_int(leaf, "leaf", minimum=1)
    t = check_int(num_leaves, "num_leaves", minimum=leaf)
    out = []
    k = 0
    while (1 << k) <= t:
        j = (leaf - 1) // (1 << k) + 1
        if j % 2 == 1 and j * (1 << k) <= t:
            out.append((j, k))
        k += 1
    return out


def tree_noise_multiplier_event(node_noise_multiplier: float, num_leaves: int) -> dp_accounting.DpEvent:
    """DpEvent of a whole tree release whose node noise std is ``node_noise_multiplier * sensitivity``.

    A Gaussian mechanism with multiplier ``node_noise_multiplier / sqrt(1 + ceil(log2 T))``.
    """
    z = check_positive(node_noise_multiplier, "noise_multiplier", allow_zero=True, allow_inf=True)
    return gaussian_event(z / math.sqrt(tree_depth(num_leaves)) if math.isfinite(z) else z)


def node_multiplier_for(event_noise_multiplier: float, num_leaves: int) -> float:
    """Node noise multiplier that makes the whole tree a Gaussian with ``event_noise_multiplier``."""
    z = check_positive(event_noise_multiplier, "noise_multiplier", allow_zero=True)
    return z * math.sqrt(tree_depth(num_leaves))


class TreeAggregator:
    """Online binary-tree mechanism: ``add(leaf)`` returns the noisy prefix sum so far.

    Parameters
    ----------
    shape : shape of one leaf (e.g. the parameter vector's shape).
    num_leaves : T, the maximum number of leaves (fixes the tree depth used by the DpEvent).
    sensitivity : L2 bound on how much one user/example can change its (single) leaf. Callers
        enforce it by clipping; ``add`` checks nothing about the data.
    noise_multiplier : node noise std = ``noise_multiplier * sensitivity``. The DpEvent's
        multiplier is this divided by ``sqrt(1 + ceil(log2 T))`` (see the module docstring).
        0 disables noise (event ``NonPrivateDpEvent``), giving exact prefix sums.
    random_state : ``None`` (OS entropy, the private default) or a seed/Generator; a known seed
        voids the privacy guarantee.

    Memory is ``O(log T)`` leaves: ``alpha[k]`` holds the exact sum of the open level-``k`` node
    and ``noisy[k]`` the released noisy sum of the last completed level-``k`` node.
    """

    def __init__(
        self, shape, num_leaves: int, sensitivity: float, noise_multiplier: float, random_state=None, dtype=np.float32
    ):
        self.shape = tuple(np.atleast_1d(shape).astype(int)) if np.ndim(shape) else (int(shape),)
        self.num_leaves = check_int(num_leaves, "num_leaves", minimum=1)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.noise_multiplier = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True)
        self.noise_std = self.noise_multiplier * self.sensitivity
        self.dtype = np.dtype(dtype)
        self.rng = make_rng(random_state)
        levels = self.num_leaves.bit_length()
        self._alpha = np.zeros((levels, *self.shape), dtype=np.float64)
        self._noisy = np.zeros((levels, *self.shape), dtype=np.float64)
        self.count = 0

    @property
    def event(self) -> dp_accounting.DpEvent:
        """The whole release as one Gaussian DpEvent (record it once, for all ``T`` prefix sums)."""
        return tree_noise_multiplier_event(self.noise_multiplier, self.num_leaves)

    def record(self, ledger, label: str = "binary-tree prefix sums"):
        """Record :attr:`event` in ``ledger`` with the tree's parameters as metadata."""
        return ledger.record(
            label,
            self.event,
            num_leaves=self.num_leaves,
            sensitivity=self.sensitivity,
            node_noise_std=self.noise_std,
            depth=tree_depth(self.num_leaves),
        )

    def add(self, leaf) -> np.ndarray:
        """Add leaf ``m = count + 1``; return the noisy prefix sum of leaves ``1..m``."""
        leaf = np.asarray(leaf, dtype=np.float64)
        if leaf.shape != self.shape:
            raise ValueError(f"leaf has shape {leaf.shape}, expected {self.shape}")
        if self.count >= self.num_leaves:
            raise ValueError(f"the tree was built for {self.num_leaves} leaves; cannot add more")
        self.count += 1
        m = self.count
        k = (m & -m).bit_length() - 1  # the one node completed by leaf m is (m >> k, k)
        node = leaf + self._alpha[:k].sum(axis=0)
        self._alpha[:k] = 0.0
        self._alpha[k] = node
        self._noisy[k] = node + gaussian_noise(self.shape, self.noise_std, self.rng, np.float64)
        return self.prefix()

    def prefix(self) -> np.ndarray:
        """Current noisy prefix sum: the noisy nodes for the set bits of ``count``."""
        m = self.count
        bits = [k for k in range(m.bit_length()) if (m >> k) & 1]
        out = self._noisy[bits].sum(axis=0) if bits else np.zeros(self.shape)
        return out.astype(self.dtype, copy=False)
