"""The memory of a whole run -- fit, evaluation, yardsticks -- estimated before the fit and refused
with one line when over the limit (issue 44): ``privrec.evaluation.memory`` and ``privrec fit`` /
``privrec evaluate``."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

import privrec.commands._memory as CM
from privrec._validation import FitMemoryError
from privrec.cli import main
from privrec.evaluation import ranking_metrics
from privrec.evaluation import topk as T
from privrec.evaluation.memory import RunStage, check_run_memory, evaluation_memory, model_memory, run_memory
from privrec.models import ALS, DPALS
from privrec.models.fit_memory import fit_memory_of, planned_factors
from privrec.solvers.memory import fit_memory

SMALL = ["--scale", "0.2", "--quiet"]
FAST = ["--iterations", "2", "--factors", "4"]


def run(argv, capsys):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip()


@pytest.fixture
def no_process(monkeypatch):
    """Stages without this process's resident memory (which differs between the test and the run)."""
    monkeypatch.setattr(CM, "process_memory", lambda: 0)


# ------------------------------------------------------------------ the estimate


def test_wide_catalogue_evaluation_buffers_stay_within_the_budget(monkeypatch):
    monkeypatch.delenv(T.MEMORY_ENV, raising=False)
    parts = evaluation_memory(20_000, 300_000, 64)
    rows = T.chunk_rows(300_000)
    assert parts["ranking score buffers"] == rows * 300_000 * T.BYTES_PER_ENTRY <= T.DEFAULT_MEMORY_BUDGET
    assert parts["fold-in user factors"] == 2 * 20_000 * 65 * 4
    assert parts["ranking item terms"] == 300_000 * 66 * 4
    monkeypatch.setenv(T.MEMORY_ENV, "64")  # the budget users set, followed
    assert evaluation_memory(20_000, 300_000, 64)["ranking score buffers"] <= 64 << 20
    # few users: their scores alone, not the whole budget; one huge row is still one row
    assert evaluation_memory(3, 1000, 8)["ranking score buffers"] == 3 * 1000 * T.BYTES_PER_ENTRY
    assert evaluation_memory(5, 10**9, 8, budget=1)["ranking score buffers"] == 10**9 * T.BYTES_PER_ENTRY
    assert evaluation_memory(0, 1000, 8)["ranking score buffers"] == 0


def test_the_estimate_is_the_chunk_the_ranking_really_scores(monkeypatch):
    # the chunk ranking_metrics streams with is the one the estimate counts: spy on stream_topk's chunks
    rng = np.random.default_rng(0)
    U = rng.standard_normal((50, 4)).astype(np.float32)
    V = rng.standard_normal((300, 4)).astype(np.float32)
    targets = sp.random(50, 300, density=0.05, random_state=1, format="csr")
    budget = 40 * 300 * T.BYTES_PER_ENTRY  # 40 rows a chunk
    seen = []
    real = T.topk_indices

    def spy(scores, k):
        seen.append(scores.shape[0])
        return real(scores, k)

    monkeypatch.setattr(T, "topk_indices", spy)
    ranking_metrics(U, V, targets, ks=(5,), memory_budget=budget)
    assert max(seen) == 40 == T.chunk_rows(300, budget)
    assert evaluation_memory(50, 300, 4, budget=budget)["ranking score buffers"] == max(seen) * 300 * T.BYTES_PER_ENTRY


def test_model_memory_and_run_memory_take_the_largest_stage():
    assert model_memory(0, 10, 3) == 10 * 4 * 4 + 2 * 10 * 8
    assert model_memory(5, 10, 3, itemsize=8) == 15 * 4 * 8 + 2 * 10 * 8
    stages = [RunStage("a", {"x": 10, "y": 5}), ("b", {"x": 30}, "shrink b"), RunStage("c", {"z": 1})]
    est = run_memory(stages, limit=100)
    assert est == {"peak_bytes": 30, "peak_stage": "b", "limit_bytes": 100, "stages": {"a": 15, "b": 30, "c": 1}}
    assert check_run_memory(stages, limit=30)["peak_stage"] == "b"
    with pytest.raises(FitMemoryError, match=r"this run would need .* in b \(x .*\).* limit .*; shrink b; nothing"):
        check_run_memory(stages, limit=29)
    with pytest.raises(ValueError, match="at least one stage"):
        run_memory([])


