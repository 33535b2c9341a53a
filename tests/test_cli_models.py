"""End-to-end CLI: ``privrec fit/evaluate/recommend/similar`` on small generated data.

Uses the embedded generated default (``synthetic-skew``) shrunk with ``--scale`` so each call
takes a second or two; ``--json`` output is parsed and checked field by field. Covers the
self-explaining output: baselines next to every metric, the plain-language privacy summary,
warnings for ignored options and a large delta, ``--ratings`` files and ``--plot``.
"""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privrec import models
from privrec.cli import main
from privrec.commands import _yardsticks
from privrec.commands._data import load_ratings_file, ratings_id_kinds, read_id_list
from privrec.commands._running import CommandError
from privrec.commands._yardsticks import relevance_threshold
from privrec.commands.report import MARK, _delta_warning, privacy_paragraph

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--scale", "0.2", "--quiet"]
FAST = ["--iterations", "2", "--factors", "4"]
HELDOUT = ["--protocol", "heldout-users", "--heldout-users", "60"]
REQUIRED = {
    "dataset",
    "method",
    "epsilon",
    "delta",
    "epsilon_spent",
    "privacy_events",
    "privacy_summary",
    "warnings",
    "non_private",
}
#: what was fitted (model.describe()): public settings, beside the release
DESCRIBED = {"label", "personal", "personal_part", "config"}
#: figures computed from the exact data: only ever inside "non_private"
NON_PRIVATE = {"n_users", "n_items", "n_train", "fit_seconds", "metrics", "sliced", "bucket_items", "baselines"}


def ex(res):
    """The exact (non-private) figures of a JSON result."""
    return res["non_private"]


def run_json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [l for l in out.splitlines() if l.strip()]
    assert len(lines) == 1, f"--json must print exactly one line, got {lines!r}"
    return json.loads(lines[0])


def test_fit_als_json_random_protocol_on_default_dataset(capsys):
    res = run_json(capsys, ["fit", "--method", "als", "--json", *SMALL, *FAST])
    assert set(res) >= REQUIRED
    assert res["dataset"] == "synthetic-skew" and res["method"] == "als" and res["protocol"] == "random"
    assert res["epsilon_spent"] == "inf" and res["privacy_events"]["events"] == []
    rmse = ex(res)["metrics"]["rmse"]
    assert 0 < rmse < 3
    assert len(ex(res)["sliced"]["rmse"]) == 5 and sum(ex(res)["bucket_items"]) == ex(res)["n_items"]
    assert ex(res)["fit_seconds"] >= 0
    # a non-private fit is not compared with itself; the trivial yardstick is always there
    assert ex(res)["baselines"]["als"] is None and ex(res)["baselines"]["trivial"]["metrics"]["rmse"] > 0
    assert res["privacy_summary"].startswith("None: this is a non-private model")


def test_fit_private_json_reports_ledger_epsilon_within_target(capsys):
    res = run_json(capsys, ["fit", "--method", "ada-dpals", "--epsilon", "1", "--json", *SMALL, *FAST])
    assert set(res) >= REQUIRED
    assert res["epsilon"] == 1.0 and res["delta"] == pytest.approx(1e-5)
    spent = res["epsilon_spent"]
    assert isinstance(spent, float) and 0 < spent <= 1.0 + 1e-6
    events = res["privacy_events"]["events"]
    assert len(events) >= 2  # counts + at least one private item step
    from privrec.privacy import epsilon_from_report

    report = res["privacy_events"]
    assert epsilon_from_report(report, report["accountant"]) == pytest.approx(spent, rel=1e-6)
    assert math.isfinite(ex(res)["metrics"]["rmse"])
    assert res["warnings"] == []  # delta 1e-5 < 1/n_users, nothing ignored


def test_private_fit_is_compared_with_trivial_and_als_on_the_same_split(capsys):
    res = run_json(capsys, ["fit", "--json", *SMALL, *FAST])
    triv, als = ex(res)["baselines"]["trivial"], ex(res)["baselines"]["als"]
    assert triv["name"] == "training global mean" and triv["private"] is False
    assert als is not None and als["private"] is False and als["params"] == {"factors": 4, "iterations": 2}
    for b in (triv, als):
        assert b["metrics"]["n_test"] == ex(res)["metrics"]["n_test"]  # same test pairs
        assert len(b["sliced"]["rmse"]) == len(ex(res)["sliced"]["rmse"])
        assert 0 < b["metrics"]["rmse"] < 3


