"""The private bias model's item biases: the empirical-Bayes posterior of its own item-step release
(privrec.models.bias_posterior), the solver's kept release, and the budget split rule."""

import math

import numpy as np
import pytest
from test_solvers_ssp import _batch

from privrec.data import load_dataset
from privrec.models import DPALS
from privrec.models.bias_posterior import posterior_item_bias, prior_mean_line
from privrec.solvers import SSPSolver, weighted_statistics
from privrec.tuning.rule import SIGMA_Y_OVER_TAU, auto_config, bias_gramian_ratio


# ---------------------------------------------------------------------- the solver keeps its release
def test_kept_release_without_noise_is_the_exact_statistics():
    b = _batch(seed=3, d=3)
    res = SSPSolver(noise_multiplier=0.0, reg=0.5, max_norm=2.0, label_bound=3.0, dtype=np.float64, keep_diagonal=True)
    out = res.solve(b)
    G, rhs = weighted_statistics(b, max_norm=2.0, label_bound=3.0)
    np.testing.assert_allclose(out.info["noisy_gramian_diagonal"], np.diagonal(G, axis1=1, axis2=2), rtol=1e-10)
    np.testing.assert_allclose(out.info["noisy_rhs"], rhs, rtol=1e-10, atol=1e-12)


def test_kept_release_is_what_the_one_dimensional_solve_used():
    """With one feature, the solution is rhs / (G + reg) wherever the noisy G is positive: the kept
    diagonal and right-hand side are exactly the released statistics the solve saw."""
    b = _batch(seed=5, d=1)
    solver = SSPSolver(noise_multiplier=1.0, budget=3.0, reg=0.5, max_norm=1.0, label_bound=2.0, keep_diagonal=True)
    out = solver.solve(b, rng=np.random.default_rng(0))
    diag, rhs = out.info["noisy_gramian_diagonal"][:, 0], out.info["noisy_rhs"][:, 0]
    ok = diag > 0
    assert ok.sum() >= 5
    np.testing.assert_allclose(out.params[ok, 0], rhs[ok] / (diag[ok] + 0.5), rtol=1e-4)
    assert not np.allclose(out.info["noisy_rhs"], weighted_statistics(b, max_norm=1.0, label_bound=2.0)[1])


# ---------------------------------------------------------------------- the posterior
def test_posterior_with_many_ratings_and_no_noise_is_the_mean_label():
    n = np.array([1e6, 2e6, 5e6])
    means = np.array([0.3, -0.2, 0.05])
    b = posterior_item_bias(n * 0.25, n * means * 0.5, 0.5, 0.0, 0.0, 2.0)  # c = 0.5: G = c^2 n, rhs = c R
    np.testing.assert_allclose(b, means, atol=1e-4)


def test_posterior_shrinks_rare_items_more_and_more_so_under_more_noise():
    n = np.array([2.0, 2000.0])  # two items: too few for a prior-mean line, so the prior mean is 0
    R = 0.5 * n  # both items' mean label is 0.5
    quiet = posterior_item_bias(n, R, 1.0, 0.0, 1.0, 2.0)
    loud = posterior_item_bias(n, R, 1.0, 0.0, 30.0, 2.0)
    assert quiet[0] < quiet[1] and loud[0] < loud[1]  # the rare item nearer the prior mean
    assert np.all(loud < quiet)
    # the ridge is the empirical-Bayes one at the released weighted count
    tau = 2.0 / (2 * SIGMA_Y_OVER_TAU)
    lam = SIGMA_Y_OVER_TAU**2 + (1.0 / tau) ** 2 / n
    np.testing.assert_allclose(quiet, R / (n + lam), rtol=1e-10)


def test_rare_items_shrink_towards_the_fitted_prior_mean_not_zero():
    n = np.array([2.0, 20.0, 200.0, 2000.0, 5000.0])
    R = 0.5 * n  # every item's mean label is 0.5, which the line learns from the well-counted items
    b = posterior_item_bias(n, R, 1.0, 0.0, 1.0, 2.0)
    alone = posterior_item_bias(n[[0, 4]], R[[0, 4]], 1.0, 0.0, 1.0, 2.0)  # no line: towards 0
    assert b[0] > 0.45 and alone[0] < 0.1
    np.testing.assert_allclose(b[1:], 0.5, atol=0.02)


