"""privrec.distributed.fit on a 2-process LocalCluster: the distributed DPALS / ALS fit equals the local
fit on the same (partition-ordered) matrix -- ledger, noise scales and epsilon identical, factors to
float tolerance -- survives a killed worker with bit-identical results, and fits / recommends with OS
entropy. Skipped when dask.distributed (optional extra) is missing.

Tolerance: the distributed fit draws the same random numbers in the same order as the local one
(same noise, same sampled entries, same allocation), but sums the item statistics, the global
Gramian and the non-private mean over partitions in another order, and batches the exact user /
item ridge solves differently. In float32 each of these differs from the local value by a few ulps
(~1e-7 relative); a few ALS steps of well-conditioned ridge solves (ridge >= 1, clipped features)
keep the difference of the released factors near 1e-6 of their scale (observed <= 5e-6 absolute on
factors of size ~5). The tests assert |distributed - local| <= 1e-4 * max(1, max |local|).
"""

import functools
import math
import os
import sys

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed", reason="dask.distributed is optional (pip install 'privrec[dask]')")
pytest.importorskip("dask.dataframe", reason="dask.dataframe is optional (pip install 'dask[dataframe]')")

from privrec.distributed import SerialClient, fit, partition_interactions  # noqa: E402
from privrec.models import ALS, DPALS, load_model  # noqa: E402

N_ITEMS = 240
REL_TOL = 1e-4


@pytest.fixture(scope="module")
def ratings():
    """Skewed explicit ratings (1..5) and play counts (0 = a stored zero, dropped by implicit feedback)."""
    rng = np.random.default_rng(0)
    n = 14_000
    items = (rng.zipf(1.4, n) - 1) % N_ITEMS
    df = pd.DataFrame(
        {
            "user": [f"u{x}" for x in rng.integers(0, 700, n)],
            "item": [f"i{x:03d}" for x in items],
            "rating": rng.integers(1, 6, n).astype(np.float32),
            "plays": rng.poisson(1.5, n).astype(np.float32),
        }
    )
    return df.drop_duplicates(["user", "item"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def catalogue():
    """The public item vocabulary (ids given, so a private model may save them)."""
    return np.array([f"i{x:03d}" for x in range(N_ITEMS)])


@pytest.fixture(scope="module")
def parts(client, ratings, catalogue):
    return partition_interactions(ratings, n_partitions=4, client=client, items=catalogue)


@pytest.fixture(scope="module")
def plays(client, ratings, catalogue):
    return partition_interactions(ratings, rating_col="plays", n_partitions=4, client=client, items=catalogue)


# ---------------------------------------------------------------------- helpers


def _close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    scale = max(1.0, float(np.abs(b).max(initial=0.0)))
    err = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0))
    assert err <= REL_TOL * scale, f"{what}: max |diff| {err:.3g} > {REL_TOL:g} x {scale:.3g}"


def _ledger(model):
    return [(e.label, e.event) for e in model.ledger_.entries]


def _assert_same_release(dist, local):
    _close(dist.item_factors_, local.item_factors_, "item_factors_")
    if local.item_bias_ is None:
        assert dist.item_bias_ is None
    else:
        _close(dist.item_bias_, local.item_bias_, "item_bias_")
    assert abs(float(dist.global_mean_) - float(local.global_mean_)) <= 1e-12 * max(1.0, abs(float(local.global_mean_)))
    np.testing.assert_array_equal(dist.item_counts_, local.item_counts_)
    if local.item_exposure_ is None:  # the exposure term of ranking: from the same noisy Gramians
        assert dist.item_exposure_ is None
    else:
        _close(dist.item_exposure_, local.item_exposure_, "item_exposure_")
    assert _ledger(dist) == _ledger(local)
    assert [e.label for e in dist.ledger_.entries] == [e.label for e in local.ledger_.entries]
    assert dist.noise_scales_ == local.noise_scales_
    assert dist.privacy_report()["epsilon"] == local.privacy_report()["epsilon"]
    assert dist.config_ == local.config_
    np.testing.assert_array_equal(dist.trained_items_, local.trained_items_)
    assert dist.user_regularization_ == local.user_regularization_
    assert math.isclose(dist.user_reg_norm_, local.user_reg_norm_, rel_tol=1e-12)
    np.testing.assert_array_equal(dist.item_ids_, local.item_ids_)
    assert dist._item_ids_given == local._item_ids_given
    assert len(dist.fit_timings_["steps"]) == local.config_["iterations"]
    assert dist.user_factors_ is None and local.user_factors_ is not None


