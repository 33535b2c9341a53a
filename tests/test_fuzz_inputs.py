"""Fuzzing of in-memory inputs (Hypothesis): sparse matrices, ids and parameters.

Every input either raises a one-line ``ValueError`` or is accepted with all invariants holding;
nothing else (IndexError, segfault, silent summing) may happen. Deterministic (``derandomize``)
and small so the whole fuzz suite stays within about a minute of CI; set
``PRIVREC_FUZZ_EXAMPLES`` to run more examples locally.
"""

import os
import tempfile
import warnings

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privrec._validation import MAX_RATING_MAGNITUDE, check_csr_structure, check_memory, check_random_state_seed
from privrec.data import DUPLICATE_POLICIES, Interactions, load_dataset
from privrec.data.download import download_dataset
from privrec.models import ALS
from privrec.models._base import as_user_items, check_ids

N = int(os.environ.get("PRIVREC_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=N or 150,
    deadline=None,
    derandomize=not N,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ_SLOW = settings(FUZZ, max_examples=N or 25)

VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-3, 6).map(float))


@st.composite
def raw_csr(draw):
    """(shape, data, indices, indptr) arrays: mostly valid, often subtly broken."""
    n_rows = draw(st.integers(0, 5))
    n_cols = draw(st.integers(0, 5))
    counts = draw(st.lists(st.integers(0, 4), min_size=n_rows, max_size=n_rows))
    nnz = sum(counts)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if draw(st.integers(0, 4)) == 0:  # break indptr
        indptr = np.array(
            draw(st.lists(st.integers(-1, nnz + 1), min_size=max(0, n_rows - 1), max_size=n_rows + 2)), dtype=np.int64
        )
    hi = max(n_cols, 1)
    indices = np.array(
        draw(
            st.lists(
                st.integers(-1 if draw(st.booleans()) else 0, hi + (1 if draw(st.integers(0, 5)) == 0 else -1)),
                min_size=nnz,
                max_size=nnz,
            )
        ),
        dtype=np.int64,
    )
    if draw(st.integers(0, 6)) == 0:  # length mismatch
        indices = indices[:-1]
    data = np.array(
        draw(
            st.lists(
                VALUES if draw(st.integers(0, 4)) == 0 else st.integers(1, 5).map(float), min_size=nnz, max_size=nnz
            )
        ),
        dtype=np.float64,
    )
    return (n_rows, n_cols), data, indices, indptr


def _build(shape, data, indices, indptr) -> sp.csr_matrix:
    m = sp.csr_matrix(shape, dtype=np.float32)
    m.data, m.indices, m.indptr = data, indices, indptr
    return m


def _reference_valid(shape, data, indices, indptr) -> bool:
    """Plain-Python statement of what a valid CSR is (duplicates are invalid)."""
    n_rows, n_cols = shape
    if len(indptr) != n_rows + 1 or len(indices) != len(data) or indptr[0] != 0 or indptr[-1] != len(indices):
        return False
    for r in range(n_rows):
        if indptr[r + 1] < indptr[r]:
            return False
    for r in range(n_rows):
        cols = list(indices[indptr[r] : indptr[r + 1]])
        if len(set(cols)) != len(cols) or any(c < 0 or c >= n_cols for c in cols):
            return False
    return bool(np.all(np.isfinite(data)))


def _dense(shape, data, indices, indptr):
    out = np.zeros(shape, dtype=np.float64)
    for r in range(shape[0]):
        for k in range(indptr[r], indptr[r + 1]):
            out[r, indices[k]] = data[k]
    return out


@FUZZ
@given(raw_csr())
def test_csr_check_agrees_with_the_reference_and_never_crashes(arrays):
    shape, data, indices, indptr = arrays
    valid = _reference_valid(*arrays)
    m = _build(*arrays)
    try:
        check_csr_structure(m, "m")
        ok = True
    except ValueError as exc:
        assert "\n" not in str(exc)
        ok = False
    assert ok == valid
    # a model input additionally refuses ratings too large for float32 Gramians
    in_scale = not len(data) or bool(np.nanmax(np.abs(data)) <= MAX_RATING_MAGNITUDE)
    try:
        out = as_user_items(_build(*arrays))
    except ValueError:
        assert not (valid and in_scale)
    else:
        assert valid and in_scale and out.shape == shape and out.has_sorted_indices
        np.testing.assert_array_equal(out.toarray(), _dense(*arrays).astype(np.float32))
    try:
        x = Interactions(_build(*arrays))
    except ValueError:
        assert not valid or len(data) == 0 or 0 in shape
    else:
        assert valid
        np.testing.assert_array_equal(x.matrix.toarray(), _dense(*arrays).astype(np.float32))


