"""Issue 24: explicit-rating models that rank, users' own leave-one-out choice of the personal
part (billboard, free), cheaper mean releases, and the generators that test the rule."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.data import load_dataset, random_split
from privrec.data.synthetic import PRESETS, generate_preset
from privrec.models import DPALS
from privrec.models.billboard import loo_personal_part, shrunk_projection
from privrec.privacy import epsilon_from_report

#: the shared datasets folder: $PRIVREC_SHARED_DATASETS, else ../shared/datasets beside the checkout
SHARED = Path(os.environ.get("PRIVREC_SHARED_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
ML100K = SHARED / "ml-100k"


def _recall(ids: np.ndarray, test: sp.csr_matrix, users: np.ndarray, threshold: float = 4.0) -> float:
    vals = []
    for j, u in enumerate(users):
        lo, hi = test.indptr[u], test.indptr[u + 1]
        truth = test.indices[lo:hi][test.data[lo:hi] >= threshold]
        if truth.size:
            vals.append(np.isin(ids[j], truth).sum() / min(ids.shape[1], truth.size))
    return float(np.mean(vals))


@pytest.fixture(scope="module")
def skew_split():
    data = load_dataset("synthetic-skew")
    parts = random_split(data, random_state=0)
    return parts.train.matrix.tocsr(), parts.validation.matrix.tocsr()


def _rank_recall(model, train, test, n=20):
    users = np.flatnonzero(np.diff(test.indptr) > 0)
    ids, _ = model.recommend(users, train[users], N=n)
    return _recall(ids, test, users)


def test_exposure_ranking_beats_rating_ranking_and_nears_popularity(skew_split):
    train, test = skew_split
    model = DPALS(epsilon=5.0, random_state=3).fit(train, show_progress=False)
    assert model._ranking_mode() == "exposure"
    exposure = _rank_recall(model, train, test)
    by_rating = _rank_recall(
        DPALS(epsilon=5.0, random_state=3, ranking="rating").fit(train, show_progress=False), train, test
    )
    counts = np.diff(train.tocsc().indptr).astype(float)
    users = np.flatnonzero(np.diff(test.indptr) > 0)
    scores = np.tile(counts, (users.size, 1))
    r = np.repeat(np.arange(users.size), np.diff(train[users].indptr))
    scores[r, train[users].indices] = -np.inf
    popularity = _recall(np.argsort(-scores, axis=1)[:, :20], test, users)
    # a rating predictor is not a ranker: the noisy biases of rare items float to the top
    assert exposure > 3 * by_rating
    assert exposure > 0.9 * popularity


def test_exposure_scores_are_log_counts_plus_scaled_rating(skew_split):
    train, _ = skew_split
    model = DPALS(epsilon=5.0, random_state=0).fit(train, show_progress=False)
    ids, scores = model.recommend(7, train[7], N=10)
    pred = model.predict(np.full(ids.size, 7), ids)
    scale = model.config_["label_bound"] / 2.0  # sigma_y, the rating noise of the bias model's prior
    assert model.item_exposure_ is not None and np.all(model.item_exposure_ > 0)
    expected = (pred - model._global()) / scale + np.log(model.item_exposure_[ids])
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
    # ranking="rating": the scores are the predicted ratings
    rated = DPALS(epsilon=5.0, random_state=0, ranking="rating").fit(train, show_progress=False)
    ids, scores = rated.recommend(7, train[7], N=10)
    np.testing.assert_allclose(scores, rated.predict(np.full(ids.size, 7), ids), rtol=1e-4, atol=1e-4)


def test_saved_model_keeps_counts_and_ranking(tmp_path, skew_split):
    train, _ = skew_split
    model = DPALS(epsilon=5.0, random_state=1).fit(train, show_progress=False)
    path = tmp_path / "m.npz"
    model.save(path)
    loaded = DPALS.load(path)
    np.testing.assert_array_equal(loaded.item_counts_, model.item_counts_)
    np.testing.assert_array_equal(loaded.item_exposure_, model.item_exposure_)
    users = np.arange(6)
    a, _ = model.recommend(users, train[users], N=10, recalculate_user=True)
    b, _ = loaded.recommend(users, train[users], N=10)
    np.testing.assert_array_equal(a, b)


def test_item_counts_are_the_released_counts_not_exact(skew_split):
    train, _ = skew_split
    model = DPALS(epsilon=1.0, random_state=1).fit(train, show_progress=False)
    exact = np.diff(train.tocsc().indptr)
    assert model.item_counts_.shape == exact.shape
    assert not np.allclose(model.item_counts_, exact)
    labels = [e.label for e in model.ledger_.entries]
    assert "item counts" in labels  # the counts used for ranking are a recorded release


# ---------------------------------------------------------------------- leave-one-out personal part
def _user_rows(rng, n_users=300, n_items=120, per_user=25):
    rows, cols = [], []
    for u in range(n_users):
        cols.append(rng.choice(n_items, per_user, replace=False))
        rows.append(np.full(per_user, u))
    r, c = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_matrix((np.ones(r.size), (r, c)), shape=(n_users, n_items))


def test_loo_equals_brute_force_leave_one_out():
    rng = np.random.default_rng(0)
    V = rng.standard_normal((30, 4))
    cols = np.sort(rng.choice(30, 9, replace=False))
    e = rng.standard_normal(9)
    rows = sp.csr_matrix((e, cols, [0, 9]), shape=(1, 30))
    reg = np.array([2.0])
    U, chosen = loo_personal_part(rows, e, V, reg, grid=(1.0,))
    X = V[cols]
    press = 0.0
    for k in range(9):
        keep = np.arange(9) != k
        w = np.linalg.solve(X[keep].T @ X[keep] + 2.0 * np.eye(4), X[keep].T @ e[keep])
        press += (e[k] - X[k] @ w) ** 2
    full = np.linalg.solve(X.T @ X + 2.0 * np.eye(4), X.T @ e)
    if press < float(e @ e):
        assert chosen[0] == 2.0
        np.testing.assert_allclose(U[0], full, rtol=1e-8)
    else:
        assert math.isinf(chosen[0]) and not U[0].any()


def test_loo_drops_a_personal_part_made_of_noise_and_keeps_a_real_one():
    rng = np.random.default_rng(1)
    R = _user_rows(rng)
    n_users, n_items = R.shape
    d = 6
    true_u = rng.standard_normal((n_users, d))
    true_v = rng.standard_normal((n_items, d)) / math.sqrt(d)
    coo = R.tocoo()
    y = np.einsum("ij,ij->i", true_u[coo.row], true_v[coo.col]) + 0.3 * rng.standard_normal(coo.nnz)
    rows = sp.csr_matrix((y, (coo.row, coo.col)), shape=R.shape)
    reg = np.full(n_users, 1.0)
    # released factors that carry the truth: almost every user keeps a personal part
    U, _, chosen = shrunk_projection(rows, true_v.astype(np.float32), np.zeros(n_items), 0.0, reg)
    assert np.isfinite(chosen).mean() > 0.9
    # pure-noise factors against labels with no structure: most users drop it
    noise_labels = sp.csr_matrix((0.3 * rng.standard_normal(coo.nnz), (coo.row, coo.col)), shape=R.shape)
    noise_v = rng.standard_normal((n_items, d)).astype(np.float32)
    U, b, chosen = shrunk_projection(noise_labels, noise_v, np.zeros(n_items), 0.0, reg)
    assert np.isinf(chosen).mean() > 0.5  # the others pick the heaviest ridges of the grid
    assert not U[np.isinf(chosen)].any()
    personal = np.einsum("ij,ij->i", U[coo.row], noise_v[coo.col])
    assert np.sqrt(np.mean(personal**2)) < 0.1  # labels have std 0.3: little noise is fitted


def test_loo_projection_of_a_user_ignores_every_other_user():
    rng = np.random.default_rng(2)
    R = _user_rows(rng, n_users=40)
    R.data = rng.integers(1, 6, R.nnz).astype(float)
    V = rng.standard_normal((R.shape[1], 5)).astype(np.float32)
    bias = rng.standard_normal(R.shape[1])
    reg = np.full(R.shape[0], 3.0)
    U, b, _ = shrunk_projection(R, V, bias, 3.5, reg)
    keep = np.arange(R.shape[0]) != 17
    U2, b2, _ = shrunk_projection(R[keep], V, bias, 3.5, reg[keep])
    np.testing.assert_array_equal(U[keep], U2)
    np.testing.assert_array_equal(b[keep], b2)


def test_personal_mode_defaults():
    assert DPALS(epsilon=5.0)._personal_mode() == "loo"
    assert DPALS(epsilon=math.inf)._personal_mode() == "fixed"
    assert DPALS(epsilon=5.0, feedback="implicit")._personal_mode() == "fixed"
    assert DPALS(epsilon=5.0, personal="fixed")._personal_mode() == "fixed"


# ---------------------------------------------------------------------- cheaper mean releases
def test_mean_releases_take_a_smaller_share_and_epsilon_recomputes(skew_split):
    train, _ = skew_split
    model = DPALS(epsilon=2.0, random_state=0).fit(train, show_progress=False)
    events = {e.label: e.event for e in model.ledger_.entries}
    z_counts = events["item counts"].noise_multiplier
    assert events["global mean: sum"].noise_multiplier == pytest.approx(2.0 * z_counts)
    assert events["global mean: count"].noise_multiplier == pytest.approx(2.0 * z_counts)
    report = model.privacy_report()
    assert report["epsilon"] <= 2.0 + 1e-9
    assert epsilon_from_report(report, report["accountant"]) == pytest.approx(report["epsilon"], rel=1e-9)


# ---------------------------------------------------------------------- generators that test the rule
def test_generators_for_the_rule():
    assert {"synthetic-biases", "synthetic-structured"} <= set(PRESETS)
    flat = generate_preset("synthetic-biases", scale=0.05)
    assert flat.signal == 0.0
    assert flat.interactions.info["affinity"] == 0.0
    strong = generate_preset("synthetic-structured", scale=0.05)
    assert strong.signal > 1.0 and strong.interactions.info["affinity"] > 0


@pytest.mark.parametrize("eps", [1.0, 20.0])
def test_no_structure_default_is_the_bias_model(eps):
    # 9,000 users: at eps = 20 the rule admits a rank and the private selection must reject it
    data = generate_preset("synthetic-biases", scale=0.3, random_state=0).interactions
    model = DPALS(epsilon=eps, random_state=0).fit(data.matrix, show_progress=False)
    assert model.config_["factors"] == 0
    assert (eps >= 20) == hasattr(model, "selection_")  # a field of the fit's release_


@pytest.mark.skipif(not ML100K.is_dir(), reason=f"{ML100K} not present (set PRIVREC_SHARED_DATASETS)")
def test_ml100k_default_ranks_far_better_than_by_rating():
    data = load_dataset("ml-100k", data_dir=ML100K)
    parts = random_split(data, random_state=0)
    train, val = parts.train.matrix.tocsr(), parts.validation.matrix.tocsr()
    model = DPALS(epsilon=5.0, random_state=7).fit(train, show_progress=False)
    rec = _rank_recall(model, train, val)
    by_rating = _rank_recall(
        DPALS(epsilon=5.0, random_state=7, ranking="rating").fit(train, show_progress=False), train, val
    )
    # the empirical-Bayes ridge shrinks rare items' biases, which already helps rating-ranking;
    # exposure-aware ranking stays well ahead (validation split)
    assert rec > 0.15 and rec > 1.3 * by_rating


def test_exposure_is_the_noisy_weighted_count_released_by_the_item_step(skew_split):
    """The exposure term is post-processing of the SSP release: the bias feature's diagonal entry
    of each item's noisy Gramian over c^2 (no extra event), divided by the public task weight."""
    train, _ = skew_split
    model = DPALS(epsilon=5.0, random_state=4).fit(train, show_progress=False)
    labels = [e.label for e in model.ledger_.entries]
    assert labels == [
        e.label for e in DPALS(epsilon=5.0, random_state=5).fit(train, show_progress=False).ledger_.entries
    ]
    exact = np.diff(train.tocsc().indptr).astype(float)

    # it finds the popular head better than the released counts do (more of the budget is behind it)
    def head_overlap(v, k=200):
        return len(set(np.argsort(-v)[:k]) & set(np.argsort(-exact)[:k])) / k

    assert head_overlap(model.item_exposure_) > 0.9  # measured 0.955
    assert head_overlap(model.item_exposure_) >= head_overlap(model.item_counts_)  # counts: 0.875
    # noisy GD releases no Gramian: ranking falls back to the released counts
    gd = DPALS(epsilon=5.0, method="ada-dpsgd", random_state=4).fit(train, show_progress=False)
    assert gd.item_exposure_ is None and gd._ranking_mode() == "exposure"


