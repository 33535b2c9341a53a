"""DPALS (Algorithm 3, spec 004 §6): eps = inf reduction, accounting, sensitivity under user removal."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from privrec.allocation import adaptive_weights
from privrec.models import ALS, DPALS, METHODS
from privrec.pipeline import check_ledger
from privrec.privacy import PrivacyLedger, epsilon_from_report
from privrec.solvers import weighted_statistics


def _skewed_ratings(n_users=80, n_items=40, seed=0):
    """Small explicit-rating matrix with power-law item popularity (every user >= 1 rating)."""
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.8
    pop = pop / pop.max() * 0.6
    mask = rng.random((n_users, n_items)) < pop[None, :]
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
    vals = rng.integers(1, 6, size=mask.shape).astype(np.float32)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


def test_epsilon_inf_equals_non_private_als():
    R = _skewed_ratings()
    kw = dict(
        factors=5,
        iterations=3,
        regularization=3.0,
        reg_exponent=0.5,
        unobserved_weight=0.1,
        dtype=np.float64,
        random_state=11,
    )
    als = ALS(biases=False, center=True, solver="cholesky", **kw).fit(R)
    dp = DPALS(method="ada-dpals", epsilon=math.inf, center=True, biases=False, user_solver="cholesky", **kw).fit(R)
    np.testing.assert_allclose(dp.item_factors_, als.item_factors_, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(dp.user_factors_, als.transform(R), rtol=1e-9, atol=1e-11)
    assert float(dp.global_mean_) == pytest.approx(float(als.global_mean_))
    rep = dp.privacy_report()
    assert rep["epsilon"] == "inf"  # non-private events: the accountant reports infinity
    # the default CG user step: d = 5 warm-started CG steps solve a 5-dim system (up to rounding)
    cg = DPALS(method="ada-dpals", epsilon=math.inf, center=True, biases=False, cg_steps=5, **kw).fit(R)
    np.testing.assert_allclose(cg.item_factors_, als.item_factors_, rtol=1e-6, atol=1e-8)


def test_epsilon_inf_with_biases_equals_als_with_biases():
    """Private biases reduce exactly: at epsilon = inf the bias feature is 1 and the fit is ALS(biases=True)."""
    R = _skewed_ratings()
    kw = dict(factors=4, iterations=3, regularization=2.0, reg_exponent=1.0, dtype=np.float64, random_state=5)
    als = ALS(biases=True, center=True, solver="cholesky", **kw).fit(R)
    dp = DPALS(method="dpals-tail", epsilon=math.inf, center=True, biases=True, user_solver="cholesky", **kw).fit(R)
    np.testing.assert_allclose(dp.item_factors_, als.item_factors_, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(dp.item_bias_, als.item_bias_, rtol=1e-9, atol=1e-11)
    u, b = als._project_users(R)
    np.testing.assert_allclose(dp.user_factors_, u, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(dp.user_bias_, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_privacy_report_recomputed_independently(method):
    R = _skewed_ratings(seed=1)
    eps, delta = 2.0, 1e-5
    m = DPALS(
        method=method, epsilon=eps, delta=delta, factors=3, iterations=2, budget=5, gd_iterations=3, random_state=0
    ).fit(R)
    rep = m.privacy_report()
    assert rep["accountant"] == "pld"  # the default calibrating accountant
    recomputed = epsilon_from_report(rep, rep["accountant"])
    assert recomputed == pytest.approx(rep["epsilon"], rel=1e-12)
    assert epsilon_from_report(rep, "rdp") == pytest.approx(rep["epsilon_rdp"], rel=1e-12)
    assert recomputed <= eps
    assert recomputed >= 0.99 * eps  # calibration spends (almost) the whole budget
    # the report names every step's releases, and a fresh ledger built from it agrees
    labels = [e["label"] for e in rep["events"]]
    assert labels[0] == "item counts" and any(lbl.startswith("ALS step 2:") for lbl in labels)
    assert PrivacyLedger.from_report(rep).epsilon(delta, "pld") == pytest.approx(recomputed, rel=1e-12)
    # only item factors are released; items never seen stay zero
    assert m.item_factors_.shape == (R.shape[1], 3)


def test_count_fraction_share_of_rdp_budget():
    R = _skewed_ratings(seed=2)
    m = DPALS(
        method="dpals-tail",
        epsilon=5.0,
        factors=3,
        iterations=2,
        budget=5,
        count_fraction=0.3,
        center=False,
        random_state=0,
    ).fit(R)
    rho_count = 0.5 / m.noise_scales_["count"] ** 2
    rho_total = sum(0.5 / e.event.noise_multiplier**2 for e in m.ledger_.entries)
    assert rho_count / rho_total == pytest.approx(0.3, rel=1e-6)


def test_head_restriction_and_unseen_items_get_zero_factors():
    R = _skewed_ratings(seed=3).tolil()
    R[:, 39] = 0
    R = R.tocsr()
    R.eliminate_zeros()
    m = DPALS(method="ada-dpals", epsilon=8.0, factors=3, iterations=2, budget=5, item_frac=0.5, random_state=0).fit(R)
    trained = set(m.trained_items_.tolist())
    assert len(trained) == 20
    others = [i for i in range(40) if i not in trained]
    assert np.all(m.item_factors_[others] == 0)


def _statistics_after_removal(method, seed, removed, biases=False):
    R = _skewed_ratings(n_users=30, n_items=15, seed=seed)
    model = DPALS(
        method=method, epsilon=1.0, budget=3, mu=0.4, max_norm=0.7, rating_bound=5.0, factors=4, biases=biases
    )
    cfg = model._resolve_config()
    rng = np.random.default_rng(seed)
    counts = np.maximum(np.diff(R.tocsc().indptr) + rng.normal(0, 2, R.shape[1]), 1.0)  # released counts
    labels = R.copy()
    labels.data = labels.data - 3.0
    W = model._allocate(cfg, labels, counts, rng)
    U = rng.standard_normal((R.shape[0], 4)) * rng.choice([0.1, 3.0], size=(R.shape[0], 1))  # some above max_norm
    if biases:  # the item-bias feature: a public constant appended to each (clipped) user embedding
        U = np.hstack([U, np.full((R.shape[0], 1), cfg.bias_feature)])
    keep = np.flatnonzero(np.arange(R.shape[0]) != removed)
    batch = model.item_batch(cfg, labels, W, U, counts, R.shape[0])
    batch2 = model.item_batch(cfg, labels[keep], W[keep], U[keep], counts, R.shape[0])
    solver = model._make_solver(cfg, 1.0)
    gx = cfg.feature_norm
    G1, b1 = weighted_statistics(batch, gx, cfg.label_bound)
    G2, b2 = weighted_statistics(batch2, gx, cfg.label_bound)
    return model, cfg, solver, (G1, b1), (G2, b2), (labels, counts, W, keep)


@settings(max_examples=12, deadline=None)
@given(
    method=st.sampled_from(["dpals-uniform", "dpals-tail", "ada-dpals"]),
    seed=st.integers(0, 10_000),
    removed=st.integers(0, 29),
    biases=st.booleans(),
)
def test_ssp_statistics_change_at_most_declared_sensitivity(method, seed, removed, biases):
    model, cfg, solver, (G1, b1), (G2, b2), _ = _statistics_after_removal(method, seed, removed, biases)
    sens = solver.sensitivities()
    gx2 = cfg.max_norm**2 + (cfg.bias_feature**2 if biases else 0.0)
    assert sens["gramian"] == pytest.approx(math.sqrt(cfg.budget) * gx2)
    assert np.linalg.norm(G1 - G2) <= sens["gramian"] * (1 + 1e-9)
    assert np.linalg.norm(b1 - b2) <= sens["rhs"] * (1 + 1e-9)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), removed=st.integers(0, 29))
def test_noisy_gd_gradients_change_at_most_declared_sensitivity(seed, removed):
    model, cfg, _, (G1, b1), (G2, b2), _ = _statistics_after_removal("ada-dpsgd", seed, removed)
    solver = model._make_solver(cfg, 1.0)
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(b1.shape)
    theta *= solver.radius / np.linalg.norm(theta, axis=1, keepdims=True)  # on the constraint sphere
    g1 = np.einsum("mij,mj->mi", G1, theta) - b1
    g2 = np.einsum("mij,mj->mi", G2, theta) - b2
    bound = {lbl: meta for lbl, _, meta in solver.labelled_events()}["noisy GD gradients"]["sensitivity"]
    assert np.linalg.norm(g1 - g2) <= bound * (1 + 1e-9)


def test_adaptive_allocation_is_per_user_so_removal_is_a_coupling():
    """Other users' weights do not depend on the removed user (given the released counts)."""
    _, cfg, _, _, _, (labels, counts, W, keep) = _statistics_after_removal("ada-dpals", 4, 7)
    W2 = adaptive_weights(labels[keep], counts, cfg.mu, cfg.budget, dtype=cfg.dtype)
    np.testing.assert_array_equal(W2.toarray(), W[keep].toarray())
    spend = np.asarray(W.multiply(W).sum(axis=1)).ravel()
    assert spend.max() <= cfg.budget * (1 + 1e-6)


