"""Mechanisms return the right noise and the right DpEvent (spec 004 §2 conventions)."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from privrec.privacy import (
    compose,
    fixed_size_subsampled_gaussian_event,
    gaussian_event,
    gaussian_mechanism,
    gaussian_noise,
    laplace_event,
    laplace_mechanism,
    make_rng,
    poisson_subsampled_gaussian_event,
    symmetric_gaussian_noise,
)


@pytest.mark.parametrize("z", [0.5, 1.0, 3.7])
def test_gaussian_event_rdp_is_alpha_over_two_z_squared(z):
    orders = [1.5, 2.0, 5.0, 10.0, 32.0]
    acc = rdp.RdpAccountant(orders=orders)
    acc.compose(gaussian_mechanism(np.zeros(3), 1.0, z, rng=0).event)
    # the accountant's internal RDP curve at each order
    expected = np.array(orders) / (2 * z * z)
    np.testing.assert_allclose(acc._rdp, expected, rtol=1e-12)


def test_gaussian_event_special_multipliers():
    assert isinstance(gaussian_event(0), dp_accounting.NonPrivateDpEvent)
    assert isinstance(gaussian_event(math.inf), dp_accounting.NoOpDpEvent)
    assert gaussian_event(2.0) == dp_accounting.GaussianDpEvent(2.0)
    assert isinstance(laplace_event(0), dp_accounting.NonPrivateDpEvent)
    assert laplace_event(0.5) == dp_accounting.LaplaceDpEvent(0.5)


def test_gaussian_mechanism_noise_std_matches_declaration():
    rng = make_rng(1)
    rel = gaussian_mechanism(np.zeros(200_000), sensitivity=2.0, noise_multiplier=1.5, rng=rng)
    assert rel.noise_std == pytest.approx(3.0)
    assert rel.value.std() == pytest.approx(3.0, rel=0.01)
    assert abs(rel.value.mean()) < 0.05


def test_symmetric_noise_is_symmetric_with_iid_upper_triangle():
    noise = symmetric_gaussian_noise((4000,), 5, std=2.0, rng=3, dtype=np.float64)
    np.testing.assert_array_equal(noise, np.swapaxes(noise, -1, -2))
    iu = np.triu_indices(5)
    upper = noise[:, iu[0], iu[1]]
    assert upper.std() == pytest.approx(2.0, rel=0.02)
    # off-diagonal entries of the upper triangle are uncorrelated with each other
    c = np.corrcoef(upper.T)
    assert np.max(np.abs(c - np.eye(c.shape[0]))) < 0.06


def test_symmetric_mechanism_requires_square():
    with pytest.raises(ValueError, match="square"):
        gaussian_mechanism(np.zeros((3, 2)), 1.0, 1.0, symmetric=True)


def test_zero_noise_is_exact_and_non_private():
    v = np.arange(5.0)
    rel = gaussian_mechanism(v, 1.0, 0.0)
    np.testing.assert_array_equal(rel.value, v)
    assert isinstance(rel.event, dp_accounting.NonPrivateDpEvent)
    np.testing.assert_array_equal(gaussian_noise((3,), 0.0), np.zeros(3))


def test_laplace_mechanism_scale_and_event():
    rel = laplace_mechanism(np.zeros(200_000), l1_sensitivity=2.0, noise_multiplier=0.5, rng=0)
    # Laplace(b=1) has std sqrt(2)
    assert rel.value.std() == pytest.approx(math.sqrt(2.0), rel=0.02)
    assert rel.event == dp_accounting.LaplaceDpEvent(0.5)


def test_subsampled_events_structure():
    ev = poisson_subsampled_gaussian_event(0.01, 1.1, steps=100)
    assert isinstance(ev, dp_accounting.SelfComposedDpEvent) and ev.count == 100
    assert ev.event == dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1))
    assert poisson_subsampled_gaussian_event(1.0, 2.0) == dp_accounting.GaussianDpEvent(2.0)
    ev2 = fixed_size_subsampled_gaussian_event(10, 100, 1.0, steps=3)
    assert ev2.event == dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(1.0))
    assert compose([ev]) == ev
    assert compose([ev2, ev2]) == dp_accounting.SelfComposedDpEvent(ev2.event, 6)  # DpEventBuilder merges runs


@pytest.mark.parametrize(
    "call",
    [
        lambda: gaussian_mechanism(np.zeros(2), -1.0, 1.0),
        lambda: gaussian_mechanism(np.zeros(2), 1.0, -0.1),
        lambda: gaussian_mechanism(np.zeros(2), 1.0, float("nan")),
        lambda: poisson_subsampled_gaussian_event(0.0, 1.0),
        lambda: poisson_subsampled_gaussian_event(0.5, 1.0, steps=0),
        lambda: fixed_size_subsampled_gaussian_event(11, 10, 1.0),
        lambda: make_rng("seed"),
    ],
)
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_rng_default_uses_os_entropy_and_seed_is_reproducible():
    a, b = make_rng(None).random(4), make_rng(None).random(4)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(make_rng(7).random(4), make_rng(7).random(4))
    g = np.random.default_rng(0)
    assert make_rng(g) is g
