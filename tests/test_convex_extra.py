"""privrec.convex: losses (values against closed forms, input checks), and the federated package's
silos, availability, channels, non-smooth losses and algorithm argument checks."""

import math

import numpy as np
import pytest

from privrec.convex.federated import (
    AbsoluteLoss,
    Availability,
    FederatedDPClassifier,
    FederatedDPRegressor,
    HingeLoss,
    MoreauEnvelope,
    Silo,
    SiloChannel,
    SiloSet,
    accelerated_mb_sgd,
    federated_objective,
    ledger_report,
    local_sgd,
    mb_sgd,
    multistage_accelerated,
    report_epsilon,
)
from privrec.convex.federated.channel import ledger_epsilon
from privrec.convex.losses import (
    LogisticLoss,
    SoftmaxLoss,
    SquaredLoss,
    clip_gradients_l1,
    clipped_gradient_sum,
)
from privrec.privacy import PrivacyLedger, gaussian_event


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -0.5, 0.25][:d]) + 0.1 * rng.normal(size=n)
    return X, y


# ---------------------------------------------------------------------- losses


def test_squared_loss_matches_closed_forms_with_weights():
    X, y = _data()
    theta = np.array([0.3, 0.1, -0.2])
    loss = SquaredLoss(l2=0.5)
    w = np.linspace(0.5, 1.5, len(y))
    r = X @ theta - y
    per = loss.losses(theta, X, y)
    assert per.shape == (len(y),)
    assert loss.value(theta, X, y, sample_weight=w) == pytest.approx(
        np.dot(w, per) / w.sum() + 0.25 * theta @ theta, rel=1e-10
    )
    G = loss.per_example_gradients(theta, X, y)
    np.testing.assert_allclose(loss.gradient(theta, X, y, sample_weight=w), (w @ G) / w.sum() + 0.5 * theta)
    np.testing.assert_allclose(G, loss.derivative(X @ theta, y)[:, None] * X)
    assert np.allclose(G, r[:, None] * X) or np.allclose(G, 2 * r[:, None] * X)
    # no examples: the ridge term alone
    np.testing.assert_allclose(loss.gradient(theta, X[:0], y[:0]), 0.5 * theta)
    assert loss.value(theta, X[:0], y[:0]) == pytest.approx(0.25 * theta @ theta)


def test_loss_input_checks():
    X, y = _data()
    loss = SquaredLoss()
    theta = np.zeros(3)
    with pytest.raises(ValueError, match="must be a 2-D array"):
        loss.value(theta, X[0], y)
    with pytest.raises(ValueError, match=r"y must have shape \(40,\)"):
        loss.value(theta, X, y[:3])
    with pytest.raises(ValueError, match=r"theta must have shape \(3,\)"):
        loss.value(np.zeros(2), X, y)
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(40,\)"):
        loss.value(theta, X, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        loss.value(theta, X, y, sample_weight=-np.ones(40))
    with pytest.raises(ValueError, match="positive sum"):
        loss.value(theta, X, y, sample_weight=np.zeros(40))
    # integer features are accepted (as floats)
    assert np.isfinite(loss.value(theta, X.round().astype(int), y))


def test_softmax_loss_values_gradients_and_label_checks():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 3))
    y = rng.integers(0, 4, 20)
    theta = rng.normal(size=(3, 4)) * 0.1
    loss = SoftmaxLoss(4, l2=0.1)
    logits = X @ theta
    lse = np.log(np.exp(logits).sum(axis=1))
    np.testing.assert_allclose(loss.losses(theta, X, y), lse - logits[np.arange(20), y])
    w = rng.random(20)
    G = loss.per_example_gradients(theta, X, y)
    assert G.shape == (20, 3, 4)
    np.testing.assert_allclose(
        loss.gradient(theta, X, y, sample_weight=w), np.tensordot(w, G, axes=(0, 0)) / w.sum() + 0.1 * theta, atol=1e-12
    )
    np.testing.assert_allclose(loss.gradient(theta, X[:0], y[:0]), 0.1 * theta)
    np.testing.assert_allclose(loss.losses(theta, X, y.astype(float)), loss.losses(theta, X, y))  # integral floats
    # finite-difference check of one gradient entry
    eps = 1e-6
    t2 = theta.copy()
    t2[1, 2] += eps
    fd = (loss.value(t2, X, y) - loss.value(theta, X, y)) / eps
    assert loss.gradient(theta, X, y)[1, 2] == pytest.approx(fd, rel=1e-4, abs=1e-6)
    with pytest.raises(ValueError, match=r"theta must have shape \(3, 4\)"):
        loss.value(np.zeros((3, 3)), X, y)
    with pytest.raises(ValueError, match=r"y must have shape \(20,\)"):
        loss.value(theta, X, y[:4])
    with pytest.raises(ValueError, match="labels must be integers"):
        loss.value(theta, X, y + 0.5)
    with pytest.raises(ValueError, match=r"labels must be in 0\.\.3"):
        loss.value(theta, X, y + 4)
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2"):
        SoftmaxLoss(1)
    assert loss.smoothness(2.0) == pytest.approx(0.5 * 4 + 0.1)
    assert loss.lipschitz(2.0, 1.0) == pytest.approx(math.sqrt(2) * 2 + 0.1)
    assert loss.strong_convexity() == 0.1


