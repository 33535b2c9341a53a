"""One plan for every path (issue 38): the budget, Dask, the sampling keys and the reports follow
the fit that actually runs.

``DPALS.plan(X)`` (:func:`privrec.tuning.plan.plan_fit`) is computed once from public inputs; the
local fit, the Dask driver and :class:`privrec.privacy.Budget` consume it, so a budget check is a
check of the fit that runs (the automatic selection included) and the selection's held-out split
and sampling are keyed on user ids on every path.
"""

import json
import math
import multiprocessing
import os
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from privrec.allocation import stable_user_keys
from privrec.data.synthetic import PRESETS, low_rank_interactions
from privrec.models import DPALS
from privrec.privacy import Budget, BudgetFileError, epsilon_from_report, fit_with_budget
from privrec.tuning.selection import holdout_mask, split_holdout

N_USERS = 5_000  # the automatic selection runs at epsilon = 20 (60,000 / 5,000 = 12, then 10% free)
EPS = 20.0


@pytest.fixture(scope="module")
def structured():
    kw = PRESETS["synthetic-structured"]._generator_arguments()
    data = low_rank_interactions(N_USERS, 200, 120_000, **kw, random_state=5, name="structured")
    X = data.interactions.matrix.tocsr().astype(np.float32)
    coo = X.tocoo()
    ids = np.arange(N_USERS) * 7 + 1000  # ids that are not row positions
    frame = pd.DataFrame({"user": ids[coo.row], "item": coo.col, "rating": coo.data})
    return X, frame


def _model(**kw):
    return DPALS(**{"axes": "warn", "epsilon": EPS, "rating_range": (0.5, 5), "show_progress": False, **kw})


def test_the_plan_lists_exactly_what_the_fit_records(structured):
    X, _ = structured
    model = _model(random_state=0)
    plan = model.plan(X)
    assert plan.kind == "selection" and len(plan.candidates) == 2
    assert plan.planned_epsilon() <= EPS * (1 + 1e-9)
    model.fit(X)
    recorded = [(e.label, e.event) for e in model.ledger_.entries]
    assert recorded == list(plan.events)
    # a plan is public and JSON-safe; a non-selecting fit plans its own events too
    json.dumps(plan.as_dict())
    single = DPALS(epsilon=1.0, factors=4, iterations=2, rating_range=(0.5, 5), random_state=0, show_progress=False)
    p1 = single.plan(shape=X.shape)
    assert p1.kind == "fit"
    single.fit(X)
    assert [(e.label, e.event) for e in single.ledger_.entries] == list(p1.events)


def test_reports_describe_the_release_not_a_candidate(structured):
    X, _ = structured
    model = _model(random_state=1).fit(X)
    report = model.privacy_report()
    assert model.config_["epsilon"] == EPS  # the release's target, not the winning candidate's share
    assert model.config_["epsilon_spent"] == pytest.approx(report["epsilon"], rel=1e-9)
    assert model.config_["epsilon_candidate"] < EPS
    sel = model.selection_
    assert [c["epsilon"] for c in sel["candidates"]] == sel["epsilon_candidates"]
    assert all(c["epsilon"] < EPS for c in sel["candidates"])
    assert sel["keys"] == "row positions"  # a bare matrix: its rows are the ids
    # one neighbouring relation per report; the accountant's composition mode under its own name
    assert "neighboring" not in report and report["accountant_neighboring"] == "add_or_remove_one"
    assert "zero-out" in report["neighbouring_relation"]
    assert epsilon_from_report(report) == pytest.approx(report["epsilon"], rel=1e-6)


def test_rating_span_messages_mark_exact_figures():
    X = sp.csr_matrix(np.array([[1.0, 9.0], [2.0, 3.0]], dtype=np.float32))
    with pytest.warns(UserWarning, match=r"\[non-private\]"):
        DPALS(epsilon=1.0, factors=1, iterations=1, rating_bound=5.0, show_progress=False).fit(X)
    with pytest.raises(ValueError, match=r"\[non-private\]"):
        DPALS(epsilon=1.0, factors=1, iterations=1, rating_range=(1, 5), show_progress=False).fit(X)


