"""Issue 43: the non-private explicit ALS yardstick follows the rating scale (at least the global mean
on any scale), and ``privrec similar`` on a model without factors says what would give it factors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.cli import main
from privrec.evaluation import experiment as X
from privrec.models import ALS


def _noisy_ratings(low: float, high: float, n_users=1200, n_items=80, seed=0):
    """Jester-like ratings on [low, high]: dense-ish, weak rank-3 structure under heavy noise."""
    rng = np.random.default_rng(seed)
    mid, half = (low + high) / 2.0, (high - low) / 2.0
    U, V = rng.normal(size=(n_users, 3)), rng.normal(size=(n_items, 3))
    r, c = np.nonzero(rng.random((n_users, n_items)) < 0.4)
    y = 0.1 * (U[r] * V[c]).sum(1) + rng.normal(0, 0.48, size=r.size) + rng.normal(0, 0.15, size=n_items)[c]
    y = np.clip(mid + half * (0.1 + y), low, high)
    R = sp.csr_matrix((y, (r, c)), shape=(n_users, n_items))
    test = rng.random(R.nnz) < 0.2
    coo = R.tocoo()
    train = sp.csr_matrix((coo.data[~test], (coo.row[~test], coo.col[~test])), shape=R.shape)
    held = (coo.row[test], coo.col[test], coo.data[test])
    return train, held


def _rmse(model, train, held) -> float:
    rows, cols, y = held
    return float(np.sqrt(np.mean((model.predict(rows, cols) - y) ** 2)))


@pytest.mark.parametrize("scale", [(-10.0, 10.0), (0.5, 5.0)])
@pytest.mark.parametrize("declared", [False, True])
def test_explicit_als_is_at_least_the_global_mean_on_any_scale(scale, declared):
    train, held = _noisy_ratings(*scale)
    mean_rmse = float(np.sqrt(np.mean((held[2] - train.data.mean()) ** 2)))
    kw = {"rating_range": scale} if declared else {}
    als = ALS(random_state=0, **kw).fit(train, show_progress=False)
    assert als.rating_scale_ == pytest.approx((scale[1] - scale[0]) / 4.0)
    assert _rmse(als, train, held) <= mean_rmse
    # in the data's own units the default ridge is too weak on the wide scale
    raw = ALS(random_state=0, rating_scale=1.0, **kw).fit(train, show_progress=False)
    if scale == (-10.0, 10.0):
        assert _rmse(raw, train, held) > _rmse(als, train, held)


def test_the_fit_on_a_wider_scale_is_the_rescaled_fit():
    data = X.load_data("synthetic-skew", scale=0.2, seed=0)
    R = sp.csr_matrix(data.matrix, dtype=np.float64)
    stars = R.copy()
    stars.data = 1.0 + (stars.data - 0.5) * (4.0 / 4.5)  # 0.5-5 -> 1-5: span 4, s = 1
    wide = stars.copy()
    wide.data = (wide.data - 3.0) * 5.0  # 1-5 -> [-10, 10]: s = 5
    kw = dict(factors=4, iterations=3, dtype=np.float64, random_state=0, solver="cholesky")
    a = ALS(**kw).fit(stars, show_progress=False)
    b = ALS(**kw).fit(wide, show_progress=False)
    assert float(a.rating_scale_) == 1.0 and float(b.rating_scale_) == pytest.approx(5.0)
    np.testing.assert_allclose(b.item_factors_, np.sqrt(5.0) * a.item_factors_, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.item_bias_, 5.0 * a.item_bias_, rtol=1e-4, atol=1e-6)
    rows = np.arange(20)
    cols = np.arange(20) % R.shape[1]
    np.testing.assert_allclose(b.predict(rows, cols), 5.0 * (a.predict(rows, cols) - 3.0), rtol=1e-4, atol=1e-5)
    # the projection of a user's own ratings (recalculate_user / transform) follows the same scale
    np.testing.assert_allclose(b.transform(wide[:10]), np.sqrt(5.0) * a.transform(stars[:10]), rtol=1e-4, atol=1e-6)


def test_rating_scale_survives_save_and_load(tmp_path):
    train, held = _noisy_ratings(-10.0, 10.0, n_users=300)
    als = ALS(factors=4, iterations=2, random_state=0).fit(train, show_progress=False)
    path = tmp_path / "als.npz"
    als.save(path)
    loaded = ALS.load(path)
    assert float(loaded.rating_scale_) == pytest.approx(float(als.rating_scale_))
    np.testing.assert_allclose(loaded.transform(train[:5]), als.transform(train[:5]), rtol=1e-5, atol=1e-6)


def test_implicit_feedback_is_not_rescaled():
    R = sp.csr_matrix(np.random.default_rng(0).poisson(2.0, size=(60, 30)).astype(np.float32))
    m = ALS(feedback="implicit", factors=4, iterations=2, random_state=0).fit(R, show_progress=False)
    assert float(m.rating_scale_) == 1.0


def test_rating_scale_must_be_finite_and_positive():
    R = sp.csr_matrix(np.ones((5, 4)))
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="rating_scale"):
            ALS(rating_scale=bad).fit(R, show_progress=False)


def test_similar_on_a_model_without_factors_speaks_cli(tmp_path, capsys):
    path = tmp_path / "m.npz"
    rc = main(["fit", "--scale", "0.2", "--quiet", "--noise-seed", "1", "-o", str(path)])
    assert rc == 0
    capsys.readouterr()
    rc = main(["similar", "--model", str(path), "--item", "3", "--scale", "0.2", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--factors 8" in err and "factors=" not in err  # CLI words, not Python syntax
    assert "users" in err and "--epsilon" in err and "privacy" in err  # what gives factors, what it costs
