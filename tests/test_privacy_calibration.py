"""Calibration hits the target epsilon within 0.5% from below (issue 3 'Done when')."""

import dp_accounting
import pytest

from privrec.privacy import (
    PrivacyLedger,
    calibrate_noise_multiplier,
    calibrate_with_split,
    compose,
    default_count_fraction,
    epsilon_from_report,
    epsilon_of_event,
    gaussian_event,
    gaussian_rho,
)
from privrec.privacy.calibration import MIN_TARGET_EPSILON

TARGETS = [(eps, delta) for eps in (0.5, 1.0, 5.0, 20.0) for delta in (1e-5, 1e-6)]


def _train_event(s, steps=5):
    # DP-ALS-like: per step local Gramians (ratio 1.3) and RHS, composed over steps
    return dp_accounting.SelfComposedDpEvent(compose([gaussian_event(1.3 * s), gaussian_event(s)]), steps)


@pytest.mark.parametrize("eps,delta", TARGETS)
def test_plain_calibration_within_half_percent(eps, delta):
    z = calibrate_noise_multiplier(eps, delta, _train_event)
    achieved = epsilon_of_event(_train_event(z), delta)
    assert 0.995 * eps <= achieved <= eps


@pytest.mark.parametrize("eps,delta", TARGETS)
def test_split_calibration_within_half_percent_and_split_holds(eps, delta):
    f = default_count_fraction(eps)
    cal = calibrate_with_split(eps, delta, f, lambda c: gaussian_event(c), _train_event)
    total = compose([gaussian_event(cal.count_scale), _train_event(cal.train_scale)])
    achieved = epsilon_of_event(total, delta)
    assert 0.995 * eps <= achieved <= eps
    assert cal.epsilon == pytest.approx(achieved, rel=1e-12)
    rho_c = gaussian_rho(gaussian_event(cal.count_scale))
    rho_t = gaussian_rho(_train_event(cal.train_scale))
    assert rho_c / (rho_c + rho_t) == pytest.approx(f, rel=1e-9)


def test_default_count_fractions_match_paper():
    assert default_count_fraction(1.0) == pytest.approx(0.12)
    assert default_count_fraction(5.0) == pytest.approx(0.14)
    assert default_count_fraction(20.0) == pytest.approx(0.20)
    assert 0.12 < default_count_fraction(2.0) < 0.14


def test_monotone_more_epsilon_less_noise_and_infinite_target():
    zs = [calibrate_noise_multiplier(e, 1e-5, _train_event) for e in (0.5, 1.0, 5.0, 20.0)]
    assert all(a > b for a, b in zip(zs, zs[1:]))
    assert calibrate_noise_multiplier(float("inf"), 1e-5, _train_event) == 0.0


def test_calibration_bad_input():
    for eps, delta in ((0.0, 1e-5), (-1.0, 1e-5), (1.0, 0.0), (1.0, 1.0), (1.0, 2.0)):
        with pytest.raises(ValueError):
            calibrate_noise_multiplier(eps, delta, _train_event)
    with pytest.raises(ValueError):
        calibrate_with_split(1.0, 1e-5, 1.0, gaussian_event, _train_event)
    with pytest.raises(ValueError, match="cannot reach"):
        calibrate_noise_multiplier(1.0, 1e-5, lambda z: compose([gaussian_event(z), dp_accounting.NonPrivateDpEvent()]))


# ------------------------------------------------------------------ issue 26: tiny targets, the limits


def _fit_plan(c, s, steps=4):
    """The events a DPALS fit records, flat, as its ledger holds them (three pre-processing
    releases at scale c, local Gramians at 2 s and right-hand sides at s per ALS step)."""
    return [gaussian_event(c)] * 3 + [ev for _ in range(steps) for ev in (gaussian_event(2 * s), gaussian_event(s))]


@pytest.mark.parametrize("eps", [0.05, 0.02, 0.01, 1e-3, 1e-4])
def test_reported_pld_epsilon_never_exceeds_a_tiny_target(eps):
    """Calibration composes nested events, the ledger records them flat: the report's epsilon used
    to exceed the target at epsilon <= 0.02 (0.01 -> 0.0101, 1e-3 -> 1.3e-3)."""

    def build_count(c):
        return compose(gaussian_event(c) for _ in range(3))

    def build_train(s):
        return compose(_fit_plan(1.0, s)[3:])

    cal = calibrate_with_split(eps, 1e-5, default_count_fraction(eps), build_count, build_train, accountant="pld")
    led = PrivacyLedger()
    for i, ev in enumerate(_fit_plan(cal.count_scale, cal.train_scale)):
        led.record(f"release {i}", ev)
    rep = led.report(1e-5, accountant="pld")
    assert (1 - 0.005) * eps <= rep["epsilon"] <= eps
    assert rep["epsilon"] == cal.epsilon
    assert epsilon_from_report(rep, rep["accountant"]) == rep["epsilon"]


def test_targets_below_the_minimum_are_a_clear_error():
    assert MIN_TARGET_EPSILON == 1e-4
    for bad in (9.9e-5, 1e-6, 1e-300, 5e-324):
        with pytest.raises(ValueError, match=r"epsilon=.* is below 0\.0001, the smallest target"):
            calibrate_noise_multiplier(bad, 1e-5, _train_event, accountant="pld")
        with pytest.raises(ValueError, match=r"epsilon=.* is below 0\.0001"):
            calibrate_with_split(bad, 1e-5, 0.1, gaussian_event, _train_event)
    z = calibrate_noise_multiplier(MIN_TARGET_EPSILON, 1e-5, _train_event, accountant="pld")
    assert 0.995e-4 <= epsilon_of_event(_train_event(z), 1e-5, "pld") <= 1e-4


def test_delta_below_what_the_pld_accountant_resolves_is_a_clear_error():
    """delta <= 1e-16 used to give epsilon = inf at any noise, so the search added ~1000x too much."""
    for tiny in (1e-14, 1e-16, 1e-30):
        with pytest.raises(ValueError, match=rf"delta={tiny:g} is below 1e-13, the smallest delta the PLD"):
            calibrate_noise_multiplier(5.0, tiny, _train_event, accountant="pld")
        with pytest.raises(ValueError, match="delta"):
            calibrate_with_split(5.0, tiny, 0.1, gaussian_event, _train_event, accountant="pld")
    # the RDP accountant resolves it (its epsilon is looser)
    z = calibrate_noise_multiplier(5.0, 1e-16, _train_event, accountant="rdp")
    assert 0.995 * 5.0 <= epsilon_of_event(_train_event(z), 1e-16, "rdp") <= 5.0


def test_target_below_the_rdp_floor_says_why():
    # RDP's conversion has a floor of ~log(1/delta) / 62 whatever the noise (about 1.1 at 1e-30)
    with pytest.raises(ValueError, match=r"RDP accountant cannot certify less than about 1\.\d+ at this delta"):
        calibrate_noise_multiplier(0.5, 1e-30, gaussian_event, accountant="rdp")
