"""``fit`` says what it takes (issues 40 and 41): its real signature, no hidden keyword, column
names where users expect them, and the input conversion as an explicit first step."""

import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

from privrec.models import DPALS


@pytest.fixture
def frame():
    rng = np.random.default_rng(0)
    users = rng.integers(0, 40, 400)
    items = rng.integers(0, 15, 400)
    df = pd.DataFrame({"user_id": users + 100, "movie": [f"m{i}" for i in items], "stars": rng.integers(1, 6, 400)})
    return df.drop_duplicates(["user_id", "movie"])


def test_the_signature_is_the_real_one():
    params = inspect.signature(DPALS.fit).parameters
    for name in ("user_items", "show_progress", "callback", "items", "users", "strict_catalogue", "user_col",
                 "item_col", "rating_col"):  # fmt: skip
        assert name in params
    assert params["show_progress"].default is None
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def test_unknown_keywords_raise(frame):
    with pytest.raises(TypeError, match="unexpected keyword argument 'usercol'"):
        DPALS(epsilon=1.0).fit(frame, usercol="user_id")


def test_column_names_are_read_not_swallowed(frame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPALS(axes="warn", epsilon=1.0, factors=0, iterations=1, show_progress=False)
        model.fit(frame, user_col="user_id", item_col="movie", rating_col="stars")
    assert sorted(model.item_ids_) == sorted(frame["movie"].unique())
    assert sorted(model.user_ids_) == sorted(frame["user_id"].unique())
    with pytest.raises(ValueError, match="user_col='uid' is not a column"):
        DPALS(epsilon=1.0).fit(frame, user_col="uid", item_col="movie", rating_col="stars")
    with pytest.raises(TypeError, match="name the columns of a DataFrame input"):
        DPALS(epsilon=1.0).fit(frame.to_numpy(), user_col="user_id")
