"""privrec.data (Interactions, long tables, Parquet, registry, splits), privrec._io and
privrec._validation: behaviour and one-line ValueErrors for bad input."""

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from privrec import _io, _validation
from privrec.data import Interactions, from_pandas
from privrec.data.frames import RatingSplitCV, from_parquet, vocabulary_fingerprint

# ---------------------------------------------------------------------- Interactions


def _inter(**kw):
    m = sp.csr_matrix(np.array([[1.0, 0, 2.0], [0, 3.0, 0], [4.0, 0, 0]], dtype=np.float32))
    return Interactions(m, **kw)


def test_interactions_basics_and_repr():
    x = _inter(user_ids=["a", "b", "c"], item_ids=[10, 20, 30], name="toy")
    assert repr(x) == "Interactions('toy', 3 users x 3 items, 4 interactions)"
    assert len(x) == 4 and x.shape == (3, 3) and x.density == pytest.approx(4 / 9)
    assert repr(_inter()) == "Interactions(3 users x 3 items, 4 interactions)"
    np.testing.assert_array_equal(x.user_counts, [2, 1, 1])
    np.testing.assert_array_equal(x.item_counts, [2, 1, 1])
    np.testing.assert_array_equal(x.user_index(["c", "a"]), [2, 0])
    np.testing.assert_array_equal(x.item_index([30]), [2])
    df = x.to_pandas()
    assert list(df.columns[:3]) == ["user_id", "item_id", "value"] and len(df) == 4
    assert sorted(df.user_id) == ["a", "a", "b", "c"]
    np.testing.assert_array_equal(x.item_user.toarray(), x.matrix.T.toarray())


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(user_ids=["a", "b"]), "user_ids has 2 entries but matrix has 3 rows"),
        (dict(item_ids=[1, 2]), "item_ids has 2 entries but matrix has 3 columns"),
        (dict(user_ids=np.zeros((3, 1))), "must be one-dimensional"),
        (dict(timestamps=np.zeros(4)), "timestamps must be integers"),
        (dict(timestamps=np.zeros(3, dtype=int)), "timestamps must align"),
        (dict(item_metadata=[1, 2, 3]), "item_metadata must be a pandas DataFrame"),
        (dict(item_metadata=pd.DataFrame({"t": [1]})), "item_metadata has 1 rows but there are 3 items"),
    ],
)
def test_interactions_constructor_errors(kw, needle):
    with pytest.raises(ValueError, match=needle):
        _inter(**kw)


def test_interactions_matrix_errors():
    with pytest.raises(ValueError, match="matrix must be a scipy sparse matrix, got ndarray"):
        Interactions(np.ones((2, 2)))
    with pytest.raises(ValueError, match="interactions are empty"):
        Interactions(sp.csr_matrix((2, 2)))
    with pytest.raises(ValueError, match="duplicate"):
        Interactions(sp.coo_matrix(([1.0, 1.0], ([0, 0], [1, 1])), shape=(2, 2)))


def test_from_arrays_checks_and_duplicate_policies():
    with pytest.raises(ValueError, match=r"values must have shape \(3,\)"):
        Interactions.from_arrays(["a", "b", "c"], [1, 2, 3], values=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"timestamps must have shape \(3,\)"):
        Interactions.from_arrays(["a", "b", "c"], [1, 2, 3], timestamps=[1, 2])
    with pytest.raises(ValueError, match="missing"):
        Interactions.from_arrays(["a", None, "c"], [1, 2, 3])
    with pytest.warns(UserWarning):
        summed = Interactions.from_arrays(["a", "a", "b"], [1, 1, 2], values=[1.0, 2.0, 5.0], duplicates="sum")
    assert summed.nnz == 2 and summed.matrix[summed.user_index(["a"])[0], summed.item_index([1])[0]] == 3.0


