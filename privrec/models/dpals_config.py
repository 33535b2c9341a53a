"""The resolved settings of one DPALS fit and what every DPALS release states (all public).

:class:`DPALSConfig` is the frozen result of ``DPALS._resolve_config`` (constructor parameters,
scikit-learn's constraint table and the automatic rule :func:`privrec.tuning.auto_config`);
:data:`METHODS` names the algorithms of Krichene et al. (ICML 2023, Alg. 3 with Alg. 1 or 2 and
the allocations of Sec. 4); :data:`RELEASE_STATEMENT` is the neighbouring relation and the public
inputs every privacy report states; :func:`check_scales`, :func:`check_rating_span` and
:func:`check_overflow` turn bad settings or data into one-line errors naming the setting.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields

import numpy as np

from .._validation import MAX_RATING_MAGNITUDE, check_scale

__all__ = [
    "METHODS",
    "RELEASE_STATEMENT",
    "DPALSConfig",
    "check_overflow",
    "check_rating_span",
    "check_scales",
]

#: what every DPALS privacy report states besides its events: the neighbouring relation and what
#: the guarantee treats as public. The number of users shapes the fit (the automatic configuration,
#: the implicit popularity prior = counts / n_users), so it must be public: the consistent relation
#: is zero-out over a public user roster -- neighbouring datasets differ in all of one user's
#: ratings, the user stays on the roster with none. Every sensitivity here is that of removing a
#: user's data (an empty user contributes nothing), so the add/remove Gaussian accounting applies.
RELEASE_STATEMENT = {
    "neighbouring_relation": (
        "user-level zero-out: neighbouring datasets differ in all ratings of one user, whose row stays "
        "on the public user roster (empty); sensitivities are those of removing the user's data"
    ),
    "public": [
        "the user roster (number of users)",
        "the item catalogue (number of items; item ids when declared)",
        "epsilon, delta, the rating range / bound and every setting in config",
    ],
    "released": ["item_factors_", "item_bias_", "global_mean_", "item_counts_", "item_exposure_"],
}

#: method name -> (registered solver name, allocation)
METHODS = {
    "dpals-uniform": ("ssp", "uniform"),
    "dpals-tail": ("ssp", "tail"),
    "ada-dpals": ("ssp", "adaptive"),
    "dpsgd-uniform": ("noisy_gd", "uniform"),
    "dpsgd-tail": ("noisy_gd", "tail"),
    "ada-dpsgd": ("noisy_gd", "adaptive"),
}


@dataclass(frozen=True)
class DPALSConfig:
    """The resolved, validated settings of one DPALS fit (every value public).

    Built by ``DPALS._resolve_config`` from the constructor parameters (constraint table
    ``DPALS._parameter_constraints``) and :func:`auto_config`; ``DPALS.config_`` is its
    :meth:`as_dict`. Field meanings are those of the :class:`DPALS` parameters of the same name;
    ``solver`` is the registered solver name, ``reg`` / ``user_reg`` the item / user ridges,
    ``bias_feature`` the constant feature carrying the item bias (0 = no bias).
    """

    epsilon: float
    delta: float
    solver: str
    allocation: str
    factors: int
    iterations: int
    budget: float
    mu: float
    reg: float
    reg_exponent: float
    user_reg: float
    user_reg_exponent: float
    biases: bool
    popularity_prior: bool
    bias_feature: float
    implicit: bool
    center: bool
    unobserved_weight: float
    max_norm: float
    rating_bound: float
    rating_range: tuple[float, float] | None
    label_bound: float
    item_frac: float | None
    count_fraction: float
    count_sample: int
    mean_ratio: float
    reg_rule: str
    gramian_ratio: float
    global_ratio: float
    gd_iterations: int
    init_scale: float
    user_solver: str
    cg_steps: int
    item_projection: str
    dtype: np.dtype
    accountant: str

    @property
    def private(self) -> bool:
        return not math.isinf(self.epsilon)

    @property
    def feature_norm(self) -> float:
        """Gamma_x of the item step: clip of the user embedding plus the bias feature."""
        return math.sqrt(self.max_norm**2 + self.bias_feature**2) if self.factors else self.bias_feature

    @property
    def pre_labels(self) -> list[str]:
        """Labels of the pre-processing releases (counts, then the two parts of the mean)."""
        return ["item counts"] + (["global mean: sum", "global mean: count"] if self.center else [])

    def as_dict(self) -> dict:
        """JSON-friendly copy (dtype by name, derived ``private``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["dtype"] = self.dtype.name
        out["private"] = self.private
        return out


#: noise ratios (``gramian_ratio``, ``global_ratio``) lie in [1 / _MAX_RATIO, _MAX_RATIO]
_MAX_RATIO = 1e6


def check_scales(cfg: dict) -> None:
    """Magnitude bounds of the resolved scale settings (one-line ``ValueError`` naming the parameter):
    beyond them a fit used to fail with a raw error (``OverflowError`` for ``max_norm=1e300``,
    ``ZeroDivisionError`` for ``gramian_ratio=1e-300``) or with "weights contains NaN"
    (``budget=1e300``)."""
    check_scale(cfg["budget"], "budget")
    check_scale(cfg["max_norm"], "max_norm")
    check_scale(cfg["bias_feature"], "bias_scale * max_norm")
    check_scale(cfg["rating_bound"], "rating_bound", maximum=MAX_RATING_MAGNITUDE)
    check_scale(cfg["label_bound"], "label_bound", maximum=MAX_RATING_MAGNITUDE)
    for name in ("gramian_ratio", "global_ratio"):
        check_scale(cfg[name], name, maximum=_MAX_RATIO, minimum=1.0 / _MAX_RATIO)


def check_rating_span(lo_v: float, hi_v: float, rating_range, rating_bound: float, stacklevel: int = 2) -> None:
    """Ratings spanning ``[lo_v, hi_v]`` outside the declared range are an error; beyond
    ``rating_bound`` (no range declared) they are clipped by the mechanisms, said once as a warning."""
    if rating_range is not None:
        if lo_v < rating_range[0] or hi_v > rating_range[1]:
            raise ValueError(
                f"ratings span [{lo_v:g}, {hi_v:g}] [non-private], outside the declared rating_range "
                f"[{rating_range[0]:g}, {rating_range[1]:g}]; fix the data or declare the right range"
            )
    elif max(abs(lo_v), abs(hi_v)) > rating_bound:
        warnings.warn(
            f"ratings span [{lo_v:g}, {hi_v:g}] [non-private] beyond rating_bound={rating_bound:g}: they are "
            "clipped in every private statistic; declare rating_range=(low, high) for this scale, "
            "or use feedback='implicit' for counts",
            UserWarning,
            stacklevel=stacklevel,
        )


def check_overflow(cfg: DPALSConfig, step: int, side: str, factors: np.ndarray, bias) -> None:
    """One-line ``ValueError`` when a step's factors overflowed the dtype (NaN / infinity): ratings
    far larger than the user clip ``max_norm`` make the item factors (and their noise) huge, and
    their squares overflow float32 (it used to end in "features contains NaN")."""
    if np.isfinite(factors).all() and (bias is None or np.isfinite(bias).all()):
        return
    raise ValueError(
        f"the {side} factors of ALS step {step} overflowed {cfg.dtype.name} (NaN or infinity): ratings of magnitude "
        f"up to {cfg.rating_bound:g} are too large for max_norm={cfg.max_norm:g}; rescale the ratings (e.g. to a "
        f"1-5 scale and rating_range), or pass dtype=np.float64"
    )