# ---------------------------------------------------------------------- the rule over an epsilon grid
EPS_GRID = [0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 15.0, 20.0, 50.0, 100.0]


@pytest.mark.parametrize("n_users", [500, 943, 5_000, 20_000, 70_000, 500_000])
@pytest.mark.parametrize("implicit", [False, True])
def test_rule_is_monotone_in_epsilon(n_users, implicit):
    """More budget never removes capacity: factors, iterations and the item fraction never shrink
    as epsilon grows, and the bias model's empirical-Bayes ridge never grows."""
    from privrec.tuning import auto_config

    rows = [auto_config(n_users, 2_000, eps, 1e-6, 5.0, implicit=implicit) for eps in EPS_GRID]
    for key in ("factors", "iterations"):
        vals = [r[key] for r in rows]
        assert vals == sorted(vals), (key, vals)


def test_empirical_bayes_ridge_shrinks_with_epsilon_and_count():
    R = load_dataset("synthetic-skew").matrix
    counts = np.array([1.0, 10.0, 100.0, 1000.0])
    ridges = []
    for eps in (0.5, 1.0, 5.0, 20.0, 100.0):
        model = DPALS(epsilon=eps, factors=0)  # the bias model (the default selects from eps ~ 13 here)
        cfg = model._resolve_config(R.shape)
        assert cfg.reg_rule == "empirical-bayes"
        z = model._pipeline(cfg, None).calibrate().train_scale
        reg, _ = DPALS._item_regularization(cfg, counts, z)
        assert np.all(np.diff(reg) < 0)  # more ratings, less shrinkage
        ridges.append(reg)
    assert np.all(np.diff(np.stack(ridges), axis=0) < 0)  # more budget, less shrinkage


