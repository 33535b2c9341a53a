"""The one solver interface and its registry (Krichene et al., ICML 2023, Secs. 2-3).

A *solver* solves a :class:`~privrec.solvers.TaskBatch` of m weighted least-squares (or convex)
tasks over shared unit features and reports the DpEvents of the release. It knows nothing of
users or items, so DP-ALS's item step, the multi-task estimators and the distributed backend all
call the same objects:

* ``solve(batch, rng=None) -> SolverResult`` -- parameters (m, d), labelled events, public info;
* ``labelled_events() -> [(label, DpEvent, meta)]`` and ``dp_event()`` -- the events of one solve,
  from the configuration alone (calibration plans them before any data is touched);
* ``with_noise_multiplier(z)`` -- a copy at another noise scale (what calibration searches over);
* ``noise_multiplier`` -- 0 for a non-private solve (its single event is ``NonPrivateDpEvent``).

:func:`make_solver` builds a registered solver by name (``"exact"``, ``"ssp"``, ``"noisy_gd"``);
:func:`register_solver` adds one (a third-party solver must satisfy :class:`PrivateSolver`, which
is checked at registration and by the contract tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import dp_accounting
    import numpy as np

    from .batch import SolverResult, TaskBatch

#: (label, DpEvent, metadata) of one release
LabelledEvent = tuple[str, "dp_accounting.DpEvent", dict]


@runtime_checkable
class PrivateSolver(Protocol):
    """What every solver provides (see the module docstring)."""

    noise_multiplier: float

    def solve(self, batch: TaskBatch, rng: np.random.Generator | int | None = None) -> SolverResult: ...

    def labelled_events(self) -> list[LabelledEvent]: ...

    def dp_event(self) -> dp_accounting.DpEvent: ...

    def with_noise_multiplier(self, z: float) -> PrivateSolver: ...


_REGISTRY: dict[str, Callable[..., Any]] = {}

_PROTOCOL_METHODS = ("solve", "labelled_events", "dp_event", "with_noise_multiplier")


def register_solver(name: str, factory: Callable[..., Any]) -> None:
    """Register ``factory(**params) -> solver`` under ``name`` (a class is a factory).

    Raises ``ValueError`` if the name is taken or if ``factory`` is a class lacking one of the
    protocol's methods (instances are checked again by :func:`make_solver`).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a solver name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"a solver named {name!r} is already registered")
    if isinstance(factory, type):
        missing = [m for m in _PROTOCOL_METHODS if not callable(getattr(factory, m, None))]
        if missing:
            raise ValueError(f"{factory.__name__} does not implement the PrivateSolver protocol (missing {missing})")
    _REGISTRY[name] = factory


def available_solvers() -> list[str]:
    """Registered solver names, sorted."""
    return sorted(_REGISTRY)


def make_solver(name: str, **params: Any) -> PrivateSolver:
    """A registered solver built from keyword parameters, e.g. ``make_solver("ssp", noise_multiplier=2.0, budget=10)``."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown solver {name!r}; choose one of {available_solvers()}") from None
    solver = factory(**params)
    if not isinstance(solver, PrivateSolver):
        raise TypeError(f"solver {name!r} built a {type(solver).__name__}, which is not a PrivateSolver")
    return solver
