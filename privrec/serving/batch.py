"""Every user's top-N to Parquet, in user batches with bounded memory: :func:`recommend_all`.

The users are taken ``batch_size`` at a time: their vectors (stored user factors, or the
billboard projection of their own rows on the released item side, which costs no privacy), their
scores against every item (the model's own ``recommend``; or an :class:`~privrec.serving.ItemIndex`
for approximate search), the top N, and one Parquet row per (user, rank). Rows are buffered up to
``row_group_size`` and written with one ``pyarrow.parquet.ParquetWriter``, so memory is bounded by
the batch, not by the number of users: by default a batch is as many users as the evaluation
memory budget allows (:func:`privrec.evaluation.topk.chunk_rows`: 512 MiB, ``$PRIVREC_EVAL_MEMORY_MB``
or ``memory_budget=``) for the score matrix and the top-N selection (the same sizing as the
models' ``recommend`` and every ranking metric), and a batch also holds at most
``max_batch_ratings`` ratings (the projection's temporaries grow with them), on top of the
ratings matrix itself.
The file is written atomically (:func:`privrec._io.atomic_path`). Writing Parquet needs pyarrow (the
optional extra ``privrec[parquet]``, also pulled by ``privrec[serving]``): without it
:func:`recommend_all` raises a one-line ``ImportError`` naming the extra.

Output columns: ``user`` (the ``Interactions``' user ids, or row indices for a bare matrix),
``rank`` (1 = best), ``item`` (the model's item ids when it has them, else item indices) and
``score`` (the model's ranking score, float32). A user with fewer than N eligible items gets fewer
rows.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._io import atomic_path
from .._optional import require
from .._validation import check_int
from ..models._base import _is_identity_ids, as_user_items
from ..models.ids import ignores_unknown_items_quietly

#: at most this many users per batch when ``batch_size`` is not given
MAX_BATCH_USERS = 8192
#: float64 entries of the per-rating (d + 1)-wide temporaries a batch's projection may hold when
#: ``max_batch_ratings`` is not given (kept at the former (d + 1)^2-per-rating sizing: the
#: projection no longer forms per-rating outer products, so this is a generous bound)
DEFAULT_PROJECTION_ENTRIES = 1 << 25
#: default Parquet row-group size (rows)
ROW_GROUP_SIZE = 1_000_000


def default_batch_size(n_items: int, memory_budget: int | None = None) -> int:
    """Users per batch: as many as the evaluation memory budget allows for their scores and the
    top-N selection (:func:`privrec.models._base._score_chunk_rows`), at most :data:`MAX_BATCH_USERS`."""
    from ..models._base import _score_chunk_rows

    return int(min(MAX_BATCH_USERS, _score_chunk_rows(n_items, memory_budget)))


def default_batch_ratings(factors: int) -> int:
    """Ratings per batch so that per-rating ``(d + 1) x (d + 1)`` temporaries hold about
    :data:`DEFAULT_PROJECTION_ENTRIES` float64 entries (256 MiB)."""
    return int(max(1024, DEFAULT_PROJECTION_ENTRIES // (int(factors) + 1) ** 2))


def user_batches(indptr: np.ndarray, batch_size: int, max_ratings: int):
    """``(start, stop)`` user ranges of at most ``batch_size`` users and ``max_ratings`` ratings each
    (a single user with more ratings is a batch of one)."""
    n = indptr.size - 1
    b0 = 0
    while b0 < n:
        b1 = min(b0 + batch_size, n)
        limit = int(np.searchsorted(indptr, indptr[b0] + max_ratings, side="right")) - 1
        b1 = max(b0 + 1, min(b1, limit))
        yield b0, b1
        b0 = b1


def aligned_user_items(model, user_items) -> tuple[sp.csr_matrix, np.ndarray | None]:
    """``(users x model items CSR, user ids or None)`` of ``user_items`` (an ``Interactions`` or a
    users x items matrix).

    An ``Interactions`` whose item ids differ from the model's ``item_ids_`` is re-indexed to the
    model's items (ratings of items the model does not know are dropped, with a ``UserWarning``
    unless the model's items are a private item selection, which leaves items out by design);
    otherwise the columns must be the model's items (same count).
    """
    matrix = getattr(user_items, "matrix", None)
    if matrix is None:
        return as_user_items(user_items, n_items=model.n_items_, model=type(model).__name__), None
    user_ids = np.asarray(user_items.user_ids)
    data_items = np.asarray(user_items.item_ids)
    model_items = getattr(model, "item_ids_", None)
    if model_items is None or (len(model_items) == len(data_items) and np.array_equal(model_items, data_items)):
        if model_items is None and not _is_identity_ids(data_items, len(data_items)):
            warnings.warn(
                f"this {type(model).__name__} holds no item ids (saved without a catalogue): the data's items are "
                "matched to the model's by position and the item column holds the model's item indices",
                UserWarning,
                stacklevel=3,
            )
        csr = as_user_items(matrix, n_items=model.n_items_, model=type(model).__name__)
        return csr, user_ids
    csr = as_user_items(matrix)
    codes = model._codes("item", data_items, model.n_items_, strict=False)
    if not np.any(codes >= 0):
        raise ValueError(
            f"none of the data's {len(data_items)} item ids is among the model's {model.n_items_} item ids "
            f"(e.g. data {list(data_items[:3])} vs model {list(np.asarray(model_items)[:3])})"
        )
    cols = codes[csr.indices]
    keep = cols >= 0
    dropped = int(csr.nnz - np.count_nonzero(keep))
    if dropped and not ignores_unknown_items_quietly(model):
        warnings.warn(
            f"{dropped} rating(s) of {int(np.count_nonzero(codes < 0))} item(s) the model does not know are ignored",
            UserWarning,
            stacklevel=3,
        )
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))[keep]
    # the id maps are one-to-one, so no two ratings of a user land on the same model item
    out = sp.csr_matrix((csr.data[keep], (rows, cols[keep])), shape=(csr.shape[0], model.n_items_))
    return as_user_items(out, n_items=model.n_items_), user_ids


def _use_stored_factors(model, n_users: int, user_ids, recalculate_user) -> bool:
    """Whether to score with the model's stored user factors instead of projecting each user's row."""
    uf = getattr(model, "user_factors_", None)
    if recalculate_user:
        return False
    if recalculate_user is not None:  # False: the stored factors, which must exist for these users
        if uf is None:
            raise ValueError(
                f"recalculate_user=False needs stored user factors; this {type(model).__name__} holds none "
                "(a loaded private model keeps only the item side): leave recalculate_user=None to project users"
            )
        if uf.shape[0] != n_users:
            raise ValueError(f"user_items has {n_users} users but the model has {uf.shape[0]} fitted users")
        return True
    if uf is None or uf.shape[0] != n_users:
        return False
    model_users = getattr(model, "user_ids_", None)
    if user_ids is not None and model_users is not None:
        return len(model_users) == len(user_ids) and bool(np.array_equal(model_users, user_ids))
    return True


def recommend_all(
    model,
    user_items,
    path,
    N: int = 10,
    batch_size: int | None = None,
    *,
    max_batch_ratings: int | None = None,
    filter_already_liked_items: bool = True,
    recalculate_user: bool | None = None,
    index=None,
    row_group_size: int = ROW_GROUP_SIZE,
    show_progress: bool = False,
    memory_budget: int | None = None,
) -> dict:
    """Write every user's top-N items to the Parquet file ``path`` (module docstring); return a summary
    ``{"path", "users", "rows", "N", "batch_size", "max_batch_ratings", "approximate"}``.

    Parameters
    ----------
    model : a fitted privrec model.
    user_items : the users' rated items: an ``Interactions`` (its user ids go to the ``user``
        column; its items are matched to the model's item ids when the model has them) or a users x
        items matrix indexed like the model's items.
    N : items per user.
    batch_size : users per batch (``None``: :func:`default_batch_size` of ``memory_budget``).
    max_batch_ratings : ratings per batch at most (``None``: :func:`default_batch_ratings`; the
        projection of users without stored factors holds per-rating temporaries).
    filter_already_liked_items : leave out each user's rated items.
    recalculate_user : ``None`` (default): score with the stored user factors when the model has
        them for exactly these users (the same user ids; without ids on either side, the same
        number of rows), else project each user's row (billboard, free); ``True`` / ``False``
        force either.
    index : an :class:`~privrec.serving.ItemIndex` of ``model`` for approximate search (``None``:
        exact, the model's ``recommend``).
    memory_budget : bytes of score buffers per batch (``None``: the evaluation default, 512 MiB or
        ``$PRIVREC_EVAL_MEMORY_MB``; :mod:`privrec.evaluation.topk`).
    """
    pa = require("pyarrow", "recommend_all (writes Parquet)")
    pq = require("pyarrow.parquet", "recommend_all (writes Parquet)")

    model._check_fitted()
    N = check_int(N, "N", minimum=1)
    row_group_size = check_int(row_group_size, "row_group_size", minimum=1)
    if index is not None and index.model is not model:
        raise ValueError("index was built for another model: build ItemIndex(model) for this one")
    matrix, user_ids = aligned_user_items(model, user_items)
    n_users = matrix.shape[0]
    if batch_size is None:
        batch_size = default_batch_size(model.n_items_, memory_budget)
    batch_size = check_int(batch_size, "batch_size", 1)
    if max_batch_ratings is None:
        max_batch_ratings = default_batch_ratings(model.item_factors_.shape[1])
    max_batch_ratings = check_int(max_batch_ratings, "max_batch_ratings", 1)
    stored = _use_stored_factors(model, n_users, user_ids, recalculate_user)
    users_pa = pa.array(np.arange(n_users, dtype=np.int64) if user_ids is None else user_ids)
    model_items = getattr(model, "item_ids_", None)
    items_pa = None if model_items is None else pa.array(np.asarray(model_items))
    schema = pa.schema(
        [
            ("user", users_pa.type),
            ("rank", pa.int32()),
            ("item", pa.int32() if items_pa is None else items_pa.type),
            ("score", pa.float32()),
        ]
    )
    batches = user_batches(np.asarray(matrix.indptr), batch_size, max_batch_ratings)
    if show_progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="recommend_all", unit="batch")
    total = 0
    with atomic_path(path) as tmp, pq.ParquetWriter(str(tmp), schema) as writer:
        buffered: list = []
        n_buffered = 0
        for b0, b1 in batches:
            rows = matrix[b0:b1]
            ids = np.arange(b0, b1) if stored else np.arange(b1 - b0)
            if index is None:
                top, vals = model.recommend(
                    ids, rows, N=N, filter_already_liked_items=filter_already_liked_items, recalculate_user=not stored
                )
            else:
                uvec, ubias = model._user_vectors(ids, rows, not stored)
                top, vals = index.top_n(uvec, ubias, N, rows if filter_already_liked_items else None)
            ok = (top >= 0) & np.isfinite(vals)
            r, c = np.nonzero(ok)
            item_idx = top[ok].astype(np.int64)
            table = pa.table(
                {
                    "user": users_pa.take(pa.array(b0 + r)),
                    "rank": pa.array((c + 1).astype(np.int32)),
                    "item": pa.array(item_idx.astype(np.int32)) if items_pa is None else items_pa.take(item_idx),
                    "score": pa.array(vals[ok].astype(np.float32)),
                },
                schema=schema,
            )
            buffered.append(table)
            n_buffered += table.num_rows
            total += table.num_rows
            if n_buffered >= row_group_size:
                writer.write_table(pa.concat_tables(buffered), row_group_size=row_group_size)
                buffered, n_buffered = [], 0
        if buffered or total == 0:
            writer.write_table(pa.concat_tables(buffered) if buffered else schema.empty_table())
    return {
        "path": str(Path(path)),
        "users": int(n_users),
        "rows": int(total),
        "N": N,
        "batch_size": int(batch_size),
        "max_batch_ratings": int(max_batch_ratings),
        "approximate": index is not None,
    }