def crash_once(counter_dir, at_call, offset, items):
    """Leaf hook: the ``at_call``-th statistics task (over all workers) kills its worker process, once."""
    fd = os.open(os.path.join(counter_dir, "calls"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, b".")
    finally:
        os.close(fd)
    crashed = os.path.join(counter_dir, "crashed")
    if os.path.getsize(os.path.join(counter_dir, "calls")) >= at_call and not os.path.exists(crashed):
        with open(crashed, "w") as fh:
            fh.write(str(os.getpid()))
        os._exit(1)


# ---------------------------------------------------------------------- equality with the local fit

CASES = {
    "ada-dpals explicit centered biases": dict(
        method="ada-dpals", epsilon=5.0, rating_range=(1, 5), factors=6, iterations=3, random_state=11
    ),
    "dpals-uniform": dict(method="dpals-uniform", epsilon=3.0, factors=4, iterations=2, budget=20, random_state=12),
    "dpals-tail with gravity": dict(
        method="dpals-tail", epsilon=8.0, factors=4, iterations=2, budget=15, unobserved_weight=0.2, random_state=13
    ),
    "implicit, gravity, head": dict(
        method="ada-dpals",
        epsilon=5.0,
        feedback="implicit",
        unobserved_weight=0.5,
        item_frac=0.5,
        factors=6,
        iterations=3,
        random_state=14,
    ),
    "ada-dpsgd (noisy GD) explicit biases": dict(
        method="ada-dpsgd", epsilon=5.0, rating_range=(1, 5), factors=4, iterations=2, gd_iterations=3, random_state=16
    ),
    "dpsgd-uniform with gravity": dict(
        method="dpsgd-uniform", epsilon=4.0, factors=4, iterations=2, budget=20, unobserved_weight=0.2, random_state=17
    ),
    "bias model (empirical-Bayes posterior)": dict(
        method="ada-dpals", epsilon=5.0, rating_range=(1, 5), factors=0, random_state=18
    ),
    "epsilon inf": dict(
        method="ada-dpals", epsilon=math.inf, factors=6, iterations=4, reg_exponent=1.0, random_state=15
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fit_equals_local_fit(client, parts, plays, case):
    params = {"axes": "warn", **CASES[case]}  # the declared-axes fit (released axes: test_axes_release_dask)
    data = plays if params.get("feedback") == "implicit" else parts
    dist = fit(DPALS(**params), data, client=client)
    local = DPALS(**params).fit(data.to_local(), show_progress=False)
    _assert_same_release(dist, local)
    assert local._item_ids_given  # the given catalogue survives to_local (fingerprinted)


def test_spectral_ridges_are_set_on_the_driver_as_in_the_local_fit(client, plays, monkeypatch):
    """The implicit rank's ridges from the released counts (tuning.spectral_ridge) are the same on
    Dask: forced here on data too small for the rule's head-restricted tier."""
    import privrec.models.dpals_config as dpals_module

    real = dpals_module.auto_config

    def spectral(*args, **kwargs):
        return {**real(*args, **kwargs), "reg_rule": "spectral"}

    monkeypatch.setattr(dpals_module, "auto_config", spectral)
    params = dict(method="ada-dpals", epsilon=5.0, feedback="implicit", factors=6, iterations=2, random_state=18)
    params["axes"] = "warn"
    dist = fit(DPALS(**params), plays, client=client)
    local = DPALS(**params).fit(plays.to_local(), show_progress=False)
    assert local.config_["reg_rule"] == "spectral" and local.config_["reg"] == local.config_["user_reg"] != 30.0
    assert dist.config_["reg"] == local.config_["reg"]
    _assert_same_release(dist, local)


def test_als_equals_cholesky_als(client, parts):
    params = dict(factors=5, iterations=4, regularization=5.0, reg_exponent=0.5, unobserved_weight=0.1, random_state=3)
    with pytest.warns(UserWarning, match="exact"):
        dist = fit(ALS(**params), parts, client=client)  # solver="cg" (default) -> exact solves, said once
    local = ALS(solver="cholesky", **params).fit(parts.to_local(), show_progress=False)
    _close(dist.item_factors_, local.item_factors_, "item_factors_")
    _close(dist.item_bias_, local.item_bias_, "item_bias_")
    assert float(dist.global_mean_) == pytest.approx(float(local.global_mean_), rel=1e-12)
    assert float(dist.user_reg_norm_) == pytest.approx(float(local.user_reg_norm_), rel=1e-12)
    assert float(dist.item_reg_norm_) == pytest.approx(float(local.item_reg_norm_), rel=1e-12)
    assert dist.user_factors_ is None
    # users are projected from their own rows (billboard) with the fitted ridge
    rows = parts.to_local().matrix[:5]
    _close(dist.transform(rows), local.transform(rows), "projected users")


# ---------------------------------------------------------------------- faults, schedules, executors


def test_killed_worker_gives_identical_fit(client, parts, tmp_path, monkeypatch):
    params = dict(method="ada-dpals", epsilon=4.0, factors=4, iterations=3, unobserved_weight=0.1, random_state=21)
    ref = fit(DPALS(**params), parts, client=client)
    # 4 partitions x 1 item block = 4 leaves per step: the 6th statistics task is in step 2, after
    # the partitions' persisted state was built (a worker's state is lost and rebuilt from lineage)
    hook = functools.partial(crash_once, str(tmp_path), 6)
    out = fit(DPALS(**params), parts, client=client, _leaf_hook=hook)
    assert (tmp_path / "crashed").exists()  # a worker process really died
    client.wait_for_workers(2, timeout=180)  # a restarted worker re-imports under the suite's load
    assert out.item_factors_.tobytes() == ref.item_factors_.tobytes()
    assert out.item_bias_.tobytes() == ref.item_bias_.tobytes()
    assert _ledger(out) == _ledger(ref)
    # the same tasks in-process, and another schedule (one block in flight): the same bits
    serial_parts = partition_interactions(parts.to_local().to_pandas().rename(
        columns={"user_id": "user", "item_id": "item", "value": "rating"}
    ), n_partitions=4, client=SerialClient(), items=parts.item_ids)  # fmt: skip
    serial = fit(DPALS(**params), serial_parts, client=SerialClient())
    assert serial.item_factors_.tobytes() == ref.item_factors_.tobytes()
    # large item factors are scattered to every worker instead of travelling as a task argument
    monkeypatch.setattr(sys.modules["privrec.distributed.fit"], "_INLINE_BYTES", 0)
    again = fit(DPALS(**params), parts, client=client, max_in_flight=1, block_tasks=256)
    assert again.item_factors_.tobytes() == ref.item_factors_.tobytes()  # one block either way (240 items)


# ---------------------------------------------------------------------- private use, errors


def test_os_entropy_fit_recommends_and_saves(client, ratings, catalogue, tmp_path):
    model = fit(
        DPALS(epsilon=2.0, rating_range=(1, 5), factors=4, iterations=2),
        ratings,
        client=client,
        n_partitions=3,
        items=catalogue,
    )
    assert model.random_state is None and np.all(np.isfinite(model.item_factors_))
    assert model.privacy_report()["epsilon"] <= 2.0 + 1e-9
    history = ratings[ratings.user == ratings.user.iloc[0]]
    ids, scores = model.recommend_ids(ratings.user.iloc[0], history, N=5)
    assert len(ids) == 5 and not set(ids) & set(history.item) and np.all(np.diff(scores) <= 0)
    path = tmp_path / "dist.npz"
    model.save(path)  # item ids are the given catalogue: saved with the private model
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.item_factors_, model.item_factors_)
    ids2, _ = loaded.recommend_ids(ratings.user.iloc[0], history, N=5)
    np.testing.assert_array_equal(ids2, ids)


def test_unsupported_and_rejected_inputs(ratings):
    serial = SerialClient()
    with pytest.raises(TypeError, match="DPALS or an ALS"):
        fit(object(), ratings, client=serial)
    with pytest.raises(ValueError, match="block_tasks"):
        fit(DPALS(), ratings, client=serial, block_tasks=300)
    small = ratings.iloc[:2000]
    with pytest.raises(ValueError, match="outside the declared rating_range"):
        fit(DPALS(rating_range=(2, 5), random_state=0), small, client=serial, n_partitions=2)
    negative = small.assign(plays=small.plays - 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        fit(DPALS(feedback="implicit", random_state=0), negative, client=serial, rating_col="plays")
    with pytest.raises(ValueError, match="duplicate"):
        fit(DPALS(random_state=0), pd.concat([small, small.iloc[:3]]), client=serial)
    parts = partition_interactions(small, n_partitions=2, client=serial)
    with pytest.raises(ValueError, match="n_partitions"):
        fit(DPALS(random_state=0), parts, client=serial, n_partitions=3)


def test_import_does_not_import_dask():
    import subprocess

    code = "import sys, privrec.distributed as d; assert callable(d.fit); print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_default_partitioning_depends_on_the_cluster_not_on_the_data(client, ratings, catalogue, monkeypatch):
    """Without n_partitions the fit partitions into 4 x the cluster's worker threads (public), never
    into a count derived from the (private) number of ratings."""
    fit_module = sys.modules["privrec.distributed.fit"]  # the package attribute `fit` is the function
    seen = []
    real = fit_module.partition_interactions

    def spy(*args, **kwargs):
        parts = real(*args, **kwargs)
        seen.append(parts.n_partitions)
        return parts

    monkeypatch.setattr(fit_module, "partition_interactions", spy)
    threads = sum(client.nthreads().values())
    for data in (ratings, ratings.iloc[: len(ratings) // 2]):
        fit(DPALS(epsilon=2.0, rating_range=(1, 5), factors=2, iterations=1), data, client=client, items=catalogue)
    assert seen == [4 * threads, 4 * threads]