def test_counts_below_the_noise_are_floored_at_it():
    b = posterior_item_bias(np.array([-50.0, 0.0, 3.0]), np.array([40.0, 40.0, 40.0]), 1.0, 10.0, 1.0, 2.0)
    assert np.all(np.isfinite(b))
    assert b[0] == b[1] == b[2]  # all three read as the floor count 10


def test_prior_mean_line_recovers_a_trend_and_does_not_extrapolate():
    rng = np.random.default_rng(0)
    n = np.exp(rng.uniform(math.log(20), math.log(2000), 400))
    truth = -0.4 + 0.2 * (np.log(n) - np.log(200))
    R = n * (truth + rng.normal(0, 0.02, n.size))
    trusted = np.ones(n.size, dtype=bool)
    m = prior_mean_line(n, R, np.full(n.size, 0.02**2), trusted)
    np.testing.assert_allclose(m, truth, atol=0.01)
    # an item rarer than every fitted one gets the line's end value, not an extrapolation
    n2 = np.append(n, 1.0)
    m2 = prior_mean_line(n2, np.append(R, 0.0), np.full(n2.size, 0.02**2), np.append(trusted, False))
    assert m2[-1] == pytest.approx(m2[np.argmin(n)], abs=1e-12)


def test_prior_mean_line_falls_back_to_zero_when_the_release_shows_no_trend():
    n = np.exp(np.linspace(math.log(20), math.log(2000), 50))
    signs = np.where(np.arange(50) % 2 == 0, 1.0, -1.0)
    R = n * 0.01 * signs  # tiny alternating means against a large variance: nothing to see
    m = prior_mean_line(n, R, np.full(50, 1.0), np.ones(50, dtype=bool))
    assert np.all(m == 0.0)
    assert np.all(prior_mean_line(n, R, np.full(50, 1.0), np.arange(50) < 2) == 0.0)  # < 3 items


# ---------------------------------------------------------------------- the fitted model
@pytest.fixture(scope="module")
def skew():
    return load_dataset("synthetic-skew").matrix


def test_bias_model_releases_the_posterior_of_its_own_item_step(skew, monkeypatch):
    """The released item biases are a function of the item step's release and public constants only."""
    kept = {}
    solve = SSPSolver.solve

    def spy(self, batch, rng=None):
        out = solve(self, batch, rng)
        kept.update(out.info, stds=self.noise_stds())
        return out

    monkeypatch.setattr(SSPSolver, "solve", spy)
    model = DPALS(epsilon=3.0, random_state=0).fit(skew, show_progress=False)
    cfg = model.config_
    assert cfg["factors"] == 0 and cfg["reg_rule"] == "empirical-bayes" and cfg["mu"] == 0.0
    want = posterior_item_bias(
        kept["noisy_gramian_diagonal"][:, 0], kept["noisy_rhs"][:, 0], cfg["bias_feature"],
        kept["stds"]["gramian"], kept["stds"]["rhs"], cfg["label_bound"],
    )  # fmt: skip
    np.testing.assert_allclose(model.item_bias_[model.trained_items_], want, rtol=1e-5, atol=1e-6)
    # post-processing: the ledger holds exactly the planned events (nothing added for the posterior)
    plan = model.planned_events(model.noise_scales_["count"], model.noise_scales_["train"])
    assert [(label, event) for label, event in plan] == [(e.label, e.event) for e in model.ledger_.entries]


def test_an_explicit_ridge_or_gravity_keeps_the_solver_solution(skew, monkeypatch):
    """Only the automatic (empirical-Bayes) bias model replaces the solver's ridge solution."""
    kept = {}
    solve = SSPSolver.solve

    def spy(self, batch, rng=None):
        out = solve(self, batch, rng)
        kept["params"] = np.asarray(out.params)
        return out

    monkeypatch.setattr(SSPSolver, "solve", spy)
    for kwargs in (dict(regularization=5.0), dict(unobserved_weight=0.05)):
        model = DPALS(epsilon=3.0, factors=0, random_state=0, **kwargs).fit(skew, show_progress=False)
        c = model.config_["bias_feature"]
        np.testing.assert_allclose(model.item_bias_[model.trained_items_], kept["params"][:, 0] * c, rtol=1e-6)
    ranked = DPALS(epsilon=3.0, factors=2, iterations=1, random_state=0).fit(skew, show_progress=False)
    assert ranked.config_["gramian_ratio"] == 1.0 and ranked.config_["mu"] == 0.25


