"""DPALS(axes="release") on Dask (issue 42): a partitioned ratings table with nothing declared is
fitted as the local fit of the same table -- the noisy user count and the private item selection
first (the weighted counts summed over partitions), one plan from them, the fit on the selected
items -- with the same events, plan, configuration and selected ids, under add/remove of one user.

Most tests run the driver's tasks in-process (``SerialClient``: the same task bodies, no cluster);
one runs on the shared 2-process LocalCluster. Tolerance of the factors as in
``tests/test_distributed_fit.py`` (the float sums over partitions are added in another order).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed", reason="dask.distributed is optional (pip install 'privrec[dask]')")
pytest.importorskip("dask.dataframe", reason="dask.dataframe is optional (pip install 'dask[dataframe]')")

from axes_release_data import BASE, SETTINGS, hold_axes_releases, plain_ratings

from privrec.allocation import partition
from privrec.distributed import SerialClient, fit, partition_interactions
from privrec.models import DPALS, dpals_axes
from privrec.tuning.plan import ITEM_SELECTION_DELTA_LABEL, plan_axes, plan_fit

REL_TOL = 1e-4


@pytest.fixture(scope="module")
def ratings() -> pd.DataFrame:
    return plain_ratings()


@pytest.fixture(scope="module")
def parts(ratings):
    return partition_interactions(ratings, n_partitions=3, client=SerialClient())


def _events(model):
    return [(e.label, e.event) for e in model.ledger_.entries]


def _close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    scale = max(1.0, float(np.abs(b).max(initial=0.0)))
    assert float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0)) <= REL_TOL * scale, what


def _assert_same_fit(dist, local):
    assert _events(dist) == _events(local)
    assert dist.ledger_.delta_terms == local.ledger_.delta_terms
    assert dist.config_ == local.config_
    assert dist.axes_ == local.axes_
    assert dist.noise_scales_ == local.noise_scales_
    assert dist.privacy_report()["epsilon"] == local.privacy_report()["epsilon"]
    assert list(dist.item_ids_) == list(local.item_ids_)
    assert dist._item_axis == local._item_axis
    np.testing.assert_array_equal(dist.item_counts_, local.item_counts_)
    np.testing.assert_array_equal(dist.trained_items_, local.trained_items_)
    _close(dist.item_factors_, local.item_factors_, "item_factors_")
    if local.item_bias_ is None:
        assert dist.item_bias_ is None
    else:
        _close(dist.item_bias_, local.item_bias_, "item_bias_")
    assert float(dist.global_mean_) == pytest.approx(float(local.global_mean_), abs=1e-12)


# ---------------------------------------------------------------------- equality with the local fit


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_dask_fit_equals_the_local_fit_of_the_same_table(ratings, parts, setting):
    kw = {**BASE, **SETTINGS[setting]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no roster / catalogue warning on either path
        dist = fit(DPALS(**kw), parts, client=SerialClient())
        local = DPALS(**kw).fit(ratings, show_progress=False)
    _assert_same_fit(dist, local)
    labels = [e.label for e in dist.ledger_.entries]
    assert labels[:2] == [partition.USER_COUNT_LABEL, partition.ITEM_SELECTION_LABEL]
    assert dist.user_factors_ is None


def test_released_ids_are_exactly_the_selected_items_and_the_report_states_add_remove(ratings, parts, monkeypatch):
    chosen: list = []
    real = dpals_axes.release_item_selection

    def spy(weighted, z, k, delta, rng):
        rel = real(weighted, z, k, delta, rng)
        chosen.append(np.asarray(rel.value))
        return rel

    monkeypatch.setattr(dpals_axes, "release_item_selection", spy)
    m = fit(DPALS(**BASE, factors=2, iterations=1), parts, client=SerialClient())
    (selected,) = chosen
    np.testing.assert_array_equal(m.item_ids_, np.asarray(parts.item_ids)[selected])
    assert not any(str(i).startswith("rare") for i in m.item_ids_)  # one user's own items never pass
    assert m.item_factors_.shape == (selected.size, 2) and m.item_counts_.shape == (selected.size,)
    assert m.config_["n_items"] == selected.size == m.axes_["items_selected"]
    assert m.config_["n_users"] == m.axes_["users_released"] != parts.n_users
    assert m.describe()["item_axis"] == {"source": "selection", "public": True} and not m._item_ids_given
    report = m.privacy_report()
    assert report["neighbouring_relation"].startswith("user-level add/remove")
    assert report["delta_terms"] == [{"label": ITEM_SELECTION_DELTA_LABEL, "delta": m.axes_["item_selection_delta"]}]
    assert report["epsilon"] <= BASE["epsilon"]
    assert m.config_["epsilon_spent"] == pytest.approx(report["epsilon"], rel=1e-9)
    # ids map back: a user's recommendations are among the selected items
    history = ratings[ratings.user == "u1"]
    ids, _ = m.recommend_ids("u1", history, N=3)
    assert set(ids) <= set(m.item_ids_)


def test_events_after_the_axes_are_the_one_plan_of_the_released_values(parts):
    """Independently of the local fit: the events after the two releases are exactly those of
    plan_fit for the noisy count and the selected items at the target the releases leave."""
    kw = {**BASE, "factors": 2, "iterations": 2}
    m = fit(DPALS(**kw), parts, client=SerialClient())
    axes = plan_axes(DPALS(**kw), roster=False, catalogue=False)
    shape = (max(1, round(m.axes_["users_released"])), m.axes_["items_selected"])
    plan = plan_fit(DPALS(**kw), shape, keys="user ids", target=(axes.epsilon, axes.delta), selected_items=True)
    assert _events(m) == list(axes.events()) + list(plan.events)
    assert m.ledger_.delta_terms == list(axes.delta_terms())
    assert m.noise_scales_ == {"count": plan.calibration.count_scale, "train": plan.calibration.train_scale}
    assert m.config_["epsilon_fit"] == axes.epsilon and m.config_["iterations"] == plan.config.iterations


def test_declared_catalogue_releases_only_the_user_count(ratings):
    catalogue = np.array(sorted(ratings["item"].unique()))
    given = partition_interactions(ratings, n_partitions=3, client=SerialClient(), items=catalogue)
    kw = {**BASE, "factors": 2, "iterations": 1}
    dist = fit(DPALS(**kw), given, client=SerialClient())
    local = DPALS(**kw).fit(ratings, items=catalogue, show_progress=False)
    labels = [e.label for e in dist.ledger_.entries]
    assert labels[0] == partition.USER_COUNT_LABEL and partition.ITEM_SELECTION_LABEL not in labels
    assert dist.privacy_report()["neighbouring_relation"].startswith("user-level add/remove")
    assert dist.item_factors_.shape[0] == catalogue.size and dist._item_ids_given
    _assert_same_fit(dist, local)


def test_removing_one_user_changes_nothing_public_when_the_releases_are_held(ratings, monkeypatch):
    """With the noisy count and the selected items held fixed, a table without one user gives the
    same plan, configuration, events and array shapes (nothing exact shapes them)."""
    held = hold_axes_releases(monkeypatch)
    victim = ratings["user"].iloc[0]
    without = ratings[ratings["user"] != victim]
    for params in ({"factors": 0}, {"factors": 2, "iterations": 2}):
        held.clear()
        kw = {**BASE, **params}
        a = fit(DPALS(**kw), ratings, client=SerialClient(), n_partitions=3)
        b = fit(DPALS(**kw), without, client=SerialClient(), n_partitions=3)
        ra, rb = a.privacy_report(), b.privacy_report()
        assert [(e["label"], e["event"]) for e in ra["events"]] == [(e["label"], e["event"]) for e in rb["events"]]
        assert ra["epsilon"] == rb["epsilon"] and ra["delta_terms"] == rb["delta_terms"]
        assert a.config_ == b.config_ and a.noise_scales_ == b.noise_scales_ and a.axes_ == b.axes_
        for name in ("item_factors_", "item_bias_", "item_counts_", "item_exposure_", "trained_items_"):
            va, vb = getattr(a, name), getattr(b, name)
            assert (va is None) == (vb is None) and (va is None or va.shape == vb.shape), name
        assert list(a.item_ids_) == list(b.item_ids_)


def test_automatic_selection_after_the_axes_equals_the_local_one(ratings, parts, monkeypatch):
    """Where the rule leaves the rank to the private selection (forced here on a small table),
    the candidates plan for the noisy count and the selected items on Dask too."""
    import privrec.tuning.rule as rule

    monkeypatch.setattr(rule, "SELECTION_SIGNAL", 2000.0)
    kw = dict(BASE)
    dist = fit(DPALS(**kw), parts, client=SerialClient())
    local = DPALS(**kw).fit(ratings, show_progress=False)
    assert any(e.label == "selection scores" for e in local.ledger_.entries)
    _assert_same_fit(dist, local)
    assert dist.selection_["automatic"]


def test_no_item_selected_is_the_local_error():
    tiny = plain_ratings(n_users=20, n_items=10, per_user=3)
    with pytest.raises(ValueError, match="no item passed the private item selection"):
        fit(DPALS(epsilon=0.5, rating_range=(1, 5), factors=0, axes="release"), tiny, client=SerialClient())


def test_ratings_outside_the_range_are_refused_before_any_release(ratings, monkeypatch):
    def never(*args, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("released before the input checks")

    monkeypatch.setattr(dpals_axes, "release_user_count", never)
    bad = ratings.assign(rating=ratings["rating"].where(ratings.index != 5, 9.0))
    with pytest.raises(ValueError, match="outside the declared rating_range"):
        fit(DPALS(**BASE, factors=0), bad, client=SerialClient(), n_partitions=2)


def test_epsilon_inf_and_axes_warn_fit_the_tables_axes(ratings, parts):
    inf = fit(DPALS(epsilon=math.inf, factors=2, iterations=1, axes="release"), parts, client=SerialClient())
    assert inf.axes_ is None and inf.item_factors_.shape[0] == parts.n_items
    warn = fit(DPALS(**{**BASE, "axes": "warn"}, factors=0), parts, client=SerialClient())
    assert warn.axes_ is None and warn.item_factors_.shape[0] == parts.n_items
    assert warn.privacy_report()["neighbouring_relation"].startswith("user-level zero-out")


def test_on_a_cluster_equals_the_local_fit(client, ratings):
    kw = {**BASE, "factors": 2, "iterations": 2}
    dist = fit(DPALS(**kw), ratings, client=client, n_partitions=4)
    local = DPALS(**kw).fit(ratings, show_progress=False)
    _assert_same_fit(dist, local)
