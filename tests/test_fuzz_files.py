"""Fuzzing of files (Hypothesis-driven mutations): dataset sources, cache entries, model files, archives.

Each valid file is mutated (bit flips, inserted separators / line breaks / byte-order marks,
deleted or duplicated bytes, truncation). A reader must then either raise a ``ValueError`` (one
line) or return exactly what a correct reader of the mutated bytes returns: a loader never
swallows a line and never accepts a value outside the dataset's declared range; a cache entry or
a model file is read back unchanged or rejected, never returned changed. Deterministic and small
(the whole fuzz suite stays within about a minute); ``PRIVREC_FUZZ_EXAMPLES`` runs more.
"""

import functools
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privrec._io import TEMP_PATTERN
from privrec._validation import check_csr_structure
from privrec.data import loaders
from privrec.data.cache import cached_load
from privrec.data.download import download_dataset
from privrec.models import ALS, DPALS, load_model

N = int(os.environ.get("PRIVREC_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=N or 60,
    deadline=None,
    derandomize=not N,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ_SLOW = settings(FUZZ, max_examples=N or 15)

INTERESTING = b":\t,\n\r-.05 9e\xef\xbb\xbf\x00\xff"


@st.composite
def mutations(draw, max_ops=3):
    ops = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "dupline", "bom"]))
        ops.append(
            (
                kind,
                draw(st.floats(0, 1, exclude_max=True)),
                draw(st.integers(0, 7)),
                draw(st.sampled_from(list(INTERESTING))),
            )
        )
    return ops


def mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for kind, where, bit, byte in ops:
        pos = int(where * len(b)) if b else 0
        if kind == "flip" and b:
            b[pos] ^= 1 << bit
        elif kind == "insert":
            b.insert(pos, byte)
        elif kind == "delete" and b:
            del b[pos]
        elif kind == "truncate":
            del b[pos:]
        elif kind == "dupline":
            lines = bytes(b).split(b"\n")
            i = int(where * len(lines))
            lines.insert(i, lines[i])
            b = bytearray(b"\n".join(lines))
        elif kind == "bom":
            b[:0] = b"\xef\xbb\xbf"
    return bytes(b)


# ---------------------------------------------------------------- dataset source files

SOURCES = {
    "ml-100k": (
        "u.data",
        loaders.load_movielens_100k,
        False,
        b"196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n244\t51\t2\t880606923\n",
    ),
    "ml-1m": (
        "ratings.dat",
        loaders.load_movielens_dat,
        False,
        b"1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n3::50::1::978298000\n",
    ),
    "ml-10m": (
        "ratings.dat",
        loaders.load_movielens_dat,
        False,
        b"1::122::5::838985046\n1::185::4.5::838983525\n2::231::0.5::838983392\n",
    ),
    "ml-20m": (
        "ratings.csv",
        loaders.load_movielens_csv,
        True,
        b"userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n1,29,4.0,1112484676\n7,2,0.5,1112484819\n",
    ),
    "lastfm-2k": (
        "user_artists.dat",
        loaders.load_lastfm_hetrec,
        None,
        b"userID\tartistID\tweight\n2\t51\t13883\n2\t52\t11690\n3\t51\t5\n",
    ),
    "msd": (
        "train_triplets.txt",
        loaders.load_msd_taste_profile,
        False,
        b"b80344d0\tSOAKIMP12A\t1\nb80344d0\tSOBBMDR12A\t2\n85c1f87f\tSOAKIMP12A\t7\n",
    ),
}


