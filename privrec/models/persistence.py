"""Persistence of privrec's factorisation models: save / load to a model file, and safe pickling.

Follows implicit 0.7's ``recommender_base`` (``save(fileobj_or_path)`` and the class method
``load(fileobj_or_path)`` of an ``.npz`` file, a path or a binary file object; ``load`` finds
``name.npz`` when given ``name``) and scikit-learn's pickling of estimators (``pickle`` /
``joblib.dump`` through ``BaseEstimator.__getstate__``). :class:`PersistenceMixin` holds the model
file's schema on the model side -- the arrays each class saves (``_saved_arrays``) with their
dimensions and dtypes (``_array_schema``), the parameters, the id maps and where the item axis came
from (metadata ``item_axis``) -- and ``save`` / ``load``; the file format itself and the checks of
an untrusted file are :mod:`privrec.models.model_file` (reference: docs/data-and-model-files.md).
``load`` itself is :class:`~privrec.models.loading.LoadingMixin`, pickling
:class:`~privrec.models.pickling.PicklingMixin` (both mixed into :class:`PersistenceMixin`; their
names are importable from here, as before the split).

Pickling (``pickle``, ``joblib.dump``) a fitted private model keeps the release and the item ids
(as a saved file does): the training users' factors, biases and ids, fit timings and the noise seed are dropped,
with one :class:`PrivateStateWarning` (:meth:`PersistenceMixin.__getstate__`), as a saved file
drops them. Non-private models pickle everything; in-memory copies (``copy.copy`` /
``copy.deepcopy``) keep everything.
"""

from __future__ import annotations

import json
import numbers
import warnings
from typing import Any

import numpy as np

from .._io import atomic_path
from .._params import _jsonable, _param_fingerprint
from ._mixin_typing import MixinBase
from .inputs import ITEM_AXIS_SOURCES, PUBLIC_ITEM_AXES
from .loading import MODEL_CLASSES, LoadingMixin  # noqa: F401 (MODEL_CLASSES re-exported: filled by privrec.models)
from .model_file import (
    _FLOAT_DTYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    _BadModelFile,
    _c_order,
    _content_hash,
)
from .pickling import PicklingMixin, PrivateStateWarning  # noqa: F401 (re-exported: importable from here, as before the split)


