"""A localhost Flower deployment (issue 28): a SuperLink and SuperNodes as separate processes, `flwr run`
of examples/flower_app, and the released model equals the local DPALS.fit with the same seed.

Slow (about a minute and a half on 2 cores): every SuperNode starts a ClientApp process per message.
The launcher is benchmarks/bench_flower.py's ``deploy`` (the same commands as docs/federated-flower.md).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # before flwr is imported: no usage reports
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

pytest.importorskip("flwr", reason="Flower is optional (pip install 'privrec[flower]')")

from privrec.federated.flower import split_users
from privrec.models import DPALS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_flower  # noqa: E402


def ratings(n: int, m: int, seed: int):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    R = sp.random(n, m, density=0.08, random_state=seed, format="csr", data_rvs=lambda k: rng.integers(1, 6, k))
    return R.astype(np.float32)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flower-superlink", path=str(Path(sys.executable).parent)) is None, reason="no CLI")
def test_localhost_deployment_releases_the_local_answer(tmp_path):
    R = ratings(n=200, m=80, seed=2)
    settings = dict(epsilon=5.0, factors=4, iterations=2, random_state=3, rating_range=(1, 5))
    run_config = {"epsilon": 5.0, "factors": 4, "iterations": 2, "random-state": 3}
    out = bench_flower.deploy(split_users(R, 2), run_config, tmp_path, timeout=600)
    assert "privrec: DP-ALS released 80 items x 4 factors" in out["output"]
    assert out["commands"][0].startswith("flower-superlink --insecure")
    assert sum(c.startswith("flower-supernode") for c in out["commands"]) == 2
    local = DPALS(**settings).fit(R, show_progress=False)
    fed = DPALS.load(out["model_path"])
    scale = float(np.abs(local.item_factors_).max())
    np.testing.assert_allclose(fed.item_factors_, local.item_factors_, atol=1e-4 * scale, rtol=0)
    np.testing.assert_allclose(fed.item_bias_, local.item_bias_, atol=1e-4 * scale, rtol=0)
    report = out["report"]
    assert report["epsilon"] == local.privacy_report()["epsilon"]
    assert [e["label"] for e in report["events"]] == [e.label for e in local.ledger_.entries]
    rounds = report["federation"]["rounds"]
    assert [r["label"] for r in rounds] == ["roster", "item counts", "global mean", "ALS step 1", "ALS step 2"]
    assert all(r["answered"] == 2 and not r["missing"] for r in rounds)
    assert "secure aggregation" in report["federation"]["server_sees"]
