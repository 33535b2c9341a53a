"""White-box audit of a solver's release (one concern: auditing the noisy statistics a DP-ALS
item-step solver releases, with many canaries in one solve).

Implements the white-box audit of :mod:`privrec.privacy.audit`: :class:`CanaryDesign` /
:func:`canary_design` (the exact contribution of each canary unit to its own tasks),
:func:`remove_units` (the neighbouring batch), :func:`tap_solver` / :class:`SolverTap` (a copy of an
SSP or noisy-GD solver -- Krichene et al. 2023, Alg. 1 and Alg. 2 -- that runs the same code and records its noisy
statistics), :func:`worst_case_gd_init`, and :func:`audit_solver_release`: canaries included
independently with probability 1/2 (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1)
training run"), each scored by the Gaussian likelihood-ratio statistic of its tasks' releases under
the claimed noise, the scores audited by :func:`~privrec.privacy.audit.audit_scores`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..ledger import epsilon_of_event
from ..mechanisms import compose
from ..rng import make_rng
from .blackbox import AuditResult, audit_scores
from .bounds import gaussian_mu, separation


@dataclass(frozen=True)
class CanaryDesign:
    """Canary units of a :class:`~privrec.solvers.TaskBatch` and their exact contributions.

    ``canaries`` (unit ids, i.e. ``feature_ids`` values); ``task_canary`` (m,) the position in
    ``canaries`` of the canary that owns task i (-1: no canary); ``delta_gramian`` (m, d, d) /
    ``delta_rhs`` (m, d) what the canary adds to each task's clipped weighted statistics;
    ``base_gramian`` / ``base_rhs`` the statistics of the batch without any canary (float64).
    """

    canaries: np.ndarray
    task_canary: np.ndarray
    delta_gramian: np.ndarray
    delta_rhs: np.ndarray
    base_gramian: np.ndarray
    base_rhs: np.ndarray


def remove_units(batch, units):
    """The batch without any example of the given units (same tasks, features and public side
    information): the neighbouring dataset in which those units are absent."""
    from ...solvers import TaskBatch

    keep = ~np.isin(batch.feature_ids, np.asarray(units))
    sizes = np.bincount(batch.task_ids()[keep], minlength=batch.n_tasks)
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    return TaskBatch(
        indptr,
        batch.feature_ids[keep],
        batch.features,
        batch.labels[keep],
        batch.weights[keep],
        task_sizes=batch.task_sizes,
        task_weights=batch.task_weights,
    )


def _unique_ids(ids) -> np.ndarray:
    """Sorted distinct integer ids (a counting pass for dense non-negative ids, else a sort)."""
    a = np.asarray(ids).ravel()
    if a.dtype.kind not in "iu":
        raise ValueError("unit ids must be integers")
    if a.size and a.min() >= 0 and a.max() < 4 * a.size + 1_000_000:
        return np.flatnonzero(np.bincount(a)).astype(a.dtype, copy=False)
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if a.size else a


def canary_design(batch, canaries, max_norm, label_bound) -> CanaryDesign:
    """Exact contributions of ``canaries`` (unit ids) to ``batch``'s clipped statistics
    (:func:`~privrec.solvers.weighted_statistics` with and without them).

    Every canary must have at least one example and be the only canary in each of its tasks
    (other, non-canary units may share them): then its contribution is the difference of the
    two statistics on its own tasks. ``ValueError`` otherwise.
    """
    from ...solvers import weighted_statistics

    canaries = _unique_ids(canaries)
    if canaries.size < 1:
        raise ValueError("at least one canary unit is needed")
    fid = batch.feature_ids
    pos = np.minimum(np.searchsorted(canaries, fid), canaries.size - 1)
    is_canary = canaries[pos] == fid
    if np.any(np.bincount(pos[is_canary], minlength=canaries.size) == 0):
        raise ValueError("every canary unit needs at least one example in the batch")
    m = batch.n_tasks
    starts = batch.indptr[:-1][batch.sizes > 0]
    hi = np.full(m, -1, dtype=np.int64)
    lo = np.full(m, -1, dtype=np.int64)
    if starts.size:
        big = np.iinfo(np.int64).max
        hi[batch.sizes > 0] = np.maximum.reduceat(np.where(is_canary, pos, -1), starts)
        lo[batch.sizes > 0] = np.minimum.reduceat(np.where(is_canary, pos, big), starts)
    if np.any((hi >= 0) & (lo != hi)):
        raise ValueError("two canaries share a task: each task may hold at most one canary")
    G1, b1 = weighted_statistics(batch, max_norm, label_bound)
    G0, b0 = weighted_statistics(remove_units(batch, canaries), max_norm, label_bound)
    return CanaryDesign(canaries, hi, G1 - G0, b1 - b0, G0, b0)


class SolverTap:
    """What a tapped solver released in its last ``solve`` (see :func:`tap_solver`).

    After a solve, :meth:`released` gives, per task: SSP ``{"gramian": (m, d, d), "rhs": (m, d)}``,
    the noisy statistics before the PSD projection and the ridge; noisy GD ``{"theta": (T, m, d),
    "gradient": (T, m, d)}``, the iterate each step started from and its noisy data gradient (the
    public ridge and gravity terms removed). Thread-safe: the solver's worker threads record
    their own blocks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self.clear()

    def clear(self) -> None:
        """Forget the last solve."""
        with self._lock:
            self._block_of: dict[Any, int] = {}
            self._records: dict[int, dict[str, list[np.ndarray]]] = {}
            self.n_tasks = 0

    # ------------------------------------------------------ called from the tapped solver
    def _seeds(self, seeds: Sequence, n_tasks: int) -> None:
        with self._lock:
            self._block_of = {tuple(s.spawn_key): k for k, s in enumerate(seeds)}
            self._records = {}
            self.n_tasks = int(n_tasks)

    def _enter(self, seed) -> None:
        self._local.block = self._block_of[tuple(seed.spawn_key)]

    def _leave(self) -> None:
        self._local.block = None

    def _record(self, name: str, value: np.ndarray) -> None:
        k = getattr(self._local, "block", None)
        if k is None:
            raise RuntimeError("a tapped release outside a noise block")
        with self._lock:
            self._records.setdefault(k, {}).setdefault(name, []).append(np.array(value, dtype=np.float64))

    # ------------------------------------------------------ results
    def released(self, block_tasks: Callable[[int, int, int], tuple[int, int]]) -> dict[str, np.ndarray]:
        """Per-task arrays of the last solve (``block_tasks`` = the solver's ``block_tasks``)."""
        m = self.n_tasks
        out: dict[str, np.ndarray] = {}
        for k, rec in sorted(self._records.items()):
            t0, t1 = block_tasks(k, k + 1, m)
            for name, parts in rec.items():
                if name in ("theta", "gradient"):  # one record per GD step
                    value = np.stack(parts)
                    if name not in out:
                        out[name] = np.zeros((value.shape[0], m, *value.shape[2:]))
                    out[name][:, t0:t1] = value
                else:  # SSP: consecutive slices of the block
                    value = np.concatenate(parts)
                    if name not in out:
                        out[name] = np.zeros((m, *value.shape[1:]))
                    out[name][t0:t1] = value
        if set(self._records) != set(self._block_of.values()):
            raise RuntimeError("the tap did not see every noise block of the last solve")
        return out


