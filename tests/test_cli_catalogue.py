"""Issue 25: `privrec fit --items FILE / --users FILE` declare the public catalogue and roster."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from privrec.cli import main
from privrec.models import load_model


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    rows = [(u, i, int(rng.integers(1, 6))) for u in range(200) for i in rng.choice(40, 8, replace=False)]
    pd.DataFrame(rows, columns=["user", "item", "rating"]).to_csv(tmp_path / "r.csv", index=False)
    (tmp_path / "items.txt").write_text("\n".join(str(i) for i in range(45)) + "\n")
    (tmp_path / "users.txt").write_text("\n".join(str(u) for u in range(210)) + "\n")
    return tmp_path


def _fit(capsys, *argv) -> tuple[int, dict]:
    rc = main(["fit", "--quiet", "--json", *map(str, argv)])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_declared_catalogue_and_roster_shape_the_release_and_silence_the_warnings(files, capsys):
    out = files / "m.npz"
    rc, res = _fit(
        capsys,
        "--ratings",
        files / "r.csv",
        "--items",
        files / "items.txt",
        "--users",
        files / "users.txt",
        "--output",
        out,
    )
    assert rc == 0
    assert not [w for w in res["warnings"] if "--items" in w or "--users" in w]
    model = load_model(out)
    assert model.item_factors_.shape[0] == 45  # 5 catalogue items have no ratings and still get rows
    assert model._item_axis == "catalogue"
    np.testing.assert_array_equal(model.item_ids_, [str(i) for i in range(45)])  # CSV ids are text


def test_without_catalogue_and_roster_a_private_fit_releases_them(files, capsys):
    """Issue 42: nothing declared -> a noisy user count and a private item selection, add/remove DP,
    no warning; the released count and item number are in the (public) configuration."""
    out = files / "m.npz"
    rc, res = _fit(capsys, "--ratings", files / "r.csv", "--epsilon", "50", "--output", out)
    assert rc == 0
    assert not [w for w in res["warnings"] if "--items" in w or "--users" in w]
    assert "add/remove" in json.dumps(res["privacy_events"]) and "adding or removing one user" in res["privacy_summary"]
    assert res["config"]["n_users"] != 200 and 0 < res["config"]["n_items"] <= 40
    model = load_model(out)
    assert model._item_axis == "selection" and len(model.item_ids_) == res["config"]["n_items"]
    # too few users per item for a small epsilon: a one-line error saying what to declare
    assert main(["fit", "--quiet", "--ratings", str(files / "r.csv"), "--epsilon", "1"]) == 2
    assert "declare the item catalogue" in capsys.readouterr().err


def test_bad_catalogue_files_are_one_line_errors(files, capsys):
    (files / "dup.txt").write_text("1\n2\n2\n")
    assert main(["fit", "--quiet", "--ratings", str(files / "r.csv"), "--items", str(files / "dup.txt")]) == 2
    assert "line 3 repeats the id '2'" in capsys.readouterr().err
    assert main(["fit", "--quiet", "--ratings", str(files / "r.csv"), "--items", str(files / "none.txt")]) == 2
    assert "--items file not found" in capsys.readouterr().err
    (files / "few.txt").write_text("1\n2\n")
    assert main(["fit", "--quiet", "--ratings", str(files / "r.csv"), "--items", str(files / "few.txt")]) == 2
    assert "not in the given item vocabulary" in capsys.readouterr().err
