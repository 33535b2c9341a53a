"""The vocabulary of parameter constraints, and their validation (scikit-learn ``_parameter_constraints`` style).

Estimators declare their parameters with :func:`privrec._params.param`, naming the allowed values
with the building blocks below, so the same rule reads the same everywhere; ``fit`` calls
``self._validate_params()`` (:class:`privrec._params.Hyperparameters`), which raises one
:class:`InvalidParameterError` (a ``ValueError`` and a ``TypeError``) naming the parameter, the
allowed values and the value given, in scikit-learn's words::

    The 'factors' parameter of ALS must be an int in the range [1, inf). Got 0 instead.

privrec owns these objects instead of importing ``sklearn.utils._param_validation`` (a private
scikit-learn module, free to change in any release). They follow its semantics: a parameter is
valid when **any one** of its constraints accepts the value. A constraint is one of

- :class:`Interval` over ``numbers.Integral`` or ``numbers.Real`` (``bool`` is an ``Integral``,
  as in scikit-learn; NaN is in no interval),
- :class:`StrOptions`, a set of strings,
- :class:`HasMethods`, objects with the named callable methods,
- the strings ``"boolean"`` (``bool`` / ``numpy.bool_``) and ``"array-like"`` (has ``__len__``,
  ``shape`` or ``__array__``, not a scalar, not a scipy sparse matrix),
- ``None`` (the value ``None``), the builtin ``callable`` (any callable), or a type (its instances).
"""

from __future__ import annotations

import math
import operator
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp

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
    "Constraint",
    "HasMethods",
    "Interval",
    "InvalidParameterError",
    "StrOptions",
    "make_constraint",
    "validate_parameter_constraints",
]


class InvalidParameterError(ValueError, TypeError):
    """A constructor parameter has a type or value that none of its declared constraints allows.

    Subclasses ``ValueError`` and ``TypeError`` (as scikit-learn's exception of the same name)."""


class Constraint:
    """One rule a parameter value may satisfy: :meth:`is_satisfied_by` and a readable ``str``."""

    def is_satisfied_by(self, val: Any) -> bool:
        raise NotImplementedError

    def __str__(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self}>"


def _type_name(t: type) -> str:
    if t is Real:
        return "float"
    if t is Integral:
        return "int"
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class Interval(Constraint):
    """Numbers of ``type`` (``numbers.Integral`` or ``numbers.Real``) between ``left`` and ``right``
    (``None`` = unbounded); ``closed`` is ``"left"``, ``"right"``, ``"both"`` or ``"neither"``."""

    def __init__(self, type: type, left: float | None, right: float | None, *, closed: str):
        if type not in (Integral, Real):
            raise ValueError(f"type must be numbers.Integral or numbers.Real, got {type}")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"closed must be 'left', 'right', 'both' or 'neither', got {closed!r}")
        for side, bound in (("left", left), ("right", right)):
            if bound is None:
                if type is Integral and closed in (side, "both"):
                    raise ValueError(f"{side} can't be None when closed == {closed} for an interval over the integers")
            elif not isinstance(bound, Integral if type is Integral else Real):
                raise TypeError(f"Expecting {side} to be {'an int' if type is Integral else 'a real number'}")
        if left is not None and right is not None and right <= left:
            raise ValueError(f"right can't be less than left. Got left={left} and right={right}")
        self.type = type
        self.left = left
        self.right = right
        self.closed = closed

    def __contains__(self, val: Any) -> bool:
        if not isinstance(val, Integral) and math.isnan(val):
            return False
        below = operator.lt if self.closed in ("left", "both") else operator.le
        above = operator.gt if self.closed in ("right", "both") else operator.ge
        left = -math.inf if self.left is None else self.left
        right = math.inf if self.right is None else self.right
        return not (below(val, left) or above(val, right))

    def is_satisfied_by(self, val: Any) -> bool:
        return isinstance(val, self.type) and val in self

    def __str__(self) -> str:
        left: Any = "-inf" if self.left is None else self.left
        right: Any = "inf" if self.right is None else self.right
        if self.type is not Integral:  # bounds given as integers read as floats
            left = float(left) if self.left is not None else left
            right = float(right) if self.right is not None else right
        return (
            f"{'an int' if self.type is Integral else 'a float'} in the range "
            f"{'[' if self.closed in ('left', 'both') else '('}{left}, "
            f"{right}{']' if self.closed in ('right', 'both') else ')'}"
        )


