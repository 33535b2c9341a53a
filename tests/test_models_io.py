"""Model files are not taken on trust: schema, dtypes, members, privacy report, content hash."""

import io
import json
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.models import ALS, DPALS, ImplicitALS, load_model
from privrec.models._base import FORMAT_VERSION


def _ratings(n_users=40, n_items=25, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < 0.3) * rng.integers(1, 6, (n_users, n_items))
    dense[:, 0] = 3
    return sp.csr_matrix(dense.astype(np.float32))


@pytest.fixture(scope="module")
def R():
    return _ratings()


@pytest.fixture(scope="module")
def als(R):
    return ALS(factors=4, iterations=2, random_state=0).fit(R)


@pytest.fixture(scope="module")
def dpals(R):
    return DPALS(epsilon=2.0, factors=3, iterations=1, budget=3, random_state=0).fit(R)


def _members(path):
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    arrays.pop("__sha256__", None)
    return meta, arrays


def _write(path, meta, arrays, sha=None):
    extra = {} if sha is None else {"__sha256__": np.array(sha)}
    np.savez(path, __meta__=np.array(json.dumps(meta)), **extra, **arrays)
    return path


def _one_line_error(path, needle):
    with pytest.raises(ValueError, match=needle) as info:
        load_model(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


# ---------------------------------------------------------------- privacy report


def test_forged_privacy_report_is_rejected(dpals, tmp_path):
    good = tmp_path / "dp.npz"
    dpals.save(good)
    meta, arrays = _members(good)
    report = meta["privacy_report"]
    assert report["events"] and math.isfinite(report["epsilon_rdp"])

    forged = dict(report, events=[], epsilon_rdp=0.001, epsilon=0.001, epsilon_pld=0.001)
    _one_line_error(_write(tmp_path / "f1.npz", dict(meta, privacy_report=forged), arrays), "privacy report")

    acc = report.get("accountant", "rdp")  # the accountant whose value is "epsilon"
    edited = dict(report, **{f"epsilon_{acc}": 0.001, "epsilon": 0.001})  # events kept, epsilon lowered
    _one_line_error(
        _write(tmp_path / "f2.npz", dict(meta, privacy_report=edited), arrays),
        f"claims epsilon_{acc} = 0.001 but its recorded events give",
    )
    rdp_only = dict(report, epsilon_rdp=report["epsilon_rdp"] * 0.9)
    _one_line_error(_write(tmp_path / "f2b.npz", dict(meta, privacy_report=rdp_only), arrays), "epsilon_rdp")

    pld_only = dict(report, epsilon_pld=report["epsilon_pld"] / 2)
    _one_line_error(_write(tmp_path / "f3.npz", dict(meta, privacy_report=pld_only), arrays), "epsilon_pld")

    empty = dict(report, events=[], epsilon_rdp=0.0, epsilon=0.0, epsilon_pld=0.0)
    _one_line_error(_write(tmp_path / "f4.npz", dict(meta, privacy_report=empty), arrays), "records no events")

    retarget = dict(report, target_epsilon=0.5)
    _one_line_error(_write(tmp_path / "f5.npz", dict(meta, privacy_report=retarget), arrays), "target_epsilon")

    junk = dict(report, events=[{"label": "x", "event": {"type": "gaussian"}}])
    _one_line_error(_write(tmp_path / "f6.npz", dict(meta, privacy_report=junk), arrays), "malformed")


def test_genuine_reports_still_load(dpals, R, tmp_path):
    dpals.save(tmp_path / "dp.npz")
    m = DPALS.load(tmp_path / "dp.npz")
    assert m.privacy_report()["epsilon"] == pytest.approx(dpals.privacy_report()["epsilon"])
    inf = DPALS(epsilon=math.inf, factors=2, iterations=1, budget=3, random_state=0).fit(R)
    inf.save(tmp_path / "inf.npz")
    assert load_model(tmp_path / "inf.npz").privacy_report()["epsilon"] in ("inf", math.inf)


# ---------------------------------------------------------------- members and dtypes


def test_undeclared_or_unknown_members_never_become_attributes(als, tmp_path):
    good = tmp_path / "m.npz"
    als.save(good)
    meta, arrays = _members(good)
    evil = dict(arrays, recommend=np.zeros(3))
    meta2 = dict(meta, arrays=dict(meta["arrays"], recommend={"shape": [3], "dtype": "<f8"}))
    _one_line_error(_write(tmp_path / "a.npz", meta2, evil), "not a saved array of ALS")
    _one_line_error(_write(tmp_path / "b.npz", meta, evil), "unexpected member")
    meta3 = dict(meta, arrays=dict(meta["arrays"], fit_={"shape": [3], "dtype": "<f8"}))
    _one_line_error(_write(tmp_path / "c.npz", meta3, dict(arrays, fit_=np.zeros(3))), "not a saved array")
    assert callable(load_model(good).recommend)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([["a", "b"]] * 25),
        np.ones((25, 4), dtype=np.complex128),
        np.ones((25, 4), dtype=np.float16),
        np.ones((25, 4), dtype=np.int64),
        np.ones((25,), dtype=np.float32),
        np.ones((25, 4, 1), dtype=np.float32),
    ],
)
@pytest.mark.parametrize("version", [1, 2])
def test_array_dtypes_and_dimensions_are_checked(als, tmp_path, bad, version):
    good = tmp_path / "m.npz"
    als.save(good)
    meta, arrays = _members(good)
    arrays["item_factors_"] = bad
    if version == 1:  # the metadata of a version-1 file lists shapes only
        meta = dict(meta, version=1, arrays={k: list(v.shape) for k, v in arrays.items()})
    else:
        meta["arrays"]["item_factors_"] = {"shape": list(bad.shape), "dtype": bad.dtype.str}
    _one_line_error(_write(tmp_path / "bad.npz", meta, arrays), "item_factors_")


