"""privrec as a drop-in for implicit 0.7 (issue 13 part 3).

``implicit_script`` is written against implicit 0.7's ``AlternatingLeastSquares`` API only (no
privrec names, no trailing-underscore attributes) and runs unchanged on implicit's model and on
privrec's ``DPALS`` (private, explicit and implicit feedback) and ``ALS``: only the constructor
differs, as after swapping the import.
"""

import io
import os
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from privrec.models import ALS, DPALS, ImplicitALS, PrivateReleaseError, load_model


def _user_items(n_users=60, n_items=40, seed=0):
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(n_users, 3)), rng.normal(size=(n_items, 3))
    mask = rng.random((n_users, n_items)) < 0.2
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
    vals = np.clip(np.round(3 + U @ V.T), 1, 5)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


@pytest.fixture(scope="module")
def user_items():
    return _user_items()


def _implicit_model():
    from implicit.cpu.als import AlternatingLeastSquares

    return AlternatingLeastSquares(factors=8, iterations=3, random_state=0, num_threads=1)


MODELS = {
    "implicit": _implicit_model,
    # personal="fixed": with the default per-user leave-one-out choice, a user who drops the
    # personal part has a zero embedding, so the script's "a user is most similar to themself"
    # does not hold for that user (tests/contract.py checks similar_users on users who keep one)
    "privrec-DPALS": lambda: DPALS(epsilon=5.0, factors=8, iterations=2, budget=10, random_state=0, personal="fixed"),
    "privrec-DPALS-implicit": lambda: DPALS(
        epsilon=5.0, feedback="implicit", unobserved_weight=0.2, factors=8, iterations=2, budget=10, random_state=0
    ),
    "privrec-ALS": lambda: ALS(factors=8, iterations=3, random_state=0),
}


def implicit_script(model, user_items, workdir):
    """A script for implicit 0.7 (AlternatingLeastSquares): fit, recommend, similar items / users,
    factors, partial_fit_users, rank_items, save / load (path and file object)."""
    n_users, n_items = user_items.shape
    model.fit(user_items, show_progress=False)

    # learned factors under implicit's names
    assert model.item_factors.shape[0] == n_items
    assert model.user_factors.shape == (n_users, model.item_factors.shape[1])

    # one user
    ids, scores = model.recommend(0, user_items[0], N=5)
    assert ids.shape == scores.shape == (5,)
    assert not set(ids.tolist()) & set(user_items[0].indices.tolist())
    assert np.all(np.diff(scores) <= 1e-6)

    # a batch of users, with filters
    users = np.arange(6)
    ids, scores = model.recommend(users, user_items[users], N=4, filter_items=[1, 2])
    assert ids.shape == scores.shape == (6, 4)
    assert not np.isin(ids, [1, 2]).any()
    for row, u in zip(ids, users):
        assert not set(row.tolist()) & set(user_items[u].indices.tolist())

    # candidates only, nothing filtered
    ids, _ = model.recommend(0, user_items[0], N=3, items=np.arange(10, 20), filter_already_liked_items=False)
    assert len(ids) == 3 and set(ids.tolist()) <= set(range(10, 20))

    # recomputed user
    ids, _ = model.recommend(1, user_items[1], N=5, recalculate_user=True)
    assert len(ids) == 5
    assert model.recalculate_user(1, user_items[1]).shape == (model.item_factors.shape[1],)

    # similar items / users, single and batched
    ids, scores = model.similar_items(3, N=5)
    assert ids[0] == 3 and abs(scores[0] - 1.0) < 1e-4 and len(ids) == 5
    ids, _ = model.similar_items(3, N=5, filter_items=[4, 5])
    assert not np.isin(ids, [4, 5]).any()
    ids, scores = model.similar_items(np.arange(3), N=5)
    assert ids.shape == scores.shape == (3, 5)
    ids, scores = model.similar_users(2, N=5)
    assert ids[0] == 2 and len(ids) == 5
    ids, _ = model.similar_users(np.arange(3), N=4)
    assert ids.shape == (3, 4)

    # rank a few items (implicit deprecates rank_items: still part of the 0.7 API)
    selected = np.array([7, 3, 11, 30])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ids, scores = model.rank_items(0, user_items[0], selected)
    assert sorted(ids.tolist()) == sorted(selected.tolist()) and np.all(np.diff(scores) <= 1e-6)

    # save / load: path, then file object
    reference, _ = model.recommend(np.arange(4), user_items[:4], N=5)
    path = os.path.join(workdir, "model.npz")
    model.save(path)
    loaded = type(model).load(path)
    np.testing.assert_allclose(loaded.item_factors, model.item_factors)
    ids, _ = loaded.recommend(np.arange(4), user_items[:4], N=5)
    np.testing.assert_array_equal(ids, reference)
    buf = io.BytesIO()
    model.save(buf)
    buf.seek(0)
    loaded = type(model).load(buf)
    ids, _ = loaded.recommend(0, user_items[0], N=5)
    np.testing.assert_array_equal(ids, reference[0])

    # a new user from their own history
    model.partial_fit_users([n_users], user_items[[0]])
    assert model.user_factors.shape[0] == n_users + 1
    ids, _ = model.recommend(n_users, user_items[0], N=5)
    assert not set(ids.tolist()) & set(user_items[0].indices.tolist())
    return model


