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
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import MAX_RATING_MAGNITUDE, check_delta, check_epsilon, check_scale
from ..data.fit_input import check_rating_range
from ..privacy import check_noise_random_state
from ..tuning.rule import POPULARITY_COUNT_SAMPLE, auto_config
from .als import check_exponent

__all__ = [
    "METHODS",
    "RELEASE_STATEMENT",
    "binarised",
    "release_statement",
    "resolve_config",
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


def release_statement(roster: bool = True, catalogue: bool = True, catalogue_size: bool = False) -> dict:
    """What a DPALS privacy report states, by which axes were declared: :data:`RELEASE_STATEMENT`
    when both were (zero-out over the public roster); with an undeclared roster the relation is
    add/remove of one user and the noisy user count is released; with an undeclared catalogue the
    item axis is a private selection (its ids are released under the ledger), and with
    ``catalogue_size`` the noisy size of the catalogue it was selected from too."""
    if roster and catalogue:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in RELEASE_STATEMENT.items()}
    public = ["epsilon, delta, the rating range / bound and every setting in config"]
    released = list(RELEASE_STATEMENT["released"])
    if roster:
        relation = RELEASE_STATEMENT["neighbouring_relation"]
        public.insert(0, "the user roster (number of users)")
    else:
        relation = (
            "user-level add/remove: neighbouring datasets differ by one user and all of their ratings "
            "(nothing about the users is declared; their number is released as a noisy count)"
        )
        released.append("the noisy user count (config n_users)")
    if catalogue:
        public.insert(1 if roster else 0, "the item catalogue (number of items; item ids when declared)")
    else:
        released.append("the item axis: the ids of the items chosen by private selection (config n_items)")
        if catalogue_size:
            released.append("the noisy number of items somebody sampled (axes catalogue_released; sizes the head)")
    return {"neighbouring_relation": relation, "public": public, "released": released}


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


# ---------------------------------------------------------------------- resolving a DPALS's settings