def test_content_hash_detects_edits(als, tmp_path):
    good = tmp_path / "m.npz"
    als.save(good)
    with np.load(good) as npz:
        sha = str(npz["__sha256__"])
    meta, arrays = _members(good)
    arrays["item_factors_"] = arrays["item_factors_"].copy()
    arrays["item_factors_"][0, 0] += 1.0
    _one_line_error(_write(tmp_path / "edited.npz", meta, arrays, sha=sha), "content hash mismatch")
    meta["params"]["regularization"] = 1.0
    _, arrays = _members(good)
    _one_line_error(_write(tmp_path / "edited2.npz", meta, arrays, sha=sha), "content hash mismatch")


# ---------------------------------------------------------------- metadata and params


def test_params_not_a_dict_unknown_or_nested(als, tmp_path):
    good = tmp_path / "m.npz"
    als.save(good)
    meta, arrays = _members(good)
    _one_line_error(_write(tmp_path / "p1.npz", dict(meta, params=[1, 2]), arrays), "'params' must be an object")
    _one_line_error(
        _write(tmp_path / "p2.npz", dict(meta, params=dict(meta["params"], evil=1)), arrays), "unknown parameter"
    )
    _one_line_error(
        _write(tmp_path / "p3.npz", dict(meta, params=dict(meta["params"], factors={"a": 1})), arrays),
        "parameter factors",
    )
    _one_line_error(
        _write(tmp_path / "p4.npz", dict(meta, params=dict(meta["params"], factors=7)), arrays), "factors=7"
    )
    deep = "[" * 5000 + "]" * 5000
    text = json.dumps(dict(meta, params={})).replace('"params": {}', f'"params": {deep}')
    np.savez(tmp_path / "p5.npz", __meta__=np.array(text), **arrays)
    _one_line_error(tmp_path / "p5.npz", "nested too deeply")


def test_npy_text_and_other_files(als, tmp_path):
    np.save(tmp_path / "factors.npy", als.item_factors_)
    _one_line_error(tmp_path / "factors.npy", r"\.npy array, not a privrec model")
    (tmp_path / "t.npz").write_text("{}")
    _one_line_error(tmp_path / "t.npz", "not a privrec model file")
    np.savez(tmp_path / "nometa.npz", item_factors_=als.item_factors_)
    _one_line_error(tmp_path / "nometa.npz", "no metadata")
    np.savez(tmp_path / "numeta.npz", __meta__=np.arange(3))
    _one_line_error(tmp_path / "numeta.npz", "text scalar")
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "absent.npz")


