"""Task-weighted sufficient statistics perturbation: Algorithm 1 of Krichene et al. (ICML 2023), Sec. 3.

Per task i (features clipped to ``max_norm`` = Gamma_x, labels to ``label_bound`` = B):

    A_i = PSD( sum_e w_e x_e x_e^T + std_G * Xi_i ) + alpha_0 * PSD(G_glob + std_0 * Xi_0) + reg_i I
    b_i = sum_e w_e y_e x_e + std_b * xi_i,          theta_i = pinv(A_i) b_i

Sensitivities under removal of one unit u with spend s_u = sum_{e of u} w_e^2 <= beta:
the stacked Gramians change by sqrt(s_u) Gamma_x^2 in Frobenius norm, the stacked RHS by
sqrt(s_u) Gamma_x B, and the global Gramian by Gamma_x^2. Each release is a Gaussian mechanism:
std_G = z_G sqrt(beta) Gamma_x^2, std_b = z_b sqrt(beta) Gamma_x B, std_0 = z_0 Gamma_x^2, with
multipliers z_b = ``noise_multiplier``, z_G = ``gramian_ratio`` * z_b, z_0 = ``global_ratio`` * z_b
(the reference's fixed sigma ratios, Krichene et al. 2023, App. D). Thm 3.3's (alpha, alpha beta)-RDP is the
special case z_G = z_b = 1/sqrt(beta).

Cost (issue 16): the Gramians are accumulated in GEMM blocks (a heavy task is split over several
blocks of at most 4096 gathered, sqrt(w)-scaled rows; light tasks are grouped by size into
zero-padded batched products), per chunk of tasks, over a thread pool with single-threaded BLAS
(:func:`~privrec.solvers._linalg.chunk_statistics`). The PSD projection needs an
eigendecomposition only where ``G + noise - eig_floor I`` is not positive definite (a Cholesky test
per task decides; where it is, the projection is the identity and a plain Cholesky solve is used).
Without the global Gramian the projected solve V diag(1 / (max(lam, floor) + reg)) V^T b reuses one
tridiagonal reduction and never forms V (:func:`~privrec.solvers._linalg.projected_ridge_solve`).
``projection="shift"`` (issue 29) replaces that eigendecomposition by an eigenvalue shift: a noisy
Gramian that is not positive definite is solved as ``G + noise + (edge + floor + reg_i) I`` with
``edge`` = :func:`~privrec.solvers._linalg.noise_edge` (a high-probability bound on the noise's
spectral norm, so the matrix is positive definite and one Cholesky solve does), AdaSSP's shift
(Wang 2018, Alg. 2) with the exact Gramian's smallest eigenvalue bounded below by 0. Any function of
the released statistics is post-processing: the events and the guarantee are the same.
These per-task LAPACK calls release the GIL (ctypes on scipy's LAPACK), so the worker threads run
them in parallel; the solves work on batches of at most 256 systems (bounded copies). The
symmetric noise is added in place with the same draws as
:func:`privrec.privacy.symmetric_gaussian_noise`, from one stream per chunk of tasks: the chunks
depend only on ``chunk_tasks`` / ``chunk_examples``, and within a chunk the Gramian noise is drawn
before the RHS noise, task by task, exactly as before, so a fixed seed gives the same noise.
Labels are clipped block by block (no clipped copy of every label).

Deviations (safe values, documented):
* the RHS noise scales with Gamma_x * B; the reference scales it with Gamma_x only, which is
  valid only for |label| <= 1 (Krichene et al. 2023, Alg. 1 puts Gamma_x^2 Gamma_* with labels clipped to
  Gamma_x Gamma_*: the same thing with B = Gamma_x Gamma_*);
* the ridge term is added *after* the noise as ``reg_i I`` with ``reg_i`` public (a constant or
  derived from released counts). Algorithm 1 writes sum_e w_e (x x^T + lambda I), which makes the
  regulariser depend on the private task sizes and is not covered by the Gramian sensitivity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validation import check_positive
from ..privacy import gaussian_event, make_rng
from ..privacy.mechanisms import add_symmetric_gaussian_noise, gaussian_noise
from ._base import NoisySolverBase
from ._linalg import (
    SHIFT_SOLVE_COST_IN_EXAMPLES,
    SOLVE_COST_IN_EXAMPLES,
    as_task_array,
    chunk_costs,
    chunk_statistics,
    global_gramian,
    map_chunks,
    noise_edge,
    positive_definite_mask,
    prepared_inputs,
    projected_ridge_solve,
    projected_solve,
    shifted_solve,
    spd_solve,
)
from .batch import SolverResult, TaskBatch

# systems solved together after the noise is added (bounds the copies made by the solves)
_SOLVE_BATCH = 256
#: ways to make a noisy Gramian positive definite (see ``SSPSolver.projection``)
PROJECTIONS = ("eigen", "shift")


@dataclass(frozen=True)
class SSPSolver(NoisySolverBase):
    """Weighted SSP (Algorithm 1). See the module docstring for the mechanism and its accounting.

    Parameters: ``noise_multiplier`` z (0 = no noise, reported as non-private), ``budget`` beta
    (declared; the batch's max per-unit spend is checked against it), ``max_norm`` Gamma_x,
    ``label_bound`` B, ``reg`` (scalar or per-task, public), ``unobserved_weight`` alpha_0,
    ``gramian_ratio`` / ``global_ratio`` (multipliers relative to z), ``eig_floor`` (PSD
    projection floor), ``dtype`` (float32 default), chunk sizes (memory bound), ``num_threads`` (threads
    over task chunks; None = all cores, BLAS single-threaded inside). Noise comes
    from ``rng`` in :meth:`solve`: ``None`` = OS entropy; a known seed voids the guarantee.
    """

    gramian_ratio: float = 1.0
    eig_floor: float = 0.0
    #: also return the diagonal of every released noisy Gramian (after the noise, before the PSD
    #: projection) as ``info["noisy_gramian_diagonal"]`` and the noisy right-hand sides as
    #: ``info["noisy_rhs"]`` (both tasks x d): post-processing of the release, e.g. DPALS's
    #: exposure term and the empirical-Bayes item biases of the bias model
    keep_diagonal: bool = False
    #: how a noisy Gramian that is not positive definite is made so (post-processing of the
    #: release, no effect on the guarantee): ``"eigen"`` projects it onto the PSD cone (Krichene et al. 2023,
    #: §2, one eigendecomposition each); ``"shift"`` raises all its eigenvalues by the
    #: noise's spectral edge (:func:`~privrec.solvers._linalg.noise_edge`; AdaSSP's
    #: eigenvalue shift, Wang 2018): one Cholesky solve, about a tenth of the projection's cost
    projection: str = "eigen"

    def __post_init__(self):
        super().__post_init__()
        check_positive(self.gramian_ratio, "gramian_ratio")
        check_positive(self.eig_floor, "eig_floor", allow_zero=True)
        if self.projection not in PROJECTIONS:
            raise ValueError(f"projection must be one of {PROJECTIONS}, got {self.projection!r}")

    # -------------------------------------------------------------- accounting

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

    # -------------------------------------------------------------- solve
    def solve(self, batch: TaskBatch, rng=None) -> SolverResult:
        """Statistics -> one noisy release per public block of tasks -> projected ridge solves.

        Stages (also run one by one by the distributed backend, which sums each block's
        statistics over user partitions first): :meth:`noise_seeds` (per-block random streams,
        fixed by the number of tasks alone), :func:`~privrec.solvers._linalg.chunk_statistics`
        (exact per-task sums), :meth:`release_block` (noise from the block's own stream, then the
        solves). Computation chunks are unions of whole noise blocks, so how the statistics are
        computed never changes the noise.
        """
        dtype = np.dtype(self.dtype)
        m, d = batch.n_tasks, batch.dim
        beta = batch.check_budget(self.budget)
        rng = make_rng(rng)
        events = self.labelled_events()
        reg = as_task_array(self.reg, m, "reg", dtype)
        # features clipped once (units x d); labels are clipped block by block inside
        # chunk_statistics (same values, no clipped copy of every label)
        x, _ = prepared_inputs(batch, self.max_norm, None, dtype, labels=False)
        gram = self.release_global_gramian(global_gramian(x), rng) if self.unobserved_weight > 0 else None
        seeds = self.noise_seeds(rng, m)
        chunks = self.block_chunks(batch.indptr)  # consecutive whole noise blocks

        def solve_chunk(c, bounds):
            b0, b1 = bounds
            t0, t1 = self.block_tasks(b0, b1, m)
            G, b = chunk_statistics(batch, x, batch.labels, t0, t1, label_bound=self.label_bound)
            out = np.empty((t1 - t0, d), dtype=dtype)
            diag = np.empty((t1 - t0, d), dtype=np.float64) if self.keep_diagonal else None
            rhs = np.empty((t1 - t0, d), dtype=np.float64) if self.keep_diagonal else None
            n_bad = 0
            for k in range(b0, b1):
                s0, s1 = (t - t0 for t in self.block_tasks(k, k + 1, m))
                extra = {} if diag is None else {"diagonal_out": diag[s0:s1], "rhs_out": rhs[s0:s1]}
                out[s0:s1], bad = self.release_block(
                    G[s0:s1], b[s0:s1], reg[t0 + s0 : t0 + s1], gram, seeds[k], **extra
                )
                n_bad += bad
            return out, n_bad, diag, rhs

        per_solve = SHIFT_SOLVE_COST_IN_EXAMPLES if self.projection == "shift" else SOLVE_COST_IN_EXAMPLES
        costs = chunk_costs(batch.indptr, [self.block_tasks(b0, b1, m) for b0, b1 in chunks], per_solve)
        results = map_chunks(solve_chunk, chunks, self.num_threads, costs)
        params = np.concatenate([r[0] for r in results]) if results else np.zeros((0, d), dtype=dtype)
        n_projected = sum(r[1] for r in results)
        info = {"solver": "ssp", "unit_budget": beta, "projected_tasks": n_projected}
        if self.keep_diagonal:
            for key, j in (("noisy_gramian_diagonal", 2), ("noisy_rhs", 3)):
                info[key] = np.concatenate([r[j] for r in results]) if results else np.zeros((0, d), dtype=np.float64)
        return SolverResult(params, events, info)

    # -------------------------------------------------------------- stages (local and distributed)
    def release_block(
        self,
        G: np.ndarray,
        b: np.ndarray,
        reg: np.ndarray,
        gram,
        seed,
        diagonal_out: np.ndarray | None = None,
        rhs_out: np.ndarray | None = None,
    ) -> tuple[np.ndarray, int]:
        """Noisy release and solve of one public block of tasks: ``(params, n_projected)``.

        ``G`` (k, d, d), ``b`` (k, d): the block's exact statistics (``G`` is overwritten); noise
        drawn from ``seed``'s stream -- the Gramian noise of the block's tasks in order, then the
        right-hand-side noise. ``diagonal_out`` (k, d), if given, receives the diagonals of the
        noisy Gramians and ``rhs_out`` (k, d) the noisy right-hand sides (released values: no
        extra noise, no extra event).
        """
        dtype = np.dtype(self.dtype)
        std = self.noise_stds()
        G = np.asarray(G, dtype=dtype)
        b = np.array(b, dtype=dtype, copy=True)
        stream = np.random.default_rng(seed)
        if std["gramian"] > 0:  # = G += symmetric_gaussian_noise(...): same draws, no noise stack
            add_symmetric_gaussian_noise(G, std["gramian"], stream)
        if std["rhs"] > 0:
            b += gaussian_noise(b.shape, std["rhs"], stream, dtype)
        if diagonal_out is not None:
            diagonal_out[...] = np.diagonal(G, axis1=1, axis2=2)
        if rhs_out is not None:
            rhs_out[...] = b
        out = np.empty(b.shape, dtype=dtype)
        floor = dtype.type(self.eig_floor)
        # the shift's bracket: the spectral edge of the symmetric noise (no noise: exact projection)
        edge = noise_edge(std["gramian"], G.shape[-1]) if self.projection == "shift" else 0.0
        n_bad = 0
        for s0 in range(0, len(b), _SOLVE_BATCH):  # bounded temporaries: copies of <= 256 systems
            s1 = min(s0 + _SOLVE_BATCH, len(b))
            n_bad += self._solve_systems(G[s0:s1], b[s0:s1], reg[s0:s1], gram, floor, out[s0:s1], edge)
        return out, n_bad

    @staticmethod
    def _solve_systems(G, b, reg, gram, floor, out, edge: float = 0.0) -> int:
        """out_i = pinv(PSD_floor(G_i) + gram + reg_i I) b_i for a batch of noisy statistics (or, with
        ``edge`` > 0, the eigenvalue-shifted system of :func:`shifted_solve`); returns the number of
        systems that needed the projection or shift. G is used as workspace."""
        d = G.shape[-1]
        diag = np.arange(d)
        # fast path: PSD projection is the identity where G - floor I is positive definite
        ok = positive_definite_mask(G, floor)
        bad = np.flatnonzero(~ok)
        good = np.flatnonzero(ok)
        if good.size:
            A = G[good]
            A[:, diag, diag] += reg[good, None]
            if gram is not None:
                A += gram
            out[good] = spd_solve(A, b[good])
            del A
        if bad.size and edge > 0:  # eigenvalue shift by the noise edge: one Cholesky solve each
            out[bad] = shifted_solve(G[bad], b[bad], reg[bad], edge, gram, floor)[0]
        elif bad.size:
            if gram is None:  # V diag(1 / (max(lam, floor) + reg)) V^T b without forming V
                out[bad] = projected_ridge_solve(G[bad], b[bad], reg[bad], floor, overwrite_g=True)
            else:  # (PSD(G) + gram + reg I)^-1 b, PSD(G) = G + rank-k correction of the k negative eigenpairs
                out[bad] = projected_solve(G[bad], b[bad], reg[bad], gram, floor)
        return int(bad.size)