def test_trivial_rating_baseline_is_the_training_global_mean(capsys):
    """Independent check: RMSE of predicting the training mean on the random split's test pairs."""
    from privrec.evaluation import experiment as X

    res = run_json(capsys, ["fit", "--method", "als", "--json", "--seed", "3", *SMALL, *FAST])
    split = X.make_split(X.load_data("synthetic-skew", scale=0.2, seed=3), "random", seed=3)
    mean = split.train.data.astype(np.float64).mean()
    expected = math.sqrt(np.mean((split.test.data.astype(np.float64) - mean) ** 2))
    assert ex(res)["baselines"]["trivial"]["metrics"]["rmse"] == pytest.approx(expected, rel=1e-5)


def test_trivial_heldout_baseline_is_exact_popularity(capsys):
    """Independent check: Recall@20 of ranking unseen items by exact training counts."""
    from privrec.evaluation import experiment as X

    res = run_json(capsys, ["fit", "--method", "als", "--json", *HELDOUT, *SMALL, *FAST])
    triv = ex(res)["baselines"]["trivial"]
    assert triv["name"].startswith("popularity")
    split = X.make_split(X.load_data("synthetic-skew", scale=0.2, seed=0), "heldout-users", seed=0, heldout_users=60)
    counts = np.diff(split.train.tocsc().indptr).astype(float)
    recalls = []
    for u in range(split.targets.shape[0]):
        t = set(split.targets[u].indices)
        if not t:
            continue
        score = counts.copy()
        score[split.history[u].indices] = -np.inf
        top = np.argsort(-score, kind="stable")[:20]
        recalls.append(len(t & set(top)) / min(20, len(t)))
    assert triv["metrics"]["recall@20"] == pytest.approx(np.mean(recalls), abs=0.02)  # ties may order differently


def test_no_compare_als_skips_the_reference_and_compare_als_forces_it(capsys, monkeypatch):
    res = run_json(capsys, ["fit", "--json", "--no-compare-als", *SMALL, *FAST])
    assert ex(res)["baselines"]["als"] is None and "als_skipped" not in ex(res)["baselines"]
    monkeypatch.setattr(_yardsticks, "ALS_COMPARISON_MAX_NNZ", 10)  # "large" data: skipped by default, with a hint
    res = run_json(capsys, ["fit", "--json", *SMALL, *FAST])
    assert ex(res)["baselines"]["als"] is None and "--compare-als" in ex(res)["baselines"]["als_skipped"]
    res = run_json(capsys, ["fit", "--json", "--compare-als", *SMALL, *FAST])
    assert ex(res)["baselines"]["als"] is not None


