"""Add/remove DP for a plain ratings file (issue 42): with no declared roster or catalogue a private
DPALS fit releases a noisy user count and a private item selection first, plans from them, and
states add/remove of one user; with declarations it keeps zero-out over them."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from privrec.allocation import partition
from privrec.models import DPALS
from privrec.privacy import Budget, PrivacyLedger
from privrec.privacy.ledger import epsilon_from_report
from privrec.tuning.plan import ITEM_SELECTION_DELTA_LABEL, plan_axes


def _frame(n_users=400, n_items=60, per_user=25, seed=0) -> pd.DataFrame:
    """Ratings 1-5 with a popular head: every user rates the first items often, a few rare ones."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_items + 1) ** 0.8
    p /= p.sum()
    rows = []
    for u in range(n_users):
        items = rng.choice(n_items, size=per_user, replace=False, p=p)
        for i in items:
            rows.append((f"u{u}", f"i{i}", float(rng.integers(1, 6))))
    for u in range(0, n_users, 10):  # items only one user rated: the selection must not release them
        rows.append((f"u{u}", f"rare{u}", 4.0))
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


@pytest.fixture(scope="module")
def ratings() -> pd.DataFrame:
    return _frame()


def _fit(df, **kw) -> DPALS:
    params = dict(epsilon=20.0, rating_range=(1, 5), factors=0, random_state=3, axes="release")
    params.update(kw.pop("params", {}))
    return DPALS(**params).fit(df, show_progress=False, **kw)


# ---------------------------------------------------------------------- the mechanisms


def test_weighted_counts_give_each_user_l2_norm_at_most_one():
    R = sp.random(50, 30, density=0.3, format="csr", random_state=1)
    R.data[:] = 1.0
    for max_items in (1, 3, 200):
        total = np.zeros(30)
        for u in range(R.shape[0]):
            row = partition.weighted_item_counts(R[u], max_items, key=7, user_keys=np.array([u]), row_offset=0)
            assert np.linalg.norm(row) <= 1.0 + 1e-12
            assert np.count_nonzero(row) <= max_items
            total += row
        # counts are per user and add up (a pure function of each user's own row and key)
        whole = partition.weighted_item_counts(R, max_items, key=7, user_keys=np.arange(R.shape[0]))
        np.testing.assert_allclose(whole, total)


def test_threshold_bounds_the_chance_that_one_users_own_items_pass():
    sigma, k, delta = 1.0, 5, 0.05
    tau = partition.selection_threshold(sigma, k, delta)
    rng = np.random.default_rng(0)
    for t in (1, 2, 5):  # a new user with t items of their own, weight 1 / sqrt(t) each
        noisy = 1.0 / math.sqrt(t) + rng.normal(0.0, sigma, size=(200_000, t))
        passed = (noisy > tau).any(axis=1).mean()
        assert passed <= delta * 1.1, (t, passed)
    # more noise or more items per user -> a higher threshold; more delta -> a lower one
    assert partition.selection_threshold(2.0, k, delta) > tau
    assert partition.selection_threshold(sigma, 50, delta) > tau
    assert partition.selection_threshold(sigma, k, 0.2) < tau


def test_user_count_is_a_float_release_with_its_event():
    rel = partition.release_user_count(100, 3.0, np.random.default_rng(0))
    assert isinstance(rel.value, float) and rel.value != 100
    (label, event, meta) = rel.events[0]
    assert label == partition.USER_COUNT_LABEL and event.noise_multiplier == 3.0 and meta["sensitivity"] == 1.0


def test_ledger_pays_delta_terms_before_the_events():
    led = PrivacyLedger()
    from privrec.privacy import gaussian_event

    led.record("g", gaussian_event(2.0))
    plain = led.epsilon(1e-5)
    led.spend_delta("threshold", 5e-6)
    assert led.epsilon(1e-5) > plain  # the events now get 5e-6 of the 1e-5
    report = led.report(1e-5)
    assert report["delta_terms"] == [{"label": "threshold", "delta": 5e-6}]
    assert epsilon_from_report(report) == pytest.approx(report["epsilon"])
    assert PrivacyLedger.from_report(report).delta_terms == [("threshold", 5e-6)]
    with pytest.raises(ValueError, match="does not cover"):
        led.epsilon(5e-6)


# ---------------------------------------------------------------------- the fit


