"""Persistence of privrec's factorisation models: save / load to a model file, and safe pickling.

Follows implicit 0.7's ``recommender_base`` (``save(fileobj_or_path)`` and the class method
``load(fileobj_or_path)`` of an ``.npz`` file, a path or a binary file object; ``load`` finds
``name.npz`` when given ``name``) and scikit-learn's pickling of estimators (``pickle`` /
``joblib.dump`` through ``BaseEstimator.__getstate__``). :class:`PersistenceMixin` holds the model
file's schema on the model side -- the arrays each class saves (``_saved_arrays``) with their
dimensions and dtypes (``_array_schema``), the parameters, the id maps and where the item axis came
from (metadata ``item_axis``) -- and ``save`` / ``load``; the file format itself and the checks of
an untrusted file are :mod:`privrec.models.model_file` (reference: docs/data-and-model-files.md).

Pickling (``pickle``, ``joblib.dump``) a fitted private model keeps the release and the item ids
(as a saved file does): the training users' factors, biases and ids, fit timings and the noise seed are dropped,
with one :class:`PrivateStateWarning` (:meth:`PersistenceMixin.__getstate__`), as a saved file
drops them. Non-private models pickle everything; in-memory copies (``copy.copy`` /
``copy.deepcopy``) keep everything.
"""

from __future__ import annotations

import copy
import io
import json
import numbers
import os
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._io import atomic_path
from .._params import _jsonable, _param_fingerprint
from .inputs import ITEM_AXIS_SOURCES
from .model_file import (
    _FLOAT_DTYPES,
    _MAX_META_BYTES,
    _READABLE_VERSIONS,
    FORMAT_NAME,
    FORMAT_VERSION,
    _BadModelFile,
    _c_order,
    _check_declared_sizes,
    _check_params,
    _content_hash,
    _npz_members,
    _one_line,
    _parse_meta,
    _read_array_member,
    _read_text_member,
    _verify_privacy_report,
)


class PrivateStateWarning(UserWarning):
    """Pickling (``pickle``, ``joblib.dump``, ...) a fitted private model dropped the state its privacy
    guarantee does not cover (the training users' factors, biases and ids, fit timings, the noise
    seed): the unpickled model holds the release and the item ids, as a loaded one does."""


