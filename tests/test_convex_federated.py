"""ISRL-DP federated layer (spec 002): closed forms, reductions, per-silo accounting, bad input."""

import logging
import math

import numpy as np
import pytest

from privrec.convex.federated import (
    Availability,
    Silo,
    SiloChannel,
    SiloSet,
    accelerated_mb_sgd,
    federated_objective,
    local_sgd,
    mb_sgd,
    md_weights,
    multistage_accelerated,
    multistage_schedule,
    paper_local_sgd_sigma2,
    paper_min_batch,
    paper_moments_batch,
    paper_moments_sigma2,
    paper_one_pass_sigma2,
    paper_theory_sigma2,
    project_ball,
    report_epsilon,
)
from privrec.convex.losses import LogisticLoss, SoftmaxLoss, SquaredLoss

logging.getLogger("absl").setLevel(logging.ERROR)  # dp_accounting's per-order convergence chatter


def _linear_silos(rng, n=(120, 80, 100), d=4, eps=(1.0, 2.0, 0.5), noise=0.1):
    w = rng.standard_normal(d)
    Xs = [rng.standard_normal((k, d)) / math.sqrt(d) for k in n]
    ys = [X @ w + noise * rng.standard_normal(len(X)) for X in Xs]
    return SiloSet.from_arrays(Xs, ys, epsilon=list(eps)), w


# ---------------------------------------------------------------- spec 002 unit facts 1-3
def test_fact1_theory_sigma_and_min_batch():
    assert paper_theory_sigma2(1.0, 1000, 100, 1.0, 1e-6) == pytest.approx(7.18217, rel=1e-5)
    assert paper_min_batch(1000, 100, 1.0, 1e-6) == pytest.approx(4.641, abs=5e-4)


def test_fact2_one_pass_sigma_independent_of_rounds():
    assert paper_one_pass_sigma2(1.0, 50, 1.0, 1e-6) == pytest.approx(0.179695, rel=1e-5)


def test_fact3_mnist_moments_calibration():
    n = 1238
    assert paper_moments_sigma2(1.0, n, 35, 1.5, 1.0 / n**2) == pytest.approx(1.15643e-3, rel=1e-4)
    assert paper_moments_batch(n, 35, 1.5) == pytest.approx(128.1, abs=0.05)
    assert paper_local_sgd_sigma2(2.0, n, 35, 7, 1.5, 1.0 / n**2) == pytest.approx(
        7 * paper_moments_sigma2(2.0, n, 35, 1.5, 1.0 / n**2)
    )


# ---------------------------------------------------------------- reductions (facts 4-6)
def test_fact4_nonprivate_full_batch_all_silos_is_projected_gd():
    rng = np.random.default_rng(0)
    silos, _ = _linear_silos(rng)
    loss = SquaredLoss(l2=0.01)
    res = mb_sgd(
        silos,
        loss,
        rounds=15,
        batch_size=10**6,
        step_size=0.3,
        radius=0.7,
        private=False,
        averaging="last",
        random_state=0,
    )
    th = np.zeros(4)
    for _ in range(15):
        g = np.mean([loss.gradient(th, s.X, s.y) for s in silos], axis=0)
        th = project_ball(th - 0.3 * g, 0.7)
    np.testing.assert_allclose(res.coef, th, atol=1e-12)
    assert all(math.isinf(e) for e in res.epsilons)  # non-private is reported as such


def test_fact5_averaged_noise_is_gaussian_with_variance_sigma2_over_m():
    # zero features -> zero gradients: the averaged message is pure noise N(0, sigma^2 / M)
    rng = np.random.default_rng(1)
    d, N, M = 4000, 6, 3
    silos = SiloSet.from_arrays([np.zeros((50, d))] * N, [np.zeros(50)] * N, epsilon=1.0)
    res = mb_sgd(
        silos,
        SquaredLoss(),
        rounds=1,
        batch_size=10,
        step_size=1.0,
        clip=1.0,
        n_available=M,
        averaging="last",
        random_state=rng,
    )
    sigma = res.info["noise_std"][0]
    assert sigma > 0
    g = -res.coef
    assert abs(g.var() / (sigma**2 / M) - 1) < 0.1
    assert sum(m > 0 for m in res.info["messages"]) == M