def tap_solver(solver: Any) -> tuple[Any, SolverTap]:
    """``(tapped, tap)``: a copy of ``solver`` (an :class:`~privrec.solvers.SSPSolver` or a squared-loss
    :class:`~privrec.solvers.NoisyGDSolver`) whose ``solve`` runs the same code -- same noise, same
    result -- and records the noisy statistics it releases in ``tap`` (:class:`SolverTap`).

    White-box instrumentation for audits: the copy is an instance of a subclass that wraps the
    per-block release (``release_block``) and the step after the noise (SSP: the solve of the noisy
    systems; noisy GD: each noisy step). ``tapped.with_noise_multiplier(z)`` stays tapped.
    """
    from ...solvers import NoisyGDSolver, SSPSolver

    tap = SolverTap()
    cls = type(solver)
    if issubclass(cls, SSPSolver):

        class TappedSSP(cls):  # type: ignore[valid-type,misc]
            @staticmethod
            def noise_seeds(rng, n_tasks):
                seeds = cls.noise_seeds(rng, n_tasks)
                tap._seeds(seeds, n_tasks)
                return seeds

            def release_block(self, G, b, reg, gram, seed, **kwargs):
                tap._enter(seed)
                try:
                    return super().release_block(G, b, reg, gram, seed, **kwargs)
                finally:
                    tap._leave()

            @staticmethod
            def _solve_systems(G, b, reg, gram, floor, out, edge=0.0):
                tap._record("gramian", G)
                tap._record("rhs", b)
                return cls._solve_systems(G, b, reg, gram, floor, out, edge)

        tapped_cls: type = TappedSSP
    elif issubclass(cls, NoisyGDSolver):
        if solver.loss is not None:
            raise ValueError("tap_solver supports noisy GD with the squared loss (loss=None) only")

        class TappedGD(cls):  # type: ignore[valid-type,misc]
            @staticmethod
            def noise_seeds(rng, n_tasks):
                seeds = cls.noise_seeds(rng, n_tasks)
                tap._seeds(seeds, n_tasks)
                return seeds

            def release_block(self, G, b, reg, gram, seed, theta0, steps):
                tap._enter(seed)
                try:
                    return super().release_block(G, b, reg, gram, seed, theta0, steps)
                finally:
                    tap._leave()

            def _noisy_step(self, theta: np.ndarray, g: np.ndarray, std: float, stream, r, gram, step) -> np.ndarray:
                start = np.array(theta, copy=True)
                out = super()._noisy_step(theta, g, std, stream, r, gram, step)
                noisy = g.astype(np.float64) - np.asarray(r, dtype=np.float64) * start  # g += noise, ridge, gravity
                if gram is not None:
                    noisy -= start.astype(np.float64) @ np.asarray(gram, dtype=np.float64)
                tap._record("theta", start)
                tap._record("gradient", noisy)
                return out

        tapped_cls = TappedGD
    else:
        raise TypeError(f"tap_solver supports SSPSolver and NoisyGDSolver, got {cls.__name__}")
    tapped_cls.__name__ = tapped_cls.__qualname__ = f"Tapped{cls.__name__}"
    tapped = tapped_cls(**{f.name: getattr(solver, f.name) for f in fields(solver) if f.init})
    return tapped, tap