@FUZZ_SLOW
@given(raw_csr())
def test_fit_on_fuzzed_matrices_raises_value_error_or_fits(arrays):
    m = _build(*arrays)
    try:
        model = ALS(factors=2, iterations=1, num_threads=1, random_state=0).fit(m)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert _reference_valid(*arrays)
    assert np.all(np.isfinite(model.item_factors_))


@FUZZ
@given(
    st.lists(st.integers(0, 6), max_size=12),
    st.lists(st.integers(0, 6), max_size=12),
    st.lists(VALUES, max_size=12),
    st.sampled_from(DUPLICATE_POLICIES),
    st.booleans(),
)
def test_from_arrays_fuzz(users, items, values, policy, with_values):
    n = min(len(users), len(items), len(values))
    users, items, values = users[:n], items[:n], values[:n]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resolved duplicates are reported with a warning
            x = Interactions.from_arrays(users, items, values if with_values else None, duplicates=policy)
    except ValueError:
        pairs = list(zip(users, items))
        assert (
            n == 0
            or (with_values and not np.all(np.isfinite(values)))
            or (policy == "error" and len(set(pairs)) < len(pairs))
        )
        return
    assert x.nnz == len(set(zip(users, items)))
    check_csr_structure(x.matrix)


IDS = st.one_of(
    st.integers(-5, 20),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.lists(st.integers(-2, 12), max_size=5),
    st.lists(st.floats(-2, 12), max_size=5),
    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=2),
)


@FUZZ
@given(IDS, st.integers(0, 10))
def test_check_ids_fuzz(ids, n):
    try:
        arr, scalar = check_ids(ids, n, "ids")
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert arr.dtype == np.int64 and arr.ndim == 1 and (arr.size == 0 or (arr.min() >= 0 and arr.max() < n))


SEEDS = st.one_of(
    st.none(), st.integers(-(2**70), 2**140), st.floats(allow_nan=True), st.text(max_size=2), st.booleans()
)


@FUZZ
@given(SEEDS)
def test_seed_check_fuzz(seed):
    try:
        out = check_random_state_seed(seed)
    except ValueError:
        return
    np.random.default_rng(out)  # anything accepted is a seed numpy takes


@FUZZ_SLOW
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 2), st.text(max_size=2)), SEEDS)
def test_load_dataset_synthetic_parameters_fuzz(scale, seed):
    try:
        x = (
            load_dataset("synthetic-skew", scale=scale, random_state=seed)
            if isinstance(scale, str)
            else load_dataset(
                "synthetic-skew", scale=min(scale, 0.02) if scale == scale and scale > 0 else scale, random_state=seed
            )
        )
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert x.nnz > 0


@FUZZ
@given(
    st.one_of(st.integers(-3, 10**12), st.floats(allow_nan=True)),
    st.one_of(st.integers(-3, 10**7), st.floats()),
    st.sampled_from([1, 2, 4, 8, 0, -1]),
)
def test_check_memory_fuzz(rows, cols, itemsize):
    try:
        need = check_memory(rows, cols, itemsize, "x", limit=1 << 30)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert need == rows * cols * itemsize <= 1 << 30


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)


@FUZZ_SLOW
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "timeout": JUNK,
            "deadline": JUNK,
            "min_rate": JUNK,
            "max_bytes": JUNK,
            "max_ratio": JUNK,
            "sha256": JUNK,
            "force": st.booleans(),
        },
    ),
    st.one_of(st.just("ml-100k"), JUNK),
)
def test_download_arguments_fuzz(kwargs, name):
    """Bad arguments are ValueErrors; good ones reach a closed local port (no network) and fail cleanly."""
    with tempfile.TemporaryDirectory() as root:
        try:
            download_dataset(name, root, url="http://127.0.0.1:9/none.zip", **kwargs)
        except ValueError as exc:
            assert "\n" not in str(exc)
        assert not os.listdir(root)


@FUZZ_SLOW
@given(st.one_of(st.just("ml-100k"), st.just("synthetic-skew"), JUNK), JUNK, JUNK)
def test_load_dataset_arguments_fuzz(name, data_dir, cache_dir):
    with tempfile.TemporaryDirectory() as empty:
        try:  # data_dir None would search ./datasets: point it at an empty folder instead
            load_dataset(name, data_dir=empty if data_dir is None else data_dir, cache_dir=cache_dir, scale=0.01)
        except ValueError as exc:  # DatasetNotFoundError is one too
            assert "\n" not in str(exc)


def test_fuzz_settings_are_bounded():
    assert FUZZ.max_examples <= 150 or N  # CI budget (see module docstring)
