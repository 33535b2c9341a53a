"""Shared pieces of the federated algorithms: run options, result container, projection, objectives, set-up."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from ..._validation import check_int, check_positive
from ...privacy import make_rng
from ...privacy.clipping import project_ball as clip_project_ball
from .channel import SiloChannel
from .silos import Availability, Silo, SiloSet


class RunOptions(TypedDict, total=False):
    """Keyword options every federated run accepts (all optional), documented once here.

    :func:`mb_sgd`, :func:`local_sgd`, :func:`accelerated_mb_sgd`, :func:`multistage_accelerated`
    take these and those of :class:`ISRLRunOptions`; :func:`shuffled_mb_sgd` takes these only.

    Parameters
    ----------
    radius : W = {||w|| <= radius} (Frobenius for matrices); ``None`` (default) = unconstrained.
    n_available : M (fixed), ``(lo, hi)`` (random M_r), an :class:`Availability`, or ``None``
        (default: all N silos every round).
    theta0 : starting point (default zeros, shape ``(d,)`` or ``(d, n_classes)``).
    random_state : ``None`` (default) draws the noise from OS entropy; a fixed seed is for
        experiments only and voids the guarantee for anyone who knows it.
    trace : record ``(round, objective)`` pairs in :attr:`FederatedResult.history` (default
        ``False``; the exact objective, a non-private diagnostic).
    """

    radius: float | None
    n_available: int | tuple[int, int] | Availability | None
    theta0: ArrayLike | None
    random_state: int | np.random.Generator | None
    trace: bool


class ISRLRunOptions(RunOptions, total=False):
    """:class:`RunOptions` plus the options of the ISRL-DP algorithms whose silos answer through a
    :class:`SiloChannel` (:func:`mb_sgd`, :func:`local_sgd`, :func:`accelerated_mb_sgd`,
    :func:`multistage_accelerated`).

    Parameters
    ----------
    clip : per-example gradient clip L (required when private; default ``None``).
    sampling : ``"poisson"`` (default, PLD accountant) or ``"without_replacement"`` (RDP
        accountant); both are calibrated and reported under replace-one (Lowy & Razaviyayn's
        ISRL-DP relation). The one-pass accelerated variant always uses disjoint batches.
    noise : ``"accountant"`` (default) or ``"paper"``: the larger of the accountant's sigma and
        the closed form the paper's experiments use for that algorithm (see each function).
    private : ``False`` gives the non-private baseline (no clipping without ``clip``, no noise,
        epsilon = inf); default ``True``.
    """

    clip: float | None
    sampling: str
    noise: str
    private: bool


_NOISE = ("accountant", "paper")


def check_options(caller: str, options: Mapping[str, Any], accepted: type) -> None:
    """A ``TypeError`` (as for any unexpected keyword argument of ``caller``) for a key of
    ``options`` that the TypedDict ``accepted`` does not declare."""
    keys = accepted.__required_keys__ | accepted.__optional_keys__  # type: ignore[attr-defined]
    unknown = sorted(set(options) - keys)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")


@dataclass(frozen=True)
class RunSettings:
    """The options of one federated run with their defaults filled in and checked
    (:class:`RunOptions`, :class:`ISRLRunOptions`; build it with :meth:`resolve`)."""

    radius: float | None = None
    n_available: int | tuple[int, int] | Availability | None = None
    theta0: ArrayLike | None = None
    random_state: int | np.random.Generator | None = None
    trace: bool = False
    clip: float | None = None
    sampling: str = "poisson"
    noise: str = "accountant"
    private: bool = True

    @classmethod
    def resolve(cls, caller: str, options: Mapping[str, Any], accepted: type = ISRLRunOptions) -> RunSettings:
        """``options`` (the keyword arguments ``caller`` received) over the defaults.

        A key that ``accepted`` (a :class:`RunOptions` TypedDict) does not declare is a
        ``TypeError``, as for any unexpected keyword argument.
        """
        check_options(caller, options, accepted)
        run = cls(**options)
        if run.noise not in _NOISE:
            raise ValueError(f"noise must be one of {_NOISE}, got {run.noise!r}")
        return run

    def with_sampling(self, sampling: str) -> RunSettings:
        return dataclasses.replace(self, sampling=sampling)

    def record(self, history: list[tuple[int, float]], round_: int, loss, theta, silos: SiloSet) -> None:
        """Append ``(round_, objective at theta)`` to ``history`` when a trace was requested."""
        if self.trace:
            history.append((round_, federated_objective(loss, theta, silos)))


@dataclass
class FederatedResult:
    """Output of a federated run: final parameters, per-silo privacy reports and a trace.

    ``reports[i]`` is silo i's ledger report (replace-one relation; recompute it with
    :func:`privrec.convex.federated.report_epsilon`); ``epsilons[i]`` its epsilon at its delta_i;
    ``history`` holds ``(round, objective)`` pairs when a trace was requested. The trace is the
    *exact* objective on the silos' data: a non-private diagnostic for experiments, not covered
    by the reported epsilon (only ``coef`` and the messages are).
    """

    coef: np.ndarray
    reports: list[dict]
    epsilons: list[float]
    history: list[tuple[int, float]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def as_silo_set(silos) -> SiloSet:
    return silos if isinstance(silos, SiloSet) else SiloSet(silos)


def private_clip(clip: float | None, silo: Silo) -> float:
    """The per-example gradient clip norm the noise of private ``silo`` is scaled to (required)."""
    if clip is None:
        raise ValueError(f"{silo.name}: a private silo needs a gradient clip norm")
    return clip


def project_ball(theta: np.ndarray, radius: float | None) -> np.ndarray:
    """Euclidean projection onto {||theta|| <= radius} (Frobenius for matrices); ``None`` = R^p
    (the library's one projection, :func:`privrec.privacy.clipping.project_ball`, on the whole array)."""
    return clip_project_ball(theta, radius, rows=False)


def federated_objective(loss, theta, silos: SiloSet) -> float:
    """F(theta) = (1/N) sum_i F_i(theta) with F_i the silo's empirical loss (ridge included)."""
    return float(np.mean([loss.value(theta, s.X, s.y) for s in silos]))


def initial_theta(loss, d: int, theta0=None, dtype=np.float64) -> np.ndarray:
    k = getattr(loss, "n_classes", None)
    shape = (d,) if k is None else (d, k)
    if theta0 is None:
        return np.zeros(shape, dtype=dtype)
    theta0 = np.asarray(theta0, dtype=dtype)
    if theta0.shape != shape:
        raise ValueError(f"theta0 must have shape {shape}, got {theta0.shape}")
    return theta0.copy()


def step_schedule(step_size) -> Callable[[int], float]:
    if callable(step_size):
        return step_size
    eta = check_positive(step_size, "step_size")
    return lambda r: eta


def batch_sizes(silos: SiloSet, batch_size) -> list[int]:
    """Per-silo K_i: an int (capped at n_i) or a float fraction in (0, 1] (K_i / n_i equal, App. H)."""
    if isinstance(batch_size, (float, np.floating)) and not float(batch_size).is_integer():
        q = float(batch_size)
        if not (0 < q <= 1):
            raise ValueError(f"a fractional batch_size must be in (0, 1], got {batch_size!r}")
        return [max(1, int(round(q * s.n))) for s in silos]
    K = check_int(int(batch_size) if isinstance(batch_size, float) else batch_size, "batch_size", minimum=1)
    return [min(K, s.n) for s in silos]


def make_channels(
    silos: SiloSet,
    loss,
    run: RunSettings,
    batch: list[int],
    max_messages: int,
    rng: np.random.Generator,
    paper_variance: Callable[[float, Silo, int], float],
) -> list[SiloChannel]:
    """One :class:`SiloChannel` per silo (``run``'s clip, sampling, privacy) for ``max_messages``.

    ``paper_variance(clip, silo, K)`` is the paper's closed-form sigma^2 of the algorithm, used
    with ``noise="paper"`` (as a lower bound on the accountant's noise).
    """
    chans = []
    for s, K in zip(silos, batch):
        if not run.private:
            s = Silo(s.X, s.y, math.inf, s.delta, s.name)
        ps = None
        if run.noise == "paper" and s.private:
            ps = math.sqrt(paper_variance(private_clip(run.clip, s), s, K))
        chans.append(SiloChannel(s, loss, run.clip, K, max_messages, run.sampling, ps, rng))
    return chans


def finish(
    theta, chans: list[SiloChannel], label: str, history=None, ledger_meta: dict | None = None, **info
) -> FederatedResult:
    reports = [c.close(label, **(ledger_meta or {})) for c in chans]
    eps = [float(r["epsilon"]) for r in reports]  # "inf" (JSON-safe) -> math.inf
    info.setdefault("noise_std", [c.noise_std for c in chans])
    info.setdefault("noise_multiplier", [c.noise_multiplier for c in chans])
    info.setdefault("messages", [c.sent for c in chans])
    return FederatedResult(theta, reports, eps, history or [], info)


def setup(silos, loss, run: RunSettings):
    """The silo set, the run's generator, its :class:`Availability` and the starting point."""
    silos = as_silo_set(silos)
    rng = make_rng(run.random_state)
    n_available = run.n_available
    avail = n_available if isinstance(n_available, Availability) else Availability(len(silos), n_available)
    if avail.n_silos != len(silos):
        raise ValueError(f"availability is for {avail.n_silos} silos, the federation has {len(silos)}")
    theta = initial_theta(loss, silos.n_features, run.theta0)
    return silos, rng, avail, theta