def worst_case_gd_init(design: CanaryDesign, radius: float) -> np.ndarray:
    """Initial iterate (m, d) that maximises a one-example canary's first noisy-GD gradient: on each
    canary task theta = -radius * b_c / ||b_c|| (b_c the canary's right-hand side w y x), so that
    <theta, x> = -radius ||x|| sign(y) and the per-example gradient w (<theta, x> - y) x reaches
    w ||x|| (radius ||x|| + |y|), the solver's bound; zero elsewhere. The initial iterate is a public
    input (in DP-ALS, the previously released item factors), so any value is allowed."""
    b = design.delta_rhs
    nrm = np.linalg.norm(b, axis=1, keepdims=True)
    return np.where(nrm > 0, -float(radius) * b / np.where(nrm > 0, nrm, 1.0), 0.0)


@dataclass(frozen=True)
class SolverAudit:
    """Outcome of :func:`audit_solver_release`.

    ``result`` the :class:`AuditResult` over all canary trials (``eps_claimed`` = the claimed
    solver's epsilon of the audited releases); ``releases`` their ledger labels; ``mu_claimed``
    the GDP mu of those events (:func:`gaussian_mu`), ``mu_canary`` the mean separation of the
    canaries' standardised scores under the claimed noise (``mu_canary / mu_claimed`` = 1: the
    canaries reach the declared sensitivity); ``separation`` the measured d' of the scores
    (:func:`separation`; about ``mu_canary`` when the noise is as claimed, larger when the
    mechanism adds less); ``n_canaries`` per solve, ``solves``, ``epsilon_accountant``.
    """

    result: AuditResult
    releases: tuple[str, ...]
    mu_claimed: float
    mu_canary: float
    separation: float
    n_canaries: int
    solves: int
    epsilon_accountant: str
    scores_without: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    scores_with: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def eps_lower(self) -> float:
        return self.result.eps_lower

    @property
    def eps_claimed(self) -> float:
        return self.result.eps_claimed

    @property
    def detected(self) -> bool:
        return self.result.detected

    def to_dict(self) -> dict:
        """JSON-ready summary (without the score arrays)."""
        return {
            **self.result.to_dict(),
            "releases": list(self.releases),
            "mu_claimed": self.mu_claimed,
            "mu_canary": self.mu_canary,
            "separation": self.separation,
            "n_canaries": self.n_canaries,
            "solves": self.solves,
            "epsilon_accountant": self.epsilon_accountant,
        }


