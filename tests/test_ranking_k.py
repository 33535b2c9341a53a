"""Issue 39: ranking metrics refuse k beyond the catalogue; fixed-k evaluations (the CLI's Recall@20)
use k = min(k, n_items) on a small catalogue and say so."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from privrec.cli import main
from privrec.evaluation.metrics import (
    precision_at_k,
    ranking_k,
    ranking_k_note,
    ranking_metrics,
    recall_at_k,
)

NOTE = "ranking metrics at k = 12 instead of 20: the catalogue has only 12 items"


def _factors(n_users=5, n_items=10, seed=0):
    rng = np.random.default_rng(seed)
    U = rng.random((n_users, 3)).astype(np.float32)
    V = rng.random((n_items, 3)).astype(np.float32)
    T = sp.random(n_users, n_items, density=0.3, format="csr", random_state=seed + 1)
    return U, V, T


@pytest.mark.parametrize("k", [11, 10**6])
def test_k_beyond_the_catalogue_is_one_line_error_naming_k_and_the_catalogue(k):
    U, V, T = _factors()
    with pytest.raises(ValueError) as info:
        ranking_metrics(U, V, T, ks=(5, k))
    msg = str(info.value)
    assert "\n" not in msg and f"k = {k}" in msg and "catalogue of 10 items" in msg
    for fn in (recall_at_k, precision_at_k):  # the one-metric wrappers refuse it too
        with pytest.raises(ValueError, match=f"k = {k} exceeds the catalogue of 10 items"):
            fn(U, V, T, k=k)


def test_k_equal_to_the_catalogue_is_allowed_and_bounded():
    U, V, T = _factors()
    m = ranking_metrics(U, V, T, ks=(10,))
    assert m["recall@10"] == pytest.approx(1.0) and 0 <= m["precision@10"] <= 1 and m["coverage@10"] == 1.0


def test_k_beyond_the_items_restriction_is_refused():
    U, V, T = _factors()
    with pytest.raises(ValueError, match=r"k = 3 exceeds the 2 candidate items given by items= \(of 10\)"):
        ranking_metrics(U, V, T, ks=(3,), items=[1, 4])
    assert ranking_metrics(U, V, T, ks=(2,), items=[1, 4])["n_users"] >= 0


def test_a_test_matrix_with_other_columns_than_the_model_items_is_refused():
    U, V, _ = _factors()
    for cols in (8, 12):
        T = sp.random(5, cols, density=0.3, format="csr", random_state=1)
        with pytest.raises(ValueError, match=rf"targets has shape \(5, {cols}\), expected \(5, 10\)"):
            ranking_metrics(U, V, T, ks=(5,))


def test_ranking_k_clamps_to_the_catalogue_and_says_so():
    assert ranking_k(20, 12) == 12 and ranking_k(20, 500) == 20 and ranking_k(20, 20) == 20
    assert ranking_k_note(20, 20) is None and ranking_k_note(20, 500) is None
    assert ranking_k_note(20, 12).startswith(NOTE)
    assert "only 1 item " in ranking_k_note(20, 1)
    with pytest.raises(ValueError, match="k"):
        ranking_k(0, 12)


def test_evaluate_heldout_on_a_small_catalogue_ranks_at_n_items():
    from privrec.evaluation.protocols import evaluate_heldout

    class _Pop:  # a ranker without factors: the training counts as item scores
        def __init__(self, counts):
            self.item_factors_ = np.zeros((counts.size, 0), np.float32)
            self.item_bias_ = counts.astype(np.float32)
            self.global_mean_ = 0.0

        def _project_users(self, rows):
            return np.zeros((rows.shape[0], 0), np.float32), None

    rng = np.random.default_rng(0)
    train = sp.csr_matrix((rng.random((40, 12)) < 0.4).astype(np.float32))
    hist = sp.csr_matrix((rng.random((10, 12)) < 0.3).astype(np.float32))
    targ = sp.csr_matrix(((rng.random((10, 12)) < 0.3) & (hist.toarray() == 0)).astype(np.float32))
    model = _Pop(np.diff(train.tocsc().indptr))
    ev = evaluate_heldout(model, train, hist, targ, k=20)
    assert set(ev["metrics"]) == {"recall@12", "ndcg@12", "coverage@12", "n_users"}
    assert ev["metrics"]["recall@12"] == pytest.approx(1.0)  # every unseen item is in the list
    assert ev["sliced"]["k"] == [12] * 5
    assert "recall@5" in evaluate_heldout(model, train, hist, targ, k=5)["metrics"]


# ---------------------------------------------------------------------------------------- the CLI
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Ratings of 300 users on a catalogue of 12 items (six each)."""
    folder = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(0)
    rows = [(u, i, int(rng.integers(1, 6))) for u in range(300) for i in rng.choice(12, 6, replace=False)]
    pd.DataFrame(rows, columns=["user", "item", "rating"]).to_csv(folder / "r12.csv", index=False)
    return folder


