"""Loaders on tiny files written in each exact source format, plus the bad-input errors."""

import os
from pathlib import Path

import numpy as np
import pytest

from privrec.data.loaders import (
    DatasetNotFoundError,
    load_lastfm_hetrec,
    load_movielens_100k,
    load_movielens_csv,
    load_movielens_dat,
    load_msd_taste_profile,
)

SHARED = Path(os.environ.get("PRIVREC_SHARED_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


def _write(path: Path, text: str, encoding="utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


def test_movielens_100k(tmp_path):
    _write(tmp_path / "u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t242\t1\t878887116\n")
    flags = ["0"] * 19
    f1 = list(flags)
    f1[3] = f1[5] = "1"
    _write(
        tmp_path / "u.item",
        "242|Kolya (1996)|24-Jan-1997||http://x|" + "|".join(f1) + "\n"
        "302|L.A. Confidential (1997)|01-Jan-1997||http://y|" + "|".join(flags) + "\n"
        "999|Caf\xe9 Society (1995)|01-Jan-1995||http://z|" + "|".join(flags) + "\n",
        encoding="latin-1",
    )
    x = load_movielens_100k(tmp_path)
    assert (x.n_users, x.n_items, x.nnz) == (3, 2, 3)
    assert list(x.user_ids) == [22, 186, 196] and list(x.item_ids) == [242, 302]
    assert x.matrix[x.user_index(22), x.item_index(242)] == 1.0
    assert x.timestamps[0] == 878887116
    assert list(x.item_metadata.title) == ["Kolya (1996)", "L.A. Confidential (1997)"]
    assert x.item_metadata.genres[0] == "Animation|Comedy"


def test_movielens_1m_10m_dat(tmp_path):
    _write(tmp_path / "ratings.dat", "1::1193::5::978300760\n1::661::3.5::978302109\n2::1193::4::978298413\n")
    _write(
        tmp_path / "movies.dat",
        "1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n"
        "661::James and the Giant Peach: The Movie (1996)::Animation|Children's\n",
        encoding="latin-1",
    )
    x = load_movielens_dat(tmp_path, name="ml-10m")
    assert (x.n_users, x.n_items, x.nnz) == (2, 2, 3)
    np.testing.assert_array_equal(x.matrix.toarray(), [[3.5, 5.0], [0.0, 4.0]])
    assert x.item_metadata.title[0] == "James and the Giant Peach: The Movie (1996)"
    assert x.item_metadata.genres[1] == "Drama"


def test_movielens_csv_with_quoted_titles(tmp_path):
    _write(
        tmp_path / "ratings.csv",
        "userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n1,29,4.0,1112484676\n7,2,0.5,1112484819\n",
    )
    _write(
        tmp_path / "movies.csv",
        "movieId,title,genres\n2,Jumanji (1995),Adventure|Children|Fantasy\n"
        '29,"City of Lost Children, The (Cité des enfants perdus, La) (1995)",Drama\n',
    )
    x = load_movielens_csv(tmp_path, name="ml-20m")
    assert (x.n_users, x.n_items, x.nnz) == (2, 2, 3)
    assert x.matrix[1, 0] == 0.5
    assert x.item_metadata.title[1] == "City of Lost Children, The (Cité des enfants perdus, La) (1995)"


def test_msd_triplets_string_ids(tmp_path):
    _write(
        tmp_path / "train_triplets.txt",
        "b80344d063b5ccb3212f76538f3d9e43d87dca9e\tSOAKIMP12A8C130995\t1\n"
        "b80344d063b5ccb3212f76538f3d9e43d87dca9e\tSOBBMDR12A8C13253B\t2\n"
        "85c1f87fea955d09b4bec2e36aee110927aab3fe\tSOAKIMP12A8C130995\t7\n",
    )
    x = load_msd_taste_profile(tmp_path)
    assert (x.n_users, x.n_items, x.nnz) == (2, 2, 3)
    assert list(x.item_ids) == ["SOAKIMP12A8C130995", "SOBBMDR12A8C13253B"]
    assert x.matrix[x.user_index("85c1f87fea955d09b4bec2e36aee110927aab3fe"), 0] == 7.0
    assert x.matrix.data.dtype == np.float32


@pytest.mark.parametrize("header", [True, False])
def test_lastfm_with_and_without_header(tmp_path, header):
    body = "2\t51\t13883\n2\t52\t11690\n3\t51\t5\n"
    _write(tmp_path / "user_artists.dat", ("userID\tartistID\tweight\n" if header else "") + body)
    _write(
        tmp_path / "artists.dat",
        "id\tname\turl\tpictureURL\n51\tDuran Duran\thttp://a\thttp://b\n52\tMorcheeba\thttp://c\t\n",
    )
    x = load_lastfm_hetrec(tmp_path)
    assert (x.n_users, x.n_items, x.nnz) == (2, 2, 3)
    assert x.matrix[0, 0] == 13883 and x.info["header"] is header
    assert list(x.item_metadata.title) == ["Duran Duran", "Morcheeba"]


def test_malformed_line_names_file_and_line(tmp_path):
    p = _write(tmp_path / "u.data", "1\t2\t3\t4\n1\t3\t4\n2\t2\t5\t6\n")
    with pytest.raises(ValueError, match=r"u\.data, line 2: malformed"):
        load_movielens_100k(tmp_path)
    p.write_text("1\t2\t3\t4\n1\t3\t4\t5\t6\n")
    with pytest.raises(ValueError, match="line 2"):
        load_movielens_100k(tmp_path)
    _write(tmp_path / "ratings.dat", "1::2::3::4\n1::3::4::5\n1::5\n")
    with pytest.raises(ValueError, match=r"ratings\.dat, line 3"):
        load_movielens_dat(tmp_path)


@pytest.mark.parametrize("bad", ["abc", "nan", ""])
def test_nan_or_non_numeric_rating_is_an_error(tmp_path, bad):
    _write(tmp_path / "ratings.csv", f"userId,movieId,rating,timestamp\n1,2,3.5,10\n1,3,{bad},11\n")
    with pytest.raises(ValueError, match=r"ratings\.csv, line 3"):
        load_movielens_csv(tmp_path)


def test_bad_header_and_missing_file(tmp_path):
    _write(tmp_path / "ratings.csv", "user,item,rating,ts\n1,2,3,4\n")
    with pytest.raises(ValueError, match="line 1: expected header"):
        load_movielens_csv(tmp_path)
    with pytest.raises(DatasetNotFoundError, match=r"train_triplets\.txt.*privrec datasets prepare msd --download"):
        load_msd_taste_profile(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="expected file not found"):
        load_lastfm_hetrec(tmp_path)


def test_duplicates_reported_by_loader(tmp_path):
    _write(tmp_path / "user_artists.dat", "2\t51\t10\n2\t51\t5\n")
    with pytest.warns(UserWarning, match="1 duplicate"):
        x = load_lastfm_hetrec(tmp_path)
    assert x.matrix[0, 0] == 15 and x.info["duplicate_rows"] == 1


@pytest.mark.skipif(not (SHARED / "ml-100k" / "u.data").is_file(), reason="shared datasets not present")
def test_real_ml100k():
    x = load_movielens_100k(SHARED / "ml-100k")
    assert (x.n_users, x.n_items, x.nnz) == (943, 1682, 100_000)
    assert x.user_counts.min() >= 20
    assert x.item_metadata.title[0] == "Toy Story (1995)"


@pytest.mark.skipif(not (SHARED / "hetrec2011-lastfm-2k").is_dir(), reason="shared datasets not present")
def test_real_lastfm():
    x = load_lastfm_hetrec(SHARED / "hetrec2011-lastfm-2k")
    assert (x.n_users, x.n_items, x.nnz) == (1892, 17632, 92834)


def test_string_id_encoding_across_chunks():
    import pyarrow as pa

    from privrec.data.loaders import _to_codes

    col = pa.chunked_array([pa.array(["s3", "s1", "s3"]), pa.array(["s2", "s1"])])
    codes, vocab = _to_codes(col)
    assert list(vocab) == ["s1", "s2", "s3"]
    np.testing.assert_array_equal(vocab[codes], ["s3", "s1", "s3", "s2", "s1"])


# ---------------------------------------------------------------- issue: silent misparse


def test_single_colons_are_not_the_ml1m_separator(tmp_path):
    _write(tmp_path / "ratings.dat", "1::2::3::4\n1:2:3:4:5:6:7\n")
    with pytest.raises(ValueError, match=r"ratings\.dat, line 2: malformed.*'::'"):
        load_movielens_dat(tmp_path)
    _write(tmp_path / "ratings.dat", "1:2:3:4:5:6:7\n")
    with pytest.raises(ValueError, match=r"ratings\.dat, line 1"):
        load_movielens_dat(tmp_path)
    _write(tmp_path / "ratings.dat", "1::2:::3::4\n")
    with pytest.raises(ValueError, match="line 1"):
        load_movielens_dat(tmp_path)


def test_lastfm_with_bom_and_no_header_keeps_its_first_row(tmp_path):
    _write(tmp_path / "user_artists.dat", "\ufeff2\t51\t13883\n2\t52\t11690\n3\t51\t5\n")
    x = load_lastfm_hetrec(tmp_path)
    assert x.nnz == 3 and x.matrix[0, 0] == 13883 and x.info["header"] is False
    _write(tmp_path / "user_artists.dat", "\ufeffuserID\tartistID\tweight\n2\t51\t13883\n")
    x = load_lastfm_hetrec(tmp_path)
    assert x.nnz == 1 and x.info["header"] is True


@pytest.mark.parametrize("first", ["2x\t51\t13883", "user\tartist\tweight", "2\t51", "\t51\t3"])
def test_corrupt_first_row_is_not_taken_for_a_header(tmp_path, first):
    _write(tmp_path / "user_artists.dat", first + "\n2\t52\t11690\n")
    with pytest.raises(ValueError, match=r"user_artists\.dat, line 1"):
        load_lastfm_hetrec(tmp_path)


def test_bom_before_the_movielens_csv_header(tmp_path):
    _write(tmp_path / "ratings.csv", "\ufeffuserId,movieId,rating,timestamp\n1,2,3.5,10\n")
    assert load_movielens_csv(tmp_path).nnz == 1


@pytest.mark.parametrize("rating", ["99", "-7", "0", "3.5", "5.000001"])
def test_ml100k_ratings_must_be_integers_1_to_5(tmp_path, rating):
    _write(tmp_path / "u.data", f"1\t2\t3\t4\n1\t3\t5\t4\n2\t2\t{rating}\t6\n")
    with pytest.raises(ValueError, match=r"u\.data, line 3: rating .* valid values of ml-100k \(integers 1-5\)"):
        load_movielens_100k(tmp_path)


def test_ml1m_and_ml10m_ranges(tmp_path):
    _write(tmp_path / "ratings.dat", "1::2::4.5::4\n")
    with pytest.raises(ValueError, match="line 1: rating 4.5 .*ml-1m"):
        load_movielens_dat(tmp_path, name="ml-1m")
    assert load_movielens_dat(tmp_path, name="ml-10m").matrix.data[0] == 4.5
    for bad in ("4.3", "0", "5.5", "-0.5"):
        _write(tmp_path / "ratings.dat", f"1::2::4::4\n1::3::{bad}::4\n")
        with pytest.raises(ValueError, match=r"line 2: rating .*0\.5-5 in steps of 0\.5"):
            load_movielens_dat(tmp_path, name="ml-10m")


def test_ml20m_range_names_the_line_after_the_header(tmp_path):
    _write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,2,3.5,10\n1,3,5.5,11\n1,4,0,12\n")
    with pytest.raises(ValueError, match=r"ratings\.csv, line 3: rating 5\.5 .*\(2 such lines\)"):
        load_movielens_csv(tmp_path, name="ml-20m")


@pytest.mark.parametrize("weight", ["0", "-3", "2.5"])
def test_lastfm_weights_must_be_positive_integer_counts(tmp_path, weight):
    _write(tmp_path / "user_artists.dat", f"userID\tartistID\tweight\n2\t51\t13\n2\t52\t{weight}\n")
    with pytest.raises(ValueError, match=r"user_artists\.dat, line 3"):
        load_lastfm_hetrec(tmp_path)


def test_msd_counts_and_empty_ids(tmp_path):
    _write(tmp_path / "train_triplets.txt", "u1\tS1\t1\nu1\tS2\t0\n")
    with pytest.raises(ValueError, match=r"line 2: play count 0 .*positive integer counts"):
        load_msd_taste_profile(tmp_path)
    _write(tmp_path / "train_triplets.txt", "u1\tS1\t1\n\tS2\t3\n")
    with pytest.raises(ValueError, match="line 2"):
        load_msd_taste_profile(tmp_path)


def test_registry_declares_valid_values_and_feedback():
    from privrec.data.registry import DATASETS

    assert DATASETS["ml-100k"].feedback == "explicit" and 5 in DATASETS["ml-100k"].rating_range
    assert 4.5 not in DATASETS["ml-1m"].rating_range and 4.5 in DATASETS["ml-10m"].rating_range
    for name in ("ml-20m", "ml-25m", "ml-latest", "ml-latest-small"):
        r = DATASETS[name].rating_range
        assert (r.low, r.high, r.step) == (0.5, 5.0, 0.5)
    for name in ("lastfm-2k", "msd", "msd-like"):
        assert DATASETS[name].feedback == "implicit" and 0 not in DATASETS[name].rating_range
        assert 10**6 in DATASETS[name].rating_range and 2.5 not in DATASETS[name].rating_range
    assert DATASETS["synthetic-skew"].feedback == "explicit"
