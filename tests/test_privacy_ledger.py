"""Ledger reports can be recomputed independently with plain dp_accounting (issue 3)."""

import json

import dp_accounting
import pytest
from dp_accounting import pld, rdp

from privrec.privacy import (
    DEFAULT_RDP_ORDERS,
    PrivacyLedger,
    epsilon_from_report,
    event_from_dict,
    event_to_dict,
    gaussian_event,
    laplace_event,
    poisson_subsampled_gaussian_event,
)


def _composite_ledger():
    led = PrivacyLedger()
    led.record("item counts", gaussian_event(8.0), sensitivity=10.0, noise_std=80.0)
    led.record("global mean: sum", gaussian_event(8.0))
    for t in range(3):
        led.record(f"ALS step {t}: local Gramians", gaussian_event(4.0))
        led.record(f"ALS step {t}: right-hand sides", gaussian_event(4.5))
    led.record("dpsgd", poisson_subsampled_gaussian_event(0.05, 1.2, steps=40))
    return led


def _independent_rdp_epsilon(report):
    """Rebuild every event by hand from the JSON, without privrec's helpers."""

    def build(d):
        t = d["type"]
        if t == "gaussian":
            return dp_accounting.GaussianDpEvent(d["noise_multiplier"])
        if t == "laplace":
            return dp_accounting.LaplaceDpEvent(d["noise_multiplier"])
        if t == "self_composed":
            return dp_accounting.SelfComposedDpEvent(build(d["event"]), d["count"])
        if t == "poisson_sampled":
            return dp_accounting.PoissonSampledDpEvent(d["sampling_probability"], build(d["event"]))
        if t == "composed":
            return dp_accounting.ComposedDpEvent([build(e) for e in d["events"]])
        raise AssertionError(t)

    acc = rdp.RdpAccountant(orders=report["rdp_orders"])
    for e in report["events"]:
        acc.compose(build(e["event"]))
    return acc.get_epsilon(report["delta"])


def test_report_recomputes_independently_to_1e6():
    led = _composite_ledger()
    report = json.loads(json.dumps(led.report(1e-5)))  # strict JSON round trip
    eps_indep = _independent_rdp_epsilon(report)
    assert report["epsilon"] == pytest.approx(eps_indep, abs=1e-6)
    assert epsilon_from_report(report) == pytest.approx(eps_indep, abs=1e-6)
    assert len(report["events"]) == len(led) == 9
    assert report["events"][0]["meta"]["noise_std"] == 80.0


def test_pld_epsilon_is_reported_and_close_to_independent_pld():
    led = PrivacyLedger()
    led.record("a", gaussian_event(3.0))
    led.record("b", dp_accounting.SelfComposedDpEvent(gaussian_event(5.0), 4))
    report = led.report(1e-6)
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(
        dp_accounting.ComposedDpEvent([gaussian_event(3.0), dp_accounting.SelfComposedDpEvent(gaussian_event(5.0), 4)])
    )
    # the ledger's grid is 1e-3 (pessimistic, a valid upper bound): within 1e-5 of the 1e-4 grid
    assert report["epsilon_pld"] == pytest.approx(acc.get_epsilon(1e-6), abs=1e-5)
    assert report["epsilon_pld"] >= acc.get_epsilon(1e-6) - 1e-9
    # PLD is tighter than RDP for Gaussian compositions
    assert report["epsilon_pld"] <= report["epsilon_rdp"] + 1e-9


def test_composition_order_independent_and_additive_in_rdp():
    a, b = PrivacyLedger(), PrivacyLedger()
    a.record("x", gaussian_event(2.0))
    a.record("y", gaussian_event(3.0))
    b.record("y", gaussian_event(3.0))
    b.record("x", gaussian_event(2.0))
    assert a.epsilon(1e-5) == pytest.approx(b.epsilon(1e-5), abs=1e-12)
    # two Gaussians with z1, z2 equal one Gaussian with 1/z^2 = 1/z1^2 + 1/z2^2
    c = PrivacyLedger()
    c.record("xy", gaussian_event((1 / 2.0**2 + 1 / 3.0**2) ** -0.5))
    assert c.epsilon(1e-5) == pytest.approx(a.epsilon(1e-5), rel=1e-9)


def test_from_report_round_trip_and_event_serialisation():
    led = _composite_ledger()
    led.record("laplace", laplace_event(2.0))
    rep = led.report(1e-5, include_pld=False)
    again = PrivacyLedger.from_report(rep)
    assert [e.label for e in again.entries] == [e.label for e in led.entries]
    assert again.epsilon(1e-5) == pytest.approx(led.epsilon(1e-5), abs=1e-12)
    for e in led.events:
        assert event_from_dict(event_to_dict(e)) == e


def test_non_private_event_gives_infinite_epsilon_and_strict_json():
    led = PrivacyLedger()
    led.record("exact", dp_accounting.NonPrivateDpEvent())
    rep = led.report(1e-5)
    assert rep["epsilon"] == "inf"
    json.dumps(rep, allow_nan=False)


def test_empty_ledger_and_bad_input():
    led = PrivacyLedger()
    assert led.epsilon(1e-5) == 0.0
    for bad in (0.0, 1.0, -1e-5, "x"):
        with pytest.raises(ValueError):
            led.epsilon(bad)
    with pytest.raises(ValueError):
        PrivacyLedger(neighboring="swap")
    with pytest.raises(TypeError):
        led.record("not an event", 1.0)
    assert len(DEFAULT_RDP_ORDERS) == 99 + 53 and DEFAULT_RDP_ORDERS[0] == 1.1 and DEFAULT_RDP_ORDERS[-1] == 63.0


def test_pld_cost_stays_bounded_at_large_epsilon():
    """epsilon = 1e3..1e6 used to take minutes and gigabytes in the PLD report: the grid now widens
    with epsilon, and beyond PLD_MAX_EPSILON the (also valid) RDP bound is reported."""
    from privrec.privacy.ledger import PLD_MAX_EPSILON, pld_interval

    assert pld_interval(1.0) == 1e-3 and pld_interval(400.0) == pytest.approx(8e-3)
    led = PrivacyLedger()
    led.record("tiny noise", dp_accounting.SelfComposedDpEvent(gaussian_event(1e-3), 9))
    rep = led.report(1e-5, accountant="pld")
    assert rep["epsilon_rdp"] > PLD_MAX_EPSILON
    assert rep["epsilon"] == rep["epsilon_pld"] == rep["epsilon_rdp"]
    led2 = PrivacyLedger()
    led2.record("moderate", dp_accounting.SelfComposedDpEvent(gaussian_event(0.2), 9))
    rep2 = led2.report(1e-5, accountant="pld")
    assert rep2["epsilon_pld"] < rep2["epsilon_rdp"] < PLD_MAX_EPSILON
