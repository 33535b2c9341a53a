"""Accelerated noisy MB-SGD (AC-SA of Ghadimi-Lan, the paper's Algorithm 1) and its multi-stage wrapper.

Lowy & Razaviyayn (ICLR 2023): Algorithm 1 (Sec. 3; one-pass and ERM variants, with the prox step c
in closed form), its multi-stage implementation for strongly convex losses (App. E.1) and the ERM
version with replacement (Sec. 4).

One round r (alpha = alpha_r, eta = eta_r, mu = strong convexity):

    w_md = [(1-a)(mu+eta) w_ag + a((1-a)mu+eta) w_{r-1}] / (eta + (1-a^2) mu)
    g    = mean of the available silos' noisy clipped minibatch gradients at w_md
    w_r  = Proj_W([a mu w_md + ((1-a)mu + eta) w_{r-1} - a g] / (mu + eta))
    w_ag = a w_r + (1-a) w_ag

Schedules: ``alpha_r = 2/(r+1)``, ``eta_r = 4 v / (r (r+1))`` (v >= 2 beta), each overridable.

Variants. ``"one_pass"``: every silo walks once through a random partition of its records into
batches of K (each record used at most once, parallel composition: the whole run costs each silo
one Gaussian mechanism under replace-one, the paper's sigma^2 = 32 L^2 ln(1.25/delta)/(eps^2 K^2)
with ``noise="paper"``); convex losses are regularised with (lambda/2)||w - w0||^2 when
``prox_center_l2`` is set. ``"erm"``: batches are re-sampled every round. The paper samples with
replacement; privrec samples by Poisson (default) or without replacement so the accountant has
an exact event for it (same expected batch, sampling noise differs only at O(K/n)); both are
accounted under replace-one (Poisson with the PLD accountant, see ``calibration``).

``smoothness`` must be a public constant (e.g. the loss's smoothness on a clipped feature ball):
it sets every step size, so a value read off the private data would leak through the output.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..._validation import check_int, check_positive
from ._common import FederatedResult, RunSettings, batch_sizes, finish, make_channels, project_ball, setup
from .calibration import paper_moments_sigma2, paper_one_pass_sigma2

if TYPE_CHECKING:
    from typing import Unpack

    from ._common import ISRLRunOptions


def md_weights(alpha: float, eta: float, mu: float) -> tuple[float, float]:
    """Coefficients (on w_ag, on w_{r-1}) of the middle point w_md; they sum to 1 (fact 6)."""
    den = eta + (1.0 - alpha**2) * mu
    return (1.0 - alpha) * (mu + eta) / den, alpha * ((1.0 - alpha) * mu + eta) / den


def acsa_step(w_prev, w_ag, grad_at, alpha: float, eta: float, mu: float, radius=None):
    """One AC-SA round given ``grad_at(w_md)``; returns (w_r, w_ag_new, w_md)."""
    c_ag, c_prev = md_weights(alpha, eta, mu)
    w_md = c_ag * w_ag + c_prev * w_prev
    g = grad_at(w_md)
    c = (alpha * mu * w_md + ((1.0 - alpha) * mu + eta) * w_prev - alpha * g) / (mu + eta)
    w = project_ball(c, radius)
    return w, alpha * w + (1.0 - alpha) * w_ag, w_md


def _run_stage(theta, R, alpha_fn, eta_fn, mu, chans, avail, rng, run, loss, silos, lam, center, history, offset):
    l2 = getattr(loss, "l2", 0.0)
    w_prev = theta.copy()
    w_ag = theta.copy()

    def grad_at(w):
        S = avail.draw(rng)
        g = np.mean([chans[i].gradient(w) for i in S], axis=0) + l2 * w
        if lam:
            g = g + lam * (w - center)
        return g

    for r in range(1, R + 1):
        w_prev, w_ag, _ = acsa_step(w_prev, w_ag, grad_at, alpha_fn(r), eta_fn(r), mu, run.radius)
        run.record(history, offset + r, loss, w_ag, silos)
    return w_ag


def accelerated_mb_sgd(
    silos,
    loss,
    *,
    batch_size,
    smoothness: float,
    rounds: int | None = None,
    mode: str = "erm",
    strong_convexity: float = 0.0,
    v: float | None = None,
    alpha=None,
    eta=None,
    prox_center_l2: float = 0.0,
    **options: Unpack[ISRLRunOptions],
) -> FederatedResult:
    """ISRL-DP accelerated MB-SGD (Algorithm 1), ``mode="one_pass"`` or ``"erm"``.

    ``smoothness`` is beta of the loss on the clipped domain; ``v`` defaults to ``2 beta``;
    ``alpha`` / ``eta`` may be callables ``r -> value`` (r = 1..R) replacing the schedules;
    ``strong_convexity`` mu adds to the loss's ridge ``l2`` (and ``prox_center_l2``).
    ``rounds`` defaults to ``min_i floor(n_i / K_i)`` for one pass and is required for ERM.
    ``options``: the run options of :class:`ISRLRunOptions` (one pass always samples disjoint
    batches, whatever ``sampling`` says).
    """
    run = RunSettings.resolve("accelerated_mb_sgd", options)
    silos, rng, avail, theta = setup(silos, loss, run)
    if mode not in ("one_pass", "erm"):
        raise ValueError(f"mode must be 'one_pass' or 'erm', got {mode!r}")
    Ks = batch_sizes(silos, batch_size)
    if mode == "one_pass":
        run = run.with_sampling("disjoint")
        max_r = min(s.n // K for s, K in zip(silos, Ks))
        R = max_r if rounds is None else check_int(rounds, "rounds", minimum=1)
        if max_r < R or R < 1:
            raise ValueError(f"one pass allows at most {max_r} rounds at these batch sizes, got {R}")
        paper = lambda L, s, K: paper_one_pass_sigma2(L, K, s.epsilon, s.delta)
    else:
        if rounds is None:
            raise ValueError("rounds is required for the ERM variant")
        R = check_int(rounds, "rounds", minimum=1)
        paper = lambda L, s, K: paper_moments_sigma2(L, s.n, R, s.epsilon, s.delta)
    chans = make_channels(silos, loss, run, Ks, R, rng, paper)
    beta = check_positive(smoothness, "smoothness")
    lam = check_positive(prox_center_l2, "prox_center_l2", allow_zero=True)
    mu = check_positive(strong_convexity, "strong_convexity", allow_zero=True) + getattr(loss, "l2", 0.0) + lam
    vv = 2.0 * beta if v is None else check_positive(v, "v")
    alpha_fn = alpha if alpha is not None else (lambda r: 2.0 / (r + 1))
    eta_fn = eta if eta is not None else (lambda r: 4.0 * vv / (r * (r + 1)))
    history: list[tuple[int, float]] = []  # (round, federated objective)
    center = theta.copy()
    out = _run_stage(theta, R, alpha_fn, eta_fn, mu, chans, avail, rng, run, loss, silos, lam, center, history, 0)
    label = f"ISRL-DP accelerated MB-SGD ({mode})" if run.private else f"accelerated MB-SGD ({mode}, non-private)"
    return finish(out, chans, label, history, algorithm="accelerated_mb_sgd", mode=mode, rounds=R, batch_sizes=Ks)


def multistage_schedule(
    smoothness: float,
    strong_convexity: float,
    variance: float,
    gap: float,
    n_stages: int,
    max_rounds_per_stage: int | None = None,
) -> list[tuple[int, float]]:
    """A4 stage plan: ``[(R_k, v_k)]`` with R_k = ceil(max{4 sqrt(2 beta/mu), 128 V^2/(3 mu Delta 2^-(k+1))}),
    v_k = max{2 beta, [mu V^2 / (3 Delta 2^-(k-1) R_k (R_k+1)(R_k+2))]^(1/2)}; R_k optionally capped."""
    beta = check_positive(smoothness, "smoothness")
    mu = check_positive(strong_convexity, "strong_convexity")
    V2 = check_positive(variance, "variance", allow_zero=True)
    Delta = check_positive(gap, "gap")
    K = check_int(n_stages, "n_stages", minimum=1)
    plan = []
    for k in range(1, K + 1):
        Rk = math.ceil(max(4.0 * math.sqrt(2.0 * beta / mu), 128.0 * V2 / (3.0 * mu * Delta * 2.0 ** -(k + 1))))
        if max_rounds_per_stage is not None:
            Rk = min(Rk, check_int(max_rounds_per_stage, "max_rounds_per_stage", minimum=1))
        vk = max(2.0 * beta, math.sqrt(mu * V2 / (3.0 * Delta * 2.0 ** -(k - 1) * Rk * (Rk + 1) * (Rk + 2))))
        plan.append((Rk, vk))
    return plan


def multistage_accelerated(
    silos,
    loss,
    *,
    batch_size,
    smoothness: float,
    strong_convexity: float,
    gap: float,
    n_stages: int,
    variance: float | None = None,
    max_rounds_per_stage: int | None = None,
    **options: Unpack[ISRLRunOptions],
) -> FederatedResult:
    """Multi-stage accelerated MB-SGD for mu-strongly convex losses (A4), ERM sampling.

    Stage k restarts AC-SA from the previous stage's output with alpha_r = 2/(r+1),
    eta_r = 4 v_k / (r(r+1)). ``gap`` is the bound Delta on the initial suboptimality and
    ``variance`` V^2 on the gradient estimate's variance (default ``clip^2 / min K_i``: the
    sampling part only; pass a larger value to account for the privacy noise). Every silo's
    noise is calibrated for the total number of rounds of all stages. ``options``: the run
    options of :class:`ISRLRunOptions`.
    """
    run = RunSettings.resolve("multistage_accelerated", options)
    silos, rng, avail, theta = setup(silos, loss, run)
    Ks = batch_sizes(silos, batch_size)
    mu_total = check_positive(strong_convexity, "strong_convexity") + getattr(loss, "l2", 0.0)
    if variance is None:
        if run.clip is None:
            raise ValueError("variance is required when clip is not given")
        variance = run.clip**2 / min(Ks)
    plan = multistage_schedule(smoothness, mu_total, variance, gap, n_stages, max_rounds_per_stage)
    R = sum(r for r, _ in plan)
    paper = lambda L, s, K: paper_moments_sigma2(L, s.n, R, s.epsilon, s.delta)
    chans = make_channels(silos, loss, run, Ks, R, rng, paper)
    history: list[tuple[int, float]] = []  # (round, federated objective)
    offset = 0
    for Rk, vk in plan:
        alpha_fn = lambda r: 2.0 / (r + 1)
        eta_fn = lambda r, vk=vk: 4.0 * vk / (r * (r + 1))
        theta = _run_stage(
            theta, Rk, alpha_fn, eta_fn, mu_total, chans, avail, rng, run, loss, silos, 0.0, theta, history, offset
        )
        offset += Rk
    label = "ISRL-DP multi-stage accelerated MB-SGD" if run.private else "multi-stage accelerated MB-SGD (non-private)"
    return finish(theta, chans, label, history, algorithm="multistage_accelerated", stages=plan, rounds=R)
