"""Loading a model file (a mixin of :class:`~privrec.models.FactorizationModel`, through
:class:`~privrec.models.persistence.PersistenceMixin`): ``load`` finds the file, runs the checks
of an untrusted file (:mod:`privrec.models.model_file`) in order, builds the class the file names
from the :data:`MODEL_CLASSES` registry and restores its arrays, metadata and ids. Importable from
:mod:`privrec.models.persistence` too.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .._params import _param_fingerprint
from .model_file import (
    _MAX_META_BYTES,
    _READABLE_VERSIONS,
    _BadModelFile,
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

#: the classes a model file may name (``"class"``), filled by :mod:`privrec.models` with the
#: estimators it defines (a registry here, so that loading needs no import of the package above)
MODEL_CLASSES: dict[str, type] = {}


class LoadingMixin:
    """``load`` (a class method) and the checks of the loaded arrays against each other."""

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
