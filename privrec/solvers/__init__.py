"""Private multi-task solvers over a :class:`TaskBatch` (Krichene et al., ICML 2023, Algs. 1-2, Sec. 3).

One interface: ``solver.solve(batch, rng=None) -> SolverResult(params (m, d), events, info)``;
``solver.dp_event()`` gives the composed event of one solve from the configuration alone (for
calibration) and ``solver.with_noise_multiplier(z)`` a copy at another noise scale. Solvers know
nothing about users or items: tasks are rows, units (privacy owners) are ``feature_ids``.
"""

from ._linalg import psd_project, weighted_statistics
from .batch import SolverResult, TaskBatch
from .exact import ExactSolver
from .noisy_gd import NoisyGDSolver, suggested_iterations
from .protocol import LabelledEvent, PrivateSolver, available_solvers, make_solver, register_solver
from .ssp import SSPSolver

register_solver("exact", ExactSolver)
register_solver("ssp", SSPSolver)
register_solver("noisy_gd", NoisyGDSolver)

__all__ = [
    "PrivateSolver",
    "LabelledEvent",
    "make_solver",
    "register_solver",
    "available_solvers",
    "TaskBatch",
    "SolverResult",
    "ExactSolver",
    "SSPSolver",
    "NoisyGDSolver",
    "suggested_iterations",
    "weighted_statistics",
    "psd_project",
]
