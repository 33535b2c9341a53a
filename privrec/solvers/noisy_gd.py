"""Task-weighted noisy full-batch gradient descent: Algorithm 2 of Krichene et al. (ICML 2023), Sec. 3.2.

Loss per example: 0.5 (<theta, x_e> - y_e)^2 with features clipped to ``max_norm`` (Gamma_x),
labels to ``label_bound`` (B) and every iterate projected onto the ball of radius ``radius`` (R),
so each per-example gradient (<theta,x>-y) x is bounded in norm by Gamma = Gamma_x (R Gamma_x + B)
*by construction* (no per-example clipping pass is needed). For task i and step t = 1..T:

    g_i = sum_e w_e (<theta_i, x_e> - y_e) x_e = G_i theta_i - b_i        (exact, from the statistics)
    theta_i <- Proj_R[ theta_i - eta_i^t (g_i + N(0, std^2 I) + reg_i theta_i + alpha_0 G_glob~ theta_i) ]

Removing a unit with spend s_u <= beta changes the stacked gradients by at most sqrt(beta) Gamma,
so each step is a Gaussian mechanism with multiplier z = ``noise_multiplier``
(std = z sqrt(beta) Gamma); T steps compose as ``SelfComposed(Gaussian(z), T)``. The paper's
noise Gamma sqrt(T/2) (Thm 3.11, (alpha, alpha beta)-RDP) is z = sqrt(T / (2 beta))
(:meth:`NoisyGDSolver.paper_noise_multiplier`). The ridge and gravity terms use only public
values (``reg``) or the separately released noisy global Gramian, so they are post-processing.

Step sizes (Thm 3.12 proofs, Lemmas A.2/A.3), from *public* task sizes n_i and weights omega_i:
* ``"convex"``: eta_i^t = 2R / (sqrt(Gamma^2 omega_i^2 n_i^2 + d std^2) sqrt(t)) (with the
  paper's std this is ||C|| / (Gamma sqrt(omega_i^2 n_i^2 + T d / 2) sqrt(t)));
* ``"strongly_convex"``: eta_i^t = 1 / (mu_i t) with mu_i = omega_i n_i lambda + reg_i, lambda =
  ``strong_convexity``. The proof of Thm 3.12 (App. A.4) applies Lemma A.3 with omega_i n_i lambda;
  the omega_i^2 n_i in the statement of Thm 3.12(b) disagrees with that proof, and we follow the proof;
* a float (constant step) or a callable ``t -> step`` (scalar or (m,) array) override.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np
import scipy.sparse as sp

from .._validation import check_int, check_positive
from ..privacy import gaussian_event, make_rng
from ..privacy.clipping import project_ball
from ..privacy.mechanisms import gaussian_noise
from ._base import NoisySolverBase
from ._linalg import (
    as_task_array,
    chunk_statistics,
    global_gramian,
    map_chunks,
    prepared_inputs,
)
from .batch import SolverResult, TaskBatch


def suggested_iterations(task_sizes, task_weights, dim: int, kind: str = "strongly_convex") -> int:
    """T from Thm 3.12: convex (2/d) sum n_i^2 / sum 1/omega_i^2; strongly convex
    (2/d) sum n_i / sum 1/(omega_i^2 n_i). Inputs must be public (e.g. noisy counts)."""
    n = np.asarray(task_sizes, dtype=np.float64)
    w = np.asarray(task_weights, dtype=np.float64) * np.ones_like(n)
    if np.any(n <= 0) or np.any(w <= 0):
        raise ValueError("task_sizes and task_weights must be > 0")
    d = check_int(dim, "dim", minimum=1)
    if kind == "convex":
        t = 2.0 / d * np.sum(n**2) / np.sum(1.0 / w**2)
    elif kind == "strongly_convex":
        t = 2.0 / d * np.sum(n) / np.sum(1.0 / (w**2 * n))
    else:
        raise ValueError(f"kind must be 'convex' or 'strongly_convex', got {kind!r}")
    return max(1, int(math.ceil(t)))


@dataclass(frozen=True)
class NoisyGDSolver(NoisySolverBase):
    """Weighted noisy full-batch GD (Algorithm 2). See the module docstring.

    Parameters: ``noise_multiplier`` z per step (0 = no noise, non-private event), ``iterations``
    T, ``budget`` beta, ``max_norm`` Gamma_x, ``label_bound`` B, ``radius`` R of the constraint
    ball, ``reg`` (public ridge, scalar or per-task), ``unobserved_weight`` alpha_0 with its noisy
    global Gramian (multiplier ``global_ratio`` * z), ``schedule``, ``strong_convexity`` lambda,
    ``init`` (public (m, d) warm start, e.g. previously released parameters; default zeros),
    ``loss`` (``None`` = the squared loss above, run on the task statistics; otherwise a margin
    loss of :mod:`privrec.convex.losses`, e.g. ``LogisticLoss()``, whose per-example gradient
    ``loss.derivative(<theta, x>, y) x`` is bounded by ``loss.lipschitz(Gamma_x, R, B)``: the
    gradient is then summed per example at every step; same mechanism and accounting).
    Noise comes from ``rng`` in :meth:`solve`: ``None`` = OS entropy; a known seed voids the guarantee.
    """

    iterations: int = 10
    radius: float = 1.0
    loss: Any = None
    schedule: str | float | Callable = "strongly_convex"
    strong_convexity: float = 0.0
    init: np.ndarray | None = None

    def __post_init__(self):
        super().__post_init__()
        check_int(self.iterations, "iterations", minimum=1)
        check_positive(self.radius, "radius")
        check_positive(self.strong_convexity, "strong_convexity", allow_zero=True)
        if isinstance(self.schedule, str):
            if self.schedule not in ("convex", "strongly_convex"):
                raise ValueError(
                    f"schedule must be 'convex', 'strongly_convex', a float or a callable, got {self.schedule!r}"
                )
        elif not callable(self.schedule):
            check_positive(self.schedule, "schedule (constant step size)")

    # -------------------------------------------------------------- accounting
    @staticmethod
    def paper_noise_multiplier(iterations: int, budget: float) -> float:
        """z giving the paper's per-step noise Gamma sqrt(T/2) at budget beta: sqrt(T / (2 beta))."""
        return math.sqrt(check_int(iterations, "iterations", minimum=1) / (2.0 * check_positive(budget, "budget")))

    @property
    def gradient_bound(self) -> float:
        """Gamma: bound on every per-example gradient norm; Gamma_x (R Gamma_x + B) for the squared loss,
        ``loss.lipschitz(Gamma_x, R, B)`` otherwise."""
        if self.loss is not None:
            return float(self.loss.lipschitz(float(self.max_norm), float(self.radius), float(self.label_bound)))
        return float(self.max_norm) * (float(self.radius) * float(self.max_norm) + float(self.label_bound))

    def noise_std(self) -> float:
        z = float(self.noise_multiplier)
        if z == 0 or self.budget is None:  # a private solver always has a budget (__post_init__)
            return 0.0
        return z * math.sqrt(self.budget) * self.gradient_bound

    def labelled_events(self) -> list:
        z = float(self.noise_multiplier)
        T = int(self.iterations)
        out = []
        if self.unobserved_weight > 0:
            z0 = z * self.global_ratio
            g2 = float(self.max_norm) ** 2
            out.append(
                (
                    "noisy GD global Gramian",
                    gaussian_event(z0),
                    {
                        "mechanism": "gaussian",
                        "noise_multiplier": z0,
                        "sensitivity": g2,
                        "noise_std": z0 * g2,
                        "symmetric": True,
                    },
                )
            )
        step = gaussian_event(z)
        ev = (
            step
            if T == 1 or not isinstance(step, dp_accounting.GaussianDpEvent)
            else dp_accounting.SelfComposedDpEvent(step, T)
        )
        meta = {
            "mechanism": "gaussian",
            "noise_multiplier": z,
            "steps": T,
            "noise_std": self.noise_std(),
            "gradient_bound": self.gradient_bound,
            "budget": self.budget,
        }
        if self.budget is not None:
            meta["sensitivity"] = math.sqrt(self.budget) * self.gradient_bound
        out.append(("noisy GD gradients", ev, meta))
        return out

    # -------------------------------------------------------------- schedule
    def _public_task_info(self, batch: TaskBatch, noisy: bool):
        sizes, weights = batch.task_sizes, batch.task_weights
        if sizes is None or weights is None:
            if noisy:
                raise ValueError(
                    f"schedule {self.schedule!r} needs public task_sizes and task_weights on the TaskBatch "
                    "(e.g. released noisy counts); the exact ones are private"
                )
            n = batch.sizes.astype(np.float64)
            wsum = np.bincount(batch.task_ids(), weights=batch.weights.astype(np.float64), minlength=batch.n_tasks)
            sizes = n if sizes is None else sizes
            weights = np.divide(wsum, n, out=np.zeros_like(wsum), where=n > 0) if weights is None else weights
        return sizes, weights

    def _steps(self, batch: TaskBatch, reg: np.ndarray, std: float):
        """Function t -> (m,) step sizes."""
        sched = self.schedule
        m = batch.n_tasks
        if callable(sched):
            return lambda t: np.broadcast_to(np.asarray(sched(t), dtype=np.float64), (m,))
        if not isinstance(sched, str):
            c = float(sched)
            return lambda t: np.full(m, c)
        sizes, weights = self._public_task_info(batch, std > 0)
        big = 1e12
        if sched == "convex":
            gi = np.sqrt((self.gradient_bound * weights * sizes) ** 2 + batch.dim * std**2)
            base = np.divide(2.0 * self.radius, gi, out=np.full(m, big), where=gi > 0)
            return lambda t: base / math.sqrt(t)
        mu = weights * sizes * self.strong_convexity + reg.astype(np.float64)
        if self.unobserved_weight > 0 and np.any(mu <= 0):
            raise ValueError("strongly_convex schedule needs reg > 0 or strong_convexity > 0 for every task")
        inv = np.divide(1.0, mu, out=np.full(m, big), where=mu > 0)
        return lambda t: inv / t

    # -------------------------------------------------------------- solve
    def solve(self, batch: TaskBatch, rng=None) -> SolverResult:
        dtype = np.dtype(self.dtype)
        m, d = batch.n_tasks, batch.dim
        beta = batch.check_budget(self.budget)
        rng = make_rng(rng)
        events = self.labelled_events()
        std = self.noise_std()
        reg = as_task_array(self.reg, m, "reg", dtype)
        steps = self._steps(batch, reg, std)
        x, y = prepared_inputs(batch, self.max_norm, self.label_bound, dtype)
        gram = self.release_global_gramian(global_gramian(x), rng) if self.unobserved_weight > 0 else None
        if self.init is None:
            theta_all = np.zeros((m, d), dtype=dtype)
        else:
            init = np.asarray(self.init, dtype=dtype)
            if init.shape != (m, d) or not np.all(np.isfinite(init)):
                raise ValueError(f"init must be a finite array of shape ({m}, {d})")
            theta_all = project_ball(init, self.radius)
        eta = np.stack([steps(t) for t in range(1, self.iterations + 1)]).astype(dtype)  # (T, m)
        seeds = self.noise_seeds(rng, m)
        chunks = self.block_chunks(batch.indptr)  # consecutive whole noise blocks

        def run_chunk(c, bounds):
            b0, b1 = bounds
            t0, t1 = self.block_tasks(b0, b1, m)
            G = b = None
            if self.loss is None:
                G, b = chunk_statistics(batch, x, y, t0, t1)
            out = np.empty((t1 - t0, d), dtype=dtype)
            for k in range(b0, b1):
                s0, s1 = self.block_tasks(k, k + 1, m)
                theta0, steps_k = theta_all[s0:s1], eta[:, s0:s1]
                if self.loss is not None:
                    out[s0 - t0 : s1 - t0] = self._run_loss_block(
                        batch, x, y, s0, s1, theta0, reg, gram, steps_k, seeds[k]
                    )
                else:
                    assert G is not None and b is not None
                    out[s0 - t0 : s1 - t0] = self.release_block(
                        G[s0 - t0 : s1 - t0], b[s0 - t0 : s1 - t0], reg[s0:s1], gram, seeds[k], theta0, steps_k
                    )
            return out

        results = map_chunks(run_chunk, chunks, self.num_threads)
        if results:
            theta_all = np.concatenate(results)
        info = {"solver": "noisy_gd", "unit_budget": beta, "iterations": int(self.iterations)}
        return SolverResult(theta_all, events, info)

    def release_block(self, G, b, reg, gram, seed, theta0, steps) -> np.ndarray:
        """The T noisy GD steps of one public block of tasks (squared loss, from its exact statistics).

        ``G`` (k, d, d), ``b`` (k, d): the block's statistics; ``theta0`` (k, d) the public start;
        ``steps`` (T, k) the public step sizes; ``gram`` the released gravity term or ``None``. The
        noise of step t is drawn from ``seed``'s stream after that of steps 1..t-1, so a recomputed
        (retried) block releases exactly the same iterates.
        """
        dtype = np.dtype(self.dtype)
        std = self.noise_std()
        stream = np.random.default_rng(seed)
        theta = project_ball(np.asarray(theta0, dtype=dtype), self.radius)
        r = np.asarray(reg, dtype=dtype)[:, None]
        for t in range(self.iterations):
            g = np.matmul(G, theta[:, :, None])[:, :, 0] - b
            theta = self._noisy_step(theta, g, std, stream, r, gram, steps[t])
        return theta

    def _noisy_step(self, theta, g, std: float, stream, r, gram, step) -> np.ndarray:
        """One projected step from the stacked clipped data gradient ``g`` (modified in place):
        Gaussian noise N(0, std^2) on ``g`` only, then the public ridge ``r * theta`` and gravity
        ``theta @ gram`` terms, then the step ``step`` (one per task) and the projection."""
        if std > 0:
            g += gaussian_noise(g.shape, std, stream, theta.dtype)
        g += r * theta
        if gram is not None:
            g += theta @ gram
        return project_ball(theta - step[:, None] * g, self.radius, inplace=True)

    def _run_loss_block(self, batch, x, y, t0, t1, theta, reg, gram, steps, seed):
        """Noisy GD on the block of tasks t0:t1 with a general margin loss: per-example gradients
        every step, noise from the block's own stream (as :meth:`release_block`)."""
        dtype = theta.dtype
        std = self.noise_std()
        stream = np.random.default_rng(seed)
        e0, e1 = int(batch.indptr[t0]), int(batch.indptr[t1])
        task = np.repeat(np.arange(t1 - t0), np.diff(batch.indptr[t0 : t1 + 1]))
        X = x[batch.feature_ids[e0:e1]]
        S = sp.csr_matrix(
            (batch.weights[e0:e1].astype(np.float64), (task, np.arange(e1 - e0))), shape=(t1 - t0, e1 - e0)
        )
        yc = y[e0:e1]
        r = reg[t0:t1, None]
        theta = theta.copy()
        for t in range(self.iterations):
            deriv = self.loss.derivative(np.einsum("ij,ij->i", X, theta[task]), yc)
            g = np.asarray(S @ (deriv[:, None] * X), dtype=dtype)
            theta = self._noisy_step(theta, g, std, stream, r, gram, steps[t])
        return theta