@pytest.mark.parametrize("method", ["als", "ada-dpals"])
def test_json_fit_keeps_stderr_clean(method, capsys):
    """No progress bars (the models' own fit bars included) or stray output around the JSON."""
    assert main(["fit", "--method", method, "--json", *SMALL, *FAST]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and ex(json.loads(cap.out))["baselines"]["trivial"]


def test_fit_heldout_protocol_reports_recall_and_ndcg(capsys):
    res = run_json(capsys, ["fit", "--method", "als", *HELDOUT, "--json", *SMALL, *FAST])
    m = ex(res)["metrics"]
    assert res["protocol"] == "heldout-users"
    assert 0 <= m["recall@20"] <= 1 and 0 <= m["ndcg@20"] <= 1 and m["n_users"] > 0
    assert len(ex(res)["sliced"]["recall"]) == 5


def test_fit_save_then_evaluate_recommend_similar(tmp_path, capsys):
    path = tmp_path / "als.npz"
    fit = run_json(capsys, ["fit", "--method", "als", "--output", str(path), "--evaluate", "--json", *SMALL, *FAST])
    assert path.is_file() and fit["output"] == str(path)
    ev = run_json(capsys, ["evaluate", "--model", str(path), "--json", *SMALL])
    # same split, same model -> same RMSE as the fit's own evaluation, same trivial baseline
    assert ex(ev)["metrics"]["rmse"] == pytest.approx(ex(fit)["metrics"]["rmse"], rel=1e-5)
    assert ex(ev)["baselines"]["trivial"]["metrics"]["rmse"] == pytest.approx(
        ex(fit)["baselines"]["trivial"]["metrics"]["rmse"], rel=1e-6
    )
    assert ex(ev)["metrics"]["recall@20"] == pytest.approx(ex(fit)["metrics"]["recall@20"], abs=1e-9)
    assert ex(ev)["relevance_threshold"] == ex(fit)["relevance_threshold"]
    rec = run_json(capsys, ["recommend", "--model", str(path), "--user", "0", "-n", "5", "--json", *SMALL])
    assert len(rec["items"]) == 5
    scores = [r["score"] for r in rec["items"]]
    assert scores == sorted(scores, reverse=True)
    sim = run_json(capsys, ["similar", "--model", str(path), "--item", "3", "-n", "4", "--json", *SMALL])
    assert len(sim["items"]) == 4 and all(str(r["item"]) != "3" for r in sim["items"])
    # human-readable output has the comparison and the per-bucket table
    assert main(["evaluate", "--model", str(path), *SMALL]) == 0
    out = capsys.readouterr().out
    assert "rmse" in out and "trivial baseline: training global mean" in out and "privacy" in out


def test_evaluate_private_model_prints_its_privacy_summary(tmp_path, capsys):
    path = tmp_path / "dp.npz"
    fit = run_json(capsys, ["fit", "--output", str(path), "--json", "--no-compare-als", *SMALL, *FAST])
    assert "metrics" not in ex(fit)  # --output alone skips the evaluation
    ev = run_json(capsys, ["evaluate", "--model", str(path), "--json", "--no-compare-als", *SMALL])
    assert ev["method"] == "ada-dpals" and "user level" in ev["privacy_summary"]
    assert f"e^{float(ev['epsilon_spent']):.3g}" in ev["privacy_summary"]


def test_readable_fit_output_has_comparison_bucket_table_and_privacy_paragraph(capsys):
    assert main(["fit", *SMALL, *FAST]) == 0
    out = capsys.readouterr().out
    assert "per-popularity bucket" in out and "0 (tail)" in out
    assert "trivial baseline: training global mean" in out and "non-private" in out
    assert "trivial rmse" in out and "ALS rmse" in out  # baselines per bucket too
    text = " ".join(out.split("privacy\n", 1)[1].split())
    for needle in (
        "user level",
        "removing all of one user's ratings",
        "at most a factor e^",
        "except with probability delta",
        "PLD (privacy loss distribution) accountant",
        "User embeddings are never released",
    ):
        assert needle in text, needle


def test_readable_als_output_says_non_private(capsys):
    assert main(["fit", "--method", "als", *SMALL, *FAST]) == 0
    out = capsys.readouterr().out
    assert "per-popularity bucket" in out and "0 (tail)" in out and "privacy" in out
    assert "non-private model" in out


# ------------------------------------------------------------------------------- exact figures are marked
def unmarked_figures(out: str) -> list[str]:
    """Printed lines with a number that are neither marked [non-private] (themselves or their section's
    heading) nor part of what the guarantee covers (privacy summary, budget) or names (dataset, files)."""
    exempt = ("dataset", "method", "personal", "settings", "privacy", "budget", "saved", "plot", "card", "model")
    bad, marked, section = [], False, ""
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            section, marked = line.split()[0], MARK in line
            if re.search(r"\d", line) and not marked and section not in exempt:
                bad.append(line)
        elif re.search(r"\d", line) and not marked and section not in ("privacy", "personal", "settings"):
            bad.append(line)
    return bad


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", *SMALL, *FAST],
        ["fit", "--method", "als", *SMALL, *FAST],
        ["fit", *HELDOUT, "--delta", "1e-6", *SMALL, *FAST],
    ],
    ids=["private-ratings", "als", "private-heldout"],
)
def test_text_output_marks_every_exact_figure(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert unmarked_figures(out) == []
    assert f"{MARK} data " in out and "training" in out and f"{MARK} timings  fit " in out
    assert f"{MARK} = an exact figure computed from the data" in out
    assert out.count(MARK) >= 5  # metrics, buckets, data, timings, legend
    # the sizes are printed only on marked lines
    res = run_json(capsys, [*argv, "--json"])
    n_train = f"{ex(res)['n_train']:,}"
    assert [line for line in out.splitlines() if n_train in line and MARK not in line] == []


def test_evaluate_text_output_marks_every_exact_figure(tmp_path, capsys):
    path = tmp_path / "dp.npz"
    assert main(["fit", "--output", str(path), *SMALL, *FAST]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(path), "--no-compare-als", *SMALL]) == 0
    out = capsys.readouterr().out
    assert unmarked_figures(out) == [] and f"{MARK} data " in out


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "--json", *SMALL, *FAST],
        ["fit", "--method", "als", "--json", *SMALL, *FAST],
        ["fit", *HELDOUT, "--json", "--no-compare-als", *SMALL, *FAST],
    ],
    ids=["private-ratings", "als", "private-heldout"],
)
def test_json_keeps_every_exact_figure_in_the_non_private_object(argv, capsys):
    res = run_json(capsys, argv)
    assert not NON_PRIVATE & set(res), "exact figures at the top level"
    assert set(ex(res)) >= NON_PRIVATE | {"note", "eval_seconds"}
    assert "does not cover them" in ex(res)["note"]
    # the top level is what may accompany the release
    assert set(res) <= REQUIRED | DESCRIBED | {
        "protocol",
        "seed",
        "noise_seed",
        "output",
        "plot",
        "budget",
        "model_card",
    }
    assert ex(res)["baselines"]["trivial"]["private"] is False


