"""How the automatic selection spends rho (``privrec.tuning.rule.selection_shares``, issue 24).

Where the selection starts, the bias candidate keeps the budget that the bias model had at the
threshold, so more epsilon never buys a bias model fitted on less (the fixed 15% share dropped it
from the whole budget to 15% there); past the ramp the shares are ``SELECTION_SHARES``.
"""

import math

import numpy as np
import pytest

from privrec.models import DPALS
from privrec.tuning import auto_config
from privrec.tuning.rule import (
    SELECTION_MIN_FREE,
    SELECTION_SHARES,
    SELECTION_SIGNAL,
    gaussian_rho,
    selection_shares,
)

GRID = np.round(np.concatenate([np.linspace(0.5, 20, 20), [25, 30, 40, 50, 80]]), 4)


@pytest.mark.parametrize("n_users", [943, 3_000, 8_000, 14_000, 30_000, 70_000, 250_000])
def test_bias_candidate_budget_never_shrinks_as_epsilon_grows(n_users):
    delta = 1e-5
    kept = []
    for eps in GRID:
        shares = selection_shares(n_users, float(eps), delta)
        rho = gaussian_rho(float(eps), delta)
        if shares is None:  # the bias model on the whole budget
            kept.append(rho)
            assert (
                n_users * min(eps, 20) < SELECTION_SIGNAL
                or 1 - gaussian_rho(SELECTION_SIGNAL / n_users, delta) / rho < SELECTION_MIN_FREE + 1e-12
            )
            continue
        bias, rank = shares["candidate_shares"]
        total = bias + rank + shares["selection_share"] + shares["refit_share"]
        assert total == pytest.approx(1.0) and total <= 1 + 1e-12
        assert bias >= SELECTION_SHARES["candidate_shares"][0] - 1e-12
        assert rank > 0 and shares["selection_share"] > 0 and shares["holdout"] == SELECTION_SHARES["holdout"]
        kept.append(bias * rho)
    kept = np.array(kept)
    # non-decreasing, except the one step where the selection starts: at most SELECTION_MIN_FREE of rho
    drops = kept[1:] / kept[:-1]
    assert np.all(drops >= 1 - SELECTION_MIN_FREE - 1e-9)
    assert np.sum(drops < 1 - 1e-9) <= 1


def test_threshold_ramp_and_full_shares():
    delta = 1e-5
    n = 14_000
    eps_0 = SELECTION_SIGNAL / n
    assert selection_shares(n, 0.99 * eps_0, delta) is None  # below the signal threshold
    assert selection_shares(n, 1.01 * eps_0, delta) is None  # no room yet for the rank
    mid = selection_shares(n, 8.0, delta)
    assert mid is not None
    # the bias candidate keeps exactly the threshold's rho
    assert mid["candidate_shares"][0] * gaussian_rho(8.0, delta) == pytest.approx(gaussian_rho(eps_0, delta))
    # rank and scores split the rest in the ratio of SELECTION_SHARES
    base_rank, base_sel = SELECTION_SHARES["candidate_shares"][1], SELECTION_SHARES["selection_share"]
    assert mid["candidate_shares"][1] / mid["selection_share"] == pytest.approx(base_rank / base_sel)
    full = selection_shares(n, 50.0, delta)
    assert full == {**SELECTION_SHARES, "candidate_shares": tuple(SELECTION_SHARES["candidate_shares"])}
    # continuous where the ramp meets the floor
    coarse = np.linspace(9, 30, 22)
    # the first coarse point at the full shares, scanned lazily (each new epsilon costs a PLD
    # calibration; the points past it are covered by test_bias_candidate_budget_never_shrinks...)
    b = next(float(e) for e in coarse if selection_shares(n, e, delta)["candidate_shares"] == full["candidate_shares"])
    lo, hi = b - 1.0, b  # bisect to the junction, then compare both sides of it
    for _ in range(12):
        mid_e = 0.5 * (lo + hi)
        if selection_shares(n, mid_e, delta)["candidate_shares"] == full["candidate_shares"]:
            hi = mid_e
        else:
            lo = mid_e
    below, above = selection_shares(n, lo, delta), selection_shares(n, hi, delta)
    assert abs(below["candidate_shares"][1] - above["candidate_shares"][1]) < 1e-3
    assert abs(below["candidate_shares"][0] - above["candidate_shares"][0]) < 1e-3
    # small rosters never select (the signal index caps epsilon at 20); epsilon = inf never selects
    assert selection_shares(SELECTION_SIGNAL / 25, 1e6, delta) is None
    assert selection_shares(10**6, math.inf, delta) is None