# ------------------------------------------------------------------------------- keys from user ids
def test_holdout_is_keyed_on_user_ids_under_deletion_and_zero_out():
    rng = np.random.default_rng(0)
    R = sp.random(60, 40, density=0.3, random_state=1, format="csr", dtype=np.float64)
    R.data = rng.integers(1, 6, R.nnz).astype(np.float64)
    ids = np.arange(60) * 3 + 11
    keys = stable_user_keys(ids)
    full_train, full_held = split_holdout(R, 0.3, 1234, keys)
    gone = 17
    keep = np.r_[0:gone, gone + 1 : 60]
    # add/remove: delete the user's row; every other user's split is unchanged
    tr, he = split_holdout(R[keep], 0.3, 1234, keys[keep])
    assert (tr != full_train[keep]).nnz == 0 and (he != full_held[keep]).nnz == 0
    # zero-out: the user stays with no ratings; every other user's split is unchanged
    Z = R.tolil()
    Z[gone, :] = 0
    Z = Z.tocsr()
    Z.eliminate_zeros()
    tr, he = split_holdout(Z, 0.3, 1234, keys)
    assert (tr[keep] != full_train[keep]).nnz == 0 and (he[keep] != full_held[keep]).nnz == 0
    # without ids the row is the key: deleting a row moves later users' splits
    m_rows = holdout_mask(R, 0.3, 1234)
    m_del = holdout_mask(R[keep], 0.3, 1234)
    later = R.indptr[gone + 1]
    assert not np.array_equal(m_rows[later:], m_del[R.indptr[gone] :])


def test_selection_candidates_sample_with_user_id_keys(structured):
    """Zero-out of one user on the selection path with the same seed: the released counts move by
    that user's own sampled items only (other users keep their samples and their holdout)."""
    _, frame = structured
    gone = int(frame["user"].iloc[0])
    zeroed = frame[frame["user"] != gone]
    roster = np.sort(frame["user"].unique())
    a = _model(random_state=7).fit(frame, users=roster)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = _model(random_state=7).fit(zeroed, users=roster)
    assert a.selection_["keys"] == "user ids" and a.selection_["chosen"] == b.selection_["chosen"]
    diff = a.item_counts_ - b.item_counts_
    rated = frame.loc[frame["user"] == gone, "item"].to_numpy()
    assert np.all(np.abs(diff[np.setdiff1d(np.arange(a.item_counts_.size), rated)]) < 1e-6)
    assert np.all(diff > -1e-6) and diff.sum() <= a.config_["count_sample"] + 1e-6


# ------------------------------------------------------------------------------- Dask
def test_dask_runs_the_local_selection(structured):
    pytest.importorskip("dask")
    from privrec.distributed import SerialClient, fit, partition_interactions

    _, frame = structured
    local = _model(random_state=3).fit(frame)
    parts = partition_interactions(frame, n_partitions=3, client=SerialClient())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fallback warning any more
        dist = fit(_model(random_state=3), parts, client=SerialClient())
    assert dist.selection_["chosen"] == local.selection_["chosen"]
    assert dist.config_["factors"] == local.config_["factors"]
    order = np.argsort(dist.item_ids_) if dist.item_ids_ is not None else np.arange(200)
    np.testing.assert_allclose(dist.item_factors_[order], local.item_factors_, atol=1e-3)
    assert dist.privacy_report()["epsilon"] == local.privacy_report()["epsilon"]
    assert [e.label for e in dist.ledger_.entries] == [e.label for e in local.ledger_.entries]
    np.testing.assert_allclose(dist.selection_["noisy_scores"], local.selection_["noisy_scores"], rtol=1e-6)