class PersistenceMixin(LoadingMixin, PicklingMixin, MixinBase):
    """The persistence side of :class:`FactorizationModel`: ``save`` / ``load`` of a model file,
    and what a pickled (private) model keeps (``load``: :class:`LoadingMixin`, pickling:
    :class:`PicklingMixin`)."""

    # names of array attributes written by save(); subclasses extend
    _saved_arrays: tuple[str, ...] = ("item_factors_",)

    # ------------------------------------------------------------------ save / load
    # Model file schema (FORMAT_VERSION 2; see docs/data-and-model-files.md; the format and its checks:
    # privrec.models.model_file). An .npz (zip) holding exactly: ``__meta__`` (0-d unicode array: the
    # JSON metadata), optionally ``__sha256__`` (0-d unicode array: content hash of the metadata text
    # and every array), and one member per saved array. On load only the arrays listed in the class's
    # ``_saved_arrays`` (names ending in ``_``) are accepted, each with the dtype and number of
    # dimensions of ``_array_schema``.
    _array_schema: dict[str, tuple[int, tuple[str, ...]]] = {
        "item_factors_": (2, _FLOAT_DTYPES),
        "user_factors_": (2, _FLOAT_DTYPES),
        "item_bias_": (1, _FLOAT_DTYPES),
        "user_bias_": (1, _FLOAT_DTYPES),
        "global_mean_": (0, _FLOAT_DTYPES),
        "user_reg_norm_": (0, _FLOAT_DTYPES),
        "item_reg_norm_": (0, _FLOAT_DTYPES),
    }

    @classmethod
    def _array_spec(cls, name) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """``(allowed ndims, allowed dtype names)`` of saved array ``name``; ``ValueError`` if ``name``
        is not one of this class's saved arrays."""
        if not isinstance(name, str) or name not in cls._saved_arrays or not name.endswith("_") or name.startswith("_"):
            raise ValueError(
                f"array {str(name)[:60]!r} is not a saved array of {cls.__name__} "
                f"(expected some of {list(cls._saved_arrays)})"
            )
        spec = cls._array_schema.get(name)
        if spec is None:  # a subclass added an array without a schema entry: float, at most 2-D
            return (0, 1, 2), _FLOAT_DTYPES
        return (spec[0],), tuple(spec[1])

    def _metadata(self) -> dict[str, Any]:
        return {}

    def _saved_params(self) -> dict[str, Any]:
        """Constructor parameters written by :meth:`save` (all of them by default)."""
        return self.get_params(deep=False)

    def _restore_metadata(self, meta: dict[str, Any]) -> None:
        pass

    def save(self, path) -> None:
        """Write the fitted model to ``path`` (npz arrays + JSON metadata: class, params, privacy report).

        ``path``: a file name (written exactly there; unlike implicit no ``.npz`` is appended, but
        :meth:`load` finds ``name.npz`` when given ``name``) or a binary file object open for
        writing (implicit 0.7's ``save(file)``). A write to a path is atomic: an interrupted save
        (an exception, SIGINT, or SIGTERM -- handled like SIGINT while the file is written, unless
        the program set its own SIGTERM handler) never leaves a truncated file at ``path``, and
        its temporary file, ``.privrec-<name>.h<host>p<pid>.<random>.tmp``, is removed; one left by
        a killed process is removed by the next save into the same folder as soon as that
        process is gone (or once it is a day old). A symbolic link at ``path`` is written through:
        the file it points to is replaced atomically and the link stays. A ``path`` that is not a
        regular file -- a folder, ``/dev/null``, ``/dev/stdout``, a FIFO -- is refused with a
        ``ValueError`` before anything is written (:func:`privrec._io.check_write_target`). The
        file carries a SHA-256 of its content, checked on load.

        Id maps (``user_ids_`` / ``item_ids_`` of a model fitted with ids; str or int ids) are saved
        in the metadata: user ids only with the user factors (so never by a private model), item
        ids always, so that the loaded model maps the same ids to the same rows. A *private*
        model's item ids are public only when they came from a declared catalogue: ids derived
        from the data, like the item axis itself, tell which items have ratings, which the privacy
        guarantee does not cover -- such a fit (``DPALS(axes="warn")``) warns
        (``ItemCatalogueWarning``) and the file records ``item_axis`` ``{"source": "data", "public":
        false}``; ids chosen by the default private item selection are released under the ledger
        (``{"source": "selection", "public": true}``).
        """
        self._check_fitted()
        self._check_params_unchanged()
        arrays = {}
        for name in self._saved_arrays:
            val = getattr(self, name, None)
            if val is not None:
                arr = _c_order(np.asarray(val))
                ndims, dtypes = self._array_spec(name)
                if arr.dtype.name not in dtypes or arr.ndim not in ndims:
                    raise ValueError(
                        f"cannot save {type(self).__name__}: {name} has dtype {arr.dtype} and "
                        f"{arr.ndim} dimension(s), the model file schema wants {'/'.join(dtypes)} "
                        f"with {'/'.join(map(str, ndims))}"
                    )
                arrays[name] = arr
        params = {k: _jsonable(v) for k, v in self._saved_params().items()}
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "class": type(self).__name__,
            "params": params,
            "arrays": {k: {"shape": list(v.shape), "dtype": v.dtype.str} for k, v in arrays.items()},
            **self._metadata(),
            **self._id_metadata(),
        }
        meta_text = json.dumps(meta)
        digest = _content_hash(meta_text, arrays)
        # typed Any for np.savez, whose stub matches a **dict[str, ndarray] against allow_pickle: bool
        members: dict[str, Any] = arrays
        if hasattr(path, "write"):  # an open binary file (implicit's save(file))
            np.savez(path, __meta__=np.array(meta_text), __sha256__=np.array(digest), **members)
            return
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, __meta__=np.array(meta_text), __sha256__=np.array(digest), **members)

    def _check_params_unchanged(self) -> None:
        """``ValueError`` when a parameter that shapes the fitted arrays or the privacy report was
        changed (``set_params``) after the fit: the file would pair the old arrays with the new
        values (e.g. ``factors=8`` with 4-column factors, which no load accepts)."""
        fitted = self.__dict__.get("_fitted_params")
        if fitted is None:  # fitted elsewhere (privrec.distributed) or unpickled from an older privrec
            return
        now = _param_fingerprint(self)
        changed = [k for k in now if k not in _RUNTIME_PARAMS and now[k] != fitted.get(k, now[k])]
        if changed:
            detail = ", ".join(f"{k}: {fitted[k]} -> {now[k]}" for k in changed[:5])
            raise ValueError(
                f"cannot save this {type(self).__name__}: parameter(s) changed by set_params since the fit ({detail}); "
                "the fitted arrays belong to the old values. Refit, or set them back before save()"
            )

    def _id_metadata(self) -> dict[str, Any]:
        out = {}
        uids = getattr(self, "user_ids_", None)
        if (
            uids is not None
            and "user_factors_" in self._saved_arrays
            and getattr(self, "user_factors_", None) is not None
            and len(uids) == np.asarray(self.user_factors_).shape[0]
        ):
            entry = _ids_to_json(uids, "user")
            if entry is not None:
                out["user_ids"] = entry
        iids = getattr(self, "item_ids_", None)
        if iids is not None and len(iids) == self.n_items_:
            # saved whatever the item axis: the ids name the saved item rows, so that a loaded model
            # recommends, exports and checks data by the same ids as the fitted one. A private model's
            # data-derived axis (ids and rows alike, axes="warn") is not covered by the guarantee: the
            # fit warned (ItemCatalogueWarning) and the file records item_axis public: false
            entry = _ids_to_json(iids, "item")
            if entry is not None:
                out["item_ids"] = entry
        axis = getattr(self, "_item_axis", None)
        if axis in ITEM_AXIS_SOURCES:  # where the item axis came from (None: a model loaded from an older file)
            out["item_axis"] = {"source": axis, "public": axis in PUBLIC_ITEM_AXES}
        return out

    def _restore_ids(self, meta: dict[str, Any]) -> None:
        n_items = int(self.item_factors_.shape[0])
        uf = getattr(self, "user_factors_", None)
        for which, n in (("item", n_items), ("user", None if uf is None else int(uf.shape[0]))):
            entry = meta.get(f"{which}_ids")
            if entry is None:
                continue
            if n is None:
                raise _BadModelFile(f"{which} ids are stored without {which} factors")
            setattr(self, f"{which}_ids_", _ids_from_json(entry, which, n))
        axis = meta.get("item_axis")
        if axis is not None and not (
            isinstance(axis, dict)
            and set(axis) == {"source", "public"}
            and axis["source"] in ITEM_AXIS_SOURCES
            and axis["public"] is (axis["source"] in PUBLIC_ITEM_AXES)
        ):
            raise _BadModelFile(
                "metadata item_axis must be {'source': 'catalogue' | 'data' | 'matrix' | 'selection', "
                "'public': source in ('catalogue', 'selection')}"
            )
        self._item_axis = None if axis is None else axis["source"]
        self._item_ids_given = getattr(self, "item_ids_", None) is not None and self._item_axis in (
            None,
            *PUBLIC_ITEM_AXES,
        )
        self._id_lookup: dict[str, tuple[Any, Any]] = {}  # which -> (ids, their pandas.Index), see _lookup


