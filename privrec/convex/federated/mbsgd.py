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

from typing import TYPE_CHECKING

import numpy as np

from ..._validation import check_int, check_positive
from ._common import (
    FederatedResult,
    RunSettings,
    batch_sizes,
    finish,
    make_channels,
    project_ball,
    setup,
    step_schedule,
)
from .calibration import paper_local_sgd_sigma2, paper_moments_sigma2

if TYPE_CHECKING:
    from typing import Unpack

    from ._common import ISRLRunOptions


def mb_sgd(
    silos,
    loss,
    *,
    rounds: int,
    batch_size,
    step_size,
    averaging: str = "uniform",
    strong_convexity: float = 0.0,
    silo_streams: bool = False,
    **options: Unpack[ISRLRunOptions],
) -> FederatedResult:
    """ISRL-DP MB-SGD (Algorithm 2); ``private=False`` gives the non-private MB-SGD baseline.

    Parameters
    ----------
    silos : :class:`SiloSet` or list of :class:`Silo` (budgets per silo).
    loss : privrec convex loss; its ridge term ``l2`` is added on the server (data independent).
        For non-smooth losses pass ``MoreauEnvelope(loss, beta)`` (Lowy & Razaviyayn, App. D.2).
    rounds : R.
    batch_size : K (int, capped at n_i) or a fraction of n_i (K_i / n_i equal).
    step_size : constant eta or a callable ``r -> eta_r``.
    averaging : ``"uniform"`` (gamma_r = 1/R), ``"strongly_convex"`` (gamma_r = (1 - mu eta)^-(r+1),
        needs ``strong_convexity`` mu and a constant step) or ``"last"``.
    options : the run options of :class:`ISRLRunOptions` (``clip``, ``radius``, ``n_available``,
        ``sampling``, ``noise``, ``private``, ``theta0``, ``random_state``, ``trace``). With
        ``noise="paper"`` the closed form is the experiments' 8 L^2 ln(1/delta) R / (n^2 eps^2).
    silo_streams : ``False`` (default): one generator for the whole run. ``True``: as in a real
        federation, where every silo owns its randomness, silo i's message of round r draws its
        batch and noise from its own stream :func:`silo_round_rng` (``random_state``, i, r), and
        the generator of ``random_state`` draws only the available silos. A message is then a pure
        function of (silo, round, w_r): a silo asked again for the same round (a retried message)
        sends the same message. :mod:`privrec.federated.flower` runs exactly this.
    """
    run = RunSettings.resolve("mb_sgd", options)
    silos, rng, avail, theta = setup(silos, loss, run)
    R = check_int(rounds, "rounds", minimum=1)
    if run.sampling not in ("poisson", "without_replacement"):
        raise ValueError(f"mb_sgd sampling must be 'poisson' or 'without_replacement', got {run.sampling!r}")
    if averaging not in ("uniform", "strongly_convex", "last"):
        raise ValueError(f"averaging must be 'uniform', 'strongly_convex' or 'last', got {averaging!r}")
    root = None
    if silo_streams:
        seed = run.random_state
        if isinstance(seed, np.random.Generator):
            raise ValueError(
                "silo_streams=True needs random_state None or an int seed (each silo derives its own streams)"
            )
        root = np.random.SeedSequence(seed)
    Ks = batch_sizes(silos, batch_size)
    chans = make_channels(silos, loss, run, Ks, R, rng, mb_sgd_paper_variance(R))
    history: list[tuple[int, float]] = []

    def answers(S, w, r):
        if root is not None:  # each silo's own stream for this round
            for i in S:
                chans[i].rng = silo_round_rng(root, i, r)
        return [chans[i].gradient(w) for i in S]

    out = mb_sgd_rounds(
        theta,
        R,
        lambda r: avail.draw(rng),
        answers,
        step_size,
        averaging=averaging,
        strong_convexity=strong_convexity,
        l2=getattr(loss, "l2", 0.0),
        radius=run.radius,
        after_round=lambda r, w: run.record(history, r, loss, w, silos),
    )
    return finish(out, chans, mb_sgd_label(run.private), history, algorithm="mb_sgd", rounds=R, batch_sizes=Ks)


def mb_sgd_label(private: bool) -> str:
    """The ledger label of MB-SGD's messages."""
    return "ISRL-DP MB-SGD: noisy minibatch gradients" if private else "MB-SGD (non-private)"


def mb_sgd_paper_variance(rounds: int):
    """``(clip, silo, K) -> sigma^2``: the experiments' closed form of MB-SGD (``noise="paper"``)."""
    return lambda L, s, K: paper_moments_sigma2(L, s.n, rounds, s.epsilon, s.delta)


