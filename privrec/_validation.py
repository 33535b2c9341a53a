"""Argument checks shared by every module: one wording for every bad-input error."""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import scipy.sparse as sp


def _real(value, name: str, kind: str = "a number") -> float:
    """``value`` as float; ``ValueError`` ("``name`` must be ``kind``") unless it is a real number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return float(value)


def check_epsilon(epsilon, name: str = "epsilon", allow_inf: bool = True) -> float:
    """Return ``epsilon`` as float; ``ValueError`` unless it is > 0 (``inf`` means no privacy)."""
    eps = _real(epsilon, name, "a positive number")
    if math.isnan(eps) or eps <= 0:
        raise ValueError(f"{name} must be > 0, got {epsilon!r}")
    if math.isinf(eps) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {epsilon!r}")
    return eps


def check_delta(delta, name: str = "delta") -> float:
    """Return ``delta`` as float; ``ValueError`` unless 0 < delta < 1."""
    d = _real(delta, name, "a number in (0, 1)")
    if not (0.0 < d < 1.0):
        raise ValueError(f"{name} must be in the open interval (0, 1), got {delta!r}")
    return d


def check_positive(value, name: str, allow_zero: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as float; ``ValueError`` unless > 0 (or >= 0 with ``allow_zero``)."""
    v = _real(value, name)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN")
    if math.isinf(v) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {value!r}")
    if v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return v


