"""Synthetic generators (spec 004 §7): Appendix C multi-task regression and skewed low-rank data."""

import numpy as np
import pytest

from privrec.data.synthetic import (
    PRESETS,
    calibrate_exponent,
    generate_preset,
    low_rank_interactions,
    multitask_regression,
)


def _top10_share(x):
    c = np.sort(x.item_counts)[::-1]
    return c[: int(np.ceil(0.1 * x.n_items))].sum() / c.sum()


def test_multitask_regression_appendix_c_facts():
    d = multitask_regression(n_users=2000, n_tasks=100, dim=5, power=2.0, random_state=1)
    assert d.features.shape == (2000, 5) and d.task_params.shape == (100, 5)
    assert np.all(np.linalg.norm(d.features, axis=1) <= 1 + 1e-6)
    assert np.all(np.linalg.norm(d.task_params, axis=1) <= 1 + 1e-6)
    assert d.task_probs.sum() == pytest.approx(20.0)
    total = d.train.n_examples + d.test.n_examples
    assert total / 2000 == pytest.approx(20.0, rel=0.05)  # ~20 tasks per user
    assert d.train.n_examples / total == pytest.approx(0.8, abs=0.01)
    # labels are <u_j, theta_i> + tiny noise
    t = d.train.task_ids()
    pred = np.einsum("ij,ij->i", d.features[d.train.feature_ids], d.task_params[t])
    assert np.max(np.abs(pred - d.train.labels)) < 1e-2
    # per-task counts follow q_i * n (binomial)
    counts = d.train.task_counts + d.test.task_counts
    assert np.corrcoef(counts, d.task_probs)[0, 1] > 0.99
    # train/test pairs are disjoint and users sorted within each task
    csr_tr, csr_te = d.train.to_csr(2000), d.test.to_csr(2000)
    assert csr_tr.multiply(csr_te).nnz == 0
    assert csr_tr.has_sorted_indices or np.all(np.diff(d.train.feature_ids[: d.train.indptr[1]]) > 0)


def test_multitask_regression_seeded_and_validated():
    a = multitask_regression(n_users=300, random_state=5)
    b = multitask_regression(n_users=300, random_state=5)
    np.testing.assert_array_equal(a.train.labels, b.train.labels)
    with pytest.raises(ValueError):
        multitask_regression(n_users=0)
    with pytest.raises(ValueError):
        multitask_regression(n_tasks=10, tasks_per_user=20)


def test_synthetic_skew_preset_statistics():
    d = generate_preset("synthetic-skew")
    x = d.interactions
    pr = PRESETS["synthetic-skew"]
    assert (x.n_users, x.n_items, x.nnz) == (pr.n_users, pr.n_items, pr.n_interactions)
    assert x.user_counts.min() >= pr.min_per_user
    assert x.user_counts.max() <= pr.max_user_fraction * pr.n_items
    assert _top10_share(x) == pytest.approx(0.86, abs=0.03)
    # heavy-tailed activity: mean well above median
    assert x.user_counts.mean() > 1.4 * np.median(x.user_counts)
    vals = np.unique(x.matrix.data)
    assert vals.min() >= 0.5 and vals.max() <= 5.0 and np.all(vals * 2 == np.round(vals * 2))
    # planted ground truth explains the ratings (noise sd 0.5 + half-star rounding + clipping)
    u, i, v = x.coo_arrays()
    resid = v - d.expected(u, i)
    assert np.sqrt(np.mean(resid**2)) < 0.65
    assert np.corrcoef(v, d.expected(u, i))[0, 1] > 0.6


@pytest.mark.parametrize("name,scale", [("ml20m-like", 0.005), ("ml10m-like", 0.005), ("msd-like", 0.001)])
def test_scaled_presets_keep_skew_and_shape(name, scale):
    pr = PRESETS[name]
    x = generate_preset(name, scale=scale, random_state=3).interactions
    assert x.n_items == pr.n_items
    assert x.n_users == round(pr.n_users * scale)
    assert x.nnz == max(x.n_users * pr.min_per_user, round(pr.n_interactions * scale))
    assert x.user_counts.min() >= pr.min_per_user
    assert _top10_share(x) == pytest.approx(pr.top10_share, abs=0.05)
    if pr.values == "counts":
        assert x.matrix.data.min() >= 1 and np.all(x.matrix.data == np.round(x.matrix.data))


def test_skew_is_controllable_and_seeded():
    lo = low_rank_interactions(2000, 1000, 40000, top10_share=0.4, random_state=0).interactions
    hi = low_rank_interactions(2000, 1000, 40000, top10_share=0.8, random_state=0).interactions
    assert _top10_share(lo) == pytest.approx(0.4, abs=0.03)
    assert _top10_share(hi) == pytest.approx(0.8, abs=0.03)
    again = low_rank_interactions(2000, 1000, 40000, top10_share=0.8, random_state=0).interactions
    assert (again.matrix != hi.matrix).nnz == 0
    # a different seed gives different data
    other = low_rank_interactions(2000, 1000, 40000, top10_share=0.8, random_state=1).interactions
    assert (other.matrix != hi.matrix).nnz > 0


def test_unreachable_skew_warns_and_calibration_monotone():
    with pytest.warns(UserWarning, match="out of reach"):
        low_rank_interactions(200, 50, 2000, top10_share=0.95, min_per_user=5, random_state=0)
    k = np.full(1000, 20)
    a1, s1 = calibrate_exponent(k, 5000, 0.5)
    a2, s2 = calibrate_exponent(k, 5000, 0.8)
    assert a1 < a2 and s1 == pytest.approx(0.5, abs=0.01) and s2 == pytest.approx(0.8, abs=0.01)


