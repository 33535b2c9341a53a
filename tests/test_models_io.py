"""Model files are not taken on trust: schema, dtypes, members, privacy report, content hash."""

import json
import math

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
