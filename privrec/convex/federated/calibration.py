"""Noise calibration for the federated algorithms: the paper's closed forms and the accountant.

Lowy & Razaviyayn (ICLR 2023): the theory calibration of Noisy ISRL-DP MB-SGD (Algorithm 2,
Theorem D.1), the moments-accountant calibration of the experiments (App. I), the one-pass
sigma^2 of Accelerated Noisy MB-SGD (Algorithm 1, Sec. 3 and App. E.2) and ISRL-DP Local SGD
(App. I).

privrec's default is the accountant: per silo, the smallest noise multiplier z whose composed
events (one subsampled Gaussian per message, composed over every message the silo may send)
meet the silo's (eps_i, delta_i) under replace-one, found by bisection with the scheme's
accountant (:func:`privrec.privacy.calibrate_noise_multiplier` for RDP, :func:`_calibrate_pld`).
The closed forms below are exposed for reproduction and comparison; when an algorithm is asked
for ``noise="paper"`` it uses ``max(paper sigma, accountant sigma)`` so the reported epsilon can
never exceed the budget even where a closed form is too optimistic for the accountant.

Neighbouring relation. Lowy & Razaviyayn (Definition 2) define ISRL-DP with one record of a silo
*replaced* (replace-one), so every sampling scheme below is calibrated and reported under replace-one;
each silo's ledger is ``PrivacyLedger(neighboring="replace_one")`` and its report says so
(``report["neighboring"]``). Replace-one epsilon can be about twice the add/remove epsilon of the
same noise: privrec used to calibrate Poisson silos under add/remove, e.g. n = 250, K = 25,
R = 35, eps = 1, delta = 1/n^2 got multiplier 2.72, whose replace-one epsilon is 1.66; it is
now 4.30 (found by a privacy audit).

* ``"poisson"`` (default): every record joins the batch independently with probability K/n_i.
  dp_accounting's RDP accountant does not support Poisson sampling under replace-one, so these
  silos are calibrated and reported with its **PLD accountant** (``accountant="pld"``, pessimistic
  discretisation), which models a replacement under Poisson sampling exactly as the pair
  ``q N(+C) + (1-q) N(0)`` vs ``q N(-C) + (1-q) N(0)`` (the replaced and the replacing record
  each contribute at most C = ``clip`` in L2, so their contributions differ by up to 2C).
  The event's noise multiplier is therefore std / C (``sensitivity_factor = 1``) -- the PLD
  convention, in which REPLACE_ONE doubles the offset. The PLD accountant is called directly
  (:func:`pld_replace_one_epsilon`, grid :data:`PLD_INTERVAL`, pessimistic), never through an RDP
  evaluation; recompute such a report with :func:`privrec.convex.federated.report_epsilon`.
* ``"without_replacement"``: a uniform K-subset; RDP accountant (dp_accounting supports this
  sampling only under replace-one); the noise multiplier is std / (2 clip), the replace-one L2
  sensitivity of the clipped-gradient sum (``sensitivity_factor = 2``), the RDP convention.
* ``"disjoint"`` (one pass): a random partition into batches of K, every record used once;
  relation replace-one, sensitivity ``2 clip``, RDP; by parallel composition the whole pass
  costs one Gaussian mechanism regardless of the number of rounds.

(dp_accounting's two accountants read a plain ``GaussianDpEvent`` under REPLACE_ONE differently:
RDP as std / (replace sensitivity), PLD as std / (half of it). privrec therefore fixes one
accountant per scheme, states it in the report (``report["accountant"]``) and never mixes them;
the other accountant could only over-state epsilon for the RDP schemes.)
"""

from __future__ import annotations

import math
from functools import lru_cache

import dp_accounting
from dp_accounting import pld
from dp_accounting.privacy_accountant import NeighboringRelation

from ..._validation import check_delta, check_epsilon, check_int, check_positive
from ...privacy import (
    DEFAULT_RDP_ORDERS,
    calibrate_noise_multiplier,
    fixed_size_subsampled_gaussian_event,
    gaussian_event,
    poisson_subsampled_gaussian_event,
)
from ...privacy.calibration import EPSILON_MEMO, event_key