def check_int(value, name: str, minimum: int | None = None) -> int:
    """Return ``value`` as int; ``ValueError`` unless it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return v


def check_fraction(value, name: str, closed_low: bool = False, closed_high: bool = True) -> float:
    """Return ``value`` as float in (0, 1] (bounds configurable)."""
    v = _real(value, name)
    lo_ok = v >= 0 if closed_low else v > 0
    hi_ok = v <= 1 if closed_high else v < 1
    if math.isnan(v) or not (lo_ok and hi_ok):
        lo = "[" if closed_low else "("
        hi = "]" if closed_high else ")"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {value!r}")
    return v


def check_finite_array(x, name: str) -> np.ndarray:
    """Return ``x`` as an array; ``ValueError`` if it holds NaN or infinity."""
    arr = np.asarray(x)
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")
    return arr


#: largest rating (or rating-scale parameter) magnitude privrec accepts: a rating of 1e20 used to
#: give NaN factors and empty recommendations without an error. Measured on float32 ALS (CG and
#: Cholesky, explicit and implicit, regularization 0.01 to 1000, 4 to 32 factors): one rating of
#: 1e10 already overflows the CG residual norms, 1e8 never did (a factor of 10 below the first failure)
MAX_RATING_MAGNITUDE = 1e8
#: bound on parameters that scale statistics (budget, max_norm) or their noise (ratios), both ways
MAX_SCALE = 1e12


def check_scale(value, name: str, *, maximum: float = MAX_SCALE, minimum: float | None = None) -> float:
    """``value`` (a finite number, already range-checked by the caller) within ``[minimum, maximum]``:
    larger values overflow the float32 statistics (or, for noise ratios, make a multiplier underflow
    to 0); one-line ``ValueError`` naming ``name``."""
    v = float(value)
    if abs(v) > maximum:
        raise ValueError(
            f"{name}={value!r} is too large: at most {maximum:g} in magnitude (larger values overflow the "
            "float32 statistics of the fit); rescale the data instead"
        )
    if minimum is not None and abs(v) < minimum:
        raise ValueError(
            f"{name}={value!r} is too small: at least {minimum:g} (smaller values make a noise multiplier "
            "underflow to 0)"
        )
    return v


def check_rating_magnitude(values, name: str, where=None) -> None:
    """One-line ``ValueError`` when a rating's magnitude exceeds :data:`MAX_RATING_MAGNITUDE`.

    ``values``: the stored ratings (e.g. ``matrix.data``, before any float32 cast); ``where``: an
    optional function ``position -> text`` (e.g. ``"row 3, column 7"``) locating the first one.
    """
    vals = np.asarray(values)
    if vals.size == 0 or vals.dtype.kind not in "iuf":
        return
    big = np.abs(vals) > MAX_RATING_MAGNITUDE
    if big.any():
        first = int(np.flatnonzero(big)[0])
        at = f" at {where(first)}" if where is not None else ""
        raise ValueError(
            f"{name} holds {int(np.count_nonzero(big))} rating(s) of magnitude above {MAX_RATING_MAGNITUDE:g}, "
            f"e.g. {float(vals[first]):g}{at}: squared and summed they overflow the float32 Gramians; rescale the ratings"
        )


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def unhashable_id_error(values, name: str) -> ValueError | None:
    """The one-line ``ValueError`` for ids that are not hashable scalars (lists, dicts, arrays,
    Parquet structs / lists), naming ``name`` and the first such value; ``None`` if all are hashable."""
    seq = values.tolist() if isinstance(values, np.ndarray) else list(values)
    for x in seq:
        try:
            hash(x)
        except TypeError:
            return ValueError(
                f"{name} holds an id of type {type(x).__name__} ({_short(x)}): ids must be hashable scalars "
                "(strings, integers, ...)"
            )
    return None


def check_ids_not_nul_suffixed(values, name: str) -> None:
    """``ValueError`` when a string id ends in a NUL character (``'a\\x00'``): numpy strings drop
    trailing NULs, so it would become the id ``'a'`` -- two users merged, or a model file with a
    repeated id. ``values``: any sequence of ids (only ``str`` entries are looked at)."""
    if isinstance(values, np.ndarray) and values.dtype.kind != "O":
        return  # numeric ids, or numpy strings (trailing NULs already gone)
    seq = values.tolist() if isinstance(values, np.ndarray) else values
    for x in seq:
        if isinstance(x, str) and x.endswith("\x00"):
            raise ValueError(
                f"{name} holds the id {_short(x)}, which ends in a NUL character: it would collide with "
                f"{_short(x.rstrip(chr(0)))} (trailing NULs are dropped by numpy strings); remove the NULs"
            )


def check_random_state_seed(random_state, name: str = "random_state"):
    """Return ``random_state`` unchanged if it is ``None``, a non-negative int seed (< 2**128), a
    ``SeedSequence`` or a numpy ``Generator`` / ``RandomState``; else a one-line ``ValueError``.

    (numpy's own message for ``-1`` is "expected non-negative integer", without the parameter name.)
    """
    if random_state is None or isinstance(
        random_state, (np.random.Generator, np.random.RandomState, np.random.SeedSequence)
    ):
        return random_state
    if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)):
        raise ValueError(f"{name} must be None or a non-negative integer seed, got {random_state!r}")
    if random_state < 0:
        raise ValueError(f"{name} must be a non-negative integer seed, got {random_state!r}")
    if int(random_state) >= 1 << 128:
        raise ValueError(f"{name} must be < 2**128, got {random_state!r}")
    return random_state


# ------------------------------------------------------------------------------- sparse inputs


def check_csr_structure(matrix, name: str = "matrix", *, finite: bool = True) -> bool:
    """Check the internal arrays of a CSR matrix before anything indexes with them.

    scipy does not check a CSR built from ``(data, indices, indptr)`` beyond array lengths, and a
    CSR with a column index >= ``shape[1]`` makes scipy's C++ routines (and any solver gathering
    rows of a factor matrix) read out of bounds: a segmentation fault, or silently wrong numbers.
    Checked, all vectorised in O(nnz) (an O(nnz log nnz) sort only when some row is unsorted):

    * ``indptr``: integer, length ``n_rows + 1``, starts at 0, ends at ``nnz``, non-decreasing;
    * ``indices``: integer, same length as ``data``, every value in ``[0, n_cols)``;
    * ``data``: numeric (bool, int, float), and finite when ``finite``;
    * no duplicate (row, column) entries. **Policy: duplicates are rejected** (never summed nor
      dropped), with an error naming how many there are and the first one; resolve them on purpose
      first (``matrix.sum_duplicates()``, or ``Interactions.from_arrays(..., duplicates=...)``).

    Returns whether the column indices are sorted within every row (the caller may then set
    ``has_sorted_indices`` without scipy re-checking). Raises a one-line ``ValueError``.
    """
    if not sp.issparse(matrix) or matrix.format != "csr":
        got = matrix.format.upper() if sp.issparse(matrix) else type(matrix).__name__
        raise ValueError(f"{name} must be a scipy.sparse CSR matrix, got {got}")
    shape = matrix.shape
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {shape}")
    n_rows, n_cols = int(shape[0]), int(shape[1])
    if n_rows < 0 or n_cols < 0:
        raise ValueError(f"{name} has a negative dimension in its shape {shape}")
    indptr = np.asarray(matrix.indptr)
    indices = np.asarray(matrix.indices)
    data = np.asarray(matrix.data)
    if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
        raise ValueError(f"{name} is corrupt: indptr, indices and data must be 1-D arrays")
    if indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
        raise ValueError(
            f"{name} is corrupt: indptr / indices must be integer arrays, got {indptr.dtype} / {indices.dtype}"
        )
    if data.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold numeric values, got dtype {data.dtype}")
    if len(indptr) != n_rows + 1:
        raise ValueError(f"{name} is corrupt: indptr has {len(indptr)} entries, expected n_rows + 1 = {n_rows + 1}")
    if len(indices) != len(data):
        raise ValueError(f"{name} is corrupt: {len(indices)} column indices but {len(data)} values")
    nnz = len(indices)
    if int(indptr[0]) != 0:
        raise ValueError(f"{name} is corrupt: indptr[0] is {int(indptr[0])}, expected 0")
    if int(indptr[-1]) != nnz:
        raise ValueError(f"{name} is corrupt: indptr[-1] is {int(indptr[-1])} but there are {nnz} stored entries")
    if n_rows and np.any(indptr[1:] < indptr[:-1]):
        row = int(np.flatnonzero(indptr[1:] < indptr[:-1])[0])
        raise ValueError(
            f"{name} is corrupt: indptr decreases at row {row} ({int(indptr[row])} -> {int(indptr[row + 1])})"
        )
    if nnz == 0:
        return True
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0 or hi >= n_cols:
        bad = (indices < 0) | (indices >= n_cols)
        first = int(np.flatnonzero(bad)[0])
        row = int(np.searchsorted(indptr, first, side="right") - 1)
        raise ValueError(
            f"{name} is corrupt: {int(np.count_nonzero(bad))} column index(es) outside [0, {n_cols}), "
            f"e.g. {int(indices[first])} in row {row}"
        )
    if finite and data.dtype.kind == "f":
        ok = np.isfinite(data)
        if not ok.all():
            n_bad = nnz - int(np.count_nonzero(ok))
            first = int(np.flatnonzero(~ok)[0])
            row = int(np.searchsorted(indptr, first, side="right") - 1)
            raise ValueError(
                f"{name} contains {n_bad} NaN or infinite value(s), e.g. in row {row}, column {int(indices[first])}"
            )
    if nnz < 2:
        return True
    # adjacent pairs inside one row: the first entry of every non-empty row (but the first) starts a new row
    inside = np.ones(nnz - 1, dtype=bool)
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < nnz)]
    inside[starts - 1] = False
    left, right = indices[:-1], indices[1:]
    descending = (right < left) & inside
    is_sorted = not bool(descending.any())
    if is_sorted:
        dup = (right == left) & inside
        n_dup = int(np.count_nonzero(dup))
        if n_dup:
            first = int(np.flatnonzero(dup)[0])
            _raise_duplicates(name, n_dup, int(np.searchsorted(indptr, first, side="right") - 1), int(indices[first]))
        return True
    # unsorted rows: sort (row, column) keys once
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr).astype(np.int64, copy=False))
    key = rows * np.int64(max(n_cols, 1)) + indices.astype(np.int64, copy=False)
    del rows
    key.sort()
    same = key[1:] == key[:-1]
    n_dup = int(np.count_nonzero(same))
    if n_dup:
        k = int(key[int(np.flatnonzero(same)[0])])
        _raise_duplicates(name, n_dup, k // max(n_cols, 1), k % max(n_cols, 1))
    return False


def _raise_duplicates(name: str, n_dup: int, row: int, col: int):
    raise ValueError(
        f"{name} has {n_dup} duplicate (row, column) entr{'y' if n_dup == 1 else 'ies'}, e.g. row {row}, "
        f"column {col}; privrec rejects duplicates instead of summing them: resolve them first "
        f"(matrix.sum_duplicates(), or Interactions.from_arrays(..., duplicates=...))"
    )


# ------------------------------------------------------------------------------- memory


def _physical_memory() -> int | None:
    try:
        import os

        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def memory_limit() -> int:
    """Bytes one array -- or one fit's estimated peak (:func:`check_fit_memory`) -- may take:
    ``$PRIVREC_MAX_ARRAY_BYTES`` if set, else half the physical memory (16 GiB when it cannot be read)."""
    import os

    env = os.environ.get("PRIVREC_MAX_ARRAY_BYTES")
    if env:
        try:
            v = int(float(env))
        except ValueError:
            raise ValueError(f"PRIVREC_MAX_ARRAY_BYTES must be a number of bytes, got {env!r}") from None
        if v <= 0:
            raise ValueError(f"PRIVREC_MAX_ARRAY_BYTES must be > 0, got {env!r}")
        return v
    phys = _physical_memory()
    return phys // 2 if phys else 16 << 30


def _gib(n: int) -> str:
    if n >= 1 << 40:
        return f"{n / (1 << 40):.3g} TiB"
    return f"{n / (1 << 30):.3g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.3g} MiB"


def check_memory(n_rows, n_cols, itemsize, what: str, limit: int | None = None) -> int:
    """Estimate the bytes of an ``n_rows x n_cols`` array of ``itemsize``-byte values and raise a
    one-line ``ValueError`` when it exceeds ``limit`` (default :func:`memory_limit`), instead of
    numpy's ``MemoryError`` (or the machine swapping) half-way through a fit.

    Exact Python-int arithmetic (no overflow). Returns the estimate in bytes.
    """
    r = check_int(n_rows, f"{what}: number of rows", 0)
    c = check_int(n_cols, f"{what}: number of columns", 0)
    s = check_int(itemsize, f"{what}: item size", 1)
    need = r * c * s
    cap = memory_limit() if limit is None else check_int(limit, "limit", 1)
    if need > cap:
        raise ValueError(
            f"{what} would need {_gib(need)} ({r:,} x {c:,} x {s} bytes), more than the limit of "
            f"{_gib(cap)} (set PRIVREC_MAX_ARRAY_BYTES to change it); use fewer factors or less data"
        )
    return need


class FitMemoryError(ValueError, MemoryError):
    """A fit whose estimated peak memory exceeds :func:`memory_limit` (raised before allocating).

    Both a ``ValueError`` (privrec's bad-input error, one line in the CLI) and a ``MemoryError``."""


def sparse_to_csr(matrix, name: str = "matrix") -> sp.csr_matrix:
    """A scipy sparse matrix or array (CSR, CSC, COO, ...) as CSR, checked *before* scipy converts it
    (scipy's COO -> CSR sums duplicates silently; a corrupt CSC would be read out of bounds)."""
    fmt = matrix.format
    if fmt == "csr":
        return matrix
    if len(matrix.shape) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {matrix.shape}")
    n_rows, n_cols = matrix.shape
    if fmt == "csc":
        # the CSC arrays are the CSR arrays of the transpose: one structural check of those
        t = sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=(n_cols, n_rows))
        check_csr_structure(t, f"{name} (CSC)")
        return sp.csr_matrix(matrix.tocsr())
    if fmt == "coo":
        row, col, data = np.asarray(matrix.row), np.asarray(matrix.col), np.asarray(matrix.data)
        if not (len(row) == len(col) == len(data)):
            raise ValueError(f"{name} (COO) is corrupt: row, col and data differ in length")
        if len(row) and (row.min() < 0 or row.max() >= n_rows or col.min() < 0 or col.max() >= n_cols):
            raise ValueError(f"{name} (COO) has coordinates outside its shape {matrix.shape}")
        if data.dtype.kind not in "biuf":
            raise ValueError(f"{name} must hold numeric ratings, got dtype {data.dtype}")
        out = sp.csr_matrix(matrix.tocsr())
        if out.nnz != len(data):
            n_dup = len(data) - out.nnz
            raise ValueError(
                f"{name} (COO) has {n_dup} duplicate (user, item) entr{'y' if n_dup == 1 else 'ies'}; "
                f"privrec rejects duplicates instead of summing them: build it with "
                f"Interactions.from_arrays(..., duplicates=...)"
            )
        return out
    return sp.csr_matrix(matrix.tocsr())  # DOK / LIL / BSR / DIA cannot hold duplicates
