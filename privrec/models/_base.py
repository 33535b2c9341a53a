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

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from .._io import atomic_path
from .._validation import check_int

FORMAT_NAME = "privrec-model"
FORMAT_VERSION = 1


def as_user_items(user_items, name: str = "user_items", n_items: int | None = None) -> sp.csr_matrix:
    """Validate and normalise a users x items rating matrix (CSR, or an ``Interactions``).

    Returns a float32 CSR with sorted, summed-duplicate int32 indices (a copy when needed).
    Raises ``ValueError`` for dense / non-CSR input, NaN or infinite values, or a wrong item count.
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
    data = np.asarray(matrix.data)
    if data.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold numeric ratings, got dtype {data.dtype}")
    if data.size and not np.all(np.isfinite(data)):
        bad = int(data.size - np.count_nonzero(np.isfinite(data)))
        raise ValueError(f"{name} contains {bad} NaN or infinite rating(s)")
    out = sp.csr_matrix(
        (data.astype(np.float32, copy=False), np.asarray(matrix.indices), np.asarray(matrix.indptr)),
        shape=matrix.shape,
        copy=False,
    )
    if not out.has_canonical_format:
        out = out.copy()
        out.sum_duplicates()
    if out.indices.dtype != np.int32 and max(out.shape) < np.iinfo(np.int32).max and out.nnz < np.iinfo(np.int32).max:
        out.indices = out.indices.astype(np.int32)
        out.indptr = out.indptr.astype(np.int32)
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
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
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
    def _metadata(self) -> dict[str, Any]:
        return {}

    def _saved_params(self) -> dict[str, Any]:
        """Constructor parameters written by :meth:`save` (all of them by default)."""
        return self.get_params(deep=False)

    def _restore_metadata(self, meta: dict[str, Any]) -> None:
        pass

    def save(self, path) -> None:
        """Write the fitted model to ``path`` (npz arrays + JSON metadata: class, params, privacy report).

        The write is atomic: an interrupted save never leaves a truncated file at ``path``.
        """
        self._check_fitted()
        arrays = {}
        for name in self._saved_arrays:
            val = getattr(self, name, None)
            if val is not None:
                arrays[name] = np.asarray(val)
        params = {k: _jsonable(v) for k, v in self._saved_params().items()}
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "class": type(self).__name__,
            "params": params,
            "arrays": {k: list(v.shape) for k, v in arrays.items()},
            **self._metadata(),
        }
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, __meta__=np.array(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path):
        """Load a model written by :meth:`save`; ``ValueError`` for corrupt, truncated or mismatched files."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as npz:
                if "__meta__" not in npz.files:
                    raise ValueError("no metadata record")
                meta = json.loads(str(npz["__meta__"]))
                arrays = {k: npz[k] for k in npz.files if k != "__meta__"}
        except FileNotFoundError:
            raise
        except (zipfile.BadZipFile, EOFError, OSError, KeyError, json.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable privrec model file ({type(exc).__name__}: {exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise ValueError(f"{path}: not a privrec model file (format tag missing)")
        if meta.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported privrec model format version {meta.get('version')!r}")
        from . import MODEL_CLASSES

        name = meta.get("class")
        target = MODEL_CLASSES.get(name)
        if target is None:
            raise ValueError(f"{path}: unknown model class {name!r}")
        if cls is not FactorizationModel and not issubclass(target, cls):
            raise ValueError(f"{path}: holds a {name}, not a {cls.__name__}")
        declared = meta.get("arrays", {})
        if set(declared) != set(arrays):
            raise ValueError(f"{path}: arrays {sorted(arrays)} do not match the metadata {sorted(declared)}")
        for k, shape in declared.items():
            if list(arrays[k].shape) != list(shape):
                raise ValueError(f"{path}: array {k} has shape {arrays[k].shape}, metadata says {tuple(shape)}")
            if arrays[k].dtype.kind == "f" and not np.all(np.isfinite(arrays[k])):
                raise ValueError(f"{path}: array {k} contains NaN or infinite values")
        if "item_factors_" not in arrays or arrays["item_factors_"].ndim != 2:
            raise ValueError(f"{path}: item_factors_ missing or not 2-D")
        params = dict(meta.get("params", {}))
        if isinstance(params.get("dtype"), str):
            try:
                params["dtype"] = np.dtype(params["dtype"]).type
            except TypeError:
                raise ValueError(f"{path}: unknown dtype {params['dtype']!r}") from None
        try:
            model = target(**params)
        except TypeError as exc:
            raise ValueError(f"{path}: parameters do not match {name}: {exc}") from None
        model._check_loaded_arrays(arrays, path)
        for k, v in arrays.items():
            setattr(model, k, v)
        model._restore_metadata(meta)
        return model

    def _check_loaded_arrays(self, arrays: dict[str, np.ndarray], path) -> None:
        n_items, d = arrays["item_factors_"].shape
        if "user_factors_" in arrays and arrays["user_factors_"].shape[1:] != (d,):
            raise ValueError(f"{path}: user_factors_ has {arrays['user_factors_'].shape[1:]} columns, item factors have {d}")
        if "item_bias_" in arrays and arrays["item_bias_"].shape != (n_items,):
            raise ValueError(f"{path}: item_bias_ has shape {arrays['item_bias_'].shape}, expected ({n_items},)")
        if "user_bias_" in arrays and "user_factors_" in arrays and arrays["user_bias_"].shape != arrays["user_factors_"].shape[:1]:
            raise ValueError(f"{path}: user_bias_ does not match user_factors_")


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
