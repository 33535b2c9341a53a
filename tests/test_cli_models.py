"""End-to-end CLI: ``privrec fit/evaluate/recommend/similar`` on small generated data (issue 5).

Uses the embedded generated default (``synthetic-skew``) shrunk with ``--scale`` so each call
takes a second or two; ``--json`` output is parsed and checked field by field.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from privrec import models
from privrec.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--scale", "0.2", "--quiet"]
FAST = ["--iterations", "2", "--factors", "4"]
REQUIRED = {"dataset", "method", "epsilon", "delta", "epsilon_spent", "privacy_events", "metrics", "sliced",
            "fit_seconds"}
has_dpals = pytest.mark.skipif(not hasattr(models, "DPALS"), reason="privrec.models.DPALS not available")


def run_json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [l for l in out.splitlines() if l.strip()]
    assert len(lines) == 1, f"--json must print exactly one line, got {lines!r}"
    return json.loads(lines[0])


def test_fit_als_json_random_protocol_on_default_dataset(capsys):
    res = run_json(capsys, ["fit", "--method", "als", "--json", *SMALL, *FAST])
    assert REQUIRED <= set(res)
    assert res["dataset"] == "synthetic-skew" and res["method"] == "als" and res["protocol"] == "random"
    assert res["epsilon_spent"] == "inf" and res["privacy_events"]["events"] == []
    rmse = res["metrics"]["rmse"]
    assert 0 < rmse < 3
    assert len(res["sliced"]["rmse"]) == 5 and sum(res["bucket_items"]) == res["n_items"]
    # the union of the buckets' squared errors is the overall RMSE (same test pairs)
    assert res["fit_seconds"] >= 0


@has_dpals
def test_fit_private_json_reports_ledger_epsilon_within_target(capsys):
    res = run_json(capsys, ["fit", "--method", "ada-dpals", "--epsilon", "1", "--json", *SMALL, *FAST])
    assert REQUIRED <= set(res)
    assert res["epsilon"] == 1.0 and res["delta"] == pytest.approx(1e-5)
    spent = res["epsilon_spent"]
    assert isinstance(spent, float) and 0 < spent <= 1.0 + 1e-6
    events = res["privacy_events"]["events"]
    assert len(events) >= 2  # counts + at least one private item step
    from privrec.privacy import epsilon_from_report

    report = res["privacy_events"]
    assert epsilon_from_report(report, report["accountant"]) == pytest.approx(spent, rel=1e-6)
    assert math.isfinite(res["metrics"]["rmse"])


def test_fit_heldout_protocol_reports_recall_and_ndcg(capsys):
    res = run_json(capsys, ["fit", "--method", "als", "--protocol", "heldout-users", "--heldout-users", "60",
                            "--json", *SMALL, *FAST])
    m = res["metrics"]
    assert res["protocol"] == "heldout-users"
    assert 0 <= m["recall@20"] <= 1 and 0 <= m["ndcg@20"] <= 1 and m["n_users"] > 0
    assert len(res["sliced"]["recall"]) == 5


def test_fit_save_then_evaluate_recommend_similar(tmp_path, capsys):
    path = tmp_path / "als.npz"
    fit = run_json(capsys, ["fit", "--method", "als", "--output", str(path), "--evaluate", "--json", *SMALL, *FAST])
    assert path.is_file() and fit["output"] == str(path)
    ev = run_json(capsys, ["evaluate", "--model", str(path), "--json", *SMALL])
    # same split, same model -> same RMSE as the fit's own evaluation
    assert ev["metrics"]["rmse"] == pytest.approx(fit["metrics"]["rmse"], rel=1e-5)
    rec = run_json(capsys, ["recommend", "--model", str(path), "--user", "0", "-n", "5", "--json", *SMALL])
    assert len(rec["items"]) == 5
    scores = [r["score"] for r in rec["items"]]
    assert scores == sorted(scores, reverse=True)
    sim = run_json(capsys, ["similar", "--model", str(path), "--item", "3", "-n", "4", "--json", *SMALL])
    assert len(sim["items"]) == 4 and all(str(r["item"]) != "3" for r in sim["items"])
    # human-readable output has the per-bucket table
    assert main(["evaluate", "--model", str(path), *SMALL]) == 0
    assert "rmse" in capsys.readouterr().out


def test_readable_fit_output_has_bucket_table_and_privacy_line(capsys):
    assert main(["fit", "--method", "als", *SMALL, *FAST]) == 0
    out = capsys.readouterr().out
    assert "per-popularity bucket" in out and "0 (tail)" in out and "privacy" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["fit", "--epsilon", "-1", "--method", "ada-dpals"], "epsilon"),
        (["fit", "--delta", "2", "--method", "ada-dpals"], "delta"),
        (["fit", "--dataset", "no-such-dataset", "--method", "als"], "no-such-dataset"),
        (["evaluate", "--model", "/nonexistent/model.npz"], "error"),
        (["fit", "--method", "als", "--weight-exponent", "0.5"], "mu"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line_error(argv, needle, capsys):
    rc = main(argv + ["--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert needle in err and len(err.splitlines()) == 1


def test_unknown_method_and_user_exit_nonzero(tmp_path, capsys):
    assert main(["fit", "--method", "bogus"]) != 0
    assert "invalid choice" in capsys.readouterr().err
    path = tmp_path / "m.npz"
    assert main(["fit", "--method", "als", "--output", str(path), *SMALL, *FAST]) == 0
    capsys.readouterr()
    assert main(["recommend", "--model", str(path), "--user", "no-such-user", *SMALL]) == 2
    assert "not found" in capsys.readouterr().err


def test_python_cli_py_subprocess_json():
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "fit", "--method", "als", "--json", *SMALL, *FAST],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert REQUIRED <= set(res) and res["metrics"]["rmse"] > 0
    bad = subprocess.run([sys.executable, str(ROOT / "cli.py"), "fit", "--method", "nope"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode != 0 and "invalid choice" in bad.stderr


@has_dpals
def test_private_noise_comes_from_os_entropy_unless_a_noise_seed_is_given(capsys, tmp_path):
    """--seed fixes data and split only; the privacy noise is unseeded unless --noise-seed is set."""
    def item_factors(extra, name):
        out = tmp_path / f"{name}.npz"
        res = run_json(capsys, ["fit", "--json", "--output", str(out), *SMALL, *FAST, *extra])
        return res, models.load_model(out).item_factors_

    res_a, a = item_factors([], "a")
    res_b, b = item_factors([], "b")
    assert res_a["seed"] == 0 and res_a["noise_seed"] is None
    assert a.shape == b.shape and not (a == b).all()          # fresh OS-entropy noise each run
    _, c = item_factors(["--noise-seed", "7"], "c")
    _, d = item_factors(["--noise-seed", "7"], "d")
    assert (c == d).all()                                     # reproducible experiment