def test_subsets_filters_and_binarize():
    x = _inter(user_ids=["a", "b", "c"], item_ids=[10, 20, 30], timestamps=np.array([4, 3, 2, 1]))
    sub = x.subset_users([2, 0])
    assert list(sub.user_ids) == ["c", "a"] and sub.nnz == 3
    mask = np.array([True, False, True])
    assert list(x.subset_items(mask).item_ids) == [10, 30]
    with pytest.raises(ValueError, match=r"boolean item mask must have shape \(3,\)"):
        x.subset_items(np.array([True, False]))
    with pytest.raises(ValueError, match="1-D integer index array or boolean mask"):
        x.subset_items(np.array([0.5]))
    with pytest.raises(ValueError, match="empty user selection"):
        x.subset_users(np.array([], dtype=int))
    kept = x.filter_entries(x.matrix.data > 1.5)
    assert kept.nnz == 3 and kept.shape == (3, 3)
    np.testing.assert_array_equal(np.sort(kept.timestamps), [1, 2, 3])
    with pytest.raises(ValueError, match=r"mask must have shape \(4,\)"):
        x.filter_entries([True])
    b = x.binarize(2.5)
    np.testing.assert_array_equal(b.matrix.data, [1.0, 1.0])
    assert b.info["binarized_threshold"] == 2.5
    with pytest.raises(ValueError, match="threshold must not be NaN"):
        x.binarize(math.nan)
    dropped = b.drop_empty()
    assert dropped.shape == (2, 2) and list(dropped.user_ids) == ["b", "c"] and list(dropped.item_ids) == [10, 20]


# ---------------------------------------------------------------------- long tables


def test_from_pandas_vocabularies_and_errors():
    df = pd.DataFrame({"u": ["x", "y", "x"], "i": ["p", "q", "q"], "r": [1.0, 2.0, 3.0]})
    x = from_pandas(df, "u", "i", "r", user_ids=["y", "x", "z"], item_ids=["q", "p"])
    assert list(x.user_ids) == ["y", "x", "z"] and x.shape == (3, 2)
    assert x.info["item_vocabulary"] == "given"
    with pytest.raises(ValueError, match="vocabulary holds 1 repeated id"):
        from_pandas(df, "u", "i", "r", item_ids=["p", "q", "p"])
    with pytest.raises(ValueError, match="non-empty 1-D sequence"):
        from_pandas(df, "u", "i", "r", item_ids=[])
    with pytest.raises(ValueError, match="not in the given item vocabulary|not in the item vocabulary"):
        from_pandas(df, "u", "i", "r", item_ids=["p"])
    with pytest.raises(ValueError, match="expects a pandas DataFrame"):
        from_pandas(df.to_numpy(), "u", "i", "r")
    with pytest.raises(ValueError, match="empty"):
        from_pandas(df.iloc[:0], "u", "i", "r")
    with pytest.raises(ValueError, match="must be numeric"):
        from_pandas(df.assign(r=["a", "b", "c"]), "u", "i", "r")
    with pytest.raises(ValueError, match="not a column|columns"):
        from_pandas(df, "user", "i", "r")
    implicit = from_pandas(df, "u", "i", None)
    np.testing.assert_array_equal(implicit.matrix.data, 1.0)


def test_from_pandas_timestamps_as_datetimes():
    df = pd.DataFrame(
        {
            "user": [1, 2],
            "item": [1, 1],
            "rating": [1.0, 2.0],
            "ts": pd.to_datetime(["2020-01-01", "2021-01-01"]),
        }
    )
    x = from_pandas(df, timestamp_col="ts")
    assert x.timestamps.dtype == np.int64
    assert x.timestamps[1] - x.timestamps[0] == 366 * 86400  # 2020 is a leap year


def test_vocabulary_fingerprint_depends_on_types_and_order():
    a = vocabulary_fingerprint(np.array(["1", "2"]))
    assert a == vocabulary_fingerprint(np.array(["1", "2"]))
    assert a != vocabulary_fingerprint(np.array([1, 2]))
    assert a != vocabulary_fingerprint(np.array(["2", "1"]))
    mixed = np.array(["a", 1], dtype=object)
    assert vocabulary_fingerprint(mixed) != vocabulary_fingerprint(np.array(["a", "1"], dtype=object))