def test_evaluate_json_keeps_exact_figures_apart(tmp_path, capsys):
    path = tmp_path / "als.npz"
    assert main(["fit", "--method", "als", "--output", str(path), *SMALL, *FAST]) == 0
    capsys.readouterr()
    ev = run_json(capsys, ["evaluate", "--model", str(path), "--json", *SMALL])
    assert not NON_PRIVATE & set(ev) and set(ex(ev)) >= NON_PRIVATE - {"fit_seconds"}


# ------------------------------------------------------------------------------- ranking of explicit ratings
def _file_split(folder):
    from privrec.evaluation import experiment as X

    data = load_ratings_file(folder / "r.csv", "uid", "mid", "stars")
    return X.make_split(data, "random", seed=0)


def _recall_from_recommend(model, split, threshold, k=20):
    """Independent Recall@k: model.recommend on each user's projection history (rated items filtered)."""
    history = split.projection
    test = split.test.tocsr()
    recalls = []
    for u in range(test.shape[0]):
        row = test[u]
        relevant = set(row.indices[row.data >= threshold])
        if not relevant:
            continue
        ids, _ = model.recommend(0, history[[u]], N=k, recalculate_user=True)
        recalls.append(len(relevant & set(ids.tolist())) / min(k, len(relevant)))
    return float(np.mean(recalls)), len(recalls)


def test_explicit_fit_reports_recall_beside_rmse_from_recommend(ratings_files, tmp_path, capsys):
    folder, _ = ratings_files
    path = tmp_path / "als.npz"
    data = ["--ratings", str(folder / "r.csv"), "--user-col", "uid", "--item-col", "mid", "--rating-col", "stars"]
    res = run_json(
        capsys, ["fit", "--method", "als", "--output", str(path), "--evaluate", "--json", "-q", *data, *FAST]
    )
    m = ex(res)["metrics"]
    assert ex(res)["relevance_threshold"] == 4.0  # 1-5 stars: the top quarter of the scale
    assert m["rmse"] > 0 and 0 <= m["recall@20"] <= 1 and 0 <= m["ndcg@20"] <= 1
    split = _file_split(folder)
    model = models.load_model(path)
    expected, n_users = _recall_from_recommend(model, split, 4.0)
    assert m["recall@20"] == pytest.approx(expected, abs=1e-9) and m["ranking_users"] == n_users
    # the exact-popularity yardstick, recomputed with numpy (ties: lower item index first)
    pop = ex(res)["baselines"]["popularity"]
    assert pop["private"] is False and "popularity" in pop["name"]
    counts = np.diff(split.train.tocsc().indptr).astype(float)
    recalls = []
    for u in range(split.test.shape[0]):
        row = split.test[u]
        relevant = set(row.indices[row.data >= 4.0])
        if relevant:
            score = counts.copy()
            score[split.projection[u].indices] = -np.inf
            top = np.argsort(-score, kind="stable")[:20]
            recalls.append(len(relevant & set(top)) / min(20, len(relevant)))
    assert pop["metrics"]["recall@20"] == pytest.approx(np.mean(recalls), abs=1e-9)
    assert ex(res)["baselines"]["trivial"]["metrics"].get("recall@20") is None  # the global mean does not rank
    # a stricter threshold: fewer relevant ratings, fewer ranked users
    strict = run_json(capsys, ["fit", "--method", "als", "--relevance-threshold", "5", "--json", "-q", *data, *FAST])
    assert ex(strict)["relevance_threshold"] == 5.0
    assert 0 < ex(strict)["metrics"]["ranking_users"] < m["ranking_users"]


def test_relevance_threshold_rule():
    import scipy.sparse as sp

    train = sp.csr_matrix(np.array([[1.0, 5.0], [3.0, 0.0]]))
    assert relevance_threshold(models.ALS(), train) == 4.0
    half_stars = sp.csr_matrix(np.array([[0.5, 5.0]]))
    assert relevance_threshold(models.ALS(), half_stars) == pytest.approx(3.875)
    assert relevance_threshold(models.DPALS(rating_range=(0, 10)), train) == 7.5  # the declared scale
    assert relevance_threshold(models.ALS(), train, 2.5) == 2.5
    with pytest.raises(CommandError, match="finite"):
        relevance_threshold(models.ALS(), train, float("nan"))


