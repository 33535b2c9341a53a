"""Parquet cache and the load_dataset registry."""

import os
from pathlib import Path

import numpy as np
import pytest

from privrec.data.cache import cached_load, fingerprint
from privrec.data.loaders import DatasetNotFoundError, load_movielens_100k
from privrec.data.registry import dataset_names, find_dataset_folder, load_dataset

SHARED = Path(os.environ.get("PRIVREC_SHARED_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


def _ml100k(folder: Path, n_users=50, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    u = rng.integers(1, n_users + 1, 2000)
    i = rng.integers(1, 300, 2000)
    keep = np.unique(u * 1000 + i, return_index=True)[1]
    lines = [f"{u[k]}\t{i[k]}\t{rng.integers(1, 6)}\t{880000000 + k}" for k in np.sort(keep)]
    (folder / "u.data").write_text("\n".join(lines) + "\n")
    flags = "|".join(["0"] * 18 + ["1"])
    (folder / "u.item").write_text(
        "".join(f"{j}|Movie {j}, The (1995)|01-Jan-1995||url|{flags}\n" for j in range(1, 300)), encoding="latin-1"
    )
    return folder


def _same(a, b):
    assert a.shape == b.shape and (a.matrix != b.matrix).nnz == 0
    np.testing.assert_array_equal(a.user_ids, b.user_ids)
    np.testing.assert_array_equal(a.item_ids, b.item_ids)
    np.testing.assert_array_equal(a.timestamps, b.timestamps)
    assert list(a.item_metadata.title) == list(b.item_metadata.title)
    assert list(a.item_metadata.genres) == list(b.item_metadata.genres)


def test_cache_roundtrip_and_invalidation(tmp_path):
    src = _ml100k(tmp_path / "ml-100k")
    calls = []

    def loader():
        calls.append(1)
        return load_movielens_100k(src)

    cache = tmp_path / "cache"
    first = cached_load(loader, [src / "u.data", src / "u.item"], "ml-100k", cache_dir=cache)
    second = cached_load(loader, [src / "u.data", src / "u.item"], "ml-100k", cache_dir=cache)
    assert len(calls) == 1 and "cache" in second.info
    _same(first, second)
    # editing the source changes the key and the data is parsed again
    key = fingerprint([src / "u.data"], "ml-100k")
    with open(src / "u.data", "a") as fh:
        fh.write("999\t1\t5\t1\n")
    assert fingerprint([src / "u.data"], "ml-100k") != key
    third = cached_load(loader, [src / "u.data", src / "u.item"], "ml-100k", cache_dir=cache)
    assert len(calls) == 2 and third.nnz == first.nnz + 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary folders left


def test_string_ids_survive_cache(tmp_path):
    (tmp_path / "msd").mkdir()
    (tmp_path / "msd" / "train_triplets.txt").write_text("u1\tS2\t3\nu2\tS1\t1\nu1\tS1\t4\n")
    a = load_dataset("msd", data_dir=tmp_path, cache_dir=tmp_path / "c")
    b = load_dataset("msd", data_dir=tmp_path, cache_dir=tmp_path / "c")
    assert "cache" in b.info and list(b.user_ids) == ["u1", "u2"] and list(b.item_ids) == ["S1", "S2"]
    assert (a.matrix != b.matrix).nnz == 0 and b.timestamps is None


def test_load_dataset_resolves_folders_and_errors(tmp_path):
    src = _ml100k(tmp_path / "root" / "ml-100k")
    assert find_dataset_folder("ml-100k", tmp_path / "root") == src
    assert find_dataset_folder("ml-100k", src) == src
    x = load_dataset("ml-100k", data_dir=tmp_path / "root", cache=False)
    assert x.name == "ml-100k" and x.nnz > 0
    with pytest.raises(DatasetNotFoundError, match=r"u\.data.*datasets prepare ml-100k --download"):
        load_dataset("ml-100k", data_dir=tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("netflix")
    assert {"ml-100k", "ml-20m", "msd", "lastfm-2k", "synthetic-skew", "ml20m-like"} <= set(dataset_names())


def test_load_dataset_synthetic():
    x = load_dataset("ml20m-like", scale=0.002)
    assert x.n_items == 20_108 and x.name == "ml20m-like"


@pytest.mark.skipif(not (SHARED / "ml-100k" / "u.data").is_file(), reason="shared datasets not present")
def test_real_data_through_registry_and_cache(tmp_path):
    a = load_dataset("ml-100k", data_dir=SHARED, cache_dir=tmp_path)
    b = load_dataset("ml-100k", data_dir=SHARED / "ml-100k", cache_dir=tmp_path)
    assert (b.n_users, b.n_items, b.nnz) == (943, 1682, 100_000)
    _same(a, b)
    c = load_dataset("hetrec2011-lastfm-2k", data_dir=SHARED, cache_dir=tmp_path)
    assert (c.n_users, c.n_items, c.nnz) == (1892, 17632, 92834)


# ---------------------------------------------------------------- issue: silent cache corruption, cwd side effects

import json  # noqa: E402
import shutil  # noqa: E402
import warnings  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from privrec.cli import main  # noqa: E402


def _entry(cache: Path) -> Path:
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    return entry


def test_fingerprint_hashes_the_whole_file(tmp_path):
    big = tmp_path / "ratings.csv"
    big.write_bytes(b"1,2,3.5,4\n" * 400_000)  # 4 MB: the middle is beyond the first and last MiB
    st = big.stat()
    key = fingerprint([big], "ml-20m")
    data = bytearray(big.read_bytes())
    data[len(data) // 2] ^= 0x01
    big.write_bytes(bytes(data))
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    assert fingerprint([big], "ml-20m") != key


def test_random_bit_flips_in_the_cache_never_return_changed_data(tmp_path):
    src = _ml100k(tmp_path / "ml-100k")
    sources = [src / "u.data", src / "u.item"]
    cache = tmp_path / "cache"
    original = cached_load(lambda: load_movielens_100k(src), sources, "ml-100k", cache_dir=cache)
    entry = _entry(cache)
    pristine = tmp_path / "pristine"
    shutil.copytree(entry, pristine)
    files = sorted(p.name for p in pristine.iterdir())
    rng = np.random.default_rng(1)
    detected = 0
    for _ in range(60):
        shutil.rmtree(entry)
        shutil.copytree(pristine, entry)
        victim = entry / files[rng.integers(len(files))]
        data = bytearray(victim.read_bytes())
        data[rng.integers(len(data))] ^= 1 << int(rng.integers(8))
        victim.write_bytes(bytes(data))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = cached_load(lambda: load_movielens_100k(src), sources, "ml-100k", cache_dir=cache)
        _same(original, got)  # either read back intact or re-parsed: never changed data
        detected += any("corrupt" in str(w.message) for w in caught)
    assert detected > 40  # nearly every flip is caught by a checksum


def _rewrite_with_manifest(entry: Path, name: str, data: bytes) -> None:
    """Replace one cache file and re-sign the manifest, as a buggy writer (not a bit flip) would."""
    import hashlib

    (entry / name).write_bytes(data)
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256(data).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(manifest))


def test_info_json_that_is_a_list_is_rebuilt_with_a_warning(tmp_path):
    src = _ml100k(tmp_path / "ml-100k")
    load_dataset("ml-100k", data_dir=src, cache_dir=tmp_path / "c")
    entry = _entry(tmp_path / "c")
    (entry / "info.json").write_text("[]")
    if (entry / "manifest.json").exists():
        _rewrite_with_manifest(entry, "info.json", b"[]")
    with pytest.warns(UserWarning, match="corrupt or unreadable"):
        x = load_dataset("ml-100k", data_dir=src, cache_dir=tmp_path / "c")
    assert x.nnz > 0
    assert "cache" in load_dataset("ml-100k", data_dir=src, cache_dir=tmp_path / "c").info  # entry rewritten


def test_damaged_parquet_with_out_of_range_indices_is_caught(tmp_path):
    src = _ml100k(tmp_path / "ml-100k")
    good = load_dataset("ml-100k", data_dir=src, cache_dir=tmp_path / "c")
    entry = _entry(tmp_path / "c")
    table = pq.read_table(entry / "entries.parquet")
    indices = table.column("indices").to_numpy().copy()
    indices[3] = 10**6
    table = table.set_column(table.column_names.index("indices"), "indices", pa.array(indices))
    pq.write_table(table, entry / "entries.parquet")
    if (entry / "manifest.json").exists():
        _rewrite_with_manifest(entry, "entries.parquet", (entry / "entries.parquet").read_bytes())
    with pytest.warns(UserWarning, match="corrupt or unreadable"):
        x = load_dataset("ml-100k", data_dir=src, cache_dir=tmp_path / "c")
    assert (x.matrix != good.matrix).nnz == 0


def test_default_cache_is_the_user_cache_dir_never_the_working_dir(tmp_path, monkeypatch):
    src = _ml100k(tmp_path / "data" / "ml-100k")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("PRIVREC_CACHE", raising=False)
    monkeypatch.delenv("PRIVREC_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    load_dataset("ml-100k", data_dir=src)
    assert main(["datasets", "info", "ml-100k", "--data-dir", str(src), "--json"]) == 0
    assert list(work.iterdir()) == []  # no ./datasets/.cache
    cached = list(tmp_path.rglob("info.json"))
    assert cached and all(
        str(p).startswith(str(tmp_path / "xdg")) or str(p).startswith(str(tmp_path / "home")) for p in cached
    )
    monkeypatch.setenv("PRIVREC_CACHE", str(tmp_path / "explicit"))
    load_dataset("ml-100k", data_dir=src)
    assert any((tmp_path / "explicit").iterdir())


# ---------------------------------------------------------------- no Python memory left to Arrow's threads


def test_cache_reads_parse_arrow_owned_copies_never_the_python_bytes(tmp_path, monkeypatch):
    """``pq.read_table``'s worker threads may release their last reference to the input after it
    returned; if that input wraps a Python object, the release needs the GIL, and at interpreter
    exit the process aborts (``terminate called without an active exception``, exit 134: the
    ``privrec datasets info`` crash). Every parse must therefore read memory Arrow owns."""
    import privrec.data.cache as C

    src = _ml100k(tmp_path / "ml-100k")
    sources = [src / "u.data", src / "u.item"]
    cached_load(lambda: load_movielens_100k(src), sources, "ml-100k", cache_dir=tmp_path / "cache")
    python_owned, parsed = [], []
    read_verified, read_table = C._read_verified, C.pq.read_table

    def recording_read_verified(folder):
        raw = read_verified(folder)
        python_owned.extend(np.frombuffer(b, np.uint8).ctypes.data for b in raw.values() if b)
        return raw

    def recording_read_table(source, *args, **kwargs):
        parsed.append(source.read_buffer(1).address)  # where the bytes Arrow parses live
        source.seek(0)
        return read_table(source, *args, **kwargs)

    monkeypatch.setattr(C, "_read_verified", recording_read_verified)
    monkeypatch.setattr(C.pq, "read_table", recording_read_table)
    again = cached_load(lambda: load_movielens_100k(src), sources, "ml-100k", cache_dir=tmp_path / "cache")
    assert again.info.get("cache") and len(parsed) == 3  # read from the cache: entries, users, items
    assert not set(parsed) & set(python_owned)


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="exit status of an aborted process")
def test_datasets_info_survives_its_cache_folder_being_deleted_meanwhile(tmp_path):
    """The issue's reproduction: ``privrec datasets info`` while another process keeps deleting the
    cache folder; every run must exit 0 (a rebuilt or skipped cache costs only time)."""
    import subprocess
    import sys
    import threading

    src = _ml100k(tmp_path / "ml-100k", n_users=3000)
    cache = tmp_path / "cache"
    stop = threading.Event()

    def delete_cache():
        while not stop.is_set():
            shutil.rmtree(cache, ignore_errors=True)
            stop.wait(0.05)

    deleter = threading.Thread(target=delete_cache, daemon=True)
    deleter.start()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PRIVREC_CACHE": str(cache)}
    try:
        for _ in range(8):
            proc = subprocess.run(
                [sys.executable, str(root / "cli.py"), "datasets", "info", "ml-100k", "--data-dir", str(src)],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr
            assert "terminate called" not in proc.stderr
    finally:
        stop.set()
        deleter.join()
