"""Smoke tests of the reproduction benchmarks in ``--quick`` mode (issue 5; spec 004 §7).

The quick configuration runs every method on a small generated dataset (both protocols); the test
checks the outputs' structure, that every private run's accountant epsilon is within its target,
and that the claim verdicts agree with the measured numbers they summarise.
"""

import json
import math
import sys
from pathlib import Path

import pytest

from privrec.cli import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_tradeoff as B  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    return out, B.run(B.quick_config(), "all", out, quiet=True)


@pytest.mark.slow
def test_quick_tradeoff_outputs_and_privacy(quick):
    out, res = quick
    saved = json.loads((out / "tradeoff_quick.json").read_text())
    assert saved["runs"] and not [s for s in saved["skipped"] if "budget" in s["reason"]]
    methods = {r["method"] for r in saved["runs"]}
    assert methods == {"als", "dpals-uniform", "dpals-tail", "ada-dpals", "dpsgd-uniform", "dpsgd-tail", "ada-dpsgd"}
    for r in saved["runs"]:
        m = r["metrics"]["rmse" if r["protocol"] == "random" else "recall@20"]
        assert isinstance(m, float) and math.isfinite(m)
        assert len(r["sliced"]["rmse" if r["protocol"] == "random" else "recall"]) == 5
        if r["method"] != "als":
            assert 0 < r["epsilon_spent"] <= r["epsilon"] * (1 + 1e-6)
            assert r["n_events"] >= 2
            assert len(r["sliced"]["neighbour_overlap@20"]) == 5
    md = (out / "tradeoff_quick.md").read_text()
    assert "ada > tail > uniform" in md
    assert any(p.endswith(".png") for p in res.get("plots", []))
    assert all(Path(p).stat().st_size > 0 for p in res["plots"])


@pytest.mark.slow
def test_claim_verdicts_match_measured_numbers(quick):
    _, res = quick
    for e in res["analysis"].values():
        lower = e["protocol"] == "random"
        for v in e["by_epsilon"].values():
            o = v["overall"]
            for fam, (uni, tail, ada) in B.FAMILIES.items():
                c = v["claims"][fam]
                better = (lambda a, b: a < b) if lower else (lambda a, b: a > b)
                assert c["ordering_ada>tail>uniform"] == (better(o[ada], o[tail]) and better(o[tail], o[uni]))
                assert any(math.isclose(o[f"{ada}_best_mu"], m) for m in B.ADA_MUS_CLAIM)


def test_plan_covers_mu_sweep_and_claim_mus():
    cfg = B.Config(datasets=[], epsilons=(1.0,), mus=(0.0, 1.0))
    p = B.plan(cfg, "all")
    ada = sorted(mu for m, e, mu in p if m == "ada-dpals")
    assert ada == pytest.approx(sorted([0.0, 0.25, 1 / 3, 0.5, 1.0]))
    assert ("als", None, None) in p and ("dpsgd-tail", 1.0, None) in p
    assert {m for m, _, _ in B.plan(cfg, "mu")} == {"als", "ada-dpals", "ada-dpsgd"}


def test_improvement_direction():
    assert B._improvement(0.9, 1.0, "random") == pytest.approx(0.1)  # lower RMSE is better
    assert B._improvement(0.11, 0.10, "heldout-users") == pytest.approx(0.1)  # higher recall is better
    assert math.isnan(B._improvement(float("nan"), 1.0, "random"))


def test_benchmark_command_dispatch_errors(capsys):
    assert main(["benchmark", "nosuch"]) != 0
    assert "invalid choice" in capsys.readouterr().err
    from privrec.commands.benchmark import load_script

    with pytest.raises(FileNotFoundError, match="not found"):
        load_script("no_such_script.py")
    assert main(["benchmark", "tradeoff", "--quick", "--datasets", "nope"]) == 2


def test_benchmark_command_dispatches_to_scripts(tmp_path, monkeypatch, capsys):
    """speed / synthetic call the scripts' main(argv) with the remaining options."""
    (tmp_path / "bench_speed.py").write_text(
        "import json, sys\ndef main(argv=None):\n    print(json.dumps({'argv': argv}))\n    return {'ok': True}\n"
    )
    (tmp_path / "bench_appendix_c.py").write_text("def main(argv=None):\n    return 3 if '--fail' in argv else 0\n")
    monkeypatch.setenv("PRIVREC_BENCHMARKS", str(tmp_path))
    assert main(["benchmark", "speed", "--quick"]) == 0
    assert json.loads(capsys.readouterr().out)["argv"] == ["--quick"]
    assert main(["benchmark", "synthetic", "--quick"]) == 0
    assert main(["benchmark", "synthetic", "--fail"]) == 3


def test_eval_speed_quick_agrees_with_argsort_peer(tmp_path):
    res = B.eval_speed(n_users=200, n_items=500, factors=8, out_dir=tmp_path, tag="_quick")
    assert res["recall@20_ours"] == pytest.approx(res["recall@20_peer"])
    assert res["seconds_total"] > 0 and (tmp_path / "eval_speed_quick.md").is_file()


def test_trivial_baselines_quick(tmp_path):
    res = B.trivial_baselines(B.quick_config(), tmp_path, quiet=True)
    assert set(res) == {"synthetic-skew-rmse", "synthetic-skew-topk"}
    assert res["synthetic-skew-rmse"]["global_mean_rmse"] > 0
    assert 0 <= res["synthetic-skew-topk"]["popularity_recall@20"] <= 1
    saved = json.loads((tmp_path / "baselines.json").read_text())
    assert saved["synthetic-skew-rmse"]["global_mean_rmse"] == pytest.approx(
        res["synthetic-skew-rmse"]["global_mean_rmse"]
    )


def test_quick_user_solver_bench_compares_exact_and_cg_on_validation(tmp_path):
    """bench_user_solver --quick: both user steps fitted with the same noise seeds on a factor model
    with several ALS steps; the warm-started CG step's validation RMSE stays within noise of the exact one."""
    import bench_user_solver as U

    res = U.main(["--quick", "--out", str(tmp_path), "--quiet"])
    row = res["results"][0]
    assert row["metric"] == "rmse" and row["config"]["factors"] == 8 and row["config"]["iterations"] == 3
    exact, cg = row["variants"]["exact"], row["variants"]["cg"]
    assert len(exact["values"]) == len(cg["values"]) == 2
    assert exact["values"] != cg["values"]  # the CG user step did run (a different solve)
    assert abs(cg["mean"] - exact["mean"]) < 0.01
    assert (tmp_path / "user_solver_quick.md").exists() and (tmp_path / "user_solver_quick.json").exists()


def test_quick_projection_bench_times_every_eigensolver_route(tmp_path):
    """bench_projection --quick: every LAPACK route runs on noisy Gramians that need the projection
    and is reported (no timing is asserted: speed lives in the benchmark's output)."""
    import bench_projection as P

    res = P.main(["--quick", "--out", str(tmp_path), "--quiet", "--repeats", "1"])
    t = res["microseconds_per_matrix"]
    assert res["share_with_negative_eigenvalues"] > 0.9
    assert len(t) == 11 and all(v > 0 for v in t.values())
    assert any(k.startswith("privrec shifted_solve") for k in t)  # the default item step's solve is timed too
    assert (tmp_path / "projection_quick.md").exists() and (tmp_path / "projection_quick.json").exists()