def test_l1_clipping_and_clipped_sums():
    G = np.array([[3.0, -4.0], [0.1, 0.1]])
    C = clip_gradients_l1(G, 1.0)
    assert np.abs(C[0]).sum() <= 1.0 and np.abs(C[0]).sum() == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_array_equal(C[1], G[1])
    X, y = _data()
    theta = np.ones(3)
    loss = LogisticLoss()
    yb = (y > 0).astype(float)
    s1 = clipped_gradient_sum(loss, theta, X, yb, 0.5, norm="l1")
    assert np.abs(s1).sum() <= 0.5 * len(y) + 1e-9
    w = np.full(len(y), 2.0)
    np.testing.assert_allclose(
        clipped_gradient_sum(loss, theta, X, yb, 0.5, sample_weight=w),
        2 * clipped_gradient_sum(loss, theta, X, yb, 0.5),
    )
    with pytest.raises(ValueError, match="norm must be 'l2' or 'l1'"):
        clipped_gradient_sum(loss, theta, X, yb, 0.5, norm="linf")


# ---------------------------------------------------------------------- silos and availability


def test_silo_validation():
    X, y = _data(10)
    s = Silo(X, y, epsilon=2.0, name="a")
    assert s.n == 10 and s.n_features == 3 and s.private and s.delta == pytest.approx(0.01)
    assert not Silo(X, y).private
    assert Silo(X.round().astype(int), y).X.dtype == np.float64
    with pytest.raises(ValueError, match="a: X must be a 2-D array"):
        Silo(X[0], y, name="a")
    with pytest.raises(ValueError, match=r"y must have shape \(10,\)"):
        Silo(X, y[:3])
    with pytest.raises(ValueError, match="no data"):
        Silo(X[:0], y[:0])
    with pytest.raises(ValueError, match="delta must be given for a silo with a single record"):
        Silo(X[:1], y[:1])
    assert Silo(X[:1], y[:1], delta=1e-3).delta == 1e-3


def test_silo_sets():
    X, y = _data(30)
    groups = np.repeat(["b", "a", "c"], 10)
    fed = SiloSet.from_groups(X, y, groups, epsilon=[1.0, 2.0, math.inf])
    assert len(fed) == 3 and [s.name for s in fed] == ["silo a", "silo b", "silo c"]
    np.testing.assert_array_equal(fed.sizes, [10, 10, 10])
    assert fed[1].epsilon == 2.0 and fed.n_features == 3
    np.testing.assert_array_equal(fed[0].X, X[10:20])  # group "a" rows, in their original order
    with pytest.raises(ValueError, match="at least one silo"):
        SiloSet([])
    with pytest.raises(ValueError, match="must be a privrec Silo"):
        SiloSet([object()])
    with pytest.raises(ValueError, match="same number of features"):
        SiloSet([Silo(X, y), Silo(X[:, :2], y)])
    with pytest.raises(ValueError, match="2 feature arrays but 1 label arrays"):
        SiloSet.from_arrays([X, X], [y])
    with pytest.raises(ValueError, match=r"epsilon: expected one value per silo \(2\), got 3"):
        SiloSet.from_arrays([X, X], [y, y], epsilon=[1, 2, 3])
    with pytest.raises(ValueError, match="must align"):
        SiloSet.from_groups(X, y, groups[:5])
    named = SiloSet([Silo(X, y), Silo(X, y, name="mine")])
    assert [s.name for s in named] == ["silo 0", "mine"]


