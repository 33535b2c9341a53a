"""The solvers' input and output: :class:`TaskBatch` and :class:`SolverResult` (Krichene et al. 2023, Secs. 2-3).

A batch holds m weighted least-squares tasks. Task i's examples are positions
``indptr[i]:indptr[i+1]``; example e has feature row ``features[feature_ids[e]]``, label
``labels[e]`` and weight ``weights[e] >= 0``. ``feature_ids`` name the *privacy unit* (a user in
DP-ALS) that owns the example: a unit appears in many tasks, and the stacked release over all
tasks has L2 sensitivity governed by ``beta = max_u sum_{e of u} weights[e]^2``
(:meth:`TaskBatch.unit_budget`). Solvers know nothing else about users or items.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from .._validation import check_finite_array
from ..privacy.mechanisms import Release

#: examples per block in :meth:`TaskBatch.unit_spend` (bounds its float64 temporaries)
_SPEND_CHUNK = 1 << 22


@dataclass(frozen=True)
class TaskBatch:
    """m weighted regression tasks over shared unit features (see module docstring).

    Optional *public* per-task side information used only by step-size schedules:
    ``task_sizes`` (estimates of n_i, e.g. released noisy counts) and ``task_weights``
    (the task weight omega_i of the allocation). They must not be computed from private data
    when the solve is private.
    """

    indptr: np.ndarray
    feature_ids: np.ndarray
    features: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    task_sizes: np.ndarray | None = None
    task_weights: np.ndarray | None = None

    def __post_init__(self):
        indptr = np.asarray(self.indptr, dtype=np.int64)
        fid = np.asarray(self.feature_ids)
        feats = check_finite_array(self.features, "features")
        labels = check_finite_array(np.asarray(self.labels), "labels")
        weights = check_finite_array(np.asarray(self.weights), "weights")
        if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must be a non-decreasing 1-D array starting at 0")
        nnz = int(indptr[-1])
        if feats.ndim != 2:
            raise ValueError(f"features must be a 2-D (units x d) array, got shape {feats.shape}")
        if feats.dtype.kind != "f":
            feats = feats.astype(np.float64)
        for name, arr in (("feature_ids", fid), ("labels", labels), ("weights", weights)):
            if arr.shape != (nnz,):
                raise ValueError(f"{name} must have shape ({nnz},) (indptr[-1]), got {arr.shape}")
        if fid.dtype.kind not in "iu":
            raise ValueError(f"feature_ids must be integers, got dtype {fid.dtype}")
        if nnz and (fid.min() < 0 or fid.max() >= feats.shape[0]):
            raise ValueError(f"feature_ids must lie in [0, {feats.shape[0]})")
        if np.any(weights < 0):
            raise ValueError("weights must be >= 0")
        m = indptr.size - 1
        for name in ("task_sizes", "task_weights"):
            v = getattr(self, name)
            if v is not None:
                v = check_finite_array(np.asarray(v, dtype=np.float64), name)
                if v.shape != (m,) or np.any(v < 0):
                    raise ValueError(f"{name} must be a non-negative array of shape ({m},)")
                object.__setattr__(self, name, v)
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "feature_ids", fid)
        object.__setattr__(self, "features", feats)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "weights", weights)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_csr(
        cls,
        labels,
        weights,
        features,
        transpose: bool = False,
        drop_zero_weights: bool = True,
        task_sizes=None,
        task_weights=None,
    ) -> TaskBatch:
        """Build a batch from a labels CSR and a *parallel* weights CSR (same indptr/indices).

        Without ``transpose`` the matrices are tasks x units (row i = task i). With
        ``transpose=True`` they are units x tasks (e.g. users x items interactions and the
        weights from :mod:`privrec.allocation`); entries are regrouped by task with one stable
        sort, keeping labels and weights aligned. Zero-weight entries are dropped by default
        (they contribute nothing). ``features``: (units, d).
        """
        for name, mat in (("labels", labels), ("weights", weights)):
            if not (sp.issparse(mat) and mat.format == "csr"):
                raise ValueError(f"{name} must be a scipy.sparse CSR matrix, got {type(mat).__name__}")
        if labels.shape != weights.shape or not (
            np.array_equal(labels.indptr, weights.indptr) and np.array_equal(labels.indices, weights.indices)
        ):
            raise ValueError("labels and weights must share shape, indptr and indices (aligned CSR)")
        features = np.asarray(features)
        n_rows, n_cols = labels.shape
        lab = np.asarray(labels.data)
        w = np.asarray(weights.data)
        nnz = labels.nnz
        # positions fit int32 when nnz < 2^31: halves the permutation arrays (no int64 copies)
        pos_dtype = np.int32 if nnz < 2**31 - 1 else np.int64
        if transpose:
            _n_tasks, n_units = n_cols, n_rows
            if features.ndim != 2 or features.shape[0] != n_units:
                raise ValueError(f"features must have {n_units} rows (one per unit), got shape {features.shape}")
            # one O(nnz) counting sort (scipy's CSR -> CSC) of the entry positions, applied to both
            # data arrays: stable, so labels and weights stay aligned
            pos = sp.csr_matrix(
                (np.arange(1, nnz + 1, dtype=pos_dtype), labels.indices, labels.indptr), shape=labels.shape
            ).tocsc()
            order = pos.data
            order -= 1  # in place
            lab = lab[order]
            w = w[order]
            del order
            fid, indptr = pos.indices, pos.indptr.astype(np.int64)
            del pos
        else:
            _n_tasks, n_units = n_rows, n_cols
            if features.ndim != 2 or features.shape[0] != n_units:
                raise ValueError(f"features must have {n_units} rows (one per unit), got shape {features.shape}")
            fid = labels.indices
            indptr = np.asarray(labels.indptr, dtype=np.int64)
        if drop_zero_weights:
            keep = w != 0
            if not np.all(keep):
                # entries dropped before each task start (only the dropped positions are materialised)
                dropped = np.flatnonzero(~keep)
                indptr = indptr - np.searchsorted(dropped, indptr)
                del dropped
                fid, lab, w = fid[keep], lab[keep], w[keep]
            del keep
        id_dtype = np.int32 if n_units < 2**31 - 1 else np.int64
        # a fresh array (never the caller's ``labels.indices``); converted only when needed
        fid = fid.astype(id_dtype) if fid is labels.indices else fid.astype(id_dtype, copy=False)
        return cls(indptr, fid, features, lab, w, task_sizes, task_weights)

    def with_features(self, features) -> TaskBatch:
        """Same tasks, labels and weights with new unit features (e.g. the next ALS sweep)."""
        features = np.asarray(features)
        if features.ndim != 2 or features.shape[0] != self.n_units:
            raise ValueError(f"features must have shape ({self.n_units}, d), got {features.shape}")
        return replace(self, features=features)

    # ------------------------------------------------------------------ properties
    @property
    def n_tasks(self) -> int:
        return self.indptr.size - 1

    @property
    def n_units(self) -> int:
        return self.features.shape[0]

    @property
    def dim(self) -> int:
        return self.features.shape[1]

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def sizes(self) -> np.ndarray:
        """Exact number of examples per task (private: do not use in a private release)."""
        return np.diff(self.indptr)

    def task_ids(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_tasks, dtype=np.int64), self.sizes)

    def unit_spend(self) -> np.ndarray:
        """Per-unit spend ``sum_i (sum_{e of u in task i} w_e)^2`` in float64 (length n_units).

        With at most one example per (task, unit) -- every batch built by :meth:`from_csr` --
        this is ``sum_e w_e^2``. A unit repeated inside one task moves that task's statistics by
        the *sum* of its weights there, so repeats are merged before squaring; otherwise the
        budget check would under-state the sensitivity.
        """
        w = self.weights
        fid = self.feature_ids
        if fid.size > 1:
            starts = np.zeros(fid.size, dtype=bool)
            starts[self.indptr[:-1][self.sizes > 0]] = True
            if np.any(~starts[1:] & (fid[1:] <= fid[:-1])):  # not strictly increasing inside a task
                key = self.task_ids() * self.n_units + fid.astype(np.int64)
                uniq, inv = np.unique(key, return_inverse=True)
                merged = np.bincount(inv, weights=w.astype(np.float64), minlength=uniq.size)
                return np.bincount(uniq % self.n_units, weights=merged * merged, minlength=self.n_units)
            del starts
        # = np.bincount(fid, weights=w.astype(float64) ** 2): the same sequential float64 sums in
        # the same order (np.add.at is unbuffered), over blocks so no full-size float64 copies
        spend = np.zeros(self.n_units, dtype=np.float64)
        step = _SPEND_CHUNK
        for s in range(0, fid.size, step):
            ws = w[s : s + step].astype(np.float64)
            ws *= ws
            np.add.at(spend, fid[s : s + step], ws)
        return spend

    def unit_budget(self) -> float:
        """beta = max over units of ``sum w^2`` (Krichene et al. 2023, Thm 3.3). Private: do not publish."""
        spend = self.unit_spend()
        return float(spend.max()) if spend.size else 0.0

    def check_budget(self, budget: float | None) -> float:
        """Return the actual beta; ``ValueError`` if it exceeds the declared ``budget``."""
        beta = self.unit_budget()
        if budget is not None and beta > budget:
            raise ValueError(
                f"per-unit spend max sum w^2 = {beta:.6g} exceeds the declared budget {budget:.6g}; "
                "build the weights with privrec.allocation (which enforces the budget)"
            )
        return beta


#: a solver's output is the library's one release type: ``params`` (m, d) = ``value``, ``events``
#: [(label, DpEvent, meta)] and ``info`` (diagnostics that may be private)
SolverResult = Release
