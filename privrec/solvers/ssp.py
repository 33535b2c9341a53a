"""Task-weighted sufficient statistics perturbation: Algorithm 1 of spec 004 §2.

Per task i (features clipped to ``max_norm`` = Gamma_x, labels to ``label_bound`` = B):

    A_i = PSD( sum_e w_e x_e x_e^T + std_G * Xi_i ) + alpha_0 * PSD(G_glob + std_0 * Xi_0) + reg_i I
    b_i = sum_e w_e y_e x_e + std_b * xi_i,          theta_i = pinv(A_i) b_i

Sensitivities under removal of one unit u with spend s_u = sum_{e of u} w_e^2 <= beta:
the stacked Gramians change by sqrt(s_u) Gamma_x^2 in Frobenius norm, the stacked RHS by
sqrt(s_u) Gamma_x B, and the global Gramian by Gamma_x^2. Each release is a Gaussian mechanism:
std_G = z_G sqrt(beta) Gamma_x^2, std_b = z_b sqrt(beta) Gamma_x B, std_0 = z_0 Gamma_x^2, with
multipliers z_b = ``noise_multiplier``, z_G = ``gramian_ratio`` * z_b, z_0 = ``global_ratio`` * z_b
(the reference's fixed sigma ratios, spec 004 §6). Thm 3.3's (alpha, alpha beta)-RDP is the
special case z_G = z_b = 1/sqrt(beta).

Cost: Gramians are one BLAS rank-k update per task over a gathered, sqrt(w)-scaled block (chunks of
tasks, thread pool, single-threaded BLAS); the PSD projection needs an eigendecomposition only
where ``G + noise - eig_floor I`` is not positive definite (a Cholesky test per task decides; where
it is, the projection is the identity and a plain solve is used). Without the global Gramian the
projected solve V diag(1 / (max(lam, floor) + reg)) V^T b reuses one tridiagonal reduction and never
forms V (:func:`~privrec.solvers._linalg.projected_ridge_solve`); the symmetric noise is added in
place with the same draws as :func:`privrec.privacy.symmetric_gaussian_noise`.

Deviations (safe values, documented):
* the RHS noise scales with Gamma_x * B; the reference scales it with Gamma_x only, which is
  valid only for |label| <= 1 (spec 004 §2 puts Gamma_x^2 Gamma_* with labels clipped to
  Gamma_x Gamma_*: the same thing with B = Gamma_x Gamma_*);
* the ridge term is added *after* the noise as ``reg_i I`` with ``reg_i`` public (a constant or
  derived from released counts). Algorithm 1 writes sum_e w_e (x x^T + lambda I), which makes the
  regulariser depend on the private task sizes and is not covered by the Gramian sensitivity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import dp_accounting
import numpy as np

from .._validation import check_positive
from ..privacy import gaussian_event, make_rng
from ..privacy.mechanisms import gaussian_noise
from ._linalg import (
    DEFAULT_CHUNK_EXAMPLES,
    DEFAULT_CHUNK_TASKS,
    add_symmetric_noise,
    as_task_array,
    check_execution,
    chunk_statistics,
    map_chunks,
    noisy_global_gramian,
    positive_definite_mask,
    prepared_inputs,
    projected_ridge_solve,
    spd_solve,
    task_chunks,
)
from .batch import SolverResult, TaskBatch


def _check_budget(budget, noisy: bool):
    if budget is None:
        if noisy:
            raise ValueError("a private solve needs the declared per-unit budget (budget = beta)")
        return None
    return check_positive(budget, "budget")


@dataclass(frozen=True)
class SSPSolver:
    """Weighted SSP (Algorithm 1). See the module docstring for the mechanism and its accounting.

    Parameters: ``noise_multiplier`` z (0 = no noise, reported as non-private), ``budget`` beta
    (declared; the batch's max per-unit spend is checked against it), ``max_norm`` Gamma_x,
    ``label_bound`` B, ``reg`` (scalar or per-task, public), ``unobserved_weight`` alpha_0,
    ``gramian_ratio`` / ``global_ratio`` (multipliers relative to z), ``eig_floor`` (PSD
    projection floor), ``dtype`` (float32 default), chunk sizes (memory bound), ``n_jobs`` (threads
    over task chunks; None = all cores, BLAS single-threaded inside). Noise comes
    from ``rng`` in :meth:`solve`: ``None`` = OS entropy; a known seed voids the guarantee.
    """

    noise_multiplier: float = 1.0
    budget: float | None = None
    max_norm: float = 1.0
    label_bound: float = 1.0
    reg: float | np.ndarray = 1.0
    unobserved_weight: float = 0.0
    gramian_ratio: float = 1.0
    global_ratio: float = 1.0
    eig_floor: float = 0.0
    dtype: type = np.float32
    chunk_tasks: int = DEFAULT_CHUNK_TASKS
    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES
    n_jobs: int | None = None

    def __post_init__(self):
        z = check_positive(self.noise_multiplier, "noise_multiplier", allow_zero=True)
        _check_budget(self.budget, z > 0)
        check_positive(self.max_norm, "max_norm")
        check_positive(self.label_bound, "label_bound")
        check_positive(self.unobserved_weight, "unobserved_weight", allow_zero=True)
        check_positive(self.gramian_ratio, "gramian_ratio")
        check_positive(self.global_ratio, "global_ratio")
        check_positive(self.eig_floor, "eig_floor", allow_zero=True)
        check_execution(self.chunk_tasks, self.chunk_examples, self.n_jobs)

    # -------------------------------------------------------------- accounting
    def with_noise_multiplier(self, z: float) -> "SSPSolver":
        return replace(self, noise_multiplier=z)

    def multipliers(self) -> dict[str, float]:
        z = float(self.noise_multiplier)
        out = {"gramian": z * self.gramian_ratio, "rhs": z}
        if self.unobserved_weight > 0:
            out["global"] = z * self.global_ratio
        return out

    def sensitivities(self) -> dict[str, float]:
        """Declared L2 sensitivities of the stacked releases (need ``budget``)."""
        sb = math.sqrt(self.budget) if self.budget is not None else float("nan")
        g = float(self.max_norm)
        return {"gramian": sb * g * g, "rhs": sb * g * float(self.label_bound), "global": g * g}

    def noise_stds(self) -> dict[str, float]:
        """Noise standard deviation of each release (0 when the multiplier is 0)."""
        sens = self.sensitivities()
        return {k: (z * sens[k] if z > 0 else 0.0) for k, z in self.multipliers().items()}

    def labelled_events(self) -> list:
        """[(label, DpEvent, meta)] of one solve; depends only on the configuration."""
        sens = self.sensitivities()
        stds = self.noise_stds()
        names = {"global": "global Gramian", "gramian": "local Gramians", "rhs": "right-hand sides"}
        out = []
        for key in ("global", "gramian", "rhs"):
            z = self.multipliers().get(key)
            if z is None:
                continue
            meta = {"mechanism": "gaussian", "noise_multiplier": z, "noise_std": stds[key], "symmetric": key != "rhs"}
            if math.isfinite(sens[key]):
                meta["sensitivity"] = sens[key]
            if key != "global":
                meta["budget"] = self.budget
            out.append((f"SSP {names[key]}", gaussian_event(z), meta))
        return out

    def dp_event(self) -> dp_accounting.DpEvent:
        """Composed event of one solve (use with calibration; no data needed)."""
        evs = [e for _, e, _ in self.labelled_events()]
        return evs[0] if len(evs) == 1 else dp_accounting.ComposedDpEvent(evs)

    # -------------------------------------------------------------- solve
    def solve(self, batch: TaskBatch, rng=None) -> SolverResult:
        dtype = np.dtype(self.dtype)
        m, d = batch.n_tasks, batch.dim
        beta = batch.check_budget(self.budget)
        rng = make_rng(rng)
        events = self.labelled_events()
        std = self.noise_stds()
        reg = as_task_array(self.reg, m, "reg", dtype)
        x, y = prepared_inputs(batch, self.max_norm, self.label_bound, dtype)
        gram = None
        if self.unobserved_weight > 0:
            gram = noisy_global_gramian(x, std["global"], self.unobserved_weight, rng, dtype)
        chunks = list(task_chunks(batch.indptr, self.chunk_tasks, self.chunk_examples))
        rngs = rng.spawn(len(chunks))
        floor = dtype.type(self.eig_floor)
        eye = np.eye(d, dtype=dtype)

        def solve_chunk(c, bounds):
            t0, t1 = bounds
            G, b = chunk_statistics(batch, x, y, t0, t1)
            if std["gramian"] > 0:  # = G += symmetric_gaussian_noise(...): same draws, no noise stack
                add_symmetric_noise(G, std["gramian"], rngs[c])
            if std["rhs"] > 0:
                b += gaussian_noise(b.shape, std["rhs"], rngs[c], dtype)
            out = np.empty((t1 - t0, d), dtype=dtype)
            # fast path: PSD projection is the identity where G - floor I is positive definite
            ok = positive_definite_mask(G, floor)
            bad = np.flatnonzero(~ok)
            good = np.flatnonzero(ok)
            if good.size:
                A = G[good] + reg[t0:t1][good, None, None] * eye
                if gram is not None:
                    A += gram
                out[good] = spd_solve(A, b[good])
            if bad.size:
                if gram is None:  # V diag(1 / (max(lam, floor) + reg)) V^T b without forming V
                    out[bad] = projected_ridge_solve(G[bad], b[bad], reg[t0:t1][bad], floor, overwrite_g=True)
                else:
                    lam, V = np.linalg.eigh(G[bad])
                    lam = np.maximum(lam, floor)
                    A = (V * lam[:, None, :]) @ np.swapaxes(V, -1, -2)
                    A += gram
                    A += reg[t0:t1][bad, None, None] * eye
                    out[bad] = spd_solve(A, b[bad])
            return out, int(bad.size)

        results = map_chunks(solve_chunk, chunks, self.n_jobs)
        params = np.concatenate([r[0] for r in results]) if results else np.zeros((0, d), dtype=dtype)
        n_projected = sum(r[1] for r in results)
        info = {"solver": "ssp", "unit_budget": beta, "projected_tasks": n_projected}
        return SolverResult(params, events, info)