def test_private_fit_is_reproducible_with_seed_and_random_without():
    R = _skewed_ratings(seed=5)
    kw = dict(method="dpals-uniform", epsilon=3.0, factors=3, iterations=2, budget=5)
    a = DPALS(random_state=3, **kw).fit(R).item_factors_
    b = DPALS(random_state=3, **kw).fit(R).item_factors_
    c = DPALS(**kw).fit(R).item_factors_
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_ledger_drift_is_detected():
    R = _skewed_ratings(seed=6)
    m = DPALS(method="ada-dpals", epsilon=3.0, factors=3, iterations=2, budget=5, random_state=0).fit(R)
    cfg = m._resolve_config(R.shape)
    plan = m.planned_events(m.noise_scales_["count"], m.noise_scales_["train"], cfg)
    check_ledger(m.ledger_, plan)  # consistent
    with pytest.raises(RuntimeError):
        check_ledger(m.ledger_, plan[:-1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(delta=0.0), "delta"),
        (dict(delta=1.0), "delta"),
        (dict(delta=2.0), "delta"),
        (dict(method="dp-magic"), "method.*dp-magic"),
        (dict(mu=1.5), "mu"),
        (dict(budget=0), "budget"),
        (dict(method="dpals-uniform", budget=2.5), "integer"),
        (dict(iterations=0), "iterations"),
        (dict(max_norm=-1.0), "max_norm"),
        (dict(count_fraction=1.0), "count_fraction"),
    ],
)
def test_bad_parameters_raise_clear_errors(kwargs, match):
    R = _skewed_ratings(seed=7)
    with pytest.raises(ValueError, match=match):
        DPALS(**kwargs).fit(R)


