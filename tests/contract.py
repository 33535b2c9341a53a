"""Contract mixins shared by every model class and every solver (architecture issue: one contract).

Not a test module (pytest collects ``test_*.py`` only): ``tests/test_contract_models.py`` and
``tests/test_contract_solvers.py`` apply these mixins, one subclass per model configuration / solver.

:class:`ModelContract` is modelled on what implicit 0.7's ``RecommenderBaseTestMixin``
(``tests/recommender_base_test.py``) checks of every recommender -- recommend for one user and
for a batch (and that both agree), filters, candidates, ``N`` beyond the catalogue, similar items
and users (the query first), rank_items, zero-length rows, input dtypes / formats, the fit
callback, pickling and save / load through a path and a file object -- plus the scikit-learn side
of privrec's API (``clone``, ``NotFittedError``, float32 factors). A subclass overrides
``_get_model()`` (an unfitted model with small, fast settings) and the class attributes below
where a model legitimately differs (each difference follows the model's docstring).

:class:`SolverContract` checks the :class:`privrec.solvers.PrivateSolver` protocol of one
registered solver (``solver_name``) on a small random :class:`~privrec.solvers.TaskBatch`.
"""

from __future__ import annotations

import io
import math
import pickle

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

N_USERS = 40
N_ITEMS = 24
EMPTY_USER = 5  # a user without ratings in the training matrix
EMPTY_ITEM = 7  # an item without ratings in the training matrix


def rating_matrix(n_users: int = N_USERS, n_items: int = N_ITEMS, seed: int = 0, empty: bool = True) -> sp.csr_matrix:
    """Users x items ratings in 1..5 from a rank-2 model (so factor models have something to learn),
    about 35% dense; with ``empty`` user ``EMPTY_USER`` and item ``EMPTY_ITEM`` have no ratings."""
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n_users, 2))
    V = rng.normal(size=(n_items, 2))
    vals = np.clip(np.round(3.0 + U @ V.T), 1, 5).astype(np.float32)
    mask = rng.random((n_users, n_items)) < 0.35
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True  # everybody rated something
    if empty:
        mask[EMPTY_USER] = False
        mask[:, EMPTY_ITEM] = False
    return sp.csr_matrix(np.where(mask, vals, 0.0))


