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
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privrec._validation import MAX_RATING_MAGNITUDE, check_csr_structure, check_memory, check_random_state_seed
from privrec.data import DUPLICATE_POLICIES, Interactions, from_pandas, from_parquet, load_dataset
from privrec.data.download import download_dataset
from privrec.models import ALS, DPALS, load_model
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


# ---------------------------------------------------------------------- issue 26: inputs and API misuse


def _table(n_users=12, n_items=6, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "user": rng.integers(0, n_users, 80),
            "item": rng.integers(0, n_items, 80) + 100,
            "rating": rng.integers(1, 6, 80).astype(float),
        }
    )
    return df.drop_duplicates(["user", "item"]).reset_index(drop=True)


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text
    return text


NOT_RATINGS = {
    "datetime": lambda n: pd.date_range("2020", periods=n),
    "tz-datetime": lambda n: pd.date_range("2020", periods=n, tz="UTC"),
    "timedelta": lambda n: pd.to_timedelta(np.arange(n), unit="s"),
    "complex": lambda n: np.arange(n) + 1j,
    "bool-object": lambda n: np.array([True, False] * (n // 2) + [True] * (n % 2), dtype=object),
    "datetime-object": lambda n: np.array([pd.Timestamp("2020-01-01")] * n, dtype=object),
}


@pytest.mark.parametrize("kind", NOT_RATINGS)
def test_ratings_must_be_real_numbers(kind, tmp_path):
    """Datetimes used to become microseconds since the epoch, complex numbers lost their imaginary part."""
    df = _table()
    df["rating"] = NOT_RATINGS[kind](len(df))
    with pytest.raises(ValueError, match="rating column 'rating' must be numeric") as exc:
        from_pandas(df)
    _one_line(exc)
    with pytest.raises(ValueError, match="rating column 'rating' must be numeric"):
        ALS(factors=2, iterations=1).fit(df, show_progress=False)
    if kind in ("datetime", "timedelta"):
        df.to_parquet(tmp_path / "r.parquet")
        with pytest.raises(ValueError, match="rating column 'rating' must be numeric"):
            from_parquet(tmp_path / "r.parquet")
    if kind.endswith("object"):  # a dense object matrix too
        dense = np.empty((2, 2), dtype=object)
        dense[:] = NOT_RATINGS[kind](4).reshape(2, 2)
        with pytest.raises(ValueError, match="must be numeric"):
            ALS(factors=2, iterations=1).fit(dense, show_progress=False)


def test_ratings_too_large_for_float32_gramians_are_refused():
    """ALS with one rating of 1e20 used to give NaN factors and recommend() returned []."""
    X = sp.csr_matrix(np.array([[1.0, 2.0, 0.0], [3.0, 1e20, 4.0], [5.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"magnitude above 1e\+08, e\.g\. 1e\+20 at row 1, column 1") as exc:
        ALS(factors=2, iterations=1).fit(X, show_progress=False)
    _one_line(exc)
    with pytest.raises(ValueError, match="magnitude"):
        ALS(factors=2, iterations=1).fit(np.array([[1.0, 1e40], [2.0, np.nan]]), show_progress=False)
    ok = X.copy()
    ok.data[ok.data > MAX_RATING_MAGNITUDE] = MAX_RATING_MAGNITUDE  # the bound is accepted: finite factors
    model = ALS(factors=2, iterations=2, random_state=0).fit(ok, show_progress=False)
    assert np.isfinite(model.item_factors_).all()
    assert len(model.recommend(0, ok[[0]], N=1, filter_already_liked_items=False)[0]) == 1
    with pytest.raises(ValueError, match="magnitude"):
        model.recommend(0, X[[1]], N=1, recalculate_user=True)


@pytest.mark.parametrize(
    "bad_id",
    [[1, 2], {"a": 1}, {1, 2}, np.array([1, 2])],
    ids=["list", "dict", "set", "array"],
)
def test_ids_must_be_hashable_scalars(bad_id, tmp_path):
    """They used to raise TypeError: unhashable type (and the CLI printed a traceback)."""
    df = _table().astype({"user": object, "item": object})
    for col in ("user", "item"):
        bad = df.copy()
        bad.at[3, col] = bad_id
        with pytest.raises(ValueError, match=f"{col} column '{col}' holds an id of type") as exc:
            from_pandas(bad)
        _one_line(exc)
        with pytest.raises(ValueError, match="ids must be hashable scalars"):
            from_pandas(bad.drop(columns="rating"), rating_col=None, item_ids=df["item"].unique())
    with pytest.raises(ValueError, match="users holds an id of type"):
        Interactions.from_arrays(np.array([1, bad_id, 3], dtype=object), [1, 2, 3])
    import pyarrow as pa
    import pyarrow.parquet as pq

    for ids in ([[k] for k in range(4)], [{"a": k} for k in range(4)]):  # Parquet list / struct ids
        pq.write_table(pa.table({"user": ids, "item": [1, 2, 3, 4], "rating": [1.0] * 4}), tmp_path / "ids.parquet")
        with pytest.raises(ValueError, match="user column 'user' holds an id of type"):
            from_parquet(tmp_path / "ids.parquet")
    model = ALS(factors=2, iterations=1).fit(df, show_progress=False)
    with pytest.raises(ValueError, match="holds an id of type"):
        model.recommend_ids([bad_id, 1], filter_already_liked_items=False)


def test_nul_suffixed_ids_are_refused_not_merged():
    """'a' and 'a\\x00' used to become one user, and the saved model could not be loaded."""
    df = pd.DataFrame({"user": ["a", "a\x00", "b"], "item": [1, 1, 2], "rating": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"holds the id 'a\\x00', which ends in a NUL character") as exc:
        from_pandas(df)
    _one_line(exc)
    with pytest.raises(ValueError, match="NUL"):
        Interactions.from_arrays(["a", "a\x00", "b"], [1, 1, 2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="NUL"):
        from_pandas(df.iloc[[0, 2]], item_ids=["1\x00", 1, 2])
    with pytest.raises(ValueError, match="NUL"):
        ALS(factors=2, iterations=1).fit(df, show_progress=False)
    # querying 'a\x00' of a model that knows 'a' is an unknown user, not user 'a'
    model = ALS(factors=2, iterations=1, random_state=0).fit(df.iloc[[0, 2]], show_progress=False)
    with pytest.raises(ValueError, match="no fitted factors"):
        model.recommend_ids("a\x00", filter_already_liked_items=False)


def test_uint64_ids_beyond_int64_work_end_to_end(tmp_path):
    """recommend_ids(2**63) used to raise OverflowError."""
    users = np.array([2**63, 2**63 + 1, 5, 2**64 - 1], dtype=np.uint64)
    df = pd.DataFrame({"user": users, "item": [1, 2, 1, 2], "rating": [1.0, 2.0, 3.0, 4.0]})
    model = ALS(factors=2, iterations=1, random_state=0).fit(df, show_progress=False)
    assert model.user_ids_.dtype == np.uint64
    ids, _ = model.recommend_ids(2**63, df, N=2)
    np.testing.assert_array_equal(ids, [2])  # item 1 is rated, item 2 is left
    ids2, _ = model.recommend_ids([2**63, 2**64 - 1], filter_already_liked_items=False, N=1)
    assert ids2.shape == (2, 1)
    model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(loaded.user_ids_, model.user_ids_)


def test_set_params_after_fit_blocks_save_until_refit_or_reset(tmp_path):
    """set_params(factors=8) then save() used to write a file no load accepts."""
    X = sp.random(30, 10, density=0.3, random_state=0, format="csr", dtype=np.float32)
    model = ALS(factors=4, iterations=1, random_state=0).fit(X, show_progress=False)
    model.set_params(factors=8)
    with pytest.raises(ValueError, match=r"set_params since the fit \(factors: 4 -> 8\)") as exc:
        model.save(tmp_path / "m.npz")
    _one_line(exc)
    assert not (tmp_path / "m.npz").exists()
    model.set_params(factors=4, show_progress=False, num_threads=1)  # back; run-time settings are free
    model.save(tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz")
    loaded.set_params(regularization=1.0)
    with pytest.raises(ValueError, match="regularization"):
        loaded.save(tmp_path / "m2.npz")
    model.set_params(factors=8).fit(X, show_progress=False)  # a refit takes the new value
    model.save(tmp_path / "m3.npz")
    assert load_model(tmp_path / "m3.npz").item_factors_.shape[1] == 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = DPALS(epsilon=2.0, factors=2, iterations=1, random_state=0).fit(X, show_progress=False)
    dp.set_params(epsilon=8.0)
    with pytest.raises(ValueError, match="epsilon: 2.0 -> 8.0"):
        dp.save(tmp_path / "dp.npz")


def test_repeated_candidates_are_ranked_once():
    X = sp.random(30, 10, density=0.4, random_state=1, format="csr", dtype=np.float32)
    model = ALS(factors=3, iterations=1, random_state=0).fit(X, show_progress=False)
    ids, scores = model.similar_items(1, items=[2, 2, 2])
    np.testing.assert_array_equal(ids, [2])
    ids, scores = model.rank_items(0, X[[0]], [2, 5, 2, 5, 7])
    assert sorted(ids.tolist()) == [2, 5, 7] and np.all(np.diff(scores) <= 0)
    ids, _ = model.recommend([0, 1], X[[0, 1]], N=5, filter_already_liked_items=False, items=[3, 3, 4])
    assert ids.shape == (2, 2) and all(len(set(row)) == 2 for row in ids.tolist())
    ids, _ = model.similar_users(0, N=5, users=[1, 1, 2])
    assert sorted(ids.tolist()) == [1, 2]


def test_score_refuses_missing_ratings():
    """score() with a NaN rating used to return NaN."""
    df = _table()
    model = ALS(factors=2, iterations=1, random_state=0).fit(df, show_progress=False)
    held = df.iloc[:5].copy()
    held.loc[held.index[2], "rating"] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite rating") as exc:
        model.score(held)
    _one_line(exc)
    assert np.isfinite(model.score(df.iloc[:5]))


X_SMALL = sp.csr_matrix(np.array([[1.0, 2.0, 0.0, 4.0], [3.0, 0.0, 5.0, 1.0], [2.0, 4.0, 1.0, 0.0]]))


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: DPALS(epsilon=1.0, factors=2, iterations=1, budget=1e300), "budget"),
        (lambda: DPALS(epsilon=1.0, factors=2, iterations=1, max_norm=1e300), "max_norm"),
        (lambda: DPALS(epsilon=1.0, factors=2, iterations=1, gramian_ratio=1e-300), "gramian_ratio"),
        (lambda: DPALS(epsilon=1.0, factors=2, iterations=1, global_ratio=1e300), "global_ratio"),
        (lambda: DPALS(epsilon=1.0, factors=2, iterations=1, rating_range=(0, 1e30)), "rating_range"),
        (lambda: DPALS(epsilon=1.0, factors=2, iterations=1, label_bound=1e30), "label_bound"),
        (lambda: DPALS(epsilon=1.0, factors=2, iterations=1, reg_exponent=1e6), "reg_exponent"),
        (lambda: DPALS(epsilon=np.inf, factors=2, iterations=1, user_reg_exponent=1e6), "user_reg_exponent"),
        (lambda: ALS(factors=2, iterations=1, regularization=1e300), "regularization"),
        (lambda: ALS(factors=2, iterations=1, reg_exponent=1e6), "reg_exponent"),
        (lambda: ALS(factors=2, iterations=1, rating_range=(0, 1e30)), "rating_range"),
    ],
)
def test_extreme_parameters_are_one_line_errors_naming_them(make, name):
    """They used to raise "weights contains NaN", OverflowError, ZeroDivisionError, a solver's shape
    error, or give NaN factors without an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=name) as exc:
            make().fit(X_SMALL, show_progress=False)
    _one_line(exc)


def test_private_fit_overflow_is_a_clear_error():
    """Ratings far above the user clip overflowed float32: "features contains NaN"."""
    X = sp.random(60, 15, density=0.3, random_state=0, format="csr", dtype=np.float32)
    X.data = np.ceil(X.data * 5) * 2e7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="overflowed float32.*rescale the ratings") as exc:
            DPALS(epsilon=0.05, factors=3, iterations=2, rating_range=(0, 1e8), random_state=0).fit(
                X, show_progress=False
            )
    _one_line(exc)


def test_misused_fit_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="got dict"):
        DPALS().fit({"user": [1], "item": [2]})
    with pytest.raises(ValueError, match="got set"):
        ALS().fit({1, 2})
    df = _table()
    twice = pd.concat([df, df[["rating"]]], axis=1)  # two columns named 'rating'
    with pytest.raises(ValueError, match="rating_col='rating' names 2 columns"):
        from_pandas(twice)
    with pytest.raises(ValueError, match="names 2 columns"):
        ALS(factors=2, iterations=1).fit(twice, show_progress=False)
    df.to_parquet(tmp_path / "r.parquet")
    items = sorted(df["item"].unique())
    with pytest.raises(ValueError, match=r"the item vocabulary holds 1 repeated id\(s\)") as exc:
        from_parquet(tmp_path / "r.parquet", item_ids=[*items, items[0]])
    _one_line(exc)


ID_VALUES = st.one_of(
    st.integers(-3, 3),
    st.text(alphabet="ab\x00", max_size=3),
    st.lists(st.integers(0, 2), max_size=2),
    st.just(2**63),
)


@FUZZ
@given(st.lists(ID_VALUES, min_size=1, max_size=8))
def test_id_columns_are_encoded_without_collisions_or_refused(ids):
    """Any id column: a one-line ValueError, or one user per distinct id (nothing merged)."""
    df = pd.DataFrame({"user": pd.Series(ids, dtype=object), "item": 1, "rating": 1.0})
    try:
        x = from_pandas(df, duplicates="last")
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    except UserWarning:  # pragma: no cover - warnings are not errors here
        raise
    distinct = {(type(v) is str, v) for v in ids}
    assert x.n_users == len(distinct)


def test_a_fit_that_overflows_is_an_error_and_leaves_the_model_unfitted():
    """The last line of defence: NaN factors never pass for a fitted model (recommend returned [])."""

    class Overflowing(ALS):
        def _fitted(self, inp):  # every fit's explicit last step: the factors overflowed before it
            self.item_factors_ = np.full_like(self.item_factors_, np.nan)
            return super()._fitted(inp)

    with pytest.raises(ValueError, match="overflowed: item_factors_ holds NaN") as exc:
        Overflowing(factors=2, iterations=1).fit(X_SMALL)
    _one_line(exc)
    # and a release corrupted after its fit never ranks silently (recommend returned [])
    model = ALS(factors=2, iterations=1).fit(X_SMALL, show_progress=False)
    model.item_factors_[:] = np.nan
    with pytest.raises(ValueError, match="item_factors_ holds NaN"):
        model.recommend(0, X_SMALL[0], N=2)