def test_from_parquet_matches_from_pandas(tmp_path):
    df = pd.DataFrame(
        {
            "user": ["b", "a", "a", "c", "b"],
            "item": [3, 1, 2, 2, 1],
            "rating": [5.0, 4.0, 3.0, 2.0, 1.0],
            "ts": pd.to_datetime(["2020-01-01"] * 5),
        }
    )
    path = tmp_path / "r.parquet"
    df.to_parquet(path)
    x = from_parquet(path, batch_size=2, timestamp_col="ts")
    y = from_pandas(df, timestamp_col="ts")
    assert list(x.user_ids) == list(y.user_ids) and list(x.item_ids) == list(y.item_ids)
    assert (x.matrix != y.matrix).nnz == 0
    np.testing.assert_array_equal(x.timestamps, y.timestamps)
    fixed = from_parquet(path, user_ids=["c", "b", "a", "d"], item_ids=[1, 2, 3])
    assert fixed.shape == (4, 3) and list(fixed.user_ids) == ["c", "b", "a", "d"]
    with pytest.raises(ValueError, match="not in the given item vocabulary"):
        from_parquet(path, item_ids=[1, 2])
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        from_parquet(path, batch_size=0)
    with pytest.raises(ValueError, match="rating_col='stars' is not a column"):
        from_parquet(path, rating_col="stars")
    empty = tmp_path / "e.parquet"
    df.iloc[:0].to_parquet(empty)
    with pytest.raises(ValueError, match="the rating table is empty"):
        from_parquet(empty)
    nulls = tmp_path / "n.parquet"
    df.assign(user=["a", None, "b", "c", "d"]).to_parquet(nulls)
    with pytest.raises(ValueError, match="missing \\(null\\) id"):
        from_parquet(nulls)
    with pytest.raises(ValueError, match="missing \\(null\\) id"):
        from_parquet(nulls, user_ids=["a", "b", "c", "d"])


def test_rating_split_cv_keeps_every_user_in_training():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"user": np.repeat(np.arange(8), 6), "item": np.tile(np.arange(6), 8), "rating": rng.random(48)})
    df = pd.concat([df, pd.DataFrame({"user": [99], "item": [0], "rating": [1.0]})], ignore_index=True)
    cv = RatingSplitCV(3, random_state=0)
    assert cv.get_n_splits() == 3 and "RatingSplitCV" in repr(cv)
    seen = np.zeros(len(df), dtype=int)
    for train, test in cv.split(df):
        assert set(df.user.iloc[train]) == set(df.user)  # every user keeps training ratings
        seen[test] += 1
    assert seen[-1] == 0 and np.all(seen[:-1] == 1)  # a single rating never goes to a test fold
    folds = list(RatingSplitCV(2, shuffle=False).split(df))
    assert len(folds) == 2
    with pytest.raises(ValueError, match="n_splits must be an integer >= 2"):
        RatingSplitCV(1)
    with pytest.raises(ValueError, match="DataFrame"):
        next(RatingSplitCV(2).split(df.to_numpy()))
    with pytest.raises(ValueError, match="fold"):
        list(RatingSplitCV(5).split(df.iloc[:3]))


# ---------------------------------------------------------------------- registry and splits


def test_registry_name_and_path_checks(tmp_path):
    from privrec.data.registry import find_dataset_folder, load_dataset, resolve_name

    assert resolve_name("ML-100K").name == "ml-100k"
    with pytest.raises(ValueError, match="dataset name must be a string"):
        resolve_name(3)
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        resolve_name("nope")
    with pytest.raises(ValueError, match="data_dir must be a path"):
        find_dataset_folder("ml-100k", data_dir=3)
    assert find_dataset_folder("ml-100k", data_dir=tmp_path) is None
    synthetic = [
        n
        for n in __import__("privrec.data.registry", fromlist=["x"]).dataset_names()
        if resolve_name(n).kind == "synthetic"
    ]
    assert synthetic
    with pytest.raises(ValueError, match="generated in memory"):
        find_dataset_folder(synthetic[0])
    with pytest.raises(ValueError, match=r"scale must be in \(0, 1\]"):
        load_dataset(synthetic[0], scale=2.0)


def test_splits_sizes_and_impossible_filters():
    from privrec.data.splits import heldout_users_split, random_split

    rng = np.random.default_rng(0)
    dense = (rng.random((30, 12)) < 0.5) * rng.integers(1, 6, (30, 12))
    x = Interactions(sp.csr_matrix(dense.astype(np.float32)))
    parts = random_split(x, random_state=0)
    assert parts.train.nnz + parts.validation.nnz + parts.test.nnz == x.nnz
    assert parts.train.nnz == round(0.8 * x.nnz) and parts.train.info["split"] == "random:train"
    with pytest.raises(ValueError, match="fractions must be three non-negative numbers"):
        random_split(x, fractions=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="no user has >= 50 items"):
        heldout_users_split(x, n_heldout=1, min_user_items=50, binarize_threshold=None)
    with pytest.raises(ValueError, match="no item has >= 100 users"):
        heldout_users_split(x, n_heldout=1, min_item_users=100, binarize_threshold=None)
    with pytest.raises(ValueError, match="target_fraction must be in"):
        heldout_users_split(x, n_heldout=1, target_fraction=1.5)
    with pytest.raises(ValueError, match="leaves no training user"):
        heldout_users_split(x, n_heldout=15, binarize_threshold=None, min_user_items=1)
    split = heldout_users_split(x, n_heldout=3, binarize_threshold=None, min_user_items=2)
    assert split.validation.history.n_users == split.validation.targets.n_users <= 3
    assert split.train.n_users == 30 - 6