# ---------------------------------------------------------------------- id maps in the metadata


def _ids_to_json(ids, which: str):
    """``{"kind": "int"|"str"|"object", "values": [...]}`` of an id map, or ``None`` (with a
    ``UserWarning``) when the ids are not all str / int (only those are saved)."""
    arr = np.asarray(ids)
    if arr.dtype.kind in "iu":
        return {"kind": "int", "values": [int(x) for x in arr.tolist()]}
    if arr.dtype.kind == "U":
        return {"kind": "str", "values": arr.tolist()}
    if arr.dtype == object:
        values: list[str | int] = []
        for x in arr.tolist():
            if isinstance(x, str) or (isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))):
                values.append(x if isinstance(x, str) else int(x))
            else:
                break
        else:
            return {"kind": "object", "values": values}
    warnings.warn(
        f"{which} ids of dtype {arr.dtype} are not saved (only str and int ids are): the loaded model will use indices",
        UserWarning,
        stacklevel=4,
    )
    return None


def _ids_from_json(entry, which: str, n: int) -> np.ndarray:
    if not isinstance(entry, dict) or set(entry) != {"kind", "values"}:
        raise _BadModelFile(f"metadata {which}_ids must be {{'kind': ..., 'values': [...]}}")
    kind, values = entry["kind"], entry["values"]
    if not isinstance(values, list) or len(values) != n:
        raise _BadModelFile(f"metadata {which}_ids must list {n} ids")
    is_int = [isinstance(v, int) and not isinstance(v, bool) for v in values]
    is_str = [isinstance(v, str) for v in values]
    if kind == "int" and all(is_int):
        if values and max(values) >= 1 << 63 and min(values) >= 0 and max(values) < 1 << 64:
            arr = np.array(values, dtype=np.uint64)  # uint64 ids >= 2**63 (saved as such by _ids_to_json)
        else:
            arr = np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
    elif kind == "str" and all(is_str):
        arr = np.array(values, dtype=str) if values else np.zeros(0, dtype=str)
    elif kind == "object" and all(a or b for a, b in zip(is_int, is_str)):
        arr = np.empty(n, dtype=object)
        arr[:] = values
    else:
        raise _BadModelFile(f"metadata {which}_ids: kind {str(kind)[:10]!r} with values that do not match it")
    if len(set(values)) != n:
        raise _BadModelFile(f"metadata {which}_ids holds repeated ids")
    return arr


#: parameters that do not shape a fit's result (changing them after the fit does not stop save())
_RUNTIME_PARAMS = frozenset({"show_progress", "num_threads"})
