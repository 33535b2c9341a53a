"""The experiment runner shared by the CLI and the benchmarks (spec 004 §7 protocols)."""

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.evaluation import experiment as X


def test_protocol_and_delta_defaults_follow_the_spec():
    assert X.default_protocol("ml10m-like") == "random"
    assert X.default_protocol("ml20m-like") == "heldout-users"
    assert X.default_protocol("synthetic-skew") == "random"
    tiny = X.Split("heldout-users", train=sp.csr_matrix((400, 5)))
    assert X.default_delta(tiny) == pytest.approx(1 / 400)  # 1/n for top-k (spec §7)
    tiny.protocol = "random"
    assert X.default_delta(tiny) == 1e-5


def test_make_model_rejects_unknown_methods_and_parameters():
    with pytest.raises(ValueError, match="unknown method"):
        X.make_model("nope")
    with pytest.raises(ValueError, match="does not accept"):
        X.make_model("als", params={"mu": 0.5})
    als = X.make_model("als", params={"factors": 3}, seed=1)
    assert als.factors == 3 and als.random_state == 1
    with pytest.raises(ValueError, match="epsilon"):
        X.make_model("ada-dpals")
    m = X.make_model("ada-dpals", 2.0, 1e-5, params={"mu": 0.5}, protocol="heldout-users")
    assert (m.mu, m.feedback, m.unobserved_weight) == (0.5, "implicit", 0.2)  # implicit, the rest automatic


def test_json_safe_makes_strict_json():
    obj = {"a": float("inf"), "b": [np.float32(1.5), float("nan")], "c": np.arange(2)}
    out = X.json_safe(obj)
    assert json.loads(json.dumps(out, allow_nan=False)) == {"a": "inf", "b": [1.5, "nan"], "c": [0, 1]}


def test_run_experiment_random_split_end_to_end():
    data = X.load_data("synthetic-skew", scale=0.1)
    split = X.make_split(data, "random", seed=0)
    assert split.projection.nnz > split.train.nnz  # train + validation history (spec §8)
    assert split.train.nnz + split.test.nnz < data.nnz
    _, res = X.run_experiment(split, "als", params={"factors": 4, "iterations": 2}, seed=0, dataset="s")
    assert res["epsilon_spent"] == "inf" and math.isfinite(res["metrics"]["rmse"])
    assert res["n_train"] == split.train.nnz
    with pytest.raises(ValueError, match="scale"):
        X.load_data("ml-100k", scale=0.5)


def test_lastfm_alias_gets_the_same_heldout_protocol():
    """'lastfm' and 'lastfm-2k' are one dataset with one default protocol (implicit feedback)."""
    assert X.default_protocol("lastfm") == X.default_protocol("lastfm-2k") == "heldout-users"
    assert X.default_protocol("ml-100k") == "random"
