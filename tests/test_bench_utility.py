"""bench_utility --quick: structure, ledgers within their targets, and the default never worse than
the trivial baseline on the generated data (the product's yardstick, issue 17)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_utility as U  # noqa: E402


def test_quick_utility_outputs(tmp_path):
    assert U.main(["--quick", "--out", str(tmp_path), "--quiet"]) == 0
    saved = json.loads((tmp_path / "utility_quick.json").read_text())
    (res,) = saved["results"]
    assert res["metric"] == "rmse" and set(res["yardsticks"]) == {"trivial", "als"}
    models = {(c["epsilon"], c["model"]) for c in res["cells"]}
    assert models == {(e, m) for e in (1.0, 20.0) for m in ("default", "private-bias", "ref-dpals")}
    for c in res["cells"]:
        assert c["epsilon_spent"] <= c["epsilon"] * (1 + 1e-9) and len(c["values"]) == 2
        if c["model"] == "default":
            assert c["mean"] < res["yardsticks"]["trivial"]  # never worse than the global mean
    assert (tmp_path / "utility_quick.md").read_text().startswith("# Utility")
