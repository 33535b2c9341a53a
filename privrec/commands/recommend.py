"""``privrec recommend`` / ``privrec similar``: query a saved model.

``recommend``: top-N items for one user of the dataset, projected from the user's own history (the
billboard model, no privacy cost). ``similar``: the items most similar to an item (cosine of the
saved item factors). Both print titles when the dataset has metadata, and check first that the
data has the model's items.
"""

from __future__ import annotations

import json

import numpy as np

from ..evaluation import experiment as X
from ._data import _check_data_args, _data_args, _load, _load_model
from ._parsers import _out_args, add_command
from ._running import CommandError, _run, _warn

RECOMMEND_DESCRIPTION = """\
Top-N items for one user of the dataset. The user's embedding is recomputed
from the saved item factors and the user's own history only, so recommending
costs no privacy. Items the user already has are not recommended.

Example:
  privrec recommend --model model.npz --dataset ml-100k --data-dir ~/data/ml-100k --user 42
"""

SIMILAR_DESCRIPTION = """\
The items most similar to an item (cosine similarity of the saved item factors).

Example:
  privrec similar --model model.npz --dataset ml-100k --data-dir ~/data/ml-100k --item 50
"""


def register(subparsers) -> None:
    """Add ``privrec recommend`` and ``privrec similar`` to the top-level ``privrec`` parser."""
    for name, key, helptext, desc, func in (
        ("recommend", "--user", "top-N items for one user of a dataset", RECOMMEND_DESCRIPTION, cmd_recommend),
        (
            "similar",
            "--item",
            "items most similar to an item (cosine of item factors)",
            SIMILAR_DESCRIPTION,
            cmd_similar,
        ),
    ):
        p = add_command(subparsers, name, helptext, desc)
        p.add_argument("--model", required=True, help="model file written by 'privrec fit --output'")
        p.add_argument(key, required=True, help=f"{key[2:]} id as in the dataset")
        p.add_argument("-n", "--n", dest="n", type=int, default=10, help="number of items (default 10)")
        _data_args(p, split=False)
        _out_args(p)
        p.set_defaults(func=func)


def _find(ids, wanted: str, what: str) -> int:
    ids = np.asarray(ids)
    hit = np.flatnonzero(ids.astype(str) == str(wanted))
    if hit.size == 0:
        raise CommandError(f"{what} {wanted!r} not found in the dataset")
    return int(hit[0])


def _titles(data, idx) -> list:
    meta = getattr(data, "item_metadata", None)
    if meta is None or "title" not in getattr(meta, "columns", ()):
        return [None] * len(idx)
    col = meta["title"]
    return [str(col.get(int(i), "")) if hasattr(col, "get") else str(col.iloc[int(i)]) for i in idx]


def _show_items(args, data, ids, scores, header: str) -> None:
    item_ids = np.asarray(getattr(data, "item_ids", np.arange(data.matrix.shape[1])))
    titles = _titles(data, ids)
    rows = [
        {"item": X.json_safe(item_ids[i]), "score": float(s), **({"title": t} if t else {})}
        for i, s, t in zip(ids, scores, titles)
    ]
    if args.json:
        print(json.dumps({"query": header, "items": rows}))
        return
    print(header)
    for r, row in enumerate(rows, 1):
        print(f"{r:>3}. {row['item']!s:<12} {row['score']:8.4f}  {row.get('title', '')}")


def _check_model_matches(model, data, name, args=None):
    """The data must have the model's items: the same number and, when the model file has item ids
    (every model privrec saves now, whether or not the fit declared ``--items``), the same ids in
    the same order (a file with other ids would map rows to the wrong items and titles). A model
    file without ids (a private model saved by an older privrec, its item axis from the data)
    cannot be checked beyond the count: a ``--ratings`` file then gets a warning."""
    n_model, n_data = model.item_factors_.shape[0], data.matrix.shape[1]
    if n_model != n_data:
        raise CommandError(
            f"model has {n_model} items but dataset {name} has {n_data}; pass the dataset the model was fitted on"
        )
    saved, ids = getattr(model, "item_ids_", None), getattr(data, "item_ids", None)
    if saved is not None and ids is not None:
        a, b = np.asarray(saved).astype(str).tolist(), np.asarray(ids).astype(str).tolist()
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if diff:
            i = diff[0]
            how = (
                "the same ids in another order (pass the --items catalogue the model was fitted with)"
                if sorted(a) == sorted(b)
                else f"{len(diff)} item ids differ"
            )
            raise CommandError(
                f"{name} does not match the model: both have {n_model} items, but {how}; row {i} is item "
                f"{a[i]!r} in the model and {b[i]!r} in {name}: pass the data the model was fitted on"
            )
    elif args is not None and args.ratings is not None and model._item_ids_dropped():
        _warn(
            args,
            f"cannot check that the items of {name} are the model's: the model was saved without item ids (by an older "
            "privrec, its item axis not a declared catalogue), so only the count was compared; a file with other ids "
            "gives wrong items. Refit and save it again to have them checked",
        )