def test_the_rule_proposes_a_rank_exactly_where_the_selection_can_run():
    for n in (2_000, 5_000, 14_000, 70_000):
        for eps in (0.5, 1, 2, 5, 8, 10, 15, 20, 50):
            proposes = auto_config(n, 500, eps, 1e-5, 5.0)["factors"] > 0
            assert proposes == (selection_shares(n, eps, 1e-5) is not None), (n, eps)


def test_the_fit_spends_the_shares_of_the_rule():
    rng = np.random.default_rng(0)
    n_users, n_items = 8_000, 200
    rows = np.repeat(np.arange(n_users), 6)
    cols = rng.integers(0, n_items, rows.size)
    import scipy.sparse as sp

    X = sp.csr_matrix((rng.integers(1, 6, rows.size).astype(np.float32), (rows, cols)), shape=(n_users, n_items))
    X.sum_duplicates()
    X.data = np.clip(X.data, 1, 5)
    eps = 12.0  # in the ramp: 60,000 / 8,000 = 7.5
    model = DPALS(epsilon=eps, random_state=0, show_progress=False).fit(X)
    want = selection_shares(n_users, eps, model.config_["delta"])
    sel = model.selection_
    assert sel["shares"]["candidates"] == pytest.approx(list(want["candidate_shares"]))
    assert sel["shares"]["selection"] == pytest.approx(want["selection_share"])
    # in the ramp the bias candidate's epsilon is the threshold's (less the selection's margin)
    eps_bias = sel["epsilon_candidates"][0]
    assert 0.97 * SELECTION_SIGNAL / n_users < eps_bias <= SELECTION_SIGNAL / n_users
    assert model.privacy_report()["epsilon"] <= eps * (1 + 1e-9)


@pytest.mark.parametrize("delta", [1e-4, 1e-6, 1e-8])
def test_once_the_selection_runs_it_keeps_running(delta):
    """Along an increasing epsilon grid the default never goes back from selection to the plain
    bias model, for other deltas too; the bias candidate's rho stays that of the threshold in the ramp."""
    n = 14_000
    eps_0 = SELECTION_SIGNAL / n
    started = False
    for eps in np.geomspace(3.0, 40.0, 12):
        shares = selection_shares(n, float(eps), delta)
        assert not (started and shares is None), eps
        if shares is not None:
            started = True
            bias = shares["candidate_shares"][0]
            if bias > SELECTION_SHARES["candidate_shares"][0]:
                assert bias * gaussian_rho(float(eps), delta) == pytest.approx(gaussian_rho(eps_0, delta))
    assert started


def test_the_free_share_boundary_and_huge_rosters():
    delta = 1e-5
    n = 14_000
    eps_0 = SELECTION_SIGNAL / n
    lo, hi = eps_0, 1.2 * eps_0  # bisect to where 10% of rho becomes free
    # 16 halvings: hi within 1.3e-5 of the boundary, i.e. the free share within ~1e-5 of its value
    # there (100x below the 0.01 tolerance below); each step is a new PLD calibration
    for _ in range(16):
        mid = 0.5 * (lo + hi)
        if selection_shares(n, mid, delta) is None:
            lo = mid
        else:
            hi = mid
    first = selection_shares(n, hi, delta)
    # (rho of a calibrated multiplier moves in small steps: the first free share is 10% or a little more)
    assert SELECTION_MIN_FREE <= 1.0 - first["candidate_shares"][0] < SELECTION_MIN_FREE + 0.01
    assert 1.04 * eps_0 < hi < 1.1 * eps_0  # "about 6-7% past eps_0"
    # a roster whose threshold epsilon is below the smallest calibrated target: the full shares
    assert selection_shares(10**9, 5.0, delta)["candidate_shares"] == tuple(SELECTION_SHARES["candidate_shares"])
    assert auto_config(10**9, 1_000, 5.0, delta, 5.0)["factors"] > 0
