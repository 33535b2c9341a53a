"""Silos, their privacy budgets, and which silos are available in a round.

Lowy & Razaviyayn (ICLR 2023), Sec. 1.1 (N silos, sizes n_i, budgets (eps_i, delta_i),
M_r available silos per round, 1/M := E[1/M_r]) and App. H (unbalanced sizes and budgets).

A :class:`Silo` holds its own records and its own (eps_i, delta_i). Algorithms never read a silo's
records on the server side: every message leaves the silo through
:class:`privrec.convex.federated.channel.SiloChannel`, which adds calibrated noise with a privrec
mechanism and records the event in that silo's own :class:`~privrec.privacy.PrivacyLedger`
(inter-silo record-level DP, ISRL-DP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..._validation import check_delta, check_epsilon, check_finite_array, check_int


@dataclass
class Silo:
    """One data owner: features ``X`` (n_i, d), labels ``y`` (n_i,), budget ``(epsilon, delta)``.

    ``epsilon = inf`` marks a silo without privacy (non-private baselines). ``delta`` defaults to
    ``1 / n_i^2`` as in the paper's experiments (needs ``n_i >= 2``). The records and budget are
    validated once, at construction; ``n`` (records n_i) and ``n_features`` (d) are set from ``X``
    then.
    """

    X: np.ndarray
    y: np.ndarray
    epsilon: float = math.inf
    delta: float | None = None
    name: str = ""
    n: int = field(init=False, repr=False, compare=False)
    n_features: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        label = self.name or "silo"
        X = check_finite_array(self.X, f"{label}: X")
        if X.ndim != 2:
            raise ValueError(f"{label}: X must be a 2-D array (n_records, n_features), got shape {X.shape}")
        if X.shape[0] == 0:
            raise ValueError(f"{label}: silo has no data (0 records)")
        y = check_finite_array(self.y, f"{label}: y")
        if y.shape != (X.shape[0],):
            raise ValueError(f"{label}: y must have shape ({X.shape[0]},), got {y.shape}")
        self.X = X if X.dtype.kind == "f" else X.astype(np.float64)
        self.y = y
        self.n, self.n_features = int(X.shape[0]), int(X.shape[1])
        self.epsilon = check_epsilon(self.epsilon, f"{label}: epsilon")
        if self.delta is None:
            if X.shape[0] < 2:
                raise ValueError(f"{label}: delta must be given for a silo with a single record")
            self.delta = 1.0 / X.shape[0] ** 2
        self.delta = check_delta(self.delta, f"{label}: delta")

    @property
    def private(self) -> bool:
        """``True`` when the silo's budget is finite (``epsilon = inf`` marks a non-private silo)."""
        return math.isfinite(self.epsilon)


class SiloSet:
    """The N silos of a federation (validated: non-empty, equal feature dimensions)."""

    def __init__(self, silos):
        silos = list(silos)
        if not silos:
            raise ValueError("a federation needs at least one silo")
        for i, s in enumerate(silos):
            if not isinstance(s, Silo):
                raise ValueError(f"silo {i} must be a privrec Silo, got {type(s).__name__}")
            if not s.name:
                s.name = f"silo {i}"
        d = {s.n_features for s in silos}
        if len(d) != 1:
            dims = ", ".join(f"{s.name}: {s.n_features}" for s in silos)
            raise ValueError(f"all silos must have the same number of features; got {dims}")
        self.silos = silos

    def __len__(self) -> int:
        return len(self.silos)

    def __iter__(self):
        return iter(self.silos)

    def __getitem__(self, i) -> Silo:
        return self.silos[i]

    @property
    def n_features(self) -> int:
        return self.silos[0].n_features

    @property
    def sizes(self) -> np.ndarray:
        return np.array([s.n for s in self.silos])

    @classmethod
    def from_arrays(cls, Xs, ys, epsilon=math.inf, delta=None, names=None) -> SiloSet:
        """One silo per ``(X_i, y_i)``; ``epsilon`` / ``delta`` scalars or one per silo."""
        Xs, ys = list(Xs), list(ys)
        if len(Xs) != len(ys):
            raise ValueError(f"got {len(Xs)} feature arrays but {len(ys)} label arrays")
        n = len(Xs)
        eps = _per_silo(epsilon, n, "epsilon")
        dl = _per_silo(delta, n, "delta")
        names = list(names) if names is not None else [f"silo {i}" for i in range(n)]
        return cls(Silo(X, y, e, d, nm) for X, y, e, d, nm in zip(Xs, ys, eps, dl, names))

    @classmethod
    def from_groups(cls, X, y, groups, epsilon=math.inf, delta=None) -> SiloSet:
        """Split ``(X, y)`` into silos by the values of ``groups`` (sorted group order)."""
        X = np.asarray(X)
        y = np.asarray(y)
        groups = np.asarray(groups)
        if X.ndim != 2 or groups.shape != (X.shape[0],) or y.shape[0] != X.shape[0]:
            raise ValueError(f"X (n, d), y (n,) and groups (n,) must align; got {X.shape}, {y.shape}, {groups.shape}")
        keys, inv = np.unique(groups, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        bounds = np.searchsorted(inv[order], np.arange(len(keys) + 1))
        idx = [order[bounds[i] : bounds[i + 1]] for i in range(len(keys))]
        return cls.from_arrays(
            [X[i] for i in idx], [y[i] for i in idx], epsilon, delta, names=[f"silo {k}" for k in keys]
        )


def _per_silo(value, n: int, name: str) -> list:
    if value is None or np.ndim(value) == 0:
        return [value] * n
    vals = list(value)
    if len(vals) != n:
        raise ValueError(f"{name}: expected one value per silo ({n}), got {len(vals)}")
    return vals


class Availability:
    """Which silos take part in a round: ``M_r`` drawn uniformly among the N silos.

    ``n_available``: an int M (fixed M_r = M), a pair ``(lo, hi)`` (M_r uniform on lo..hi), or
    ``None`` (all silos every round). ``M > N`` or ``M < 1`` is a ``ValueError``.
    """

    def __init__(self, n_silos: int, n_available=None):
        self.n_silos = check_int(n_silos, "number of silos", minimum=1)
        if n_available is None:
            lo = hi = self.n_silos
        elif np.ndim(n_available) == 0:
            lo = hi = check_int(n_available, "n_available (M)", minimum=1)
        else:
            lo, hi = (check_int(v, "n_available (M)", minimum=1) for v in n_available)
            if lo > hi:
                raise ValueError(f"n_available range must have lo <= hi, got ({lo}, {hi})")
        if hi > self.n_silos:
            raise ValueError(f"n_available (M = {hi}) cannot exceed the number of silos (N = {self.n_silos})")
        self.lo, self.hi = lo, hi

    @property
    def fixed(self) -> bool:
        return self.lo == self.hi

    @property
    def inverse_mean(self) -> float:
        """E[1 / M_r]; the paper's effective M is its reciprocal."""
        return float(np.mean(1.0 / np.arange(self.lo, self.hi + 1)))

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        m = self.lo if self.fixed else int(rng.integers(self.lo, self.hi + 1))
        if m == self.n_silos:
            return np.arange(self.n_silos)
        return np.sort(rng.choice(self.n_silos, size=m, replace=False))
