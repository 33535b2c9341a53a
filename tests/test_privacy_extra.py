"""privrec.privacy: ledger serialisation and accountants, clipping / ball projection, random
states, calibration edge cases, mechanisms and the empirical audit's input checks."""

import math

import dp_accounting
import numpy as np
import pytest

from privrec.privacy import (
    PrivacyLedger,
    audit,
    calibrate_noise_multiplier,
    clip_labels,
    clip_rows,
    clip_vector,
    default_count_fraction,
    gaussian_event,
    make_rng,
)
from privrec.privacy.calibration import gaussian_rho
from privrec.privacy.clipping import project_ball
from privrec.privacy.ledger import epsilon_from_report, epsilon_of_event, event_from_dict, event_to_dict
from privrec.privacy.mechanisms import (
    Release,
    add_symmetric_gaussian_noise,
    fixed_size_subsampled_gaussian_event,
    gaussian_mechanism,
    laplace_event,
    laplace_mechanism,
    poisson_subsampled_gaussian_event,
    symmetric_gaussian_noise,
)

# ---------------------------------------------------------------------- ledger


@pytest.mark.parametrize(
    "event",
    [
        dp_accounting.SingleEpochTreeAggregationDpEvent(2.0, 8),
        dp_accounting.SingleEpochTreeAggregationDpEvent(2.0, [4, 4]),
        dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.5)),
        dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(1.5)),
        dp_accounting.ComposedDpEvent([dp_accounting.LaplaceDpEvent(2.0), dp_accounting.NoOpDpEvent()]),
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0), 4),
        dp_accounting.NonPrivateDpEvent(),
    ],
)
def test_events_round_trip_through_json(event):
    d = event_to_dict(event)
    assert event_from_dict(d) == event


def test_unknown_events_are_rejected_both_ways():
    class Odd(dp_accounting.DpEvent):
        pass

    with pytest.raises(TypeError, match="cannot serialise DpEvent of type Odd"):
        event_to_dict(Odd())
    with pytest.raises(TypeError, match="expected a dp_accounting DpEvent"):
        PrivacyLedger().record("x", "not an event")
    with pytest.raises(TypeError, match="cannot serialise"):
        PrivacyLedger().record("x", Odd())
    with pytest.raises(ValueError, match="unknown DpEvent type in report: 'mystery'"):
        event_from_dict({"type": "mystery"})


def test_ledger_extend_report_and_recompute():
    a = PrivacyLedger()
    a.record("counts", gaussian_event(5.0), sensitivity=1.0)
    b = PrivacyLedger()
    b.record("step", gaussian_event(2.0))
    b.record("step", gaussian_event(2.0))
    a.extend(b, prefix="ALS 1: ")
    assert len(a) == 3 and [e.label for e in a.entries] == ["counts", "ALS 1: step", "ALS 1: step"]
    assert a.entries[1].meta == {} and a.entries[0].meta == {"sensitivity": 1.0}
    rep = a.report(1e-6, accountant="rdp")
    assert rep["epsilon"] == rep["epsilon_rdp"] and rep["accountant"] == "rdp"
    assert rep["epsilon_pld"] <= rep["epsilon_rdp"] + 1e-9  # PLD is the tighter accountant
    assert epsilon_from_report(rep) == pytest.approx(rep["epsilon_rdp"])
    assert epsilon_from_report(rep, "pld") == pytest.approx(rep["epsilon_pld"], rel=1e-6)
    again = PrivacyLedger.from_report(rep)
    assert again.epsilon(1e-6) == pytest.approx(a.epsilon(1e-6))
    with pytest.raises(ValueError, match="accountant must be 'rdp' or 'pld'"):
        a.report(1e-6, accountant="gdp")
    with pytest.raises(ValueError, match="accountant must be 'rdp' or 'pld'"):
        epsilon_of_event(gaussian_event(1.0), 1e-6, "gdp")
    with pytest.raises(ValueError, match="neighboring must be one of"):
        PrivacyLedger(neighboring="swap")


def test_empty_ledger_and_report():
    ledger = PrivacyLedger()
    assert ledger.epsilon(1e-5) == 0.0
    rep = ledger.report(1e-5, include_pld=False)
    assert rep["events"] == [] and "epsilon_pld" not in rep
    assert epsilon_from_report(rep) == 0.0


def test_non_private_events_give_infinite_epsilon_in_every_accountant():
    ledger = PrivacyLedger()
    ledger.record("a", gaussian_event(1.0))
    ledger.record("oops", gaussian_event(0.0))
    assert isinstance(gaussian_event(0.0), dp_accounting.NonPrivateDpEvent)
    assert math.isinf(ledger.epsilon(1e-5)) and math.isinf(ledger.epsilon(1e-5, "pld"))
    rep = ledger.report(1e-5)
    assert rep["epsilon"] == "inf"  # strict-JSON safe


