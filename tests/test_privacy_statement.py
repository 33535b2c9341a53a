"""Issue 25: every DPALS report states its neighbouring relation and what it treats as public."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from privrec.models import DPALS
from privrec.privacy import epsilon_from_report


def test_report_states_relation_public_inputs_and_release(tmp_path):
    rng = np.random.default_rng(0)
    R = sp.random(200, 40, density=0.2, random_state=1, format="csr")
    R.data = rng.integers(1, 6, R.nnz).astype(float)
    model = DPALS(epsilon=2.0, random_state=0, rating_range=(1, 5)).fit(R, show_progress=False)
    report = model.privacy_report()
    assert "zero-out" in report["neighbouring_relation"]
    assert any("user roster" in p for p in report["public"])
    assert any("item catalogue" in p for p in report["public"])
    assert "item_factors_" in report["released"]
    assert epsilon_from_report(report, report["accountant"]) == report["epsilon"]
    # the statement survives a save / load
    path = tmp_path / "m.npz"
    model.save(path)
    loaded = DPALS.load(path).privacy_report()
    assert loaded["neighbouring_relation"] == report["neighbouring_relation"]
    assert loaded["public"] == report["public"]
