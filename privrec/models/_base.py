"""Shared estimator API for privrec's factorisation models (spec 004 §6, Remark D.1 for projection).

The API follows scikit-learn (hyper-parameters in ``__init__`` only, learned state with a trailing
underscore, ``get_params`` / ``set_params`` / ``sklearn.base.clone``) and ``implicit`` 0.7
(``fit(user_items)``, ``recommend``, ``similar_items``, ``recalculate_user`` returning
``(ids, scores)`` arrays, batched over arrays of ids).

Learned state common to all models: ``item_factors_`` (n_items, d), ``user_factors_`` (n_users, d)
and, where a model has them, ``global_mean_``, ``user_bias_``, ``item_bias_``. A prediction is
``global_mean_ + user_bias_[u] + item_bias_[i] + <user_factors_[u], item_factors_[i]>``.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from .._io import atomic_path
from .._validation import check_csr_structure, check_int

FORMAT_NAME = "privrec-model"
FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_FLOAT_DTYPES = ("float32", "float64")
_MAX_META_BYTES = 256 << 20  # UTF-32 text of the metadata (privacy reports with many events)
_MAX_JSON_DEPTH = 64
_EPS_RTOL = 1e-6


def as_user_items(user_items, name: str = "user_items", n_items: int | None = None) -> sp.csr_matrix:
    """Validate and normalise a users x items rating matrix (CSR, or an ``Interactions``).

    Returns a float32 CSR with sorted int32 indices (a copy when needed). Every public entry that
    takes ratings (``fit``, ``recommend``, ``transform``, ``recalculate_user``) goes through here.
    Raises a one-line ``ValueError`` for dense / non-CSR input, a corrupt CSR (column index out of
    range, inconsistent ``indptr``: see :func:`privrec._validation.check_csr_structure`), NaN or
    infinite values, a wrong item count, or **duplicate (user, item) entries: they are rejected,
    never summed** (the same policy as :class:`privrec.data.Interactions`; resolve them first with
    ``matrix.sum_duplicates()`` or ``Interactions.from_arrays(..., duplicates=...)``).
    """
    matrix = getattr(user_items, "matrix", user_items)  # privrec.data.Interactions (duck-typed)
    if not sp.issparse(matrix):
        raise ValueError(
            f"{name} must be a scipy.sparse CSR matrix (users x items) or an Interactions, "
            f"got {type(user_items).__name__}"
        )
    if matrix.format != "csr":
        raise ValueError(f"{name} must be in CSR format (users x items), got {matrix.format.upper()}; call .tocsr()")
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {matrix.shape}")
    if n_items is not None and matrix.shape[1] != n_items:
        raise ValueError(f"{name} has {matrix.shape[1]} item columns, but the model was fitted on {n_items} items")
    is_sorted = check_csr_structure(matrix, name)
    data = np.asarray(matrix.data)
    indices = np.asarray(matrix.indices)
    indptr = np.asarray(matrix.indptr)
    small = max(matrix.shape) < np.iinfo(np.int32).max and len(indices) < np.iinfo(np.int32).max
    idx_dtype = np.int32 if small else np.int64
    out = sp.csr_matrix(
        (data.astype(np.float32, copy=False), indices.astype(idx_dtype, copy=False),
         indptr.astype(idx_dtype, copy=False)),
        shape=matrix.shape,
        copy=False,
    )
    if not is_sorted:
        out = out.copy()
        out.has_sorted_indices = False
        out.sort_indices()
    # checked above: sorted (now), no duplicates
    out.has_sorted_indices = True
    out.has_canonical_format = True
    return out


def check_fit_matrix(user_items) -> sp.csr_matrix:
    """``as_user_items`` plus the fit-time checks: at least one user, one item and one rating."""
    m = as_user_items(user_items)
    if m.shape[0] == 0 or m.shape[1] == 0:
        raise ValueError(f"user_items has no users or no items (shape {m.shape}); nothing to fit")
    if m.nnz == 0:
        raise ValueError("user_items holds no ratings (nnz = 0); every user and item has no data")
    return m


def check_ids(ids, n: int, name: str) -> tuple[np.ndarray, bool]:
    """Return ``(ids as int64 1-D array, was_scalar)``; ``ValueError`` for negative / out-of-range ids."""
    scalar = np.ndim(ids) == 0
    arr = np.atleast_1d(np.asarray(ids))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be an integer or a 1-D array of integers, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        if (arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))
                and np.all(np.abs(arr) < 2.0**62)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"{name} must be in [0, {n}), got values in [{arr.min()}, {arr.max()}]")
    return arr, scalar


def _topk(scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-n (descending) of a 2-D score array; -inf entries are never returned."""
    n = min(n, scores.shape[1])
    if n == 0:
        return np.zeros((scores.shape[0], 0), dtype=np.int64), np.zeros((scores.shape[0], 0), dtype=scores.dtype)
    part = np.argpartition(-scores, n - 1, axis=1)[:, :n]
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    ids = np.take_along_axis(part, order, axis=1)
    vals = np.take_along_axis(part_scores, order, axis=1)
    return ids, vals


