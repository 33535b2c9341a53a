"""Ledger reports can be recomputed independently with plain dp_accounting (issue 3)."""

import json

import dp_accounting
import pytest
from dp_accounting import pld, rdp

from privrec.privacy import (
    DEFAULT_RDP_ORDERS,
    PrivacyLedger,
    compose,
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
    report = json.loads(json.dumps(led.report(1e-5, accountant="rdp")))  # strict JSON round trip
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


# ------------------------------------------------------------------ the PLD default (issue 25, item 6)


def test_ledger_defaults_to_the_models_accountant_pld():
    led = PrivacyLedger()
    led.record("counts", gaussian_event(8.0))
    led.record("step", gaussian_event(2.0))
    assert led.default_accountant() == "pld"
    assert led.epsilon(1e-6) == led.epsilon(1e-6, "pld") < led.epsilon(1e-6, "rdp")
    rep = json.loads(json.dumps(led.report(1e-6)))
    assert rep["accountant"] == "pld" and rep["epsilon"] == rep["epsilon_pld"]
    # recomputed with the report's own accountant (the default of epsilon_from_report), exactly
    assert epsilon_from_report(rep) == epsilon_from_report(rep, "pld") == rep["epsilon"]
    assert epsilon_from_report(rep, "rdp") == rep["epsilon_rdp"]
    # a report without the PLD accountant is an RDP report
    rdp_only = led.report(1e-6, include_pld=False)
    assert rdp_only["accountant"] == "rdp" and "epsilon_pld" not in rdp_only
    assert epsilon_from_report(rdp_only) == rdp_only["epsilon"] == rep["epsilon_rdp"]


def test_ledger_default_is_rdp_under_replace_one_and_for_events_pld_cannot_compose():
    # privrec's replace-one estimators calibrate with RDP (dp_accounting's PLD doubles a Gaussian's
    # sensitivity under replace-one): their ledgers keep answering with RDP
    rep1 = PrivacyLedger(neighboring="replace_one")
    rep1.record("x", gaussian_event(2.0))
    assert rep1.default_accountant() == "rdp" and rep1.epsilon(1e-5) == rep1.epsilon(1e-5, "rdp")
    assert rep1.report(1e-5)["accountant"] == "rdp"
    # an event dp_accounting's PLD accountant does not compose (here under add-or-remove)
    tree = PrivacyLedger()
    tree.record("tree", dp_accounting.SingleEpochTreeAggregationDpEvent(2.0, 8))
    assert tree.default_accountant() == "rdp"
    assert PrivacyLedger().default_accountant() == "pld"  # empty ledger


# ------------------------------------------------------------------ one accounting function (issue 26, item 1)


def test_nesting_and_order_of_events_do_not_change_epsilon():
    """The calibration composes nested events (DpEventBuilder: self-compositions of runs) while the
    ledger records a flat list; both must give the same epsilon to the last bit (the reported epsilon
    exceeded the target at epsilon <= 0.02 because they did not)."""
    from privrec.privacy.ledger import canonical_event, epsilon_of_event

    c, s = 17381.7, 4143.2
    flat = [gaussian_event(c)] * 3 + [gaussian_event(2 * s), gaussian_event(s)]
    nested = compose([compose([gaussian_event(c)] * 3), compose([gaussian_event(2 * s), gaussian_event(s)])])
    reordered = dp_accounting.ComposedDpEvent(flat[::-1])
    for accountant in ("pld", "rdp"):
        values = {
            epsilon_of_event(ev, 1e-5, accountant) for ev in (dp_accounting.ComposedDpEvent(flat), nested, reordered)
        }
        assert len(values) == 1, (accountant, values)
    # all Gaussians merge into one: 1/z^2 = sum 1/z_k^2 (exact for Gaussian mechanisms)
    merged = canonical_event(nested)
    assert isinstance(merged, dp_accounting.GaussianDpEvent)
    assert merged.noise_multiplier == pytest.approx((3 / c**2 + 1 / (2 * s) ** 2 + 1 / s**2) ** -0.5, rel=1e-12)
    # other events are gathered with their copies, Gaussians merged across self-compositions
    sampled = poisson_subsampled_gaussian_event(0.1, 1.0)
    mixed = canonical_event(
        compose(
            [
                sampled,
                gaussian_event(2.0),
                dp_accounting.SelfComposedDpEvent(compose([sampled, gaussian_event(4.0)]), 3),
            ]
        )
    )
    assert isinstance(mixed, dp_accounting.ComposedDpEvent)
    g, rest = mixed.events
    assert g.noise_multiplier == pytest.approx((1 / 4 + 3 / 16) ** -0.5) and rest == dp_accounting.SelfComposedDpEvent(
        sampled, 4
    )
    assert isinstance(canonical_event(compose([])), dp_accounting.NoOpDpEvent)


def test_tiny_epsilon_report_recomputes_exactly_on_a_finer_grid():
    led = PrivacyLedger()
    for _ in range(3):
        led.record("counts", gaussian_event(17381.7))
    led.record("step", gaussian_event(4143.2))
    rep = json.loads(json.dumps(led.report(1e-5)))
    assert rep["epsilon"] < 2e-3
    # the grid was refined to <= 1% of epsilon (a 1e-3 grid puts a floor of ~5e-4 under any epsilon)
    assert rep["pld_discretization"] <= 0.01 * rep["epsilon"]
    assert epsilon_from_report(rep, rep["accountant"]) == rep["epsilon"]
    # the value is that of a much finer grid (an independent dp_accounting run), within 0.5%
    acc = pld.PLDAccountant(value_discretization_interval=1e-7)
    acc.compose(dp_accounting.ComposedDpEvent(led.events))
    assert rep["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=5e-3)
    assert rep["epsilon"] >= acc.get_epsilon(1e-5) * (1 - 1e-9)  # pessimistic: never below


def test_reports_written_before_the_canonical_accounting_still_recompute():
    """Saved model files hold reports without ``pld_discretization``: their epsilon_pld was computed
    on the flat event list with the grid pld_interval(epsilon_rdp); it still recomputes to that."""
    from privrec.privacy.ledger import pld_interval

    led = _composite_ledger()
    rep = led.report(1e-5)
    del rep["pld_discretization"]
    events = dp_accounting.ComposedDpEvent(led.events)
    acc = pld.PLDAccountant(value_discretization_interval=pld_interval(rep["epsilon_rdp"]))
    acc.compose(events)
    old = acc.get_epsilon(1e-5)
    assert old != rep["epsilon_pld"]  # the canonical form differs ...
    assert epsilon_from_report(rep, "pld") == old  # ... but an old report is recomputed the old way


def test_pld_grid_stays_bounded_at_a_large_delta():
    """At delta near 0.5 a tiny epsilon goes with a wide loss distribution: a grid of 1% of epsilon
    would take gigabytes (a DPALS fit at epsilon 1e-4, delta 0.49 was killed for memory)."""
    from privrec.privacy.ledger import PLD_MAX_POINTS, pld_epsilon, pld_loss_width

    ev = gaussian_event(0.7588)
    eps, interval = pld_epsilon(ev, 0.49)
    assert 0 < eps < 1e-3
    assert pld_loss_width(ev) / interval <= PLD_MAX_POINTS
    assert pld_loss_width(dp_accounting.SelfComposedDpEvent(laplace_event(2.0), 3)) == pytest.approx(3.0)
    assert pld_loss_width(dp_accounting.SingleEpochTreeAggregationDpEvent(1.0, 4)) == float("inf")


def test_pld_refuses_a_delta_it_cannot_resolve_and_rdp_takes_it():
    from privrec.privacy.ledger import PLD_MIN_DELTA, epsilon_of_event

    led = PrivacyLedger()
    led.record("x", gaussian_event(1.0))
    for tiny in (1e-14, 1e-16, 1e-30):
        with pytest.raises(ValueError, match=rf"delta={tiny:g} is below 1e-13.*accountant='rdp'"):
            led.epsilon(tiny)
        with pytest.raises(ValueError, match="delta"):
            epsilon_of_event(gaussian_event(1.0), tiny, "pld")
        with pytest.raises(ValueError, match="delta"):
            led.report(tiny)
        assert 0 < led.epsilon(tiny, "rdp") < float("inf")
        rep = led.report(tiny, accountant="rdp")  # the PLD cross-check is recorded as unavailable
        assert rep["epsilon_pld"] is None and "1e-13" in rep["epsilon_pld_error"]
    assert 0 < led.epsilon(PLD_MIN_DELTA) < float("inf")