class StrOptions(Constraint):
    """One of a set of strings."""

    def __init__(self, options: set[str]):
        self.options = options

    def is_satisfied_by(self, val: Any) -> bool:
        return isinstance(val, str) and val in self.options

    def __str__(self) -> str:
        return f"a str among {{{', '.join(repr(o) for o in self.options)}}}"


class HasMethods(Constraint):
    """Objects exposing every named method (a protocol, whatever the class)."""

    def __init__(self, methods: str | list[str]):
        if isinstance(methods, str):
            methods = [methods]
        if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
            raise TypeError(f"methods must be a str or a list of str, got {methods!r}")
        self.methods = methods

    def is_satisfied_by(self, val: Any) -> bool:
        return all(callable(getattr(val, m, None)) for m in self.methods)

    def __str__(self) -> str:
        names = [repr(m) for m in self.methods]
        joined = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        return f"an object implementing {joined}"


class _InstancesOf(Constraint):
    def __init__(self, type: type):
        self.type = type

    def is_satisfied_by(self, val: Any) -> bool:
        return isinstance(val, self.type)

    def __str__(self) -> str:
        return f"an instance of {_type_name(self.type)!r}"


class _NoneConstraint(Constraint):
    def is_satisfied_by(self, val: Any) -> bool:
        return val is None

    def __str__(self) -> str:
        return "None"


class _Booleans(Constraint):
    def is_satisfied_by(self, val: Any) -> bool:
        return isinstance(val, (bool, np.bool_))

    def __str__(self) -> str:
        return f"{_InstancesOf(bool)} or {_InstancesOf(np.bool_)}"


class _Callables(Constraint):
    def is_satisfied_by(self, val: Any) -> bool:
        return callable(val)

    def __str__(self) -> str:
        return "a callable"


class _ArrayLikes(Constraint):
    def is_satisfied_by(self, val: Any) -> bool:
        if sp.issparse(val) or np.isscalar(val):
            return False
        return hasattr(val, "__len__") or hasattr(val, "shape") or hasattr(val, "__array__")

    def __str__(self) -> str:
        return "an array-like"


def make_constraint(constraint: Any) -> Constraint:
    """The :class:`Constraint` object of one declared constraint (module docstring); ``ValueError``
    for anything else."""
    if isinstance(constraint, Constraint):
        return constraint
    if constraint is None:
        return _NoneConstraint()
    if constraint is callable:
        return _Callables()
    if isinstance(constraint, str) and constraint == "boolean":
        return _Booleans()
    if isinstance(constraint, str) and constraint == "array-like":
        return _ArrayLikes()
    if isinstance(constraint, type):
        return _InstancesOf(constraint)
    raise ValueError(f"Unknown constraint type: {constraint}")


def validate_parameter_constraints(parameter_constraints: dict, params: dict, caller_name: str) -> None:
    """Check every parameter of ``params`` that has an entry in ``parameter_constraints`` (a list of
    constraints, any one of which must hold, or ``"no_validation"``); raise
    :class:`InvalidParameterError` for the first one that fails."""
    for name, value in params.items():
        declared = parameter_constraints.get(name, "no_validation")
        if isinstance(declared, str) and declared == "no_validation":
            continue
        constraints = [make_constraint(c) for c in declared]
        if any(c.is_satisfied_by(value) for c in constraints):
            continue
        allowed = (
            str(constraints[0])
            if len(constraints) == 1
            else f"{', '.join(str(c) for c in constraints[:-1])} or {constraints[-1]}"
        )
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller_name} must be {allowed}. Got {value!r} instead."
        )


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