def test_pld_only_events_under_replace_one():
    # sampling without replacement: RDP needs replace-one; the PLD accountant handles it as well
    ev = fixed_size_subsampled_gaussian_event(10, 100, 2.0, steps=3)
    assert isinstance(ev, dp_accounting.SelfComposedDpEvent)
    ledger = PrivacyLedger(neighboring="replace_one")
    ledger.record("sgd", ev)
    eps_rdp = ledger.epsilon(1e-5)
    assert 0 < eps_rdp < math.inf
    with pytest.raises(ValueError, match="must not exceed"):
        fixed_size_subsampled_gaussian_event(101, 100, 2.0)
    assert isinstance(fixed_size_subsampled_gaussian_event(100, 100, 2.0), dp_accounting.GaussianDpEvent)


def test_pld_failure_is_reported_not_raised_for_an_rdp_report():
    # the PLD accountant does not support sampling without replacement: an RDP report records the
    # error instead of failing, a PLD report raises
    ledger = PrivacyLedger(neighboring="replace_one")
    ledger.record("sgd", fixed_size_subsampled_gaussian_event(10, 100, 1.0))
    rep = ledger.report(1e-5)
    assert rep["epsilon_rdp"] > 0
    assert rep["epsilon_pld"] is None and "Unsupported" in rep["epsilon_pld_error"]
    with pytest.raises(Exception, match="Unsupported"):
        ledger.report(1e-5, accountant="pld")


# ---------------------------------------------------------------------- clipping


def test_clip_rows_bounds_every_row_and_keeps_short_rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 4)).astype(np.float32) * 3
    x[0] = 0.0
    x[1] = [0.1, 0, 0, 0]
    out = np.empty_like(x)
    res = clip_rows(x, 1.0, out=out)
    assert res is out
    norms = np.linalg.norm(out.astype(np.float64), axis=1)
    assert np.all(norms <= 1.0)
    np.testing.assert_array_equal(out[0], 0)
    np.testing.assert_array_equal(out[1], x[1])  # inside the ball: unchanged
    np.testing.assert_allclose(clip_rows(x, 1.0), out)
    # integer input: scaled as floats, never above the bound
    xi = np.array([[3, 4], [0, 1]])
    np.testing.assert_allclose(clip_rows(xi, 2.5), [[1.5, 2.0], [0, 1]])
    with pytest.raises(ValueError, match="max_norm"):
        clip_rows(x, 0.0)


def test_clip_vector_and_labels():
    v = np.array([3.0, 4.0])
    np.testing.assert_allclose(np.linalg.norm(clip_vector(v, 1.0)), 1.0, rtol=1e-12)
    batch = np.ones((2, 3, 4))
    out = clip_vector(batch, 1.0)
    assert out.shape == batch.shape
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(clip_labels([-9, 0.5, 9], 2.0), [-2, 0.5, 2])
    with pytest.raises(ValueError, match="rating_bound"):
        clip_labels([1.0], -1.0)


def test_project_ball_rows_and_whole_array():
    a = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    p = project_ball(a, 1.0)
    np.testing.assert_allclose(p, [[0.6, 0.8], [0.3, 0.4], [0, 0]])
    assert p is not a and a[0, 0] == 3.0  # not in place by default
    np.testing.assert_array_equal(p[1], a[1])  # inside: bit for bit
    whole = project_ball(a, 1.0, rows=False)
    assert np.linalg.norm(whole) == pytest.approx(1.0)
    np.testing.assert_allclose(whole / np.linalg.norm(whole), a / np.linalg.norm(a))
    small = np.array([0.1, 0.1])
    np.testing.assert_array_equal(project_ball(small, 1.0, rows=False), small)
    b = a.copy()
    assert project_ball(b, 1.0, inplace=True) is b and np.linalg.norm(b[0]) == pytest.approx(1.0)
    assert project_ball(a, None) is a and project_ball(a, math.inf) is a
    t = np.ones((2, 2, 2))  # trailing axes flattened per row
    np.testing.assert_allclose(np.linalg.norm(project_ball(t, 1.0).reshape(2, -1), axis=1), 1.0)
    with pytest.raises(ValueError, match="radius"):
        project_ball(a, 0.0)


# ---------------------------------------------------------------------- random states


def test_make_rng_accepts_the_documented_kinds():
    g = np.random.default_rng(3)
    assert make_rng(g) is g
    a = make_rng(np.random.SeedSequence(5)).random(3)
    b = make_rng(np.random.SeedSequence(5)).random(3)
    np.testing.assert_array_equal(a, b)
    r1 = make_rng(np.random.RandomState(1)).random(2)
    r2 = make_rng(np.random.RandomState(1)).random(2)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(make_rng(np.int64(4)).random(2), make_rng(4).random(2))
    for bad in ("seed", 1.5, True):
        with pytest.raises(ValueError, match="random_state must be None"):
            make_rng(bad)


