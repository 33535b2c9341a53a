"""The process-wide memo of calibration epsilons (privrec.privacy.calibration.EPSILON_MEMO): the same
numbers as the accountant without it, one entry per distinct input, nothing kept it cannot key."""

import math

import dp_accounting
import numpy as np
import pytest

from privrec.convex.federated import calibration as fed
from privrec.privacy import calibration as cal
from privrec.privacy import ledger
from privrec.privacy.ledger import epsilon_of_event
from privrec.privacy.mechanisms import compose, gaussian_event

G = dp_accounting.GaussianDpEvent


@pytest.fixture(autouse=True)
def _empty_memo():
    cal.clear_calibration_cache()
    yield
    cal.clear_calibration_cache()


def _subsampled(z):
    return dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, G(z)), 20)


def _without_memo(monkeypatch):
    """The same code with a memo that keeps nothing (every epsilon computed by the accountant)."""
    nothing = cal.EpsilonMemo(maxsize=0)
    monkeypatch.setattr(cal, "EPSILON_MEMO", nothing)
    monkeypatch.setattr(fed, "EPSILON_MEMO", nothing)
    return nothing


def _calibrations():
    """Each calibration path once: PLD (with its RDP bracket), RDP under both relations, the budget
    split, and the federated multipliers of the three sampling schemes (PLD replace-one for Poisson)."""
    out = [
        cal.calibrate_noise_multiplier(2.0, 1e-5, gaussian_event, "pld"),
        cal.calibrate_noise_multiplier(2.0, 1e-5, _subsampled, "rdp"),
        cal.calibrate_noise_multiplier(2.0, 1e-5, G, "rdp", neighboring="replace_one"),
        cal.calibrate_with_split(3.0, 1e-6, 0.2, G, lambda s: dp_accounting.SelfComposedDpEvent(G(s), 5), "pld"),
    ]
    for sampling in fed.SAMPLING_SCHEMES:
        fed.accountant_multiplier.cache_clear()  # its own lru_cache would skip the bisection
        out.append(fed.accountant_multiplier(1.0, 1e-4, sampling, 200, 20, 30))
    return out


def test_calibrations_are_identical_with_and_without_the_memo(monkeypatch):
    cold = _calibrations()
    filled = cal.EPSILON_MEMO.info()
    assert filled["size"] > 0 and filled["misses"] == filled["size"]
    warm = _calibrations()  # read from the memo
    assert cal.EPSILON_MEMO.info()["hits"] >= filled["size"] and cal.EPSILON_MEMO.info()["size"] == filled["size"]
    nothing = _without_memo(monkeypatch)
    plain = _calibrations()
    assert nothing.info()["size"] == 0 and nothing.info()["misses"] >= filled["size"]
    assert cold == warm == plain  # bit for bit (floats and the SplitCalibration)
    split = cold[3]
    assert split.epsilon == epsilon_of_event(
        compose([G(split.count_scale), dp_accounting.SelfComposedDpEvent(G(split.train_scale), 5)]), 1e-6, "pld"
    )
    assert epsilon_of_event(gaussian_event(cold[0]), 1e-5, "pld") <= 2.0


def test_the_federated_replace_one_epsilon_keys_every_input():
    event = fed.message_event("poisson", 200, 20, 1.7, 30)
    memoised = fed.pld_replace_one_epsilon(event, 1e-4)
    assert fed.pld_replace_one_epsilon(event, 1e-4) == memoised
    assert cal.EPSILON_MEMO.info()["hits"] == 1
    cal.clear_calibration_cache()
    assert fed.pld_replace_one_epsilon(event, 1e-4) == memoised
    assert fed.pld_replace_one_epsilon(event, 1e-5) > memoised
    assert fed.pld_replace_one_epsilon(event, 1e-4, interval=1e-2) >= memoised
    assert fed.pld_replace_one_epsilon(fed.message_event("poisson", 200, 20, 1.8, 30), 1e-4) < memoised
    assert cal.EPSILON_MEMO.info()["size"] == 4 and cal.EPSILON_MEMO.info()["hits"] == 0


