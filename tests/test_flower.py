"""privrec.federated.flower (issue 28): DP-ALS and ISRL-DP MB-SGD as Flower apps give the local answer.

One run of Flower's simulation runtime (Ray backend, 10 SuperNodes) executes every job of the module
(the runtime takes ~10 s to start); the same apps also run on an in-process grid (no Ray) for the
cheaper checks. What is tested: the released item side equals ``DPALS.fit`` with the same seed
(float tolerance 1e-4 of the factors' scale, the Dask backend's), the ledger, the noise scales and
epsilon are identical; MB-SGD equals ``mb_sgd(silo_streams=True)`` bit for bit with identical silo
reports; a client that fails is retried (same answer) or left out (its users out of those releases
only: the fit equals the local fit with those users emptied, with the same ledger), and the round log
says which releases ran with fewer users.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # before flwr is imported: no usage reports
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

pytest.importorskip("flwr", reason="Flower is optional (pip install 'privrec[flower]')")
pytest.importorskip("ray", reason="Flower's simulation runtime needs Ray (pip install 'privrec[flower]')")

from flwr.app import Context, RecordDict

from privrec.convex.federated import SiloSet, mb_sgd
from privrec.convex.losses import SquaredLoss
from privrec.federated import flower
from privrec.federated.flower import dpals as fdpals
from privrec.federated.flower import isrl as fisrl
from privrec.federated.flower.testing import InProcessGrid
from privrec.models import DPALS

N_CLIENTS = 10
SETTINGS = dict(
    axes="warn", epsilon=5.0, factors=4, iterations=3, random_state=11, rating_range=(1, 5), method="ada-dpals"
)
MB = dict(rounds=6, batch_size=8, step_size=0.1, clip=1.0, random_state=5)


def ratings(n=300, m=120, seed=1) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    R = sp.random(n, m, density=0.08, random_state=seed, format="csr", data_rvs=lambda k: rng.integers(1, 6, k))
    return R.astype(np.float32)


def silo_set(n=N_CLIENTS) -> SiloSet:
    rng = np.random.default_rng(0)
    Xs = [rng.normal(size=(50, 4)) for _ in range(n)]  # equal sizes: one noise calibration for all silos
    ys = [x @ np.ones(4) + rng.normal(size=len(x)) for x in Xs]
    return SiloSet.from_arrays(Xs, ys, epsilon=2.0)


LOSS = SquaredLoss(l2=0.01)


def fault(info: dict) -> bool:
    """Job "retry": client 3 crashes at its first attempt of the counts and of ALS step 2; every silo
    at its first attempt of round 3. Job "drop": client 7 never answers after the roster; silo 5 never
    answers in round 2."""
    job, stage, index, attempt = info["job"], info["stage"], info["index"], int(info["attempt"])
    if job == "retry":
        if info["app"] == "dpals":
            return index == 3 and attempt == 0 and (stage == "counts" or (stage == "step" and info.get("t") == 2))
        return attempt == 0 and stage == "message" and info.get("round") == 2
    if job == "drop":
        if info["app"] == "dpals":
            return index == 7 and stage != "roster"
        return index == 5 and stage == "message" and info.get("round") == 1
    return False


@pytest.fixture(scope="module")
def simulated():
    """One simulation (10 SuperNodes) running every job; returns ``{name: result}``."""
    R = ratings()
    silos = silo_set()
    shards = flower.split_users(R, N_CLIENTS)
    app = flower.client_app(shards=shards, silos=list(silos), loss=LOSS, fault=fault)
    opts = dict(min_clients=N_CLIENTS, max_retries=2)
    jobs = {
        "dpals": lambda grid: flower.fit_dpals(DPALS(**SETTINGS), grid, job="plain", **opts),
        "dpals-retry": lambda grid: flower.fit_dpals(DPALS(**SETTINGS), grid, job="retry", **opts),
        "dpals-drop": lambda grid: flower.fit_dpals(DPALS(**SETTINGS), grid, job="drop", **opts),
        "mb": lambda grid: flower.mb_sgd_on_grid(grid, LOSS, n_available=4, job="plain", **MB, **opts),
        "mb-retry": lambda grid: flower.mb_sgd_on_grid(grid, LOSS, n_available=4, job="retry", **MB, **opts),
        "mb-drop": lambda grid: flower.mb_sgd_on_grid(grid, LOSS, job="drop", **MB, **opts),
    }
    results = flower.simulate(list(jobs.values()), app, N_CLIENTS)
    return dict(zip(jobs, results)), R, silos, shards


def assert_same_release(fed, local, tol=1e-4):
    scale = max(1.0, float(np.abs(local.item_factors_).max(initial=0.0)))  # (no factors: the bias model)
    np.testing.assert_allclose(fed.item_factors_, local.item_factors_, atol=tol * scale, rtol=0)
    np.testing.assert_allclose(fed.item_bias_, local.item_bias_, atol=tol * scale, rtol=0)
    np.testing.assert_array_equal(fed.item_counts_, local.item_counts_)
    assert float(fed.global_mean_) == float(local.global_mean_)
    assert fed.noise_scales_ == local.noise_scales_
    assert [(e.label, e.event) for e in fed.ledger_.entries] == [(e.label, e.event) for e in local.ledger_.entries]
    assert fed.privacy_report()["epsilon"] == local.privacy_report()["epsilon"]
    np.testing.assert_array_equal(fed.trained_items_, local.trained_items_)


# ---------------------------------------------------------------------- simulation runtime (Ray)


@pytest.mark.slow  # the module's one run of the simulation runtime (Ray)
def test_simulated_dpals_equals_local_fit(simulated):
    results, R, _, _ = simulated
    local = DPALS(**SETTINGS).fit(R, show_progress=False)
    fed = results["dpals"]
    assert_same_release(fed, local)
    assert fed.federation_["short_rounds"] == []
    labels = [e["label"] for e in fed.federation_["rounds"]]
    assert labels == ["roster", "item counts", "global mean", "ALS step 1", "ALS step 2", "ALS step 3"]
    # the privacy report is DPALS's (relation, what is public) plus the federation's trust statement
    report = flower.privacy_report(fed)
    assert report["neighbouring_relation"] == local.privacy_report()["neighbouring_relation"]
    assert "secure aggregation" in report["federation"]["server_sees"]
    # the released model ranks as the local one (users project themselves from their own ratings)
    assert fed.recommend(0, R[0], N=5)[0].tolist() == local.recommend(0, R[0], N=5)[0].tolist()


@pytest.mark.slow  # the module's one run of the simulation runtime (Ray)
def test_simulated_dpals_retried_client_gives_the_same_answer(simulated):
    results, R, _, _ = simulated
    retry, plain = results["dpals-retry"], results["dpals"]
    np.testing.assert_array_equal(retry.item_factors_, plain.item_factors_)
    np.testing.assert_array_equal(retry.item_bias_, plain.item_bias_)
    rounds = {e["label"]: e for e in retry.federation_["rounds"]}
    assert rounds["item counts"]["retries"] == 1 and rounds["ALS step 2"]["retries"] == 1
    assert rounds["ALS step 1"]["retries"] == 0
    assert retry.federation_["short_rounds"] == []


@pytest.mark.slow  # the module's one run of the simulation runtime (Ray)
def test_simulated_dpals_dropped_client_leaves_its_users_out(simulated):
    """Client 7 answers the roster and then nothing: every release runs without its users, which is
    the local fit on the same roster with those users' ratings removed (the zero-out neighbour);
    the ledger and epsilon are those of the full fit."""
    results, R, _, shards = simulated
    drop = results["dpals-drop"]
    gone = shards[7]
    rows = np.isin(np.arange(R.shape[0]), gone.user_ids)
    emptied = sp.diags((~rows).astype(np.float32)) @ R
    local = DPALS(**SETTINGS).fit(emptied.tocsr(), show_progress=False)
    assert_same_release(drop, local)
    log = drop.federation_
    assert log["short_rounds"] == ["item counts", "global mean", "ALS step 1", "ALS step 2", "ALS step 3"]
    for e in log["rounds"][1:]:
        assert e["missing"] == [7] and e["missing_units"] == gone.n_users and e["retries"] == 2
        assert e["units"] == R.shape[0] - gone.n_users
    assert drop.privacy_report()["epsilon"] == results["dpals"].privacy_report()["epsilon"]


@pytest.mark.slow  # the module's one run of the simulation runtime (Ray)
def test_simulated_mb_sgd_equals_local_bit_for_bit(simulated):
    results, _, silos, _ = simulated
    local = mb_sgd(silos, LOSS, n_available=4, silo_streams=True, **MB)
    for name in ("mb", "mb-retry"):  # a retried silo sends the same message
        fed = results[name]
        np.testing.assert_array_equal(fed.coef, local.coef)
        assert fed.reports == local.reports
        assert fed.epsilons == local.epsilons
    rounds = {e["label"]: e for e in results["mb-retry"].info["federation"]["rounds"]}
    assert rounds["round 3"]["retries"] == 1


@pytest.mark.slow  # the module's one run of the simulation runtime (Ray)
def test_simulated_mb_sgd_dropped_silo(simulated):
    """Silo 5 is silent in round 2: the server averages the other nine there; silo 5 sent one message
    fewer, which its own ledger records (its epsilon is below its budget)."""
    results, _, silos, _ = simulated
    fed = results["mb-drop"]
    log = fed.info["federation"]
    assert log["short_rounds"] == ["round 2"]
    assert log["rounds"][2]["missing"] == [5] and log["rounds"][2]["missing_units"] == 1
    assert fed.reports[5]["events"][0]["meta"]["messages"] == MB["rounds"] - 1
    assert fed.reports[4]["events"][0]["meta"]["messages"] == MB["rounds"]
    assert fed.epsilons[5] < fed.epsilons[4] <= 2.0 + 1e-9
    full = mb_sgd(silos, LOSS, silo_streams=True, **MB)
    assert not np.array_equal(fed.coef, full.coef)


# ---------------------------------------------------------------------- in-process grid (no Ray)


@pytest.mark.parametrize(
    "settings",
    [
        dict(method="dpals-uniform", factors=3, iterations=2, budget=8),
        dict(method="dpals-tail", factors=3, iterations=2, budget=8, unobserved_weight=0.05, item_frac=0.5),
        dict(method="ada-dpsgd", factors=3, iterations=2),
        dict(method="ada-dpals", feedback="implicit", factors=3, iterations=2, unobserved_weight=0.1),
        dict(method="ada-dpals", factors=0),  # the bias model's empirical-Bayes posterior biases
    ],
)
def test_in_process_dpals_methods_equal_local(settings):
    R = ratings(n=160, m=70, seed=3)
    if settings.get("feedback") == "implicit":
        kw = dict(axes="warn", epsilon=5.0, random_state=4, **settings)
    else:
        kw = dict(axes="warn", epsilon=5.0, random_state=4, rating_range=(1, 5), **settings)
    local = DPALS(**kw).fit(R, show_progress=False)
    grid = InProcessGrid(flower.client_app(shards=flower.split_users(R, 4)), 4)
    fed = flower.fit_dpals(DPALS(**kw), grid, min_clients=4)
    assert_same_release(fed, local)


def test_in_process_spectral_ridges_equal_local(monkeypatch):
    """The implicit rank's ridges from the released counts (forced on this small roster) are set
    by the server as by the local fit."""
    import privrec.models.dpals_config as dpals_module

    real = dpals_module.auto_config
    monkeypatch.setattr(dpals_module, "auto_config", lambda *a, **k: {**real(*a, **k), "reg_rule": "spectral"})
    R = ratings(n=160, m=70, seed=3)
    kw = dict(
        axes="warn", epsilon=5.0, random_state=4, method="ada-dpals", feedback="implicit", factors=3, iterations=2
    )
    local = DPALS(**kw).fit(R, show_progress=False)
    grid = InProcessGrid(flower.client_app(shards=flower.split_users(R, 4)), 4)
    fed = flower.fit_dpals(DPALS(**kw), grid, min_clients=4)
    assert local.config_["reg_rule"] == "spectral" and fed.config_["reg"] == local.config_["reg"]
    assert_same_release(fed, local)


def test_in_process_mb_sgd_options_equal_local():
    silos = silo_set(5)
    for kw in (dict(sampling="without_replacement", averaging="last"), dict(noise="paper", radius=2.0)):
        local = mb_sgd(silos, LOSS, silo_streams=True, **MB, **kw)
        grid = InProcessGrid(flower.client_app(silos=list(silos), loss=LOSS), 5)
        fed = flower.mb_sgd_on_grid(grid, LOSS, min_clients=5, **MB, **kw)
        np.testing.assert_array_equal(fed.coef, local.coef)
        assert fed.reports == local.reports


def test_in_process_silo_without_a_seed_keeps_its_own_entropy():
    """Without random_state each silo draws its own OS entropy once (kept in its state, never sent):
    the run is private and differs from any seeded run; the reports are still complete."""
    silos = silo_set(3)
    grid = InProcessGrid(flower.client_app(silos=list(silos), loss=LOSS), 3)
    kw = {k: v for k, v in MB.items() if k != "random_state"}
    fed = flower.mb_sgd_on_grid(grid, LOSS, min_clients=3, **kw)
    assert len(fed.reports) == 3 and all(0 < e <= 2.0 + 1e-9 for e in fed.epsilons)
    entropy = [str(c.state["isrl-entropy-"]["entropy"]) for c in grid.contexts.values()]
    assert len(set(entropy)) == 3


def test_roster_checks_and_refusals():
    R = ratings(n=60, m=30, seed=5)
    grid = InProcessGrid(flower.client_app(shards=flower.split_users(R, 3)), 3)
    with pytest.raises(ValueError, match="outside the declared rating_range"):
        flower.fit_dpals(DPALS(axes="warn", epsilon=5.0, rating_range=(2, 5), random_state=0), grid, min_clients=3)
    with pytest.raises(ValueError, match="finite epsilon"):
        flower.fit_dpals(DPALS(epsilon=float("inf")), grid, min_clients=3)
    with pytest.raises(TypeError, match="fits a DPALS"):
        flower.fit_dpals(object(), grid)
    with pytest.raises(TimeoutError, match="expected clients"):
        flower.fit_dpals(DPALS(axes="warn", epsilon=5.0), grid, min_clients=4, wait=0.2)
    with pytest.raises(ValueError, match="trace"):
        flower.mb_sgd_on_grid(grid, LOSS, trace=True, **MB)
    with pytest.raises(ValueError, match="n_clients"):
        flower.split_users(R, 0)
    with pytest.warns(UserWarning, match="beyond rating_bound"):
        flower.fit_dpals(
            DPALS(axes="warn", epsilon=5.0, rating_bound=4.0, random_state=0, factors=2, iterations=1),
            grid,
            min_clients=3,
        )


def test_shard_files_round_trip(tmp_path):
    R = ratings(n=40, m=20, seed=6)
    shard = flower.split_users(R, 2)[1]
    flower.save_shard(tmp_path / "s.npz", shard)
    back = flower.load_shard(tmp_path / "s.npz")
    assert back.index == 1 and np.array_equal(back.user_ids, shard.user_ids)
    assert (back.matrix != shard.matrix).nnz == 0


def test_client_rejects_unknown_stage():
    from flwr.app import ConfigRecord

    shard = flower.split_users(ratings(n=20, m=10), 1)[0]
    with pytest.raises(ValueError, match="unknown DP-ALS stage"):
        fdpals.client_answer(shard, ConfigRecord({"stage": "nope"}), {}, RecordDict())
    with pytest.raises(ValueError, match="unknown ISRL-DP stage"):
        silo = silo_set(1)[0]
        cfg = ConfigRecord({"stage": "nope", "job": "", "options": '{"clip": 1.0}', "rounds": 1, "batch_size": "4"})
        fisrl.client_answer(0, silo, LOSS, cfg, {}, RecordDict())


def test_deployed_apps_in_process(tmp_path, capsys):
    """privrec.federated.flower.app's ServerApp main and ClientApp (what `flwr run` starts), here on the
    in-process grid: each node reads only its own shard file; the server writes the model and report."""
    from privrec.federated.flower import app as fapp

    R = ratings(n=90, m=40, seed=8)
    configs = {}
    for shard in flower.split_users(R, 3):
        path = tmp_path / f"shard-{shard.index}.npz"
        flower.save_shard(path, shard)
        configs[shard.index] = {"data-path": str(path)}
    grid = InProcessGrid(fapp.clientapp, 3, configs)
    run_config = {"axes": "warn", "epsilon": 2.0, "factors": 2, "iterations": 2, "random-state": 5}
    run_config["rating-low"] = 1.0
    run_config.update({"rating-high": 5.0, "min-clients": 3, "output-dir": str(tmp_path / "out")})
    fapp.main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config))
    assert "privrec: DP-ALS released 40 items x 2 factors at epsilon=" in capsys.readouterr().out
    local = fapp.model_from_config(run_config).fit(R, show_progress=False)
    fed = DPALS.load(tmp_path / "out" / "model.npz")  # the release only: no ledger object, its report
    scale = float(np.abs(local.item_factors_).max())
    np.testing.assert_allclose(fed.item_factors_, local.item_factors_, atol=1e-4 * scale, rtol=0)
    np.testing.assert_array_equal(fed.item_counts_, local.item_counts_)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["epsilon"] == local.privacy_report()["epsilon"] and report["federation"]["short_rounds"] == []
    assert [e["label"] for e in report["events"]] == [e.label for e in local.ledger_.entries]
    # the defaults: private (OS entropy), automatic rank and steps, no declared range
    default = fapp.model_from_config({})
    assert default.random_state is None and default.factors is None and default.rating_range is None
    assert default.axes == "release"  # undeclared axes are released (add/remove DP), as DPALS()


def test_example_writes_shards_and_needs_data(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "flower_movielens.py"
    spec = importlib.util.spec_from_file_location("privrec_example_flower_movielens", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--synthetic", "--write-shards", str(tmp_path / "shards"), "--clients", "3"]) == 0
    assert sorted(p.name for p in (tmp_path / "shards").glob("*.npz")) == [f"shard-{k}.npz" for k in range(3)]
    assert capsys.readouterr().out.count("flower-supernode --insecure") == 3
    assert mod.main(["--data-dir", str(tmp_path / "none")]) == 2
    assert "--synthetic" in capsys.readouterr().err


@pytest.mark.slow
def test_example_on_the_simulation_runtime(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "flower_movielens.py"
    spec = importlib.util.spec_from_file_location("privrec_example_flower_movielens", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--synthetic", "--clients", "10"]) == 0
    out = capsys.readouterr().out
    assert "ledger identical" in out and "releases with fewer users: none" in out and "top 5" in out


def test_in_process_dropout_equals_the_zero_out_neighbour():
    """The in-process grid turns a crash into an error reply, as the runtimes do: client 1 of 3 crashes
    at every release after the roster (job "drop" of :func:`fault` uses index 7; here a 3-client
    federation with its own rule), the fit equals the local fit with client 1's users emptied."""
    R = ratings(n=90, m=40, seed=9)
    shards = flower.split_users(R, 3)
    dead = lambda info: info["index"] == 1 and info["stage"] != "roster"
    grid = InProcessGrid(flower.client_app(shards=shards, fault=dead), 3)
    kw = dict(axes="warn", epsilon=5.0, factors=2, iterations=2, random_state=2, rating_range=(1, 5))
    with pytest.warns(UserWarning, match="without some clients' users"):
        fed = flower.fit_dpals(DPALS(**kw), grid, min_clients=3, max_retries=1)
    keep = (~np.isin(np.arange(R.shape[0]), shards[1].user_ids)).astype(np.float32)
    local = DPALS(**kw).fit((sp.diags(keep) @ R).tocsr(), show_progress=False)
    assert_same_release(fed, local)
    assert fed.federation_["short_rounds"] == ["item counts", "global mean", "ALS step 1", "ALS step 2"]
    assert all(e["retries"] == 1 for e in fed.federation_["rounds"][1:])


def test_silo_streams_need_an_int_seed():
    silos = silo_set(2)
    with pytest.raises(ValueError, match="silo_streams=True needs random_state None or an int seed"):
        mb_sgd(silos, LOSS, rounds=2, batch_size=4, step_size=0.1, clip=1.0, silo_streams=True,
               random_state=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ValueError, match="random_state must be None or an int seed"):
        flower.mb_sgd_on_grid(None, LOSS, rounds=2, batch_size=4, step_size=0.1, random_state=np.random.default_rng(0))
