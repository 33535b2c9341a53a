"""What a :class:`~privrec.convex.joint.JointDPSGD` fit spends (see that module's docstring for the
argument): the DpEvent of one noisy step and of a fit of T steps, the accountant-calibrated noise
multiplier, and Huang et al.'s own formulas (their sigma, group privacy, the user-level budget),
reported for comparison and never used as the privacy claim. Importable from
:mod:`privrec.convex.joint` too.
"""

from __future__ import annotations

import functools
import math

import dp_accounting

from .._validation import check_delta, check_epsilon, check_int, check_positive
from ..privacy import calibrate_noise_multiplier, fixed_size_subsampled_gaussian_event, gaussian_event

# -------------------------------------------------------------------------------------------------
# Formulas of Huang et al. (reported, never used as the privacy claim)
# -------------------------------------------------------------------------------------------------


def paper_noise_std(
    lipschitz: float, n_steps: int, epsilon: float, delta: float, records_per_owner: int, n_owners: int
) -> float:
    """sigma = L sqrt(T ln(1/delta)) / (eps m n), Huang et al., Algorithm 1, line 2 (constants unspecified).

    privrec's estimators calibrate sigma with the accountant instead; this is for comparison.
    """
    L = check_positive(lipschitz, "lipschitz")
    T = check_int(n_steps, "n_steps", minimum=1)
    eps = check_epsilon(epsilon, allow_inf=False)
    d = check_delta(delta)
    m = check_int(records_per_owner, "records_per_owner", minimum=1)
    n = check_int(n_owners, "n_owners", minimum=1)
    return L * math.sqrt(T * math.log(1.0 / d)) / (eps * m * n)


def group_privacy(epsilon: float, delta: float, k: int) -> tuple[float, float]:
    """Group privacy for groups of k: (eps, delta) -> (k eps, k e^{k eps} delta) (Huang et al., Lemma 3.6)."""
    eps = check_epsilon(epsilon, allow_inf=False)
    d = check_delta(delta)
    k = check_int(k, "k", minimum=1)
    return k * eps, k * math.exp(k * eps) * d


def user_level_budget(
    epsilon: float, delta: float, records_per_user: int, records_per_owner: int
) -> tuple[float, float]:
    """Record-level budget giving user-level (eps, delta): eps' = eps r/m, delta' = delta r/(m e^eps).

    Huang et al., Sec. 3.1.2 (user-level joint DP). Group privacy with k = m/r maps (eps', delta') back to
    (eps, delta).
    """
    eps = check_epsilon(epsilon, allow_inf=False)
    d = check_delta(delta)
    r = check_int(records_per_user, "records_per_user", minimum=1)
    m = check_int(records_per_owner, "records_per_owner", minimum=1)
    if r > m:
        raise ValueError(f"records_per_user ({r}) cannot exceed records_per_owner ({m})")
    return eps * r / m, d * r / (m * math.exp(eps))


def _step_event(regime: str, z: float, n_owners: int, B: int):
    """DpEvent of one noisy step (one noise draw) of a private regime; see the module docstring.

    ``joint``: a plain Gaussian (multiplier z = sigma / 2L) -- the sampled owners are revealed by
    the other owners' unnoised personal blocks, so no amplification by sampling.
    ``full``: the Gaussian on a uniform B-subset of the n owners, sampled without replacement
    (every coordinate is noised every step, so the sample stays hidden).
    """
    if regime == "joint":
        return gaussian_event(z)
    if regime == "full":
        return fixed_size_subsampled_gaussian_event(B, n_owners, z, 1)
    raise ValueError(f"regime {regime!r} draws no noise")


def _fit_event(regime: str, z: float, n_owners: int, B: int, T: int):
    """The event a fit of T noisy steps records: the per-step event self-composed T times."""
    return dp_accounting.SelfComposedDpEvent(_step_event(regime, z, n_owners, B), T)


@functools.lru_cache(maxsize=256)
def _calibrated_multiplier(regime: str, epsilon: float, delta: float, n_owners: int, B: int, T: int) -> float:
    """Accountant-calibrated multiplier for the exact event a fit records (cached: a pure function)."""
    return calibrate_noise_multiplier(
        epsilon, delta, lambda z: _fit_event(regime, z, n_owners, B, T), neighboring="replace_one"
    )