# ---------------------------------------------------------------------- _io


def test_temp_names_and_stale_cleanup(tmp_path):
    with pytest.raises(ValueError, match="kind must be one of"):
        _io.make_temp_file(tmp_path, "x", kind=".bak")
    with pytest.raises(ValueError, match="kind must be one of"):
        _io.make_temp_dir(tmp_path, "x", kind=".bak")
    f = _io.make_temp_file(tmp_path, "my file?.csv", ".partial")
    d = _io.make_temp_dir(tmp_path, "data", ".extract")
    assert _io.is_privrec_temp(f.name) and _io.is_privrec_temp(d.name)
    assert "?" not in f.name and " " not in f.name
    assert not _io.is_privrec_temp("notes.tmp")
    keep = tmp_path / "notes.tmp"
    keep.write_text("mine")
    assert _io.clean_stale_temp(tmp_path) == []  # fresh temporaries are left alone
    removed = _io.clean_stale_temp(tmp_path, now=time.time() + 2 * _io.STALE_AFTER)
    assert sorted(p.name for p in removed) == sorted([f.name, d.name])
    assert not f.exists() and not d.exists() and keep.exists()
    assert _io.clean_stale_temp(tmp_path / "missing") == []
    _io.remove_path(tmp_path / "missing")  # a missing path is fine


def test_atomic_writes(tmp_path):
    target = tmp_path / "sub" / "out.json"
    _io.atomic_write_json(target, {"a": np.int64(3), "b": np.arange(2), "p": Path("x/y"), "f": np.float32(0.5)})
    assert json.loads(target.read_text()) == {"a": 3, "b": [0, 1], "f": 0.5, "p": "x/y"}
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        _io.atomic_write_json(target, {"x": object()})
    assert json.loads(target.read_text())["a"] == 3  # the failed write left the old file
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]  # and no temporary


def test_json_safe():
    out = _io.json_safe({1: [math.inf, -math.inf, math.nan, np.float64(2.0)], "t": (np.arange(2), np.int32(1))})
    assert out == {"1": ["inf", "-inf", "nan", 2.0], "t": [[0, 1], 1]}
    json.dumps(out, allow_nan=False)


# ---------------------------------------------------------------------- _validation


def test_scalar_checks():
    v = _validation
    for bad in ("1", True, None):
        with pytest.raises(ValueError, match="epsilon must be a positive number"):
            v.check_epsilon(bad)
    for bad in (0, -1, math.nan):
        with pytest.raises(ValueError, match="epsilon must be > 0"):
            v.check_epsilon(bad)
    with pytest.raises(ValueError, match="epsilon must be finite"):
        v.check_epsilon(math.inf, allow_inf=False)
    assert v.check_epsilon(math.inf) == math.inf
    with pytest.raises(ValueError, match=r"delta must be a number in \(0, 1\)"):
        v.check_delta("x")
    with pytest.raises(ValueError, match="open interval"):
        v.check_delta(1.0)
    with pytest.raises(ValueError, match="x must be a number"):
        v.check_positive("1", "x")
    with pytest.raises(ValueError, match="x must not be NaN"):
        v.check_positive(math.nan, "x")
    with pytest.raises(ValueError, match="x must be finite"):
        v.check_positive(math.inf, "x")
    with pytest.raises(ValueError, match="x must be >= 0"):
        v.check_positive(-1, "x", allow_zero=True)
    with pytest.raises(ValueError, match="x must be > 0"):
        v.check_positive(0, "x")
    assert v.check_positive(math.inf, "x", allow_inf=True) == math.inf
    with pytest.raises(ValueError, match="n must be an integer"):
        v.check_int(1.0, "n")
    with pytest.raises(ValueError, match="n must be >= 2"):
        v.check_int(1, "n", minimum=2)
    with pytest.raises(ValueError, match="f must be a number"):
        v.check_fraction(None, "f")
    with pytest.raises(ValueError, match=r"f must be in \[0, 1\)"):
        v.check_fraction(1.0, "f", closed_low=True, closed_high=False)
    with pytest.raises(ValueError, match=r"f must be in \(0, 1\]"):
        v.check_fraction(math.nan, "f")
    assert v.check_fraction(0.0, "f", closed_low=True) == 0.0
    with pytest.raises(ValueError, match="a contains 2 NaN or infinite value"):
        v.check_finite_array([1.0, math.nan, math.inf], "a")


