"""Noise calibration for the federated algorithms: the paper's closed forms and the accountant.

Spec: ../shared/spec/002-isrl-dp-federated.md, A1 ("Theory calibration", "Experiments use the
moments accountant"), A3 (one-pass sigma^2), "Baselines" (ISRL-DP Local SGD), unit facts 1-3.

privrec's default is the accountant: per silo, the smallest noise multiplier z whose composed
events (one subsampled Gaussian per message, composed over every message the silo may send)
meet the silo's (eps_i, delta_i), found by :func:`privrec.privacy.calibrate_noise_multiplier`.
The closed forms below are exposed for reproduction and comparison; when an algorithm is asked
for ``noise="paper"`` it uses ``max(paper sigma, accountant sigma)`` so the reported epsilon can
never exceed the budget even where a closed form is too optimistic for the accountant.

Sampling schemes and neighbouring relations (what the silo's ledger is declared with):

* ``"poisson"`` (default): every record joins the batch independently with probability K/n_i;
  relation add-or-remove-one; the L2 sensitivity of the clipped gradient *sum* is ``clip``.
* ``"without_replacement"``: a uniform K-subset; relation replace-one (the paper's ISRL-DP
  relation; dp_accounting supports this sampling only under replace-one); sensitivity ``2 clip``.
* ``"disjoint"`` (one pass): a random partition into batches of K, every record used once;
  relation replace-one, sensitivity ``2 clip``; by parallel composition the whole pass costs one
  Gaussian mechanism regardless of the number of rounds.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ..._validation import check_delta, check_epsilon, check_int, check_positive
from ...privacy import (
    DEFAULT_RDP_ORDERS,
    calibrate_noise_multiplier,
    fixed_size_subsampled_gaussian_event,
    gaussian_event,
    poisson_subsampled_gaussian_event,
)

# Calibration runs the accountant at a subset of the ledger's RDP orders: the integers 2..63,
# where dp_accounting's subsampled-Gaussian RDP is fast (fractional orders need a slow series).
# The RDP -> (eps, delta) conversion minimises over orders, so the ledger's epsilon over all its
# orders is <= the epsilon at this subset <= the target: the subset can only add noise (a little,
# for eps above ~10 where orders below 2 become optimal), never remove it.
CALIBRATION_ORDERS = (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0, 14.0, 16.0, 20.0, 24.0, 28.0, 32.0, 40.0,
                      48.0, 56.0, 63.0)
if not set(CALIBRATION_ORDERS) <= set(DEFAULT_RDP_ORDERS):  # pragma: no cover - guards the argument above
    raise RuntimeError("calibration orders must be a subset of the ledger's RDP orders")

SAMPLING_SCHEMES = ("poisson", "without_replacement", "disjoint")
NEIGHBORING = {"poisson": "add_or_remove_one", "without_replacement": "replace_one", "disjoint": "replace_one"}


def sensitivity_factor(sampling: str) -> float:
    """L2 sensitivity of a clipped-gradient sum, in units of the clip norm, under the scheme's relation."""
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
    """Smallest noise multiplier meeting (epsilon, delta) for ``steps`` messages (RDP accountant)."""
    _check_sampling(sampling)
    return calibrate_noise_multiplier(
        epsilon, delta, lambda z: message_event(sampling, n, batch, z, steps), orders=CALIBRATION_ORDERS,
        neighboring=NEIGHBORING[sampling],
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


def paper_local_sgd_sigma2(lipschitz: float, n: int, rounds: int, local_steps: int, epsilon: float,
                           delta: float) -> float:
    """ISRL-DP Local SGD baseline: sigma^2 = 8 L^2 R K ln(1/delta) / (eps^2 n^2) (K x MB-SGD's)."""
    K = check_int(local_steps, "local_steps", minimum=1)
    return K * paper_moments_sigma2(lipschitz, n, rounds, epsilon, delta)


def _args(lipschitz, n, rounds, epsilon, delta):
    return (check_positive(lipschitz, "lipschitz"), check_int(n, "n", minimum=1),
            check_int(rounds, "rounds", minimum=1), check_epsilon(epsilon, allow_inf=False), check_delta(delta))
