"""What a scikit-learn search over a private estimator spent (issue 40): privrec.tuning.search_privacy
composes every release of the search -- each candidate on each fold and the refit -- and says that
the search's choice has no guarantee."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from privrec.data import RatingSplitCV
from privrec.models import DPALS
from privrec.privacy.ledger import PrivacyLedger
from privrec.tuning import search_privacy


def _ratings(n_users=40, n_items=12, seed=0):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((n_users, n_items)) < 0.4)
    return pd.DataFrame(
        {
            "user": [f"u{k:03d}" for k in rows],
            "item": [f"i{k:02d}" for k in cols],
            "rating": rng.integers(1, 6, rows.size).astype(np.float32),
        }
    )


GRID = {"regularization": [5.0, 20.0], "epsilon": [1.0, 3.0]}


def _search(refit=True):
    model = DPALS(axes="warn", epsilon=1.0, factors=2, iterations=1, rating_range=(1, 5), random_state=0)
    return GridSearchCV(model, GRID, cv=RatingSplitCV(2, random_state=0), error_score="raise", refit=refit)


def _quiet_fit(search, ratings):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return search.fit(ratings)


def test_the_search_composes_every_fit_it_made_and_states_that_its_choice_is_unaccounted():
    ratings = _ratings()
    search = _quiet_fit(_search(), ratings)
    out = search_privacy(search, ratings)
    assert out["n_fits"] == 4 * 2 + 1  # 4 settings x 2 folds + the refit
    assert [f["fold"] for f in out["fits"]][-1] == "refit"
    # the same composition from the fits themselves: each candidate refitted on each fold's training
    # rows, and the refit's own report
    ledger = PrivacyLedger()
    folds = [train for train, _ in RatingSplitCV(2, random_state=0).split(ratings)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for params in search.cv_results_["params"]:
            for train in folds:
                fitted = clone(search.estimator).set_params(**params).fit(ratings.iloc[train], show_progress=False)
                ledger.extend(fitted.ledger_)
    ledger.extend(search.best_estimator_.ledger_)
    assert out["epsilon_released"] == pytest.approx(ledger.epsilon(out["delta"]), rel=1e-9)
    # more than any single fit, and finite; the search's own result has no guarantee
    assert max(f["epsilon"] for f in out["fits"]) < out["epsilon_released"] < math.inf
    assert out["epsilon"] == math.inf and "no (epsilon, delta) covers it" in out["unaccounted"]
    assert "select_private" in out["unaccounted"]


def test_an_unfitted_search_is_bounded_with_its_costliest_setting_for_the_refit():
    ratings = _ratings()
    before = search_privacy(_search(), ratings)
    assert before["fits"][-1]["params"]["epsilon"] == 3.0  # the costliest candidate stands in for the refit
    fitted = search_privacy(_quiet_fit(_search(), ratings), ratings)
    assert before["epsilon_released"] >= fitted["epsilon_released"] - 1e-9
    no_refit = search_privacy(_search(refit=False), ratings)
    assert no_refit["n_fits"] == 8 and no_refit["epsilon_released"] < before["epsilon_released"]


def test_a_non_private_setting_releases_without_a_bound_and_bad_inputs_are_refused():
    ratings = _ratings()
    search = GridSearchCV(
        DPALS(axes="warn", factors=2, iterations=1, rating_range=(1, 5)),
        {"epsilon": [2.0, float("inf")]},
        cv=RatingSplitCV(2, random_state=0),
    )
    out = search_privacy(search, ratings)
    assert out["epsilon_released"] == math.inf and out["epsilon"] == math.inf
    from privrec.models import ALS

    with pytest.raises(TypeError, match="plan"):
        search_privacy(GridSearchCV(ALS(), {"regularization": [1.0]}), ratings)
    with pytest.raises(TypeError, match="not a scikit-learn search"):
        search_privacy(type("S", (), {"estimator": DPALS(epsilon=1.0), "cv": 2})(), ratings)


def test_the_selection_warning_names_search_privacy():
    from privrec.models._base import PrivateSelectionWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _search(refit=False).fit(_ratings())
    selection = [w for w in caught if w.category is PrivateSelectionWarning]
    assert len(selection) == 1 and "search_privacy(search, X)" in str(selection[0].message)