def test_private_fit_is_compared_with_the_popularity_of_its_own_released_counts(capsys):
    res = run_json(capsys, ["fit", "--json", "--no-compare-als", *SMALL, *FAST])
    pp = ex(res)["baselines"]["private_popularity"]
    assert pp["private"] is True and "released noisy counts" in pp["name"]
    assert (
        0 <= pp["metrics"]["recall@20"] <= 1 and pp["metrics"]["ranking_users"] == ex(res)["metrics"]["ranking_users"]
    )
    als = run_json(capsys, ["fit", "--method", "als", "--json", *SMALL, *FAST])
    assert "private_popularity" not in ex(als)["baselines"]
    assert main(["fit", "--no-compare-als", *SMALL, *FAST]) == 0
    out = capsys.readouterr().out
    assert "popularity (this fit's released noisy counts)" in out and "(this release)" in out
    assert "recall@20" in out and "relevant = held-out ratings >=" in out


# ------------------------------------------------------------------------------- warnings
def test_epsilon_and_delta_with_als_warn_that_they_are_ignored(capsys):
    rc = main(["fit", "--method", "als", "--epsilon", "1", "--delta", "1e-6", "--json", *SMALL, *FAST])
    cap = capsys.readouterr()
    assert rc == 0
    err = cap.err.splitlines()
    assert "privrec fit: warning: ε (--epsilon) is ignored by the non-private method als" in err
    assert any("(--delta) is ignored by the non-private method als" in line for line in err)
    assert len(json.loads(cap.out)["warnings"]) == 2


def test_weight_exponent_is_ignored_by_non_adaptive_methods(capsys):
    assert (
        main(
            [
                "fit",
                "--method",
                "dpals-uniform",
                "--weight-exponent",
                "0.5",
                "--json",
                "--no-compare-als",
                *SMALL,
                *FAST,
            ]
        )
        == 0
    )
    cap = capsys.readouterr()
    assert any("--weight-exponent (mu) is ignored by dpals-uniform" in w for w in json.loads(cap.out)["warnings"])
    assert cap.err.startswith("privrec fit: warning: --weight-exponent (mu) is ignored by dpals-uniform")


def test_heldout_default_delta_warns_and_explains_the_paper_convention(capsys):
    assert main(["fit", *HELDOUT, "--json", "--no-compare-als", *SMALL, *FAST]) == 0
    cap = capsys.readouterr()
    res = json.loads(cap.out)
    assert res["delta"] == pytest.approx(1.0 / ex(res)["n_users"])
    (msg,) = res["warnings"]
    assert "1/n_users" in msg and "paper's convention" in msg and "--delta" in msg
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("privrec fit: warning: delta =")
    res = run_json(capsys, ["fit", *HELDOUT, "--delta", "1e-7", "--json", "--no-compare-als", *SMALL, *FAST])
    assert res["warnings"] == [] and capsys.readouterr().err == ""


def test_delta_warning_text():
    assert _delta_warning(1e-5, 1000, "random", True) is None
    msg = _delta_warning(1e-3, 1000, "random", True)
    assert "1/1,000" in msg and "paper" not in msg and "--delta 1e-05" in msg
    assert "paper's convention" in _delta_warning(1e-3, 1000, "heldout-users", False)


def test_known_noise_seed_is_called_out_in_the_summary(capsys):
    res = run_json(capsys, ["fit", "--noise-seed", "7", "--json", "--no-compare-als", *SMALL, *FAST])
    assert "--noise-seed 7" in res["privacy_summary"] and "no privacy guarantee" in res["privacy_summary"]


def test_privacy_paragraph_reads_the_report():
    report = {
        "events": [{}, {}, {}],
        "epsilon": 0.92,
        "epsilon_rdp": 1.0,
        "epsilon_pld": 0.92,
        "delta": 1e-6,
        "accountant": "pld",
        "target_epsilon": 1.0,
        "neighboring": "add_or_remove_one",
    }
    text = privacy_paragraph(report, width=None)
    assert "(0.92, 1e-06)-differentially private at the user level" in text
    assert f"e^0.92 = {math.exp(0.92):.3g}" in text and "delta = 1e-06" in text
    assert "PLD (privacy loss distribution) accountant over the 3 recorded noise events" in text
    assert "RDP accountant gives 1" in text and "\n" not in text
    rdp = privacy_paragraph({**report, "accountant": "rdp", "epsilon": 1.0}, feedback="implicit")
    flat = " ".join(rdp.split())
    assert "RDP (Renyi differential privacy) accountant" in flat and "one user's interactions" in flat
    assert max(len(line) for line in rdp.splitlines()) <= 100
    assert privacy_paragraph(None).startswith("None")