_AUDITED = {"SSPSolver": ("SSP local Gramians", "SSP right-hand sides"), "NoisyGDSolver": ("noisy GD gradients",)}


def _solver_kind(solver) -> str:
    from ...solvers import NoisyGDSolver, SSPSolver

    if isinstance(solver, SSPSolver):
        return "SSPSolver"
    if isinstance(solver, NoisyGDSolver):
        return "NoisyGDSolver"
    raise TypeError(f"audit_solver_release supports SSPSolver and NoisyGDSolver, got {type(solver).__name__}")


def _canary_scores(kind: str, released: dict, design: CanaryDesign, claimed) -> tuple[np.ndarray, np.ndarray]:
    """(likelihood-ratio score, mu^2) per canary of one solve, in units of the claimed noise."""
    own = design.task_canary >= 0
    if kind == "SSPSolver":
        std = claimed.noise_stds()
        sg, sb = float(std["gramian"]), float(std["rhs"])
        iu = np.triu_indices(design.delta_gramian.shape[-1])
        dG = design.delta_gramian[own][:, iu[0], iu[1]]  # the iid coordinates of symmetric noise
        rG = (released["gramian"][own] - design.base_gramian[own])[:, iu[0], iu[1]]
        db = design.delta_rhs[own]
        rb = released["rhs"][own] - design.base_rhs[own]
        score = (dG * rG).sum(axis=1) / sg**2 + (db * rb).sum(axis=1) / sb**2
        mu2 = (dG * dG).sum(axis=1) / sg**2 + (db * db).sum(axis=1) / sb**2
    else:
        s = float(claimed.noise_std())
        theta = released["theta"][:, own]  # (T, k, d)
        G0, b0 = design.base_gramian[own], design.base_rhs[own]
        dG, db = design.delta_gramian[own], design.delta_rhs[own]
        base = np.einsum("kij,tkj->tki", G0, theta) - b0  # exact gradient without the canary
        contrib = np.einsum("kij,tkj->tki", dG, theta) - db  # the canary's gradient at the same iterate
        resid = released["gradient"][:, own] - base
        score = (contrib * resid).sum(axis=(0, 2)) / s**2
        mu2 = (contrib * contrib).sum(axis=(0, 2)) / s**2
    who = design.task_canary[own]
    n = design.canaries.size
    return np.bincount(who, weights=score, minlength=n), np.bincount(who, weights=mu2, minlength=n)