def silo_round_rng(random_state, silo: int, round_: int) -> np.random.Generator:
    """Silo ``silo``'s generator for its message of round ``round_`` (``mb_sgd(silo_streams=True)``):
    ``SeedSequence(entropy, spawn_key=(silo, round_))`` of ``random_state`` (an int seed or a
    ``SeedSequence``; ``None``: OS entropy, drawn here). A known seed voids the guarantee."""
    root = random_state if isinstance(random_state, np.random.SeedSequence) else np.random.SeedSequence(random_state)
    key = (*root.spawn_key, int(silo), int(round_))
    return np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=key, pool_size=root.pool_size))


def mb_sgd_rounds(
    theta,
    rounds: int,
    draw,
    answers,
    step_size,
    *,
    averaging: str = "uniform",
    strong_convexity: float = 0.0,
    l2: float = 0.0,
    radius: float | None = None,
    after_round=None,
) -> np.ndarray:
    """The server side of MB-SGD (Algorithm 2), whoever carries the messages.

    Round r: ``S = draw(r)`` (the available silos), ``answers(S, w_r, r)`` their noisy gradient
    messages (fewer than ``|S|`` when some silos did not answer; none: no step this round), then
    the projected step on their mean plus the ridge term and the averaging; ``after_round(r + 1,
    w)`` sees the averaged iterate. Returns the output iterate (``averaging="last"``: the last one).
    """
    if averaging not in ("uniform", "strongly_convex", "last"):
        raise ValueError(f"averaging must be 'uniform', 'strongly_convex' or 'last', got {averaging!r}")
    eta = step_schedule(step_size)
    mu = check_positive(strong_convexity, "strong_convexity", allow_zero=True)
    avg = np.zeros_like(theta)
    u = 0.0  # (sum of weights) / (current weight), for a stable geometric weighted average
    for r in range(rounds):
        msgs = answers(draw(r), theta, r)
        e = eta(r)
        if len(msgs):
            g = np.mean(msgs, axis=0) + l2 * theta
            theta = project_ball(theta - e * g, radius)
        if averaging == "strongly_convex":
            if not (0 < mu * e < 1):
                raise ValueError("strongly convex averaging needs 0 < strong_convexity * step_size < 1")
            u = 1.0 + u * (1.0 - mu * e)
        else:
            u = u + 1.0
        avg += (theta - avg) / u
        if after_round is not None:
            after_round(r + 1, avg if averaging != "last" else theta)
    return theta if averaging == "last" else avg


def local_sgd(
    silos,
    loss,
    *,
    rounds: int,
    local_steps: int,
    step_size,
    local_batch: int = 1,
    **options: Unpack[ISRLRunOptions],
) -> FederatedResult:
    """Local SGD / FedAvg; with ``private=True`` the ISRL-DP Local SGD baseline.

    Each available silo runs ``local_steps`` (K) SGD steps from w_r on minibatches of
    ``local_batch`` records (single-sample steps by default, as in the paper), adding fresh noise
    at every local step; the server averages the returned models. Every noisy local step is one
    message-equivalent release (the returned model is post-processing), so a silo's noise is
    calibrated for R*K releases (the paper's sigma^2 = 8 L^2 R K ln(1/delta) / (eps^2 n^2) with
    ``noise="paper"``). ``options``: the run options of :class:`ISRLRunOptions`.
    """
    run = RunSettings.resolve("local_sgd", options)
    silos, rng, avail, theta = setup(silos, loss, run)
    R = check_int(rounds, "rounds", minimum=1)
    K = check_int(local_steps, "local_steps", minimum=1)
    Ks = batch_sizes(silos, local_batch)
    paper = lambda L, s, b: paper_local_sgd_sigma2(L, s.n, R, K, s.epsilon, s.delta)
    chans = make_channels(silos, loss, run, Ks, R * K, rng, paper)
    eta = step_schedule(step_size)
    l2 = getattr(loss, "l2", 0.0)
    history: list[tuple[int, float]] = []
    for r in range(R):
        S = avail.draw(rng)
        models = []
        for i in S:
            th = theta.copy()
            for _ in range(K):
                g = chans[i].gradient(th) + l2 * th
                th = project_ball(th - eta(r) * g, run.radius)
            models.append(th)
        theta = np.mean(models, axis=0)
        run.record(history, r + 1, loss, theta, silos)
    label = "ISRL-DP Local SGD: noisy local steps" if run.private else "Local SGD (non-private)"
    return finish(theta, chans, label, history, algorithm="local_sgd", rounds=R, local_steps=K)