# ---------------------------------------------------------------------- calibration


def test_default_count_fraction_is_the_papers_schedule():
    assert default_count_fraction(1.0) == pytest.approx(0.12)
    assert default_count_fraction(5.0) == pytest.approx(0.14)
    assert default_count_fraction(20.0) == pytest.approx(0.20)
    assert default_count_fraction(0.1) == pytest.approx(0.12)  # constant outside
    assert default_count_fraction(math.inf) == pytest.approx(0.20)
    assert 0.12 < default_count_fraction(2.0) < 0.14


def test_calibration_meets_the_target_from_below():
    build = lambda z: dp_accounting.SelfComposedDpEvent(gaussian_event(z), 5)
    z = calibrate_noise_multiplier(2.0, 1e-5, build)
    eps = epsilon_of_event(build(z), 1e-5)
    assert 0.99 * 2.0 <= eps <= 2.0
    assert calibrate_noise_multiplier(math.inf, 1e-5, build) == 0.0
    # a huge epsilon needs almost no noise: the search stops at its lower limit
    tiny = calibrate_noise_multiplier(1e9, 0.5, lambda z: gaussian_event(z))
    assert tiny < 1e-3
    with pytest.raises(ValueError, match="cannot reach epsilon"):
        calibrate_noise_multiplier(
            1.0, 1e-5, lambda z: dp_accounting.ComposedDpEvent([gaussian_event(z), gaussian_event(0)])
        )


def test_pld_calibration_with_an_rdp_incompatible_event():
    # Poisson sampling under replace-one: RDP cannot compose it, so the PLD search starts unbracketed
    build = lambda z: dp_accounting.PoissonSampledDpEvent(0.1, gaussian_event(z))
    z = calibrate_noise_multiplier(1.0, 1e-5, build, accountant="pld", neighboring="replace_one")
    eps = epsilon_of_event(build(z), 1e-5, "pld", neighboring="replace_one")
    assert 0.99 * 1.0 <= eps <= 1.0


def test_gaussian_rho():
    assert gaussian_rho(gaussian_event(2.0)) == pytest.approx(1 / 8)
    assert gaussian_rho(dp_accounting.NoOpDpEvent()) == 0.0
    assert gaussian_rho(dp_accounting.SelfComposedDpEvent(gaussian_event(1.0), 3)) == pytest.approx(1.5)
    assert gaussian_rho(dp_accounting.ComposedDpEvent([gaussian_event(1.0), gaussian_event(2.0)])) == pytest.approx(
        0.625
    )
    with pytest.raises(TypeError, match="plain Gaussian events, got LaplaceDpEvent"):
        gaussian_rho(dp_accounting.LaplaceDpEvent(1.0))


# ---------------------------------------------------------------------- mechanisms


def test_event_constructors_for_zero_and_infinite_noise():
    assert isinstance(laplace_event(0.0), dp_accounting.NonPrivateDpEvent)
    assert isinstance(laplace_event(math.inf), dp_accounting.NoOpDpEvent)
    assert laplace_event(2.0) == dp_accounting.LaplaceDpEvent(2.0)
    assert isinstance(gaussian_event(math.inf), dp_accounting.NoOpDpEvent)
    ev = poisson_subsampled_gaussian_event(0.5, 1.0, steps=2)
    assert ev == dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.5, gaussian_event(1.0)), 2)
    assert poisson_subsampled_gaussian_event(1.0, 1.0) == gaussian_event(1.0)
    with pytest.raises(ValueError, match="sampling_probability"):
        poisson_subsampled_gaussian_event(0.0, 1.0)


def test_gaussian_mechanism_symmetric_and_plain():
    G = np.zeros((3, 4, 4))
    rel = gaussian_mechanism(G, sensitivity=2.0, noise_multiplier=0.5, rng=0, symmetric=True)
    assert isinstance(rel, Release)
    np.testing.assert_allclose(rel.value, np.swapaxes(rel.value, -1, -2))
    assert rel.noise_std == 1.0 and rel.params is rel.value
    assert rel.event == gaussian_event(0.5)
    # the same draws as symmetric_gaussian_noise, and as the in-place variant
    np.testing.assert_allclose(rel.value, symmetric_gaussian_noise((3,), 4, 1.0, np.random.default_rng(0), np.float64))
    H = np.zeros((3, 4, 4))
    add_symmetric_gaussian_noise(H, 1.0, np.random.default_rng(0))
    np.testing.assert_allclose(H, rel.value)
    before = H.copy()
    add_symmetric_gaussian_noise(H, 0.0, 0)
    np.testing.assert_array_equal(H, before)
    with pytest.raises(ValueError, match="square matrices"):
        gaussian_mechanism(np.zeros((3, 4)), 1.0, 1.0, symmetric=True)
    ints = gaussian_mechanism(np.array([1, 2, 3]), 1.0, 0.0, rng=0)
    assert ints.value.dtype == np.float64 and isinstance(ints.event, dp_accounting.NonPrivateDpEvent)
    np.testing.assert_array_equal(ints.value, [1, 2, 3])


