"""privrec.privacy.Budget: a file-backed lifetime budget over every release from one population.

Persistence, the lifetime epsilon recomputed independently with plain dp_accounting, refusal
before a fit touches the data, concurrent processes (exactly one of two fits that only one fits
succeeds), corrupt and forged files, and the weekly-refit example of docs/privacy/budget.md.
"""

import json
import math
import multiprocessing
import re
import warnings
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import pld
from dp_accounting.privacy_accountant import NeighboringRelation

from privrec.models import ALS, DPALS
from privrec.privacy import (
    Budget,
    BudgetExceededError,
    BudgetFileError,
    PrivacyLedger,
    event_from_dict,
    fit_with_budget,
    gaussian_event,
    plan_fit,
)

ROOT = Path(__file__).resolve().parents[1]
FIT = dict(factors=3, iterations=2, rating_range=(1, 5))


def ratings(n_users=120, n_items=30, seed=0):
    """Small explicit 1-5 ratings, every user with at least one rating."""
    rng = np.random.default_rng(seed)
    pop = 0.5 / np.arange(1, n_items + 1) ** 0.7
    mask = rng.random((n_users, n_items)) < pop[None, :]
    mask[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
    vals = rng.integers(1, 6, size=mask.shape).astype(np.float32)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


def dpals(epsilon=1.0, delta=1e-6):
    return DPALS(epsilon=epsilon, delta=delta, **FIT)


def independent_pld_epsilon(path, delta):
    """Lifetime epsilon straight from the file's events with dp_accounting's PLD accountant (fine grid)."""
    content = json.loads(Path(path).read_text())
    events = [event_from_dict(e["event"]) for r in content["releases"] for e in r["events"]]
    acc = pld.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    for e in events:
        acc.compose(e)
    return acc.get_epsilon(delta), len(events)


@pytest.fixture
def R():
    return ratings()


# ------------------------------------------------------------------------------- persistence, accounting
def test_create_record_reopen_and_spent_is_the_pld_composition_of_every_event(tmp_path, R):
    path = tmp_path / "budget.json"
    budget = Budget.create(path, epsilon=10.0, delta=1e-6, description="ratings of shop A")
    assert budget.spent() == 0.0 and budget.remaining() == 10.0 and budget.releases == []
    reports = []
    for week in (1, 2):
        model = fit_with_budget(dpals(epsilon=2.0), R, budget, label=f"week {week}", show_progress=False)
        reports.append(model.privacy_report())
    again = Budget.open(path)  # a new object reads the same record
    assert [r.label for r in again.releases] == ["week 1", "week 2"]
    assert again.epsilon == 10.0 and again.delta == 1e-6
    expected, n_events = independent_pld_epsilon(path, 1e-6)
    assert n_events == sum(len(r["events"]) for r in reports)
    assert again.spent() == pytest.approx(expected, rel=1e-4)
    assert again.remaining() == pytest.approx(10.0 - again.spent())
    # composed, not added: two fits cost less than the sum of their epsilons at the same delta ...
    each = [PrivacyLedger.from_report(r).epsilon(1e-6, "pld") for r in reports]
    assert max(each) < again.spent() < sum(each)
    # ... and the spend after each release is recorded
    assert again.releases[0].spent_after == pytest.approx(each[0], rel=1e-4)
    assert again.releases[1].spent_after == pytest.approx(again.spent())
    summary = again.summary()
    assert summary["lifetime_epsilon"] == 10.0 and summary["accountant"] == "pld"
    assert [r["label"] for r in summary["releases"]] == ["week 1", "week 2"]
    assert summary["releases"][0]["method"] == "ada-dpals" and summary["releases"][0]["target_epsilon"] == 2.0
    json.dumps(summary)
    assert "spent=" in repr(again) and "releases=2" in repr(again)


def test_plan_fit_is_what_the_fit_records(R):
    model = dpals()
    plan = plan_fit(model, R.shape)
    model.fit(R, show_progress=False)
    recorded = [(e.label, e.event) for e in model.ledger_.entries]
    assert plan == recorded
    # non-private models plan a non-private event
    ((label, event),) = plan_fit(ALS(), R.shape)
    assert isinstance(event, dp_accounting.NonPrivateDpEvent) and "non-private" in label
    ((_, event),) = plan_fit(DPALS(epsilon=math.inf), R.shape)
    assert isinstance(event, dp_accounting.NonPrivateDpEvent)
    with pytest.raises(TypeError, match="cannot plan"):
        plan_fit(type("Opaque", (), {"privacy_report": lambda self: {}})(), R.shape)
    with pytest.raises(ValueError, match="n_users, n_items"):
        plan_fit(dpals(), (10,))


# ------------------------------------------------------------------------------- refusal
def test_a_fit_that_would_exceed_is_refused_before_it_touches_the_data(tmp_path, R):
    path = tmp_path / "b.json"
    budget = Budget.create(path, epsilon=1.2, delta=1e-6)
    fit_with_budget(dpals(), R, budget, show_progress=False)
    spent = budget.spent()
    assert 0 < spent <= 1.2
    before = path.read_bytes()
    model = dpals()
    calls = []
    model.fit = lambda *a, **k: calls.append(a)  # the data must never reach fit
    with pytest.raises(BudgetExceededError) as info:
        fit_with_budget(model, R, budget)
    assert calls == [] and path.read_bytes() == before
    err = info.value
    msg = str(err)
    assert f"lifetime epsilon {1.2:.4g}" in msg and f"spent so far {spent:.4g} over 1 release" in msg
    assert f"would bring it to {err.total:.4g}" in msg and "nothing was released" in msg
    assert err.total > 1.2 and err.spent == pytest.approx(spent) and err.n_releases == 1
    # the would-be total is the composition with the plan, computed the same way as the check
    assert budget.total_with(plan_fit(dpals(), R.shape)) == pytest.approx(err.total)
    # a smaller fit still fits
    total = budget.check(plan_fit(dpals(epsilon=0.1), R.shape))
    assert spent < total <= 1.2


def test_non_private_fits_are_refused(tmp_path, R):
    budget = Budget.create(tmp_path / "b.json", epsilon=100.0, delta=1e-6)
    for model in (ALS(factors=2, iterations=1), DPALS(epsilon=math.inf, **FIT)):
        with pytest.raises(BudgetExceededError, match="non-private") as info:
            fit_with_budget(model, R, budget)
        assert math.isinf(info.value.total)
    assert budget.releases == []


def test_a_failed_fit_records_nothing_and_a_plan_mismatch_is_recorded_then_raised(tmp_path, R):
    budget = Budget.create(tmp_path / "b.json", epsilon=10.0, delta=1e-6)
    with pytest.raises(ZeroDivisionError):
        with budget.charge(dpals(), R.shape):
            raise ZeroDivisionError("the fit failed")
    assert budget.releases == [] and budget.spent() == 0.0
    model = dpals()
    with pytest.raises(RuntimeError, match="differ from its plan"):
        with budget.charge(model, R.shape, planned=[("something else", gaussian_event(50.0))]) as charge:
            model.fit(R, show_progress=False)
    assert len(budget.releases) == 1  # the real spend is recorded anyway
    assert charge.release is not None and charge.release.spent_after == pytest.approx(budget.spent())


def test_recording_past_the_limit_warns_and_is_kept(tmp_path, R):
    budget = Budget.create(tmp_path / "b.json", epsilon=0.5, delta=1e-6)
    report = dpals(epsilon=1.0).fit(R, show_progress=False).privacy_report()
    with pytest.warns(UserWarning, match="above its limit"):
        release = budget.record(report, "a fit made without checking")
    assert release.spent_after > 0.5 and budget.remaining() == 0.0
    with pytest.raises(BudgetExceededError):
        budget.check([("tiny", gaussian_event(1e3))])


def test_record_refuses_altered_or_foreign_reports(tmp_path, R):
    budget = Budget.create(tmp_path / "b.json", epsilon=10.0, delta=1e-6)
    report = dpals().fit(R, show_progress=False).privacy_report()
    forged = json.loads(json.dumps(report))
    forged["events"][-1]["event"]["noise_multiplier"] *= 10  # claims the old epsilon with less noise spent
    with pytest.raises(ValueError, match="the report was altered"):
        budget.record(forged)
    other = {**report, "accountant_neighboring": "replace_one"}
    other.pop("epsilon")
    with pytest.raises(ValueError, match="different relations"):
        budget.record(other)
    for bad in ({}, {"events": []}, {"events": [{"label": "x", "event": {"type": "nope"}}]}):
        with pytest.raises(ValueError):
            budget.record(bad)
    assert budget.releases == []


# ------------------------------------------------------------------------------- create / open
def test_create_open_and_open_or_create_rules(tmp_path):
    path = tmp_path / "sub" / "b.json"
    with pytest.raises(FileNotFoundError, match="not found"):
        Budget.open(path)
    with pytest.raises(FileNotFoundError, match="give its lifetime"):
        Budget.open_or_create(path)
    for eps, delta in ((0.0, 1e-6), (math.inf, 1e-6), (1.0, 1.0), (1.0, 1e-20)):
        with pytest.raises(ValueError, match="lifetime"):
            Budget.create(path, eps, delta)
    with pytest.raises(ValueError, match="neighboring"):
        Budget.create(path, 1.0, 1e-6, neighboring="zero_out_everything")
    assert not path.exists()
    Budget.open_or_create(path, 2.0, 1e-6)
    assert Budget.open_or_create(path).epsilon == 2.0  # used as is
    assert Budget.open_or_create(path, 2.0, 1e-6).delta == 1e-6  # same lifetime: fine
    with pytest.raises(ValueError, match="keeps its lifetime"):
        Budget.open_or_create(path, 3.0, 1e-6)
    with pytest.raises(FileExistsError):
        Budget.create(path, 2.0, 1e-6)
    assert Path(str(path) + ".lock").exists()


# ------------------------------------------------------------------------------- corrupt / forged files
@pytest.fixture
def spent_file(tmp_path, R):
    path = tmp_path / "b.json"
    budget = Budget.create(path, epsilon=10.0, delta=1e-6)
    for week in (1, 2):
        fit_with_budget(dpals(), R, budget, label=f"week {week}", show_progress=False)
    return path


def _rewrite(path, content, redigest):
    if redigest:
        from privrec.privacy.budget import _digest

        content["digest"] = _digest(content)
    path.write_text(json.dumps(content))


@pytest.mark.parametrize(
    "change, redigest, needle",
    [
        (lambda c: c["releases"].pop(0), False, "does not match its digest"),
        (lambda c: c["releases"].pop(0), True, "states a spend of epsilon"),
        (lambda c: c["lifetime"].update(epsilon=50.0), False, "does not match its digest"),
        (lambda c: c["lifetime"].update(epsilon=-1), True, "lifetime epsilon must be > 0"),
        (lambda c: c["lifetime"].pop("delta"), True, "its lifetime has no delta"),
        (lambda c: c["lifetime"].update(delta=1e-20), True, "smallest delta the PLD accountant resolves"),
        (lambda c: c["releases"][0]["events"][0]["event"].update(type="bogus"), True, "release 1 is malformed"),
        (lambda c: c["releases"][1].pop("label"), True, "release 2 is malformed"),
        (lambda c: c.update(version=99), True, "unsupported version 99"),
        (lambda c: c.update(accountant="rdp"), True, "accountant must be 'pld'"),
        (lambda c: c.update(releases={}), True, "'releases' must be a list"),
        (lambda c: c.update(neighboring="sideways"), True, "neighboring must be one of"),
    ],
)
def test_forged_or_corrupt_content_is_a_clear_error(spent_file, change, redigest, needle):
    content = json.loads(spent_file.read_text())
    change(content)
    _rewrite(spent_file, content, redigest)
    with pytest.raises(BudgetFileError, match=re.escape(needle)) as info:
        Budget.open(spent_file)
    assert str(spent_file) in str(info.value)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "not valid JSON (line 1, column 1"),
        ('{"format": "privrec-budget", "version": 1, "lifet', "not valid JSON (line 1"),
        ("[1, 2]", "is not a privrec budget file"),
        ('{"format": "something else"}', "is not a privrec budget file"),
    ],
)
def test_truncated_or_foreign_files_are_clear_errors(tmp_path, text, needle):
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(BudgetFileError, match=re.escape(needle)) as info:
        Budget.open(path)
    assert str(path) in str(info.value)
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BudgetFileError, match="not UTF-8"):
        Budget.open(path)


