"""``privrec fit --budget-file``: a lifetime privacy budget charged by the CLI.

A new file takes its lifetime from --lifetime-epsilon / --lifetime-delta; an existing one is used
as is. A fit the budget cannot pay for is refused with one line and exit status 3, before any data
is loaded when the budget is used up, and always before the fit; bad options and bad files are
one-line errors (status 2) before any data is loaded.
"""

import json

import pytest

from privrec.cli import main
from privrec.commands._running import EXIT_REFUSED
from privrec.privacy import Budget, BudgetExceededError

SMALL = ["--scale", "0.2", "--quiet"]
FAST = ["--iterations", "2", "--factors", "4", "--no-compare-als"]
#: a data option that fails when it is loaded: an error about it means the data was touched
NO_DATA = ["--ratings", "/nonexistent/ratings.csv"]


def run(argv, capsys):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip()


def fit_json(capsys, argv):
    rc, out, err = run(["fit", "--json", *SMALL, *FAST, *argv], capsys)
    assert rc == 0, err
    return json.loads(out)


def test_first_fit_creates_and_records_then_a_fit_too_many_is_refused(tmp_path, capsys):
    # what one fit spends: charged to a roomy budget first
    roomy = ["--budget-file", str(tmp_path / "probe.json"), "--lifetime-epsilon", "100", "--lifetime-delta", "1e-6"]
    one = fit_json(capsys, ["--epsilon", "1", *roomy])["budget"]["spent"]
    path = tmp_path / "budget.json"
    lifetime = ["--lifetime-epsilon", f"{1.2 * one:.6f}", "--lifetime-delta", "1e-6"]
    res = fit_json(capsys, ["--epsilon", "1", "--budget-file", str(path), *lifetime])
    b = res["budget"]
    budget = Budget.open(path)
    assert b["file"] == str(path) and b["lifetime_delta"] == 1e-6 and b["accountant"] == "pld"
    assert b["lifetime_epsilon"] == pytest.approx(1.2 * one, rel=1e-6)
    assert b["spent_before"] == 0 and b["spent"] == pytest.approx(budget.spent()) == pytest.approx(one)
    assert b["remaining"] == pytest.approx(budget.remaining()) and b["releases"] == 1
    assert b["label"] == "privrec fit --method ada-dpals --epsilon 1 on synthetic-skew"
    assert budget.releases[0].summary["n_events"] == len(res["privacy_events"]["events"])
    # the same fit again (the file is used as is): refused, one line, status 3, file unchanged
    before = path.read_bytes()
    rc, out, err = run(["fit", "--epsilon", "1", "--budget-file", str(path), *SMALL, *FAST], capsys)
    assert rc == EXIT_REFUSED == 3 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"privrec fit: refused: privacy budget {path}: lifetime epsilon")
    assert "spent so far" in err and "would bring it to" in err and "nothing was released" in err
    assert path.read_bytes() == before
    # a smaller fit still fits, with its own label, and the readable output shows the budget
    rc, out, err = run(
        ["fit", "--epsilon", "0.05", "--budget-file", str(path), "--budget-label", "small", *SMALL, *FAST], capsys
    )
    assert rc == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("budget ")]
    assert str(path) in line and "lifetime eps" in line and "-> " in line and "'small'" in line
    assert [r.label for r in Budget.open(path).releases] == [b["label"], "small"]


def test_a_used_up_budget_is_refused_before_any_data_is_loaded(tmp_path, capsys):
    from privrec.privacy import PrivacyLedger, gaussian_event

    path = tmp_path / "budget.json"
    budget = Budget.create(path, epsilon=0.01, delta=1e-6)
    earlier = PrivacyLedger()
    earlier.record("an earlier release", gaussian_event(2.0))  # far more than the lifetime
    report = earlier.report(1e-6)
    with pytest.warns(UserWarning, match="above its limit"):
        budget.record(report, "an earlier fit")
    rc, out, err = run(["fit", "--budget-file", str(path), *NO_DATA], capsys)
    assert rc == 3 and out == "" and len(err.splitlines()) == 1
    assert "is used up" in err and "nothing was loaded or fitted" in err and "ratings.csv" not in err


