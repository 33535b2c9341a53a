"""Configuration and accounting shared by the noisy solvers (Krichene et al., ICML 2023, Algs. 1-2)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import dp_accounting
import numpy as np

from .._validation import check_positive
from ..privacy import add_symmetric_gaussian_noise, compose, make_rng
from ._linalg import DEFAULT_CHUNK_EXAMPLES, DEFAULT_CHUNK_TASKS, check_execution, psd_project, task_chunks

#: tasks per noise stream: task i's noise comes from the stream of block i // NOISE_BLOCK (public,
#: data-independent), whatever the compute chunks or the number of machines
NOISE_BLOCK = 256


def check_budget(budget, noisy: bool):
    """The declared per-unit budget beta: required (and > 0) for a noisy solve, optional otherwise."""
    if budget is None:
        if noisy:
            raise ValueError("a private solve needs the declared per-unit budget (budget = beta)")
        return None
    return check_positive(budget, "budget")


@dataclass(frozen=True)
class NoisySolverBase:
    """Fields every noisy solver has: the noise multiplier z (0 = no noise, reported as
    non-private), the declared per-unit ``budget`` beta, the clip bounds ``max_norm`` (Gamma_x)
    and ``label_bound`` (B), the public ridge ``reg`` (scalar or per task), the gravity weight
    ``unobserved_weight`` alpha_0 with its global-Gramian multiplier ``global_ratio`` (x z), and
    execution settings (``dtype``, chunk sizes bounding memory, ``num_threads`` over task chunks
    with single-threaded BLAS inside; ``None`` = all cores). Subclasses add their own fields and
    implement ``labelled_events`` and ``solve``.
    """

    noise_multiplier: float = 1.0
    budget: float | None = None
    max_norm: float = 1.0
    label_bound: float = 1.0
    reg: float | np.ndarray = 1.0
    unobserved_weight: float = 0.0
    global_ratio: float = 1.0
    dtype: type = np.float32
    chunk_tasks: int = DEFAULT_CHUNK_TASKS
    chunk_examples: int = DEFAULT_CHUNK_EXAMPLES
    num_threads: int | None = None

    def __post_init__(self):
        z = check_positive(self.noise_multiplier, "noise_multiplier", allow_zero=True)
        check_budget(self.budget, z > 0)
        check_positive(self.max_norm, "max_norm")
        check_positive(self.label_bound, "label_bound")
        check_positive(self.unobserved_weight, "unobserved_weight", allow_zero=True)
        check_positive(self.global_ratio, "global_ratio")
        check_execution(self.chunk_tasks, self.chunk_examples, self.num_threads)

    def with_noise_multiplier(self, z: float):
        """A copy at noise multiplier ``z`` (what calibration searches over)."""
        return replace(self, noise_multiplier=z)

    @staticmethod
    def noise_seeds(rng, n_tasks: int) -> list:
        """One ``SeedSequence`` per public block of ``NOISE_BLOCK`` tasks, spawned from ``rng``.

        Depends only on the generator's state and ``n_tasks``; a block's seed fully determines its
        noise, so a recomputed (retried) block releases exactly the same values.
        """
        n_blocks = -(-int(n_tasks) // NOISE_BLOCK)
        seed_seq = make_rng(rng).bit_generator.seed_seq
        if not isinstance(seed_seq, np.random.SeedSequence):  # pragma: no cover - make_rng builds SeedSequences
            raise TypeError("the noise generator must be seeded by a numpy SeedSequence")
        return list(seed_seq.spawn(n_blocks)) if n_blocks else []

    def block_chunks(self, indptr: np.ndarray) -> list[tuple[int, int]]:
        """Compute chunks as ranges of whole noise blocks ``[b0, b1)`` (bounded by ``chunk_tasks`` /
        ``chunk_examples``), so how the work is split never changes the noise."""
        m = indptr.size - 1
        starts = np.arange(0, m, NOISE_BLOCK)
        block_indptr = np.append(indptr[starts], indptr[-1])
        per_chunk = max(1, self.chunk_tasks // NOISE_BLOCK)
        return [(int(b0), int(b1)) for b0, b1 in task_chunks(block_indptr, per_chunk, self.chunk_examples)]

    @staticmethod
    def block_tasks(b0: int, b1: int, n_tasks: int) -> tuple[int, int]:
        """The task range ``[t0, t1)`` of the noise blocks ``[b0, b1)``."""
        return b0 * NOISE_BLOCK, min(b1 * NOISE_BLOCK, n_tasks)

    def release_global_gramian(self, exact_gramian: np.ndarray, rng) -> np.ndarray:
        """alpha_0 * PSD(G_glob + symmetric noise): the released gravity term (its own Gaussian event,
        multiplier ``global_ratio`` x z, sensitivity ``max_norm^2``)."""
        dtype = np.dtype(self.dtype)
        std = float(self.noise_multiplier) * self.global_ratio * float(self.max_norm) ** 2
        g0 = exact_gramian.astype(dtype, copy=True)
        add_symmetric_gaussian_noise(g0[None], std, make_rng(rng))
        return psd_project(g0) * dtype.type(self.unobserved_weight)

    def labelled_events(self) -> list:  # pragma: no cover - every solver defines it
        raise NotImplementedError

    def dp_event(self) -> dp_accounting.DpEvent:
        """Composed event of one solve (``DpEventBuilder``), from the configuration alone."""
        return compose(e for _, e, _ in self.labelled_events())