@pytest.mark.parametrize("reg_exponent", [0.25, 1.0])
def test_private_user_step_of_other_users_ignores_a_removed_user(reg_exponent):
    """Remove one user: every other user's (clipped) embedding in the user step is unchanged.

    The item-step sensitivity assumes this coupling; a ridge normalised over all users' counts
    would break it (it did: the normaliser moved with the removed user's count).
    """
    R = _skewed_ratings(n_users=40, n_items=20, seed=5)
    model = DPALS(method="ada-dpals", epsilon=1.0, budget=3, reg_exponent=reg_exponent, max_norm=0.7, dtype=np.float64)
    cfg = model._resolve_config()
    V = np.random.default_rng(0).standard_normal((R.shape[1], 4))
    removed = int(np.argmax(np.diff(R.indptr)))  # the heaviest user moves a normaliser most
    keep = np.flatnonzero(np.arange(R.shape[0]) != removed)
    reg1, norm1 = model._user_regularization(cfg, np.diff(R.indptr))
    reg2, norm2 = model._user_regularization(cfg, np.diff(R[keep].indptr))
    b_items = np.random.default_rng(1).standard_normal(R.shape[1])
    U1, bu1, warm1 = model._user_step(cfg, R, V, b_items, reg1)
    U2, bu2, warm2 = model._user_step(cfg, R[keep], V, b_items, reg2)
    np.testing.assert_array_equal(U2, U1[keep])
    np.testing.assert_array_equal(bu2, bu1[keep])
    assert norm1 == norm2  # the projection's normaliser (saved with the model) is data-independent
    assert np.linalg.norm(U1, axis=1).max() <= cfg.max_norm * (1 + 1e-12)
    # the next (CG, warm-started) user step: each row starts from that user's own previous solution
    assert cfg.user_solver == "cg"
    V2 = np.random.default_rng(2).standard_normal(V.shape)
    C1, cb1, _ = model._user_step(cfg, R, V2, b_items, reg1, warm1)
    C2, cb2, _ = model._user_step(cfg, R[keep], V2, b_items, reg2, warm2)
    np.testing.assert_allclose(C2, C1[keep], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cb2, cb1[keep], rtol=1e-10, atol=1e-12)
    assert not np.allclose(C1, U1)  # it did solve against the new item side