def test_an_open_budget_notices_a_file_changed_under_it(spent_file):
    budget = Budget.open(spent_file)
    budget.spent()
    content = json.loads(spent_file.read_text())
    content["releases"].pop()
    spent_file.write_text(json.dumps(content))  # digest kept: a cached state must not hide the edit
    with pytest.raises(BudgetFileError, match="digest"):
        budget.spent()


# ------------------------------------------------------------------------------- concurrency
def _race(path, barrier, results):
    """One process: wait for the other, then try to charge a fit to the shared budget."""
    budget = Budget(path)
    model = dpals()
    barrier.wait()
    try:
        fit_with_budget(model, ratings(), budget, label="racer", show_progress=False)
        results.put("fitted")
    except BudgetExceededError:
        results.put("refused")
    except Exception as exc:  # pragma: no cover - reported by the assertion below
        results.put(f"error: {type(exc).__name__}: {exc}")


@pytest.mark.slow  # two interpreters start (spawn)
def test_two_processes_racing_for_a_budget_that_allows_one_fit(tmp_path, R):
    one = Budget.create(tmp_path / "probe.json", 10.0, 1e-6).total_with(plan_fit(dpals(), R.shape))
    path = tmp_path / "b.json"
    Budget.create(path, epsilon=one * 1.2, delta=1e-6)  # room for one fit, not two
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(path), barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    outcomes = sorted(results.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["fitted", "refused"]
    budget = Budget.open(path)
    assert len(budget.releases) == 1 and budget.spent() == pytest.approx(one, rel=1e-6)


def test_lock_is_exclusive_between_objects_and_reentrant_within_one(tmp_path):
    path = tmp_path / "b.json"
    budget = Budget.create(path, 1.0, 1e-6)
    other = Budget(path, lock_timeout=0.2)
    with budget.lock():
        with budget.lock():  # re-entrant
            assert budget.spent() == 0.0
        with pytest.raises(TimeoutError, match="locked by another process"):
            with other.lock():
                pass
    with other.lock():  # free again
        pass


# ------------------------------------------------------------------------------- the documented example
def test_docs_weekly_refit_example_runs(tmp_path, monkeypatch, capsys):
    """Every python block of docs/privacy/budget.md, run in order in a scratch folder."""
    text = (ROOT / "docs" / "privacy" / "budget.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the example must run clean
        for block in blocks:
            exec(compile(block, "docs/privacy/budget.md", "exec"), namespace)
    out = capsys.readouterr().out
    budget = namespace["budget"]
    weeks = [int(w) for w in re.findall(r"^week (\d+): spent", out, flags=re.M)]
    assert weeks == list(range(1, len(weeks) + 1)) and len(weeks) >= 2
    assert "refused" in out  # the example stops when the lifetime budget is used up
    labels = [r.label for r in budget.releases]
    assert labels == [f"week {w}" for w in weeks] + ["week 53, epsilon 0.1"]  # + the step-by-step charge
    assert budget.spent() <= budget.epsilon
    expected, _ = independent_pld_epsilon(budget.path, budget.delta)
    assert budget.spent() == pytest.approx(expected, rel=1e-4)
