"""scikit-learn parity (issue 13 part 4): estimator checks with a documented list of exceptions,
NotFittedError, tags, score(X) and GridSearchCV over ratings (privrec.data.RatingSplitCV)."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import check_estimator

from privrec.data import RatingSplitCV, from_pandas
from privrec.models import ALS, DPALS, ImplicitALS
from privrec.models._base import PrivateSelectionWarning

# Every check below fails for one of two documented reasons; each entry must still fail (a check
# that starts passing must be removed from the list: see test_check_estimator).
_ENTRY_PREDICT = (
    "predict(X) of a ratings matrix returns one prediction per rated entry of X for the fitted users (row r of X "
    "is fitted user r), not one value per row: a rating model's samples are (user, item) pairs, so row subsets, "
    "row permutations or a matrix of other users are different queries (see FactorizationModel.predict / score)"
)
EXPECTED_FAILED_CHECKS = {
    "check_fit_score_takes_y": (
        "fit keeps implicit 0.7's signature fit(user_items, show_progress=True, callback=None); scikit-learn's "
        "fit(X, y) call still works: a y (None or an array) in the show_progress position is ignored"
    ),
    "check_estimator_sparse_array": _ENTRY_PREDICT + "; fitting on sparse input itself passes",
    "check_estimator_sparse_matrix": _ENTRY_PREDICT + "; fitting on sparse input itself passes",
    "check_methods_sample_order_invariance": _ENTRY_PREDICT,
    "check_methods_subset_invariance": _ENTRY_PREDICT,
    "check_fit_idempotent": _ENTRY_PREDICT + " (it predicts on a matrix of held-out users)",
}

# checks that fail for one estimator only, by design
ESTIMATOR_FAILED_CHECKS = {
    "DPALS-private": {
        "check_estimators_pickle": (
            "pickling a fitted private model drops the training users' factors (not covered by its privacy "
            "guarantee; see FactorizationModel.__getstate__), so predict(X) of the training users needs the "
            "unpickled model to project them first; recommend / transform from the users' rows are unchanged"
        )
    },
}

ESTIMATORS = {
    "ALS": ALS(factors=2, iterations=2, random_state=0),
    "DPALS-inf": DPALS(epsilon=float("inf"), factors=2, iterations=2, random_state=0),
    "DPALS-private": DPALS(epsilon=2.0, factors=2, iterations=1, budget=5, random_state=0),
}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_check_estimator(name):
    expected = {**EXPECTED_FAILED_CHECKS, **ESTIMATOR_FAILED_CHECKS.get(name, {})}
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_estimator(
            ESTIMATORS[name],
            expected_failed_checks=expected,
            on_fail=None,
            callback=lambda **kw: results.append(kw),
        )
    status = {}
    for r in results:
        status.setdefault(r["check_name"], set()).add(r["status"])
    failed = {k: v for k, v in status.items() if "failed" in v}
    assert not failed, {k: repr(r["exception"])[:300] for r in results for k in failed if r["check_name"] == k}
    stale = [k for k in expected if status.get(k) != {"xfail"}]
    assert not stale, f"expected failures that no longer fail (remove them from the list): {stale}"
    assert sum("passed" in v for v in status.values()) >= 30  # the checks really ran (not skipped)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_tags(name):
    tags = get_tags(ESTIMATORS[name])
    assert tags.input_tags.sparse and tags.input_tags.two_d_array and tags.input_tags.allow_nan
    assert not tags.target_tags.required and tags.requires_fit
    assert tags.transformer_tags is not None and tags.transformer_tags.preserves_dtype == []
    assert tags.estimator_type is None  # not a classifier / regressor
    assert get_tags(clone(ESTIMATORS[name]).set_params(random_state=None)).non_deterministic


def test_not_fitted_error_is_value_and_attribute_error():
    R = sp.random(5, 4, density=0.5, format="csr", random_state=0, dtype=np.float32)
    for model in (ALS(), DPALS(), ImplicitALS()):
        for call in (
            lambda: model.recommend(0, R[0]),
            lambda: model.similar_items(0),
            lambda: model.score(R),
            lambda: model.transform(R),
            lambda: model.save("never-written.npz"),
            lambda: model.n_items_,
            lambda: model.partial_fit_users([0], R[[0]]),
        ):
            with pytest.raises(NotFittedError, match="not fitted"):
                call()
        assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)
        assert not hasattr(model, "n_features_in_") and model.item_factors is None


def _ratings(n_users=120, n_items=40, seed=0):
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(n_users, 2)), rng.normal(size=(n_items, 2))
    rows, cols = np.nonzero(rng.random((n_users, n_items)) < 0.3)
    r = np.clip(np.round(3 + np.einsum("ij,ij->i", U[rows], V[cols]) + rng.normal(0, 0.3, rows.size)), 1, 5)
    return pd.DataFrame(
        {"user": [f"u{k:03d}" for k in rows], "item": [f"i{k:02d}" for k in cols], "rating": r.astype(np.float32)}
    )


@pytest.fixture(scope="module")
def ratings():
    return _ratings()


def test_rating_split_cv_splits_ratings_within_users(ratings):
    ratings = pd.concat(
        [ratings, pd.DataFrame({"user": ["solo"], "item": ["i00"], "rating": [3.0]})], ignore_index=True
    )
    cv = RatingSplitCV(4, random_state=0)
    assert cv.get_n_splits() == 4
    seen = np.zeros(len(ratings), dtype=int)
    for train, test in cv.split(ratings):
        assert np.intersect1d(train, test).size == 0 and train.size + test.size == len(ratings)
        seen[test] += 1
        tr_users = set(ratings["user"].iloc[train])
        assert set(ratings["user"].iloc[test]) <= tr_users  # every tested user keeps training ratings
    solo = ratings.index[ratings["user"] == "solo"]
    assert np.all(seen[solo] == 0)  # a single rating is never held out
    assert np.all(seen[ratings["user"] != "solo"] == 1)  # every other rating is tested exactly once
    a = [t.tolist() for _, t in RatingSplitCV(4, random_state=1).split(ratings)]
    assert a == [t.tolist() for _, t in RatingSplitCV(4, random_state=1).split(ratings)]
    with pytest.raises(ValueError, match="long-format"):
        next(RatingSplitCV(3).split(from_pandas(ratings).matrix))
    with pytest.raises(ValueError, match="n_splits"):
        RatingSplitCV(1)


@pytest.mark.filterwarnings("ignore::privrec.models._base.PrivateSelectionWarning")  # tested below
@pytest.mark.parametrize(
    "model, grid",
    [
        (ALS(factors=3, iterations=3, random_state=0), [1.0, 10.0]),
        (DPALS(epsilon=float("inf"), factors=3, iterations=3, random_state=0), [1.0, 10.0]),
        (DPALS(epsilon=8.0, factors=2, iterations=1, budget=10, random_state=0), [5.0, 20.0]),
    ],
)
def test_grid_search_over_regularization(model, grid, ratings):
    search = GridSearchCV(model, {"regularization": grid}, cv=RatingSplitCV(3, random_state=0), error_score="raise")
    search.fit(ratings)
    scores = search.cv_results_["mean_test_score"]
    assert scores.shape == (2,) and np.all(np.isfinite(scores)) and np.all(scores < 0)
    assert search.best_params_["regularization"] in grid
    best = search.best_estimator_
    assert set(best.user_ids_) == set(ratings["user"]) and best.regularization == search.best_params_["regularization"]
    assert search.score(ratings) == pytest.approx(best.score(ratings))


def test_grid_search_on_a_matrix_explains_the_rating_split():
    R = from_pandas(_ratings(60, 20)).matrix
    search = GridSearchCV(ALS(factors=2, iterations=1), {"regularization": [1.0, 2.0]}, cv=3, error_score="raise")
    with pytest.raises(ValueError, match="RatingSplitCV"):
        search.fit(R)


def test_score_uses_the_fitted_users_never_a_projection_of_x(ratings):
    X = from_pandas(ratings)
    R = X.matrix
    mask = np.random.default_rng(0).random(R.nnz) < 0.2
    train, test = X.filter_entries(~mask).matrix, X.filter_entries(mask).matrix
    m = ALS(factors=3, iterations=3, random_state=0).fit(train, show_progress=False)
    t = test.tocoo()
    manual = -np.sqrt(np.mean((m.predict(t.row, t.col) - t.data) ** 2))
    assert m.score(test) == pytest.approx(manual, rel=1e-5)
    np.testing.assert_allclose(m.predict(test), m.predict(t.row, t.col), rtol=1e-6)
    # the same held-out ratings as a DataFrame with ids give the same score
    m2 = ALS(factors=3, iterations=3, random_state=0).fit(X.filter_entries(~mask), show_progress=False)
    df_test = ratings.iloc[np.flatnonzero(_entry_mask_in_frame_order(ratings, X, mask))]
    assert m2.score(df_test) == pytest.approx(manual, rel=1e-5)
    # a matrix of other users is refused (it would need a projection of the held-out ratings)
    with pytest.raises(ValueError, match="fitted users"):
        m.score(test[:10])
    with pytest.raises(ValueError, match="implicit feedback"):
        DPALS(epsilon=float("inf"), feedback="implicit", factors=2, iterations=1).fit(train).score(test)


def _entry_mask_in_frame_order(df, X, mask):
    """``mask`` (aligned with X.matrix.data) mapped to the rows of the DataFrame ``df``."""
    rows, cols, _ = X.coo_arrays()
    key = pd.MultiIndex.from_arrays([X.user_ids[rows], X.item_ids[cols]])
    held = pd.Series(mask, index=key)
    return held.reindex(pd.MultiIndex.from_frame(df[["user", "item"]])).to_numpy()


def test_score_handles_users_and_items_unseen_in_training(ratings):
    m = ALS(factors=3, iterations=2, random_state=0).fit(ratings, show_progress=False)
    new = pd.DataFrame({"user": ["nobody", "u001"], "item": ["i00", "brand-new"], "rating": [3.0, 4.0]})
    pred = m.predict(new)
    i0 = m.item_ids_.tolist().index("i00")
    u1 = m.user_ids_.tolist().index("u001")
    assert pred[0] == pytest.approx(float(m.global_mean_) + m.item_bias_[i0], rel=1e-5)  # unknown user
    assert pred[1] == pytest.approx(float(m.global_mean_) + m.user_bias_[u1], rel=1e-5)  # unknown item
    assert np.isfinite(m.score(new))


def test_dense_input_nan_marks_unrated_and_zeros_warn():
    rng = np.random.default_rng(0)
    D = rng.integers(1, 6, size=(20, 8)).astype(float)
    D[rng.random(D.shape) < 0.4] = np.nan
    S = sp.csr_matrix(np.nan_to_num(D, nan=0.0))
    a = ALS(factors=2, iterations=2, random_state=0).fit(D, show_progress=False)
    b = ALS(factors=2, iterations=2, random_state=0).fit(S, show_progress=False)
    np.testing.assert_allclose(a.item_factors_, b.item_factors_, rtol=1e-5, atol=1e-6)
    D0 = np.nan_to_num(D, nan=0.0)
    with pytest.warns(UserWarning, match="ratings of 0"):
        ALS(factors=2, iterations=1).fit(D0, show_progress=False)
    with pytest.raises(ValueError, match="Complex"):
        ALS().fit(D + 1j)


def test_fit_transform_and_n_features_in(ratings):
    m = ALS(factors=3, iterations=2, random_state=0)
    U = m.fit_transform(ratings)
    assert m.n_features_in_ == m.n_items_ == ratings["item"].nunique()
    np.testing.assert_allclose(U, m.transform(from_pandas(ratings)), rtol=1e-6)
    with pytest.raises(ValueError, match="expecting"):
        m.transform(sp.csr_matrix((2, 3), dtype=np.float32))


def test_sklearn_style_fit_is_quiet(capsys):
    R = from_pandas(_ratings(30, 10)).matrix
    ALS(factors=2, iterations=2, random_state=0).fit(R, np.zeros(R.shape[0]))  # fit(X, y): no progress bar
    assert capsys.readouterr().err == ""
    ALS(factors=2, iterations=2, random_state=0).fit(R, y=None, show_progress=False)
    assert capsys.readouterr().err == ""
    ALS(factors=2, iterations=2, random_state=0).fit(R)  # implicit's default: show_progress=True
    assert "2/2" in capsys.readouterr().err


def test_zero_factor_model_refuses_user_and_item_similarity(ratings):
    # factors=0 (the private bias model): cosine of empty embeddings is undefined on both sides
    model = DPALS(epsilon=5.0, factors=0, iterations=2, budget=10, random_state=0).fit(from_pandas(ratings).matrix)
    assert model.user_factors_.shape[1] == 0 and model.item_factors_.shape[1] == 0
    with pytest.raises(ValueError, match="no user factors .*user similarity is undefined"):
        model.similar_users(0)
    with pytest.raises(ValueError, match="no user factors"):
        model.similar_users(np.arange(3), N=4)
    with pytest.raises(ValueError, match="no item factors .*item similarity is undefined"):
        model.similar_items(0)


# ---------------------------------------------------------------------- progress bars (issue 27)
_TQDM_MARKS = ("%|", "it/s", "s/it", "sweep", "step")


def _has_bar(err: str) -> bool:
    return any(mark in err for mark in _TQDM_MARKS)


def test_grid_search_prints_no_progress_bars(capfd):
    ratings = _ratings(40, 12)
    search = GridSearchCV(
        DPALS(epsilon=float("inf"), factors=2, iterations=2),
        {"regularization": [1.0, 10.0]},
        cv=RatingSplitCV(2, random_state=0),
        error_score="raise",
    )
    search.fit(ratings)  # 4 fits and the refit
    err = capfd.readouterr().err
    assert not _has_bar(err), err
    DPALS(epsilon=float("inf"), factors=2, iterations=2).fit(ratings)  # a direct fit keeps its bar
    assert "DPALS" in capfd.readouterr().err


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: ALS(factors=2, iterations=2, random_state=0, **kw),
        lambda **kw: DPALS(epsilon=float("inf"), factors=2, iterations=2, random_state=0, **kw),
        lambda **kw: ImplicitALS(factors=2, iterations=2, num_threads=1, random_state=0, **kw),
    ],
    ids=["ALS", "DPALS", "ImplicitALS"],
)
def test_show_progress_is_a_constructor_parameter(make, capfd):
    import inspect

    from sklearn.model_selection import cross_val_predict  # noqa: F401  (scikit-learn on the stack below)
    from sklearn.pipeline import make_pipeline

    R = from_pandas(_ratings(30, 10)).matrix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # implicit's BLAS-threads advice
        assert make().show_progress is None and "show_progress" in make().get_params()
        assert inspect.signature(make().fit).parameters["show_progress"].default is None
        make().fit(R)  # default None, called directly: a bar
        assert _has_bar(capfd.readouterr().err)
        make(show_progress=False).fit(R)  # the constructor's choice
        assert not _has_bar(capfd.readouterr().err)
        make(show_progress=False).fit(R, show_progress=None)  # None falls back to the constructor
        assert not _has_bar(capfd.readouterr().err)
        make(show_progress=False).fit(R, True)  # implicit 0.7's fit(user_items, show_progress) wins
        assert _has_bar(capfd.readouterr().err)
        make().fit(R, np.zeros(R.shape[0]))  # scikit-learn's fit(X, y) with a y: quiet
        assert not _has_bar(capfd.readouterr().err)
        make_pipeline(make()).fit(R)  # called by scikit-learn: quiet
        assert not _has_bar(capfd.readouterr().err)
        make_pipeline(clone(make(show_progress=True))).fit(R)  # an explicit True holds everywhere
        assert _has_bar(capfd.readouterr().err)
    with pytest.raises(ValueError, match="'show_progress' parameter"):
        make(show_progress="yes").fit(R)
    with pytest.raises(TypeError, match="multiple values"):
        make().fit(R, False, show_progress=False)


# ---------------------------------------------------------------------- private model selection (issue 27)
def test_grid_search_over_a_private_model_warns_that_selection_is_not_accounted():
    ratings = _ratings(40, 12)
    grid = {"regularization": [5.0, 20.0]}
    private = DPALS(axes="warn", epsilon=4.0, factors=2, iterations=1, budget=5, random_state=0)
    with pytest.warns(PrivateSelectionWarning, match=r"privrec.tuning.select_private") as record:
        GridSearchCV(private, grid, cv=RatingSplitCV(2, random_state=0), error_score="raise", refit=False).fit(ratings)
    assert all("no privacy ledger counts" in str(w.message) for w in record if w.category is PrivateSelectionWarning)
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        search = GridSearchCV(
            DPALS(epsilon=float("inf"), factors=2, iterations=1),
            grid,
            cv=RatingSplitCV(2, random_state=0),
            error_score="raise",
        ).fit(ratings)
        fitted = clone(private).fit(ratings, show_progress=False)
        fitted.score(ratings)  # a direct evaluation is not model selection
    assert not [w for w in quiet if w.category is PrivateSelectionWarning]
    assert np.isfinite(search.best_score_)


def test_selection_warning_once_per_model():
    # a caller inside sklearn.model_selection (as cross_val_score's scorer): one warning per model
    namespace = {"__name__": "sklearn.model_selection._fake"}
    exec("def score_twice(model, X):\n    return model.score(X), model.score(X)", namespace)
    ratings = _ratings(40, 12)
    model = DPALS(axes="warn", epsilon=4.0, factors=2, iterations=1, budget=5, random_state=0).fit(
        ratings, show_progress=False
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a, b = namespace["score_twice"](model, ratings)
        namespace["score_twice"](model, ratings)
    assert a == b and len([w for w in caught if w.category is PrivateSelectionWarning]) == 1
    other = clone(model).fit(ratings, show_progress=False)
    with pytest.warns(PrivateSelectionWarning):
        namespace["score_twice"](other, ratings)  # another model warns again


def test_a_search_over_private_models_warns_once():
    """Issue 40: one PrivateSelectionWarning per search, not one per candidate clone."""
    from privrec.models import PrivateSelectionWarning

    ratings = _ratings(40, 12)
    search = GridSearchCV(
        DPALS(axes="warn", epsilon=2.0, factors=0, iterations=1, rating_range=(1, 5), show_progress=False),
        {"epsilon": [1.0, 2.0, 4.0]},
        cv=RatingSplitCV(3, random_state=0),
        error_score="raise",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(ratings)  # 9 scored fits
    assert sum(issubclass(w.category, PrivateSelectionWarning) for w in caught) == 1