def test_dask_holdout_equals_the_local_split():
    pytest.importorskip("dask")
    from privrec.distributed import SerialClient, partition_interactions
    from privrec.distributed.selection import _holdout_parts

    rng = np.random.default_rng(2)
    frame = pd.DataFrame(
        {"user": rng.integers(0, 300, 3000) * 5, "item": rng.integers(0, 50, 3000), "rating": rng.integers(1, 6, 3000)}
    ).drop_duplicates(["user", "item"])
    parts = partition_interactions(frame, n_partitions=3, client=SerialClient(), items=np.arange(50))
    local_ids = np.sort(frame["user"].unique())
    pos = {u: i for i, u in enumerate(local_ids)}
    R = sp.csr_matrix(
        (frame["rating"].to_numpy(float), ([pos[u] for u in frame["user"]], frame["item"].to_numpy())),
        shape=(local_ids.size, 50),
    )
    _, held = split_holdout(R, 0.2, 99, stable_user_keys(local_ids))
    offsets = parts.offsets
    for p, block in enumerate(parts.blocks):
        b = block.result() if hasattr(block, "result") else block
        train_b, held_b, _ = _holdout_parts(b, int(offsets[p]), 0.2, 99)
        rows = [pos[u] for u in b.user_ids]
        assert (held_b != held[rows]).nnz == 0


# ------------------------------------------------------------------------------- the budget
def test_the_default_cli_fit_with_a_budget_saves_and_records_its_plan(tmp_path, monkeypatch):
    from privrec.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(
        ["fit", "--epsilon", "20", "--budget-file", "b.json", "--lifetime-epsilon", "50", "--lifetime-delta",
         "1e-5", "--output", "m.npz", "--quiet"]
    )  # fmt: skip
    assert rc == 0
    model = DPALS.load(tmp_path / "m.npz")
    budget = json.loads((tmp_path / "b.json").read_text())
    assert len(budget["releases"]) == 1
    recorded = [e["label"] for e in budget["releases"][0]["events"]]
    assert recorded == [e["label"] for e in model.privacy_report()["events"]]
    assert any(label.startswith("selection candidate 1: ") for label in recorded)


def test_fit_with_budget_plans_the_declared_roster(structured, tmp_path):
    _, frame = structured
    roster = np.r_[np.sort(frame["user"].unique()), np.arange(10) + 10**9]  # users without ratings
    model = _model(random_state=2)
    plan = model.plan(frame, users=roster)
    assert plan.n_users == roster.size and plan.keys == "user ids"
    budget = Budget.create(tmp_path / "b.json", 40.0, 1e-5)
    fit_with_budget(model, frame, budget, users=roster)
    assert budget.releases[0].events == list(plan.events)


def test_budget_arguments_and_malformed_files_give_one_line_errors(tmp_path):
    path = tmp_path / "b.json"
    Budget.create(path, 1.0, 1e-6)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="lock_timeout"):
            Budget(path, lock_timeout=bad)
    with pytest.raises(TypeError, match="lock_timeout"):
        Budget(path, lock_timeout="abc")
    budget = Budget.open(path)
    with pytest.raises(TypeError, match="planned events"):
        budget.check(["x"])
    with pytest.raises(TypeError, match="planned events"):
        budget.check(5)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BudgetFileError, match="nests"):
        Budget.open(deep)


def test_a_budget_file_with_a_zero_noise_multiplier_is_refused(tmp_path):
    from privrec.privacy.budget import _digest

    path = tmp_path / "b.json"
    Budget.create(path, 10.0, 1e-6)
    report = DPALS(epsilon=1.0, factors=0, iterations=1, rating_range=(1, 5), show_progress=False)
    R = sp.csr_matrix(np.array([[1.0, 5.0], [3.0, 0.0], [4.0, 2.0]], dtype=np.float32))
    Budget.open(path).record(report.fit(R).privacy_report(), "one")
    content = json.loads(path.read_text())
    content["releases"][0]["events"][0]["event"]["noise_multiplier"] = 0.0
    content.pop("digest")
    content["digest"] = _digest(content)
    path.write_text(json.dumps(content))
    with pytest.raises(BudgetFileError, match="noise multiplier"):
        Budget.open(path)