def test_a_models_fit_estimate_is_its_own_checks():
    # DPALS: the largest of its plan's settings and candidates, the options of the fit's own check
    m = DPALS(epsilon=5.0, factors=8)
    assert planned_factors(m, (500, 200)) == 8
    parts = fit_memory_of(m, (500, 200))
    assert parts == fit_memory(500, 200, 8, 4, item_step=m.plan(shape=(500, 200)).config.solver, num_threads=None)
    auto = DPALS(epsilon=20.0)
    plan = auto.plan(shape=(20_000, 2_000))
    assert planned_factors(auto, (20_000, 2_000)) == max([plan.config.factors] + [c.factors for c in plan.candidates])
    als = ALS(factors=16, feedback="implicit")
    assert fit_memory_of(als, (100, 50)) == fit_memory(100, 50, 16, 4, gravity=True, ridge_positive=True)
    assert fit_memory_of(object(), (100, 50)) == {}


# ------------------------------------------------------------------ the commands


def _stage_totals(capsys, argv) -> dict:
    rc, out, err = run(["fit", "--dry-run", "--json", *argv], capsys)
    assert rc == 0, err
    return json.loads(out)["memory"]


def test_fit_evaluate_is_refused_before_the_fit_when_the_evaluation_would_not_fit(
    tmp_path, capsys, monkeypatch, no_process
):
    monkeypatch.setenv(T.MEMORY_ENV, "256")  # the evaluation's buffers: 256 MiB at most
    argv = [*SMALL, *FAST, "--compare-als"]
    mem = _stage_totals(capsys, argv)
    stages = mem["stages_mb"]
    assert set(stages) == {
        "the fit",
        "the evaluation",
        "the non-private ALS yardstick's fit",
        "the non-private ALS yardstick's ranking",
    }
    fit_mb = stages["the fit"]
    assert mem["estimated_peak_mb"] == max(stages.values()) > fit_mb
    # a limit the fit alone fits in, the evaluated run not
    limit = int((fit_mb + mem["estimated_peak_mb"]) / 2 * (1 << 20))
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", str(limit))
    budget = tmp_path / "budget.json"
    out_model = tmp_path / "model.npz"
    rc, out, err = run(
        ["fit", "--evaluate", *argv, "--output", str(out_model), "--budget-file", str(budget),
         "--lifetime-epsilon", "10", "--lifetime-delta", "1e-5"],
        capsys,
    )  # fmt: skip
    assert rc == 2 and out == ""
    assert err.startswith("privrec fit: error: privrec fit --evaluate would need about")
    assert mem["peak_stage"] in err and "PRIVREC_MAX_ARRAY_BYTES" in err and "nothing was started" in err
    assert "\n" not in err
    assert not out_model.exists()  # nothing written
    assert not budget.exists() or Budget_spent(budget) == 0  # nothing charged
    # the same limit without the evaluation (a saved model only): the fit runs
    rc, out, err = run(["fit", *argv, "--output", str(out_model)], capsys)
    assert rc == 0, err
    assert out_model.exists()


def Budget_spent(path) -> float:
    from privrec.privacy import Budget

    return Budget.open(path).spent()


def test_fit_reports_the_estimate_beside_the_measured_peak(capsys):
    rc, out, err = run(["fit", "--json", *SMALL, *FAST], capsys)
    assert rc == 0, err
    res = json.loads(out)
    est = res["non_private"]["memory_estimate_mb"]
    assert "memory_estimate_mb" not in res  # an exact-data figure: marked non-private
    assert est > 0 and res["non_private"]["peak_memory_mb"] > 0
    rc, out, err = run(["fit", *SMALL, *FAST], capsys)
    assert rc == 0, err
    line = next(s for s in out.splitlines() if "timings" in s)
    assert "peak memory" in line and "(estimated beforehand:" in line


def test_dry_run_states_the_estimate_and_whether_it_would_be_refused(capsys, monkeypatch, no_process):
    mem = _stage_totals(capsys, [*SMALL, *FAST, "--no-compare-als"])
    assert mem["within_limit"] and set(mem["stages_mb"]) == {"the fit", "the evaluation"}
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", "1000")
    rc, out, err = run(["fit", "--dry-run", *SMALL, *FAST], capsys)
    assert rc == 0, err
    assert "the run would be refused" in next(s for s in out.splitlines() if s.startswith("memory"))


def test_evaluate_checks_its_run_before_ranking(tmp_path, capsys, monkeypatch, no_process):
    model = tmp_path / "m.npz"
    rc, _, err = run(["fit", *SMALL, *FAST, "--output", str(model)], capsys)
    assert rc == 0, err
    rc, out, err = run(["evaluate", "--model", str(model), *SMALL, "--json", "--no-compare-als"], capsys)
    assert rc == 0, err
    assert json.loads(out)["non_private"]["memory_estimate_mb"] > 0
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", str(100_000))  # the model file loads (72 kB), its run does not
    rc, out, err = run(["evaluate", "--model", str(model), *SMALL, "--no-compare-als"], capsys)
    assert rc == 2 and out == ""
    assert err.startswith("privrec evaluate: error: privrec evaluate would need about") and "the evaluation" in err