def test_availability():
    rng = np.random.default_rng(0)
    assert Availability(4).fixed and list(Availability(4).draw(rng)) == [0, 1, 2, 3]
    a = Availability(5, 2)
    drawn = a.draw(rng)
    assert len(drawn) == 2 and len(set(drawn.tolist())) == 2 and np.all(np.diff(drawn) > 0)
    r = Availability(5, (1, 3))
    assert not r.fixed and r.inverse_mean == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    sizes = {len(r.draw(rng)) for _ in range(50)}
    assert sizes <= {1, 2, 3} and len(sizes) > 1
    with pytest.raises(ValueError, match="lo <= hi"):
        Availability(5, (3, 1))
    with pytest.raises(ValueError, match="cannot exceed the number of silos"):
        Availability(2, 3)


# ---------------------------------------------------------------------- channels and reports


def test_channel_budget_and_one_pass_limits():
    X, y = _data(20)
    silo = Silo(X, y, epsilon=2.0, name="s")
    with pytest.raises(ValueError, match="a private silo needs a gradient clip norm"):
        SiloChannel(silo, SquaredLoss(), None, 4, 3)
    with pytest.raises(ValueError, match="one pass over 20 records allows at most 5 batches of 4"):
        SiloChannel(silo, SquaredLoss(), 1.0, 4, 6, sampling="disjoint")
    ch = SiloChannel(silo, SquaredLoss(), 1.0, 4, 2, sampling="disjoint", rng=0)
    theta = np.zeros(3)
    ch.gradient(theta)
    ch.count_message()
    with pytest.raises(ValueError, match="planned 2 messages; no budget for more"):
        ch.gradient(theta)
    rep = ch.close("test")
    assert rep["accountant"] == "rdp" and 0 < ch.epsilon() <= 2.0 + 1e-9
    assert report_epsilon(rep) == pytest.approx(ch.epsilon())


def test_channel_ledger_must_stay_within_its_calibrated_plan():
    """close() recomputes epsilon from the recorded events and refuses a drift from the calibration
    (here forged: the multiplier lowered after calibrating, as a bug in a caller would)."""
    X, y = _data(40)
    ch = SiloChannel(Silo(X, y, epsilon=1.0, name="s"), SquaredLoss(), 1.0, 4, 3, rng=0)
    ch.gradient(np.zeros(3))
    ch.noise_multiplier = ch.noise_multiplier / 4
    with pytest.raises(RuntimeError, match="above the 1 its noise was calibrated for"):
        ch.close("forged")


def test_non_private_channel_reports_infinite_epsilon():
    X, y = _data(20)
    ch = SiloChannel(Silo(X, y), SquaredLoss(), None, 5, 3, sampling="without_replacement", rng=0)
    g = ch.gradient(np.zeros(3))
    assert g.shape == (3,) and ch.noise_std == 0.0
    rep = ch.close("plain")
    assert math.isinf(ch.epsilon()) and math.isinf(report_epsilon(rep))


def test_ledger_epsilon_and_reports_for_both_accountants():
    ledger = PrivacyLedger(neighboring="replace_one")
    assert ledger_epsilon(ledger, 1e-5, "pld") == 0.0
    assert report_epsilon(ledger_report(ledger, 1e-5, "pld")) == 0.0
    ledger.record("m", gaussian_event(3.0))
    pld = ledger_epsilon(ledger, 1e-5, "pld")
    rdp = ledger_epsilon(ledger, 1e-5, "rdp")
    assert 0 < pld < math.inf and 0 < rdp < math.inf
    rep = ledger_report(ledger, 1e-5, "pld")
    assert rep["epsilon_rdp"] is None and report_epsilon(rep) == pytest.approx(pld, rel=1e-6)
    ledger.record("oops", gaussian_event(0.0))
    assert math.isinf(ledger_epsilon(ledger, 1e-5, "pld"))
    assert math.isinf(report_epsilon(ledger_report(ledger, 1e-5, "pld")))
    with pytest.raises(ValueError, match="accountant must be 'rdp' or 'pld'"):
        ledger_epsilon(ledger, 1e-5, "gdp")
    with pytest.raises(ValueError, match="replace-one only"):
        ledger_epsilon(PrivacyLedger(), 1e-5, "pld")
    bad = ledger_report(PrivacyLedger(neighboring="replace_one"), 1e-5, "rdp")
    bad.update(accountant="pld", neighboring="add_or_remove_one", events=rep["events"])
    with pytest.raises(ValueError, match="replace-one only"):
        report_epsilon(bad)