def resolve_config(
    model,
    shape: tuple[int, int] | None = None,
    bias_model: bool = False,
    target: tuple | None = None,
    selected_items: bool = False,
    catalogue_size: float | None = None,
) -> DPALSConfig:
    """Validated (constraint table), resolved settings; ``None`` values filled by :func:`auto_config`.

    ``shape`` = (n_users, n_items) of the training matrix (public); without it the automatic
    values are those of a 10,000 x 1,000 problem (enough for validation and planning tests).
    ``target``: the (epsilon, delta) to calibrate to instead of the model's own (the share left
    after the releases of undeclared axes, :func:`privrec.tuning.plan.plan_axes`).
    ``selected_items``: the item axis is a private selection (those items already passed a noisy
    count threshold), so the automatic head restriction, where the rule has one (a fraction of the
    catalogue), is that fraction of ``catalogue_size`` (the released noisy size of the catalogue it
    was selected from, at least the number of selected items) among the selected items -- every
    selected item when fewer pass, where the rule trains every item, or without ``catalogue_size``.
    """
    model._validate_params()
    check_noise_random_state(model.random_state, "DPALS")
    eps, delta = check_epsilon(model.epsilon), check_delta(model.delta)
    if target is not None:  # the share of (epsilon, delta) left to the fit after the axes' releases
        eps, delta = check_epsilon(target[0]), check_delta(target[1])
    private = not math.isinf(eps)
    solver, alloc = METHODS[model.method]
    implicit = model.feedback == "implicit"
    center = (not implicit) if model.center is None else bool(model.center)
    if implicit and center:
        raise ValueError("implicit feedback is binarised, not centred: use center=False (or None)")
    dt = np.dtype(model.dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dt}")
    rating_range = check_rating_range(model.rating_range)
    rating_bound = max(abs(rating_range[0]), abs(rating_range[1])) if rating_range else float(model.rating_bound)
    n_users, n_items = shape if shape is not None else (10_000, 1_000)
    # factors = 0 asked for on explicit ratings: the bias model's automatic settings at any size
    bias_model = bias_model or (model.factors == 0 and not implicit)
    auto = auto_config(n_users, n_items, eps, delta, rating_bound, implicit=implicit, bias_model=bias_model)

    def chosen(name: str, cast: Callable = float):
        """The parameter ``name`` as given, or its automatic value when it is None."""
        value = getattr(model, name)
        return auto[name] if value is None else cast(value)

    # each resolved setting goes into the config as it is decided (field meanings: DPALSConfig)
    cfg: dict[str, Any] = {"epsilon": eps, "delta": delta, "solver": solver, "allocation": alloc, "dtype": dt}
    cfg.update(implicit=implicit, center=center, rating_range=rating_range, rating_bound=rating_bound)
    factors = cfg["factors"] = chosen("factors", int)
    if factors == 0 and not model.biases:
        raise ValueError("factors = 0 needs biases=True (otherwise there is nothing to fit)")
    # implicit feedback without factors: the release is the popularity prior alone
    cfg["iterations"] = 0 if implicit and factors == 0 else chosen("iterations", int)
    budget = cfg["budget"] = chosen("budget")
    if alloc != "adaptive" and budget != int(budget):
        raise ValueError(
            f"budget is the number of sampled items k for {model.method}; must be an integer, got {budget!r}"
        )
    if model.count_sample is not None:
        cfg["count_sample"] = int(model.count_sample)
    elif implicit and factors == 0:  # the counts are the whole release (popularity ranker)
        cfg["count_sample"] = POPULARITY_COUNT_SAMPLE
    else:
        cfg["count_sample"] = max(1, int(math.ceil(budget)))
    # the bias model's weights do not depend on the noisy counts (mu = 0): every user spreads the
    # budget evenly, so the exposure term weighs popular items as fully as rare ones
    cfg["mu"] = (0.0 if factors == 0 else 0.25) if model.mu is None else float(model.mu)
    reg = cfg["reg"] = chosen("regularization")
    # automatic item ridge of a private bias model: empirical Bayes from the calibrated noise
    eb = private and model.regularization is None and factors == 0 and not implicit
    # automatic ridges of a private implicit rank: the spectral rule from the released counts
    spectral = (
        private
        and auto.get("reg_rule") == "spectral"
        and model.regularization is None
        and model.user_regularization is None
    )
    cfg["reg_rule"] = "empirical-bayes" if eb else ("spectral" if spectral else "constant")
    cfg["reg_exponent"] = check_exponent(model.reg_exponent)
    # epsilon = inf: one ridge for both sides, as ALS
    default_user_reg = auto["user_regularization"] if private else reg
    user_reg = model.user_regularization
    cfg["user_reg"] = default_user_reg if user_reg is None else float(user_reg)
    user_exponent = model.user_reg_exponent
    default_user_exponent = 0.0 if private else float(model.reg_exponent)
    cfg["user_reg_exponent"] = (
        default_user_exponent if user_exponent is None else check_exponent(user_exponent, "user_reg_exponent")
    )
    max_norm = cfg["max_norm"] = chosen("max_norm")
    cfg["label_bound"] = _label_bound(model, implicit, center, rating_range, rating_bound)
    item_frac = chosen("item_frac")
    if selected_items and model.item_frac is None:  # the same head as on the catalogue, in items
        if item_frac < 1.0 and catalogue_size is not None:
            # the selected items are among the sampled ones, so the size is at least their number
            # (post-processing of two released values: a noisy size below it is noise)
            size = max(float(catalogue_size), float(n_items))
            item_frac = min(1.0, item_frac * size / max(int(n_items), 1))
        else:  # the rule trains every item, or the size was not released: every selected item
            item_frac = 1.0
    cfg["item_frac"] = None if item_frac >= 1.0 else item_frac
    # constant feature of the item bias: inside the clip ball in a private fit, 1 otherwise
    fit_biases = bool(model.biases) and not implicit
    cfg["biases"], cfg["popularity_prior"] = fit_biases, bool(model.biases) and implicit
    cfg["bias_feature"] = (float(model.bias_scale) * max_norm if private else 1.0) if fit_biases else 0.0
    cfg["count_fraction"] = chosen("count_fraction")
    # the bias model's Gramian share (tuning.rule.bias_gramian_ratio) only where the model is one
    cfg["gramian_ratio"] = chosen("gramian_ratio") if factors == 0 or model.gramian_ratio is not None else 1.0
    cfg["mean_ratio"] = float(auto.get("mean_ratio", 1.0))
    cfg["global_ratio"], cfg["unobserved_weight"] = float(model.global_ratio), float(model.unobserved_weight)
    cfg["gd_iterations"], cfg["init_scale"] = int(model.gd_iterations), float(model.init_scale)
    cfg["user_solver"], cfg["cg_steps"] = str(model.user_solver), int(model.cg_steps)
    cfg["item_projection"] = str(model.item_projection)
    check_scales(cfg)
    return DPALSConfig(accountant=model.accountant, **cfg)


def _label_bound(model, implicit: bool, center: bool, rating_range, rating_bound: float) -> float:
    """The clip of the (centred) labels: given, 1 for implicit feedback, else half the public
    rating span when centring (the whole bound when not)."""
    if model.label_bound is not None:
        return float(model.label_bound)
    if implicit:
        return 1.0
    if rating_range is not None and center:
        return (rating_range[1] - rating_range[0]) / 2.0
    return rating_bound / 2.0 if center else rating_bound


def binarised(m: sp.csr_matrix) -> sp.csr_matrix:
    """Implicit feedback: every stored (positive) entry becomes 1."""
    if m.nnz and float(m.data.min()) < 0:
        raise ValueError("implicit feedback must be non-negative (counts, clicks); got negative values")
    out = m.copy()
    out.data = (out.data > 0).astype(out.data.dtype)
    out.eliminate_zeros()
    return out
