"""ALS(feedback="implicit"): confidence-weighted ALS (Hu, Koren & Volinsky 2008) with the Gramian trick,
against the paper's dense normal equations and implicit's own solver; the CLI's ranking yardstick
(experiment.implicit_als_params) against an ALS tuned on validation users, on generated data and on
Last.fm when present."""

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.evaluation import experiment as X
from privrec.models import ALS, ImplicitALS, load_model
from privrec.models.als import implicit_half_step


def _counts(n_users=30, n_items=20, density=0.25, seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < density
    mask[3] = False  # a user without interactions
    vals = rng.integers(1, 9, size=mask.shape).astype(np.float32)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


def _dense_hu(R, Y, reg, alpha):
    """Hu et al. (2008) eq. 4 row by row: (Y^T C_u Y + reg I)^-1 Y^T C_u p_u over *all* items."""
    D = R.toarray().astype(np.float64)
    Y = Y.astype(np.float64)
    out = np.zeros((D.shape[0], Y.shape[1]))
    for u in range(D.shape[0]):
        c = 1.0 + alpha * D[u]
        p = (D[u] > 0).astype(np.float64)
        A = (Y * c[:, None]).T @ Y + reg * np.eye(Y.shape[1])
        out[u] = np.linalg.solve(A, (Y * c[:, None]).T @ p)
    return out


@pytest.mark.parametrize("d", [3, 12])  # rows shorter and longer than d: dual and primal exact paths
def test_implicit_half_step_equals_the_dense_normal_equations(d):
    R = _counts()
    Y = np.random.default_rng(1).standard_normal((R.shape[1], d))
    reg, alpha = 0.7, 2.5
    got = implicit_half_step(R, Y, np.full(R.shape[0], reg), alpha, solver="cholesky")
    np.testing.assert_allclose(got, _dense_hu(R, Y, reg, alpha), rtol=1e-9, atol=1e-9)
    assert np.all(got[3] == 0)  # no interactions: x = 0 solves (Y^T Y + reg I) x = 0
    # CG from the exact solution stays there
    cg = implicit_half_step(R, Y, np.full(R.shape[0], reg), alpha, solver="cg", x0=got.copy())
    np.testing.assert_allclose(cg, got, rtol=1e-6, atol=1e-8)


def test_implicit_half_step_matches_implicits_own_least_squares():
    """implicit weights an entry by its value c (c - 1 on the Gramian), so implicit on 1 + alpha r with
    its alpha = 1 is Hu et al.'s confidence 1 + alpha r: the same user solve as privrec's."""
    R = _counts(seed=2)
    d, reg, alpha = 6, 0.3, 4.0
    Y = np.random.default_rng(3).standard_normal((R.shape[1], d)).astype(np.float32)
    ours = implicit_half_step(R, Y, np.full(R.shape[0], reg, np.float32), alpha, solver="cholesky")
    ref = ImplicitALS(factors=d, regularization=reg, alpha=1.0, use_cg=False, num_threads=1)
    ref.item_factors_ = Y
    C = R.copy()
    C.data = 1.0 + alpha * C.data
    theirs = ref.recalculate_user(np.arange(R.shape[0]), C)
    np.testing.assert_allclose(ours, theirs, rtol=2e-4, atol=2e-4)


def test_fit_is_the_confidence_weighted_model_and_projects_users_exactly():
    R = _counts(60, 40, seed=4)
    m = ALS(feedback="implicit", factors=5, iterations=4, alpha=3.0, regularization=2.0, reg_exponent=0.0)
    m.fit(R, show_progress=False)
    assert m.user_bias_ is None and m.item_bias_ is None and float(m.global_mean_) == 0.0
    assert m.config_["feedback"] == "implicit" and m.config_["biases"] is False and m.config_["alpha"] == 3.0
    # recalculate_user is the exact user step on the fitted item factors (the billboard projection)
    rows = R[[0, 5, 7]]
    expect = _dense_hu(rows, m.item_factors_, 2.0, 3.0)
    np.testing.assert_allclose(m.recalculate_user([0, 5, 7], rows), expect, rtol=1e-3, atol=1e-4)
    # the values are confidences: counts weigh more than a binarised copy; a stored 0 is no interaction
    B = R.copy()
    B.data[:] = 1.0
    p = dict(feedback="implicit", factors=5, iterations=2, random_state=0, solver="cholesky")
    a = ALS(**p).fit(R, show_progress=False)
    assert not np.allclose(a.item_factors_, ALS(**p).fit(B, show_progress=False).item_factors_)
    Z = R.copy()
    Z.data[0] = 0.0  # an explicit zero, still stored
    dropped = Z.copy()
    dropped.eliminate_zeros()
    np.testing.assert_array_equal(
        ALS(**p).fit(Z, show_progress=False).item_factors_, ALS(**p).fit(dropped, show_progress=False).item_factors_
    )


def test_implicit_rejects_what_it_cannot_mean():
    R = _counts()
    neg = R.copy()
    neg.data[0] = -1.0
    with pytest.raises(ValueError, match="non-negative"):
        ALS(feedback="implicit", iterations=1).fit(neg, show_progress=False)
    with pytest.raises(ValueError, match="no separate unobserved_weight"):
        ALS(feedback="implicit", unobserved_weight=0.2, iterations=1).fit(R, show_progress=False)
    with pytest.raises(ValueError, match="alpha"):
        ALS(feedback="implicit", alpha=0.0).fit(R, show_progress=False)
    with pytest.raises(ValueError, match="ratings"):  # scores rank, they are not ratings
        ALS(feedback="implicit", iterations=1).fit(R, show_progress=False).score(R)


def test_save_load_keeps_the_implicit_model(tmp_path):
    R = _counts(50, 30, seed=5)
    m = ALS(feedback="implicit", factors=4, iterations=2, random_state=0).fit(R, show_progress=False)
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert back.feedback == "implicit" and back.alpha == m.alpha
    np.testing.assert_allclose(back.recalculate_user(1, R[1]), m.recalculate_user(1, R[1]), rtol=1e-5, atol=1e-6)
    assert back.describe()["config"] == m.describe()["config"]


def test_yardstick_rule_reads_only_the_public_shape():
    big, small = X.implicit_als_params(5000, 2000), X.implicit_als_params(40, 30)
    assert big["factors"] == 64 and small["factors"] == 8 and X.implicit_als_params(300, 200)["factors"] == 20
    assert {k: v for k, v in big.items() if k != "factors"} == {k: v for k, v in small.items() if k != "factors"}
    y = X.make_yardstick((300, 200), "heldout-users", {"iterations": 3}, seed=0)
    assert y.feedback == "implicit" and y.iterations == 3 and y.random_state == 0
    assert X.make_yardstick((300, 200), "random").feedback == "explicit"


def _tuned_als(split, factors):
    """Explicit ALS with gravity, ridge / gravity chosen on the validation users (as examples/lastfm.py)."""
    from privrec.evaluation.protocols import evaluate_heldout

    best = None
    for reg in (2.0, 20.0):
        for grav in (0.05, 0.2):
            m = ALS(factors=factors, regularization=reg, unobserved_weight=grav, biases=False, center=False)
            m.set_params(random_state=0).fit(split.train, show_progress=False)
            v = evaluate_heldout(m, split.train, split.validation_history, split.validation_targets, k=20)
            if best is None or v["metrics"]["recall@20"] > best[0]:
                best = (v["metrics"]["recall@20"], m)
    return best[1]


def _clustered(seed, n_users=500, n_items=300, k=10, per_user=20, own=0.8):
    """Play counts with taste: each user draws most items from their own cluster of items (Zipf
    popularity within), so a personal model must beat the popularity ranking."""
    from privrec.data import Interactions

    rng = np.random.default_rng(seed)
    clusters = np.array_split(rng.permutation(n_items), k)
    pop = (1.0 / np.arange(1, n_items + 1) ** 0.8)[rng.permutation(n_items)]
    users, items = [], []
    for u in range(n_users):
        w = np.full(n_items, (1 - own) / n_items)
        w[clusters[rng.integers(k)]] += own / (n_items // k)
        w *= pop
        n = int(rng.integers(per_user // 2, per_user * 2))
        users += [u] * n
        items += list(rng.choice(n_items, size=n, replace=False, p=w / w.sum()))
    counts = rng.integers(1, 20, len(users)).astype(np.float32)
    return Interactions.from_arrays(np.array(users), np.array(items), counts, name="clustered")


def test_yardstick_is_not_a_straw_man_on_generated_data():
    """On generated play counts with taste clusters, the rule's test Recall@20 is within 10% of an ALS
    whose ridge and gravity were tuned on the validation users, and far above popularity."""
    from privrec.evaluation import recall_at_k

    split = X.make_split(_clustered(0), "heldout-users", seed=0, heldout_users=80)
    y = X.make_yardstick(split.train.shape, split.protocol, seed=0).fit(split.train, show_progress=False)
    ours = X.evaluate_split(y, split)["metrics"]["recall@20"]
    tuned = X.evaluate_split(_tuned_als(split, y.factors), split)["metrics"]["recall@20"]
    counts = np.diff(split.train.tocsc().indptr).astype(np.float32)
    none = np.zeros((split.history.shape[0], 0), np.float32)
    pop = recall_at_k(none, np.zeros((counts.size, 0), np.float32), split.targets, split.history, 20, item_bias=counts)
    assert ours >= 0.9 * tuned
    assert ours > 2 * pop


LASTFM = Path(os.environ.get("PRIVREC_DATA", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


@pytest.mark.slow
def test_cli_yardstick_on_lastfm_is_within_ten_percent_of_the_tuned_example_als():
    """Issue 27: the CLI's ranking yardstick on Last.fm (its own split) against the ALS tuned on Last.fm's
    validation users in examples/lastfm.py (ridge 2, gravity 0.05), on the same split."""
    folder = LASTFM / "hetrec2011-lastfm-2k"
    if not (folder / "user_artists.dat").is_file():
        pytest.skip("Last.fm data not available")
    data = X.load_data("lastfm-2k", folder)
    split = X.make_split(data, X.default_protocol("lastfm-2k"), seed=0)
    y = X.make_yardstick(split.train.shape, split.protocol, seed=0).fit(split.train, show_progress=False)
    example = ALS(
        factors=64, regularization=2.0, unobserved_weight=0.05, biases=False, center=False, random_state=0
    ).fit(split.train, show_progress=False)
    ours = X.evaluate_split(y, split)["metrics"]["recall@20"]
    ref = X.evaluate_split(example, split)["metrics"]["recall@20"]
    assert ours >= 0.9 * ref
