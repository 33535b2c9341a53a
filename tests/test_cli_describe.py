"""privrec fit / evaluate / recommend / similar, issue 27: what was fitted (label, personal flag,
resolved configuration, --model-card), the implicit-feedback ALS yardstick (seeded), ids that must
match the model, and the papercuts (--rating-range, CLI wording of the library's advice)."""

import json

import numpy as np
import pandas as pd
import pytest

from privrec.cli import main
from privrec.models import load_model

SMALL = ["--scale", "0.2", "--quiet"]
HELDOUT = ["--protocol", "heldout-users", "--heldout-users", "60"]


def _json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def _fail(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    return rc, lines


@pytest.fixture
def ratings(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {"user": rng.integers(0, 300, 6000), "item": rng.integers(0, 50, 6000), "rating": rng.integers(1, 6, 6000)}
    ).drop_duplicates(["user", "item"])
    path = tmp_path / "r.csv"
    df.to_csv(path, index=False)
    other = df.assign(item=df["item"] + 1000)  # other ids, the same number of items
    other.to_csv(tmp_path / "other.csv", index=False)
    pd.Series(sorted(df["item"].unique())).to_csv(tmp_path / "items.txt", index=False, header=False)
    return tmp_path


def test_json_and_text_say_what_was_fitted(capsys):
    res = _json(capsys, ["fit", "--json", "--epsilon", "1", *SMALL])
    assert res["label"] == "ada-dpals (bias-only: factors=0)" and res["personal"] is False
    assert res["config"]["factors"] == 0 and res["config"]["epsilon"] == 1.0 and res["config"]["accountant"] == "pld"
    assert "n_users" not in res["config"]  # the exact sizes stay in "non_private"
    assert main(["fit", "--epsilon", "1", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "method    ada-dpals (bias-only: factors=0)" in out and "settings  epsilon=1, " in out
    assert "ada-dpals (bias-only: factors=0)   " in out  # the metrics table's row says so too
    res = _json(capsys, ["fit", "--json", "--factors", "2", "--iterations", "1", *SMALL])
    assert res["label"] == "ada-dpals" and res["personal"] is True and "leave-one-out" in res["personal_part"]


def test_model_card_is_written_with_the_yardsticks(tmp_path, capsys):
    card = tmp_path / "card.md"
    res = _json(capsys, ["fit", "--json", "--model-card", str(card), *SMALL])
    text = card.read_text()
    assert res["model_card"] == str(card) and text.startswith("# Model card: ada-dpals")
    assert "## Metrics" in text and "| ALS (explicit ratings) (non-private) |" in text and "trivial baseline" in text
    assert "synthetic-skew" in text and "## What is released" in text
    rc, lines = _fail(capsys, ["fit", "--model-card", str(tmp_path), *SMALL])  # a folder: refused before fitting
    assert rc == 2 and len(lines) == 1 and "--model-card" in lines[0]


def test_implicit_feedback_yardstick_is_confidence_weighted_and_seeded(tmp_path, capsys):
    res = _json(capsys, ["fit", "--json", *HELDOUT, *SMALL])
    als = res["non_private"]["baselines"]["als"]
    assert als["name"].startswith("ALS implicit") and als["config"]["feedback"] == "implicit"
    assert als["config"]["alpha"] == 3.0 and als["seed"] == 0
    # evaluate refits the yardstick with the public --seed: the same figures twice
    path = tmp_path / "m.npz"
    assert main(["fit", "--output", str(path), *SMALL]) == 0
    capsys.readouterr()
    runs = [_json(capsys, ["evaluate", "--model", str(path), "--json", *SMALL]) for _ in range(2)]
    first, second = (r["non_private"]["baselines"]["als"] for r in runs)
    assert first["metrics"] == second["metrics"] and first["seed"] == 0
    assert runs[0]["label"] == "ada-dpals (bias-only: factors=0)" and "config" in runs[0]


def test_recommend_and_similar_refuse_data_with_other_ids(ratings, capsys):
    m = ratings / "m.npz"
    fit = ["fit", "--ratings", str(ratings / "r.csv"), "--items", str(ratings / "items.txt"), "--factors", "2"]
    assert main([*fit, "--iterations", "1", "-o", str(m)]) == 0
    capsys.readouterr()
    for cmd, key in (("similar", ["--item", "1001"]), ("recommend", ["--user", "3"])):
        rc, lines = _fail(capsys, [cmd, "--model", str(m), "--ratings", str(ratings / "other.csv"), *key])
        assert rc == 2 and len(lines) == 1 and "does not match the model" in lines[0] and "'1000'" in lines[0]
    # the same ids in another order (the file's own vocabulary instead of the catalogue): refused, with the fix
    rc, lines = _fail(capsys, ["similar", "--model", str(m), "--ratings", str(ratings / "r.csv"), "--item", "1"])
    assert rc == 2 and "another order" in lines[0] and "--items" in lines[0]
    argv = ["similar", "--model", str(m), "--ratings", str(ratings / "r.csv"), "--items", str(ratings / "items.txt")]
    assert main([*argv, "--item", "1", "-n", "3"]) == 0


def test_a_model_keeps_the_item_ids_it_was_fitted_on(ratings, capsys):
    m = ratings / "m.npz"
    assert main(["fit", "--ratings", str(ratings / "r.csv"), "--factors", "2", "--iterations", "1", "-o", str(m)]) == 0
    capsys.readouterr()
    model = load_model(m)
    ids, _ = model.similar_items_ids(str(model.item_ids_[0]), N=3)  # ids, not row indices
    assert len(ids) == 3 and set(map(str, ids)) <= set(map(str, model.item_ids_))
    assert model.similar_items(0, N=3)[0].size == 3


def test_rating_range_flag_and_cli_wording(ratings, capsys):
    csv = str(ratings / "r.csv")
    res = _json(capsys, ["fit", "--ratings", csv, "--rating-range", "1", "5", "--json", "-q"])
    assert res["config"]["rating_range"] == [1.0, 5.0]
    assert res["non_private"]["relevance_threshold"] == 4.0  # the top quarter of the declared scale
    rc, lines = _fail(capsys, ["fit", "--ratings", csv, "--rating-range", "5", "1"])
    assert rc == 2 and "LOW < HIGH" in lines[0]
    rc, lines = _fail(capsys, ["fit", "--ratings", csv, "--rating-range", "1", "3"])
    assert rc == 2 and "outside the declared rating_range" in lines[0]
    # ratings beyond the default bound: the warning names the CLI flag
    wide = pd.read_csv(csv).assign(rating=lambda d: d["rating"] * 2)
    wide.to_csv(ratings / "wide.csv", index=False)
    assert main(["fit", "--ratings", str(ratings / "wide.csv"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "declare --rating-range LOW HIGH" in err and "rating_range=(low" not in err
    # duplicate rows: the error names --duplicates, not the Python keyword
    pd.concat([wide, wide.head(3)]).to_csv(ratings / "dup.csv", index=False)
    rc, lines = _fail(capsys, ["fit", "--ratings", str(ratings / "dup.csv"), "-q"])
    assert rc == 2 and "--duplicates sum" in lines[0] and "duplicates='sum'" not in lines[0]