@pytest.mark.parametrize("name", list(MODELS))
def test_implicit_script_runs_unchanged(name, user_items, tmp_path):
    with threadpool_limits(1, "blas"):  # implicit's BLAS check; harmless for privrec
        model = implicit_script(MODELS[name](), user_items, str(tmp_path))
    if name.startswith("privrec-DPALS"):
        assert np.isfinite(model.privacy_report()["epsilon"])


@pytest.mark.parametrize("name", ["implicit", "privrec-ALS", "privrec-DPALS"])
def test_fit_callback_contract(name, user_items):
    """implicit calls callback(iteration, elapsed_seconds, loss) after every iteration; loss may be None."""
    calls = []
    with threadpool_limits(1, "blas"):
        model = MODELS[name]()
        model.fit(user_items, show_progress=False, callback=lambda *args: calls.append(args))
    n_iter = model.iterations
    assert [c[0] for c in calls] == list(range(n_iter))
    for _it, elapsed, loss in calls:
        assert elapsed >= 0.0 and (loss is None or np.isfinite(loss))


def test_show_progress_draws_one_bar_step_per_sweep(user_items, capsys):
    ALS(factors=2, iterations=3, random_state=0).fit(user_items, show_progress=True)
    err = capsys.readouterr().err
    assert "ALS" in err and "3/3" in err
    ALS(factors=2, iterations=3, random_state=0).fit(user_items, show_progress=False)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="callback"):
        ALS(factors=2, iterations=1).fit(user_items, callback=3)


def test_recommend_without_user_items_when_not_needed(user_items):
    m = ALS(factors=4, iterations=2, random_state=0).fit(user_items, show_progress=False)
    a, _ = m.recommend(0, None, N=5, filter_already_liked_items=False)
    b, _ = m.recommend(0, user_items[0], N=5, filter_already_liked_items=False)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="user_items"):
        m.recommend(0, None, N=5)


def test_loaded_private_model_projects_users_and_needs_partial_fit_for_similar_users(user_items, tmp_path):
    dp = DPALS(epsilon=5.0, factors=6, iterations=2, budget=10, random_state=0).fit(user_items, show_progress=False)
    dp.save(tmp_path / "dp.npz")
    m = DPALS.load(tmp_path / "dp.npz")
    assert m.user_factors is None
    ids, _ = m.recommend(np.arange(5), user_items[:5], N=6)  # no recalculate_user needed
    np.testing.assert_array_equal(ids, dp.recommend(np.arange(5), user_items[:5], N=6)[0])
    with pytest.raises(ValueError, match="partial_fit_users"):
        m.similar_users(0)
    m.partial_fit_users(np.arange(user_items.shape[0]), user_items)  # billboard: free
    np.testing.assert_allclose(m.user_factors, dp.user_factors, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m.similar_users(3, N=4)[0], dp.similar_users(3, N=4)[0])