def audit_solver_release(
    solver,
    batch,
    canaries,
    delta: float,
    *,
    claimed=None,
    solves: int = 1,
    confidence: float = 0.95,
    include_probability: float = 0.5,
    accountant: str = "pld",
    rng=None,
    power_simulations: int = 400,
    progress: Callable | None = None,
) -> SolverAudit:
    """White-box audit of one solver release with many canaries (see :mod:`privrec.privacy.audit`).

    ``solver``: the mechanism to audit (an SSP or squared-loss noisy-GD solver, e.g. the item-step
    solver of a DP-ALS fit); ``claimed``: the solver whose ledger events are the claim (default
    ``solver``; pass the correctly calibrated one to audit a deliberately under-noised copy).
    ``batch``: a :class:`~privrec.solvers.TaskBatch` holding every canary; ``canaries``: unit ids,
    each the only canary in its tasks, or their :class:`CanaryDesign` (:func:`canary_design` with
    the claimed solver's clip bounds; pass it to reuse it over several audits of one batch). For each of ``solves`` solves every canary is kept with probability
    ``include_probability`` (coins from ``rng``; ``None`` = OS entropy), the others are removed
    (:func:`remove_units`), the tapped solver (:func:`tap_solver`) solves with noise from OS entropy,
    and each canary's score is its likelihood-ratio statistic under the claimed noise. Absent
    canaries' scores are the "without" sample, present ones the "with" sample; the split test with
    orientation +1 (the canary raises its score by construction) gives ``eps_lower``, compared with
    the claimed solver's epsilon of the audited releases at ``delta`` (``accountant``). Returns a
    :class:`SolverAudit`.
    """
    claimed = solver if claimed is None else claimed
    kind = _solver_kind(solver)
    if _solver_kind(claimed) != kind:
        raise ValueError("solver and claimed must be the same kind of solver")
    p = float(include_probability)
    if not (0.0 < p < 1.0):
        raise ValueError(f"include_probability must be in (0, 1), got {include_probability!r}")
    solves = int(solves)
    if solves < 1:
        raise ValueError("solves must be >= 1")
    labels = _AUDITED[kind]
    events = [ev for label, ev, _ in claimed.labelled_events() if label in labels]
    if len(events) != len(labels) or math.isinf(gaussian_mu(compose(events))):
        raise ValueError("the claimed solver must add noise to every audited release (noise_multiplier > 0)")
    eps_claimed = epsilon_of_event(compose(events), delta, accountant)
    design = (
        canaries
        if isinstance(canaries, CanaryDesign)
        else canary_design(batch, canaries, claimed.max_norm, claimed.label_bound)
    )
    tapped, tap = tap_solver(solver)
    coins = make_rng(rng)
    absent, present, strength = [], [], []
    for s in range(solves):
        keep = coins.random(design.canaries.size) < p
        tapped.solve(remove_units(batch, design.canaries[~keep]), rng=None)
        score, mu2 = _canary_scores(kind, tap.released(tapped.block_tasks), design, claimed)
        tap.clear()
        mu = np.sqrt(mu2)
        z = np.divide(score, mu, out=np.zeros_like(score), where=mu > 0)
        absent.append(z[~keep])
        present.append(z[keep])
        strength.append(mu[keep])
        if progress is not None:
            progress(s + 1, solves)
    s0, s1 = np.concatenate(absent), np.concatenate(present)
    res = audit_scores(
        s0,
        s1,
        delta,
        confidence,
        orientation=1,
        epsilon_claimed=eps_claimed,
        power_simulations=power_simulations,
    )
    return SolverAudit(
        result=res,
        releases=labels,
        mu_claimed=gaussian_mu(compose(events)),
        mu_canary=float(np.mean(np.concatenate(strength))) if s1.size else math.nan,
        separation=separation(s0, s1),
        n_canaries=int(design.canaries.size),
        solves=solves,
        epsilon_accountant=accountant,
        scores_without=s0,
        scores_with=s1,
    )