def _spend_through(link: str, barrier, results) -> None:
    from privrec.privacy import BudgetExceededError, PrivacyLedger, gaussian_event

    ledger = PrivacyLedger()
    ledger.record("fit", gaussian_event(2.0))
    budget = Budget.open(link)
    barrier.wait()
    try:
        with budget.lock():
            budget.check([("fit", gaussian_event(2.0))])
            budget.record(ledger.report(1e-6, accountant="pld"), "fit")
        results.put("spent")
    except BudgetExceededError:
        results.put("refused")
    except Exception as exc:  # pragma: no cover - reported by the assertion below
        results.put(f"error: {type(exc).__name__}: {exc}")


@pytest.mark.slow  # two interpreters start (spawn)
def test_two_processes_through_two_symlinks_cannot_overspend(tmp_path):
    from privrec.privacy import gaussian_event

    real = tmp_path / "store" / "budget.json"
    real.parent.mkdir()
    one = Budget.create(tmp_path / "probe.json", 10.0, 1e-6).total_with([("fit", gaussian_event(2.0))])
    Budget.create(real, one * 1.3, 1e-6)  # room for one spend, not two
    links = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        link = tmp_path / name / "budget.json"
        os.symlink(real, link)
        links.append(str(link))
    assert Budget(links[0]).lock_path == Budget(links[1]).lock_path
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_spend_through, args=(link, barrier, results)) for link in links]
    for p in procs:
        p.start()
    outcomes = sorted(results.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["refused", "spent"]
    assert Budget.open(real).spent() <= one * 1.3 and math.isclose(Budget.open(real).spent(), one, rel_tol=1e-6)


def test_flower_statement_names_the_case_that_applies():
    pytest.importorskip("flwr")
    from privrec.federated.flower.dpals import TRUST_STATEMENT

    assert "with secure aggregation" not in TRUST_STATEMENT["server_sees"]
    assert "no secure aggregation" in TRUST_STATEMENT["server_sees"]


def test_dry_run_shows_the_plan_and_spends_nothing(tmp_path, monkeypatch, capsys):
    from privrec.cli import main

    monkeypatch.chdir(tmp_path)
    Budget.create(tmp_path / "b.json", 50.0, 1e-5)
    before = (tmp_path / "b.json").read_text()
    assert main(["fit", "--epsilon", "20", "--budget-file", "b.json", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "selection" and len(out["candidates"]) == 2
    assert len(out["events"]) == 21 and out["planned_epsilon"] <= 20.0
    assert out["budget"]["spent"] == 0.0 and 0 < out["budget"]["after_this_fit"] <= 20.0
    assert (tmp_path / "b.json").read_text() == before and not list(tmp_path.glob("*.npz"))


# ------------------------------------------------------------------------------- Flower
def test_flower_runs_the_local_selection(structured):
    pytest.importorskip("flwr")
    from privrec.federated import flower
    from privrec.federated.flower.testing import InProcessGrid

    X, _ = structured
    local = _model(random_state=3).fit(X)
    grid = InProcessGrid(flower.client_app(shards=flower.split_users(X, 3)), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fallback warning, no short round
        fed = flower.fit_dpals(_model(random_state=3), grid, min_clients=3)
    assert fed.selection_["chosen"] == local.selection_["chosen"]
    assert fed.config_["factors"] == local.config_["factors"]
    np.testing.assert_allclose(fed.item_factors_, local.item_factors_, atol=1e-3)
    assert fed.privacy_report()["epsilon"] == local.privacy_report()["epsilon"]
    assert [e.label for e in fed.ledger_.entries] == [e.label for e in local.ledger_.entries]
    assert "selection losses" in [r["label"] for r in fed.federation_["rounds"]]


def test_flower_fit_without_any_client_fails_and_short_rounds_warn():
    pytest.importorskip("flwr")
    from privrec.federated import flower
    from privrec.federated.flower.testing import InProcessGrid

    rng = np.random.default_rng(0)
    R = sp.random(90, 40, density=0.2, random_state=1, format="csr", dtype=np.float32)
    R.data = rng.integers(1, 6, R.nnz).astype(np.float32)
    kw = dict(axes="warn", epsilon=5.0, factors=2, iterations=1, rating_range=(1, 5))
    every = lambda info: info["stage"] != "roster"
    grid = InProcessGrid(flower.client_app(shards=flower.split_users(R, 3), fault=every), 3)
    with pytest.raises(RuntimeError, match="no Flower client answered .*nothing was released"):
        flower.fit_dpals(DPALS(**kw), grid, min_clients=3, max_retries=0)
    one = lambda info: info["index"] == 1 and info["stage"] != "roster"
    grid = InProcessGrid(flower.client_app(shards=flower.split_users(R, 3), fault=one), 3)
    with pytest.warns(UserWarning, match="without some clients' users"):
        flower.fit_dpals(DPALS(**kw), grid, min_clients=3, max_retries=0)


# ------------------------------------------------------------------------------- issue 39 (the lead's part)
def test_a_nonfinite_release_is_refused_when_ranking(tmp_path):
    from privrec.data.registry import load_dataset
    from privrec.serving import recommend_all

    R = load_dataset("synthetic-skew").matrix.tocsr()[:300]
    m = DPALS(epsilon=1.0, factors=2, iterations=1, show_progress=False).fit(R)
    m.item_factors_[54, 0] = np.nan
    with pytest.raises(ValueError, match=r"item_factors_ holds NaN or infinite values \(item 54\)"):
        m.recommend(0, R[0], N=5)
    with pytest.raises(ValueError, match="item_factors_ holds NaN"):
        recommend_all(m, R, tmp_path / "top.parquet", N=10)
    assert not (tmp_path / "top.parquet").exists()
    m.item_factors_[54, 0] = 0.0
    m.item_bias_[0] = np.inf
    with pytest.raises(ValueError, match=r"item_bias_ holds NaN or infinite values \(item 0\)"):
        m.recommend(0, R[0], N=5)


def test_ranking_metrics_refuse_k_beyond_the_catalogue_and_narrow_targets():
    """implicit.evaluation returns precision 189.75 at K = 10**6; privrec's ranking_metrics refuses a k
    beyond the catalogue and a test matrix with fewer columns than the model's items."""
    from privrec.evaluation.metrics import ranking_metrics

    rng = np.random.default_rng(0)
    U, V = rng.random((5, 3)).astype(np.float32), rng.random((10, 3)).astype(np.float32)
    T = sp.random(5, 10, density=0.3, format="csr", random_state=1)
    with pytest.raises(ValueError, match="k = 1000000 exceeds the catalogue of 10 items"):
        ranking_metrics(U, V, T, ks=(10**6,))
    m = ranking_metrics(U, V, T, ks=(10,))
    assert 0 <= m["precision@10"] <= 1 and m["recall@10"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="targets has shape"):
        ranking_metrics(U, V, sp.random(5, 8, density=0.3, format="csr", random_state=1), ks=(5,))


def test_the_ray_simulation_refuses_an_address_space_limit_it_cannot_start_in():
    pytest.importorskip("flwr")
    import subprocess
    import sys

    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))\n"
        "from privrec.federated.flower.simulation import _check_ray_can_start\n"
        "try:\n    _check_ray_can_start()\nexcept RuntimeError as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused: Flower's simulation runtime (Ray) cannot start" in out.stdout, out.stderr


def test_the_privacy_page_lists_every_released_array():
    """docs/privacy/dpals.md's "Released" paragraph names every array a DPALS release carries and
    the selection's noisy scores (issue 38)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "privacy" / "dpals.md").read_text(encoding="utf-8")
    released = text[text.index("**Released**") : text.index("**Not released**")]
    for name in DPALS._saved_arrays:
        assert f"`{name}`" in released, name
    assert "selection scores" in released and "noisy_scores" in released


def test_a_plan_is_computed_once_for_the_same_public_inputs():
    a = DPALS(epsilon=20.0, rating_range=(0.5, 5), random_state=1).plan(shape=(N_USERS, 200))
    b = DPALS(epsilon=20.0, rating_range=(0.5, 5), random_state=2).plan(shape=(N_USERS, 200))
    assert a is b  # the noise seed does not shape a plan
    c = DPALS(epsilon=19.0, rating_range=(0.5, 5)).plan(shape=(N_USERS, 200))
    assert c is not a and c.epsilon == 19.0
