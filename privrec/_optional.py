"""Optional dependencies of the core install: import one when a feature needs it, or fail in one line.

The core install (``pip install privrec``) runs the main job -- fit, evaluate and recommend on
in-memory data, CSV files and the generated datasets -- without these packages. Each is installed
by an extra:

* ``pyarrow`` (``privrec[parquet]``; also pulled by ``privrec[dask]`` and ``privrec[serving]``):
  Parquet reads and writes (``from_parquet``, ``recommend_all``, ``privrec export``, ``--ratings
  x.parquet``), the benchmark-dataset loaders (their fast CSV parser) and the dataset cache.
* ``implicit`` (``privrec[implicit]``): :class:`privrec.models.ImplicitALS`, the wrapper of
  implicit's own ALS (privrec's models only follow implicit's API and do not need it).

:func:`require` raises :class:`MissingExtraError`, both an ``ImportError`` (what a missing module
is) and a ``ValueError`` (so the CLI reports it as a one-line user error, not a traceback).
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: the extra that installs each optional module (its top-level package name)
EXTRAS = {"pyarrow": "parquet", "implicit": "implicit"}


class MissingExtraError(ImportError, ValueError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def install_hint(module: str) -> str:
    """``pip install 'privrec[<extra>]'`` for the optional ``module``."""
    return f"pip install 'privrec[{EXTRAS[module.partition('.')[0]]}]'"


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (e.g. ``"pyarrow.parquet"``), or raise :class:`MissingExtraError`:
    ``<feature> needs <package>: pip install 'privrec[<extra>]'`` (one line)."""
    top = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != top:  # a dependency of the package: not ours to explain
            raise
        raise MissingExtraError(f"{feature} needs {top}: {install_hint(top)}", name=top) from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (imports it: use for optional packages only)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


__all__ = ["EXTRAS", "MissingExtraError", "available", "install_hint", "require"]