def test_plain_dataframe_fit_states_add_remove_and_hides_the_exact_axes(ratings):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no roster / catalogue warning
        m = _fit(ratings)
    n_exact = ratings["user"].nunique()
    rated = set(ratings["item"])
    report = m.privacy_report()
    assert report["neighbouring_relation"].startswith("user-level add/remove")
    assert not any("roster" in p or "catalogue" in p for p in report["public"])
    labels = [e["label"] for e in report["events"]]
    assert labels[:2] == [partition.USER_COUNT_LABEL, partition.ITEM_SELECTION_LABEL]
    assert report["delta_terms"][0]["label"] == ITEM_SELECTION_DELTA_LABEL
    assert report["epsilon"] <= 20.0 and epsilon_from_report(report) == pytest.approx(report["epsilon"])
    # nothing released or printed as private equals the exact user count or the exact item set
    assert m.config_["n_users"] != n_exact and m.config_["n_users"] == pytest.approx(n_exact, rel=0.2)
    assert set(m.item_ids_) < rated and not any(str(i).startswith("rare") for i in m.item_ids_)
    assert m.item_factors_.shape[0] == len(m.item_ids_) == m.config_["n_items"]
    described = json.dumps(m.describe(), default=str)
    assert f'"n_users": {n_exact},' not in described and f'"n_users": {n_exact}}}' not in described
    assert m.describe()["item_axis"] == {"source": "selection", "public": True}


def test_declared_roster_and_catalogue_keep_zero_out(ratings):
    users, items = sorted(ratings["user"].unique()), sorted(ratings["item"].unique())
    m = _fit(ratings, users=users, items=items)
    report = m.privacy_report()
    assert report["neighbouring_relation"].startswith("user-level zero-out")
    assert "delta_terms" not in report
    assert [e["label"] for e in report["events"]][0] == "item counts"
    assert m.config_["n_users"] == len(users) and m.item_factors_.shape[0] == len(items)


def test_declared_catalogue_only_releases_the_user_count(ratings):
    items = sorted(ratings["item"].unique())
    m = _fit(ratings, items=items)
    report = m.privacy_report()
    labels = [e["label"] for e in report["events"]]
    assert labels[0] == partition.USER_COUNT_LABEL and partition.ITEM_SELECTION_LABEL not in labels
    assert report["neighbouring_relation"].startswith("user-level add/remove")
    assert m.item_factors_.shape[0] == len(items)


def test_bare_matrix_shape_is_the_callers_declaration():
    R = sp.random(200, 30, density=0.2, format="csr", random_state=0)
    R.data = np.ceil(R.data * 5)
    m = DPALS(epsilon=5.0, rating_range=(1, 5), factors=0, random_state=0, axes="release").fit(R, show_progress=False)
    assert m.privacy_report()["neighbouring_relation"].startswith("user-level zero-out")
    assert m.item_factors_.shape == (30, 0)


def test_removing_one_user_changes_nothing_public_when_the_releases_are_held(ratings, monkeypatch):
    """With the noisy count and the selected items held fixed, deleting one user leaves the plan,
    the config, the event list and every array shape unchanged (nothing exact shapes them)."""
    from axes_release_data import hold_axes_releases

    held = hold_axes_releases(monkeypatch)
    for params in ({"factors": 0}, {"factors": 2, "iterations": 2}, {"feedback": "implicit", "rating_range": None}):
        held.clear()
        a = _fit(ratings, params=params)
        victim = ratings["user"].iloc[0]
        b = _fit(ratings[ratings["user"] != victim], params=params)
        ra, rb = a.privacy_report(), b.privacy_report()
        assert [(e["label"], e["event"]) for e in ra["events"]] == [(e["label"], e["event"]) for e in rb["events"]]
        assert ra["epsilon"] == rb["epsilon"]
        assert a.config_ == b.config_
        for name in ("item_factors_", "item_bias_", "item_counts_", "item_exposure_"):
            va, vb = getattr(a, name), getattr(b, name)
            assert (va is None) == (vb is None) and (va is None or va.shape == vb.shape), name
        assert list(a.item_ids_) == list(b.item_ids_)


def test_no_item_selected_is_a_clear_error():
    tiny = _frame(n_users=20, n_items=10, per_user=3)
    with pytest.raises(ValueError, match="no item passed the private item selection"):
        DPALS(epsilon=0.5, rating_range=(1, 5), factors=0, axes="release").fit(tiny, show_progress=False)


