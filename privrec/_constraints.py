"""The vocabulary of parameter constraints (scikit-learn ``_parameter_constraints`` style).

Estimators declare their parameters with :func:`privrec._params.param`, naming the allowed values
with the building blocks below, so the same rule reads the same everywhere; ``fit`` calls
``self._validate_params()`` (scikit-learn's ``BaseEstimator``), which raises one
``InvalidParameterError`` (a ``ValueError``) naming the parameter, the allowed values and the
value given.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

__all__ = [
    "DELTA",
    "EPSILON",
    "FINITE",
    "FRACTION",
    "NON_NEGATIVE",
    "NON_NEGATIVE_INT",
    "OPEN_FRACTION",
    "POSITIVE",
    "POSITIVE_INT",
    "POSITIVE_OR_INF",
    "StrOptions",
]


#: epsilon of a DP guarantee: > 0, ``inf`` meaning non-private
EPSILON = Interval(Real, 0, math.inf, closed="right")
#: delta of a DP guarantee: in (0, 1)
DELTA = Interval(Real, 0, 1, closed="neither")
POSITIVE = Interval(Real, 0, None, closed="neither")
#: > 0, ``inf`` allowed (e.g. a radius meaning "unconstrained")
POSITIVE_OR_INF = Interval(Real, 0, math.inf, closed="right")
NON_NEGATIVE = Interval(Real, 0, None, closed="left")
#: any real number (finiteness is checked where it matters)
FINITE = Interval(Real, None, None, closed="neither")
POSITIVE_INT = Interval(Integral, 1, None, closed="left")
NON_NEGATIVE_INT = Interval(Integral, 0, None, closed="left")
#: a share in (0, 1]
FRACTION = Interval(Real, 0, 1, closed="right")
#: a share in (0, 1)
OPEN_FRACTION = Interval(Real, 0, 1, closed="neither")
