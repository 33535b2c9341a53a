"""Argument checks shared by every module: one wording for every bad-input error."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np


def check_epsilon(epsilon, name: str = "epsilon", allow_inf: bool = True) -> float:
    """Return ``epsilon`` as float; ``ValueError`` unless it is > 0 (``inf`` means no privacy)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real):
        raise ValueError(f"{name} must be a positive number, got {epsilon!r}")
    eps = float(epsilon)
    if math.isnan(eps) or eps <= 0:
        raise ValueError(f"{name} must be > 0, got {epsilon!r}")
    if math.isinf(eps) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {epsilon!r}")
    return eps


def check_delta(delta, name: str = "delta") -> float:
    """Return ``delta`` as float; ``ValueError`` unless 0 < delta < 1."""
    if isinstance(delta, bool) or not isinstance(delta, Real):
        raise ValueError(f"{name} must be a number in (0, 1), got {delta!r}")
    d = float(delta)
    if not (0.0 < d < 1.0):
        raise ValueError(f"{name} must be in the open interval (0, 1), got {delta!r}")
    return d


def check_positive(value, name: str, allow_zero: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as float; ``ValueError`` unless > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN")
    if math.isinf(v) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {value!r}")
    if v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return v


def check_int(value, name: str, minimum: int | None = None) -> int:
    """Return ``value`` as int; ``ValueError`` unless it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return v


def check_fraction(value, name: str, closed_low: bool = False, closed_high: bool = True) -> float:
    """Return ``value`` as float in (0, 1] (bounds configurable)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    lo_ok = v >= 0 if closed_low else v > 0
    hi_ok = v <= 1 if closed_high else v < 1
    if math.isnan(v) or not (lo_ok and hi_ok):
        lo = "[" if closed_low else "("
        hi = "]" if closed_high else ")"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {value!r}")
    return v


def check_finite_array(x, name: str) -> np.ndarray:
    """Return ``x`` as an array; ``ValueError`` if it holds NaN or infinity."""
    arr = np.asarray(x)
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")
    return arr