def cmd_recommend(args) -> int:
    return _run("recommend", _recommend, args)


def _model_and_data(args):
    """Validate -n, load the saved model and the dataset it must match."""
    args._warnings = []
    if args.n < 1:
        raise CommandError(f"-n must be >= 1, got {args.n}")
    _check_data_args(args)
    model = _load_model(args.model)
    name, data = _load(args)
    data = _on_selected_items(model, data, name)
    _check_model_matches(model, data, name, args)
    return model, data


def _on_selected_items(model, data, name):
    """A model whose item axis was chosen by private selection (add/remove DP: ``privrec fit
    --ratings`` without ``--items``) holds a subset of the file's items: the data is narrowed to
    the model's items, in its order (ratings of other items are not part of any user's history
    the model can use); every model item must be in the data."""
    saved, ids = getattr(model, "item_ids_", None), getattr(data, "item_ids", None)
    if getattr(model, "_item_axis", None) != "selection" or saved is None or ids is None:
        return data
    from ._fitting import columns_of

    columns = columns_of(saved, ids)
    missing = np.asarray(saved)[columns < 0]
    if missing.size:
        raise CommandError(
            f"{missing.size} of the model's items (e.g. {str(missing[0])!r}) are not in {name}: pass the data the "
            "model was fitted on"
        )
    return data.subset_items(columns)


def _recommend(args) -> int:
    model, data = _model_and_data(args)
    u = _find(getattr(data, "user_ids", np.arange(data.matrix.shape[0])), args.user, "user")
    row = data.matrix[[u]]
    ids, scores = model.recommend(0, row, N=args.n, recalculate_user=True)
    header = f"top {len(ids)} for user {args.user} ({row.nnz} items in history)"
    _show_items(args, data, ids, scores, f"{header}; {_score_meaning(model)}")
    return 0


def _score_meaning(model) -> str:
    """What the printed scores are: the exposure ranking's score, or a predicted rating."""
    mode = getattr(model, "_ranking_mode", None)
    if mode is not None and mode() == "exposure":
        from ..models.exposure import score_description

        return score_description(0.5 * float((getattr(model, "config_", None) or {}).get("label_bound") or 2.0))
    return "score = predicted rating" if getattr(model, "feedback", "explicit") == "explicit" else "score = preference"


def cmd_similar(args) -> int:
    return _run("similar", _similar, args)


def _no_factors_message(model) -> str:
    """Why ``similar`` has nothing to compare on a model without item factors, in the CLI's words:
    what gives it factors and what that costs (issue 43)."""
    ask = "'privrec fit --factors 8' fits item embeddings"
    if not getattr(model, "_is_private", lambda: False)() or getattr(model, "factors", None) is not None:
        return f"this model has no item factors (factors = 0), so item similarity is undefined; {ask}"
    return (
        "this model has no item factors: the automatic configuration chose the private bias model (item biases "
        "and the popularity of the released counts) because, at this number of users and epsilon, the privacy "
        "noise would swamp item embeddings. It considers them from users x min(epsilon, 20) >= 60,000 for ratings "
        "(where a private selection on held-out ratings then decides) and >= 20,000 for implicit feedback, e.g. "
        f"12,000 users at --epsilon 5: more users, or a larger --epsilon, which weakens the guarantee. Or {ask} on "
        "request: no extra privacy cost, but the same epsilon is shared with them, so on data this small their "
        "nearest neighbours are mostly noise and the ratings and ranking can be worse than the bias model's"
    )


def _similar(args) -> int:
    model, data = _model_and_data(args)
    if np.asarray(model.item_factors_).shape[1] == 0:
        raise CommandError(_no_factors_message(model))
    i = _find(getattr(data, "item_ids", np.arange(data.matrix.shape[1])), args.item, "item")
    ids, scores = model.similar_items(i, N=args.n + 1)
    keep = ids != i
    ids, scores = ids[keep][: args.n], scores[keep][: args.n]
    title = _titles(data, [i])[0]
    _show_items(args, data, ids, scores, f"items similar to {args.item}" + (f" ({title})" if title else ""))
    return 0
