"""Noise mechanisms that return the noisy value *and* the ``dp_accounting`` DpEvent it costs.

A mechanism is declared by its sensitivity and noise multiplier; the noise standard deviation
is ``noise_multiplier * sensitivity``. The event depends only on the noise multiplier (that is
what the accountant needs), so callers record ``result.event`` in a :class:`PrivacyLedger`.

Conventions (Krichene et al., ICML 2023, Sec. 3.1): a release with L2 sensitivity ``k`` and Gaussian
std ``sigma`` is the Gaussian mechanism with noise multiplier ``sigma / k``, i.e.
(alpha, alpha k^2 / (2 sigma^2))-RDP. A noise multiplier of 0 means "no noise": the event is
``NonPrivateDpEvent`` (epsilon = inf), so an accidental noiseless release can never be reported as
private.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dp_accounting
import numpy as np

from .._validation import check_int, check_positive
from .rng import make_rng


@dataclass(frozen=True)
class Release:
    """A mechanism's output: the noisy value, its DP event, and the noise std that was used."""

    value: np.ndarray
    event: dp_accounting.DpEvent
    noise_std: float


def gaussian_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    """DpEvent of one Gaussian mechanism; multiplier 0 -> NonPrivateDpEvent, inf -> NoOpDpEvent."""
    z = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True, allow_inf=True)
    if z == 0:
        return dp_accounting.NonPrivateDpEvent()
    if math.isinf(z):
        return dp_accounting.NoOpDpEvent()
    return dp_accounting.GaussianDpEvent(z)


def laplace_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    """DpEvent of one Laplace mechanism (scale = noise_multiplier * L1 sensitivity)."""
    z = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True, allow_inf=True)
    if z == 0:
        return dp_accounting.NonPrivateDpEvent()
    if math.isinf(z):
        return dp_accounting.NoOpDpEvent()
    return dp_accounting.LaplaceDpEvent(z)


def gaussian_noise(shape, std: float, rng=None, dtype=np.float32) -> np.ndarray:
    """iid N(0, std^2) noise of the given shape (zeros when std == 0)."""
    if std == 0:
        return np.zeros(shape, dtype=dtype)
    rng = make_rng(rng)
    noise = rng.standard_normal(shape, dtype=_std_dtype(dtype))
    noise *= std
    return noise.astype(dtype, copy=False)


def _std_dtype(dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def symmetric_gaussian_noise(batch_shape, d: int, std: float, rng=None, dtype=np.float32) -> np.ndarray:
    """Symmetric d x d Gaussian noise matrices: iid N(0, std^2) upper triangle (with diagonal), mirrored.

    Shape ``(*batch_shape, d, d)``. This is the Xi_i of SSP (Krichene et al. 2023, Algorithm 1).
    """
    batch_shape = tuple(np.atleast_1d(batch_shape)) if batch_shape != () else ()
    if std == 0:
        return np.zeros((*batch_shape, d, d), dtype=dtype)
    rng = make_rng(rng)
    iu, ju = np.triu_indices(d)
    upper = rng.standard_normal((*batch_shape, iu.size), dtype=_std_dtype(dtype)) * std
    out = np.empty((*batch_shape, d, d), dtype=dtype)
    out[..., iu, ju] = upper
    out[..., ju, iu] = upper
    return out


def gaussian_mechanism(
    value, sensitivity: float, noise_multiplier: float, rng=None, symmetric: bool = False, dtype=None
) -> Release:
    """Add Gaussian noise with std ``noise_multiplier * sensitivity`` to ``value``.

    ``sensitivity`` is the L2 sensitivity of the *whole* released array under the neighbouring
    relation (removal of one user). With ``symmetric=True`` the last two axes are square matrices
    and the noise is symmetric (upper triangle iid, mirrored), as in SSP.
    """
    sens = check_positive(sensitivity, "sensitivity", allow_zero=True)
    z = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True, allow_inf=False)
    value = np.asarray(value)
    dtype = dtype or (value.dtype if value.dtype.kind == "f" else np.float64)
    std = z * sens
    if symmetric:
        if value.ndim < 2 or value.shape[-1] != value.shape[-2]:
            raise ValueError(f"symmetric noise needs square matrices in the last two axes, got shape {value.shape}")
        noise = symmetric_gaussian_noise(value.shape[:-2], value.shape[-1], std, rng, dtype)
    else:
        noise = gaussian_noise(value.shape, std, rng, dtype)
    return Release(value.astype(dtype, copy=False) + noise, gaussian_event(z), std)


def laplace_mechanism(value, l1_sensitivity: float, noise_multiplier: float, rng=None, dtype=None) -> Release:
    """Add iid Laplace noise of scale ``noise_multiplier * l1_sensitivity`` (epsilon = 1/noise_multiplier)."""
    sens = check_positive(l1_sensitivity, "l1_sensitivity", allow_zero=True)
    z = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True)
    value = np.asarray(value)
    dtype = dtype or (value.dtype if value.dtype.kind == "f" else np.float64)
    scale = z * sens
    rng = make_rng(rng)
    noise = rng.laplace(0.0, scale, size=value.shape) if scale > 0 else np.zeros(value.shape)
    return Release((value + noise).astype(dtype, copy=False), laplace_event(z), scale * math.sqrt(2.0))


def laplace_for_epsilon(epsilon: float) -> float:
    """Laplace noise multiplier giving pure epsilon-DP (scale = L1 sensitivity / epsilon)."""
    return 1.0 / check_positive(epsilon, "epsilon")


def poisson_subsampled_gaussian_event(sampling_probability: float, noise_multiplier: float, steps: int = 1):
    """Event of ``steps`` rounds of Poisson-subsampled Gaussian (DP-SGD with Poisson sampling)."""
    q = float(sampling_probability)
    if not (0.0 < q <= 1.0):
        raise ValueError(f"sampling_probability must be in (0, 1], got {sampling_probability!r}")
    steps = check_int(steps, "steps", minimum=1)
    inner = gaussian_event(noise_multiplier)
    if q < 1.0:
        inner = dp_accounting.PoissonSampledDpEvent(q, inner)
    return inner if steps == 1 else dp_accounting.SelfComposedDpEvent(inner, steps)


def fixed_size_subsampled_gaussian_event(
    sample_size: int, population_size: int, noise_multiplier: float, steps: int = 1
):
    """Event of ``steps`` rounds of a Gaussian on a uniformly sampled fixed-size subset (no replacement).

    Note: dp_accounting's RDP accountant supports sampling without replacement only under the
    REPLACE_ONE neighbouring relation; use ``PrivacyLedger(neighboring="replace_one")`` for it.
    """
    n = check_int(population_size, "population_size", minimum=1)
    b = check_int(sample_size, "sample_size", minimum=1)
    if b > n:
        raise ValueError(f"sample_size ({b}) must not exceed population_size ({n})")
    steps = check_int(steps, "steps", minimum=1)
    inner = gaussian_event(noise_multiplier)
    if b < n:
        inner = dp_accounting.SampledWithoutReplacementDpEvent(n, b, inner)
    return inner if steps == 1 else dp_accounting.SelfComposedDpEvent(inner, steps)


def compose(events) -> dp_accounting.DpEvent:
    """Compose several events into one ``ComposedDpEvent`` (a single event is returned unchanged)."""
    events = list(events)
    if len(events) == 1:
        return events[0]
    return dp_accounting.ComposedDpEvent(events)