def _run(capsys, argv) -> tuple[int, str, str]:
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_cli_fit_on_a_12_item_catalogue_reports_recall_at_12(tiny, capsys):
    rc, out, err = _run(capsys, ["fit", "--ratings", str(tiny / "r12.csv"), "--epsilon", "5", "--quiet"])
    assert rc == 0, err
    assert "recall@12" in out and "ndcg@12" in out and "recall@20" not in out and NOTE in out
    header = next(line for line in out.splitlines() if line.strip().startswith("model "))
    assert "recall@12" in header and "ndcg@12" in header

    rc, out, err = _run(
        capsys, ["fit", "--ratings", str(tiny / "r12.csv"), "--epsilon", "5", "--quiet", "--json", "--seed", "1"]
    )
    assert rc == 0, err
    res = json.loads(out)["non_private"]
    assert res["ranking_k_note"].startswith(NOTE)
    assert 0 <= res["metrics"]["recall@12"] <= 1 and "recall@20" not in res["metrics"]
    for b in ("popularity", "private_popularity", "als_ranking"):
        assert "recall@12" in res["baselines"][b]["metrics"]


def test_cli_fit_heldout_users_on_a_12_item_catalogue(tiny, capsys):
    rng = np.random.default_rng(1)
    rows = [(u, i) for u in range(500) for i in rng.choice(12, 8, replace=False)]
    pd.DataFrame(rows, columns=["user", "item"]).to_csv(tiny / "i12.csv", index=False)
    argv = ["fit", "--ratings", str(tiny / "i12.csv"), "--rating-col", "", "--protocol", "heldout-users"]
    rc, out, err = _run(capsys, [*argv, "--heldout-users", "100", "--epsilon", "5", "--quiet", "--delta", "1e-4"])
    assert rc == 0, err
    assert "recall@12 (higher is better)" in out and "coverage@12" in out and NOTE in out


def test_cli_evaluate_and_compare_on_a_12_item_catalogue(tiny, capsys):
    csv, model = str(tiny / "r12.csv"), str(tiny / "m.npz")
    rc, _, err = _run(capsys, ["fit", "--ratings", csv, "--epsilon", "5", "--quiet", "--output", model])
    assert rc == 0, err
    rc, out, err = _run(capsys, ["evaluate", "--model", model, "--ratings", csv])
    assert rc == 0, err
    assert "recall@12" in out and NOTE in out
    rc, out, err = _run(capsys, ["compare", "--ratings", csv, "--epsilon", "5", "--no-als", "--quiet", "--json"])
    assert rc == 0, err
    res = json.loads(out)
    assert res["metrics"] == ["rmse", "recall@12", "ndcg@12"]
    assert res["non_private"]["ranking_k_note"].startswith(NOTE)


def test_a_catalogue_of_20_items_or_more_keeps_recall_at_20_without_a_note(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = [(u, i, int(rng.integers(1, 6))) for u in range(300) for i in rng.choice(25, 8, replace=False)]
    pd.DataFrame(rows, columns=["user", "item", "rating"]).to_csv(tmp_path / "r.csv", index=False)
    rc, out, err = _run(capsys, ["fit", "--ratings", str(tmp_path / "r.csv"), "--epsilon", "5", "--quiet", "--json"])
    assert rc == 0, err
    res = json.loads(out)["non_private"]
    assert "recall@20" in res["metrics"] and "ranking_k_note" not in res