def test_cg_user_step_warm_starts_and_converges_to_the_exact_solve():
    """user_solver="cg": the first user step is exact; later ones run cg_steps CG steps from the
    previous solution, which reach the exact solve as cg_steps grows (d + 1 steps are exact in
    exact arithmetic), and the unclipped solution is what is passed on."""
    R = _skewed_ratings(n_users=60, n_items=25, seed=3)
    exact = DPALS(epsilon=5.0, factors=4, user_solver="cholesky", dtype=np.float64)
    cfg_exact = exact._resolve_config()
    rng = np.random.default_rng(4)
    V0, V1 = rng.standard_normal((2, R.shape[1], 4))
    b_items = rng.standard_normal(R.shape[1])
    reg, _ = exact._user_regularization(cfg_exact, np.diff(R.indptr))
    U0, _, warm = exact._user_step(cfg_exact, R, V0, b_items, reg)
    assert warm.shape == (R.shape[0], 5)  # factors + the user bias, unclipped
    assert np.linalg.norm(warm[:, :4], axis=1).max() > cfg_exact.max_norm >= np.linalg.norm(U0, axis=1).max() - 1e-12
    target, target_b, _ = exact._user_step(cfg_exact, R, V1, b_items, reg, warm)  # cholesky ignores warm
    errors = []
    for steps in (1, 3, 6):
        model = DPALS(epsilon=5.0, factors=4, cg_steps=steps, dtype=np.float64)
        cfg = model._resolve_config()
        first, _, _ = model._user_step(cfg, R, V0, b_items, reg)  # no warm start: exact
        np.testing.assert_array_equal(first, U0)
        U, b, _ = model._user_step(cfg, R, V1, b_items, reg, warm)
        errors.append(np.abs(U - target).max() + np.abs(b - target_b).max())
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-6


def test_auto_config_uses_public_quantities_only_and_degrades_to_bias_model():
    """The automatic configuration is a function of (n_users, n_items, eps, delta, bound, feedback):
    two datasets of the same shape get the same settings; a small, noisy regime gets factors = 0."""
    from privrec.tuning import auto_config

    R1 = _skewed_ratings(n_users=50, n_items=30, seed=1)
    R2 = _skewed_ratings(n_users=50, n_items=30, seed=2)
    m1 = DPALS(epsilon=1.0).fit(R1)
    m2 = DPALS(epsilon=1.0).fit(R2)
    assert m1.config_ == m2.config_
    assert m1.config_["factors"] == 0 and m1.item_factors_.shape == (30, 0)
    assert np.any(m1.item_bias_ != 0) and m1.user_bias_ is not None
    big = auto_config(500_000, 20_000, 20.0, 1e-6, 5.0)
    assert big["factors"] > 0 and auto_config(943, 1682, 1.0, 1e-5, 5.0)["factors"] == 0
    assert auto_config(1500, 15000, 1.0, 1e-3, 1.0, implicit=True)["factors"] == 0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), removed=st.integers(0, 29))
def test_bias_model_statistics_change_at_most_declared_sensitivity(seed, removed):
    """factors = 0: the item step's features are the public bias constant alone."""
    R = _skewed_ratings(n_users=30, n_items=15, seed=seed)
    model = DPALS(method="ada-dpals", epsilon=1.0, budget=4, factors=0, max_norm=0.4)
    cfg = model._resolve_config(R.shape)
    rng = np.random.default_rng(seed)
    counts = np.maximum(np.diff(R.tocsc().indptr) + rng.normal(0, 2, R.shape[1]), 1.0)
    labels = R.copy()
    labels.data = np.clip(labels.data - 3.0 - rng.normal(0, 1, labels.nnz), -cfg.label_bound, cfg.label_bound)
    W = model._allocate(cfg, labels, counts, rng)
    feats = np.full((R.shape[0], 1), cfg.bias_feature)
    keep = np.flatnonzero(np.arange(R.shape[0]) != removed)
    solver = model._make_solver(cfg, 1.0)
    gx = cfg.feature_norm
    assert gx == pytest.approx(cfg.bias_feature)
    G1, b1 = weighted_statistics(model.item_batch(cfg, labels, W, feats, counts, 30), gx, cfg.label_bound)
    G2, b2 = weighted_statistics(
        model.item_batch(cfg, labels[keep], W[keep], feats[keep], counts, 30), gx, cfg.label_bound
    )
    sens = solver.sensitivities()
    assert np.linalg.norm(G1 - G2) <= sens["gramian"] * (1 + 1e-9)
    assert np.linalg.norm(b1 - b2) <= sens["rhs"] * (1 + 1e-9)