@pytest.mark.parametrize(
    "extra, needle",
    [
        ([], "does not exist; create it with --lifetime-epsilon and --lifetime-delta"),
        (["--lifetime-epsilon", "1"], "does not exist; create it with"),
        (["--lifetime-epsilon", "0", "--lifetime-delta", "1e-6"], "--lifetime-epsilon must be finite and > 0"),
        (["--lifetime-epsilon", "inf", "--lifetime-delta", "1e-6"], "--lifetime-epsilon must be finite and > 0"),
        (["--lifetime-epsilon", "1", "--lifetime-delta", "1"], "--lifetime-delta must be in (0, 1)"),
        (["--lifetime-epsilon", "1", "--lifetime-delta", "1e-20"], "smallest delta the PLD accountant resolves"),
        (["--method", "als"], "als is non-private"),
        (["--epsilon", "inf"], "epsilon = inf is non-private"),
        (["--noise-seed", "3"], "a known noise seed voids the guarantee"),
    ],
)
def test_budget_option_errors_come_before_any_data_is_loaded(tmp_path, extra, needle, capsys):
    path = tmp_path / "new.json"
    rc, out, err = run(["fit", "--budget-file", str(path), *extra, *NO_DATA], capsys)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert needle in err and "ratings.csv" not in err
    assert not path.exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--lifetime-epsilon", "1"], "--lifetime-epsilon only applies with --budget-file"),
        (["--lifetime-epsilon", "1", "--lifetime-delta", "1e-6"], "--lifetime-delta only apply with --budget-file"),
        (["--budget-label", "x"], "--budget-label only applies with --budget-file"),
    ],
)
def test_lifetime_options_need_a_budget_file(argv, needle, capsys):
    rc, _, err = run(["fit", *argv, *NO_DATA], capsys)
    assert rc == 2 and needle in err and len(err.splitlines()) == 1


def test_existing_file_keeps_its_lifetime_and_bad_files_are_one_line_errors(tmp_path, capsys):
    path = tmp_path / "budget.json"
    Budget.create(path, epsilon=3.0, delta=1e-6)
    rc, _, err = run(["fit", "--budget-file", str(path), "--lifetime-epsilon", "4", *NO_DATA], capsys)
    assert rc == 2 and "has lifetime epsilon 3, not 4" in err and "ratings.csv" not in err
    content = json.loads(path.read_text())
    content["lifetime"]["epsilon"] = 30.0  # a hand edit
    path.write_text(json.dumps(content))
    rc, _, err = run(["fit", "--budget-file", str(path), *NO_DATA], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and str(path) in err and "changed outside privrec" in err
    path.write_text("{ not json")
    rc, _, err = run(["fit", "--budget-file", str(path), *NO_DATA], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and f"budget file {path} is not valid JSON" in err
    nowhere = ["--budget-file", str(tmp_path / "no" / "dir" / "b.json")]
    rc, _, err = run(["fit", *nowhere, "--lifetime-epsilon", "1", "--lifetime-delta", "1e-6", *NO_DATA], capsys)
    assert rc == 2 and "does not exist" in err and "ratings.csv" not in err


def test_any_command_refused_by_a_budget_exits_3(monkeypatch, capsys):
    import privrec.commands.benchmark as B

    def refused(args):
        raise BudgetExceededError(
            "privacy budget b.json: spent",
            path="b.json",
            lifetime_epsilon=1,
            delta=1e-6,
            spent=1,
            total=2,
            n_releases=1,
        )

    monkeypatch.setattr(B, "cmd_benchmark", refused)
    rc, out, err = run(["benchmark", "speed"], capsys)
    assert rc == 3 and out == "" and err == "privrec benchmark: refused: privacy budget b.json: spent"


def test_help_documents_the_budget_options(capsys):
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for needle in ("--budget-file FILE", "--lifetime-epsilon", "--lifetime-delta", "exit status 3", "[non-private]"):
        assert needle in text, needle