def test_bad_generator_arguments():
    with pytest.raises(ValueError, match="unknown synthetic preset"):
        generate_preset("ml-1b-like")
    with pytest.raises(ValueError):
        low_rank_interactions(10, 10, 10, min_per_user=5)  # fewer than 10 * 5
    with pytest.raises(ValueError):
        low_rank_interactions(10, 10, 100, values="stars")


def _heldout_recall(d, score_fn, n_test=400, hold=0.2, k=20, seed=0):
    """Recall@k of ranking each test user's unseen items by ``score_fn(users, items)`` (history excluded)."""
    x = d.interactions.matrix
    rng = np.random.default_rng(seed)
    users = rng.choice(x.shape[0], size=n_test, replace=False)
    hits = denom = 0.0
    for u in users:
        items = x.indices[x.indptr[u] : x.indptr[u + 1]]
        mask = rng.random(len(items)) < hold
        if not mask.any() or mask.all():
            continue
        target, seen = items[mask], items[~mask]
        s = score_fn(np.full(x.shape[1], u), np.arange(x.shape[1]))
        s[seen] = -np.inf
        top = np.argpartition(-s, k)[:k]
        hits += np.isin(target, top).sum()
        denom += min(k, len(target))
    return hits / denom


def test_observation_is_personalised_by_planted_taste():
    d = generate_preset("synthetic-skew", random_state=2)
    assert d.interactions.info["affinity"] > 0 and d.interactions.info["oversample"] > 2
    assert _top10_share(d.interactions) == pytest.approx(0.86, abs=0.04)
    assert d.interactions.info["top10_share"] == pytest.approx(_top10_share(d.interactions))
    u, i, _ = d.interactions.coo_arrays()
    dots = np.einsum("ij,ij->i", d.user_factors[u], d.item_factors[i])
    assert dots.mean() > 0.3  # observed pairs lean towards the user's taste
    tau = d.interactions.info["affinity"]
    logp = np.log(d.popularity)
    pop = _heldout_recall(d, lambda uu, ii: logp[ii])
    taste = _heldout_recall(
        d, lambda uu, ii: logp[ii] + tau * np.einsum("ij,ij->i", d.user_factors[uu], d.item_factors[ii])
    )
    assert taste > 1.3 * pop  # planted taste + popularity beats popularity alone


def test_affinity_zero_is_missing_at_random_given_popularity():
    pr = PRESETS["synthetic-skew"]
    kw = dict(top10_share=pr.top10_share, max_user_fraction=pr.max_user_fraction, random_state=2)
    d = low_rank_interactions(pr.n_users, pr.n_items, pr.n_interactions, affinity=0.0, **kw)
    x = d.interactions
    assert x.info["affinity"] == 0.0 and x.info["oversample"] == 1.0
    assert _top10_share(x) == pytest.approx(0.86, abs=0.03)
    u, i, _ = x.coo_arrays()
    dots = np.einsum("ij,ij->i", d.user_factors[u], d.item_factors[i])
    assert abs(dots.mean()) < 0.03  # observation ignores the factors
    logp = np.log(d.popularity)
    pop = _heldout_recall(d, lambda uu, ii: logp[ii])
    taste = _heldout_recall(d, lambda uu, ii: logp[ii] + np.einsum("ij,ij->i", d.user_factors[uu], d.item_factors[ii]))
    assert taste <= pop + 0.02  # no personal signal in which items are observed
    # same planted factors as with affinity > 0 (drawn from their own stream), different pairs
    e = low_rank_interactions(pr.n_users, pr.n_items, pr.n_interactions, **kw)
    np.testing.assert_array_equal(d.user_factors, e.user_factors)
    assert (e.interactions.matrix != x.matrix).nnz > 0
    with pytest.raises(ValueError):
        low_rank_interactions(300, 100, 3000, affinity=-1.0)
    with pytest.raises(ValueError):
        low_rank_interactions(300, 100, 3000, oversample=0.5)


def test_affinity_select_blocks_do_not_change_the_data(monkeypatch):
    """_affinity_select works over blocks of users; the block size never changes the output."""
    import privrec.data.synthetic as syn

    ref = generate_preset("msd-like", 0.002, random_state=5).interactions.matrix
    for block in (1, 777):
        monkeypatch.setattr(syn, "_SELECT_BLOCK", block)
        got = generate_preset("msd-like", 0.002, random_state=5).interactions.matrix
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))


def test_affinity_select_keeps_k_per_user_sorted():
    from privrec.data.synthetic import _affinity_select

    rng = np.random.default_rng(0)
    n_users, n_items = 40, 30
    cand = np.sort(
        np.concatenate([u * n_items + rng.choice(n_items, 12, replace=False) for u in range(n_users) if u % 7])
    )  # some users have no candidate
    k = np.where(np.arange(n_users) % 7, rng.integers(1, 12, n_users), 0)
    uf = rng.standard_normal((n_users, 3)).astype(np.float32)
    vf = rng.standard_normal((n_items, 3)).astype(np.float32)
    out = _affinity_select(np.random.default_rng(1), cand, k, uf, vf, 2.0, n_items)
    assert np.all(np.diff(out) > 0) and np.all(np.isin(out, cand))
    np.testing.assert_array_equal(np.bincount(out // n_items, minlength=n_users), k)
