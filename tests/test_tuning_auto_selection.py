"""The automatic configuration decides the personal part by accounted private selection (issue 24).

Where the rule's public inputs admit a rank (``n_users * min(eps, 20) >= SELECTION_SIGNAL``, with room
for the rank in the budget: ``privrec.tuning.rule.selection_shares``) a private fit of
explicit ratings compares the bias model with that rank on held-out ratings released under DP
(``DPALS._fit_by_selection``). On data without interaction structure the default must stay the
bias model; the whole procedure is in one ledger whose epsilon is the target.
"""

import warnings

import numpy as np
import pytest

from privrec.data.synthetic import PRESETS, low_rank_interactions
from privrec.models import DPALS
from privrec.privacy import epsilon_from_report
from privrec.tuning import auto_config
from privrec.tuning.rule import SELECTION_RATING_CAP, SELECTION_SHARES

N_USERS = 8_000  # the selection starts at eps = 8.0 (60,000 / 8,000 = 7.5, then 10% free), full shares from 25.1


def _no_structure(seed: int):
    kw = PRESETS["synthetic-biases"]._generator_arguments()
    data = low_rank_interactions(N_USERS, 300, 48_000, **kw, random_state=seed, name="biases-only")
    return data.interactions.matrix.tocsr().astype(np.float32)


@pytest.fixture(scope="module")
def biases_only():
    return _no_structure(11)


def test_rule_admits_a_rank_here_so_the_fit_selects(biases_only):
    assert auto_config(N_USERS, 300, 30.0, 1e-5, 5.0)["factors"] > 0
    assert auto_config(N_USERS, 300, 30.0, 1e-5, 5.0, bias_model=True)["factors"] == 0
    model = DPALS(epsilon=30.0, random_state=0)
    assert model._selects_rank(model._resolve_config(biases_only.shape))
    # explicit settings, implicit feedback and epsilon = inf never select
    for params in ({"factors": 8}, {"iterations": 2}, {"feedback": "implicit"}, {"epsilon": float("inf")}):
        other = DPALS(**{"epsilon": 30.0, **params})
        assert not other._selects_rank(other._resolve_config(biases_only.shape))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_interaction_structure_gives_the_bias_model(biases_only, seed):
    model = DPALS(epsilon=30.0, random_state=seed, show_progress=False).fit(biases_only)
    sel = model.selection_
    assert sel["automatic"] and sel["chosen"] == 0
    assert [c["factors"] for c in sel["candidates"]] == [0, 8]
    assert model.config_["factors"] == 0 and model.item_factors_.shape == (300, 0)
    assert sel["rating_cap"] == SELECTION_RATING_CAP
    assert sel["shares"]["refit"] == SELECTION_SHARES["refit_share"] == 0.0 and not sel["refit"]
    assert sel["shares"]["candidates"] == list(SELECTION_SHARES["candidate_shares"])
    assert all("random_state" not in c for c in sel["candidates"])  # no noise seed beside the release
    card = model.model_card()
    assert "model selection: chosen by accounted private selection among 2 candidates" in card


def test_the_selection_is_in_the_ledger_and_meets_the_target(biases_only):
    model = DPALS(epsilon=25.0, random_state=3, show_progress=False).fit(biases_only)
    report = model.privacy_report()
    labels = [e["label"] for e in report["events"]]
    assert any(lab.startswith("selection candidate 0: ") for lab in labels)
    assert any(lab.startswith("selection candidate 1: ALS step 2") for lab in labels)
    assert "selection scores" in labels
    # no refit: the winner is released as fitted, so the ledger is the candidates' events and the scores
    assert not any(lab.startswith("refit: ") for lab in labels)
    assert all(lab.startswith("selection candidate ") or lab == "selection scores" for lab in labels)
    assert report["epsilon"] <= 25.0 * (1 + 1e-9)
    assert epsilon_from_report(report) == pytest.approx(report["epsilon"], rel=1e-6)
    assert report["epsilon"] == pytest.approx(25.0, rel=0.02)
    # the release is that of a bias model: predictions are finite and recommend works
    ids, scores = model.recommend(np.arange(5), biases_only[:5], N=10)
    assert ids.shape == (5, 10) and np.isfinite(scores).all()


def test_selected_model_saves_and_loads_with_the_whole_ledger(biases_only, tmp_path):
    model = DPALS(epsilon=30.0, random_state=4, show_progress=False).fit(biases_only)
    path = tmp_path / "m.npz"
    model.save(path)
    loaded = DPALS.load(path)
    assert loaded.privacy_report()["epsilon"] == pytest.approx(model.privacy_report()["epsilon"])
    assert len(loaded.privacy_report()["events"]) == len(model.privacy_report()["events"])
    np.testing.assert_array_equal(loaded.item_bias_, model.item_bias_)


@pytest.mark.filterwarnings("ignore:top-10% share")
def test_strong_structure_can_choose_the_rank():
    """A strongly personal generator, large enough that the rank clearly wins on held-out ratings."""
    kw = PRESETS["synthetic-structured"]._generator_arguments()
    data = low_rank_interactions(N_USERS, 300, 400_000, **kw, random_state=5, name="structured")
    X = data.interactions.matrix.tocsr().astype(np.float32)
    model = DPALS(epsilon=60.0, random_state=1, show_progress=False).fit(X)
    assert model.selection_["chosen"] == 1
    assert model.config_["factors"] == 8 and model.item_factors_.shape == (300, 8)


def test_dask_backend_runs_the_automatic_selection(biases_only):
    """Dask runs the local fit's plan: the same selection, the same ledger (issue 38)."""
    pytest.importorskip("dask")
    import pandas as pd

    from privrec.distributed import SerialClient, fit, partition_interactions

    coo = biases_only.tocoo()
    frame = pd.DataFrame({"user": coo.row, "item": coo.col, "rating": coo.data})
    parts = partition_interactions(frame, n_partitions=2, client=SerialClient(), items=np.arange(300))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = fit(DPALS(epsilon=30.0, random_state=0), parts, client=SerialClient())
    assert model.selection_["automatic"] and model.selection_["keys"] == "user ids"
    assert model.config_["factors"] == 0 and model.config_["epsilon"] == 30.0
    labels = [e.label for e in model.ledger_.entries]
    assert "selection scores" in labels and any(lab.startswith("selection candidate 1: ") for lab in labels)
