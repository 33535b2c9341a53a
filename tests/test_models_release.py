"""A DPALS fit's fitted state is one object, ``release_`` (issue 41: ``privrec.models.release``):
the fitted attributes read and write it, each fit starts a new one, and the automatic selection
adopts the winner's release in one assignment instead of copying a clone's attributes."""

import copy
import pickle
import warnings

import numpy as np
import pytest

import privrec.tuning.auto as auto
from privrec.data.synthetic import PRESETS, low_rank_interactions
from privrec.models import ALS, DPALS
from privrec.models.release import RELEASE_FIELDS, FitRelease, flat_state, nested_state


@pytest.fixture(scope="module")
def ratings():
    kw = PRESETS["synthetic-biases"]._generator_arguments()
    data = low_rank_interactions(3_000, 120, 30_000, **kw, random_state=3, name="release")
    return data.interactions.matrix.tocsr().astype(np.float32)


def test_the_fitted_attributes_are_the_fields_of_one_release(ratings):
    m = DPALS(epsilon=5.0, factors=2, iterations=1, random_state=0).fit(ratings, show_progress=False)
    rel = vars(m)["release_"]
    assert isinstance(rel, FitRelease)
    assert not {f for f in RELEASE_FIELDS if f in vars(m)}  # none beside the release
    assert m.item_factors_ is rel.item_factors_ and m.config_ is rel.config_ and m.ledger_ is rel.ledger_
    assert set(rel.fields()) <= set(RELEASE_FIELDS)
    assert m.axes_ is None  # undeclared axes not released: the default
    m.item_bias_ = np.zeros_like(m.item_bias_)  # writes go to the release
    assert rel.item_bias_ is m.item_bias_
    del m.fit_timings_
    assert not hasattr(m, "fit_timings_") and "fit_timings_" not in rel.fields()
    with pytest.raises(AttributeError, match="no attribute 'selection_'"):
        m.selection_  # noqa: B018 -- not set by a fit without a selection
    with pytest.raises(AttributeError, match="not fitted"):
        DPALS().item_factors_  # noqa: B018
    assert getattr(DPALS(), "item_factors_", None) is None
    with pytest.raises(TypeError, match="not a field"):
        FitRelease(item_ids_=1)
    assert "release_" not in vars(ALS(factors=2, iterations=1).fit(ratings, show_progress=False))  # ALS: as before


def test_a_refit_starts_a_new_release(ratings):
    m = DPALS(epsilon=5.0, factors=2, iterations=1, random_state=0).fit(ratings, show_progress=False)
    first = vars(m)["release_"]
    m.selection_ = {"stale": True}  # a field the next fit does not set
    m.set_params(factors=0).fit(ratings, show_progress=False)
    assert vars(m)["release_"] is not first and not hasattr(m, "selection_")
    assert first.item_factors_.shape[1] == 2 and m.item_factors_.shape[1] == 0


def test_the_selection_adopts_the_winners_release_in_one_assignment(monkeypatch):
    # where the rule proposes a rank (tests/test_tuning_auto_selection.py: 8,000 users, eps = 30)
    kw = PRESETS["synthetic-biases"]._generator_arguments()
    ratings = low_rank_interactions(8_000, 300, 48_000, **kw, random_state=11, name="selects").interactions
    ratings = ratings.matrix.tocsr().astype(np.float32)
    seen = {}
    real = auto.run_selection

    def spy(*args, **kwargs):
        sel = real(*args, **kwargs)
        seen["winner"] = sel.best_estimator_
        return sel

    monkeypatch.setattr(auto, "run_selection", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = DPALS(epsilon=30.0, random_state=1)
        assert m.plan(ratings).kind == "selection"
        m.fit(ratings, show_progress=False)
    winner = seen["winner"]
    assert vars(m)["release_"] is vars(winner)["release_"]  # the same object: nothing copied
    assert m.selection_["automatic"] is True
    assert m.config_["epsilon"] == 30.0 and m.config_["epsilon_spent"] <= 30.0 * (1 + 1e-9)
    assert [e.label for e in m.ledger_.entries][-1] == "selection scores"


def test_copies_and_pickles_keep_the_release_apart(ratings):
    m = DPALS(epsilon=5.0, factors=2, iterations=1, random_state=0).fit(ratings, show_progress=False)
    original = m.item_factors_.copy()
    c = copy.copy(m)
    c.item_factors_ = np.zeros_like(original)  # the copy's field only
    np.testing.assert_array_equal(m.item_factors_, original)
    assert vars(c)["release_"] is not vars(m)["release_"]
    d = copy.deepcopy(m)
    np.testing.assert_array_equal(d.item_factors_, original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the private-state warning of pickling
        p = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(p.item_factors_, original)
    assert p.user_factors_ is None and not hasattr(p, "fit_timings_")  # unreleased fields dropped, as before
    # an older pickle's flat state (fields beside the parameters) goes back into one release
    flat = flat_state(vars(m))
    assert "release_" not in flat and flat["item_factors_"] is m.item_factors_
    old = DPALS.__new__(DPALS)
    old.__setstate__(flat)
    np.testing.assert_array_equal(old.item_factors_, original)
    assert isinstance(vars(old)["release_"], FitRelease)
    assert nested_state({"a": 1}) == {"a": 1}