# ------------------------------------------------------------------------------- --ratings files
@pytest.fixture(scope="module")
def ratings_files(tmp_path_factory):
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 4000
    df = pd.DataFrame(
        {"uid": rng.integers(0, 300, n), "mid": rng.integers(0, 150, n) * 7, "stars": rng.integers(1, 6, n)}
    ).drop_duplicates(["uid", "mid"])
    folder = tmp_path_factory.mktemp("ratings")
    df.to_csv(folder / "r.csv", index=False)
    df.to_parquet(folder / "r.parquet", index=False)
    df[["uid", "mid"]].to_csv(folder / "plays.csv", index=False)
    return folder, df


@pytest.fixture(params=["fallback", "frames"])
def readers(request, monkeypatch):
    """Run with the CLI's own reader and with privrec.data.from_pandas / from_parquet."""
    import privrec.data as D
    import privrec.data.frames as frames

    if request.param == "frames":
        monkeypatch.setattr(D, "from_pandas", frames.from_pandas, raising=False)
        monkeypatch.setattr(D, "from_parquet", frames.from_parquet, raising=False)
    else:
        monkeypatch.delattr(D, "from_pandas", raising=False)
        monkeypatch.delattr(D, "from_parquet", raising=False)
    return request.param


def test_fit_on_own_csv_and_parquet_files(ratings_files, readers, capsys):
    folder, df = ratings_files
    cols = ["--user-col", "uid", "--item-col", "mid", "--rating-col", "stars", "--json", "-q", *FAST]
    # the CSV's ids declared numeric, as the Parquet file stores them (else they are text: another order)
    a = run_json(capsys, ["fit", "--method", "als", "--ratings", str(folder / "r.csv"), "--numeric-ids", *cols])
    b = run_json(capsys, ["fit", "--method", "als", "--ratings", str(folder / "r.parquet"), *cols])
    assert a["dataset"] == "r.csv" and b["dataset"] == "r.parquet"
    for res in (a, b):
        assert res["protocol"] == "random" and ex(res)["n_items"] <= df["mid"].nunique()
    assert ex(a)["n_train"] == ex(b)["n_train"] and ex(a)["baselines"]["trivial"]["metrics"]["rmse"] == pytest.approx(
        ex(b)["baselines"]["trivial"]["metrics"]["rmse"]
    )