class PersistenceMixin:
    """The persistence side of :class:`FactorizationModel`: ``save`` / ``load`` of a model file,
    and what a pickled (private) model keeps."""

    if TYPE_CHECKING:
        item_factors_: Any
        user_factors_: Any

        @property
        def n_items_(self) -> int: ...

        def _check_fitted(self) -> None: ...

        def _is_private(self) -> bool: ...

        def get_params(self, deep: bool = True) -> dict[str, Any]: ...

    # names of array attributes written by save(); subclasses extend
    _saved_arrays: tuple[str, ...] = ("item_factors_",)

    # ------------------------------------------------------------------ pickling
    #: Fitted state of a private model that its (epsilon, delta) guarantee does not cover -- computed
    #: from the exact training data, not part of the release -- dropped when the model is pickled.
    #: Subclasses extend the tuple.
    _private_state: tuple[str, ...] = (
        "user_factors_",  # billboard projection of every training user: each user's exact ratings
        "user_bias_",  # the same for the user biases
        "user_ids_",  # the training roster
        "fit_timings_",  # wall-clock times, which grow with the exact data size
        "_id_lookup",  # cached index of user_ids_ / item_ids_
    )
    #: Fitted attributes a private model keeps when pickled: the release (item side, noisy counts,
    #: privacy ledger / report) and values computed from public settings alone. Any other fitted
    #: (``name_``) attribute is dropped as well, so state added later is private until listed here;
    #: ``item_ids_`` is kept, as :meth:`save` keeps it (public only for a declared catalogue).
    _released_state: tuple[str, ...] = (
        "item_factors_",
        "item_bias_",
        "global_mean_",
        "item_counts_",
        "item_exposure_",
        "selection_",
        "trained_items_",
        "ledger_",
        "privacy_report_",
        "noise_scales_",
        "config_",
        "user_reg_norm_",
        "user_regularization_",
        "item_reg_norm_",
    )
    #: attributes the API reads with ``getattr(..., None)``: set to ``None`` when dropped
    _none_when_dropped = ("user_factors_", "user_bias_", "user_ids_", "item_ids_")

    def __getstate__(self):
        """The pickled state: everything for a non-private or unfitted model; for a fitted private
        model the release only (:attr:`_private_state` and every fitted attribute not in
        :attr:`_released_state` dropped, the user side ``None`` as in a loaded model, the noise seed
        removed as :meth:`save` does) and one :class:`PrivateStateWarning` naming what was dropped.

        The unpickled model recommends for a user from the user's own rows (billboard projection,
        free: ``recommend(userid, user_items, recalculate_user=True)``, ``transform``), and ranks
        similar items, exactly as the original. In-memory copies (``copy.copy`` / ``copy.deepcopy``)
        keep everything: they do not leave the process.
        """
        state = dict(super().__getstate__())
        if not (self._is_private() and self.__sklearn_is_fitted__()):
            return state
        dropped = []
        for name in list(state):
            if name == "item_ids_":
                drop = False  # kept, as save() keeps them (the item axis they name is released too)
            elif name in self._private_state:
                drop = True
            else:
                drop = name.endswith("_") and not name.startswith("_") and name not in self._released_state
            if drop:
                value = state.pop(name)
                if value is not None and not (isinstance(value, dict) and not value):
                    dropped.append(name)
        for name in self._none_when_dropped:
            state.setdefault(name, None)
        state["_id_lookup"] = {}
        for name, value in self._saved_params().items():  # e.g. DPALS: no noise seed in a private release
            if name in state and state[name] is not value:
                state[name] = value
                dropped.append(f"the {name} parameter")
        if dropped:
            warnings.warn(
                f"pickling a private {type(self).__name__} (epsilon={self.epsilon}): dropped {', '.join(dropped)} -- "
                "state computed from the exact training data that its privacy guarantee does not cover. The "
                "unpickled model holds the release only; recommend for a user from the user's own rows with "
                "recommend(userid, user_items, recalculate_user=True) or transform(user_items)",
                PrivateStateWarning,
                stacklevel=2,
            )
        return state

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

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
        guarantee does not cover -- the fit warns (``ItemCatalogueWarning``) and the file records
        ``item_axis`` ``{"source": "data", "public": false}``.
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
            # data-derived axis (ids and rows alike) is not covered by the guarantee: the fit warned
            # (ItemCatalogueWarning) and the file records item_axis public: false
            entry = _ids_to_json(iids, "item")
            if entry is not None:
                out["item_ids"] = entry
        axis = getattr(self, "_item_axis", None)
        if axis in ITEM_AXIS_SOURCES:  # where the item axis came from (None: a model loaded from an older file)
            out["item_axis"] = {"source": axis, "public": axis == "catalogue"}
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
            and axis["public"] is (axis["source"] == "catalogue")
        ):
            raise _BadModelFile(
                "metadata item_axis must be {'source': 'catalogue' | 'data' | 'matrix', 'public': source == 'catalogue'}"
            )
        self._item_axis = None if axis is None else axis["source"]
        self._item_ids_given = getattr(self, "item_ids_", None) is not None and self._item_axis in (None, "catalogue")
        self._id_lookup: dict[str, tuple[Any, Any]] = {}  # which -> (ids, their pandas.Index), see _lookup

    @classmethod
    def load(cls, fileobj_or_path):
        """Load a model written by :meth:`save`; a one-line ``ValueError`` for anything else.

        ``fileobj_or_path``: a file name (if it does not exist but ``name + ".npz"`` does, that
        file is read, as implicit 0.7 does) or a binary file object open for reading.
        Checked (see docs/data-and-model-files.md): the zip members (only ``__meta__``,
        ``__sha256__`` and the arrays this class saves; stored or deflated), their declared sizes
        before anything is read (each bounded by the file size -- deflate expands at most 1032:1
        -- and all arrays together by :func:`privrec._validation.memory_limit`, so a small forged
        file cannot make ``load`` allocate what it declares), each array's dtype, dimensions, shape and
        finiteness, the parameters (a dict of known names with plain JSON values), the content
        hash, and a stored privacy report: its epsilons are recomputed from its events with
        ``dp_accounting`` and must match. Version-1 files (no dtypes, no hash) are still read.
        """
        if hasattr(fileobj_or_path, "read"):
            path = getattr(fileobj_or_path, "name", None)
            path = path if isinstance(path, (str, Path)) else "<file object>"
            source = fileobj_or_path
        else:
            path = Path(fileobj_or_path)
            if not path.exists() and path.suffix != ".npz" and path.with_name(path.name + ".npz").exists():
                path = path.with_name(path.name + ".npz")
            source = path
        try:
            return cls._load_checked(source, path)
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            raise
        except _BadModelFile as exc:
            raise ValueError(f"{path}: {_one_line(exc)}") from None
        except ValueError as exc:
            msg = _one_line(exc)
            raise ValueError(msg if msg.startswith(f"{path}:") else f"{path}: {msg}") from None
        except (
            zipfile.BadZipFile,
            zlib.error,
            EOFError,
            OSError,
            KeyError,
            TypeError,
            AttributeError,
            IndexError,
            RecursionError,
            OverflowError,
            NotImplementedError,
            RuntimeError,
            MemoryError,
        ) as exc:
            raise ValueError(
                f"{path}: not a readable privrec model file ({type(exc).__name__}: {_one_line(exc)[:300]})"
            ) from None

    @classmethod
    def _load_checked(cls, source, path):
        if isinstance(source, Path):
            with open(source, "rb") as fh:
                head = fh.read(8)
                file_size = os.fstat(fh.fileno()).st_size
        else:  # a file object: zipfile needs to seek, so read a non-seekable stream into memory
            if not (hasattr(source, "seekable") and source.seekable()):
                source = io.BytesIO(source.read())
            start = source.tell()
            head = source.read(8)
            file_size = source.seek(0, io.SEEK_END) - start
            source.seek(start)
        if not isinstance(head, bytes):
            raise _BadModelFile("the file object must be opened in binary mode ('rb')")
        if head.startswith(b"\x93NUMPY"):
            raise _BadModelFile("is a single .npy array, not a privrec model file (an .npz written by save())")
        if not head.startswith(b"PK"):
            raise _BadModelFile("not a privrec model file (not an .npz archive)")
        with zipfile.ZipFile(source) as zf:
            members = _npz_members(zf, file_size)
            if "__meta__" not in members:
                raise _BadModelFile("not a privrec model file (no metadata record)")
            meta_text = _read_text_member(zf, members["__meta__"], "__meta__", _MAX_META_BYTES)
            meta = _parse_meta(meta_text)
            version = meta.get("version")
            if version not in _READABLE_VERSIONS:
                raise _BadModelFile(
                    f"unsupported privrec model format version {version!r} (this privrec reads "
                    f"{', '.join(map(str, _READABLE_VERSIONS))}); save the model again with a "
                    f"matching privrec version"
                )
            name = meta.get("class")
            target = MODEL_CLASSES.get(name) if isinstance(name, str) else None
            if target is None:
                raise _BadModelFile(f"unknown model class {str(name)[:60]!r}")
            if not issubclass(target, cls):
                raise _BadModelFile(f"holds a {name}, not a {cls.__name__}")
            declared = meta.get("arrays")
            if not isinstance(declared, dict):
                raise _BadModelFile("metadata 'arrays' must be an object of array name -> shape")
            specs = {}
            for k, entry in declared.items():
                ndims, dtypes = target._array_spec(k)
                if version == 1:
                    shape, dtype = entry, None
                else:
                    if not isinstance(entry, dict) or set(entry) != {"shape", "dtype"}:
                        raise _BadModelFile(f"metadata entry of array {k} must be {{'shape': [...], 'dtype': ...}}")
                    shape, dtype = entry["shape"], entry["dtype"]
                    if not isinstance(dtype, str) or dtype.lstrip("<>|=") not in ("f4", "f8"):
                        raise _BadModelFile(f"array {k}: metadata dtype {str(dtype)[:20]!r} is not float32/float64")
                if not isinstance(shape, list) or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
                ):
                    raise _BadModelFile(f"array {k}: metadata shape must be a list of non-negative integers")
                specs[k] = (tuple(shape), dtype, ndims, dtypes)
            allowed = {"__meta__"} | ({"__sha256__"} if version >= 2 else set())
            extra = sorted(set(members) - allowed - set(specs))
            if extra:
                raise _BadModelFile(
                    f"unexpected member(s) {[e[:40] for e in extra[:5]]} (not declared in the metadata)"
                )
            missing = sorted(set(specs) - set(members))
            if missing:
                raise _BadModelFile(f"arrays {missing} are declared in the metadata but missing from the file")
            _check_declared_sizes(specs, members, file_size)
            arrays = {}
            for k, (shape, dtype, ndims, dtypes) in specs.items():
                arrays[k] = _read_array_member(zf, members[k], k, shape, dtype, ndims, dtypes)
            digest = None
            if "__sha256__" in members:
                digest = _read_text_member(zf, members["__sha256__"], "__sha256__", 1024)
        if digest is not None and digest != _content_hash(meta_text, arrays):
            raise _BadModelFile("content hash mismatch: the file is corrupt or was edited after save()")
        if "item_factors_" not in arrays:
            raise _BadModelFile("item_factors_ missing")
        n_items, d = arrays["item_factors_"].shape
        if n_items == 0:  # d = 0 is legal: a DPALS bias / popularity-only model
            raise _BadModelFile(f"item_factors_ has no items (shape {arrays['item_factors_'].shape})")
        params = _check_params(meta.get("params", {}), target)
        if (
            isinstance(params.get("factors"), int)
            and not isinstance(params["factors"], bool)
            and params["factors"] != d
        ):
            raise _BadModelFile(f"params say factors={params['factors']} but item_factors_ has {d} columns")
        if "privacy_report" in meta:
            _verify_privacy_report(meta["privacy_report"], params)
        if isinstance(params.get("dtype"), str):
            try:
                params["dtype"] = np.dtype(params["dtype"]).type
            except TypeError:
                raise _BadModelFile(f"unknown dtype {params['dtype'][:20]!r}") from None
        try:
            model = target(**params)
        except TypeError as exc:
            raise _BadModelFile(f"parameters do not match {name}: {exc}") from None
        model._check_loaded_arrays(arrays, path)
        for k, v in arrays.items():
            setattr(model, k, v)
        try:
            model._restore_metadata(meta)
        except (KeyError, TypeError, AttributeError) as exc:
            raise _BadModelFile(f"malformed {name} metadata ({type(exc).__name__}: {exc})") from None
        model._restore_ids(meta)
        model._fitted_params = _param_fingerprint(model)
        return model

    def _check_loaded_arrays(self, arrays: dict[str, np.ndarray], path) -> None:
        n_items, d = arrays["item_factors_"].shape
        if "user_factors_" in arrays and arrays["user_factors_"].shape[1:] != (d,):
            raise ValueError(
                f"{path}: user_factors_ has {arrays['user_factors_'].shape[1:]} columns, item factors have {d}"
            )
        if "item_bias_" in arrays and arrays["item_bias_"].shape != (n_items,):
            raise ValueError(f"{path}: item_bias_ has shape {arrays['item_bias_'].shape}, expected ({n_items},)")
        if (
            "user_bias_" in arrays
            and "user_factors_" in arrays
            and arrays["user_bias_"].shape != arrays["user_factors_"].shape[:1]
        ):
            raise ValueError(f"{path}: user_bias_ does not match user_factors_")


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


#: the classes a model file may name (``"class"``), filled by :mod:`privrec.models` with the
#: estimators it defines (a registry here, so that loading needs no import of the package above)
MODEL_CLASSES: dict[str, type] = {}

#: parameters that do not shape a fit's result (changing them after the fit does not stop save())
_RUNTIME_PARAMS = frozenset({"show_progress", "num_threads"})
