"""Public item catalogues (issue 25, item 2): a private fit whose item axis comes from the data warns
(ItemCatalogueWarning) or, with strict_catalogue=True, refuses; fit(X, items=catalogue) declares the
catalogue; the saved model records whether its item axis was public (metadata ``item_axis``)."""

import io
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from privrec.data import from_pandas
from privrec.models import ALS, DPALS
from privrec.models._base import ItemCatalogueWarning, item_axis_source, with_item_catalogue

CATALOGUE = [f"item-{i:02d}" for i in range(12)]  # public: items 10 and 11 have no ratings below


def _frame(seed=0, n_users=30) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        for i in rng.choice(9, int(rng.integers(2, 6)), replace=False):
            rows.append((f"u{u}", f"item-{i:02d}", float(rng.integers(1, 6))))
    rows.append(("lonely", "item-09", 4.0))  # the only rater of item-09
    return pd.DataFrame(rows, columns=["user", "item", "rating"])


def _private() -> DPALS:
    return DPALS(axes="warn", epsilon=3.0, factors=2, iterations=1, budget=3, rating_range=(1, 5), random_state=0)


def _fit_quietly(model, X, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, show_progress=False, **kw)


def _no_catalogue_warning(model, X, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ItemCatalogueWarning)
        return model.fit(X, show_progress=False, **kw)


def test_private_fit_on_data_derived_items_warns():
    df = _frame()
    with pytest.warns(ItemCatalogueWarning, match="item axis taken from the data"):
        _private().fit(df, show_progress=False)
    with pytest.warns(ItemCatalogueWarning):
        _private().fit(from_pandas(df), show_progress=False)  # an Interactions read without item_ids


def test_declared_catalogue_and_non_private_fits_do_not_warn():
    df = _frame()
    for X, kw in (
        (df, {"items": CATALOGUE}),
        (from_pandas(df, item_ids=CATALOGUE), {}),
        (from_pandas(df), {"items": CATALOGUE}),  # re-indexed to the catalogue
    ):
        model = _no_catalogue_warning(_private(), X, **kw)
        assert model.item_factors_.shape[0] == len(CATALOGUE) and list(model.item_ids_) == CATALOGUE
        assert model._item_ids_given and model._item_axis == "catalogue"
    _no_catalogue_warning(ALS(factors=2, iterations=1), df)
    _no_catalogue_warning(DPALS(epsilon=math.inf, factors=2, iterations=1), df)
    # a bare matrix: its columns are the caller's (no warning; recorded as "matrix")
    R = from_pandas(df, item_ids=CATALOGUE).matrix
    assert _no_catalogue_warning(_private(), R)._item_axis == "matrix"


def test_strict_catalogue_refuses_every_undeclared_item_axis():
    df = _frame()
    for X in (df, from_pandas(df), from_pandas(df, item_ids=CATALOGUE).matrix):
        with pytest.raises(ValueError, match="strict_catalogue: .* needs a declared item catalogue"):
            _private().fit(X, show_progress=False, strict_catalogue=True)
    model = _no_catalogue_warning(_private(), df, items=CATALOGUE, strict_catalogue=True)
    assert model.item_factors_.shape == (len(CATALOGUE), 2)
    _no_catalogue_warning(ALS(factors=2, iterations=1), df, strict_catalogue=True)  # non-private: no guarantee


def test_with_a_catalogue_one_users_data_no_longer_changes_the_item_axis():
    df = _frame()
    without = df[df["user"] != "lonely"]
    shapes = [_fit_quietly(_private(), X).item_factors_.shape[0] for X in (df, without)]
    assert shapes[0] == shapes[1] + 1  # the issue: one row more with the user than without
    shapes = [_fit_quietly(_private(), X, items=CATALOGUE).item_factors_.shape[0] for X in (df, without)]
    assert shapes == [len(CATALOGUE)] * 2


def test_with_item_catalogue_checks_its_input():
    df = _frame()
    assert item_axis_source(df) == "data" and item_axis_source(from_pandas(df)) == "data"
    assert item_axis_source(with_item_catalogue(df, CATALOGUE)) == "catalogue"
    assert item_axis_source(sp.csr_matrix(np.eye(3))) == "matrix"
    with pytest.raises(ValueError, match="not in the declared item catalogue"):
        with_item_catalogue(from_pandas(df), CATALOGUE[:5])
    with pytest.raises(ValueError, match="repeated ids"):
        with_item_catalogue(df, CATALOGUE + CATALOGUE[:1])
    with pytest.raises(ValueError, match="non-empty"):
        with_item_catalogue(df, [])
    with pytest.raises(ValueError, match="matrix has 3 item columns"):
        with_item_catalogue(sp.csr_matrix(np.eye(3, dtype=np.float32)), CATALOGUE)
    inter = with_item_catalogue(sp.csr_matrix(np.eye(3, dtype=np.float32)), ["a", "b", "c"])
    assert list(inter.item_ids) == ["a", "b", "c"] and item_axis_source(inter) == "catalogue"
    # the ratings follow their items when an Interactions is re-indexed
    src = from_pandas(df)
    out = with_item_catalogue(src, CATALOGUE[::-1])
    a = src.to_pandas().sort_values(list(src.to_pandas().columns[:2])).reset_index(drop=True)
    b = out.to_pandas().sort_values(list(out.to_pandas().columns[:2])).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_fit_transform_with_a_catalogue():
    df = _frame()
    model = DPALS(epsilon=math.inf, factors=2, iterations=1, random_state=0)
    emb = model.fit_transform(df, items=CATALOGUE, show_progress=False)
    assert emb.shape == (df["user"].nunique(), 2) and model.item_factors_.shape[0] == len(CATALOGUE)


def _saved_meta(model) -> tuple[dict, io.BytesIO]:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(buf)
    buf.seek(0)
    with np.load(buf) as npz:
        meta = json.loads(str(npz["__meta__"]))
    buf.seek(0)
    return meta, buf


def test_the_saved_model_records_whether_its_item_axis_was_public():
    df = _frame()
    cases = {
        "catalogue": _fit_quietly(_private(), df, items=CATALOGUE),
        "data": _fit_quietly(_private(), df),
        "matrix": _fit_quietly(_private(), from_pandas(df).matrix),
    }
    for source, model in cases.items():
        meta, buf = _saved_meta(model)
        assert meta["item_axis"] == {"source": source, "public": source == "catalogue"}
        loaded = DPALS.load(buf)
        assert loaded._item_axis == source
        assert loaded._item_ids_given == (source == "catalogue")
        # the ids seen in training are saved whatever the source (issue 40); the file says whether they are public
        assert ("item_ids" in meta) == (source != "matrix")


def test_a_forged_item_axis_is_rejected(tmp_path):
    model = _fit_quietly(_private(), _frame())
    path = tmp_path / "m.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(path)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    arrays.pop("__sha256__")
    for forged in ({"source": "data", "public": True}, {"source": "elsewhere", "public": False}, "catalogue"):
        bad = tmp_path / "forged.npz"
        np.savez(bad, __meta__=np.array(json.dumps(dict(meta, item_axis=forged))), **arrays)
        with pytest.raises(ValueError, match="item_axis"):
            DPALS.load(bad)