def test_version_handling(als, tmp_path):
    assert FORMAT_VERSION == 2
    good = tmp_path / "m.npz"
    als.save(good)
    meta, arrays = _members(good)
    v1 = dict(meta, version=1, arrays={k: v["shape"] for k, v in meta["arrays"].items()})
    m = load_model(_write(tmp_path / "v1.npz", v1, arrays))  # version-1 files are still read
    np.testing.assert_array_equal(m.item_factors_, als.item_factors_)
    _one_line_error(_write(tmp_path / "v9.npz", dict(meta, version=9), arrays), "unsupported .*version 9")


def test_round_trips_keep_dtypes(R, als, tmp_path):
    for model in (
        als,
        ImplicitALS(factors=3, iterations=1, num_threads=1, random_state=0).fit(R),
        ALS(factors=2, iterations=1, dtype=np.float64, random_state=0).fit(R),
    ):
        model.save(tmp_path / "x.npz")
        m = load_model(tmp_path / "x.npz")
        assert type(m) is type(model) and m.item_factors_.dtype == model.item_factors_.dtype
        np.testing.assert_array_equal(m.item_factors_, model.item_factors_)
        assert m.get_params() == model.get_params()


# ---------------------------------------------------------------- declared sizes: checked before reading

#: the probe's crafted file: a (37.5M, 32) float32 item factor matrix, 4.8 GB, declared by a few KB
HUGE = (37_500_000, 32)