# ---------------------------------------------------------------------- non-smooth losses


def test_hinge_and_absolute_losses():
    X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    theta = np.array([0.5, 0.5])
    hinge = HingeLoss(l2=0.2)
    y01 = np.array([1, 0, 1])
    np.testing.assert_allclose(hinge.losses(theta, X, y01), [0.5, 2.0, 0.0])
    np.testing.assert_allclose(hinge.losses(theta, X, [1, -1, 1]), hinge.losses(theta, X, y01))
    assert hinge.value(theta, X, y01) == pytest.approx(2.5 / 3 + 0.1 * 0.5)
    np.testing.assert_allclose(hinge.per_example_gradients(theta, X, y01), [[-1, 0], [0, 2], [0, 0]])
    np.testing.assert_allclose(hinge.gradient(theta, X, y01), [-1 / 3, 2 / 3] + 0.2 * theta)
    assert hinge.lipschitz(3.0) == 3.0 and hinge.strong_convexity() == 0.2
    with pytest.raises(ValueError, match=r"labels must be in \{0, 1\} or \{-1, \+1\}"):
        hinge.losses(theta, X, [2, 0, 1])
    with pytest.raises(ValueError, match="X must be \\(n, d\\) and theta \\(d,\\)"):
        hinge.losses(np.zeros(3), X, y01)
    ab = AbsoluteLoss()
    np.testing.assert_allclose(ab.losses(theta, X, [0.0, 0.0, 2.0]), [0.5, 1.0, 1.0])
    assert ab.value(theta, X[:0], np.zeros(0)) == 0.0


def test_moreau_envelope_is_a_smooth_lower_bound():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = np.where(rng.random(30) < 0.5, 1.0, -1.0)
    theta = np.array([0.3, -0.2])
    base = HingeLoss()
    env = MoreauEnvelope(base, beta=4.0)
    f, fb = base.losses(theta, X, y), env.losses(theta, X, y)
    L2 = np.einsum("ij,ij->i", X, X)
    assert np.all(fb <= f + 1e-9) and np.all(f <= fb + L2 / (2 * 4.0) + 1e-9)  # Lemma D.7
    # gradient = numerical derivative of the envelope
    g = env.gradient(theta, X, y)
    eps = 1e-6
    for k in range(2):
        t = theta.copy()
        t[k] += eps
        assert g[k] == pytest.approx((env.value(t, X, y) - env.value(theta, X, y)) / eps, abs=1e-4)
    assert env.smoothness() == 4.0 and env.lipschitz(2.0) == 2.0 and env.strong_convexity() == 0.0
    assert env.value(theta, X[:0], y[:0]) == 0.0
    with pytest.raises(ValueError, match="needs a margin loss"):
        MoreauEnvelope(SquaredLoss(), beta=1.0)


# ---------------------------------------------------------------------- algorithm arguments


@pytest.fixture(scope="module")
def fed():
    X, y = _data(60)
    return SiloSet.from_groups(X, y, np.arange(60) % 3, epsilon=5.0)


@pytest.mark.parametrize(
    "call, needle",
    [
        (
            lambda f: mb_sgd(f, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, clip=1.0, noise="loud"),
            "noise must be one of",
        ),
        (
            lambda f: mb_sgd(f, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, clip=1.0, sampling="disjoint"),
            "mb_sgd sampling",
        ),
        (
            lambda f: mb_sgd(f, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, clip=1.0, averaging="best"),
            "averaging must be",
        ),
        (
            lambda f: mb_sgd(f, SquaredLoss(), rounds=2, batch_size=1.5, step_size=0.1, clip=1.0),
            "fractional batch_size",
        ),
        (
            lambda f: mb_sgd(f, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, clip=1.0, theta0=np.zeros(2)),
            "theta0 must have shape",
        ),
        (
            lambda f: mb_sgd(
                f, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, clip=1.0, n_available=Availability(4)
            ),
            "availability is for 4 silos",
        ),
        (
            lambda f: mb_sgd(f, SquaredLoss(), rounds=2, batch_size=5, step_size=0.1, clip=None),
            "needs a gradient clip norm",
        ),
        (
            lambda f: mb_sgd(
                f,
                SquaredLoss(),
                rounds=2,
                batch_size=5,
                step_size=0.1,
                clip=1.0,
                averaging="strongly_convex",
                strong_convexity=20.0,
                sampling="without_replacement",
            ),
            "0 < strong_convexity",
        ),
        (
            lambda f: accelerated_mb_sgd(f, SquaredLoss(), batch_size=5, smoothness=1.0, clip=1.0, mode="fast"),
            "mode must be",
        ),
        (lambda f: accelerated_mb_sgd(f, SquaredLoss(), batch_size=5, smoothness=1.0, clip=1.0), "rounds is required"),
        (
            lambda f: multistage_accelerated(
                f, SquaredLoss(), batch_size=5, smoothness=1.0, strong_convexity=0.1, gap=1.0, n_stages=2
            ),
            "variance is required",
        ),
    ],
)
def test_algorithm_argument_errors(fed, call, needle):
    with pytest.raises(ValueError, match=needle):
        call(fed)


