"""Calibration hits the target epsilon within 0.5% from below (issue 3 'Done when')."""

import dp_accounting
import pytest

from privrec.privacy import (
    calibrate_noise_multiplier,
    calibrate_with_split,
    compose,
    default_count_fraction,
    epsilon_of_event,
    gaussian_event,
    gaussian_rho,
)

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