def test_a_user_who_keeps_the_personal_part_gets_exactly_the_fixed_projection():
    R = load_dataset("synthetic-skew").matrix
    model = DPALS(epsilon=20.0, factors=6, iterations=2, random_state=0).fit(R, show_progress=False)
    from privrec.solvers.ridge import scaled_regularization

    rows = R[:300]
    reg = scaled_regularization(np.diff(rows.indptr), float(model.user_regularization_), 0.0, 1.0)
    U, b, chosen = shrunk_projection(rows, model.item_factors_, model._item_bias(), model._global(), reg)
    fixed_U, fixed_b = model.set_params(personal="fixed")._project_users(rows)
    keep = np.isfinite(chosen)
    assert 0 < keep.mean() < 1
    np.testing.assert_allclose(U[keep], fixed_U[keep], atol=1e-5)
    np.testing.assert_allclose(b[keep], fixed_b[keep], atol=1e-5)
    assert not U[~keep].any()


# ---------------------------------------------------------------------- spectral ridge (implicit rank)
def test_spectral_ridge_is_the_noise_edge_of_a_random_binary_matrix():
    """Without structure, the centred spectral norm of an n x k Bernoulli(p) matrix sits at the
    Bai-Yin edge sqrt(p (1 - p)) (sqrt(n) + sqrt(k)); the rule is that edge, scaled."""
    from privrec.tuning import spectral_ridge

    rng = np.random.default_rng(0)
    for n, k, p in ((4_000, 300, 0.05), (2_000, 800, 0.2)):
        X = (rng.random((n, k)) < p).astype(np.float64)
        norm = np.linalg.norm(X - X.mean(), 2)
        edge = spectral_ridge(X.sum(axis=0), n, scale=1.0)
        assert abs(edge / norm - 1.0) < 0.05, (edge, norm)
    # the sum of the noisy counts is used as released (unbiased), not clipped per item
    counts = np.array([5.0, -3.0, 10.0])
    assert spectral_ridge(counts, 100, scale=1.0) == pytest.approx(math.sqrt(0.04 * 0.96) * (10 + math.sqrt(3)))
    assert spectral_ridge(np.zeros(4), 10) > 0  # never a zero ridge


