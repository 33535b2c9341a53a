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


def _frame(n_users=60, n_items=15, seed=0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = [
        (f"u{u}", f"i{i}", float(rng.integers(1, 6)))
        for u in range(n_users)
        for i in rng.choice(n_items, 5, replace=False)
    ]
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


def test_private_fit_on_a_roster_from_the_data_warns_and_a_declared_roster_does_not():
    import warnings

    import pytest

    from privrec.models import UserRosterWarning

    df = _frame()
    items = [f"i{i}" for i in range(15)]
    with pytest.warns(UserRosterWarning, match="users=roster"):
        DPALS(epsilon=2.0, random_state=0, axes="warn").fit(df, items=items, show_progress=False)
    roster = [f"u{u}" for u in range(80)]  # 20 users on the roster have no ratings
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserRosterWarning)
        model = DPALS(epsilon=2.0, random_state=0, axes="warn").fit(df, users=roster, items=items, show_progress=False)
    assert model.user_factors_.shape[0] == 80
    # non-private fits take any axis
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserRosterWarning)
        DPALS(epsilon=float("inf"), factors=2, iterations=1).fit(df, items=items, show_progress=False)


def test_zero_out_neighbours_share_shape_events_and_prior_scale():
    """Under the stated relation (zero-out over a public roster) the user count is the same in
    both neighbours, so nothing that depends on it (configuration, number of events, the implicit
    prior's normaliser) tells them apart."""
    df = _frame(n_users=80)
    roster = sorted(df["user"].unique())
    items = [f"i{i}" for i in range(15)]
    without = df[df["user"] != roster[3]]  # all of one user's ratings zeroed out; the user stays listed
    a = DPALS(epsilon=1.0, feedback="implicit", random_state=0).fit(df, users=roster, items=items, show_progress=False)
    b = DPALS(epsilon=1.0, feedback="implicit", random_state=0).fit(
        without, users=roster, items=items, show_progress=False
    )
    assert a.config_ == b.config_
    assert [e.label for e in a.ledger_.entries] == [e.label for e in b.ledger_.entries]
    assert a.user_factors_.shape == b.user_factors_.shape
