"""Shuffled ISRL-DP MB-SGD (K = 1, M silos per round) with an explicit amplification-by-shuffling bound.

Lowy & Razaviyayn (ICLR 2023), Sec. 5 and App. G: shuffled MB-SGD (K = 1, M_r = M) with a Gaussian
local randomizer, privacy amplified by shuffling (Feldman et al.). The paper leaves the constant C
unspecified, so privrec uses the explicit, documented amplification bound below.

Each round, each of the M available silos samples one of its records, clips its gradient to L
and adds N(0, (2 L z)^2 I) (a Gaussian local randomizer; 2L is the replace-one sensitivity).
A secure shuffler hands the server the multiset of the M messages (the simulation averages
them, which only uses the multiset).

The bound privrec uses, all steps conservative. It is **hand-derived** from the theorems below
(dp_accounting has no shuffle-model event), so no accountant recomputes it; it is returned as
``info["shuffle"]`` and written into every silo's ledger entry (``meta["shuffle"]``).

1. Local randomizer: (eps0, delta0)-DP with eps0 the exact Gaussian-mechanism curve at delta0
   (:func:`gaussian_epsilon`; the RDP conversion cannot go below ~ln(1/delta0)/62 at privrec's
   orders, too loose here); the subsampling of one record per round is *not* credited.
   Whatever a silo's records, its message has mean in the ball of radius L, so the randomizer
   is (eps0, delta0)-DP with respect to the silo's whole data set: a local randomizer in FMT21's
   sense, one message per available silo and round (FMT21's n is M).
2. Per round: Feldman, McMillan, Talwar 2021 ("Hiding among the clones", FMT21), Theorem 3.1
   in the closed form of the authors' reference implementation (``closedformanalysis`` in
   apple/ml-shuffling-amplification), extended to approximate-DP randomizers by Theorem 3.8:
   if eps0 <= ln(M / (16 ln(4/delta_s))), the shuffled messages are
   (eps_r, delta_s + (e^eps_r + 1)(1 + e^-eps0 / 2) M delta0)-DP with

       a = 8 sqrt(e^eps0 ln(4/delta_s) / M),  c = 8 e^eps0 / M,  e' = ln(1 + a + c),
       eps_r = ln(1 + (1 - e^-eps0) / (1 + e^(-eps0 - e')) (a + c)).

   Otherwise no amplification is claimed: eps_r = eps0 (one message depends on the record).
   This form is never smaller than the one printed in the FOCS version of Theorem 3.1 and
   restated by Lowy & Razaviyayn (ICLR 2023, Thm D.5, eq. 21), eps_r =
   ln(1 + (e^eps0 - 1)/(e^eps0 + 1) (a + c)) valid for eps0 <= ln(M / (16 ln(2/delta_s))): its
   factor (1 - e^-eps0)/(1 + e^(-eps0 - e')) exceeds (e^eps0 - 1)/(e^eps0 + 1) and its validity
   condition is stricter. privrec used the printed form until a privacy audit: at M = 1000 silos,
   R = 100 rounds, (eps, delta) = (1, 1e-5) the noise it calibrated gives total eps 1.365 under
   the reference form, not the 0.999 it reported. We take the larger of the two (safe whichever
   is the corrected statement).
3. Over R rounds: advanced composition (Dwork, Rothblum, Vadhan 2010; Dwork-Roth Thm 3.20),
   eps = sqrt(2 R ln(1/delta')) eps_r + R eps_r (e^eps_r - 1), delta = R delta_r + delta'.
   (Not the optimal composition of Kairouz-Oh-Viswanath, which would be tighter.)
   delta is split as delta' = delta/2, delta_s = delta/(4R), delta0 = delta/(6 R M (e^eps + 1)),
   which keeps R delta_r + delta' <= delta whenever eps_r <= eps.

The neighbouring relation is replace-one (one record of one silo replaced), as FMT21's and the
paper's shuffle-DP definition. The noise multiplier z is the smallest (bisection) meeting the
target (eps, delta). Every silo's messages are also recorded in its own ledger (the local,
un-amplified ISRL-DP guarantee of its transcript, replace-one, RDP accountant; much weaker).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import norm

from ..._validation import check_delta, check_epsilon, check_int, check_positive
from ._common import FederatedResult, RunOptions, RunSettings, finish, project_ball, setup, step_schedule
from .channel import SiloChannel
from .silos import Silo

if TYPE_CHECKING:
    from typing import Unpack

SHUFFLE_BOUND = (
    "FMT21 Thm 3.1 (closed form of the authors' reference implementation) with the approximate-DP "
    "extension Thm 3.8 per round + Dwork-Rothblum-Vadhan advanced composition over rounds"
)


def fmt_shuffle_epsilon(eps0: float, n_messages: int, delta_s: float) -> float:
    """Per-round amplified epsilon of ``n_messages`` shuffled eps0-DP local randomizers.

    FMT21 Theorem 3.1 in the conservative closed form of the authors' reference implementation
    (see the module docstring); returns ``eps0`` (no amplification claimed) outside its range
    eps0 <= ln(n / (16 ln(4 / delta_s))).
    """
    M = check_int(n_messages, "n_messages", minimum=1)
    delta_s = check_delta(delta_s, "delta_s")
    eps0 = check_positive(eps0, "eps0", allow_zero=True)
    threshold = M / (16.0 * math.log(4.0 / delta_s))
    if threshold <= 1.0 or eps0 > math.log(threshold):
        return eps0  # outside the theorem's range: claim no amplification
    e = math.exp(eps0)
    a = 8.0 * math.sqrt(e * math.log(4.0 / delta_s) / M)
    c = 8.0 * e / M
    e_prime = math.log1p(a + c)
    factor = -math.expm1(-eps0) / (1.0 + math.exp(-eps0 - e_prime))
    return min(eps0, math.log1p(factor * (a + c)))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon(delta) of one Gaussian mechanism with multiplier z (mu-GDP with mu = 1/z):
    the smallest eps with Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) <= delta (Balle-Wang 2018)."""
    z = check_positive(noise_multiplier, "noise_multiplier")
    delta = check_delta(delta)
    mu = 1.0 / z

    def excess(e):
        return norm.cdf(-e / mu + mu / 2) - math.exp(min(e, 700.0) + norm.logcdf(-e / mu - mu / 2)) - delta

    if excess(0.0) <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while excess(hi) > 0:
        lo, hi = hi, 2 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return hi