def test_fact6_md_weights_and_alpha1_mu0_is_gd_with_step_one_over_eta():
    for a, e, mu in [(0.3, 2.0, 0.5), (1.0, 1.0, 0.0), (2 / 3, 7.0, 3.0)]:
        assert sum(md_weights(a, e, mu)) == pytest.approx(1.0)
    rng = np.random.default_rng(2)
    silos, _ = _linear_silos(rng)
    loss = SquaredLoss()
    res = accelerated_mb_sgd(
        silos,
        loss,
        batch_size=10**6,
        smoothness=1.0,
        rounds=12,
        private=False,
        alpha=lambda r: 1.0,
        eta=lambda r: 4.0,
        radius=0.8,
        random_state=0,
    )
    th = np.zeros(4)
    for _ in range(12):
        th = project_ball(th - 0.25 * np.mean([loss.gradient(th, s.X, s.y) for s in silos], axis=0), 0.8)
    np.testing.assert_allclose(res.coef, th, atol=1e-12)


def test_accelerated_nonprivate_beats_plain_gd_on_ill_conditioned_quadratic():
    rng = np.random.default_rng(3)
    d = 6
    X = rng.standard_normal((200, d)) * np.logspace(0, -1.5, d)
    y = X @ rng.standard_normal(d)
    silos = SiloSet.from_arrays([X[:100], X[100:]], [y[:100], y[100:]])
    loss = SquaredLoss()
    beta = float(np.linalg.eigvalsh(X.T @ X / 200).max()) * 1.05
    acc = accelerated_mb_sgd(silos, loss, batch_size=10**6, smoothness=beta, rounds=40, private=False, random_state=0)
    gd = mb_sgd(
        silos, loss, rounds=40, batch_size=10**6, step_size=1 / beta, private=False, averaging="last", random_state=0
    )
    f_star = federated_objective(loss, np.linalg.lstsq(X, y, rcond=None)[0], silos)
    assert federated_objective(loss, acc.coef, silos) - f_star < 0.5 * (
        federated_objective(loss, gd.coef, silos) - f_star
    )


# ---------------------------------------------------------------- per-silo accounting
def _check_reports(res, silos):
    for rep, eps, s in zip(res.reports, res.epsilons, silos):
        assert report_epsilon(rep) == pytest.approx(eps, rel=1e-9)
        assert eps <= s.epsilon * (1 + 1e-12)
        assert rep["delta"] == s.delta
        assert rep["neighboring"] == "replace_one"  # ISRL-DP (spec 002): one record replaced
        assert rep["accountant"] in ("rdp", "pld")


@pytest.mark.parametrize("algo", ["mb_sgd", "mb_sgd_paper", "local_sgd", "acc_erm", "acc_one_pass", "multistage"])
def test_every_silo_epsilon_recomputes_and_stays_within_budget(algo):
    rng = np.random.default_rng(4)
    silos, w = _linear_silos(rng)
    loss = SquaredLoss()
    kw = dict(clip=2.0, random_state=5, n_available=(1, 3))
    if algo == "mb_sgd":
        res = mb_sgd(silos, loss, rounds=12, batch_size=20, step_size=0.5, **kw)
    elif algo == "mb_sgd_paper":
        res = mb_sgd(silos, loss, rounds=12, batch_size=20, step_size=0.5, noise="paper", **kw)
    elif algo == "local_sgd":  # 4 rounds x 3 local steps = 12 noisy releases per silo
        res = local_sgd(silos, loss, rounds=4, local_steps=3, local_batch=20, step_size=0.2, **kw)
    elif algo == "acc_erm":
        res = accelerated_mb_sgd(silos, loss, batch_size=20, smoothness=2.0, rounds=12, **kw)
    elif algo == "acc_one_pass":
        res = accelerated_mb_sgd(silos, loss, batch_size=10, smoothness=2.0, mode="one_pass", noise="paper", **kw)
        assert res.info["rounds"] == 8  # min_i floor(n_i / K)
    else:
        res = multistage_accelerated(
            silos,
            loss,
            batch_size=20,
            smoothness=2.0,
            strong_convexity=0.1,
            gap=1.0,
            n_stages=2,
            max_rounds_per_stage=6,
            **kw,
        )
    _check_reports(res, silos)
    assert all(e > 0 for e in res.epsilons)
    assert np.all(np.isfinite(res.coef))


def test_paper_noise_is_never_below_the_accountant():
    rng = np.random.default_rng(6)
    silos, _ = _linear_silos(rng)
    a = mb_sgd(silos, SquaredLoss(), rounds=12, batch_size=20, step_size=0.1, clip=1.0, random_state=0)
    p = mb_sgd(silos, SquaredLoss(), rounds=12, batch_size=20, step_size=0.1, clip=1.0, noise="paper", random_state=0)
    assert all(np.array(p.info["noise_std"]) >= np.array(a.info["noise_std"]) - 1e-12)
    for s, _K, sd in zip(silos, [20, 20, 20], p.info["noise_std"]):
        assert sd >= math.sqrt(paper_moments_sigma2(1.0, s.n, 12, s.epsilon, s.delta)) - 1e-12


