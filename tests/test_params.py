"""Declarative estimator parameters (privrec._params): one typed declaration per parameter gives the
keyword-only __init__, get_params / clone and the scikit-learn constraint table."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, clone

from privrec import _constraints
from privrec._constraints import POSITIVE, POSITIVE_INT, InvalidParameterError, StrOptions
from privrec._params import NO_VALIDATION, Hyperparameters, param
from privrec.convex import AsyncDPLearner, JointDPSGD, MultiTaskDPClassifier, MultiTaskDPRegressor
from privrec.convex.federated import FederatedDPClassifier, FederatedDPRegressor, SiloSet, mb_sgd
from privrec.convex.losses import SquaredLoss
from privrec.data import from_pandas
from privrec.models import ALS, DPALS, ImplicitALS

ESTIMATORS = [
    ALS,
    ImplicitALS,
    DPALS,
    MultiTaskDPRegressor,
    MultiTaskDPClassifier,
    JointDPSGD,
    AsyncDPLearner,
    FederatedDPRegressor,
    FederatedDPClassifier,
]


class _Toy(Hyperparameters, BaseEstimator):
    size: int = param(POSITIVE_INT, default=3)
    mode: str = param(StrOptions({"a", "b"}), default="a")
    extra: object = param(default=None)

    def fit(self):
        self._validate_params()
        return self


class _Child(_Toy):
    size: int = param(POSITIVE_INT, default=7)  # redeclared: another default
    scale: float = param(POSITIVE, default=1.0)


class _WithPositional(Hyperparameters, BaseEstimator):
    model: object = param(kw_only=False)
    rate: float = param(POSITIVE, default=0.5)


def test_generated_init_is_keyword_only_and_stores_unchanged():
    sig = inspect.signature(_Toy)
    assert all(p.kind is p.KEYWORD_ONLY for p in sig.parameters.values())
    assert [p.default for p in sig.parameters.values()] == [3, "a", None]
    marker = object()
    toy = _Toy(size=-5, extra=marker)  # no validation in __init__ (scikit-learn convention)
    assert toy.size == -5 and toy.extra is marker
    with pytest.raises(TypeError):
        _Toy(5)  # positional
    with pytest.raises(TypeError):
        _Toy(sizee=5)  # unknown keyword


def test_constraint_table_is_derived_and_enforced_at_fit():
    assert _Toy._parameter_constraints["size"] == [POSITIVE_INT]
    assert _Toy._parameter_constraints["extra"] == NO_VALIDATION
    assert _Toy().fit().size == 3
    with pytest.raises(InvalidParameterError, match="'size' parameter of _Toy"):
        _Toy(size=0).fit()
    with pytest.raises(InvalidParameterError, match="'mode'"):
        _Toy(mode="c").fit()


def test_subclass_inherits_and_redeclares():
    child = _Child()
    assert (child.size, child.mode, child.scale) == (7, "a", 1.0)
    assert set(_Child._parameter_constraints) == {"size", "mode", "extra", "scale"}
    assert set(_Toy._parameter_constraints) == {"size", "mode", "extra"}  # the base is untouched


def test_scikit_learn_protocol():
    toy = _Child(size=4, mode="b")
    assert toy.get_params() == {"size": 4, "mode": "b", "extra": None, "scale": 1.0}
    twin = clone(toy)
    assert twin is not toy and twin.get_params() == toy.get_params()
    assert repr(toy) == "_Child(mode='b', size=4)"  # scikit-learn's repr: non-default values only
    assert toy != twin  # identity comparison, as scikit-learn estimators
    assert toy.set_params(size=9).size == 9


def test_positional_parameter():
    est = _WithPositional("m", rate=0.1)
    assert (est.model, est.rate) == ("m", 0.1)
    assert clone(est).model == "m"


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_estimator_declares_its_parameters(cls):
    assert issubclass(cls, Hyperparameters)
    params = inspect.signature(cls).parameters
    assert set(params) == set(cls._parameter_constraints)  # one declaration = one table entry
    assert [f.name for f in dataclasses.fields(cls)] == list(params)  # __init__ generated from the fields
    keyword_only = [p for p in params.values() if p.kind is p.KEYWORD_ONLY]
    assert len(keyword_only) >= len(params) - 1  # JointDPSGD takes its model positionally


def test_constraints_reject_bad_values_before_any_work():
    with pytest.raises(InvalidParameterError, match="factors"):
        ALS(factors=0).fit(np.eye(3))
    with pytest.raises(InvalidParameterError, match="l1_mode"):
        AsyncDPLearner(l1_mode="nope").fit(np.ones((4, 2)), np.ones(4), np.arange(4))
    with pytest.raises(InvalidParameterError, match="algorithm"):
        FederatedDPRegressor(algorithm="sgd").fit(np.ones((4, 2)), np.ones(4), silos=np.arange(4) % 2)


def test_shared_option_keywords_behave_like_a_signature():
    df = pd.DataFrame({"user": [1, 2], "item": [3, 4], "rating": [5.0, 4.0]})
    assert from_pandas(df, duplicates="error", name="x").name == "x"
    with pytest.raises(TypeError, match="unexpected keyword argument 'nam'"):
        from_pandas(df, nam="x")
    rng = np.random.default_rng(0)
    silos = SiloSet.from_groups(rng.normal(size=(40, 2)), rng.normal(size=40), np.arange(40) % 4, epsilon=1.0)
    res = mb_sgd(silos, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, clip=1.0, random_state=0, trace=True)
    assert res.coef.shape == (2,)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tracee'"):
        mb_sgd(silos, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, tracee=True)


def test_privrec_modules_import_no_private_scikit_learn_module():
    import pathlib
    import re

    root = pathlib.Path(_constraints.__file__).parent
    private = re.compile(r"^\s*(from|import)\s+sklearn(\.\w+)*\._", re.MULTILINE)
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if private.search(p.read_text(encoding="utf-8"))]
    assert not offenders


def test_invalid_parameter_error_is_value_and_type_error_with_the_full_message():
    assert issubclass(InvalidParameterError, ValueError) and issubclass(InvalidParameterError, TypeError)
    with pytest.raises(
        InvalidParameterError,
        match=r"^The 'factors' parameter of ALS must be an int in the range \[1, inf\)\. Got 0 instead\.$",
    ):
        ALS(factors=0).fit(np.ones((3, 3)))
    with pytest.raises(
        ValueError, match=r"'biases' parameter of DPALS must be an instance of 'bool' or an instance of"
    ):
        DPALS(biases="yes").fit(np.ones((3, 3)))
    with pytest.raises(TypeError, match=r"'epsilon' parameter of DPALS must be a float in the range \(0\.0, inf\]"):
        DPALS(epsilon=-1.0).fit(np.ones((3, 3)))


_VALUES = [0, 1, -1, 0.5, 2.0, float("inf"), float("-inf"), float("nan"), True, np.bool_(False), None, "a", "x",
           "private", [1, 2], np.arange(3), np.float32(0.5), np.int64(3), len, (1,)]  # fmt: skip


@pytest.mark.parametrize(
    "constraints",
    [
        [_constraints.EPSILON],
        [_constraints.DELTA],
        [_constraints.POSITIVE_INT, None],
        [_constraints.NON_NEGATIVE_INT],
        [_constraints.FINITE],
        [_constraints.FRACTION, None],
        ["boolean"],
        ["boolean", None],
        [StrOptions({"a"}), _constraints.POSITIVE],
        [StrOptions({"private"}), "array-like"],
        [StrOptions({"x"}), _constraints.POSITIVE, callable],
        [_constraints.HasMethods(["fit", "predict"])],
        [_constraints.HasMethods("fit")],
        [int],
    ],
    ids=str,
)
def test_same_verdicts_and_messages_as_scikit_learn(constraints):
    # privrec's constraints replace scikit-learn's private ones: same rule, same message (when the
    # private module is still there to compare with)
    sk = pytest.importorskip("sklearn.utils._param_validation")

    def as_sklearn(c):
        if isinstance(c, _constraints.Interval):
            return sk.Interval(c.type, c.left, c.right, closed=c.closed)
        if isinstance(c, StrOptions):
            return sk.StrOptions(c.options)
        if isinstance(c, _constraints.HasMethods):
            return sk.HasMethods(c.methods)
        return c

    def outcome(module, declared, value):
        try:
            module.validate_parameter_constraints({"p": declared}, {"p": value}, caller_name="Est")
        except module.InvalidParameterError as exc:
            return str(exc)
        return None

    for value in _VALUES:
        ours = outcome(_constraints, constraints, value)
        theirs = outcome(sk, [as_sklearn(c) for c in constraints], value)
        assert ours == theirs, value


def test_constraint_objects_reject_malformed_declarations():
    from numbers import Integral, Real

    with pytest.raises(ValueError, match="type must be"):
        _constraints.Interval(float, 0, 1, closed="both")
    with pytest.raises(ValueError, match="closed must be"):
        _constraints.Interval(Real, 0, 1, closed="open")
    with pytest.raises(ValueError, match="can't be None"):
        _constraints.Interval(Integral, None, 3, closed="both")
    with pytest.raises(TypeError, match="Expecting left to be an int"):
        _constraints.Interval(Integral, 0.5, 3, closed="neither")
    with pytest.raises(ValueError, match="less than left"):
        _constraints.Interval(Real, 1, 0, closed="neither")
    with pytest.raises(TypeError, match="methods must be"):
        _constraints.HasMethods(3)
    with pytest.raises(ValueError, match="Unknown constraint type"):
        _constraints.make_constraint("sparse-ish")
    assert "Interval: an int in the range [1, inf)" in repr(_constraints.POSITIVE_INT)