def test_mb_sgd_variants_run_and_trace(fed):
    loss = SquaredLoss(l2=0.1)
    res = mb_sgd(
        fed,
        loss,
        rounds=4,
        batch_size=0.5,
        step_size=0.1,
        clip=2.0,
        averaging="strongly_convex",
        strong_convexity=0.5,
        random_state=0,
        sampling="without_replacement",
        trace=True,
    )
    assert [r for r, _ in res.history] == [1, 2, 3, 4] and res.info["batch_sizes"] == [10, 10, 10]
    assert all(0 < e <= 5.0 + 1e-9 for e in res.epsilons)
    assert res.history[-1][1] == pytest.approx(federated_objective(loss, res.coef, fed))
    last = mb_sgd(
        fed,
        loss,
        rounds=3,
        batch_size=5,
        step_size=lambda r: 0.1 / (r + 1),
        clip=2.0,
        averaging="last",
        noise="paper",
        random_state=0,
        sampling="without_replacement",
    )
    assert last.coef.shape == (3,) and all(m == 3 for m in last.info["messages"])
    loc = local_sgd(
        fed,
        loss,
        rounds=2,
        local_steps=2,
        step_size=0.1,
        clip=2.0,
        noise="paper",
        random_state=0,
        sampling="without_replacement",
        trace=True,
    )
    assert len(loc.history) == 2 and all(m == 4 for m in loc.info["messages"])
    acc = accelerated_mb_sgd(
        fed,
        loss,
        batch_size=5,
        smoothness=2.0,
        clip=2.0,
        rounds=3,
        prox_center_l2=0.1,
        random_state=0,
        sampling="without_replacement",
        trace=True,
    )
    assert len(acc.history) == 3 and np.all(np.isfinite(acc.coef))


def test_federated_estimators_errors_and_probabilities():
    X, y = _data(60)
    groups = np.arange(60) % 3
    reg = FederatedDPRegressor(epsilon=math.inf, rounds=5, batch_size=10, step_size=0.2, clip=5.0, random_state=0)
    with pytest.raises(ValueError, match="silos .* is required"):
        reg.fit(X, y)
    with pytest.raises(ValueError, match="X must be 2-D"):
        reg.fit(X[0], y, silos=groups)
    reg.fit(X, y, silos=groups)
    with pytest.raises(ValueError, match=r"X must have shape \(n, 3\)"):
        reg.predict(X[:, :2])
    clf = FederatedDPClassifier(
        epsilon=5.0, rounds=3, batch_size=10, step_size=0.5, clip=2.0, random_state=0, sampling="without_replacement"
    )
    with pytest.raises(ValueError, match="at least two classes"):
        clf.fit(X, np.zeros(60), silos=groups)
    clf.fit(X, (y > 0).astype(int), silos=groups)
    P = clf.predict_proba(X)
    assert P.shape == (60, 2) and np.allclose(P.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[(P[:, 1] > 0.5).astype(int)])
    nofit = FederatedDPRegressor(
        epsilon=math.inf,
        rounds=2,
        batch_size=10,
        step_size=0.1,
        clip=5.0,
        fit_intercept=False,
        random_state=0,
        algorithm="local_sgd",
        local_steps=2,
    )
    nofit.fit(X, y, silos=groups)
    assert nofit.intercept_ == 0.0 and nofit.coef_.shape == (3,)
    acc = FederatedDPRegressor(epsilon=5.0, rounds=2, batch_size=10, clip=5.0, algorithm="accelerated", random_state=0)
    with pytest.raises(ValueError, match="needs a public feature_bound"):
        acc.fit(X, y, silos=groups)