def test_memory_checks(monkeypatch):
    v = _validation
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", "1000")
    assert v.memory_limit() == 1000
    assert v.check_memory(10, 10, 8, "factors") == 800
    with pytest.raises(ValueError, match=r"factors would need .* more than the limit of"):
        v.check_memory(100, 10, 8, "factors")
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", "0")
    with pytest.raises(ValueError, match="PRIVREC_MAX_ARRAY_BYTES must be > 0"):
        v.memory_limit()
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", "lots")
    with pytest.raises(ValueError, match="must be a number of bytes"):
        v.memory_limit()
    monkeypatch.delenv("PRIVREC_MAX_ARRAY_BYTES")
    assert v.memory_limit() > 0
    assert v.check_memory(2, 2, 4, "x", limit=16) == 16


def test_sparse_structure_checks():
    v = _validation
    csr = sp.csr_matrix(np.eye(3, dtype=np.float32))
    assert v.check_csr_structure(csr, "m") is True
    with pytest.raises(ValueError, match="m must be a scipy.sparse CSR matrix, got CSC"):
        v.check_csr_structure(csr.tocsc(), "m")
    with pytest.raises(ValueError, match="m must be a scipy.sparse CSR matrix, got ndarray"):
        v.check_csr_structure(np.eye(3), "m")
    bad = sp.csr_matrix(np.eye(3, dtype=np.float32))
    bad.indices = bad.indices.astype(np.float64)
    with pytest.raises(ValueError, match="integer arrays"):
        v.check_csr_structure(bad, "m")
    coo = sp.coo_matrix(([1.0, 2.0], ([0, 5], [0, 1])), shape=(6, 2))
    coo.row[1] = 9  # corrupt: outside the shape
    with pytest.raises(ValueError, match="coordinates outside its shape"):
        v.sparse_to_csr(coo, "m")
    s = sp.coo_matrix((np.array([1 + 1j, 2]), ([0, 1], [0, 1])), shape=(2, 2))
    with pytest.raises(ValueError, match="must hold numeric ratings"):
        v.sparse_to_csr(s, "m")
    lil = sp.lil_matrix((2, 2), dtype=np.float32)
    lil[0, 1] = 2.0
    out = v.sparse_to_csr(lil, "m")
    assert out.format == "csr" and out[0, 1] == 2.0
    dup = sp.coo_matrix(([1.0, 1.0], ([0, 0], [1, 1])), shape=(2, 2))
    with pytest.raises(ValueError, match="1 duplicate \\(user, item\\) entry"):
        v.sparse_to_csr(dup, "m")


# ---------------------------------------------------------------------- loaders


