"""Factorisation models: non-private ALS, an ``implicit`` wrapper and DPALS (spec 004 §6).

All share :class:`FactorizationModel`'s scikit-learn / implicit-style API. ``load_model(path)``
reads any model written by ``save``.
"""

from ._base import FactorizationModel
from .als import ALS, ImplicitALS
from .dpals import METHODS, DPALS

MODEL_CLASSES = {"ALS": ALS, "ImplicitALS": ImplicitALS, "DPALS": DPALS}


def load_model(path):
    """Load any privrec model written by ``save`` (class read from the file's metadata)."""
    return FactorizationModel.load(path)


__all__ = ["ALS", "ImplicitALS", "DPALS", "METHODS", "FactorizationModel", "MODEL_CLASSES", "load_model"]