def test_duplicate_rows_are_rejected_unless_a_policy_is_given(ratings_files, readers, tmp_path, capsys):
    folder, df = ratings_files
    path = tmp_path / "dup.csv"
    import pandas as pd

    pd.concat([df, df.iloc[:3]]).to_csv(path, index=False)
    cols = ["--ratings", str(path), "--user-col", "uid", "--item-col", "mid", "--rating-col", "stars", "-q"]
    assert main(["fit", "--method", "als", *cols, *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert "duplicate" in err and len(err.splitlines()) == 1
    assert main(["fit", "--method", "als", "--duplicates", "last", "--json", *cols, *FAST]) == 0
    cap = capsys.readouterr()
    assert ex(json.loads(cap.out))["n_train"] > 0 and "privrec fit: warning: 3 duplicate" in cap.err


def test_fit_on_file_without_ratings_uses_heldout_users(ratings_files, readers, capsys):
    folder, _ = ratings_files
    res = run_json(
        capsys,
        [
            "fit",
            "--method",
            "als",
            "--ratings",
            str(folder / "plays.csv"),
            "--user-col",
            "uid",
            "--item-col",
            "mid",
            "--rating-col",
            "",
            "--json",
            "-q",
            *FAST,
        ],
    )
    assert res["protocol"] == "heldout-users" and ex(res)["n_train"] > 1000  # nothing binarised away
    assert 0 <= ex(res)["metrics"]["recall@20"] <= 1


def test_recommend_from_own_file(ratings_files, tmp_path, capsys):
    folder, df = ratings_files
    data = ["--ratings", str(folder / "r.csv"), "--user-col", "uid", "--item-col", "mid", "--rating-col", "stars"]
    path = tmp_path / "m.npz"
    assert main(["fit", "--method", "als", "--output", str(path), "-q", *data, *FAST]) == 0
    capsys.readouterr()
    user = str(df["uid"].iloc[0])
    rec = run_json(capsys, ["recommend", "--model", str(path), "--user", user, "-n", "3", "--json", *data])
    seen = set(df.loc[df["uid"] == int(user), "mid"])
    assert len(rec["items"]) == 3 and not seen & {int(r["item"]) for r in rec["items"]}


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--rating-col", "rating"], "no column 'rating' (--rating-col); its columns are: uid, mid, stars"),
        (["--rating-col", "stars", "--dataset", "ml-100k"], "either --dataset or --ratings"),
        (["--rating-col", "stars", "--scale", "0.5"], "--scale applies to the generated datasets only"),
    ],
)
def test_bad_ratings_options_are_one_line_errors(ratings_files, readers, extra, needle, capsys):
    folder, _ = ratings_files
    rc = main(["fit", "--ratings", str(folder / "r.csv"), "--user-col", "uid", "--item-col", "mid", *extra, "-q"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and len(err.splitlines()) == 1


def test_missing_ratings_file_and_unknown_type(tmp_path, capsys):
    assert main(["fit", "--ratings", str(tmp_path / "nope.csv")]) == 2
    assert "not found" in capsys.readouterr().err
    (tmp_path / "x.xlsx").write_text("a")
    assert main(["fit", "--ratings", str(tmp_path / "x.xlsx")]) == 2
    assert ".csv" in capsys.readouterr().err


def test_column_flags_without_ratings_warn(capsys):
    res = run_json(capsys, ["fit", "--method", "als", "--user-col", "u", "--json", *SMALL, *FAST])
    assert res["warnings"] == ["--user-col only applies to --ratings; ignored"]


# ------------------------------------------------------------------------------- --plot
def test_plot_writes_a_bucket_chart(tmp_path, capsys):
    out = tmp_path / "buckets.png"
    res = run_json(capsys, ["fit", "--method", "als", "--plot", str(out), "--json", *SMALL, *FAST])
    assert res["plot"] == str(out) and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --plot implies the evaluation even with --output
    out2 = tmp_path / "b.svg"
    res = run_json(
        capsys,
        ["fit", "--method", "als", "--plot", str(out2), "--output", str(tmp_path / "m.npz"), "--json", *SMALL, *FAST],
    )
    assert "metrics" in ex(res) and out2.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("name, needle", [("plot.nope", "unknown image type"), ("no/such/dir/p.png", "does not exist")])
def test_bad_plot_path_fails_before_fitting(tmp_path, name, needle, capsys):
    assert main(["fit", "--method", "als", "--plot", str(tmp_path / name), *SMALL]) == 2
    cap = capsys.readouterr()
    assert needle in cap.err and cap.out == ""


def test_plot_without_matplotlib_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["fit", "--method", "als", "--plot", str(tmp_path / "p.png"), *SMALL]) == 2
    err = capsys.readouterr().err.strip()
    assert "privrec[plots]" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["fit", "--epsilon", "-1", "--method", "ada-dpals"], "epsilon"),
        (["fit", "--delta", "2", "--method", "ada-dpals"], "delta"),
        (["fit", "--dataset", "no-such-dataset", "--method", "als"], "no-such-dataset"),
        (["evaluate", "--model", "/nonexistent/model.npz"], "error"),
        (["fit", "--method", "als", "--weight-exponent", "0.5"], "--weight-exponent (mu) does not apply"),
        (["fit", "--method", "als", "--budget", "5"], "--budget (budget) does not apply"),
        (["fit", "--method", "als", "--factors", "0"], "--factors must be >= 1"),
        (["fit", "--heldout-users", "0"], "--heldout-users must be >= 1"),
        (["fit", "--epsilon", "abc"], "invalid float value"),
        (["recommend", "--model", "m.npz", "--user", "1", "-n", "0"], "-n must be >= 1"),
    ],
)
def test_bad_arguments_exit_2_with_one_line_error(argv, needle, capsys):
    rc = main(argv + ["--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert needle in err and len(err.splitlines()) == 1, err


def test_unknown_method_and_user_exit_nonzero(tmp_path, capsys):
    assert main(["fit", "--method", "bogus"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    path = tmp_path / "m.npz"
    assert main(["fit", "--method", "als", "--output", str(path), *SMALL, *FAST]) == 0
    capsys.readouterr()
    assert main(["recommend", "--model", str(path), "--user", "no-such-user", *SMALL]) == 2
    assert "not found" in capsys.readouterr().err


def test_python_cli_py_subprocess_json():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "fit", "--method", "als", "--json", *SMALL, *FAST],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert set(res) >= REQUIRED and ex(res)["metrics"]["rmse"] > 0
    bad = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "fit", "--method", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_private_noise_comes_from_os_entropy_unless_a_noise_seed_is_given(capsys, tmp_path):
    """--seed fixes data and split only; the privacy noise is unseeded unless --noise-seed is set."""

    def item_factors(extra, name):
        out = tmp_path / f"{name}.npz"
        res = run_json(capsys, ["fit", "--json", "--output", str(out), *SMALL, *FAST, *extra])
        return res, models.load_model(out).item_factors_

    res_a, a = item_factors([], "a")
    res_b, b = item_factors([], "b")
    assert res_a["seed"] == 0 and res_a["noise_seed"] is None
    assert a.shape == b.shape and not (a == b).all()  # fresh OS-entropy noise each run
    _, c = item_factors(["--noise-seed", "7"], "c")
    _, d = item_factors(["--noise-seed", "7"], "d")
    assert (c == d).all()  # reproducible experiment


# ---------------------------------------------------------------------- issue 26: ratings files


def test_csv_ids_are_text_unless_declared_numeric(tmp_path):
    """CSV ids 007 and 7 used to become one user."""
    (tmp_path / "r.csv").write_text("user,item,rating\n007,1,4\n7,2,3\n8,1,5\n8,2,1\n")
    data = load_ratings_file(tmp_path / "r.csv")
    assert data.user_ids.tolist() == ["007", "7", "8"] and data.nnz == 4
    numeric = load_ratings_file(tmp_path / "r.csv", numeric_ids=True)
    assert numeric.user_ids.tolist() == [7, 8] and numeric.item_ids.tolist() == [1, 2]
    (tmp_path / "users.txt").write_text("007\n7\n8\n9\n")
    assert read_id_list(tmp_path / "users.txt", "--users") == ["007", "7", "8", "9"]
    roster = load_ratings_file(tmp_path / "r.csv", user_ids=read_id_list(tmp_path / "users.txt", "--users"))
    assert roster.user_ids.tolist() == ["007", "7", "8", "9"]
    with pytest.raises(CommandError, match=r"users\.txt: line 2 repeats the id '7'"):
        read_id_list(tmp_path / "users.txt", "--users", "int")  # 007 and 7 are one number
    (tmp_path / "bad.csv").write_text("user,item,rating\n1,1,4\nx,2,3\n")
    with pytest.raises(CommandError, match=r"bad\.csv, data row 2: 'user' id 'x' is not an integer"):
        load_ratings_file(tmp_path / "bad.csv", numeric_ids=True)
    assert ratings_id_kinds(tmp_path / "r.csv", "user", "item") == {"user": "str", "item": "str"}


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("user,item,rating\n1,1,4\n2,2,3\n3,1,5\n3,2,1,9\n", 5, "found 4"),  # a trailing row
        ("user,item,rating\n1,1,4\n2,2,3,8\n3,2,1\n", 3, "found 4"),
        ("user,item,rating\n1,1,4,9\n2,2,3,9\n", 2, "found 4"),  # every row: pandas took column 1 as an index
        ("user,item,rating\n1,1,4\n2,2\n3,2,1\n", 3, "found 2"),
        ("user,item,rating\n1,1,4\n2,,3\n", 3, "empty 'item' field"),
    ],
)
def test_csv_rows_with_extra_or_missing_fields_name_the_line(tmp_path, text, line, reason):
    (tmp_path / "r.csv").write_text(text)
    with pytest.raises(CommandError, match=rf"r\.csv, line {line}: .*{reason}"):
        load_ratings_file(tmp_path / "r.csv")


def test_bad_ratings_inputs_are_one_line_cli_errors(tmp_path, capsys):
    """A directory used to be "file not found"; list ids a traceback."""
    assert main(["fit", "--method", "als", "--ratings", str(tmp_path), *FAST]) == 2
    err = capsys.readouterr().err
    assert "is a directory, not a file" in err and len(err.strip().splitlines()) == 1
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 30
    pq.write_table(
        pa.table({"user": [[k] for k in range(n)], "item": list(range(n)), "rating": [1.0] * n}), tmp_path / "l.parquet"
    )
    assert main(["fit", "--method", "als", "--ratings", str(tmp_path / "l.parquet"), *FAST]) == 2
    err = capsys.readouterr().err
    assert "holds an id of type" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
