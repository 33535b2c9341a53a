"""Joint DP across data owners (spec 000): unit facts, reductions, accounting, end to end."""

import math

import numpy as np
import pytest

from privrec.convex.joint import (
    JointDPSGD,
    PersonalBiasLinear,
    PersonalBiasSoftmax,
    group_privacy,
    paper_noise_std,
    user_level_budget,
)
from privrec.privacy import epsilon_from_report


def _owners_data(rng, n_owners=6, m=30, d=4, k=3):
    X = rng.standard_normal((n_owners * m, d)).astype(np.float32)
    W = rng.standard_normal((d, k))
    owner = np.repeat(np.arange(n_owners), m)
    bias = rng.standard_normal((n_owners, k)) * 2
    y = np.argmax(X @ W + bias[owner], axis=1)
    return X, y, owner


def test_spec_fact4_paper_sigma():
    assert paper_noise_std(1.0, 100, 1.0, 1e-5, 10, 10) == pytest.approx(0.3393070, abs=5e-8)
    assert paper_noise_std(1.0, 100**2, 1.0, 1e-5, 10, 10) == pytest.approx(3.393070, abs=5e-7)


def test_spec_fact5_group_privacy_and_user_level():
    eps, delta = group_privacy(0.5, 1e-6, 4)
    assert eps == pytest.approx(2.0) and delta == pytest.approx(4 * math.exp(2.0) * 1e-6)
    e1, d1 = user_level_budget(2.0, 1e-5, records_per_user=5, records_per_owner=20)
    assert e1 == pytest.approx(0.5) and d1 == pytest.approx(1e-5 * 5 / (20 * math.exp(2.0)))
    # group privacy with k = m/r maps the record-level budget back to at most the user-level one
    ge, gd = group_privacy(e1, d1, 4)
    assert ge == pytest.approx(2.0) and gd <= 1e-5
    with pytest.raises(ValueError):
        user_level_budget(1.0, 1e-5, 30, 20)


def test_noise_free_single_record_is_plain_projected_sgd():
    """Fact 1: sigma = 0, one owner, one record -> exactly projected (S)GD on (x, u)."""
    model = PersonalBiasLinear(3)
    X = np.array([[1.0, -2.0, 0.5]])
    y = np.array([3.0])
    eta, L, rad = 0.05, 2.0, 0.8
    est = JointDPSGD(model, regime="nonprivate", n_steps=25, clip_norm=L, personal_radius=rad, shared_radius=rad,
                     learning_rate=eta, average=False, random_state=0).fit(X, y, np.array(["a"]))
    w, b = np.zeros(3), np.zeros(1)
    for _ in range(25):
        r = X[0] @ w + b[0] - y[0]
        g = np.concatenate([[r], r * X[0]])
        g *= min(1.0, L / np.linalg.norm(g))
        b = b - eta * g[:1]
        w = w - eta * g[1:]
        b *= min(1.0, rad / np.linalg.norm(b)) if np.linalg.norm(b) > 0 else 1.0
        w *= min(1.0, rad / np.linalg.norm(w))
    np.testing.assert_allclose(est.shared_, w, rtol=1e-12)
    np.testing.assert_allclose(est.personal_[0], b, rtol=1e-12)


def test_only_selected_owner_moves_and_noise_support():
    """Fact 2 and 3: only x_{j_t} changes; noise on u only (joint) or everywhere (full), variance p sigma^2."""
    rng = np.random.default_rng(0)
    X, y, owner = _owners_data(rng)
    X = X.astype(np.float64)
    model = PersonalBiasSoftmax(4, 3)
    eta, z, L = 0.1, 0.7, 1.0
    kw = dict(n_steps=1, clip_norm=L, learning_rate=eta, average=False)
    sq = {"joint": [], "full": []}
    for seed in range(150):
        base = JointDPSGD(model, regime="nonprivate", random_state=seed, **kw).fit(X, y, owner)
        moved = np.flatnonzero(np.any(base.personal_ != 0, axis=1))
        assert moved.size <= 1
        # the clipped gradient bounds the noise-free update: ||(dx, du)|| <= eta * L
        step = math.sqrt(np.sum(base.shared_**2) + np.sum(base.personal_**2))
        assert step <= eta * L + 1e-12
        for regime in ("joint", "full"):
            est = JointDPSGD(model, regime=regime, noise_multiplier=z, random_state=seed, **kw).fit(X, y, owner)
            dP = est.personal_ - base.personal_
            dU = est.shared_ - base.shared_
            if regime == "joint":
                assert np.all(dP == 0)
            sq[regime].append((np.sum(dU**2) + np.sum(dP**2)) / eta**2)
    sigma = 2 * L * z
    p_joint = 4 * 3
    p_full = p_joint + 6 * 3
    assert np.mean(sq["joint"]) == pytest.approx(p_joint * sigma**2, rel=0.15)
    assert np.mean(sq["full"]) == pytest.approx(p_full * sigma**2, rel=0.15)


