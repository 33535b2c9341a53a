"""Factorisation models: non-private ALS, an ``implicit`` wrapper and DPALS (Krichene et al., ICML 2023, Alg. 3).

All share :class:`FactorizationModel`'s scikit-learn / implicit-style API (a drop-in for implicit
0.7's ``AlternatingLeastSquares``: see ``tests/test_implicit_dropin.py``). ``load_model(path)``
reads any model written by ``save``.
"""

from ._base import (
    FactorizationModel,
    ItemCatalogueWarning,
    NotFittedError,
    PrivateReleaseError,
    PrivateSelectionWarning,
    PrivateStateWarning,
    RatingRangeWarning,
    UserRosterWarning,
)
from .als import ALS, ImplicitALS
from .dpals import DPALS, METHODS
from .persistence import MODEL_CLASSES

MODEL_CLASSES.update({"ALS": ALS, "ImplicitALS": ImplicitALS, "DPALS": DPALS})


def load_model(fileobj_or_path):
    """Load any privrec model written by ``save`` (a path or binary file object; class read from the
    file's metadata)."""
    return FactorizationModel.load(fileobj_or_path)


__all__ = [
    "ALS",
    "ImplicitALS",
    "DPALS",
    "METHODS",
    "FactorizationModel",
    "MODEL_CLASSES",
    "load_model",
    "NotFittedError",
    "PrivateReleaseError",
    "RatingRangeWarning",
    "ItemCatalogueWarning",
    "UserRosterWarning",
    "PrivateStateWarning",
    "PrivateSelectionWarning",
]