# Calibration runs the accountant at a subset of the ledger's RDP orders: the integers 2..63,
# where dp_accounting's subsampled-Gaussian RDP is fast (fractional orders need a slow series).
# The RDP -> (eps, delta) conversion minimises over orders, so the ledger's epsilon over all its
# orders is <= the epsilon at this subset <= the target: the subset can only add noise (a little,
# for eps above ~10 where orders below 2 become optimal), never remove it.
CALIBRATION_ORDERS = (
    2.0,
    3.0,
    4.0,
    5.0,
    6.0,
    7.0,
    8.0,
    10.0,
    12.0,
    14.0,
    16.0,
    20.0,
    24.0,
    28.0,
    32.0,
    40.0,
    48.0,
    56.0,
    63.0,
)
if not set(CALIBRATION_ORDERS) <= set(DEFAULT_RDP_ORDERS):  # pragma: no cover - guards the argument above
    raise RuntimeError("calibration orders must be a subset of the ledger's RDP orders")

SAMPLING_SCHEMES = ("poisson", "without_replacement", "disjoint")
# ISRL-DP (Lowy & Razaviyayn, Definition 2) is record-level DP under replace-one for every scheme
# (see the module docstring).
NEIGHBORING = {"poisson": "replace_one", "without_replacement": "replace_one", "disjoint": "replace_one"}
# The accountant each scheme is calibrated and reported with: the RDP accountant cannot compose a
# Poisson-sampled event under replace-one, the PLD accountant can.
ACCOUNTANT = {"poisson": "pld", "without_replacement": "rdp", "disjoint": "rdp"}


# Value-discretisation interval of the replace-one PLD accountant. dp_accounting's PLD is
# pessimistic (losses are rounded up onto the grid), so the interval only loosens the bound.
PLD_INTERVAL = 1e-3


def pld_replace_one_epsilon(event: dp_accounting.DpEvent, delta: float, interval: float = PLD_INTERVAL) -> float:
    """epsilon(delta) of ``event`` under replace-one with dp_accounting's PLD accountant (pessimistic).

    Called directly (not through :func:`privrec.privacy.epsilon_of_event`) so that no RDP
    evaluation is attempted first: RDP cannot compose Poisson-sampled events under replace-one.
    Memoised for the process on all three inputs (the event's exact structure, delta, interval) in
    :data:`privrec.privacy.calibration.EPSILON_MEMO`.
    """
    delta = check_delta(delta)
    interval = float(interval)

    def compute() -> float:
        acc = pld.PLDAccountant(
            neighboring_relation=NeighboringRelation.REPLACE_ONE, value_discretization_interval=interval
        )
        acc.compose(event)
        return float(acc.get_epsilon(delta))

    key = event_key(event)
    return EPSILON_MEMO.get(None if key is None else ("pld_replace_one", key, delta.hex(), interval.hex()), compute)


def _calibrate_pld(epsilon: float, delta: float, build, rtol: float = 0.005) -> float:
    """Smallest multiplier z (bisection, relative tolerance ``rtol`` on epsilon) with
    replace-one PLD epsilon(build(z)) <= epsilon; the result never exceeds the target."""
    return calibrate_noise_multiplier(
        epsilon, delta, build, rtol=rtol, epsilon_fn=lambda event: pld_replace_one_epsilon(event, delta)
    )


def sensitivity_factor(sampling: str) -> float:
    """Noise-multiplier unit of a scheme's events, in clip norms (std = multiplier x factor x clip).

    2 for the RDP schemes (the replace-one L2 sensitivity of a clipped-gradient sum); 1 for
    ``"poisson"``, whose PLD REPLACE_ONE model already places the replaced and the replacing
    record at +-clip (a replace-one distance of 2 clip).
    """
    _check_sampling(sampling)
    return 1.0 if sampling == "poisson" else 2.0


def _check_sampling(sampling: str) -> str:
    if sampling not in SAMPLING_SCHEMES:
        raise ValueError(f"sampling must be one of {SAMPLING_SCHEMES}, got {sampling!r}")
    return sampling


def message_event(sampling: str, n: int, batch: int, noise_multiplier: float, steps: int = 1):
    """DpEvent of ``steps`` messages of one silo (noise std = multiplier x sum sensitivity)."""
    _check_sampling(sampling)
    if sampling == "disjoint":
        return gaussian_event(noise_multiplier)  # parallel composition over disjoint batches
    if sampling == "poisson":
        return poisson_subsampled_gaussian_event(min(1.0, batch / n), noise_multiplier, steps)
    return fixed_size_subsampled_gaussian_event(min(batch, n), n, noise_multiplier, steps)