def test_private_model_refuses_item_side_updates(user_items):
    dp = DPALS(epsilon=5.0, factors=4, iterations=1, budget=10, random_state=0).fit(user_items, show_progress=False)
    item_users = user_items.T.tocsr()
    for call in (
        lambda: dp.recalculate_item(0, item_users[0]),
        lambda: dp.similar_items(0, recalculate_item=True, item_users=item_users[0]),
        lambda: dp.partial_fit_items([0], item_users[[0]]),
    ):
        with pytest.raises(PrivateReleaseError, match="privacy ledger") as info:
            call()
        assert isinstance(info.value, ValueError) and isinstance(info.value, NotImplementedError)
    # epsilon = inf is not private: the refusal does not apply (DPALS has no item solve of its own)
    inf = DPALS(epsilon=float("inf"), factors=4, iterations=1).fit(user_items, show_progress=False)
    with pytest.raises(NotImplementedError) as info:
        inf.recalculate_item(0, item_users[0])
    assert not isinstance(info.value, PrivateReleaseError)


@pytest.mark.parametrize("reg_exponent", [0.0, 1.0])
def test_als_item_recalculation_is_the_exact_item_step(user_items, reg_exponent, tmp_path):
    m = ALS(factors=5, iterations=3, reg_exponent=reg_exponent, random_state=0).fit(user_items, show_progress=False)
    item_users = user_items.T.tocsr()
    items = np.array([0, 5, 9])
    # the last half-sweep of fit solves the items with the final user side: recalculation reproduces it
    np.testing.assert_allclose(
        m.recalculate_item(items, item_users[items]), m.item_factors_[items], rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(m.recalculate_item(items, item_users), m.item_factors_[items], rtol=1e-4, atol=1e-5)
    ids, scores = m.similar_items(5, N=4, recalculate_item=True, item_users=item_users[5])
    np.testing.assert_array_equal(ids, m.similar_items(5, N=4)[0])
    m.save(tmp_path / "als.npz")  # item_reg_norm_ travels with the model
    np.testing.assert_allclose(
        ALS.load(tmp_path / "als.npz").recalculate_item(9, item_users[9]), m.item_factors_[9], rtol=1e-4, atol=1e-5
    )


def test_als_partial_fit_items_updates_and_extends(user_items):
    m = ALS(factors=4, iterations=2, random_state=0).fit(user_items, show_progress=False)
    item_users = user_items.T.tocsr()
    n_items = user_items.shape[1]
    m.partial_fit_items([n_items + 1], item_users[[3]])  # a new item rated like item 3
    assert m.item_factors.shape[0] == n_items + 2 and m.item_bias_.shape == (n_items + 2,)
    np.testing.assert_allclose(m.item_factors[n_items + 1], m.item_factors[3], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(m.item_factors[n_items], 0.0)  # the gap: an item without data
    ids, _ = m.recommend(
        0, sp.csr_matrix((1, n_items + 2), dtype=np.float32), N=n_items + 2, filter_already_liked_items=False
    )
    assert n_items + 1 in ids.tolist()


def test_implicit_wrapper_supports_the_same_script(user_items, tmp_path):
    with threadpool_limits(1, "blas"):
        m = implicit_script(
            ImplicitALS(factors=6, iterations=2, num_threads=1, random_state=0), user_items, str(tmp_path)
        )
        item_users = user_items.T.tocsr()
        f = m.recalculate_item(2, item_users[2])
        assert f.shape == (6,)


def test_save_load_conventions(user_items, tmp_path):
    m = ALS(factors=3, iterations=1, random_state=0).fit(user_items, show_progress=False)
    m.save(str(tmp_path / "plain"))  # privrec writes the exact path
    assert (tmp_path / "plain").exists()
    np.testing.assert_array_equal(ALS.load(str(tmp_path / "plain")).item_factors, m.item_factors)
    m.save(tmp_path / "named.npz")
    np.testing.assert_array_equal(load_model(str(tmp_path / "named")).item_factors, m.item_factors)  # implicit's .npz
    with open(tmp_path / "fh.npz", "wb") as fh:
        m.save(fh)
    with open(tmp_path / "fh.npz", "rb") as fh:
        np.testing.assert_array_equal(load_model(fh).item_factors, m.item_factors)
    with open(tmp_path / "fh.npz", "rb") as fh:
        with pytest.raises(ValueError, match="not a DPALS"):
            DPALS.load(fh)
    with pytest.raises(ValueError, match="<file object>"):
        ALS.load(io.BytesIO(b"junk junk junk"))