def test_replacing_one_owners_data_moves_shared_update_by_at_most_2L():
    rng = np.random.default_rng(1)
    X, y, owner = _owners_data(rng, n_owners=3, m=5)
    X = X.astype(np.float64) * 10  # large gradients, so clipping binds
    X2 = X.copy()
    X2[owner == 1] = rng.standard_normal((5, 4)) * 50
    model = PersonalBiasSoftmax(4, 3)
    for k in (1, 4):
        kw = dict(regime="nonprivate", n_steps=1, owners_per_step=3, records_per_owner=k, clip_norm=0.5,
                  learning_rate=1.0, average=False)
        for seed in range(20):
            a = JointDPSGD(model, random_state=seed, **kw).fit(X, y, owner)
            b = JointDPSGD(model, random_state=seed, **kw).fit(X2, y, owner)
            # update = -(eta/B) sum over owners of the mean of k clipped gradients: <= 2 L eta / B apart
            assert np.linalg.norm(a.shared_ - b.shared_) <= 2 * 0.5 / 3 + 1e-12
            # owners 0 and 2 are untouched by the replacement
            np.testing.assert_array_equal(a.personal_[[0, 2]], b.personal_[[0, 2]])


@pytest.mark.parametrize("regime", ["joint", "full"])
def test_epsilon_from_accountant_and_recomputes(regime):
    rng = np.random.default_rng(2)
    X, y, owner = _owners_data(rng)
    est = JointDPSGD(PersonalBiasSoftmax(4, 3), regime=regime, epsilon=2.0, delta=1e-5, n_steps=400,
                     owners_per_step=2, random_state=0).fit(X, y, owner)
    rep = est.privacy_report()
    assert rep["neighboring"] == "replace_one"
    assert 2.0 * 0.99 <= rep["epsilon"] <= 2.0
    assert epsilon_from_report(rep) == pytest.approx(rep["epsilon"], rel=1e-9)
    assert est.info_.noise_std == pytest.approx(2 * est.clip_ * est.info_.noise_multiplier)
    # more noise for fewer owners sampled per step? no: more owners per step -> weaker amplification
    est2 = JointDPSGD(PersonalBiasSoftmax(4, 3), regime=regime, epsilon=2.0, delta=1e-5, n_steps=400,
                      owners_per_step=6, random_state=0).fit(X, y, owner)
    assert est2.info_.noise_multiplier > est.info_.noise_multiplier


def test_end_to_end_regimes_learn_on_generated_data():
    rng = np.random.default_rng(3)
    X, y, owner = _owners_data(rng, n_owners=8, m=60)
    accs = {}
    for regime in ("nonprivate", "individual", "joint"):
        est = JointDPSGD(PersonalBiasSoftmax(4, 3), regime=regime, epsilon=50.0, n_steps=3000, clip_norm=5.0,
                         shared_radius=20.0, personal_radius=20.0, random_state=0)
        accs[regime] = est.fit(X, y, owner).score(X, y, owner)
    assert accs["nonprivate"] > 0.8
    assert accs["individual"] > 0.6
    assert accs["joint"] > 0.6
    rep = JointDPSGD(PersonalBiasSoftmax(4, 3), regime="individual", n_steps=5).fit(X, y, owner).privacy_report()
    assert rep["epsilon"] == "inf" and rep["events"] == []


def test_bad_input():
    model = PersonalBiasSoftmax(2, 3)
    X, y, o = np.zeros((4, 2)), np.array([0, 1, 2, 0]), np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="regime"):
        JointDPSGD(model, regime="partial")
    with pytest.raises(ValueError, match="labels"):
        JointDPSGD(model, regime="nonprivate").fit(X, np.array([0, 1, 5, 0]), o)
    with pytest.raises(ValueError, match="shape"):
        JointDPSGD(model, regime="nonprivate").fit(np.zeros((4, 3)), y, o)
    with pytest.raises(ValueError, match="owners_per_step"):
        JointDPSGD(model, regime="joint", owners_per_step=3).fit(X, y, o)
    with pytest.raises(ValueError, match="epsilon"):
        JointDPSGD(model, regime="joint", epsilon=-1).fit(X, y, o)
    with pytest.raises(ValueError, match="learning_rate"):
        JointDPSGD(model, regime="nonprivate", learning_rate="fast").fit(X, y, o)
    est = JointDPSGD(model, regime="nonprivate", n_steps=3).fit(X, y, o)
    with pytest.raises(ValueError, match="not seen"):
        est.predict(X, np.array([0, 0, 1, 7]))