def _npy_bytes(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _npy_header(shape, descr="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


def _forged_file(path, meta, how):
    """A small model file without ``__sha256__`` whose metadata and .npy header declare a ``HUGE``
    item factor matrix; ``how`` says which zip directory sizes are forged to make it look real."""
    meta = dict(meta, arrays={"item_factors_": {"shape": list(HUGE), "dtype": "<f4"}})
    header = _npy_header(HUGE)
    claimed = len(header) + math.prod(HUGE) * 4
    method = zipfile.ZIP_DEFLATED if how == "deflated" else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as zf:
        zf.writestr("__meta__.npy", _npy_bytes(np.array(json.dumps(meta))))
        with zf.open("item_factors_.npy", "w", force_zip64=True) as fh:
            fh.write(header + bytes(4096))
        info = zf.filelist[-1]
        info.file_size = claimed  # the central directory now claims 4.8 GB of data
        if how == "compressed-size":
            info.compress_size = claimed
    return path


def _peak_during(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("how", ["stored", "deflated", "compressed-size"])
def test_small_forged_file_declaring_a_huge_array_fails_before_allocating_it(als, tmp_path, how):
    good = tmp_path / "m.npz"
    als.save(good)
    meta, _ = _members(good)
    path = _forged_file(tmp_path / "forged.npz", meta, how)
    assert path.stat().st_size < 64 << 10

    def load():
        with pytest.raises(ValueError) as info:
            load_model(path)
        msg = str(info.value)
        assert "\n" not in msg and str(path) in msg
        assert "forged" in msg or "more than the whole file" in msg, msg

    assert _peak_during(load) < 50 << 20  # no multi-GB allocation (numpy reports to tracemalloc)


def test_metadata_text_declaring_more_than_its_member_holds_is_not_allocated(tmp_path):
    path = tmp_path / "m.npz"
    with zipfile.ZipFile(path, "w") as zf:  # __meta__'s header declares a 2 GB string, 16 bytes follow
        zf.writestr("__meta__.npy", _npy_header((), "<U500000000") + bytes(16))

    def load():
        with pytest.raises(ValueError, match="bytes of text but holds only"):
            load_model(path)

    assert _peak_during(load) < 50 << 20


def test_declared_arrays_are_bounded_by_the_memory_limit(als, tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    als.save(path)
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", str(als.item_factors_.nbytes))  # less than all arrays
    _one_line_error(path, "more than the memory limit .*PRIVREC_MAX_ARRAY_BYTES")
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", str(1 << 30))
    np.testing.assert_array_equal(load_model(path).item_factors_, als.item_factors_)


def test_compressed_files_load_and_other_zip_methods_are_refused(als, tmp_path):
    good = tmp_path / "m.npz"
    als.save(good)
    with zipfile.ZipFile(good) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    for method in (zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2):
        path = tmp_path / f"m{method}.npz"
        with zipfile.ZipFile(path, "w", method) as zf:
            for name, raw in members.items():
                zf.writestr(name, raw)
        if method == zipfile.ZIP_DEFLATED:  # np.savez_compressed's files load
            np.testing.assert_array_equal(load_model(path).item_factors_, als.item_factors_)
        else:
            _one_line_error(path, "compression method 12; .*stored or deflated")


# ---------------------------------------------------------------- save(): links, devices, signals


def test_save_writes_through_a_symlink_and_keeps_it(als, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    target = real / "model-v3.npz"
    target.write_bytes(b"previous")
    link = tmp_path / "latest.npz"
    link.symlink_to(target)
    als.save(link)
    assert link.is_symlink() and Path(os.readlink(link)) == target
    np.testing.assert_array_equal(load_model(target).item_factors_, als.item_factors_)
    assert sorted(p.name for p in real.iterdir()) == ["model-v3.npz"]  # no temporary file left
    dangling = tmp_path / "next.npz"  # a relative link to a file still to be written
    dangling.symlink_to(Path("real") / "model-v4.npz")
    als.save(dangling)
    assert dangling.is_symlink() and (real / "model-v4.npz").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.npz", "next.npz", "real"]
    loop = tmp_path / "loop.npz"
    loop.symlink_to(loop)
    with pytest.raises(ValueError, match="loop of symbolic links"):
        als.save(loop)
    nowhere = tmp_path / "nowhere.npz"
    nowhere.symlink_to(tmp_path / "missing-folder" / "m.npz")
    with pytest.raises(FileNotFoundError, match="folder does not exist"):
        als.save(nowhere)
    assert not (tmp_path / "missing-folder").exists()


def _special_files(tmp_path):
    """Non-regular files in ``tmp_path`` (never the system's own: a failing save must not clobber them)."""
    out = {}
    folder = tmp_path / "folder.npz"
    folder.mkdir()
    out["a folder"] = folder
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.npz")
        out["FIFO"] = tmp_path / "fifo.npz"
    for dev in ("/dev/null", "/dev/stdout"):
        if os.path.exists(dev):
            link = tmp_path / f"link-to-{Path(dev).name}.npz"
            link.symlink_to(dev)
            out["device" if dev == "/dev/null" else "terminal, pipe or file"] = link
    try:  # a character device node like /dev/null, made here (needs root)
        os.mknod(tmp_path / "null.npz", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        out["character device"] = tmp_path / "null.npz"
    except (PermissionError, AttributeError, OSError):
        pass
    return out


def test_save_never_replaces_a_device_fifo_or_folder(als, tmp_path):
    for what, path in _special_files(tmp_path).items():
        before = os.lstat(path)
        if what == "terminal, pipe or file" and stat.S_ISREG(os.stat(path).st_mode):
            continue  # stdout redirected to a regular file: writing through the link is then allowed
        with pytest.raises(ValueError, match="not a regular file") as info:
            als.save(path)
        assert "\n" not in str(info.value)
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), what
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".privrec-")]


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="needs POSIX signals")
def test_sigterm_during_save_removes_the_temporary_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "m.npz"
    path.write_bytes(b"previous model")
    code = textwrap.dedent(f"""
        import time
        import numpy as np
        import scipy.sparse as sp
        from privrec.models import ALS

        R = sp.csr_matrix(np.arange(1, 41, dtype=np.float32).reshape(8, 5) % 5 + 1)
        model = ALS(factors=2, iterations=1, random_state=0).fit(R)
        savez = np.savez

        def slow_savez(*args, **kwargs):  # the file is half-way: written, not yet renamed
            savez(*args, **kwargs)
            print("writing", flush=True)
            time.sleep(120)

        np.savez = slow_savez
        model.save({str(path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err  # handled (as SIGINT is), not killed outright
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]  # the temporary file is gone
    assert path.read_bytes() == b"previous model"
