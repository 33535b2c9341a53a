"""model.describe() and model.model_card() (issue 27): the resolved configuration, whether the model is
personal, the guarantee in plain words from the privacy report's fields; the Markdown model card."""

import json
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.models import ALS, DPALS, ImplicitALS, NotFittedError, load_model
from privrec.models._describe import Description


def _ratings(n_users=300, n_items=40, seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < 0.3
    vals = rng.integers(1, 6, size=mask.shape).astype(np.float32)
    return sp.csr_matrix(np.where(mask, vals, 0.0).astype(np.float32))


@pytest.fixture(scope="module")
def bias_only():
    return DPALS(epsilon=1.0, delta=1e-5).fit(_ratings(), show_progress=False)


@pytest.fixture(scope="module")
def personal():
    return DPALS(epsilon=5.0, delta=1e-5, factors=3, iterations=2).fit(_ratings(), show_progress=False)


def test_bias_only_dpals_says_so(bias_only):
    d = bias_only.describe()
    assert isinstance(d, Description) and isinstance(d, dict)
    assert d["label"] == "ada-dpals (bias-only: factors=0)" and d["personal"] is False and d["factors"] == 0
    assert d["config"] == bias_only.config_
    assert d["shape"] == {"n_users": 300, "n_items": 40}
    json.dumps(d)  # a plain JSON-ready dict
    assert str(d) == d.text and d.text.startswith("DPALS ada-dpals (bias-only: factors=0)")


def test_privacy_in_plain_words_comes_from_the_report(bias_only):
    report = bias_only.privacy_report()
    p = bias_only.describe()["privacy"]
    assert p["private"] is True and p["accountant"] == report["accountant"] == "pld"
    assert math.isclose(p["epsilon"], report["epsilon"]) and p["delta"] == 1e-5
    assert p["neighbouring_relation"] == report["neighbouring_relation"]
    assert p["public"] == report["public"] and p["released"] == report["released"]
    assert p["n_events"] == len(report["events"])
    assert f"{report['epsilon']:.3g}" in p["statement"] and "user level" in p["statement"]
    assert "PLD" in p["statement"] and "seed_warning" not in p
    seeded = DPALS(epsilon=1.0, random_state=3).fit(_ratings(), show_progress=False).describe()
    assert "random_state=3" in seeded["privacy"]["seed_warning"] and "WARNING" in seeded.text


def test_personal_dpals_states_the_per_user_leave_one_out_choice(personal):
    d = personal.describe()
    assert d["personal"] is True and d["label"] == "ada-dpals" and d["config"]["factors"] == 3
    assert "chosen per user" in d["personal_part"] and "leave-one-out" in d["personal_part"]
    fixed = DPALS(epsilon=5.0, factors=3, iterations=1, personal="fixed").fit(_ratings(), show_progress=False)
    assert "leave-one-out" not in fixed.describe()["personal_part"]


def test_describe_survives_save_load_and_pickle(tmp_path, personal):
    personal.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    d, e = personal.describe(), back.describe()
    assert e["config"] == d["config"] and e["label"] == d["label"] and e["shape"] == d["shape"]
    assert e["privacy"]["statement"] == d["privacy"]["statement"]
    import pickle

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PrivateStateWarning: the training users' side is dropped
        again = pickle.loads(pickle.dumps(personal))
    assert again.describe()["shape"] == d["shape"]


def test_non_private_models_say_they_have_no_guarantee():
    R = _ratings(60, 20)
    for m in (
        ALS(factors=2, iterations=1).fit(R, show_progress=False),
        ALS(feedback="implicit", factors=2, iterations=1).fit(R, show_progress=False),
        ImplicitALS(factors=2, iterations=1).fit(R, show_progress=False),
        DPALS(epsilon=math.inf, factors=2, iterations=1).fit(R, show_progress=False),
    ):
        d = m.describe()
        assert d["privacy"]["private"] is False and d["privacy"]["statement"].startswith("none:")
        assert d["personal"] is True
    assert ALS(feedback="implicit", iterations=1).fit(R, show_progress=False).describe()["config"]["biases"] is False
    with pytest.raises(NotFittedError):
        ALS().describe()


def test_model_card_states_the_release(tmp_path, personal):
    path = tmp_path / "card.md"
    metrics = {"ada-dpals (private)": {"rmse": 0.91}, "ALS (non-private)": {"rmse": 0.88}}
    text = personal.model_card(path, metrics=metrics, dataset="ratings.csv")
    assert path.read_text() == text and text.startswith("# Model card: ada-dpals")
    for part in ("## Data", "## Privacy", "## What is released", "## Settings", "## Metrics"):
        assert part in text
    assert "300 users x 40 items" in text and "ratings.csv" in text
    assert personal.privacy_report()["neighbouring_relation"] in text and "accountant: pld" in text
    assert "- `item_factors_`" in text and "Not released" in text and "user factors" in text
    assert "| ALS (non-private) | 0.88 |" in text and "**Not private**" in text
    assert "| `factors` | 3 |" in text
    plain = ALS(factors=2, iterations=1).fit(_ratings(60, 20), show_progress=False).model_card()
    assert "Nothing is covered by a privacy guarantee" in plain and "## Metrics" not in plain