def test_movielens_dat_and_csv_loaders(tmp_path):
    from privrec.data.loaders import RatingRange, load_movielens_csv, load_movielens_dat

    dat = tmp_path / "ml1"
    dat.mkdir()
    (dat / "ratings.dat").write_text("1::10::5::100\n1::20::3::101\n2::10::4::102\n")
    (dat / "movies.dat").write_bytes("10::Caf\xe9 (1999)::Drama\n\n20::B (2000)::Comedy|Drama\n".encode("latin-1"))
    x = load_movielens_dat(dat, name="ml-1m")
    assert x.shape == (2, 2) and x.nnz == 3
    assert list(x.item_metadata["title"]) == ["Café (1999)", "B (2000)"]  # latin-1 fallback
    (dat / "movies.dat").write_text("10::only two fields\n")
    with pytest.raises(ValueError, match=r"movies.dat, line 1: malformed line \(expected MovieID::Title::Genres\)"):
        load_movielens_dat(dat, name="ml-1m")
    with pytest.raises(ValueError, match="rating_range must be a privrec.data.loaders.RatingRange or None"):
        load_movielens_dat(dat, rating_range=(1, 5))
    (dat / "movies.dat").unlink()
    (dat / "ratings.dat").write_text("1::10::5::100\n1::2o::3::101\n")
    with pytest.raises(ValueError, match="line 2: malformed line \\(non-integer value '2o'\\)"):
        load_movielens_dat(dat, name="ml-1m")
    (dat / "ratings.dat").write_text("1::10::nan::100\n")
    with pytest.raises(ValueError, match="line 1: malformed line|NaN or infinite"):
        load_movielens_dat(dat, name="ml-1m")
    (dat / "ratings.dat").write_text("")
    with pytest.raises(ValueError, match="no data rows|could not parse|malformed"):
        load_movielens_dat(dat, name="ml-1m")

    csv = tmp_path / "ml20"
    csv.mkdir()
    (csv / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,10,4.5,1\n2,10,0.5,2\n")
    (csv / "movies.csv").write_text('movieId,title,genres\n10,"A, the",Drama\n')
    y = load_movielens_csv(csv, rating_range=RatingRange(0.5, 5.0, 0.5, "explicit", "half stars"))
    half = RatingRange(0.5, 5.0, 0.5, "explicit", "half stars")
    assert 4.5 in half and 4.2 not in half and 5.5 not in half
    with pytest.raises(ValueError, match=r"rating 4.5 is outside the valid values of ml-20m \(integers\)"):
        load_movielens_csv(csv, rating_range=RatingRange(1.0, 5.0, 1.0, "explicit", "integers"))
    assert y.nnz == 2 and list(y.item_metadata["title"]) == ["A, the"]
    (csv / "movies.csv").write_text("id,name\n10,A\n")
    with pytest.raises(ValueError, match="expected header 'movieId,title,genres'"):
        load_movielens_csv(csv)
    (csv / "movies.csv").write_text("movieId,title,genres\nten,A,B\n")
    with pytest.raises(ValueError, match="movies.csv: malformed file"):
        load_movielens_csv(csv)


# ---------------------------------------------------------------------- download checks (file:// archives)


def _zip_file(path, members, modes=None):
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            info = zipfile.ZipInfo(name)
            if modes and name in modes:
                info.external_attr = modes[name] << 16
            zf.writestr(info, text)
    return path.as_uri()


@pytest.mark.parametrize(
    "members, modes, needle",
    [
        ({"ml-100k/u.data": "1\t2\t3\t4\n", "C:evil": "x"}, None, "unsafe member name"),
        (
            {"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/link": "u.data"},
            {"ml-100k/link": 0o120777},
            "link or special file",
        ),
        ({"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/a\\b": "x"}, None, "unsafe member name"),
        ({"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/U.DATA": "x"}, None, "conflicting members"),
    ],
)
def test_download_rejects_unsafe_archives(tmp_path, members, modes, needle):
    from privrec.data.download import DownloadError, download_dataset

    url = _zip_file(tmp_path / "a.zip", members, modes)
    root = tmp_path / "root"
    with pytest.raises(DownloadError, match=needle):
        download_dataset("ml-100k", root, url=url)
    assert not (root / "ml-100k").exists()
    assert [p for p in root.iterdir() if _io.is_privrec_temp(p.name)] == []  # temporaries removed


def test_download_from_a_file_url_and_argument_checks(tmp_path):
    from privrec.data.download import DownloadError, download_dataset

    url = _zip_file(tmp_path / "ok.zip", {"ml-100k/": "", "ml-100k/u.data": "1\t2\t3\t4\n"})
    root = tmp_path / "root"
    folder = download_dataset("ml-100k", root, url=url)
    assert (folder / "u.data").read_text() == "1\t2\t3\t4\n"
    assert download_dataset("ml-100k", root, url="file:///nonexistent.zip") == folder  # already there
    with pytest.raises(ValueError, match="timeout must be finite"):
        download_dataset("ml-100k", root, url=url, timeout=math.inf)
    with pytest.raises(ValueError, match="sha256 must be a hex string"):
        download_dataset("ml-100k", root, url=url, sha256=123)
    with pytest.raises(ValueError, match="data_root must be a path"):
        download_dataset("ml-100k", 3, url=url)
    with pytest.raises(ValueError, match="url must be a string"):
        download_dataset("ml-100k", tmp_path / "r2", url=b"file:///x")
    with pytest.raises(ValueError, match="no download source"):
        download_dataset("nope", root)
    blocker = tmp_path / "r3"
    blocker.mkdir()
    (blocker / "ml-100k").write_text("a file where the folder goes")
    with pytest.raises(DownloadError, match="exists and is not a folder"):
        download_dataset("ml-100k", blocker, url=url)
    with pytest.raises(DownloadError, match="could not download"):
        download_dataset("ml-100k", tmp_path / "r4", url="file:///nonexistent/archive.zip")
    # the dataset's file would land where a folder already is
    clash = tmp_path / "r5"
    (clash / "ml-100k" / "u.item").mkdir(parents=True)
    url2 = _zip_file(tmp_path / "two.zip", {"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/u.item": "meta"})
    with pytest.raises(DownloadError, match="is a folder \\(left untouched\\)"):
        download_dataset("ml-100k", clash, url=url2)
    nested = tmp_path / "r6"
    (nested / "ml-100k").mkdir(parents=True)
    (nested / "ml-100k" / "docs").write_text("the user's own file")
    url3 = _zip_file(tmp_path / "three.zip", {"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/docs/readme": "x"})
    with pytest.raises(DownloadError, match="exists and is not a folder \\(left untouched\\)"):
        download_dataset("ml-100k", nested, url=url3)
    assert (nested / "ml-100k" / "docs").read_text() == "the user's own file"


# ---------------------------------------------------------------------- parse cache


def test_cache_round_trip_and_integrity(tmp_path):
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from privrec.data import cache

    x = _inter(user_ids=["a", "b", "c"], item_ids=[10, 20, 30], timestamps=np.array([1, 2, 3, 4]), name="toy")
    entry = cache.save(x, tmp_path / "e")
    y = cache.load(entry)
    assert (y.matrix != x.matrix).nnz == 0 and list(y.user_ids) == ["a", "b", "c"] and y.name == "toy"
    np.testing.assert_array_equal(y.timestamps, x.timestamps)
    assert y.info["cache"] == str(entry)

    def rewrite(name, table):
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        data = buf.getvalue().to_pybytes()
        (entry / name).write_bytes(data)
        manifest = json.loads((entry / "manifest.json").read_text())
        manifest["files"][name] = hashlib.sha256(data).hexdigest()
        (entry / "manifest.json").write_text(json.dumps(manifest))

    rewrite("users.parquet", pa.table({"user_id": ["a", "b", "c"], "count": [2, 1, 5]}))
    with pytest.raises(cache.CacheIntegrityError, match="per-user counts add up to 8, but there are 4 entries"):
        cache.load(entry)
    rewrite("users.parquet", pa.table({"user_id": ["a", "b", "c"], "count": [2.0, 1.0, 1.0]}))
    with pytest.raises(cache.CacheIntegrityError, match="invalid per-user counts"):
        cache.load(entry)
    rewrite("users.parquet", pa.table({"user_id": ["a", "b", "c"]}))
    with pytest.raises(cache.CacheIntegrityError, match=r"users.parquet lacks column\(s\) \['count'\]"):
        cache.load(entry)
    # saving again over a corrupt entry replaces it
    cache.save(x, entry)
    assert cache.load(entry).nnz == 4


def test_cached_load_survives_an_unwritable_cache(tmp_path, monkeypatch):
    from privrec.data import cache

    src = tmp_path / "u.data"
    src.write_text("1\t2\t3\t4\n")
    calls = []

    def loader():
        calls.append(1)
        return _inter()

    def fail(x, folder):
        raise PermissionError("read-only cache")

    monkeypatch.setattr(cache, "save", fail)
    with pytest.warns(UserWarning, match="could not write the dataset cache"):
        out = cache.cached_load(loader, [src], "toy", cache_dir=tmp_path / "c")
    assert out.nnz == 4 and calls == [1]
    # no source file on disk: the loader is called directly (it raises its own missing-file error)
    assert cache.cached_load(loader, [tmp_path / "missing"], "toy", cache_dir=tmp_path / "c").nnz == 4
    assert cache.cached_load(loader, [src], "toy", use_cache=False).nnz == 4
