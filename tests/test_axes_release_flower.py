"""DPALS(axes="release") on Flower (issue 42): clients holding a plain ratings table's users, with
nothing declared, give the local fit of that table -- the noisy user count and the private item
selection first (the clients' weighted counts summed by the server), one plan from them, the fit on
the selected columns -- with the same events, plan, configuration and selected items, under
add/remove of one user. Runs on the in-process grid (the apps' protocol, no runtime).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # before flwr is imported: no usage reports
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

pytest.importorskip("flwr", reason="Flower is optional (pip install 'privrec[flower]')")

from axes_release_data import BASE, SETTINGS, hold_axes_releases, plain_ratings

from privrec.allocation import partition
from privrec.federated import flower
from privrec.federated.flower.testing import InProcessGrid
from privrec.models import DPALS, dpals_axes
from privrec.tuning.plan import plan_axes, plan_fit

N_CLIENTS = 4


@pytest.fixture(scope="module")
def ratings() -> pd.DataFrame:
    return plain_ratings()


@pytest.fixture(scope="module")
def vocabulary(ratings) -> np.ndarray:
    """The clients' item columns: the sorted item ids, as the local fit of the table orders them."""
    return np.array(sorted(ratings["item"].unique()))


def _fed(df, kw, fault=None, **options):
    grid = InProcessGrid(flower.client_app(shards=flower.split_users(df, N_CLIENTS), fault=fault), N_CLIENTS)
    return flower.fit_dpals(DPALS(**kw), grid, min_clients=N_CLIENTS, **options)


def _events(model):
    return [(e.label, e.event) for e in model.ledger_.entries]


def _assert_same_fit(fed, local, vocabulary):
    assert _events(fed) == _events(local)
    assert fed.ledger_.delta_terms == local.ledger_.delta_terms
    assert fed.config_ == local.config_
    assert fed.axes_ == local.axes_
    assert fed.noise_scales_ == local.noise_scales_
    assert fed.privacy_report()["epsilon"] == local.privacy_report()["epsilon"]
    np.testing.assert_array_equal(fed.item_counts_, local.item_counts_)
    np.testing.assert_array_equal(fed.trained_items_, local.trained_items_)
    scale = max(1.0, float(np.abs(local.item_factors_).max(initial=0.0)))
    np.testing.assert_allclose(fed.item_factors_, local.item_factors_, atol=1e-4 * scale, rtol=0)
    if local.item_bias_ is None:
        assert fed.item_bias_ is None
    else:
        np.testing.assert_allclose(fed.item_bias_, local.item_bias_, atol=1e-4 * scale, rtol=0)
    assert float(fed.global_mean_) == float(local.global_mean_)
    if local._item_axis == "selection":  # the server's ids are the selected columns of the clients' item order
        assert list(vocabulary[fed.item_ids_]) == list(local.item_ids_) and fed._item_axis == "selection"


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_flower_fit_equals_the_local_fit_of_the_same_table(ratings, vocabulary, setting):
    kw = {**BASE, **SETTINGS[setting]}
    fed = _fed(ratings, kw)
    local = DPALS(**kw).fit(ratings, show_progress=False)
    _assert_same_fit(fed, local, vocabulary)
    rounds = [e["label"] for e in fed.federation_["rounds"]]
    assert rounds[:3] == ["roster", "item selection", "item counts"]
    assert fed.privacy_report()["neighbouring_relation"].startswith("user-level add/remove")
    assert "weighted per-item counts" in flower.privacy_report(fed)["federation"]["server_sees"]


def test_released_events_are_the_local_plan_of_the_released_values(ratings, monkeypatch):
    """The events are the axes' releases, then exactly plan_fit's for the noisy count and the
    selected items at the target the releases leave; the released ids are the selected columns."""
    kw = {**BASE, "factors": 2, "iterations": 2}
    chosen: list = []
    real = dpals_axes.release_item_selection

    def spy(weighted, z, k, delta, rng):
        rel = real(weighted, z, k, delta, rng)
        chosen.append(np.asarray(rel.value))
        return rel

    monkeypatch.setattr(dpals_axes, "release_item_selection", spy)
    fed = _fed(ratings, kw)
    axes = plan_axes(DPALS(**kw), roster=False, catalogue=False)
    shape = (max(1, round(fed.axes_["users_released"])), fed.axes_["items_selected"])
    plan = plan_fit(DPALS(**kw), shape, keys="user ids", target=(axes.epsilon, axes.delta), selected_items=True)
    assert _events(fed) == list(axes.events()) + list(plan.events)
    assert fed.ledger_.delta_terms == list(axes.delta_terms())
    assert fed.config_["n_users"] == fed.axes_["users_released"] and fed.config_["n_items"] == shape[1]
    (selected,) = chosen
    np.testing.assert_array_equal(fed.item_ids_, selected)
    assert fed.item_factors_.shape == (selected.size, 2)