def advanced_composition(eps_r: float, rounds: int, delta_prime: float) -> float:
    """Dwork-Rothblum-Vadhan: eps = sqrt(2 R ln(1/delta')) eps_r + R eps_r (e^eps_r - 1)."""
    return math.sqrt(2.0 * rounds * math.log(1.0 / delta_prime)) * eps_r + rounds * eps_r * math.expm1(eps_r)


def shuffle_guarantee(noise_multiplier: float, n_messages: int, rounds: int, epsilon: float, delta: float) -> dict:
    """(eps, delta) of R shuffled rounds of M Gaussian local randomizers (see the module docstring).

    ``epsilon`` is the target; it only enters through the delta split (delta0 uses e^epsilon).
    """
    R = check_int(rounds, "rounds", minimum=1)
    M = check_int(n_messages, "n_messages", minimum=1)
    delta_prime = delta / 2.0
    delta_s = delta / (4.0 * R)
    delta0 = delta / (6.0 * R * M * (math.exp(min(epsilon, 700.0)) + 1.0))
    eps0 = gaussian_epsilon(noise_multiplier, delta0)
    eps_r = fmt_shuffle_epsilon(eps0, M, delta_s)
    eps = advanced_composition(eps_r, R, delta_prime)
    delta_r = delta_s + (math.exp(min(eps_r, 700.0)) + 1.0) * (1.0 + math.exp(-eps0) / 2.0) * M * delta0
    return dict(
        epsilon=eps,
        delta=R * delta_r + delta_prime,
        eps0=eps0,
        delta0=delta0,
        eps_round=eps_r,
        delta_round=delta_r,
        amplified=eps_r < eps0,
        rounds=R,
        n_messages=M,
        neighboring="replace_one",
        bound=SHUFFLE_BOUND,
        source="hand-derived closed forms (not computed by dp_accounting)",
    )


def calibrate_shuffle(epsilon: float, delta: float, n_messages: int, rounds: int) -> float:
    """Smallest noise multiplier (bisection, 0.5% relative) whose shuffle guarantee meets (eps, delta)."""
    eps = check_epsilon(epsilon, allow_inf=False)
    delta = check_delta(delta)

    def ok(z):
        g = shuffle_guarantee(z, n_messages, rounds, eps, delta)
        return g["epsilon"] <= eps and g["delta"] <= delta

    hi = 1.0
    while not ok(hi):
        hi *= 2.0
        if hi > 1e6:
            raise ValueError("cannot meet the shuffle target with noise multiplier <= 1e6")
    lo = hi / 2.0
    while ok(lo) and lo > 1e-6:
        hi, lo = lo, lo / 2.0
    while hi - lo > 0.005 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def shuffled_mb_sgd(
    silos,
    loss,
    *,
    rounds: int,
    step_size,
    clip: float,
    epsilon: float,
    delta: float,
    **options: Unpack[RunOptions],
) -> FederatedResult:
    """Shuffled MB-SGD: K = 1 record per available silo per round, M_r = M fixed, Gaussian local noise.

    ``(epsilon, delta)`` is the shuffle-model target (record-level, for the whole federation);
    ``clip`` the per-example gradient clip L. ``options``: the run options of :class:`RunOptions`
    (``n_available`` must be a fixed M; ``random_state`` also drives the shuffle).
    """
    run = RunSettings.resolve("shuffled_mb_sgd", options, RunOptions)
    silos, rng, avail, theta = setup(silos, loss, run)
    if not avail.fixed:
        raise ValueError("shuffled MB-SGD needs a fixed number of available silos M")
    R = check_int(rounds, "rounds", minimum=1)
    eps = check_epsilon(epsilon, allow_inf=False)
    delta = check_delta(delta)
    M = avail.lo
    z = calibrate_shuffle(eps, delta, M, R)
    chans = []
    for s in silos:
        local = Silo(s.X, s.y, eps, s.delta, s.name)
        chans.append(SiloChannel(local, loss, clip, 1, R, "without_replacement", rng=rng, noise_multiplier=z))
    eta = step_schedule(step_size)
    l2 = getattr(loss, "l2", 0.0)
    history: list[tuple[int, float]] = []
    avg = np.zeros_like(theta)
    for r in range(R):
        S = avail.draw(rng)
        msgs = [chans[i].gradient(theta) for i in S]
        rng.shuffle(msgs)  # the server only sees the shuffled multiset
        theta = project_ball(theta - eta(r) * (np.mean(msgs, axis=0) + l2 * theta), run.radius)
        avg += (theta - avg) / (r + 1)
        run.record(history, r + 1, loss, avg, silos)
    guarantee = shuffle_guarantee(z, M, R, eps, delta)
    return finish(
        avg,
        chans,
        "shuffled MB-SGD: Gaussian local randomizer (local, un-amplified; the "
        "shuffle-model guarantee is meta['shuffle'])",
        history,
        ledger_meta=dict(shuffle=guarantee),
        algorithm="shuffled_mb_sgd",
        rounds=R,
        shuffle=guarantee,
    )