def test_save_load_keeps_the_selected_ids_and_the_statement(ratings, tmp_path):
    from privrec.models import load_model

    m = _fit(ratings)
    path = tmp_path / "m.npz"
    m.save(path)
    back = load_model(path)
    assert list(back.item_ids_) == list(m.item_ids_)
    assert back.privacy_report()["neighbouring_relation"] == m.privacy_report()["neighbouring_relation"]
    assert back.privacy_report()["delta_terms"] == m.privacy_report()["delta_terms"]
    some_user = ratings["user"].iloc[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the user's items outside the selection are ignored quietly
        assert len(back.recommend_ids(some_user, ratings, N=3, filter_already_liked_items=False)[0]) == 3


def test_plan_before_the_releases_is_two_stage_and_the_budget_charges_it(ratings, tmp_path):
    model = DPALS(epsilon=5.0, rating_range=(1, 5), random_state=2, axes="release")
    plan = model.plan(ratings)
    assert plan.kind == "two-stage" and plan.delta_terms
    assert plan.planned_epsilon() <= 5.0
    assert plan.as_dict()["n_users"] == "released (noisy count)"
    budget = Budget.create(tmp_path / "b.json", epsilon=6.0, delta=1e-4)
    from privrec.privacy.budget import fit_with_budget

    fit_with_budget(model, ratings, budget)
    again = Budget.open(tmp_path / "b.json")
    assert len(again.releases) == 1 and again.releases[0].delta_terms
    assert again.spent() == pytest.approx(PrivacyLedger.from_report(model.privacy_report()).epsilon(1e-4), rel=1e-6)
    with pytest.raises(Exception, match="would bring it"):
        fit_with_budget(DPALS(epsilon=5.0, rating_range=(1, 5), axes="release"), ratings, again)


def test_plan_axes_leaves_the_fit_a_smaller_target():
    m = DPALS(epsilon=5.0, delta=1e-5, axes="release")
    axes = plan_axes(m, roster=False, catalogue=False)
    assert axes.relation == "add/remove" and axes.epsilon < 5.0 and axes.delta < 1e-5
    assert plan_axes(m, roster=True, catalogue=True) is None
    assert plan_axes(DPALS(epsilon=math.inf), roster=False, catalogue=False) is None


def test_cli_plain_csv_states_add_remove_without_warnings(tmp_path, ratings, capsys):
    from privrec.cli import main

    csv = tmp_path / "r.csv"
    ratings.to_csv(csv, index=False)
    code = main(["fit", "--ratings", str(csv), "--rating-range", "1", "5", "--epsilon", "20", "--json", "--quiet"])
    assert code == 0
    res = json.loads(capsys.readouterr().out)
    assert res["warnings"] == []
    assert "adding or removing one user" in res["privacy_summary"]
    relation = json.dumps(res["privacy_events"])
    assert "add/remove" in relation and "zero-out" not in relation
    assert res["config"]["n_users"] != ratings["user"].nunique()
    assert res["config"]["n_items"] < ratings["item"].nunique()
    assert res["non_private"]["metrics"]["rmse"] > 0 and res["non_private"]["metrics"]["recall@20"] >= 0


def test_axes_warn_keeps_the_zero_out_fit_on_the_datas_axes(ratings):
    from privrec.models.inputs import ItemCatalogueWarning, UserRosterWarning

    with pytest.warns((ItemCatalogueWarning, UserRosterWarning)):
        m = DPALS(epsilon=20.0, rating_range=(1, 5), factors=0, random_state=0, axes="warn").fit(
            ratings, show_progress=False
        )
    assert m.privacy_report()["neighbouring_relation"].startswith("user-level zero-out")
    assert m.item_factors_.shape[0] == ratings["item"].nunique()


def test_the_default_releases_undeclared_axes_without_a_warning(ratings):
    """Issue 42: ``DPALS()`` on a plain DataFrame releases what is undeclared (no warning); a
    declared axis is used as given and only the other one is released."""
    users, items = sorted(ratings["user"].unique()), sorted(ratings["item"].unique())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = DPALS(epsilon=20.0, rating_range=(1, 5), factors=0, random_state=0).fit(ratings, show_progress=False)
        roster = DPALS(epsilon=20.0, rating_range=(1, 5), factors=0, random_state=0).fit(
            ratings, users=users, show_progress=False
        )
        both = DPALS(epsilon=20.0, rating_range=(1, 5), factors=0, random_state=0).fit(
            ratings, users=users, items=items, show_progress=False
        )
    assert DPALS().axes == "release"
    assert plain.privacy_report()["neighbouring_relation"].startswith("user-level add/remove")
    assert plain.axes_["roster"] == "noisy count" and plain.axes_["catalogue"] == "private selection"
    assert plain.config_["n_users"] != len(users) and set(plain.item_ids_) < set(items)
    labels = [e.label for e in roster.ledger_.entries]
    assert partition.ITEM_SELECTION_LABEL in labels and partition.USER_COUNT_LABEL not in labels
    assert roster.config_["n_users"] == len(users)
    assert both.privacy_report()["neighbouring_relation"].startswith("user-level zero-out")
    assert not getattr(both, "axes_", None) and list(both.item_ids_) == items


def test_catalogue_size_is_released_with_sensitivity_max_items():
    """The noisy number of sampled items: one user changes the exact number by at most the items
    they sampled (<= max_items), the noise has std multiplier x max_items, and the event is the
    Gaussian of that multiplier."""
    from privrec.allocation.partition import release_catalogue_size, weighted_item_counts
    from privrec.data import from_pandas

    df = _frame(n_users=120, n_items=300, per_user=12)
    x = from_pandas(df)
    R = x.matrix.tocsr()
    k = 5
    full = np.count_nonzero(weighted_item_counts(R, k, key=7) > 0)
    for u in range(0, R.shape[0], 7):
        keep = np.ones(R.shape[0], dtype=bool)
        keep[u] = False
        # the same per-user samples without user u (keyed on row positions: pass the users' keys)
        without = weighted_item_counts(R[keep], k, key=7, user_keys=np.flatnonzero(keep))
        assert 0 <= full - np.count_nonzero(without > 0) <= k
    rng = np.random.default_rng(0)
    draws = np.array([release_catalogue_size(10_000, 200, 0.5, rng).value for _ in range(4000)])
    assert abs(draws.std() / (0.5 * 200) - 1) < 0.05 and abs(draws.mean() - 10_000) < 5
    rel = release_catalogue_size(3, 200, 0.5, rng)
    assert rel.value >= 1.0 and rel.events[0][0] == partition.CATALOGUE_SIZE_LABEL


def test_implicit_head_on_a_selected_axis_is_the_catalogues_fraction():
    """The implicit rule's head restriction is a fraction of the catalogue; on a selected axis it is
    that fraction of the released catalogue size, in items (every selected item when fewer pass)."""
    m = DPALS(epsilon=20.0, feedback="implicit")
    axes = plan_axes(m, roster=False, catalogue=False)
    assert axes.catalogue_multiplier is not None
    assert [lab for lab, _ in axes.events()][-1] == partition.CATALOGUE_SIZE_LABEL
    auto = m._resolve_config((200_000, 20_000)).item_frac  # the head tier on a declared catalogue
    assert auto is not None and auto < 1.0
    cfg = m._resolve_config((200_000, 3_000), selected_items=True, catalogue_size=20_000.0)
    assert cfg.item_frac == pytest.approx(auto * 20_000 / 3_000)
    assert m._resolve_config((200_000, 1_500), selected_items=True, catalogue_size=20_000.0).item_frac is None
    assert m._resolve_config((200_000, 3_000), selected_items=True).item_frac is None
    # a noisy size below the number of selected items is noise: at least every selected item's worth
    low = m._resolve_config((200_000, 3_000), selected_items=True, catalogue_size=1.0).item_frac
    assert low == pytest.approx(auto)
    # the rule's small-rank tier trains every item: no cut, whatever the size
    small = m._resolve_config((3_000, 300), selected_items=True, catalogue_size=1.0)
    assert m._resolve_config((3_000, 3_000)).item_frac is None and small.item_frac is None
    # not released where it is not read: explicit ratings, a given item_frac, a declared catalogue
    assert plan_axes(DPALS(epsilon=20.0), roster=False, catalogue=False).catalogue_multiplier is None
    given = DPALS(epsilon=20.0, feedback="implicit", item_frac=0.5)
    assert plan_axes(given, roster=False, catalogue=False).catalogue_multiplier is None
    assert plan_axes(m, roster=False, catalogue=True).catalogue_multiplier is None
    # its share comes out of the fit's
    assert axes.epsilon < plan_axes(DPALS(epsilon=20.0), roster=False, catalogue=False).epsilon


def test_implicit_fit_releases_the_catalogue_size(ratings):
    m = _fit(ratings, params={"feedback": "implicit", "rating_range": None, "factors": 2})
    labels = [e.label for e in m.ledger_.entries]
    assert labels[:3] == [partition.USER_COUNT_LABEL, partition.ITEM_SELECTION_LABEL, partition.CATALOGUE_SIZE_LABEL]
    assert m.axes_["catalogue_released"] >= 1.0 and m.axes_["catalogue_size_multiplier"] > 0
    assert any("noisy number of items" in r for r in m.privacy_report()["released"])
    from privrec.commands.report import _axes_sentence

    assert "number of items somebody rated is released as a noisy count" in _axes_sentence(m.privacy_report())
    assert m.privacy_report()["epsilon"] <= 20.0