def test_implicit_rank_takes_its_ridges_from_the_released_counts_and_not_from_epsilon():
    from privrec.tuning import SPECTRAL_RIDGE_SCALE, spectral_ridge

    R = generate_preset(
        "ml20m-like", scale=0.05, random_state=0
    ).interactions.matrix.tocsr()  # 6,834 users: n * 20 >= 100,000
    n = R.shape[0]
    ridges = []
    for eps in (20.0, 50.0):  # both in the head-restricted tier for this roster
        model = DPALS(epsilon=eps, feedback="implicit", random_state=0).fit(R, show_progress=False)
        cfg = model.config_
        assert cfg["reg_rule"] == "spectral" and cfg["factors"] > 0
        assert cfg["reg"] == cfg["user_reg"] == model.user_regularization_
        released = model.item_counts_[model.trained_items_]
        assert cfg["reg"] == pytest.approx(spectral_ridge(released, n))
        ridges.append(cfg["reg"])
    # the rule reads no epsilon: the two ridges differ only by the counts' noise
    exact = spectral_ridge(np.diff(R.tocsc().indptr)[model.trained_items_], n)
    assert all(abs(r / exact - 1.0) < 0.25 for r in ridges), (ridges, exact, SPECTRAL_RIDGE_SCALE)
    # a ridge the user sets is kept as given; the other side is then the rule table's constant
    fixed = DPALS(epsilon=50.0, feedback="implicit", regularization=12.0, random_state=0).fit(R, show_progress=False)
    assert fixed.config_["reg_rule"] == "constant" and fixed.config_["reg"] == 12.0
    assert fixed.config_["user_reg"] == 30.0
