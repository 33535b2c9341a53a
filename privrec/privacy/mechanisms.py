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
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import numpy as np

from .._validation import check_int, check_positive
from .rng import make_rng


@dataclass
class Release:
    """The one release type: a noisy ``value``, the labelled events it cost, and diagnostics.

    ``events`` is a list of ``(label, DpEvent, meta)``; ``meta`` (sensitivity, noise std,
    multiplier, budget) goes into the public privacy report. ``info`` holds diagnostics that may
    depend on private data and must not be published. Mechanisms, the private pre-processing
    statistics (:mod:`privrec.allocation`) and the solvers (:mod:`privrec.solvers`, where
    ``params`` is the value) all return it.
    """

    value: Any
    events: list = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def params(self) -> Any:
        """The value under the name solvers use (parameters of the m tasks)."""
        return self.value

    @property
    def event(self) -> dp_accounting.DpEvent:
        """The composed event of this release (``NoOpDpEvent`` when it has none)."""
        return compose(e for _, e, _ in self.events)

    @property
    def noise_std(self) -> float:
        """Noise std of a single-event release (the first event's, otherwise)."""
        return float(self.events[0][2].get("noise_std", 0.0)) if self.events else 0.0

    def record(self, ledger, prefix: str = "") -> None:
        """Record every event in ``ledger`` (labels prefixed, e.g. ``"ALS step 3: "``)."""
        for label, event, meta in self.events:
            ledger.record(prefix + label, event, **meta)


def _noise_event(noise_multiplier: float, event_type) -> dp_accounting.DpEvent:
    """``event_type(z)``; multiplier 0 -> ``NonPrivateDpEvent`` (no noise), inf -> ``NoOpDpEvent``."""
    z = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True, allow_inf=True)
    if z == 0:
        return dp_accounting.NonPrivateDpEvent()
    if math.isinf(z):
        return dp_accounting.NoOpDpEvent()
    return event_type(z)


def gaussian_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    """DpEvent of one Gaussian mechanism; multiplier 0 -> NonPrivateDpEvent, inf -> NoOpDpEvent."""
    return _noise_event(noise_multiplier, dp_accounting.GaussianDpEvent)


def laplace_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    """DpEvent of one Laplace mechanism (scale = noise_multiplier * L1 sensitivity)."""
    return _noise_event(noise_multiplier, dp_accounting.LaplaceDpEvent)


def gaussian_noise(shape, std: float, rng=None, dtype=np.float32) -> np.ndarray:
    """iid N(0, std^2) noise of the given shape (zeros when std == 0)."""
    if std == 0:
        return np.zeros(shape, dtype=dtype)
    rng = make_rng(rng)
    noise = rng.standard_normal(shape, dtype=_std_dtype(dtype))
    noise *= std
    return noise.astype(dtype, copy=False)


def laplace_noise(shape, scale: float, rng=None, dtype=np.float64) -> np.ndarray:
    """iid Laplace(0, ``scale``) noise of the given shape (zeros when scale == 0)."""
    if scale == 0:
        return np.zeros(shape, dtype=dtype)
    return make_rng(rng).laplace(0.0, scale, size=shape).astype(dtype, copy=False)


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
    value,
    sensitivity: float,
    noise_multiplier: float,
    rng=None,
    symmetric: bool = False,
    dtype=None,
    label: str = "gaussian mechanism",
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
    meta = {"mechanism": "gaussian", "sensitivity": sens, "noise_multiplier": z, "noise_std": std}
    return Release(value.astype(dtype, copy=False) + noise, [(label, gaussian_event(z), meta)])


def laplace_mechanism(
    value, l1_sensitivity: float, noise_multiplier: float, rng=None, dtype=None, label: str = "laplace mechanism"
) -> Release:
    """Add iid Laplace noise of scale ``noise_multiplier * l1_sensitivity`` (epsilon = 1/noise_multiplier)."""
    sens = check_positive(l1_sensitivity, "l1_sensitivity", allow_zero=True)
    z = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True)
    value = np.asarray(value)
    dtype = dtype or (value.dtype if value.dtype.kind == "f" else np.float64)
    scale = z * sens
    rng = make_rng(rng)
    noise = rng.laplace(0.0, scale, size=value.shape) if scale > 0 else np.zeros(value.shape)
    meta = {"mechanism": "laplace", "l1_sensitivity": sens, "noise_multiplier": z, "noise_std": scale * math.sqrt(2.0)}
    return Release((value + noise).astype(dtype, copy=False), [(label, laplace_event(z), meta)])


def add_symmetric_gaussian_noise(G: np.ndarray, std: float, rng) -> None:
    """In place ``G += symmetric_gaussian_noise(G.shape[:-2], d, std, rng, G.dtype)``, same draws.

    Draws exactly what :func:`symmetric_gaussian_noise` draws (the iid upper triangle, row by
    row, in ``G``'s noise precision) from the same generator, so a seeded run is bit-identical;
    it only skips materialising the (m, d, d) noise stack and its two fancy-index scatters (about
    3x faster on the SSP item step; Krichene et al. 2023, Algorithm 1).
    """
    if std == 0:
        return
    d = G.shape[-1]
    upper = make_rng(rng).standard_normal((*G.shape[:-2], d * (d + 1) // 2), dtype=_std_dtype(G.dtype))
    upper *= std
    upper = upper.astype(G.dtype, copy=False)
    s = 0
    for i in range(d):  # row i of the upper triangle holds (i, i), (i, i+1), ..., (i, d-1)
        n = d - i
        G[..., i, i:] += upper[..., s : s + n]
        G[..., i + 1 :, i] += upper[..., s + 1 : s + n]  # the mirrored lower entries (j, i), j > i
        s += n


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
    """Compose events in order with ``dp_accounting.DpEventBuilder`` (runs of equal events become a
    ``SelfComposedDpEvent``; one event is returned unchanged; none gives ``NoOpDpEvent``)."""
    builder = dp_accounting.DpEventBuilder()
    for event in events:
        builder.compose(event)
    return builder.build()