def test_declared_axes_keywords(ratings, vocabulary):
    kw = {**BASE, "factors": 2, "iterations": 1}
    # the clients' columns declared as the catalogue: only the user count is released
    fed = _fed(ratings, kw, catalogue=True)
    local = DPALS(**kw).fit(ratings, items=vocabulary, show_progress=False)
    labels = [e.label for e in fed.ledger_.entries]
    assert labels[0] == partition.USER_COUNT_LABEL and partition.ITEM_SELECTION_LABEL not in labels
    assert fed.item_factors_.shape[0] == vocabulary.size
    _assert_same_fit(fed, local, vocabulary)
    # both declared: the zero-out fit of axes="warn"
    both = _fed(ratings, kw, roster=True, catalogue=True)
    warn = _fed(ratings, {**kw, "axes": "warn"})
    assert both.axes_ is None and _events(both) == _events(warn)
    np.testing.assert_array_equal(both.item_factors_, warn.item_factors_)
    assert both.privacy_report()["neighbouring_relation"].startswith("user-level zero-out")


def test_removing_one_user_changes_nothing_public_when_the_releases_are_held(ratings, monkeypatch):
    hold_axes_releases(monkeypatch)
    kw = {**BASE, "factors": 2, "iterations": 2}
    a = _fed(ratings, kw)
    b = _fed(ratings[ratings["user"] != ratings["user"].iloc[0]], kw)
    assert _events(a) == _events(b) and a.privacy_report()["epsilon"] == b.privacy_report()["epsilon"]
    assert a.config_ == b.config_ and a.noise_scales_ == b.noise_scales_ and a.axes_ == b.axes_
    for name in ("item_factors_", "item_bias_", "item_counts_", "item_exposure_", "trained_items_"):
        va, vb = getattr(a, name), getattr(b, name)
        assert (va is None) == (vb is None) and (va is None or va.shape == vb.shape), name
    assert list(a.item_ids_) == list(b.item_ids_)


def test_automatic_selection_after_the_axes_equals_the_local_one(ratings, vocabulary, monkeypatch):
    import privrec.tuning.rule as rule

    monkeypatch.setattr(rule, "SELECTION_SIGNAL", 2000.0)  # the selection runs on this small table
    fed = _fed(ratings, dict(BASE))
    local = DPALS(**BASE).fit(ratings, show_progress=False)
    assert any(e.label == "selection scores" for e in local.ledger_.entries)
    _assert_same_fit(fed, local, vocabulary)
    assert "selection losses" in [e["label"] for e in fed.federation_["rounds"]]


def test_a_client_left_out_of_the_selection_round_keeps_the_events(ratings):
    """A client that never answers the item selection is left out of that release only: the
    events and epsilon are those of a full run, and the round log says which release was short."""
    kw = {**BASE, "factors": 0}
    with pytest.warns(UserWarning, match="without some clients' users"):
        short = _fed(ratings, kw, fault=lambda info: info["index"] == 1 and info["stage"] == "axes", max_retries=1)
    full = _fed(ratings, kw)
    assert _events(short) == _events(full)
    assert short.federation_["short_rounds"] == ["item selection"]


def test_no_item_selected_is_the_local_error():
    tiny = plain_ratings(n_users=20, n_items=10, per_user=3)
    with pytest.raises(ValueError, match="no item passed the private item selection"):
        _fed(tiny, dict(epsilon=0.5, rating_range=(1, 5), factors=0, axes="release"))


def test_the_deployed_server_app_releases_the_axes_from_its_run_configuration(ratings, tmp_path, capsys):
    """``axes = "release"`` in the ServerApp's run configuration (``examples/flower_app``): the deployed
    app fits as ``fit_dpals`` does and as the local fit of the same table; ``catalogue = true``
    declares the item axis (only the count is released); a bad flag is refused."""
    import json

    from flwr.app import Context, RecordDict

    from privrec.federated.flower import app as fapp

    configs = {}
    for shard in flower.split_users(ratings, 3):
        path = tmp_path / f"shard-{shard.index}.npz"
        flower.save_shard(path, shard)
        configs[shard.index] = {"data-path": str(path)}
    run_config = {"epsilon": 20.0, "factors": 0, "random-state": 3, "rating-low": 1.0, "rating-high": 5.0}
    run_config.update({"axes": "release", "min-clients": 3, "output-dir": str(tmp_path / "out")})

    def deployed(extra):
        grid = InProcessGrid(fapp.clientapp, 3, configs)
        cfg = {**run_config, **extra}
        fapp.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg))
        capsys.readouterr()
        return json.loads((tmp_path / "out" / "report.json").read_text()), DPALS.load(tmp_path / "out" / "model.npz")

    report, fed = deployed({})
    local = fapp.model_from_config(run_config).fit(ratings, show_progress=False)
    assert local.axes == "release"
    assert report["neighbouring_relation"].startswith("user-level add/remove")
    assert report["neighbouring_relation"] == local.privacy_report()["neighbouring_relation"]
    assert [e["label"] for e in report["events"]] == [e.label for e in local.ledger_.entries]
    assert [e["label"] for e in report["events"]][:2] == [partition.USER_COUNT_LABEL, partition.ITEM_SELECTION_LABEL]
    assert report["epsilon"] == local.privacy_report()["epsilon"]
    np.testing.assert_array_equal(fed.item_counts_, local.item_counts_)
    report, _ = deployed({"catalogue": "true"})
    labels = [e["label"] for e in report["events"]]
    assert partition.USER_COUNT_LABEL in labels and partition.ITEM_SELECTION_LABEL not in labels
    with pytest.raises(ValueError, match="'roster' must be true or false"):
        deployed({"roster": "maybe"})
