"""The bias model's budget split on a wide catalogue (issue 43): the signal index is per item where
there are fewer than one user per two items, so the counts -- the ranking's signal -- get the larger
share there; every narrower catalogue keeps the rule as it was."""

import math

import numpy as np
import pytest

from privrec.tuning.rule import (
    WIDE_CATALOGUE_COVERAGE,
    auto_config,
    bias_gramian_ratio,
    catalogue_signal_factor,
)

EPS = (0.5, 1, 2, 3, 5, 8, 10, 15, 20, 50)


def test_the_factor_is_one_up_to_the_coverage_then_falls_continuously():
    assert catalogue_signal_factor(943, 1682) == 1.0  # ML-100K: 0.56 users per item
    assert catalogue_signal_factor(5_000, 2_000) == 1.0
    assert catalogue_signal_factor(500, 1_000) == 1.0  # exactly the coverage
    assert catalogue_signal_factor(25_000, 300_000) == pytest.approx((25_000 / 300_000 / 0.5) ** 2)
    widths = np.linspace(1_000, 400_000, 2_000)
    f = np.array([catalogue_signal_factor(10_000, int(w)) for w in widths])
    assert np.all(np.diff(f) <= 0) and np.all((f > 0) & (f <= 1))
    assert catalogue_signal_factor(0, 10) == 0.0 and catalogue_signal_factor(10, 0) == 1.0
    assert WIDE_CATALOGUE_COVERAGE == 0.5


@pytest.mark.parametrize("shape", [(943, 1682), (5_000, 2_000), (69_878, 10_677), (30_000, 3_000)])
def test_catalogues_with_enough_users_per_item_keep_the_users_index(shape):
    n_users, n_items = shape
    for eps in EPS:
        cfg = auto_config(n_users, n_items, eps, 1e-6, 5.0, bias_model=True)
        assert cfg["gramian_ratio"] == bias_gramian_ratio(n_users * min(eps, 20.0))


def test_a_wide_catalogue_gives_the_counts_the_larger_share_and_stays_monotone():
    rows = [auto_config(25_000, 300_000, e, 1e-6, 5.0, bias_model=True) for e in EPS]
    ratios = [r["gramian_ratio"] for r in rows]
    assert ratios[1] == pytest.approx(0.5)  # eps = 1: the counts' largest share (the users' index gave sqrt 2)
    assert bias_gramian_ratio(25_000 * 1.0) == pytest.approx(math.sqrt(2.0))
    assert ratios == sorted(ratios)  # more budget never shifts it back towards the counts
    assert ratios[-1] == pytest.approx(math.sqrt(2.0))
