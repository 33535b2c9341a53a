"""Declarative estimator parameters: one typed line per parameter, with its default and its constraints.

An estimator derives from :class:`Hyperparameters` and declares each constructor parameter once, as
a typed class attribute (constraints from :mod:`privrec._constraints`)::

    class ALS(Hyperparameters, FactorizationModel):
        factors: int = param(POSITIVE_INT, default=32)
        dtype: Any = param(default=np.float32)  # no constraint: checked in fit

From these declarations the class gets

- a keyword-only ``__init__`` that stores every argument unchanged (the scikit-learn convention:
  no validation in ``__init__``, so ``get_params`` / ``set_params`` / ``clone`` work), generated
  by :mod:`dataclasses` and visible to type checkers (PEP 681 ``dataclass_transform``);
- the scikit-learn ``_parameter_constraints`` table, checked by ``self._validate_params()`` (first
  thing in ``fit``) with :func:`privrec._constraints.validate_parameter_constraints`: an
  :class:`~privrec._constraints.InvalidParameterError` names the parameter, the allowed values and
  the value given. No private scikit-learn module is involved.

Subclasses inherit and may redeclare parameters (e.g. another default). Cross-parameter rules
(e.g. an integer budget for sampling methods) stay in the estimator's ``fit``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, ClassVar, TypeVar, overload

import numpy as np

from ._constraints import validate_parameter_constraints

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: the marker only informs type checkers; the runtime behaviour is below

    def dataclass_transform(**_kwargs):
        return lambda cls: cls


__all__ = ["NO_VALIDATION", "Hyperparameters", "param"]

_T = TypeVar("_T")

#: the constraint of a parameter declared without one (scikit-learn skips it; ``fit`` checks it)
NO_VALIDATION = "no_validation"


@overload
def param(*constraints: object, default: _T, kw_only: bool = True) -> _T: ...
@overload
def param(*constraints: object, kw_only: bool = True) -> Any: ...
def param(*constraints: object, default: Any = dataclasses.MISSING, kw_only: bool = True) -> Any:
    """One constructor parameter of a :class:`Hyperparameters` estimator: its default and the
    scikit-learn constraints its value must meet (any one of them; none = checked by ``fit``)."""
    return dataclasses.field(
        default=default,
        kw_only=kw_only,
        metadata={"constraints": list(constraints) if constraints else NO_VALIDATION},
    )


@dataclass_transform(kw_only_default=True, eq_default=False, field_specifiers=(param,))
class Hyperparameters:
    """Base of every estimator: its annotated class attributes are its constructor parameters.

    See the module docstring. The generated ``__init__`` is keyword-only (a parameter declared with
    ``param(..., kw_only=False)`` comes first, positionally), has no side effect but storing, and
    leaves ``repr`` / ``==`` to scikit-learn's ``BaseEstimator`` (estimators compare by identity).
    """

    _parameter_constraints: ClassVar[dict]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, kw_only=True, eq=False, repr=False, match_args=False)
        cls._parameter_constraints = {
            f.name: f.metadata.get("constraints", NO_VALIDATION) for f in dataclasses.fields(cls)
        }

    def _validate_params(self) -> None:
        """Check every constructor parameter against its declared constraints (any one must hold);
        :class:`privrec._constraints.InvalidParameterError` for the first that fails. Replaces
        scikit-learn's ``BaseEstimator._validate_params`` (same rule, same message) without its
        private validation module."""
        validate_parameter_constraints(
            self._parameter_constraints,
            {name: getattr(self, name) for name in sorted(self._parameter_constraints)},
            caller_name=type(self).__name__,
        )


def _param_fingerprint(model) -> dict[str, str]:
    """The saved parameters as JSON text, by name (what :meth:`FactorizationModel.save` would write)."""
    return {k: json.dumps(_jsonable(v), sort_keys=True, default=repr) for k, v in model._saved_params().items()}


def _jsonable(v):
    if isinstance(v, (type, np.dtype)):
        try:
            return np.dtype(v).name
        except TypeError:
            return repr(v)
    if isinstance(v, (np.random.Generator, np.random.RandomState, np.random.SeedSequence)):
        return None  # generator state is not persisted
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return v  # json.dumps writes Infinity; json.loads reads it back
    return v
