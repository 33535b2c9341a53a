"""Accelerated-DP-SRGD: single-epoch, large-batch DP-SCO with tree-aggregated noise; DP-SGD / DP-FTRL baselines.

Choquette-Choo, Ganesh, Thakurta et al., "Near-Optimal Rates for O(1)-Smooth DP-SCO with a Single
Epoch and Large Batches" (ALT 2025): Algorithm 1 (Sec. 3), the binary tree mechanism and the
parameter choices (Secs. 4.2 and 5.3), the DP-SGD and DP-FTRL baselines (Sec. 2).

One pass over n examples in a random order, T batch steps of size B (T B <= n; the last
``n - T B`` examples are unused), two gradient calls per example. Step t (0-based):

    Delta_t = (1/B) sum_{d in B_t} clip(eta_t grad f(x_t, d) - eta_{t-1} grad f(x_{t-1}, d), C)
    Shat_t  = tree prefix sum of Delta_0..Delta_t / beta          (binary-tree mechanism)
    z_{t+1} = Proj_C(z_t - z_step * Shat_t)
    y_{t+1} = Proj_C(x_t - Shat_t / eta_t)
    x_{t+1} = (1 - tau_{t+1}) y_{t+1} + tau_{t+1} z_{t+1}

with eta_t = t + 1, eta_{-1} = 0, tau_t = 2 / (t + 2); output y_T. The domain C is the ball of
radius ``radius`` around 0.

Privacy (example level). The paper proves its guarantee under the zero-out relation (one
example's contribution replaced by zero; batch positions and the normaliser B are public). That
is *not* add/remove: adding an example shifts the batch positions of the others, so privrec no
longer records these runs in an add/remove ledger (found by a privacy audit). privrec's ledger can
state replace-one, which implies zero-out at the same (eps, delta) (the zero contribution is one
possible replacement of a clipped term), so all three methods are calibrated and reported under
**replace-one**: an example is in exactly one batch, so replacing it changes exactly one leaf
Delta_t / beta, by at most 2 C / (B beta) in L2 (enforced by the clip; each clipped term is at
most C). The tree release is a Gaussian mechanism with multiplier
``node_std / (2C/(B beta) sqrt(1 + ceil(log2 T)))`` (:mod:`privrec.privacy.tree`), calibrated by
the RDP accountant to (eps, delta) and recorded in ``PrivacyLedger(neighboring="replace_one")``
(``report["neighboring"]``). This is twice the noise of a zero-out calibration; the (smaller)
epsilon under the paper's zero-out relation is reported as ``info["epsilon_zero_out"]`` (dp_accounting
RDP with REPLACE_SPECIAL). With the default ``noise_rule="max"`` privrec never uses less noise than
sigma_req = (C/(B beta)) sqrt(1 + ceil(log2 T)) sqrt(2 ln(2.5/delta)) / eps either, the closed form
of the paper's mu-GDP analysis of the tree (Sec. 5.3); it uses at least twice it. The baselines use
the same relation and rule: single-epoch DP-SGD is one Gaussian mechanism on disjoint batches with
sensitivity 2C/B (parallel composition), DP-FTRL one tree release with leaf sensitivity 2C/B.
``random_state`` is for experiments only (a known seed voids the guarantee).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import dp_accounting
import numpy as np
from dp_accounting import rdp
from dp_accounting.privacy_accountant import NeighboringRelation

from ..._validation import check_delta, check_epsilon, check_finite_array, check_int, check_positive
from ...privacy import (
    DEFAULT_RDP_ORDERS,
    PrivacyLedger,
    TreeAggregator,
    calibrate_noise_multiplier,
    gaussian_event,
    gaussian_mechanism,
    make_rng,
    node_multiplier_for,
)
from ..losses import clip_gradients
from ._common import check_options, project_ball

if TYPE_CHECKING:
    from typing import Unpack

# ------------------------------------------------------------------------------------------
# Schedules and the stochastic recursive gradient (facts 1-2)
# ------------------------------------------------------------------------------------------


def eta(t: int) -> float:
    """eta_t = t + 1 (and eta_{-1} = 0)."""
    return float(t + 1) if t >= 0 else 0.0


def eta_cumulative(t: int) -> float:
    """eta_{0:t} = sum_{i<=t} eta_i = (t+1)(t+2)/2."""
    return (t + 1) * (t + 2) / 2.0


def tau(t: int) -> float:
    """tau_t = 2 / (t + 2)."""
    return 2.0 / (t + 2)


def recursive_gradients(deltas) -> np.ndarray:
    """nabla_t = Delta_t / eta_t + (eta_{t-1} / eta_t) nabla_{t-1} (the SRG recursion, fact 2)."""
    deltas = np.asarray(deltas, dtype=np.float64)
    out = np.empty_like(deltas)
    prev = np.zeros(deltas.shape[1:])
    for t in range(deltas.shape[0]):
        prev = deltas[t] / eta(t) + (eta(t - 1) / eta(t)) * prev
        out[t] = prev
    return out


# ------------------------------------------------------------------------------------------
# Parameter presets
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SRGDParams:
    """Steps T, batch B, smoothness parameter beta >= M, clip norm C (``None``: no clipping, eps = inf only)."""

    steps: int
    batch_size: int
    beta: float
    clip: float | None


def general_preset(
    n: int, lipschitz: float, radius: float, c_m: float = 1.0, batch_size: int | None = None
) -> SRGDParams:
    """General case: B <= sqrt(n) (default floor(sqrt n)), T = n/B, beta = (16 c_M + 8) L n^{3/2}/(R B^2),
    C = (8 c_M + 4) L."""
    n = check_int(n, "n", minimum=1)
    L = check_positive(lipschitz, "lipschitz")
    R = check_positive(radius, "radius")
    B = int(math.isqrt(n)) if batch_size is None else check_int(batch_size, "batch_size", minimum=1)
    T = n // B
    beta = (16 * c_m + 8) * L * n**1.5 / (R * B**2)
    return SRGDParams(T, B, beta, (8 * c_m + 4) * L)


def interior_preset(
    n: int, lipschitz: float, radius: float, dim: int, epsilon: float, delta: float, steps: int | None = None
) -> SRGDParams:
    """Interior case: c_DP = 4 sqrt2 log^{3/2}(n) sqrt(ln(2n/delta)) ln(2.5/delta), C = c_DP L,
    beta = c_DP^2 L max{1, sqrt(p)/(eps sqrt n)} / R, T = ceil(n^{1/4}) (the Theta~ hides logs), B = n // T.

    The paper's constants are impractical for small n (T > n at n = 1e6); every field
    of the result can be overridden by the caller.
    """
    n = check_int(n, "n", minimum=2)
    L = check_positive(lipschitz, "lipschitz")
    R = check_positive(radius, "radius")
    eps = check_epsilon(epsilon, allow_inf=False)
    delta = check_delta(delta)
    c_dp = 4 * math.sqrt(2) * math.log(n) ** 1.5 * math.sqrt(math.log(2 * n / delta)) * math.log(2.5 / delta)
    T = math.ceil(n**0.25) if steps is None else check_int(steps, "steps", minimum=1)
    beta = c_dp**2 * L * max(1.0, math.sqrt(dim) / (eps * math.sqrt(n))) / R
    return SRGDParams(T, n // T, beta, c_dp * L)


# ------------------------------------------------------------------------------------------
# Noise calibration shared by the three methods
# ------------------------------------------------------------------------------------------


def event_multiplier(epsilon: float, delta: float, noise_rule: str = "max") -> float:
    """Noise multiplier of the single Gaussian event the whole release must be (0 for eps = inf).

    The multiplier is relative to the release's replace-one sensitivity (see the module docstring).

    ``"accountant"``: smallest z with RDP-epsilon <= eps; ``"max"`` (default): also at least the
    paper's sqrt(2 ln(2.5/delta)) / eps (mu-GDP with mu = eps / sqrt(2 ln(2.5/delta))).
    """
    eps = check_epsilon(epsilon)
    delta = check_delta(delta)
    if math.isinf(eps):
        return 0.0
    if noise_rule not in ("max", "accountant"):
        raise ValueError(f"noise_rule must be 'max' or 'accountant', got {noise_rule!r}")
    z = calibrate_noise_multiplier(eps, delta, gaussian_event, neighboring=NEIGHBORING)
    if noise_rule == "max":
        z = max(z, math.sqrt(2 * math.log(2.5 / delta)) / eps)
    return z


# The neighbouring relation the three single-epoch methods are calibrated and reported under.
NEIGHBORING = "replace_one"
# L2 sensitivity of one example's clipped term under replace-one, in units of the clip norm C.
REPLACE_FACTOR = 2.0


def zero_out_epsilon(event_noise_multiplier: float, delta: float) -> float:
    """epsilon(delta) of the same release under the paper's zero-out relation (REPLACE_SPECIAL).

    A zeroed-out example moves its leaf by C/(B beta), half the replace-one sensitivity, so the
    release is a Gaussian with multiplier ``REPLACE_FACTOR * event_noise_multiplier`` for it.
    """
    z = check_positive(event_noise_multiplier, "noise_multiplier", allow_zero=True)
    if z == 0:
        return math.inf
    acc = rdp.RdpAccountant(orders=list(DEFAULT_RDP_ORDERS), neighboring_relation=NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(dp_accounting.GaussianDpEvent(REPLACE_FACTOR * z))
    return float(acc.get_epsilon(check_delta(delta)))


@dataclass
class SingleEpochResult:
    """Output of a single-epoch method: final iterate, iterates trace, ledger and its report."""

    coef: np.ndarray
    iterates: list
    ledger: PrivacyLedger
    report: dict
    epsilon: float
    info: dict


def _prepare(X, y, steps, batch_size, random_state):
    X = check_finite_array(X, "X")
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-D array, got shape {X.shape}")
    y = np.asarray(y)
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y has {y.shape[0]} rows but X has {X.shape[0]}")
    T = check_int(steps, "steps", minimum=1)
    B = check_int(batch_size, "batch_size", minimum=1)
    if X.shape[0] < T * B:
        raise ValueError(f"a single epoch needs steps * batch_size <= n ({T} * {B} > {X.shape[0]})")
    rng = make_rng(random_state)
    perm = rng.permutation(X.shape[0])[: T * B].reshape(T, B)
    return X, y, T, B, rng, perm


def _theta0(loss, d, theta0):
    k = getattr(loss, "n_classes", None)
    shape = (d,) if k is None else (d, k)
    return np.zeros(shape) if theta0 is None else np.asarray(theta0, dtype=np.float64).reshape(shape).copy()


def _clip(G, clip):
    return G if clip is None else clip_gradients(G, clip)


def _finish(coef, iterates, ledger, delta, **info):
    report = ledger.report(delta, include_pld=False)
    info["epsilon_zero_out"] = zero_out_epsilon(info["event_noise_multiplier"], delta)
    return SingleEpochResult(coef, iterates, ledger, report, ledger.epsilon(delta), info)


class SRGDOptions(TypedDict, total=False):
    """Optional keywords of :func:`accelerated_dp_srgd`.

    Parameters
    ----------
    steps, batch_size, beta, clip : T, B, beta and C; each one passed overrides the preset's
        value (with ``epsilon=inf``, ``clip=None`` disables clipping).
    preset : ``"general"`` (default, :func:`general_preset`) or ``"interior"``
        (:func:`interior_preset`; its B is ``n // T``), filling the fields not passed.
    lipschitz : L, required when the preset has a field to fill.
    c_m : the general preset's constant c_M (default 1).
    z_step : scales the z update (default 1).
    noise_rule : ``"max"`` (default) or ``"accountant"`` (see :func:`event_multiplier`).
    theta0 : starting point (default zeros).
    random_state : ``None`` (default, OS entropy) or a seed for experiments only (a known seed
        voids the guarantee).
    """

    steps: int | None
    batch_size: int | None
    beta: float | None
    clip: float | None
    preset: str
    lipschitz: float | None
    c_m: float
    z_step: float
    noise_rule: str
    theta0: np.ndarray | None
    random_state: int | np.random.Generator | None


def srgd_params(
    shape: tuple[int, ...], epsilon: float, delta: float, radius: float, options: SRGDOptions
) -> SRGDParams:
    """The T, B, beta, C of an :func:`accelerated_dp_srgd` run on data of ``shape`` (n, p): the
    values of ``options``, the rest from its preset."""
    n, dim = shape
    steps, batch_size = options.get("steps"), options.get("batch_size")
    beta, clip = options.get("beta"), options.get("clip")
    preset = options.get("preset", "general")
    if preset not in ("general", "interior"):
        raise ValueError(f"preset must be 'general' or 'interior', got {preset!r}")
    private = math.isfinite(epsilon)
    if steps is None or batch_size is None or beta is None or (clip is None and private):
        lipschitz = options.get("lipschitz")
        L = check_positive(lipschitz if lipschitz is not None else math.nan, "lipschitz (needed by the preset)")
        if preset == "general":
            p = general_preset(n, L, radius, options.get("c_m", 1.0), batch_size)
        else:
            p = interior_preset(n, L, radius, dim, epsilon, delta, steps)
        steps = p.steps if steps is None else steps
        batch_size = (n // steps if preset == "interior" else p.batch_size) if batch_size is None else batch_size
        beta = p.beta if beta is None else beta
        clip = p.clip if (clip is None and private) else clip
    return SRGDParams(steps, batch_size, beta, clip)


def accelerated_dp_srgd(
    X, y, loss, *, epsilon: float, delta: float, radius: float, **options: Unpack[SRGDOptions]
) -> SingleEpochResult:
    """Accelerated-DP-SRGD (Choquette-Choo et al., ALT 2025, Algorithm 1) on one pass over ``(X, y)``.

    The domain is the ball of radius ``radius`` (R). T, B, beta, C are the :class:`SRGDOptions`
    passed, the others come from its ``preset`` (``"general"`` or ``"interior"``, from
    ``lipschitz`` L and R; :func:`srgd_params`). ``epsilon=inf`` runs without noise (and
    ``clip=None`` then disables clipping).
    """
    check_options("accelerated_dp_srgd", options, SRGDOptions)
    eps = check_epsilon(epsilon)
    params = srgd_params(np.asarray(X).shape, eps, delta, radius, options)
    clip = params.clip
    X, y, T, B, rng, perm = _prepare(X, y, params.steps, params.batch_size, options.get("random_state"))
    beta = check_positive(params.beta, "beta")
    Rad = check_positive(radius, "radius")
    x = _theta0(loss, X.shape[1], options.get("theta0"))
    z = x.copy()
    y_out = x.copy()
    x_prev = None
    z_ev = event_multiplier(eps, delta, options.get("noise_rule", "max"))
    z_step = options.get("z_step", 1.0)
    sens = REPLACE_FACTOR * (clip if clip is not None else 1.0) / (B * beta)  # replace-one leaf sensitivity
    tree = TreeAggregator(x.shape, T, sens, node_multiplier_for(z_ev, T), rng, dtype=np.float64)
    l2 = getattr(loss, "l2", 0.0)
    iterates = []
    for t in range(T):
        idx = perm[t]
        D = eta(t) * loss.per_example_gradients(x, X[idx], y[idx])
        if x_prev is not None:
            D = D - eta(t - 1) * loss.per_example_gradients(x_prev, X[idx], y[idx])
        delta_t = _clip(D, clip).sum(axis=0) / B
        s_hat = tree.add(delta_t / beta)
        if l2:
            s_hat = s_hat + eta(t) * l2 * x / beta  # data-independent ridge part of the gradient
        z = project_ball(z - z_step * s_hat, Rad)
        y_out = project_ball(x - s_hat / eta(t), Rad)
        x_prev = x
        x = (1.0 - tau(t + 1)) * y_out + tau(t + 1) * z
        iterates.append(y_out.copy())
    ledger = PrivacyLedger(neighboring=NEIGHBORING)
    tree.record(ledger, "Accelerated-DP-SRGD: tree-aggregated prefix sums of clipped gradient differences")
    return _finish(
        y_out,
        iterates,
        ledger,
        delta,
        steps=T,
        batch_size=B,
        beta=beta,
        clip=clip,
        event_noise_multiplier=z_ev,
        node_noise_std=tree.noise_std,
        gradient_calls=2 * T * B - B,
    )


def _noisy_gradient_steps(x0, T, B, C, z_ev, rng, lr, radius, l2):
    """DP-SGD: every batch's clipped gradient sum gets fresh Gaussian noise (one mechanism on disjoint batches)."""

    def step(x, clipped_sum):
        g = gaussian_mechanism(clipped_sum, REPLACE_FACTOR * C, z_ev, rng, dtype=np.float64).value / B + l2 * x
        return project_ball(x - lr * g, radius)

    def record(ledger):
        ledger.record(
            "single-epoch DP-SGD: disjoint batches (parallel composition)",
            gaussian_event(z_ev),
            steps=T,
            batch_size=B,
            clip=C,
            sensitivity=REPLACE_FACTOR * C,
        )

    return step, record


def _tree_prefix_steps(x0, T, B, C, z_ev, rng, lr, radius, l2):
    """DP-FTRL: the mean clipped gradients go through the binary tree; x = Proj(x_0 - lr * noisy prefix sum)."""
    tree = TreeAggregator(x0.shape, T, REPLACE_FACTOR * C / B, node_multiplier_for(z_ev, T), rng, dtype=np.float64)
    ridge = np.zeros_like(x0)

    def step(x, clipped_sum):
        prefix = tree.add(clipped_sum / B)
        np.add(ridge, l2 * x, out=ridge)
        return project_ball(x0 - lr * (prefix + ridge), radius)

    def record(ledger):
        tree.record(ledger, "single-epoch DP-FTRL: tree-aggregated gradient prefix sums")

    return step, record


def _single_epoch_baseline(name: str, steps_rule, doc: str):
    """The public single-epoch baseline ``name``: one pass over disjoint batches of clipped per-example
    gradients, noised and turned into iterates by ``steps_rule`` (:func:`_noisy_gradient_steps` or
    :func:`_tree_prefix_steps`); the set-up, averaging and report are the same for both."""

    def baseline(
        X,
        y,
        loss,
        *,
        epsilon: float,
        delta: float,
        steps: int,
        batch_size: int,
        clip: float,
        step_size: float,
        radius: float | None = None,
        noise_rule: str = "max",
        averaging: bool = True,
        theta0=None,
        random_state=None,
    ) -> SingleEpochResult:
        eps = check_epsilon(epsilon)
        X, y, T, B, rng, perm = _prepare(X, y, steps, batch_size, random_state)
        lr = check_positive(step_size, "step_size")
        C = check_positive(clip, "clip")
        z_ev = event_multiplier(eps, delta, noise_rule)
        x = _theta0(loss, X.shape[1], theta0)
        step, record = steps_rule(x, T, B, C, z_ev, rng, lr, radius, getattr(loss, "l2", 0.0))
        avg = np.zeros_like(x)
        iterates = []
        for t in range(T):
            idx = perm[t]
            x = step(x, clip_gradients(loss.per_example_gradients(x, X[idx], y[idx]), C).sum(axis=0))
            avg += (x - avg) / (t + 1)
            iterates.append((avg if averaging else x).copy())
        ledger = PrivacyLedger(neighboring=NEIGHBORING)
        record(ledger)
        out = avg if averaging else x
        return _finish(out, iterates, ledger, delta, steps=T, batch_size=B, event_noise_multiplier=z_ev)

    baseline.__name__ = baseline.__qualname__ = name
    baseline.__doc__ = doc
    return baseline


dp_sgd_single_epoch = _single_epoch_baseline(
    "dp_sgd_single_epoch",
    _noisy_gradient_steps,
    """Single-epoch DP-SGD on disjoint batches: x <- Proj(x - lr (mean clipped grad + N(0, s^2))).

    Each example is in one batch, so the run is one Gaussian mechanism with replace-one
    sensitivity 2C/B on the mean (parallel composition, also under adaptivity). Returns the
    average of the iterates by default.
    """,
)

dp_ftrl_single_epoch = _single_epoch_baseline(
    "dp_ftrl_single_epoch",
    _tree_prefix_steps,
    "Single-epoch DP-FTRL: x_{t+1} = Proj(x_0 - lr * tree-noised prefix sum of mean clipped gradients).",
)