class FactorizationModel(BaseEstimator):
    """Base class: recommend / similar_items / predict / projection / save / load.

    Subclasses implement ``fit`` and ``_project_users(user_items) -> (factors, user_bias)`` (the
    billboard projection of spec 004 §6 Remark D.1: a user's embedding recomputed from the fitted
    item side and that user's own ratings only).
    """

    # names of array attributes written by save(); subclasses extend
    _saved_arrays: tuple[str, ...] = ("item_factors_",)

    # ------------------------------------------------------------------ state helpers
    def _check_fitted(self):
        if getattr(self, "item_factors_", None) is None:
            raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit(user_items) first")

    @property
    def n_items_(self) -> int:
        self._check_fitted()
        return int(self.item_factors_.shape[0])

    def _item_bias(self):
        b = getattr(self, "item_bias_", None)
        return None if b is None else np.asarray(b)

    def _global(self) -> float:
        return float(getattr(self, "global_mean_", 0.0) or 0.0)

    def _project_users(self, user_items: sp.csr_matrix):
        raise NotImplementedError

    # ------------------------------------------------------------------ projection
    def recalculate_user(self, userid, user_items):
        """Billboard projection of users' own histories onto the item factors (no privacy cost).

        ``user_items`` rows correspond to ``userid`` (implicit 0.7 convention). Returns the user
        factors (d,) for a scalar id or (len(userid), d).
        """
        self._check_fitted()
        ids = np.atleast_1d(np.asarray(userid))
        rows = as_user_items(user_items, n_items=self.n_items_)
        if rows.shape[0] != ids.size:
            raise ValueError(f"user_items must have one row per userid ({ids.size}), got {rows.shape[0]}")
        factors, _ = self._project_users(rows)
        return factors[0] if np.ndim(userid) == 0 else factors

    def transform(self, user_items):
        """Project every row of ``user_items`` (users x items) onto the item factors (spec 004 Remark D.1)."""
        self._check_fitted()
        factors, _ = self._project_users(as_user_items(user_items, n_items=self.n_items_))
        return factors

    # ------------------------------------------------------------------ scoring
    def _user_vectors(self, ids, rows, recalculate):
        if recalculate:
            return self._project_users(rows)
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError(
                f"this {type(self).__name__} holds no user factors (a loaded or released model keeps only "
                "item factors); call with recalculate_user=True"
            )
        ids, _ = check_ids(ids, uf.shape[0], "userid")
        ub = getattr(self, "user_bias_", None)
        return uf[ids], (None if ub is None else np.asarray(ub)[ids])

    def recommend(
        self,
        userid,
        user_items,
        N: int = 10,
        filter_already_liked_items: bool = True,
        filter_items=None,
        recalculate_user: bool = False,
        items=None,
    ):
        """Top-N items for one user (1-D outputs) or an array of users (2-D outputs): ``(ids, scores)``.

        ``user_items`` holds the users' rated items: either one row per ``userid`` (implicit 0.7
        convention) or the full training matrix (then rows ``userid`` are used). Rated items are
        excluded when ``filter_already_liked_items``; ``filter_items`` are excluded for everybody;
        ``items`` restricts the candidates. Scores are predicted ratings. When fewer than N items are
        eligible the output is shorter: columns that no user can fill are dropped (a row of a
        batched call may then still end in id -1 / score -inf padding, never an excluded item).
        """
        self._check_fitted()
        n_items = self.n_items_
        N = check_int(N, "N", minimum=1)
        scalar = np.ndim(userid) == 0
        ids = np.atleast_1d(np.asarray(userid))
        mat = as_user_items(user_items, n_items=n_items)
        if mat.shape[0] == ids.size:
            rows = mat
        else:
            n_known = getattr(self, "user_factors_", None)
            if n_known is not None and mat.shape[0] == n_known.shape[0]:
                ids_checked, _ = check_ids(ids, mat.shape[0], "userid")
                rows = mat[ids_checked]
            else:
                raise ValueError(
                    f"user_items must have one row per userid ({ids.size}) or one row per fitted user, "
                    f"got {mat.shape[0]} rows"
                )
        uvec, ubias = self._user_vectors(ids, rows, recalculate_user)
        scores = self._score_all(uvec, ubias)
        candidates = None
        if items is not None:
            candidates, _ = check_ids(items, n_items, "items")
        if filter_items is not None:
            fi, _ = check_ids(filter_items, n_items, "filter_items")
            scores[:, fi] = -np.inf
        if filter_already_liked_items:
            r_idx = np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))
            scores[r_idx, rows.indices] = -np.inf
        if candidates is not None:
            sub = scores[:, candidates]
            top, vals = _topk(sub, N)
            top = candidates[top]
        else:
            top, vals = _topk(scores, N)
        # drop columns that are -inf for every user (fewer eligible items than N)
        finite_cols = np.isfinite(vals).any(axis=0)
        keep = int(finite_cols.sum()) if finite_cols.size else 0
        top, vals = top[:, :keep], vals[:, :keep]
        top = np.where(np.isfinite(vals), top, -1)
        if scalar:
            row_ok = np.isfinite(vals[0])
            return top[0][row_ok], vals[0][row_ok]
        return top, vals

    def _score_all(self, uvec, ubias):
        scores = uvec @ self.item_factors_.T
        ib = self._item_bias()
        if ib is not None:
            scores += ib[None, :]
        if ubias is not None:
            scores += ubias[:, None]
        scores += self._global()
        return scores.astype(np.float32, copy=False)

    def predict(self, users, items):
        """Predicted ratings for aligned arrays of (user, item) index pairs."""
        self._check_fitted()
        uf = getattr(self, "user_factors_", None)
        if uf is None:
            raise ValueError("this model holds no user factors; use transform() and the item factors instead")
        u, _ = check_ids(users, uf.shape[0], "users")
        i, _ = check_ids(items, self.n_items_, "items")
        if u.shape != i.shape:
            raise ValueError(f"users and items must have the same length, got {u.size} and {i.size}")
        pred = np.einsum("ij,ij->i", uf[u], self.item_factors_[i]) + self._global()
        ib = self._item_bias()
        if ib is not None:
            pred += ib[i]
        ub = getattr(self, "user_bias_", None)
        if ub is not None:
            pred += np.asarray(ub)[u]
        return pred.astype(np.float32, copy=False)

    def similar_items(self, itemid, N: int = 10, filter_items=None, items=None):
        """Top-N items by cosine similarity of item factors: ``(ids, scores)`` (batched like recommend).

        Items with an all-zero factor (never seen in training) have similarity 0 to everything.
        """
        self._check_fitted()
        N = check_int(N, "N", minimum=1)
        ids, scalar = check_ids(itemid, self.n_items_, "itemid")
        V = self.item_factors_.astype(np.float32, copy=False)
        norms = np.linalg.norm(V, axis=1)
        Vn = V / np.where(norms > 0, norms, 1.0)[:, None]
        scores = Vn[ids] @ Vn.T
        if filter_items is not None:
            fi, _ = check_ids(filter_items, self.n_items_, "filter_items")
            scores[:, fi] = -np.inf
        if items is not None:
            cand, _ = check_ids(items, self.n_items_, "items")
            top, vals = _topk(scores[:, cand], N)
            top = cand[top]
        else:
            top, vals = _topk(scores, N)
        if scalar:
            ok = np.isfinite(vals[0])
            return top[0][ok], vals[0][ok]
        return top, vals

    # ------------------------------------------------------------------ persistence
    # Model file schema (FORMAT_VERSION 2; see docs/data-and-model-files.md). An .npz (zip) holding
    # exactly: ``__meta__`` (0-d unicode array: the JSON metadata), optionally ``__sha256__`` (0-d
    # unicode array: content hash of the metadata text and every array), and one member per saved
    # array. On load only the arrays listed in the class's ``_saved_arrays`` (names ending in ``_``)
    # are accepted, each with the dtype and number of dimensions of ``_array_schema``.
    _array_schema: dict[str, tuple[int, tuple[str, ...]]] = {
        "item_factors_": (2, _FLOAT_DTYPES),
        "user_factors_": (2, _FLOAT_DTYPES),
        "item_bias_": (1, _FLOAT_DTYPES),
        "user_bias_": (1, _FLOAT_DTYPES),
        "global_mean_": (0, _FLOAT_DTYPES),
        "user_reg_norm_": (0, _FLOAT_DTYPES),
    }

    @classmethod
    def _array_spec(cls, name) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """``(allowed ndims, allowed dtype names)`` of saved array ``name``; ``ValueError`` if ``name``
        is not one of this class's saved arrays."""
        if (not isinstance(name, str) or name not in cls._saved_arrays or not name.endswith("_")
                or name.startswith("_")):
            raise ValueError(f"array {str(name)[:60]!r} is not a saved array of {cls.__name__} "
                             f"(expected some of {list(cls._saved_arrays)})")
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

        The write is atomic: an interrupted save never leaves a truncated file at ``path`` (its
        temporary file, ``.privrec-<name>.<random>.tmp``, is removed by the next save into the same
        folder once it is a day old). The file carries a SHA-256 of its content, checked on load.
        """
        self._check_fitted()
        arrays = {}
        for name in self._saved_arrays:
            val = getattr(self, name, None)
            if val is not None:
                arr = _c_order(np.asarray(val))
                ndims, dtypes = self._array_spec(name)
                if arr.dtype.name not in dtypes or arr.ndim not in ndims:
                    raise ValueError(f"cannot save {type(self).__name__}: {name} has dtype {arr.dtype} and "
                                     f"{arr.ndim} dimension(s), the model file schema wants {'/'.join(dtypes)} "
                                     f"with {'/'.join(map(str, ndims))}")
                arrays[name] = arr
        params = {k: _jsonable(v) for k, v in self._saved_params().items()}
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "class": type(self).__name__,
            "params": params,
            "arrays": {k: {"shape": list(v.shape), "dtype": v.dtype.str} for k, v in arrays.items()},
            **self._metadata(),
        }
        meta_text = json.dumps(meta)
        digest = _content_hash(meta_text, arrays)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, __meta__=np.array(meta_text), __sha256__=np.array(digest), **arrays)

    @classmethod
    def load(cls, path):
        """Load a model written by :meth:`save`; a one-line ``ValueError`` for anything else.

        Checked (see docs/data-and-model-files.md): the zip members (only ``__meta__``,
        ``__sha256__`` and the arrays this class saves), each array's dtype, dimensions, shape and
        finiteness, the parameters (a dict of known names with plain JSON values), the content
        hash, and a stored privacy report: its epsilons are recomputed from its events with
        ``dp_accounting`` and must match. Version-1 files (no dtypes, no hash) are still read.
        """
        path = Path(path)
        try:
            return cls._load_checked(path)
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            raise
        except _BadModelFile as exc:
            raise ValueError(f"{path}: {_one_line(exc)}") from None
        except ValueError as exc:
            msg = _one_line(exc)
            raise ValueError(msg if msg.startswith(f"{path}:") else f"{path}: {msg}") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError, TypeError, AttributeError, IndexError,
                RecursionError, OverflowError, NotImplementedError, RuntimeError, MemoryError) as exc:
            raise ValueError(f"{path}: not a readable privrec model file ({type(exc).__name__}: "
                             f"{_one_line(exc)[:300]})") from None

    @classmethod
    def _load_checked(cls, path: Path):
        with open(path, "rb") as fh:
            head = fh.read(8)
        if head.startswith(b"\x93NUMPY"):
            raise _BadModelFile("is a single .npy array, not a privrec model file (an .npz written by save())")
        if not head.startswith(b"PK"):
            raise _BadModelFile("not a privrec model file (not an .npz archive)")
        with zipfile.ZipFile(path) as zf:
            members = _npz_members(zf)
            if "__meta__" not in members:
                raise _BadModelFile("not a privrec model file (no metadata record)")
            meta_text = _read_text_member(zf, members["__meta__"], "__meta__", _MAX_META_BYTES)
            meta = _parse_meta(meta_text)
            version = meta.get("version")
            if version not in _READABLE_VERSIONS:
                raise _BadModelFile(f"unsupported privrec model format version {version!r} (this privrec reads "
                                    f"{', '.join(map(str, _READABLE_VERSIONS))}); save the model again with a "
                                    f"matching privrec version")
            from . import MODEL_CLASSES

            name = meta.get("class")
            target = MODEL_CLASSES.get(name) if isinstance(name, str) else None
            if target is None:
                raise _BadModelFile(f"unknown model class {str(name)[:60]!r}")
            if cls is not FactorizationModel and not issubclass(target, cls):
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
                if (not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                           for n in shape)):
                    raise _BadModelFile(f"array {k}: metadata shape must be a list of non-negative integers")
                specs[k] = (tuple(shape), dtype, ndims, dtypes)
            allowed = {"__meta__"} | ({"__sha256__"} if version >= 2 else set())
            extra = sorted(set(members) - allowed - set(specs))
            if extra:
                raise _BadModelFile(f"unexpected member(s) {[e[:40] for e in extra[:5]]} (not declared in the metadata)")
            missing = sorted(set(specs) - set(members))
            if missing:
                raise _BadModelFile(f"arrays {missing} are declared in the metadata but missing from the file")
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
        if isinstance(params.get("factors"), int) and not isinstance(params["factors"], bool) \
                and params["factors"] != d:
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
        return model

    def _check_loaded_arrays(self, arrays: dict[str, np.ndarray], path) -> None:
        n_items, d = arrays["item_factors_"].shape
        if "user_factors_" in arrays and arrays["user_factors_"].shape[1:] != (d,):
            raise ValueError(f"{path}: user_factors_ has {arrays['user_factors_'].shape[1:]} columns, item factors have {d}")
        if "item_bias_" in arrays and arrays["item_bias_"].shape != (n_items,):
            raise ValueError(f"{path}: item_bias_ has shape {arrays['item_bias_'].shape}, expected ({n_items},)")
        if "user_bias_" in arrays and "user_factors_" in arrays and arrays["user_bias_"].shape != arrays["user_factors_"].shape[:1]:
            raise ValueError(f"{path}: user_bias_ does not match user_factors_")


# ---------------------------------------------------------------------- model file helpers

class _BadModelFile(ValueError):
    """A check of the model file failed (the message does not name the file; ``load`` adds it)."""


def _c_order(a: np.ndarray) -> np.ndarray:
    """C-contiguous copy if needed, keeping 0-d arrays 0-d (``np.ascontiguousarray`` makes them 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def _one_line(exc: BaseException) -> str:
    return " ".join((str(exc) or type(exc).__name__).split())


def _content_hash(meta_text: str, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the metadata text and every array (name, dtype, shape, C-order bytes)."""
    h = hashlib.sha256()
    h.update(b"privrec-model-content\0")
    h.update(meta_text.encode("utf-8"))
    for k in sorted(arrays):
        a = _c_order(np.asarray(arrays[k]))
        h.update(f"\0{k}\0{a.dtype.str}\0{list(a.shape)}\0".encode())
        h.update(a.reshape(-1).view(np.uint8))
    return h.hexdigest()


def _npz_members(zf: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    members: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        fname = info.filename
        if not fname.endswith(".npy") or "/" in fname or "\\" in fname:
            raise _BadModelFile(f"unexpected member {fname[:60]!r} (a model file holds only .npy arrays)")
        key = fname[:-4]
        if key in members:
            raise _BadModelFile(f"member {key[:60]!r} appears twice")
        members[key] = info
    return members


def _read_header(fh, what: str):
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise _BadModelFile(f"member {what}: unsupported .npy version {version}")
        return tuple(int(n) for n in shape), bool(fortran), np.dtype(dtype)
    except _BadModelFile:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError):
        raise
    except Exception as exc:  # numpy parses the header with ast.literal_eval: SyntaxError, TokenError, ...
        raise _BadModelFile(f"member {what} has a corrupt .npy header ({type(exc).__name__})") from None


def _read_exact(fh, nbytes: int, what: str) -> np.ndarray:
    buf = np.empty(nbytes, dtype=np.uint8)
    view = memoryview(buf)
    got = 0
    while got < nbytes:
        n = fh.readinto(view[got:])
        if not n:
            raise _BadModelFile(f"member {what} is truncated ({got} of {nbytes} data bytes)")
        got += n
    if fh.read(1):
        raise _BadModelFile(f"member {what} has trailing data after its array")
    return buf


def _read_text_member(zf, info, what: str, max_bytes: int) -> str:
    if info.file_size > max_bytes:
        raise _BadModelFile(f"member {what} is too large ({info.file_size} bytes)")
    with zf.open(info) as fh:
        shape, fortran, dtype = _read_header(fh, what)
        if shape != () or dtype.kind != "U":
            raise _BadModelFile(f"member {what} must be a text scalar, got dtype {dtype} shape {shape}")
        raw = _read_exact(fh, dtype.itemsize, what)
    return str(raw.view(dtype)[0])


def _read_array_member(zf, info, what, shape, dtype_str, ndims, dtypes) -> np.ndarray:
    with zf.open(info) as fh:
        fshape, fortran, dtype = _read_header(fh, what)
        if dtype.name not in dtypes or dtype.hasobject or dtype.fields is not None:
            raise _BadModelFile(f"array {what} has dtype {dtype}, expected {'/'.join(dtypes)}")
        if dtype_str is not None and np.dtype(dtype_str) != dtype:
            raise _BadModelFile(f"array {what} has dtype {dtype}, metadata says {dtype_str}")
        if len(fshape) not in ndims:
            raise _BadModelFile(f"array {what} has {len(fshape)} dimension(s), expected {'/'.join(map(str, ndims))}")
        if fshape != shape:
            raise _BadModelFile(f"array {what} has shape {fshape}, metadata says {shape}")
        nbytes = int(np.prod(fshape, dtype=object)) * dtype.itemsize
        if nbytes > info.file_size:
            raise _BadModelFile(f"array {what} claims shape {fshape} but its member holds only {info.file_size} bytes")
        raw = _read_exact(fh, nbytes, what)
    arr = raw.view(dtype)
    arr = arr.reshape(fshape[::-1]).T if fortran else arr.reshape(fshape)
    arr = _c_order(arr)
    if not np.all(np.isfinite(arr)):
        raise _BadModelFile(f"array {what} contains NaN or infinite values")
    return arr


def _json_depth(obj) -> int:
    depth, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        depth = max(depth, d)
        if depth > _MAX_JSON_DEPTH:
            break
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return depth


def _parse_meta(text: str) -> dict:
    try:
        meta = json.loads(text)
    except RecursionError:
        raise _BadModelFile(f"metadata is nested too deeply (more than {_MAX_JSON_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise _BadModelFile(f"metadata is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise _BadModelFile("not a privrec model file (format tag missing)")
    if _json_depth(meta) > _MAX_JSON_DEPTH:
        raise _BadModelFile(f"metadata is nested too deeply (more than {_MAX_JSON_DEPTH} levels)")
    return meta


def _scalar_param(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _check_params(params, target) -> dict:
    if not isinstance(params, dict):
        raise _BadModelFile(f"metadata 'params' must be an object, got {type(params).__name__}")
    known = set(target._get_param_names())
    for k, v in params.items():
        if k not in known:
            raise _BadModelFile(f"unknown parameter {k[:40]!r} for {target.__name__}")
        if not (_scalar_param(v) or (isinstance(v, list) and all(_scalar_param(x) for x in v))):
            raise _BadModelFile(f"parameter {k} must be a number, string, boolean, null or a list of those")
    return dict(params)


def _as_epsilon(value, what: str) -> float:
    if value in ("inf", "Infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise _BadModelFile(f"privacy report: {what} must be a non-negative number or 'inf', got {str(value)[:40]!r}")
    return float(value)


def _same_epsilon(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=_EPS_RTOL, abs_tol=1e-12)


def _verify_privacy_report(report, params: dict) -> None:
    """Recompute epsilon from the report's events; any disagreement means the file was edited."""
    from ..privacy.ledger import epsilon_from_report

    if not isinstance(report, dict):
        raise _BadModelFile("privacy report must be an object")
    events = report.get("events")
    if not isinstance(events, list) or not all(isinstance(e, dict) and isinstance(e.get("event"), dict)
                                               for e in events):
        raise _BadModelFile("privacy report: 'events' must be a list of recorded events")
    delta = report.get("delta")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise _BadModelFile(f"privacy report: delta must be in (0, 1), got {str(delta)[:40]!r}")
    if isinstance(params.get("delta"), (int, float)) and not math.isclose(params["delta"], delta, rel_tol=_EPS_RTOL):
        raise _BadModelFile(f"privacy report delta {delta} differs from the model's delta {params['delta']}")
    if "epsilon_rdp" not in report:
        raise _BadModelFile("privacy report lacks epsilon_rdp")
    claimed = {"rdp": _as_epsilon(report["epsilon_rdp"], "epsilon_rdp")}
    if report.get("epsilon_pld") is not None:
        claimed["pld"] = _as_epsilon(report["epsilon_pld"], "epsilon_pld")
    accountant = report.get("accountant", "rdp")  # the accountant the noise was calibrated with
    if accountant not in ("rdp", "pld"):
        raise _BadModelFile(f"privacy report: unknown accountant {str(accountant)[:20]!r}")
    if accountant not in claimed:
        raise _BadModelFile(f"privacy report lacks epsilon_{accountant}, the value of its accountant")
    if "epsilon" in report and not _same_epsilon(_as_epsilon(report["epsilon"], "epsilon"), claimed[accountant]):
        raise _BadModelFile(f"privacy report: epsilon differs from epsilon_{accountant}")
    target_eps = params.get("epsilon", report.get("target_epsilon"))
    if "target_epsilon" in report and "epsilon" in params:
        if not _same_epsilon(_as_epsilon(report["target_epsilon"], "target_epsilon"),
                             _as_epsilon(params["epsilon"], "the epsilon parameter")):
            raise _BadModelFile("privacy report: target_epsilon differs from the model's epsilon parameter")
    private = target_eps is not None and not math.isinf(_as_epsilon(target_eps, "target epsilon"))
    if private and not events and not math.isinf(claimed["rdp"]):
        raise _BadModelFile("privacy report of a private model records no events (epsilon cannot be recomputed)")
    for accountant, value in claimed.items():
        try:
            actual = epsilon_from_report(report, accountant)
        except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
            raise _BadModelFile(f"privacy report events are malformed ({type(exc).__name__}: "
                                f"{_one_line(exc)[:200]})") from None
        if not _same_epsilon(actual, value):
            raise _BadModelFile(f"privacy report claims epsilon_{accountant} = {value:g} but its recorded events "
                                f"give {actual:g}: the report was edited")


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