def test_laplace_mechanism():
    rel = laplace_mechanism(np.zeros(20000), l1_sensitivity=1.0, noise_multiplier=0.5, rng=1)
    assert rel.value.std() == pytest.approx(0.5 * math.sqrt(2), rel=0.05)
    assert rel.noise_std == pytest.approx(0.5 * math.sqrt(2))
    assert rel.event == dp_accounting.LaplaceDpEvent(0.5)
    exact = laplace_mechanism([1, 2], 1.0, 0.0)
    np.testing.assert_array_equal(exact.value, [1, 2])


def test_release_records_into_a_ledger_and_composes():
    rel = Release(np.zeros(2), [("a", gaussian_event(2.0), {"sensitivity": 1.0}), ("b", gaussian_event(2.0), {})])
    assert rel.event == dp_accounting.SelfComposedDpEvent(gaussian_event(2.0), 2)
    ledger = PrivacyLedger()
    rel.record(ledger, prefix="step 1: ")
    assert [e.label for e in ledger.entries] == ["step 1: a", "step 1: b"]
    assert isinstance(Release(1.0).event, dp_accounting.NoOpDpEvent) and Release(1.0).noise_std == 0.0


# ---------------------------------------------------------------------- audit input checks


def test_audit_bounds_and_their_input_checks():
    assert audit.clopper_pearson_upper(10, 10) == 1.0
    assert audit.clopper_pearson_lower(0, 10) == 0.0
    up = audit.clopper_pearson_upper([0, 5], [10, 10])
    assert up.shape == (2,) and np.all((up > 0) & (up <= 1))
    for bad_alpha in (0.0, 1.0):
        with pytest.raises(ValueError, match="alpha must be in"):
            audit.clopper_pearson_upper(1, 10, alpha=bad_alpha)
    with pytest.raises(ValueError, match="counts must be integers"):
        audit.clopper_pearson_lower(11, 10)
    assert audit.gdp_epsilon(0.0, 1e-5) == 0.0
    assert math.isinf(audit.gdp_epsilon(math.inf, 1e-5))
    assert audit.gdp_epsilon(1.0, 0.5) == 0.0  # so weak that delta alone covers it
    assert audit.gdp_epsilon(1.0, 1e-5) > audit.gdp_epsilon(0.5, 1e-5) > 0
    with pytest.raises(ValueError, match="delta must be in"):
        audit.gdp_epsilon(1.0, 1.0)
    assert math.isinf(audit.separation([1.0, 1.0], [2.0, 2.0]))  # zero spread, different means


def test_audit_scores_input_checks():
    rng = np.random.default_rng(0)
    s0, s1 = rng.normal(size=40), rng.normal(size=40) + 3
    res = audit.audit_scores(s0, s1, 1e-5)
    assert res.eps_lower > 0 and res.to_dict()["eps_lower"] == res.eps_lower
    res_col = audit.audit_scores(s0[:, None], s1[:, None], 1e-5)
    assert res_col.eps_lower >= 0
    with pytest.raises(ValueError, match="method must be one of"):
        audit.audit_scores(s0, s1, 1e-5, method="magic")
    with pytest.raises(ValueError, match="same k"):
        audit.audit_scores(s0[:, None], s1, 1e-5)
    with pytest.raises(ValueError, match="finite"):
        audit.audit_scores(np.r_[s0[:-1], np.nan], s1, 1e-5)
    with pytest.raises(ValueError, match="confidence must be in"):
        audit.audit_scores(s0, s1, 1e-5, confidence=1.0)
    with pytest.raises(ValueError, match="delta must be in"):
        audit.audit_scores(s0, s1, -0.1)


def test_run_audit_needs_runs_and_fixed_size_observables():
    with pytest.raises(ValueError, match="n_runs must be >= 4"):
        audit.run_audit(lambda d, s: 0.0, 0, 1, n_runs=3)
    calls = []
    res = audit.run_audit(
        lambda d, s: float(d) * 5 + np.random.default_rng(s).normal(),
        0,
        1,
        n_runs=8,
        progress=lambda i, n: calls.append(i),
    )
    assert calls == list(range(1, 9)) and res.n_runs == 8
    with pytest.raises(ValueError, match="one fixed size"):
        audit.run_audit(lambda d, s: np.zeros(1 + (s % 2)), 0, 1, n_runs=4)