def test_replace_one_sampling_records_replace_one_ledger():
    rng = np.random.default_rng(7)
    silos, _ = _linear_silos(rng, n=(60, 60), eps=(2.0, 2.0))
    res = mb_sgd(
        silos,
        SquaredLoss(),
        rounds=2,
        batch_size=10,
        step_size=0.1,
        clip=1.0,
        sampling="without_replacement",
        random_state=0,
    )
    assert all(r["neighboring"] == "replace_one" for r in res.reports)
    _check_reports(res, silos)


def test_removing_one_record_moves_clipped_sum_by_at_most_clip():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((30, 3)) * 10
    y = rng.standard_normal(30) * 10
    clip = 0.7
    ch = SiloChannel(Silo(X, y, math.inf, 1e-3), SquaredLoss(), clip, 30, 1)
    theta = rng.standard_normal(3)
    full = ch.clipped_mean(theta, np.arange(30)) * 30
    for i in range(30):
        part = ch.clipped_mean(theta, np.delete(np.arange(30), i)) * 29  # non-private: mean over the batch
        assert np.linalg.norm(full - part) <= clip + 1e-9


def test_private_mb_sgd_learns_and_classification_losses_run():
    rng = np.random.default_rng(9)
    d = 5
    w = rng.standard_normal(d)
    Xs = [rng.standard_normal((600, d)) / math.sqrt(d) for _ in range(4)]
    ys = [(X @ w > 0).astype(float) for X in Xs]
    silos = SiloSet.from_arrays(Xs, ys, epsilon=4.0)
    res = mb_sgd(silos, LogisticLoss(), rounds=40, batch_size=60, step_size=1.0, clip=1.0, random_state=0)
    acc = np.mean([np.mean((X @ res.coef > 0) == (yy > 0.5)) for X, yy in zip(Xs, ys)])
    assert acc > 0.85
    ys3 = [np.digitize(X @ w, [-0.5, 0.5]) for X in Xs]
    silos3 = SiloSet.from_arrays(Xs, ys3, epsilon=4.0)
    res3 = mb_sgd(silos3, SoftmaxLoss(3), rounds=40, batch_size=60, step_size=1.0, clip=1.0, random_state=0)
    assert res3.coef.shape == (d, 3)
    _check_reports(res3, silos3)


def test_multistage_schedule_formula():
    plan = multistage_schedule(smoothness=2.0, strong_convexity=0.5, variance=0.0, gap=1.0, n_stages=3)
    assert all(math.ceil(4 * math.sqrt(8.0)) == R and v == 4.0 for R, v in plan)
    plan = multistage_schedule(2.0, 0.5, 1.0, 1.0, 2)
    assert plan[0][0] == math.ceil(128 / (3 * 0.5 * 0.25)) and plan[1][0] == math.ceil(128 / (3 * 0.5 * 0.125))