class ModelContract:
    """What every privrec model class guarantees (see the module docstring)."""

    #: the model has item embeddings (False for the DPALS bias / popularity model, ``factors=0``:
    #: ``similar_items`` then raises a ValueError by design)
    has_item_factors = True
    #: ``save`` writes the user factors (DPALS releases the item side only: its ``user_factors_``
    #: are the billboard projection of the training users and are not saved)
    saves_user_factors = True
    #: ``user_factors_`` equal the billboard projection of each user's own ratings, so
    #: ``recalculate_user=True`` reproduces the stored factors (DPALS docstring)
    user_factors_are_projection = False
    #: items without training ratings get zero factors (ALS, non-private fits); in a private
    #: DPALS fit an unseen item's factor is pure noise (DPALS module docstring)
    unseen_items_have_zero_factors = True
    #: the number of ``fit`` callbacks (one per sweep); ``None``: not checked
    expected_callbacks: int | None = None

    # ------------------------------------------------------------------ to override
    def _get_model(self):
        raise NotImplementedError

    # ------------------------------------------------------------------ fixtures
    @pytest.fixture(scope="class")
    @classmethod
    def ratings(cls):
        return rating_matrix()

    @pytest.fixture(scope="class")
    @classmethod
    def fitted(cls, ratings):
        """One fit per contract class (tests must not modify it)."""
        model = cls()._get_model()
        out = model.fit(ratings, show_progress=False)
        assert out is model
        return model

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _liked(ratings, user) -> set:
        return set(ratings[user].indices.tolist())

    @staticmethod
    def _assert_descending(scores):
        scores = np.asarray(scores)
        assert np.all(np.diff(scores, axis=-1) <= 1e-6), f"scores are not sorted in decreasing order: {scores}"

    def _params_equal(self, a: dict, b: dict, skip=()):
        assert set(a) == set(b)
        for k in a:
            if k in skip:
                continue
            va, vb = a[k], b[k]
            if isinstance(va, float) and isinstance(vb, float) and math.isinf(va):
                assert math.isinf(vb) and (va > 0) == (vb > 0), k
            elif k == "dtype":
                assert np.dtype(va) == np.dtype(vb), k
            else:
                assert va == vb, (k, va, vb)

    # ------------------------------------------------------------------ fit / state
    def test_fit_learns_float32_factors_of_the_right_shape(self, fitted, ratings):
        n_users, n_items = ratings.shape
        V, U = fitted.item_factors_, fitted.user_factors_
        assert V.dtype == np.float32 and U.dtype == np.float32
        assert V.shape[0] == n_items and U.shape[0] == n_users
        assert U.shape[1] == V.shape[1]
        assert (V.shape[1] > 0) == self.has_item_factors
        assert np.all(np.isfinite(V)) and np.all(np.isfinite(U))
        # implicit's attribute names are aliases of the learned state
        assert fitted.item_factors is fitted.item_factors_
        assert fitted.user_factors is fitted.user_factors_
        assert fitted.n_items_ == n_items and fitted.n_features_in_ == n_items

    def test_unfitted_model_raises_not_fitted_error(self, ratings):
        model = self._get_model()
        assert model.item_factors is None and model.user_factors is None
        calls = {
            "recommend": lambda: model.recommend(0, ratings[0]),
            "recommend batch": lambda: model.recommend(np.arange(3), ratings[:3]),
            "rank_items": lambda: model.rank_items(0, ratings[0], [1, 2]),
            "similar_items": lambda: model.similar_items(0),
            "similar_users": lambda: model.similar_users(0),
            "save": lambda: model.save(io.BytesIO()),
            "transform": lambda: model.transform(ratings),
        }
        for call in calls.values():
            with pytest.raises(NotFittedError, match="not fitted"):
                call()
        # scikit-learn's NotFittedError is both a ValueError and an AttributeError
        assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)

    def test_fit_accepts_float64_and_other_sparse_formats(self, ratings):
        ref = self._get_model().fit(ratings, show_progress=False)
        for variant in (ratings.astype(np.float64), ratings.tocsc(), ratings.tocoo()):
            model = self._get_model().fit(variant, show_progress=False)
            assert model.item_factors_.dtype == np.float32  # the model's dtype, not the input's
            # seeded models: the same fit whatever the input's format or float width
            np.testing.assert_allclose(model.item_factors_, ref.item_factors_, rtol=1e-4, atol=1e-5)

    def test_fit_calls_the_callback_once_per_sweep(self, ratings):
        calls = []
        self._get_model().fit(
            ratings, show_progress=False, callback=lambda it, elapsed, loss: calls.append((it, elapsed))
        )
        assert calls, "the callback was never called"
        assert [c[0] for c in calls] == list(range(len(calls)))
        assert all(c[1] >= 0 for c in calls)
        if self.expected_callbacks is not None:
            assert len(calls) == self.expected_callbacks

    def test_fit_rejects_a_non_callable_callback(self, ratings):
        with pytest.raises(ValueError, match="callback must be callable"):
            self._get_model().fit(ratings, show_progress=False, callback=3)

    # ------------------------------------------------------------------ recommend
    def test_recommend_one_user(self, fitted, ratings):
        for user in (0, 1, 13):
            ids, scores = fitted.recommend(user, ratings[user], N=5)
            assert ids.shape == scores.shape == (5,)
            assert ids.dtype.kind in "iu"
            assert np.all((ids >= 0) & (ids < ratings.shape[1]))
            assert len(set(ids.tolist())) == 5
            self._assert_descending(scores)
            assert np.all(np.isfinite(scores))
            assert not set(ids.tolist()) & self._liked(ratings, user), "a rated item was recommended"
            # the scores are the model's predictions for those (user, item) pairs, or for an
            # exposure-ranked explicit model log(exposure_i) + (prediction - mean) / (label_bound / 2)
            pred = fitted.predict(np.full(5, user), ids)
            if getattr(fitted, "_ranking_mode", lambda: "rating")() == "exposure":
                scale = fitted.config_["label_bound"] / 2.0
                exposure = getattr(fitted, "item_exposure_", None)
                if exposure is None:
                    exposure = np.maximum(fitted.item_counts_, 1.0)
                pred = (pred - fitted._global()) / scale + np.log(exposure[ids])
            np.testing.assert_allclose(scores, pred, rtol=1e-4, atol=1e-4)

    def test_recommend_batch_matches_single_calls(self, fitted, ratings):
        users = np.array([0, 3, 4, 9])
        for filt in (True, False):
            ids, scores = fitted.recommend(users, ratings[users], N=6, filter_already_liked_items=filt)
            assert ids.shape == scores.shape == (4, 6)
            for row, user in enumerate(users):
                one_ids, one_scores = fitted.recommend(user, ratings[user], N=6, filter_already_liked_items=filt)
                np.testing.assert_array_equal(one_ids, ids[row])
                np.testing.assert_allclose(one_scores, scores[row], rtol=1e-6)
                self._assert_descending(scores[row])
        # the full training matrix is accepted in place of one row per user
        full_ids, _ = fitted.recommend(users, ratings, N=6)
        np.testing.assert_array_equal(full_ids, fitted.recommend(users, ratings[users], N=6)[0])

    def test_recommend_all_users(self, fitted, ratings):
        n_users = ratings.shape[0]
        if hasattr(fitted, "recommend_all"):
            ids, scores = fitted.recommend_all(ratings, N=4)
        else:  # privrec has no recommend_all: the batched recommend over every user is its equivalent
            ids, scores = fitted.recommend(np.arange(n_users), ratings, N=4)
        assert ids.shape == scores.shape == (n_users, 4)
        for user in range(n_users):
            assert not set(ids[user].tolist()) & self._liked(ratings, user)
            self._assert_descending(scores[user])

    def test_filter_already_liked_items_false_may_return_liked_items(self, fitted, ratings):
        n_items = ratings.shape[1]
        ids, scores = fitted.recommend(0, ratings[0], N=n_items, filter_already_liked_items=False)
        assert sorted(ids.tolist()) == list(range(n_items))  # every item, once
        self._assert_descending(scores)
        # user_items is not needed when nothing is filtered and the user factors are stored
        ids2, _ = fitted.recommend(0, None, N=n_items, filter_already_liked_items=False)
        np.testing.assert_array_equal(ids, ids2)

    def test_filter_already_liked_items_needs_user_items(self, fitted):
        with pytest.raises(ValueError, match="user_items"):
            fitted.recommend(0, None, N=3)

    def test_filter_items_are_excluded(self, fitted, ratings):
        banned = [0, 1, 2, 10, 11]
        ids, _ = fitted.recommend(0, ratings[0], N=8, filter_items=banned)
        assert not set(ids.tolist()) & set(banned)
        batch_ids, _ = fitted.recommend(np.arange(5), ratings[:5], N=8, filter_items=banned)
        assert not np.isin(batch_ids, banned).any()

    def test_items_restricts_the_candidates(self, fitted, ratings):
        cand = np.array([1, 3, 5, 8, 13, 21])
        ids, scores = fitted.recommend(2, ratings[2], N=20, items=cand, filter_already_liked_items=False)
        assert sorted(ids.tolist()) == sorted(cand.tolist())
        self._assert_descending(scores)
        # with filtering, the liked candidates disappear
        ids, _ = fitted.recommend(2, ratings[2], N=20, items=cand)
        assert set(ids.tolist()) == set(cand.tolist()) - self._liked(ratings, 2)
        # candidates and filter_items together
        ids, _ = fitted.recommend(
            2, ratings[2], N=20, items=cand, filter_items=[3, 5], filter_already_liked_items=False
        )
        assert set(ids.tolist()) == set(cand.tolist()) - {3, 5}

    def test_out_of_range_items_are_a_value_error(self, fitted, ratings):
        n_items = ratings.shape[1]
        for bad in ([1, n_items], [-1, 2]):
            with pytest.raises(ValueError, match="items must be in"):
                fitted.recommend(0, ratings[0], items=bad)
            with pytest.raises(ValueError, match="filter_items must be in"):
                fitted.recommend(0, ratings[0], filter_items=bad)
        with pytest.raises(ValueError, match="userid must be in"):
            fitted.recommend(ratings.shape[0], None, filter_already_liked_items=False)

    def test_n_larger_than_the_catalogue(self, fitted, ratings):
        n_items = ratings.shape[1]
        liked = self._liked(ratings, 0)
        ids, scores = fitted.recommend(0, ratings[0], N=10 * n_items)
        assert len(ids) == n_items - len(liked)  # only the eligible items, no padding
        assert set(ids.tolist()) == set(range(n_items)) - liked
        assert np.all(np.isfinite(scores))
        # a batch keeps a rectangular shape: rows with fewer eligible items are padded with id -1 / -inf
        users = np.array([0, 1])
        ids, scores = fitted.recommend(users, ratings[users], N=10 * n_items)
        n_eligible = [n_items - len(self._liked(ratings, u)) for u in users]
        assert ids.shape[1] == max(n_eligible)
        for row, n in enumerate(n_eligible):
            assert np.all(ids[row, :n] >= 0) and np.all(ids[row, n:] == -1)
            assert np.all(np.isneginf(scores[row, n:]))

    def test_n_must_be_a_positive_integer(self, fitted, ratings):
        for bad in (0, -1, 2.5):
            with pytest.raises(ValueError, match="N"):
                fitted.recommend(0, ratings[0], N=bad)

    def test_user_items_with_the_wrong_number_of_items(self, fitted, ratings):
        with pytest.raises(ValueError, match="item columns"):
            fitted.recommend(0, ratings[0][:, :5])
        with pytest.raises(ValueError, match="one row per userid"):
            fitted.recommend(np.arange(3), ratings[:2])

    def test_recalculate_user(self, fitted, ratings):
        users = np.arange(8)
        ids, scores = fitted.recommend(users, ratings[users], N=3, recalculate_user=True)
        for row, user in enumerate(users):
            one_ids, one_scores = fitted.recommend(user, ratings[user], N=3, recalculate_user=True)
            np.testing.assert_array_equal(one_ids, ids[row])
            np.testing.assert_allclose(one_scores, scores[row], rtol=1e-5, atol=1e-6)
        projected = fitted.recalculate_user(users, ratings[users])
        assert projected.shape == (8, fitted.item_factors_.shape[1])
        np.testing.assert_allclose(fitted.recalculate_user(3, ratings[3]), projected[3], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fitted.transform(ratings[users]), projected, rtol=1e-5, atol=1e-6)
        if self.user_factors_are_projection:
            np.testing.assert_allclose(projected, fitted.user_factors_[users], rtol=1e-4, atol=1e-5)
            stored_ids, stored_scores = fitted.recommend(users, ratings[users], N=3)
            np.testing.assert_array_equal(stored_ids, ids)
            np.testing.assert_allclose(stored_scores, scores, rtol=1e-4, atol=1e-5)

    # ------------------------------------------------------------------ rank_items
    def test_rank_items(self, fitted, ratings):
        selected = [6, 1, 12, 4, 3, 20]
        ids, scores = fitted.rank_items(0, ratings[0], selected)
        assert sorted(ids.tolist()) == sorted(selected)  # every selected item, liked or not
        self._assert_descending(scores)
        # the same order as scoring every item and keeping the selected ones
        all_ids, all_scores = fitted.recommend(0, ratings[0], N=ratings.shape[1], filter_already_liked_items=False)
        order = [i for i in all_ids.tolist() if i in selected]
        np.testing.assert_allclose(scores, [all_scores[all_ids.tolist().index(i)] for i in ids], rtol=1e-6)
        assert set(order) == set(ids.tolist())
        # batched
        ids_b, scores_b = fitted.rank_items(np.arange(4), ratings[:4], selected)
        assert ids_b.shape == (4, len(selected))
        for row in range(4):
            assert sorted(ids_b[row].tolist()) == sorted(selected)
        with pytest.raises(ValueError, match="selected_items is empty"):
            fitted.rank_items(0, ratings[0], [])
        with pytest.raises(ValueError, match="items must be in"):
            fitted.rank_items(0, ratings[0], [1, ratings.shape[1] + 5])

    # ------------------------------------------------------------------ similarity
    def test_similar_items(self, fitted, ratings):
        n_items = ratings.shape[1]
        if not self.has_item_factors:
            with pytest.raises(ValueError, match="no item factors"):
                fitted.similar_items(0, N=5)
            with pytest.raises(ValueError, match="no item factors"):
                fitted.similar_items(np.arange(3), N=5)
            return
        for item in (0, 3, 10):
            ids, scores = fitted.similar_items(item, N=5)
            assert ids.shape == scores.shape == (5,)
            assert ids[0] == item, "an item is most similar to itself"
            assert scores[0] == pytest.approx(1.0, abs=1e-4)
            assert np.all(scores <= 1.0 + 1e-4) and np.all(scores >= -1.0 - 1e-4)  # cosine
            self._assert_descending(scores)
        items = np.array([0, 1, 2, 3])
        ids, scores = fitted.similar_items(items, N=4)
        assert ids.shape == scores.shape == (4, 4)
        np.testing.assert_array_equal(ids[:, 0], items)
        for row, item in enumerate(items):
            np.testing.assert_array_equal(fitted.similar_items(int(item), N=4)[0], ids[row])
        # filters and candidates
        ids, _ = fitted.similar_items(items, N=5, filter_items=np.arange(0, n_items, 5))
        assert not np.isin(ids, np.arange(0, n_items, 5)).any()
        selected = np.arange(10, 16)
        ids, _ = fitted.similar_items(items, N=6, items=selected)
        for row in ids:
            assert set(row.tolist()) == set(selected.tolist())
        ids, _ = fitted.similar_items(2, N=3 * n_items)
        assert sorted(ids.tolist()) == list(range(n_items))

    def test_unseen_item_is_similar_to_nothing(self, fitted):
        if not self.has_item_factors:
            return  # covered by test_similar_items (it raises)
        V = fitted.item_factors_
        if self.unseen_items_have_zero_factors:
            np.testing.assert_array_equal(V[EMPTY_ITEM], 0)
            for item in range(6):
                ids, scores = fitted.similar_items(item, N=V.shape[0])
                assert scores[ids.tolist().index(EMPTY_ITEM)] == 0.0
        else:  # private fit: the unseen item still gets a (noisy) factor from its noisy statistics
            assert np.any(V[EMPTY_ITEM] != 0)

    def test_similar_users(self, fitted, ratings):
        n_users = ratings.shape[0]
        # users whose own leave-one-out choice dropped the personal part have a zero embedding
        # (similarity 0 to everybody): check self-similarity on users that have one
        personal = np.flatnonzero(np.abs(fitted.user_factors_).sum(axis=1) > 0)
        assert personal.size >= 3
        for user in personal[:2]:
            ids, scores = fitted.similar_users(user, N=5)
            assert ids.shape == scores.shape == (5,)
            self._assert_descending(scores)
            assert ids[0] == user and scores[0] == pytest.approx(1.0, abs=1e-4)
        users = personal[:3]
        ids, scores = fitted.similar_users(users, N=5)
        assert ids.shape == (3, 5)
        np.testing.assert_array_equal(ids[:, 0], users)
        ids, _ = fitted.similar_users(users, N=5, filter_users=[10, 11, 12])
        assert not np.isin(ids, [10, 11, 12]).any()
        ids, _ = fitted.similar_users(users, N=10, users=np.arange(20, 26))
        for row in ids:
            assert set(row.tolist()) == set(range(20, 26))
        with pytest.raises(ValueError, match="userid must be in"):
            fitted.similar_users(n_users)

    # ------------------------------------------------------------------ empty rows
    def test_empty_user_and_item_rows(self, fitted, ratings):
        n_items = ratings.shape[1]
        assert ratings[EMPTY_USER].nnz == 0 and ratings[:, EMPTY_ITEM].nnz == 0
        np.testing.assert_array_equal(fitted.user_factors_[EMPTY_USER], 0)
        ids, scores = fitted.recommend(EMPTY_USER, ratings[EMPTY_USER], N=n_items)
        assert len(ids) == n_items and np.all(np.isfinite(scores))  # nothing to filter
        # an all-empty query row (a new user without data) is projected to finite factors
        empty = sp.csr_matrix((1, n_items), dtype=np.float32)
        ids, scores = fitted.recommend(0, empty, N=4, recalculate_user=True)
        assert len(ids) == 4 and np.all(np.isfinite(scores))
        assert np.all(np.isfinite(fitted.transform(sp.csr_matrix((3, n_items), dtype=np.float32))))

    # ------------------------------------------------------------------ persistence
    def _assert_same_recommendations(self, a, b, ratings):
        users = np.arange(ratings.shape[0])
        ids_a, sc_a = a.recommend(users, ratings, N=5)
        ids_b, sc_b = b.recommend(users, ratings, N=5)
        np.testing.assert_array_equal(ids_a, ids_b)
        np.testing.assert_allclose(sc_a, sc_b, rtol=1e-5, atol=1e-6)
        if self.has_item_factors:
            for item in (0, 1):
                np.testing.assert_array_equal(a.similar_items(item, N=5)[0], b.similar_items(item, N=5)[0])
                np.testing.assert_allclose(a.similar_items(item, N=5)[1], b.similar_items(item, N=5)[1])

    def _saved_param_skips(self, model):
        return ()

    def test_save_load_round_trip(self, fitted, ratings, tmp_path):
        path = tmp_path / "model.npz"
        fitted.save(path)
        assert path.exists()
        from privrec.models import load_model

        for loaded in (type(fitted).load(path), load_model(path), load_model(tmp_path / "model")):
            assert type(loaded) is type(fitted)
            np.testing.assert_array_equal(loaded.item_factors_, fitted.item_factors_)
            assert loaded.item_factors_.dtype == np.float32
            self._params_equal(loaded.get_params(), fitted.get_params(), skip=self._saved_param_skips(fitted))
            self._assert_same_recommendations(fitted, loaded, ratings)
            if self.saves_user_factors:
                np.testing.assert_array_equal(loaded.user_factors_, fitted.user_factors_)
            else:
                assert loaded.user_factors is None
                with pytest.raises(ValueError, match="no user factors"):
                    loaded.similar_users(0)
                with pytest.raises(ValueError, match="user_items"):
                    loaded.recommend(0, None, filter_already_liked_items=False)
        # a binary file object (implicit's save(file) / load(file))
        buf = io.BytesIO()
        fitted.save(buf)
        buf.seek(0)
        self._assert_same_recommendations(fitted, type(fitted).load(buf), ratings)

    def test_load_rejects_a_file_that_is_not_a_model(self, tmp_path):
        bad = tmp_path / "junk.npz"
        bad.write_bytes(b"definitely not a zip archive")
        with pytest.raises(ValueError, match="not a privrec model file"):
            type(self._get_model()).load(bad)

    def test_pickle_round_trip(self, fitted, ratings):
        import warnings

        from privrec.models._base import PrivateStateWarning

        if fitted._is_private():  # the user side is not covered by the guarantee: dropped, with a warning
            with pytest.warns(PrivateStateWarning):
                reloaded = pickle.loads(pickle.dumps(fitted))
            assert reloaded.user_factors_ is None and reloaded.user_bias_ is None
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error", PrivateStateWarning)
                reloaded = pickle.loads(pickle.dumps(fitted))
            for name in ("user_factors_", "user_bias_"):
                a, b = getattr(fitted, name, None), getattr(reloaded, name, None)
                assert (a is None and b is None) or np.array_equal(a, b)
        self._assert_same_recommendations(fitted, reloaded, ratings)
        unfitted = pickle.loads(pickle.dumps(self._get_model()))
        assert not unfitted.__sklearn_is_fitted__()

    # ------------------------------------------------------------------ scikit-learn
    def test_clone_is_an_unfitted_copy_with_equal_params(self, fitted, ratings):
        copy = clone(fitted)
        assert type(copy) is type(fitted) and copy is not fitted
        self._params_equal(copy.get_params(), fitted.get_params())
        assert not copy.__sklearn_is_fitted__()
        with pytest.raises(NotFittedError):
            copy.recommend(0, ratings[0])
        # set_params round trip
        params = fitted.get_params()
        copy.set_params(**params)
        self._params_equal(copy.get_params(), params)
        with pytest.raises(ValueError, match="Invalid parameter"):
            copy.set_params(no_such_parameter=1)

    def test_refit_of_a_clone_is_reproducible_with_a_seed(self, fitted, ratings):
        again = clone(fitted).fit(ratings, show_progress=False)
        np.testing.assert_allclose(again.item_factors_, fitted.item_factors_, rtol=1e-5, atol=1e-6)


