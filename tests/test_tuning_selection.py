"""Issue 24: private model selection, accounted in one ledger."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.data import load_dataset
from privrec.data.synthetic import generate_preset
from privrec.models import DPALS
from privrec.privacy import epsilon_from_report
from privrec.tuning import holdout_mask, select_private


@pytest.fixture(scope="module")
def flat():
    """No interaction structure: the truth is biases only."""
    return generate_preset("synthetic-biases", scale=0.1, random_state=3).interactions.matrix.tocsr()


def test_selection_is_accounted_in_one_ledger(flat, tmp_path):
    res = select_private(
        [DPALS(factors=0), DPALS(factors=4, iterations=2)], flat, epsilon=2.0, delta=1e-5, random_state=0
    )
    report = res.privacy_report()
    assert report["epsilon"] <= 2.0
    assert report["epsilon"] > 1.9  # the whole budget is used, not a fraction of it
    assert epsilon_from_report(report, report["accountant"]) == pytest.approx(report["epsilon"], rel=1e-9)
    labels = [e["label"] for e in report["events"]]
    assert any(lab.startswith("selection candidate 0: ") for lab in labels)
    assert any(lab.startswith("selection candidate 1: ") for lab in labels)
    assert "selection scores" in labels
    assert any(lab.startswith("refit: ") for lab in labels)
    model = res.best_estimator_
    assert model.selection_["chosen"] == res.best_index_
    # the selected model, saved, carries the whole procedure's report and reloads verified
    path = tmp_path / "m.npz"
    model.save(path)
    assert DPALS.load(path).privacy_report()["epsilon"] == pytest.approx(report["epsilon"])


def test_no_structure_selects_the_bias_model(flat):
    picks = []
    for eps in (1.0, 20.0):
        for seed in range(10):
            res = select_private(
                [DPALS(factors=0), DPALS(factors=8, iterations=3)],
                flat,
                epsilon=eps,
                delta=1e-5,
                random_state=100 + seed,
            )
            picks.append(res.best_index_)
    assert np.mean(np.asarray(picks) == 0) >= 0.95


def test_holdout_of_a_user_depends_on_that_user_only():
    R = sp.random(50, 30, density=0.3, format="csr", random_state=0)
    R.data[:] = 3.0
    a = holdout_mask(R, 0.3, key=7)
    keep = np.ones(50, dtype=bool)
    keep[10] = False
    # deleting a user leaves the roster in place under the zero-out relation: empty that row
    Z = R.copy().tolil()
    Z[10, :] = 0
    Z = Z.tocsr()
    Z.eliminate_zeros()
    b = holdout_mask(Z, 0.3, key=7)
    rows_a = np.repeat(np.arange(50), np.diff(R.indptr))
    rows_b = np.repeat(np.arange(50), np.diff(Z.indptr))
    np.testing.assert_array_equal(a[rows_a != 10], b[rows_b != 10])
    assert 0.2 < a.mean() < 0.4


def test_invalid_arguments():
    R = load_dataset("synthetic-skew").matrix
    with pytest.raises(ValueError, match="two candidates"):
        select_private([DPALS()], R, epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="finite"):
        select_private([DPALS(), DPALS(factors=2)], R, epsilon=float("inf"), delta=1e-5)
    with pytest.raises(ValueError, match="share"):
        select_private([DPALS(), DPALS(factors=2)], R, epsilon=1.0, delta=1e-5, refit_share=0.95)


def test_selection_spends_from_a_budget_and_is_refused_when_it_would_exceed(flat, tmp_path):
    from privrec.privacy import Budget, BudgetExceededError

    budget = Budget.create(tmp_path / "b.json", epsilon=2.5, delta=1e-5)
    cands = [DPALS(factors=0), DPALS(factors=4, iterations=2)]
    res = select_private(cands, flat, epsilon=2.0, delta=1e-5, random_state=0, budget=budget, label="tuning")
    assert budget.spent() == pytest.approx(res.privacy_report()["epsilon"], rel=1e-6)
    assert [r.label for r in budget.releases] == ["tuning"]
    with pytest.raises(BudgetExceededError):
        select_private(cands, flat, epsilon=2.0, delta=1e-5, random_state=1, budget=budget)
    assert len(Budget.open(tmp_path / "b.json").releases) == 1  # refused before anything was released


def test_without_refit_the_scored_candidate_is_what_is_released(flat):
    """refit_share = 0: the winner is released as fitted on the training parts, at its own share."""
    from sklearn.base import clone

    from privrec.tuning.selection import split_holdout

    cands = [DPALS(factors=0), DPALS(factors=4, iterations=2)]
    res = select_private(
        cands,
        flat,
        epsilon=3.0,
        delta=1e-5,
        random_state=5,
        selection_share=0.05,
        refit_share=0.0,
        candidate_shares=[0.2, 0.75],
    )
    sel = res.best_estimator_.selection_
    report = res.privacy_report()
    labels = [e["label"] for e in report["events"]]
    assert not any(lab.startswith("refit: ") for lab in labels) and not sel["refit"]
    assert sel["shares"]["candidates"] == [0.2, 0.75] and sel["epsilon_refit"] is None
    assert sel["epsilon_candidates"][0] < sel["epsilon_candidates"][1]
    assert report["epsilon"] <= 3.0 and report["epsilon"] == pytest.approx(3.0, rel=0.03)
    assert epsilon_from_report(report, report["accountant"]) == pytest.approx(report["epsilon"], rel=1e-9)
    # the same candidate, fitted again from the procedure's seeds on the same training part, is the release
    R = sp.csr_matrix(flat, dtype=np.float64)
    R.sort_indices()
    seeds = np.random.default_rng(5).integers(0, 2**63 - 1, size=4)
    train, _ = split_holdout(R, sel["holdout"], int(seeds[-1]) & 0xFFFFFFFF)
    k = res.best_index_
    again = clone(cands[k]).set_params(epsilon=sel["epsilon_candidates"][k], delta=1e-5, random_state=int(seeds[k]))
    again.fit(train, show_progress=False)
    np.testing.assert_array_equal(again.item_bias_, res.best_estimator_.item_bias_)
    np.testing.assert_array_equal(again.item_factors_, res.best_estimator_.item_factors_)
    # the users' own projection covers all their ratings, held-out ones included (free)
    U, ub = res.best_estimator_._project_users(R)
    np.testing.assert_allclose(res.best_estimator_.user_factors_, U)
    np.testing.assert_allclose(res.best_estimator_.user_bias_, ub)
    # no noise seed is kept beside the release
    assert all("random_state" not in c for c in sel["candidates"])


def test_candidate_shares_are_checked():
    R = load_dataset("synthetic-skew").matrix
    two = [DPALS(), DPALS(factors=2)]
    for shares in ([0.5], [0.5, 0.6], [0.0, 0.9], [float("nan"), 0.5]):
        with pytest.raises(ValueError, match="candidate_shares"):
            select_private(two, R, epsilon=1.0, delta=1e-5, refit_share=0.0, candidate_shares=shares)
    with pytest.raises(ValueError, match="share"):
        select_private(two, R, epsilon=1.0, delta=1e-5, refit_share=-0.1)


def test_select_private_refuses_silent_and_raw_inputs():
    """Issue 39: zero / negative / non-finite clips and caps, generators, non-numeric shares and
    epsilon, duplicate COO entries and dense arrays give one-line errors naming the argument."""
    R = load_dataset("synthetic-skew").matrix.tocsr()[:300]
    cands = [DPALS(factors=0), DPALS(factors=2, iterations=1)]
    kw = dict(epsilon=1.0, delta=1e-5)
    for name, bad in (
        ("rating_cap", 0), ("rating_cap", -5), ("rating_cap", float("nan")), ("rating_cap", float("inf")),
        ("loss_clip", 0), ("loss_clip", -1), ("loss_clip", float("nan")), ("loss_clip", float("inf")),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=name):
            select_private(cands, R, **kw, **{name: bad})
    with pytest.raises(TypeError, match="candidates must be a list"):
        select_private((c for c in cands), R, **kw)
    with pytest.raises(TypeError, match="candidate_shares"):
        select_private(cands, R, **kw, candidate_shares=["a", "b"])
    with pytest.raises(TypeError, match="epsilon must be a number"):
        select_private(cands, R, epsilon="5", delta=1e-5)
    coo = sp.coo_matrix(([3.0, 4.0], ([0, 0], [1, 1])), shape=(3, 3))
    with pytest.raises(ValueError, match="duplicate"):
        select_private(cands, coo, **kw)
    with pytest.raises(TypeError, match="what DPALS.fit takes"):
        select_private(cands, R.toarray(), **kw)


def test_select_private_reads_a_long_dataframe_as_fit_does():
    import pandas as pd

    R = load_dataset("synthetic-skew").matrix.tocsr()[:400]
    coo = R.tocoo()
    frame = pd.DataFrame({"user": coo.row + 100, "item": coo.col, "rating": coo.data})
    cands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]
    res = select_private(cands, frame, epsilon=1.0, delta=1e-5, refit_share=0.0)
    n_items = frame["item"].nunique()
    assert res.best_estimator_.item_factors_.shape[0] == n_items  # items, not the frame's 3 columns
    assert res.best_estimator_.selection_["keys"] == "user ids"
    assert "lower is better" in res.explain() and res.score_noise_std > 0