@lru_cache(maxsize=512)
def accountant_multiplier(epsilon: float, delta: float, sampling: str, n: int, batch: int, steps: int) -> float:
    """Smallest noise multiplier meeting (epsilon, delta) under replace-one for ``steps`` messages.

    RDP accountant (at :data:`CALIBRATION_ORDERS`) for the fixed-size schemes, PLD accountant for
    ``"poisson"`` (see the module docstring); the same accountant reports the silo's epsilon.
    """
    _check_sampling(sampling)
    build = lambda z: message_event(sampling, n, batch, z, steps)
    if ACCOUNTANT[sampling] == "pld":
        return _calibrate_pld(epsilon, delta, build)
    return calibrate_noise_multiplier(
        epsilon, delta, build, accountant="rdp", orders=CALIBRATION_ORDERS, neighboring=NEIGHBORING[sampling]
    )


# ------------------------------------------------------------------------------------------
# The paper's closed forms (std of the noise added to a silo's *mean* gradient message).
# ------------------------------------------------------------------------------------------


def paper_theory_sigma2(lipschitz: float, n: int, rounds: int, epsilon: float, delta: float) -> float:
    """A1 theory: sigma^2 = 256 L^2 R ln(2.5 R / delta) ln(2 / delta) / (n^2 eps^2) (fact 1: ~7.18217)."""
    L, n, R, eps, delta = _args(lipschitz, n, rounds, epsilon, delta)
    return 256.0 * L**2 * R * math.log(2.5 * R / delta) * math.log(2.0 / delta) / (n**2 * eps**2)


def paper_min_batch(n: int, rounds: int, epsilon: float, delta: float) -> float:
    """A1 theory: minimum batch K >= eps n / (4 sqrt(2 R ln(2 / delta))) (fact 1: ~4.641)."""
    _, n, R, eps, delta = _args(1.0, n, rounds, epsilon, delta)
    return eps * n / (4.0 * math.sqrt(2.0 * R * math.log(2.0 / delta)))


def paper_one_pass_sigma2(lipschitz: float, batch: int, epsilon: float, delta: float) -> float:
    """A3 one pass: sigma^2 = 32 L^2 ln(1.25 / delta) / (eps^2 K^2), independent of R (fact 2)."""
    L = check_positive(lipschitz, "lipschitz")
    K = check_int(batch, "batch_size", minimum=1)
    eps = check_epsilon(epsilon, allow_inf=False)
    delta = check_delta(delta)
    return 32.0 * L**2 * math.log(1.25 / delta) / (eps**2 * K**2)


def paper_moments_sigma2(lipschitz: float, n: int, rounds: int, epsilon: float, delta: float) -> float:
    """Experiments: sigma^2 = 8 L^2 ln(1/delta) R / (n^2 eps^2) (fact 3: 1.15643e-3 L^2 for MNIST)."""
    L, n, R, eps, delta = _args(lipschitz, n, rounds, epsilon, delta)
    return 8.0 * L**2 * math.log(1.0 / delta) * R / (n**2 * eps**2)


def paper_moments_batch(n: int, rounds: int, epsilon: float) -> float:
    """Experiments: K = n sqrt(eps) / (2 sqrt(R)) (fact 3: ~128.1 for MNIST)."""
    n = check_int(n, "n", minimum=1)
    R = check_int(rounds, "rounds", minimum=1)
    eps = check_epsilon(epsilon, allow_inf=False)
    return n * math.sqrt(eps) / (2.0 * math.sqrt(R))


def paper_local_sgd_sigma2(
    lipschitz: float, n: int, rounds: int, local_steps: int, epsilon: float, delta: float
) -> float:
    """ISRL-DP Local SGD baseline: sigma^2 = 8 L^2 R K ln(1/delta) / (eps^2 n^2) (K x MB-SGD's)."""
    K = check_int(local_steps, "local_steps", minimum=1)
    return K * paper_moments_sigma2(lipschitz, n, rounds, epsilon, delta)


def _args(lipschitz, n, rounds, epsilon, delta):
    return (
        check_positive(lipschitz, "lipschitz"),
        check_int(n, "n", minimum=1),
        check_int(rounds, "rounds", minimum=1),
        check_epsilon(epsilon, allow_inf=False),
        check_delta(delta),
    )