def test_every_input_is_part_of_the_key():
    base = dict(delta=1e-5, accountant="pld", orders=ledger.DEFAULT_RDP_ORDERS, neighboring="add_or_remove_one")
    variants = [
        (G(1.0), base),
        (G(1.5), base),  # another noise
        (dp_accounting.LaplaceDpEvent(1.0), base),  # another mechanism, the same field value
        (dp_accounting.ComposedDpEvent([G(2.0), G(2.0)]), base),  # the same privacy loss ...
        (dp_accounting.SelfComposedDpEvent(G(2.0), 2), base),  # ... as another event structure
        (dp_accounting.PoissonSampledDpEvent(0.1, G(1.0)), base),
        (dp_accounting.PoissonSampledDpEvent(0.2, G(1.0)), base),
        (G(1.0), {**base, "delta": 1e-6}),
        (G(1.0), {**base, "accountant": "rdp"}),
        (G(1.0), {**base, "neighboring": "replace_one"}),
        (G(1.0), {**base, "accountant": "rdp", "orders": (2.0, 4.0, 8.0)}),
        (G(1), base),  # an int field is not the float field
    ]
    for i, (event, kw) in enumerate(variants, start=1):
        value = cal.memoised_epsilon(event, **kw)
        assert value == epsilon_of_event(event, **kw)
        assert cal.EPSILON_MEMO.info() == {"hits": 0, "misses": i, "size": i, "maxsize": cal.EPSILON_MEMO.maxsize}
    for event, kw in variants:  # each read back from its own entry
        assert cal.memoised_epsilon(event, **kw) == epsilon_of_event(event, **kw)
    assert cal.EPSILON_MEMO.info()["hits"] == len(variants)
    # the orders are keyed by value: a list reads the entry of the equal tuple
    assert cal.memoised_epsilon(G(1.0), 1e-5, "rdp", [2.0, 4.0, 8.0]) == epsilon_of_event(
        G(1.0), 1e-5, "rdp", (2.0, 4.0, 8.0)
    )
    assert cal.EPSILON_MEMO.info()["hits"] == len(variants) + 1
    # exact keys: floats by their bits, numbers with their type, None for what has no exact key
    assert cal.event_key(G(0.0)) != cal.event_key(G(-0.0))
    assert cal.event_key(G(1)) != cal.event_key(G(1.0)) != cal.event_key(G(np.float32(1.0)))
    assert cal.event_key(G(1.0)) == cal.event_key(G(1.0)) != cal.event_key(G(math.nextafter(1.0, 2.0)))
    assert cal.event_key(dp_accounting.ComposedDpEvent([G(1.0), np.ones(2)])) is None


def test_what_has_no_exact_key_is_computed_every_time_and_never_stored():
    held = dp_accounting.SelfComposedDpEvent(G(np.array(2.0)), 3)  # a multiplier held in an array
    assert cal.event_key(held) is None
    assert cal.memoised_epsilon(held, 1e-5, "pld") == epsilon_of_event(held, 1e-5, "pld")
    assert cal.EPSILON_MEMO.info()["size"] == 0
    # orders in an array are keyed by their elements (numpy floats, with their type)
    assert cal.memoised_epsilon(G(1.0), 1e-5, "rdp", orders=np.array([2.0, 4.0])) == epsilon_of_event(
        G(1.0), 1e-5, "rdp", orders=np.array([2.0, 4.0])
    )
    assert cal.EPSILON_MEMO.info()["size"] == 1


def test_the_ledger_settings_are_part_of_the_key(monkeypatch):
    before = cal.memoised_epsilon(G(1.0), 1e-5, "pld")
    # above PLD_MAX_EPSILON the ledger reports the (looser) RDP epsilon: a stale entry would hide it
    monkeypatch.setattr(ledger, "PLD_MAX_EPSILON", 1.0)
    after = cal.memoised_epsilon(G(1.0), 1e-5, "pld")
    assert after == epsilon_of_event(G(1.0), 1e-5, "pld") == epsilon_of_event(G(1.0), 1e-5, "rdp") > before
    monkeypatch.undo()
    assert cal.memoised_epsilon(G(1.0), 1e-5, "pld") == before
    assert cal.EPSILON_MEMO.info()["size"] == 2


def test_the_memo_is_bounded_and_keeps_no_failure():
    memo = cal.EpsilonMemo(maxsize=2)
    calls = []
    value = lambda v: lambda: calls.append(v) or float(v)
    assert [memo.get("a", value(1)), memo.get("b", value(2)), memo.get("a", value(9))] == [1.0, 2.0, 1.0]
    assert memo.get("c", value(3)) == 3.0  # evicts the least recently used, "b"
    assert memo.get("b", value(4)) == 4.0 and calls == [1, 2, 3, 4]
    assert memo.get(None, value(5)) == 5.0 and memo.get(None, value(6)) == 6.0  # no key: always computed

    def fail():
        raise ValueError("accountant failed")

    with pytest.raises(ValueError, match="accountant failed"):
        memo.get("d", fail)
    assert memo.get("d", value(7)) == 7.0
    assert memo.info() == {"hits": 1, "misses": 5, "size": 2, "maxsize": 2}