def _data_lines(raw: bytes, header: bool) -> int:
    """Rows a correct reader sees: lines ended by \\n, \\r\\n or \\r, without a final empty one."""
    pieces = re.split(rb"\r\n|\n|\r", raw)
    if pieces and pieces[-1] == b"":
        pieces.pop()
    return len(pieces) - int(header)


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="privrec-fuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@FUZZ
@given(st.sampled_from(sorted(SOURCES)), mutations())
def test_mutated_source_files(workdir, dataset, ops):
    filename, loader, header, valid = SOURCES[dataset]
    raw = mutate(valid, ops)
    folder = Path(tempfile.mkdtemp(dir=workdir))
    (folder / filename).write_bytes(raw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicate rows created by "dupline" are reported, resolved
            x = loader(folder, name=dataset)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    check_csr_structure(x.matrix)
    valid_values = loaders.RATING_RANGES[dataset]
    assert valid_values.valid(x.matrix.data).all(), x.matrix.data
    has_header = x.info.get("header", header) if header is None else header
    assert x.info["input_rows"] == _data_lines(raw, bool(has_header))  # no line swallowed


# ---------------------------------------------------------------- cache entries


@pytest.fixture(scope="module")
def cache_setup(workdir):
    src = workdir / "ml-100k"
    src.mkdir()
    rng = np.random.default_rng(0)
    rows = {(int(u), int(i)) for u, i in zip(rng.integers(1, 30, 300), rng.integers(1, 80, 300))}
    (src / "u.data").write_text(
        "".join(f"{u}\t{i}\t{(u + i) % 5 + 1}\t{880000000 + u * 100 + i}\n" for u, i in sorted(rows))
    )
    (src / "u.item").write_text(
        "".join(f"{j}|Movie {j}|01-Jan-1995||url|{'|'.join(['0'] * 18 + ['1'])}\n" for j in range(1, 80)),
        encoding="latin-1",
    )
    cache = workdir / "cache"
    original = cached_load(
        lambda: loaders.load_movielens_100k(src), [src / "u.data", src / "u.item"], "ml-100k", cache_dir=cache
    )
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    pristine = workdir / "pristine-cache"
    shutil.copytree(entry, pristine)
    return src, cache, entry, pristine, original


@FUZZ
@given(
    st.sampled_from(["entries.parquet", "users.parquet", "items.parquet", "info.json", "manifest.json"]), mutations()
)
def test_mutated_cache_entries_never_return_changed_data(cache_setup, victim, ops):
    src, cache, entry, pristine, original = cache_setup
    shutil.rmtree(entry, ignore_errors=True)
    shutil.copytree(pristine, entry)
    (entry / victim).write_bytes(mutate((pristine / victim).read_bytes(), ops))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cached_load(
            lambda: loaders.load_movielens_100k(src), [src / "u.data", src / "u.item"], "ml-100k", cache_dir=cache
        )
    assert (got.matrix != original.matrix).nnz == 0
    np.testing.assert_array_equal(got.user_ids, original.user_ids)
    np.testing.assert_array_equal(got.item_ids, original.item_ids)
    np.testing.assert_array_equal(got.timestamps, original.timestamps)
    assert list(got.item_metadata.title) == list(original.item_metadata.title)


# ---------------------------------------------------------------- model files


def _ratings():
    rng = np.random.default_rng(0)
    dense = (rng.random((30, 15)) < 0.35) * rng.integers(1, 6, (30, 15))
    dense[:, 0] = 4
    return sp.csr_matrix(dense.astype(np.float32))


@functools.cache
def _model_file(name: str):
    """(saved bytes, fitted model); a cached function, not a fixture, so that a failing example
    prints only its mutations."""
    R = _ratings()
    model = (
        ALS(factors=3, iterations=1, random_state=0)
        if name == "als"
        else DPALS(epsilon=2.0, factors=2, iterations=1, budget=3, random_state=0)
    ).fit(R)
    with tempfile.TemporaryDirectory(prefix="privrec-fuzz-") as d:
        model.save(Path(d) / "m.npz")
        return (Path(d) / "m.npz").read_bytes(), model


def _check_model_bytes(workdir, raw, model):
    path = Path(tempfile.mkdtemp(dir=workdir)) / "m.npz"
    path.write_bytes(raw)
    try:
        loaded = load_model(path)
    except ValueError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    # accepted: then it is the same model (a flip in zip bookkeeping that changes nothing)
    assert type(loaded) is type(model) and loaded.get_params().keys() == model.get_params().keys()
    np.testing.assert_array_equal(loaded.item_factors_, model.item_factors_)


@FUZZ
@given(mutations())
def test_mutated_als_files(workdir, ops):
    raw, model = _model_file("als")
    _check_model_bytes(workdir, mutate(raw, ops), model)


@FUZZ_SLOW
@given(mutations())
def test_mutated_dpals_files(workdir, ops):
    raw, model = _model_file("dpals")
    _check_model_bytes(workdir, mutate(raw, ops), model)


# ---------------------------------------------------------------- downloaded archives


def _zip(members: dict) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


ARCHIVE = _zip(
    {
        "ml-100k/u.data": "1\t2\t3\t4\n2\t2\t5\t6\n" * 50,
        "ml-100k/u.item": "1|A|x||u|" + "0|" * 18 + "1\n",
        "ml-100k/README": "tiny",
    }
)


@FUZZ_SLOW
@given(mutations())
def test_mutated_archives(workdir, ops):
    case = Path(tempfile.mkdtemp(dir=workdir))
    archive = case / "ml-100k.zip"
    archive.write_bytes(mutate(ARCHIVE, ops))
    root = case / "root"
    root.mkdir()
    try:
        folder = download_dataset("ml-100k", root, url=archive.as_uri(), timeout=5)
    except ValueError as exc:
        assert "\n" not in str(exc)
        assert [p.name for p in root.iterdir()] == []
    else:
        assert (folder / "u.data").is_file() and folder.parent == root
    assert not [p for p in root.iterdir() if TEMP_PATTERN.match(p.name)]
    assert sorted(p.name for p in case.iterdir()) == ["ml-100k.zip", "root"]  # nothing written outside root
    shutil.rmtree(case, ignore_errors=True)
