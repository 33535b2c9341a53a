"""Issue 44 at the command line: the wide-catalogue preset, the ALS yardstick's bounded evaluation
(sample size stated) and the peak memory on the [non-private] timings line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privrec.cli import main
from privrec.commands import _yardsticks as Y
from privrec.commands._running import CommandError
from privrec.data import load_dataset
from privrec.data.loaders import STARS_1_TO_5
from privrec.data.registry import resolve_name


def test_wide_catalogue_preset_is_registered_and_shaped_like_a_product_catalogue():
    info = resolve_name("wide-catalogue")
    assert info.kind == "synthetic" and info.rating_range == STARS_1_TO_5 and info.feedback == "explicit"
    assert "25,000 x 300,000" in info.description
    data = load_dataset("wide-catalogue", scale=0.01, random_state=0)
    R = data.matrix.tocsr()
    assert R.shape == (250, 300_000)
    assert set(np.unique(R.data).tolist()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    per_user = np.diff(R.indptr)
    assert per_user.min() >= 10 and 35 <= per_user.mean() <= 45
    # Zipf popularity calibrated so that the top 10% of items hold about half of the ratings
    assert data.info["zipf_exponent"] > 0 and abs(data.info["expected_top10_share"] - 0.5) < 0.05


def test_evaluation_sample_is_bounded_by_the_score_budget():
    n_items = 300_000
    sample = Y.evaluation_sample(20_000, n_items, seed=0)
    assert sample is not None and sample.size == Y.YARDSTICK_SCORE_ENTRIES // n_items
    assert sample.size * n_items <= Y.YARDSTICK_SCORE_ENTRIES
    assert np.all(np.diff(sample) > 0) and sample.max() < 20_000
    np.testing.assert_array_equal(sample, Y.evaluation_sample(20_000, n_items, seed=0))  # seeded
    assert Y.evaluation_sample(10_000, 20_108, seed=0) is None  # ml20m-like: every held-out user
    assert Y.evaluation_sample(20_000, n_items, seed=0, size=0) is None  # 0 = all
    assert Y.evaluation_sample(20_000, n_items, seed=0, size=50).size == 50
    with pytest.raises(CommandError, match="--yardstick-users"):
        Y.evaluation_sample(20_000, n_items, seed=0, size=-1)


def test_fit_reports_peak_memory_and_the_yardstick_sample(capsys):
    rc = main(["fit", "--dataset", "synthetic-skew", "--scale", "0.2", "--epsilon", "5", "--yardstick-users", "40"])
    assert rc == 0
    out = capsys.readouterr().out
    timings = next(line for line in out.splitlines() if line.startswith("[non-private] timings"))
    assert "peak memory" in timings and " GB" in timings
    assert "non-private ALS: ranking metrics on 40 of" in out and "seed 0; --yardstick-users" in out


def test_json_keeps_peak_memory_with_the_non_private_figures(capsys):
    rc = main(["fit", "--dataset", "synthetic-skew", "--scale", "0.1", "--epsilon", "5", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert "peak_memory_mb" not in res
    assert res["non_private"]["peak_memory_mb"] > 10
    als = res["non_private"]["baselines"]["als"]
    assert "evaluation_sample" not in als  # small data: every test user
