"""Private counts, global mean and head restriction (spec 004 §5)."""

import math

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from test_allocation_helpers import interaction_matrices

from privrec.allocation import (
    head_items,
    keyed_uniform,
    private_global_mean,
    private_head_items,
    private_item_counts,
    sampled_item_counts,
    sampling_key,
)
from privrec.allocation._rows import sample_per_row
from privrec.privacy import PrivacyLedger


@settings(max_examples=60, deadline=None)
@given(interaction_matrices(), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_removing_one_user_moves_sampled_counts_by_at_most_sqrt_count_sample(m, k, seed):
    # The sample of each user depends only on that user's row and randomness, so the sample of the
    # neighbour D - {j} is the sample of D without j's entries: measure that difference.
    keep = sample_per_row(m.indptr, m.indices, k, seed)
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    assert np.all(np.bincount(rows[keep], minlength=m.shape[0]) == np.minimum(np.diff(m.indptr), k))
    full = np.bincount(m.indices[keep], minlength=m.shape[1])
    for j in range(m.shape[0]):
        other = keep & (rows != j)
        diff = full - np.bincount(m.indices[other], minlength=m.shape[1])
        assert np.linalg.norm(diff) <= math.sqrt(k) + 1e-12


@settings(max_examples=40, deadline=None)
@given(interaction_matrices(), st.integers(0, 2**31 - 1))
def test_counts_without_noise_and_full_sample_are_exact_and_neighbour_bound_holds(m, seed):
    k = max(1, int(np.diff(m.indptr).max()))  # no subsampling: deterministic
    exact = np.maximum(np.diff(m.tocsc().indptr).astype(float), 1.0)
    stat = private_item_counts(m, k, 0.0, rng=seed)
    np.testing.assert_array_equal(stat.value, exact)
    assert isinstance(stat.event, dp_accounting.NonPrivateDpEvent)
    raw = np.diff(m.tocsc().indptr).astype(float)
    for j in range(m.shape[0]):
        keep = np.ones(m.shape[0], bool)
        keep[j] = False
        nb = np.diff(m[keep].tocsc().indptr).astype(float)
        assert np.linalg.norm(raw - nb) <= math.sqrt(k) + 1e-12


def test_sampling_is_uniform_within_rows():
    indptr = np.array([0, 6, 8])  # row 0 has 6 entries, row 1 has 2
    indices = np.array([0, 1, 2, 3, 4, 5, 0, 1])
    rng = np.random.default_rng(0)
    freq = np.zeros(8)
    n = 6000
    for _ in range(n):
        freq += sample_per_row(indptr, indices, 2, sampling_key(rng))
    np.testing.assert_allclose(freq[:6] / n, 2 / 6, atol=0.025)
    np.testing.assert_array_equal(freq[6:], n)


def test_sampling_depends_on_global_coordinates_not_on_blocks():
    """Counter-based sampling: a block of rows sampled on its own (with its global row offset)
    keeps exactly the entries the whole matrix keeps (what the distributed fit relies on)."""
    rng = np.random.default_rng(4)
    m = sp.random(200, 60, density=0.3, format="csr", random_state=1)
    key = sampling_key(rng)
    whole = sample_per_row(m.indptr, m.indices, 5, key)
    parts = [sample_per_row(m[a:b].indptr, m[a:b].indices, 5, key, row_offset=a) for a, b in ((0, 70), (70, 200))]
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    counts = sampled_item_counts(m, 5, key)
    np.testing.assert_array_equal(counts, sampled_item_counts(m[:70], 5, key) + sampled_item_counts(m[70:], 5, key, 70))
    # the draws are close to uniform and independent of the key's neighbours
    u = keyed_uniform(key, np.repeat(np.arange(1000), 50), np.tile(np.arange(50), 1000))
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert u.min() >= 0.0 and u.max() < 1.0


def test_count_noise_std_and_event():
    m = sp.csr_matrix(np.ones((50, 400), dtype=np.float32))
    stat = private_item_counts(m, 4, 2.5, rng=1)
    assert stat.event == dp_accounting.GaussianDpEvent(2.5)
    _, _, meta = stat.events[0]
    assert meta["sensitivity"] == 2.0 and meta["noise_std"] == 5.0
    # each user samples 4 of 400 items: expected exact count 0.5 per item; noise std 5
    resid = np.concatenate([private_item_counts(m, 4, 2.5, rng=s).value for s in range(20)])
    assert resid.min() >= 1.0  # floored
    led = PrivacyLedger()
    stat.record(led)
    assert led.entries[0].label == "item counts"


def test_global_mean_clips_ratings_and_is_accounted_as_two_events():
    m = sp.csr_matrix(np.array([[1.0, 100.0], [3.0, 0.0], [5.0, 2.0]], dtype=np.float32))
    stat = private_global_mean(m, count_sample=2, noise_multiplier=0.0, rating_bound=5.0, rng=0)
    assert stat.value == pytest.approx((1 + 5 + 3 + 5 + 2) / 5)  # 100 clipped to 5
    noisy = private_global_mean(m, 2, 3.0, 5.0, rng=0)
    assert [e for _, e, _ in noisy.events] == [dp_accounting.GaussianDpEvent(3.0)] * 2
    metas = [meta for _, _, meta in noisy.events]
    assert metas[0]["sensitivity"] == 10.0 and metas[0]["noise_std"] == 30.0
    assert metas[1]["sensitivity"] == 2.0 and metas[1]["noise_std"] == 6.0
    assert -5.0 <= noisy.value <= 5.0


def test_global_mean_is_accurate_at_scale():
    rng = np.random.default_rng(0)
    m = sp.random(3000, 200, density=0.1, format="csr", random_state=1, dtype=np.float32)
    m.data[:] = rng.integers(1, 6, m.nnz)
    vals = [private_global_mean(m, 10, 1.0, 5.0, rng=s).value for s in range(5)]
    assert np.mean(vals) == pytest.approx(m.data.mean(), abs=0.05)


def test_head_items():
    counts = np.array([5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, 10.0])
    np.testing.assert_array_equal(head_items(counts, 0.3), [2, 6, 9])
    assert head_items(counts, 0.01).tolist() == [9]
    m = sp.csr_matrix(np.eye(10, dtype=np.float32))
    stat = private_head_items(m, 0.5, 1, 1.0, rng=0)
    assert stat.value.size == 5 and stat.event == dp_accounting.GaussianDpEvent(1.0)
    assert stat.info["counts"].shape == (10,)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: private_item_counts(m, 0, 1.0),
        lambda m: private_item_counts(m, 2, -1.0),
        lambda m: private_item_counts(m.toarray(), 2, 1.0),
        lambda m: private_item_counts(m.tocsc(), 2, 1.0),
        lambda m: private_global_mean(m, 2, 1.0, 0.0),
        lambda m: private_global_mean(m, 2, 1.0, -5.0),
        lambda m: head_items(np.ones(3), 0.0),
        lambda m: head_items(np.ones(3), 1.5),
        lambda m: private_item_counts(
            sp.csr_matrix((np.ones(2), np.array([1, 1]), np.array([0, 2])), shape=(1, 3)), 2, 1.0
        ),
    ],
)
def test_bad_input(call):
    m = sp.csr_matrix(np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError):
        call(m)
