"""ISRL-DP minibatch SGD (Algorithm 2), Local SGD / FedAvg baselines (private and not).

Lowy & Razaviyayn (ICLR 2023): Noisy ISRL-DP MB-SGD (Algorithm 2, App. D.1; strongly convex weights,
non-smooth losses via the Moreau envelope, App. D.2) and the baselines of the experiments (Sec. 6
and App. I: MB-SGD with sigma = 0, Local SGD / FedAvg, ISRL-DP Local SGD).

Each round r a set S_r of available silos (``n_available``) receives w_r; silo i answers with the
noisy mean of K_i clipped per-example gradients (its :class:`SiloChannel`, noise calibrated by
the accountant for R messages at (eps_i, delta_i), recorded in its own ledger); the server
averages the answers and takes a projected step. ``random_state`` fixes all randomness for
experiments; a known seed voids the privacy guarantee.
"""

from __future__ import annotations

import math

import numpy as np

from ..._validation import check_int, check_positive
from ._common import (
    FederatedResult,
    batch_sizes,
    federated_objective,
    finish,
    make_channels,
    private_clip,
    project_ball,
    setup,
    step_schedule,
)
from .calibration import paper_local_sgd_sigma2, paper_moments_sigma2

_NOISE = ("accountant", "paper")


def _check_noise(noise: str) -> str:
    if noise not in _NOISE:
        raise ValueError(f"noise must be one of {_NOISE}, got {noise!r}")
    return noise


def mb_sgd(
    silos,
    loss,
    *,
    rounds: int,
    batch_size,
    step_size,
    clip: float | None = None,
    radius: float | None = None,
    n_available=None,
    sampling: str = "poisson",
    noise: str = "accountant",
    private: bool = True,
    averaging: str = "uniform",
    strong_convexity: float = 0.0,
    theta0=None,
    random_state=None,
    trace: bool = False,
) -> FederatedResult:
    """ISRL-DP MB-SGD (Algorithm 2); ``private=False`` gives the non-private MB-SGD baseline.

    Parameters
    ----------
    silos : :class:`SiloSet` or list of :class:`Silo` (budgets per silo).
    loss : privrec convex loss; its ridge term ``l2`` is added on the server (data independent).
        For non-smooth losses pass ``MoreauEnvelope(loss, beta)`` (Lowy & Razaviyayn, App. D.2).
    rounds : R. batch_size : K (int, capped at n_i) or a fraction of n_i (K_i / n_i equal).
    step_size : constant eta or a callable ``r -> eta_r``.
    clip : per-example gradient clip L (required when private).
    radius : W = {||w|| <= radius}; ``None`` = unconstrained.
    n_available : M (fixed), ``(lo, hi)`` (random M_r), or ``None`` (all N).
    sampling : ``"poisson"`` (PLD accountant) or ``"without_replacement"`` (RDP accountant); both are
        calibrated and reported under replace-one (Lowy & Razaviyayn's ISRL-DP relation).
    noise : ``"accountant"`` (default) or ``"paper"`` (``max`` of the experiments' closed form
        8 L^2 ln(1/delta) R / (n^2 eps^2) and the accountant's sigma).
    averaging : ``"uniform"`` (gamma_r = 1/R), ``"strongly_convex"`` (gamma_r = (1 - mu eta)^-(r+1),
        needs ``strong_convexity`` mu and a constant step) or ``"last"``.
    """
    silos, rng, avail, theta = setup(silos, loss, theta0, random_state, n_available)
    R = check_int(rounds, "rounds", minimum=1)
    _check_noise(noise)
    if sampling not in ("poisson", "without_replacement"):
        raise ValueError(f"mb_sgd sampling must be 'poisson' or 'without_replacement', got {sampling!r}")
    if averaging not in ("uniform", "strongly_convex", "last"):
        raise ValueError(f"averaging must be 'uniform', 'strongly_convex' or 'last', got {averaging!r}")
    Ks = batch_sizes(silos, batch_size)
    paper = None
    if noise == "paper":
        paper = lambda s, K: math.sqrt(paper_moments_sigma2(private_clip(clip, s), s.n, R, s.epsilon, s.delta))
    chans = make_channels(silos, loss, clip, Ks, R, sampling, rng, paper, private)
    eta = step_schedule(step_size)
    mu = check_positive(strong_convexity, "strong_convexity", allow_zero=True)
    l2 = getattr(loss, "l2", 0.0)
    avg = np.zeros_like(theta)
    u = 0.0  # (sum of weights) / (current weight), for a stable geometric weighted average
    history = []
    for r in range(R):
        S = avail.draw(rng)
        g = np.mean([chans[i].gradient(theta) for i in S], axis=0) + l2 * theta
        e = eta(r)
        theta = project_ball(theta - e * g, radius)
        if averaging == "strongly_convex":
            if not (0 < mu * e < 1):
                raise ValueError("strongly convex averaging needs 0 < strong_convexity * step_size < 1")
            u = 1.0 + u * (1.0 - mu * e)
        else:
            u = u + 1.0
        avg += (theta - avg) / u
        if trace:
            history.append((r + 1, federated_objective(loss, avg if averaging != "last" else theta, silos)))
    out = theta if averaging == "last" else avg
    label = "ISRL-DP MB-SGD: noisy minibatch gradients" if private else "MB-SGD (non-private)"
    return finish(out, chans, label, history, algorithm="mb_sgd", rounds=R, batch_sizes=Ks)


def local_sgd(
    silos,
    loss,
    *,
    rounds: int,
    local_steps: int,
    step_size,
    clip: float | None = None,
    local_batch: int = 1,
    radius: float | None = None,
    n_available=None,
    sampling: str = "poisson",
    noise: str = "accountant",
    private: bool = True,
    theta0=None,
    random_state=None,
    trace: bool = False,
) -> FederatedResult:
    """Local SGD / FedAvg; with ``private=True`` the ISRL-DP Local SGD baseline.

    Each available silo runs ``local_steps`` (K) SGD steps from w_r on minibatches of
    ``local_batch`` records (single-sample steps by default, as in the paper), adding fresh noise
    at every local step; the server averages the returned models. Every noisy local step is one
    message-equivalent release (the returned model is post-processing), so a silo's noise is
    calibrated for R*K releases (the paper's sigma^2 = 8 L^2 R K ln(1/delta) / (eps^2 n^2) with
    ``noise="paper"``).
    """
    silos, rng, avail, theta = setup(silos, loss, theta0, random_state, n_available)
    R = check_int(rounds, "rounds", minimum=1)
    K = check_int(local_steps, "local_steps", minimum=1)
    _check_noise(noise)
    Ks = batch_sizes(silos, local_batch)
    paper = None
    if noise == "paper":
        paper = lambda s, b: math.sqrt(paper_local_sgd_sigma2(private_clip(clip, s), s.n, R, K, s.epsilon, s.delta))
    chans = make_channels(silos, loss, clip, Ks, R * K, sampling, rng, paper, private)
    eta = step_schedule(step_size)
    l2 = getattr(loss, "l2", 0.0)
    history = []
    for r in range(R):
        S = avail.draw(rng)
        models = []
        for i in S:
            th = theta.copy()
            for _ in range(K):
                g = chans[i].gradient(th) + l2 * th
                th = project_ball(th - eta(r) * g, radius)
            models.append(th)
        theta = np.mean(models, axis=0)
        if trace:
            history.append((r + 1, federated_objective(loss, theta, silos)))
    label = "ISRL-DP Local SGD: noisy local steps" if private else "Local SGD (non-private)"
    return finish(theta, chans, label, history, algorithm="local_sgd", rounds=R, local_steps=K)
