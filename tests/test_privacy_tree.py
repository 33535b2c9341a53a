"""Binary-tree mechanism: spec 001 fact 5 (cover, per-leaf nodes, exactness, variance) and its DpEvent."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp
from dp_accounting.privacy_accountant import NeighboringRelation

from privrec.privacy import (
    PrivacyLedger,
    TreeAggregator,
    epsilon_from_report,
    leaf_nodes,
    node_multiplier_for,
    node_range,
    prefix_nodes,
    tree_depth,
)


def test_spec_example_g7():
    assert prefix_nodes(7) == [(1, 2), (3, 1), (7, 0)]
    assert [node_range(*n) for n in prefix_nodes(7)] == [(1, 4), (5, 6), (7, 7)]


@pytest.mark.parametrize("T", [1, 2, 3, 7, 8, 13, 64, 100])
def test_prefix_cover_and_per_leaf_counts(T):
    for m in range(1, T + 1):
        nodes = prefix_nodes(m)
        assert len(nodes) == bin(m).count("1") <= max(1, math.ceil(math.log2(T)))
        covered = []
        for j, k in nodes:
            assert j % 2 == 1
            lo, hi = node_range(j, k)
            covered.extend(range(lo, hi + 1))
        assert covered == list(range(1, m + 1))  # exact cover, no overlap, in order
    # every prefix node is a tree node containing its leaves
    for leaf in range(1, T + 1):
        nodes = leaf_nodes(leaf, T)
        assert len(nodes) <= tree_depth(T) == 1 + math.ceil(math.log2(T))
        for j, k in nodes:
            lo, hi = node_range(j, k)
            assert lo <= leaf <= hi <= T


def test_noise_off_gives_exact_prefix_sums():
    rng = np.random.default_rng(0)
    leaves = rng.standard_normal((37, 5))
    tree = TreeAggregator((5,), 37, sensitivity=1.0, noise_multiplier=0.0, dtype=np.float64)
    out = np.array([tree.add(x) for x in leaves])
    np.testing.assert_allclose(out, np.cumsum(leaves, axis=0), atol=1e-12)
    assert isinstance(tree.event, dp_accounting.NonPrivateDpEvent)
    with pytest.raises(ValueError, match="37 leaves"):
        tree.add(leaves[0])
    with pytest.raises(ValueError, match="shape"):
        TreeAggregator((5,), 3, 1.0, 0.0).add(np.zeros(4))


def test_prefix_noise_variance_is_popcount_sigma2():
    # zero leaves, many coordinates: the prefix value is pure noise, iid per coordinate
    T, p, sens, z = 15, 40000, 0.5, 2.0
    sigma = sens * z
    tree = TreeAggregator((p,), T, sens, z, random_state=1, dtype=np.float64)
    for m in range(1, T + 1):
        noise = tree.add(np.zeros(p))
        expected = bin(m).count("1") * sigma**2
        # sample variance of p iid normals: relative sd sqrt(2/p) ~ 0.7%
        assert abs(noise.var() / expected - 1) < 0.04, (m, noise.var(), expected)
        assert abs(noise.mean()) < 5 * math.sqrt(expected / p)


def test_event_is_gaussian_with_depth_reduced_multiplier_and_safe():
    T, z = 100, 3.0
    tree = TreeAggregator((2,), T, 1.0, z)
    ev = tree.event
    assert isinstance(ev, dp_accounting.GaussianDpEvent)
    assert ev.noise_multiplier == pytest.approx(z / math.sqrt(1 + math.ceil(math.log2(T))))
    assert node_multiplier_for(ev.noise_multiplier, T) == pytest.approx(z)
    # compare with dp_accounting's own tree accounting (REPLACE_SPECIAL relation): ours is never
    # less conservative (its RDP >= theirs at every order)
    orders = [1.5, 2.0, 4.0, 8.0, 32.0]
    ours = rdp.RdpAccountant(orders)
    ours.compose(ev)
    theirs = rdp.RdpAccountant(orders, NeighboringRelation.REPLACE_SPECIAL)
    theirs.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(z, T))
    assert np.all(np.asarray(ours._rdp) >= np.asarray(theirs._rdp) * (1 - 1e-9))
    ledger = PrivacyLedger()
    tree.record(ledger, "tree")
    rep = ledger.report(1e-6)
    assert epsilon_from_report(rep) == pytest.approx(ledger.epsilon(1e-6), rel=1e-9)


def test_removing_one_leaf_changes_every_node_vector_by_at_most_declared_sensitivity():
    # the stacked exact node sums move by <= C sqrt(depth) when one leaf changes by <= C
    rng = np.random.default_rng(3)
    T, C = 21, 1.0
    leaves = rng.standard_normal((T, 3))
    for changed in range(1, T + 1):
        other = leaves.copy()
        d = rng.standard_normal(3)
        other[changed - 1] += C * d / np.linalg.norm(d)
        nodes = [(j, k) for leaf in range(1, T + 1) for (j, k) in leaf_nodes(leaf, T)]
        nodes = sorted(set(nodes))
        a = np.array([leaves[node_range(j, k)[0] - 1 : node_range(j, k)[1]].sum(0) for j, k in nodes])
        b = np.array([other[node_range(j, k)[0] - 1 : node_range(j, k)[1]].sum(0) for j, k in nodes])
        assert np.linalg.norm(a - b) <= C * math.sqrt(tree_depth(T)) + 1e-12