def test_implicit_feedback_popularity_prior_is_released_counts():
    """Implicit feedback with factors = 0: the release is the noisy counts / n_users, one event."""
    R = _skewed_ratings(n_users=60, n_items=25, seed=3)
    R.data = R.data * 7.0  # play counts: binarised
    m = DPALS(epsilon=2.0, feedback="implicit", unobserved_weight=0.2, factors=0, random_state=0).fit(R)
    rep = m.privacy_report()
    assert [e["label"] for e in rep["events"]] == ["item counts"]
    assert rep["epsilon"] <= 2.0 and rep["epsilon"] >= 0.99 * 2.0
    ids, scores = m.recommend(0, R[0], N=5)
    assert np.all(np.diff(m.item_bias_[ids]) <= 0)  # ranked by the prior
    with pytest.raises(ValueError, match="center"):
        DPALS(feedback="implicit", center=True).fit(R)
    # with factors the prior is added to <u, v>; the fit still meets its budget
    m2 = DPALS(epsilon=2.0, feedback="implicit", unobserved_weight=0.2, factors=3, iterations=2, random_state=0).fit(R)
    assert m2.privacy_report()["epsilon"] <= 2.0 and m2.item_bias_.shape == (25,)


def test_generator_random_state_is_rejected_for_private_fits():
    from sklearn.base import clone

    R = _skewed_ratings(n_users=20, n_items=10, seed=4)
    m = DPALS(epsilon=2.0, random_state=np.random.default_rng(0))
    with pytest.raises(ValueError, match="clone"):
        clone(m).fit(R)


def test_rating_range_is_public_enforced_and_centres_the_mean():
    """A 2-10 scale: without a declared range the clip at rating_bound is announced; with it, the
    noisy mean lands near the data mean; data outside the declared range is an error."""
    rng = np.random.default_rng(0)
    R = sp.random(3000, 40, density=0.2, format="csr", random_state=1)
    R.data = np.round(rng.uniform(2, 10, R.nnz))
    with pytest.warns(UserWarning, match="rating_range"):
        DPALS(epsilon=5.0, factors=0).fit(R)
    # seeded noise (test only): with OS entropy a tail draw once missed 0.3 (0.356; typical 0.01-0.16)
    m = DPALS(epsilon=5.0, rating_range=(2, 10), factors=0, random_state=0).fit(R)
    assert abs(float(m.global_mean_) - R.data.mean()) < 0.3
    assert m.config_["label_bound"] == 4.0 and m.config_["rating_bound"] == 10.0
    with pytest.raises(ValueError, match="outside the declared rating_range"):
        DPALS(epsilon=5.0, rating_range=(1, 5)).fit(R)
    with pytest.raises(ValueError, match="rating_range"):
        DPALS(epsilon=5.0, rating_range=(5, 1)).fit(R)


def test_bias_model_refuses_item_similarity_with_a_reason():
    R = _skewed_ratings(n_users=40, n_items=20, seed=6)
    m = DPALS(epsilon=1.0).fit(R)  # tiny: the rule picks the bias model
    assert m.item_factors_.shape[1] == 0
    with pytest.raises(ValueError, match="no item factors"):
        m.similar_items(0)


def test_fit_timings_split_each_step_into_user_and_item_parts():
    model = DPALS(epsilon=3.0, factors=4, iterations=3, random_state=0).fit(_skewed_ratings(), show_progress=False)
    timings = model.fit_timings_
    assert len(timings["steps"]) == len(timings["user_steps"]) == 3
    for step, user in zip(timings["steps"], timings["user_steps"], strict=True):
        assert 0.0 <= user <= step  # the user step is part of its ALS step
    assert timings["preprocess"] >= 0.0 and timings["projection"] >= 0.0