def test_degenerate_and_non_finite_releases_stay_finite():
    n = np.full(6, 400.0)
    b = posterior_item_bias(n, 0.3 * n, 1.0, 1.0, 1.0, 2.0)  # one count: the intercept alone
    np.testing.assert_allclose(b, 0.3, atol=0.01)
    n2 = n.copy()
    n2[0] = 401.0  # no jump when the counts start to differ
    np.testing.assert_allclose(posterior_item_bias(n2, 0.3 * n2, 1.0, 1.0, 1.0, 2.0), b, atol=0.005)
    R = 0.3 * n
    R[2] = np.nan
    out = posterior_item_bias(n, R, 1.0, 1.0, 1.0, 2.0)
    assert np.isnan(out[2]) and np.all(np.isfinite(np.delete(out, 2)))  # one bad item stays its own
    f32 = posterior_item_bias(n.astype(np.float32), (0.3 * n).astype(np.float32), 0.5, 1.0, 1.0, 2.0)
    assert f32.dtype == np.float64 and np.all(np.isfinite(f32))


# ---------------------------------------------------------------------- the budget split rule
def test_bias_gramian_ratio_is_continuous_bounded_and_non_decreasing():
    signals = np.linspace(0.0, 20_000.0, 4001)
    r = np.array([bias_gramian_ratio(s) for s in signals])
    assert r.min() == pytest.approx(0.5) and r.max() == pytest.approx(math.sqrt(2.0))
    assert np.all(np.diff(r) >= 0)
    assert np.max(np.abs(np.diff(r))) < 2e-3  # no step (signal steps of 5)
    for n_users in (300, 943, 5_000, 100_000):
        rows = [auto_config(n_users, 1_000, e, 1e-6, 5.0, bias_model=True) for e in (0.1, 0.5, 1, 2, 5, 20, 50)]
        assert all(r["factors"] == 0 for r in rows)
        ratios = [r["gramian_ratio"] for r in rows]
        assert ratios == sorted(ratios)


# ---------------------------------------------------------------------- exposure: two measurements
def test_exposure_combines_the_weighted_count_and_the_released_counts():
    from privrec.models.exposure import item_exposure

    rng = np.random.default_rng(1)
    truth = np.exp(rng.uniform(np.log(50), np.log(5000), 300))
    s_g, s_c = 40.0, 60.0
    errs = {"alone": [], "both": []}
    for _ in range(20):
        weighted = truth + rng.normal(0, s_g, truth.size)
        counts = 2.0 * truth + rng.normal(0, s_c, truth.size)  # another scale: users weigh 1, not s_j
        parts = [(weighted, s_g)]
        head, omega = np.arange(truth.size), np.ones(truth.size)
        errs["alone"].append(np.mean((item_exposure(parts, omega, head, truth.size) - truth) ** 2))
        both = item_exposure(parts, omega, head, truth.size, counts=counts, count_std=s_c)
        errs["both"].append(np.mean((both - truth) ** 2))
    # on the weighted count's scale, and closer to the truth than the weighted count alone
    # (inverse-variance weights: s_g^2 against (s_c / 2)^2 gives about 0.36 of the error)
    assert np.mean(errs["both"]) < 0.5 * np.mean(errs["alone"])
    assert np.mean(both) == pytest.approx(np.mean(truth), rel=0.02)


def test_popularity_ranker_samples_fifty_items_per_user_and_a_given_sample_wins(skew):
    from privrec.tuning.rule import POPULARITY_COUNT_SAMPLE

    pop = DPALS(feedback="implicit", epsilon=0.5)._resolve_config((1_000, 500))
    assert pop.factors == 0 and pop.iterations == 0 and pop.count_sample == POPULARITY_COUNT_SAMPLE == 50
    ranked = DPALS(feedback="implicit", epsilon=20.0)._resolve_config((10_000, 500))
    assert ranked.factors > 0 and ranked.count_sample == math.ceil(ranked.budget)
    given = DPALS(feedback="implicit", epsilon=0.5, count_sample=7)._resolve_config((1_000, 500))
    assert given.count_sample == 7
    asked = DPALS(feedback="implicit", epsilon=20.0, factors=0)._resolve_config((100_000, 500))
    assert asked.count_sample == POPULARITY_COUNT_SAMPLE  # a popularity ranker at any size
    # the count release's sensitivity follows: sqrt(50) per user
    model = DPALS(feedback="implicit", epsilon=0.5, random_state=0).fit(skew, show_progress=False)
    entry = model.ledger_.entries[0]
    assert entry.label == "item counts" and entry.meta["count_sample"] == 50
    assert entry.meta["sensitivity"] == pytest.approx(math.sqrt(50))