# ---------------------------------------------------------------- bad input
def test_bad_input_errors():
    X = np.ones((5, 3))
    with pytest.raises(ValueError, match="no data"):
        Silo(np.zeros((0, 3)), np.zeros(0), 1.0, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        Silo(X, np.ones(5), 0.0)
    with pytest.raises(ValueError, match="epsilon"):
        Silo(X, np.ones(5), -1.0)
    with pytest.raises(ValueError, match="same number of features"):
        SiloSet([Silo(X, np.ones(5), 1.0), Silo(np.ones((5, 4)), np.ones(5), 1.0)])
    with pytest.raises(ValueError, match="cannot exceed"):
        Availability(3, 4)
    silos = SiloSet.from_arrays([X, X], [np.ones(5)] * 2, epsilon=1.0)
    with pytest.raises(ValueError, match="cannot exceed"):
        mb_sgd(silos, SquaredLoss(), rounds=2, batch_size=2, step_size=0.1, clip=1.0, n_available=3)
    with pytest.raises(ValueError, match="clip"):
        mb_sgd(silos, SquaredLoss(), rounds=2, batch_size=2, step_size=0.1)
    with pytest.raises(ValueError, match="at least one silo"):
        SiloSet([])
    with pytest.raises(ValueError, match="one pass allows"):
        accelerated_mb_sgd(silos, SquaredLoss(), batch_size=3, smoothness=1.0, rounds=5, mode="one_pass", clip=1.0)
    with pytest.raises(ValueError, match="NaN"):
        Silo(np.full((3, 2), np.nan), np.ones(3), 1.0)


# ---------------------------------------------------------------- estimators
def test_estimators_end_to_end_with_per_silo_reports():
    from privrec.convex.federated import FederatedDPClassifier, FederatedDPRegressor

    rng = np.random.default_rng(10)
    n, d = 1200, 3
    X = rng.standard_normal((n, d))
    w = np.array([1.0, -0.5, 0.25])
    y = X @ w + 0.5 + 0.05 * rng.standard_normal(n)
    silo = np.arange(n) % 3  # equal silo sizes: one accountant calibration serves every fit below
    reg = FederatedDPRegressor(
        algorithm="mb_sgd",
        epsilon=3.0,
        rounds=12,
        batch_size=40,
        step_size=0.3,
        clip=4.0,
        feature_bound=4.0,
        random_state=0,
    ).fit(X, y, silos=silo)
    assert reg.coef_.shape == (d,) and reg.score(X, y) > 0.85
    acc = FederatedDPRegressor(
        algorithm="accelerated", epsilon=3.0, rounds=12, batch_size=40, clip=4.0, feature_bound=4.0, random_state=0
    ).fit(X, y, silos=silo)
    assert acc.score(X, y) > 0.5 and max(acc.epsilons_) <= 3.0
    assert len(reg.privacy_reports_) == 3
    for rep, e in zip(reg.privacy_reports_, reg.epsilons_):
        assert report_epsilon(rep) == pytest.approx(e) and e <= 3.0
        assert rep["neighboring"] == "replace_one"
    nonpriv = FederatedDPRegressor(algorithm="mb_sgd_nonprivate", rounds=40, batch_size=0.5, step_size=0.5).fit(
        X, y, silos=silo
    )
    assert nonpriv.score(X, y) > 0.95 and all(math.isinf(e) for e in nonpriv.epsilons_)
    labels = np.array(["a", "b", "c"])[np.digitize(X @ w, [-0.7, 0.7])]
    clf = FederatedDPClassifier(epsilon=3.0, rounds=12, batch_size=40, step_size=2.0, clip=2.0, random_state=0).fit(
        X, labels, silos=silo
    )
    assert set(clf.predict(X)) <= {"a", "b", "c"} and clf.score(X, labels) > 0.6
    np.testing.assert_allclose(clf.predict_proba(X[:5]).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="silos"):
        FederatedDPRegressor().fit(X, y)
    with pytest.raises(ValueError, match="algorithm"):
        FederatedDPRegressor(algorithm="nope").fit(X, y, silos=silo)
    with pytest.raises(ValueError, match="shape"):
        reg.predict(X[:, :2])


# ---------------------------------------------------------------- sensitivity of the private message path
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(2, 25),
    clip=st.floats(0.05, 5.0),
    scale=st.floats(0.1, 100.0),
    sampling=st.sampled_from(["poisson", "without_replacement"]),
)
def test_private_message_moves_by_at_most_declared_sensitivity(seed, n, clip, scale, sampling):
    # Same noise (same seed) on neighbouring batches (one record replaced by another, the ISRL-DP
    # relation): the released sums differ by the difference of clipped sums, at most 2 clip. That
    # is the declared sensitivity of the RDP scheme; Poisson's PLD REPLACE_ONE convention declares
    # the per-record bound clip and places the two records at +-clip (distance 2 clip).
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3)) * scale
    y = rng.standard_normal(n) * scale
    silo = Silo(X, y, 1.0, 1e-4)
    theta = rng.standard_normal(3)
    idx = np.arange(n)
    a = SiloChannel(silo, SquaredLoss(), clip, n, 1, sampling, rng=np.random.default_rng(seed))
    b = SiloChannel(silo, SquaredLoss(), clip, n, 1, sampling, rng=np.random.default_rng(seed))
    K = a.batch_size
    other = idx.copy()
    other[seed % n] = (seed + 1) % n
    bound = 2 * clip
    assert a.sensitivity * (2 if sampling == "poisson" else 1) == bound
    assert a.ledger.neighboring == "replace_one"
    diff = (a.clipped_mean(theta, idx) - b.clipped_mean(theta, other)) * K
    assert np.linalg.norm(diff) <= bound * (1 + 1e-9) + 1e-9
    if sampling == "poisson":  # removing a record (the other half of a replacement) moves it by <= clip
        part = (a.clipped_mean(theta, idx) - b.clipped_mean(theta, np.delete(idx, seed % n))) * K
        assert np.linalg.norm(part) <= clip * (1 + 1e-9) + 1e-9