# ====================================================================== solvers


def task_batch(seed: int = 0, n_units: int = 30, n_tasks: int = 8, dim: int = 3, weight: float = 0.5, public=True):
    """A small random units x tasks batch (task ``EMPTY_TASK`` has no examples), with public task
    sizes / weights (what noisy GD's default schedule needs in a private solve)."""
    from privrec.solvers import TaskBatch

    rng = np.random.default_rng(seed)
    mask = rng.random((n_units, n_tasks)) < 0.4
    others = np.array([t for t in range(n_tasks) if t != EMPTY_TASK])
    mask[np.arange(n_units), others[np.arange(n_units) % others.size]] = True  # every unit has data
    mask[:, EMPTY_TASK] = False
    labels = sp.csr_matrix(np.where(mask, rng.normal(size=(n_units, n_tasks)), 0.0))
    weights = labels.copy()
    weights.data[:] = weight
    features = rng.normal(size=(n_units, dim)) * 0.3
    extra = {}
    if public:
        extra = dict(task_sizes=np.full(n_tasks, 10.0), task_weights=np.full(n_tasks, weight))
    return TaskBatch.from_csr(labels, weights, features, transpose=True, **extra)


EMPTY_TASK = 5


class SolverContract:
    """The :class:`privrec.solvers.PrivateSolver` protocol, for the registered solver ``solver_name``."""

    solver_name: str = ""
    #: the solver adds noise (False: non-private, e.g. ``exact``)
    private: bool = True
    #: noise-free and without clipping, the solve is the weighted ridge of each task (closed form)
    solves_ridge_exactly: bool = True

    # ------------------------------------------------------------------ to override
    def _params(self, **overrides) -> dict:
        """Keyword parameters of a private configuration (budget large enough for ``task_batch``)."""
        params = dict(noise_multiplier=1.0, budget=5.0) if self.private else {}
        params.update(overrides)
        return params

    def _make(self, **overrides):
        from privrec.solvers import make_solver

        return make_solver(self.solver_name, **self._params(**overrides))

    # ------------------------------------------------------------------ fixtures
    @pytest.fixture(scope="class")
    @classmethod
    def batch(cls):
        return task_batch()

    # ------------------------------------------------------------------ tests
    def test_is_registered_and_satisfies_the_protocol(self):
        from privrec.solvers import PrivateSolver, available_solvers

        assert self.solver_name in available_solvers()
        solver = self._make()
        assert isinstance(solver, PrivateSolver)
        assert float(solver.noise_multiplier) >= 0
        assert (float(solver.noise_multiplier) > 0) == self.private

    def test_solve_returns_finite_float32_params_of_shape_m_by_d(self, batch):
        result = self._make().solve(batch, rng=0)
        assert result.params.shape == (batch.n_tasks, batch.dim)
        assert result.params.dtype == np.float32
        assert np.all(np.isfinite(result.params))
        assert isinstance(result.info, dict)

    def test_float64_dtype_is_honoured(self, batch):
        result = self._make(dtype=np.float64).solve(batch, rng=0)
        assert result.params.dtype == np.float64

    def test_task_without_examples_gets_finite_params(self, batch):
        assert batch.sizes[EMPTY_TASK] == 0
        params = self._make().solve(batch, rng=0).params
        assert np.all(np.isfinite(params[EMPTY_TASK]))
        if not self.private:  # ridge without data: zero
            np.testing.assert_array_equal(params[EMPTY_TASK], 0)

    def test_result_events_are_the_labelled_events(self, batch):
        solver = self._make()
        planned = solver.labelled_events()
        assert planned, "a solve releases at least one event"
        result = solver.solve(batch, rng=0)
        assert [lab for lab, _, _ in result.events] == [lab for lab, _, _ in planned]
        assert [ev for _, ev, _ in result.events] == [ev for _, ev, _ in planned]
        for label, event, meta in planned:
            assert isinstance(label, str) and label
            assert isinstance(event, dp_accounting.DpEvent)
            assert isinstance(meta, dict) and "mechanism" in meta
        # dp_event() composes them (a single event is returned as is): the same privacy as the
        # plain composition of the labelled events, and so is the result's composed event
        from privrec.privacy.ledger import epsilon_of_event

        evs = [ev for _, ev, _ in planned]
        if len(evs) == 1:
            assert solver.dp_event() == evs[0]
        expected = epsilon_of_event(dp_accounting.ComposedDpEvent(evs), 1e-5)
        for composed in (solver.dp_event(), result.event):
            eps = epsilon_of_event(composed, 1e-5)
            assert eps == pytest.approx(expected, rel=1e-9) or (math.isinf(eps) and math.isinf(expected))

    def test_events_record_into_a_ledger(self, batch):
        from privrec.privacy import PrivacyLedger

        ledger = PrivacyLedger()
        result = self._make().solve(batch, rng=0)
        result.record(ledger, prefix="step 1: ")
        eps = ledger.epsilon(1e-5)
        if self.private:
            assert math.isfinite(eps) and eps > 0
        else:
            assert math.isinf(eps)

    def test_with_noise_multiplier(self):
        solver = self._make()
        if not self.private:
            assert solver.with_noise_multiplier(0) is solver or type(solver.with_noise_multiplier(0)) is type(solver)
            assert solver.with_noise_multiplier(0.0).noise_multiplier == 0
            with pytest.raises(ValueError, match="non-private"):
                solver.with_noise_multiplier(1.0)
            return
        other = solver.with_noise_multiplier(2.5)
        assert type(other) is type(solver)
        assert other.noise_multiplier == 2.5
        assert solver.noise_multiplier == 1.0  # a copy: the original is unchanged
        assert other.dp_event() != solver.dp_event()

    def test_zero_noise_is_reported_as_non_private(self, batch):
        solver = self._make().with_noise_multiplier(0.0) if self.private else self._make()
        events = [ev for _, ev, _ in solver.labelled_events()]

        def leaves(ev):
            if isinstance(ev, dp_accounting.ComposedDpEvent):
                return [x for e in ev.events for x in leaves(e)]
            if isinstance(ev, dp_accounting.SelfComposedDpEvent):
                return leaves(ev.event)
            return [ev]

        flat = [x for ev in events for x in leaves(ev)]
        assert any(isinstance(e, dp_accounting.NonPrivateDpEvent) for e in flat)
        assert not any(isinstance(e, dp_accounting.GaussianDpEvent) and e.noise_multiplier == 0 for e in flat)
        from privrec.privacy import PrivacyLedger

        ledger = PrivacyLedger()
        solver.solve(batch, rng=0).record(ledger)
        assert math.isinf(ledger.epsilon(1e-5)), "a noise-free solve must never claim a finite epsilon"

    def test_seeds(self, batch):
        solver = self._make()
        a = solver.solve(batch, rng=7).params
        b = solver.solve(batch, rng=7).params
        np.testing.assert_array_equal(a, b)
        c = solver.solve(batch, rng=8).params
        if self.private:
            assert not np.allclose(a, c), "different seeds gave the same noisy params"
        else:
            np.testing.assert_array_equal(a, c)
        # a Generator is accepted as well
        assert solver.solve(batch, rng=np.random.default_rng(7)).params.shape == a.shape

    def test_declared_budget_is_enforced(self, batch):
        beta = batch.unit_budget()
        assert beta > 0
        if not self.private:
            return  # a non-private solve declares no budget
        self._make(budget=beta).solve(batch, rng=0)  # exactly at the budget: fine
        with pytest.raises(ValueError, match="exceeds the declared budget"):
            self._make(budget=beta * 0.5).solve(batch, rng=0)

    def test_private_solve_needs_a_budget(self):
        if not self.private:
            return
        from privrec.solvers import make_solver

        params = self._params()
        params.pop("budget")
        with pytest.raises(ValueError, match="budget"):
            make_solver(self.solver_name, **params)

    def test_invalid_parameters_are_value_errors(self):
        for bad in (dict(max_norm=0.0), dict(max_norm=-1.0)):
            with pytest.raises(ValueError, match="max_norm"):
                self._make(**bad)
        if self.private:
            with pytest.raises(ValueError, match="noise_multiplier"):
                self._make(noise_multiplier=-1.0)

    def test_noise_free_unclipped_solve_is_the_weighted_ridge(self, batch):
        if not self.solves_ridge_exactly:
            return
        reg = 0.7
        overrides = dict(reg=reg, max_norm=1e6, label_bound=1e6)
        if self.private:
            overrides.update(noise_multiplier=0.0, budget=None)
        params = self._make(**overrides).solve(batch, rng=0).params
        d = batch.dim
        for t in range(batch.n_tasks):
            lo, hi = batch.indptr[t], batch.indptr[t + 1]
            X = batch.features[batch.feature_ids[lo:hi]].astype(np.float64)
            y = batch.labels[lo:hi].astype(np.float64)
            w = batch.weights[lo:hi].astype(np.float64)
            expected = np.linalg.solve(X.T @ (w[:, None] * X) + reg * np.eye(d), X.T @ (w * y))
            np.testing.assert_allclose(params[t], expected, rtol=2e-4, atol=2e-5, err_msg=f"task {t}")
        # per-task ridge strengths are honoured as well
        regs = np.linspace(0.5, 2.0, batch.n_tasks)
        overrides["reg"] = regs
        per_task = self._make(**overrides).solve(batch, rng=0).params
        t = 0
        lo, hi = batch.indptr[t], batch.indptr[t + 1]
        X = batch.features[batch.feature_ids[lo:hi]].astype(np.float64)
        w = batch.weights[lo:hi].astype(np.float64)
        y = batch.labels[lo:hi].astype(np.float64)
        expected = np.linalg.solve(X.T @ (w[:, None] * X) + regs[t] * np.eye(d), X.T @ (w * y))
        np.testing.assert_allclose(per_task[t], expected, rtol=2e-4, atol=2e-5)
