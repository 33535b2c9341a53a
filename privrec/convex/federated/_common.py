"""Shared pieces of the federated algorithms: result container, projection, objectives, set-up."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._validation import check_int, check_positive
from ...privacy import make_rng
from ...privacy.clipping import project_ball as clip_project_ball
from .channel import SiloChannel
from .silos import Availability, Silo, SiloSet


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
    clip,
    batch: list[int],
    max_messages: int,
    sampling: str,
    rng: np.random.Generator,
    paper_sigma: Callable[[Silo, int], float] | None = None,
    private: bool = True,
) -> list[SiloChannel]:
    chans = []
    for s, K in zip(silos, batch):
        if not private:
            s = Silo(s.X, s.y, math.inf, s.delta, s.name)
        ps = paper_sigma(s, K) if (paper_sigma is not None and s.private) else None
        chans.append(SiloChannel(s, loss, clip, K, max_messages, sampling, ps, rng))
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


def setup(silos, loss, theta0, random_state, n_available):
    silos = as_silo_set(silos)
    rng = make_rng(random_state)
    avail = n_available if isinstance(n_available, Availability) else Availability(len(silos), n_available)
    if avail.n_silos != len(silos):
        raise ValueError(f"availability is for {avail.n_silos} silos, the federation has {len(silos)}")
    theta = initial_theta(loss, silos.n_features, theta0)
    return silos, rng, avail, theta
