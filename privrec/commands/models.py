"""``privrec fit | evaluate | recommend | similar`` (issue 5; spec 004 §6-§8).

* ``fit``: load (default: the embedded generated ``synthetic-skew``) -> split by protocol -> fit a
  method (non-private ALS or one of the six private methods) -> evaluate -> print metrics, a
  per-popularity-bucket table and the epsilon spent (from the accountant). ``--json`` prints one
  JSON object instead. ``--output`` saves the model (item factors + privacy report).
* ``evaluate``: evaluate a saved model on the same split (same ``--dataset``/``--protocol``/``--seed``).
* ``recommend`` / ``similar``: top-N items for a user (projected from their own history: the
  billboard model, no privacy cost) or the items most similar to an item, with titles when the
  dataset has metadata.

Errors print one line ``privrec <command>: error: ...`` to stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager

import numpy as np

from ..evaluation import experiment as X

# CLI flag -> estimator parameter name (passed only when given; unknown to a method -> error)
_MODEL_FLAGS = {
    "factors": "factors",
    "iterations": "iterations",
    "regularization": "regularization",
    "weight_exponent": "mu",
    "budget": "budget",
    "max_norm": "max_norm",
    "unobserved_weight": "unobserved_weight",
}


def register(subparsers) -> None:
    """Add the four model subcommands to the top-level ``privrec`` parser."""
    p = subparsers.add_parser("fit", help="fit a (private) model, optionally evaluate and save it",
                              description=__doc__.split("\n\n")[1].strip() if __doc__ else None)
    _data_args(p)
    p.add_argument("--method", choices=X.METHODS, default="ada-dpals",
                   help="model to fit (default: ada-dpals; 'als' is non-private)")
    p.add_argument("--epsilon", type=float, default=5.0, help="target epsilon for private methods (default 5)")
    p.add_argument("--delta", type=float, default=None,
                   help="target delta (default: 1e-5 for the random protocol, 1/n for held-out users)")
    p.add_argument("--factors", type=int, help="embedding dimension")
    p.add_argument("--iterations", type=int, help="ALS sweeps")
    p.add_argument("--regularization", type=float, help="ridge strength")
    p.add_argument("--weight-exponent", dest="weight_exponent", type=float,
                   help="adaptive-weight exponent mu (ada-* methods)")
    p.add_argument("--budget", type=float, help="per-user budget (items per user / sum of squared weights)")
    p.add_argument("--max-norm", dest="max_norm", type=float, help="clipping norm of user embeddings")
    p.add_argument("--unobserved-weight", dest="unobserved_weight", type=float, help="gravity alpha_0")
    p.add_argument("--noise-seed", dest="noise_seed", type=int, default=None,
                   help="seed of the initialisation and the privacy noise, for reproducible experiments only: "
                        "anyone who knows it can subtract the noise, so a known seed VOIDS the DP guarantee "
                        "(default: OS entropy)")
    p.add_argument("--output", "-o", help="save the fitted model to this file")
    p.add_argument("--evaluate", action="store_true",
                   help="evaluate on the held-out part (always done when no --output is given)")
    _out_args(p)
    p.set_defaults(func=cmd_fit)

    p = subparsers.add_parser("evaluate", help="evaluate a saved model on a dataset split")
    p.add_argument("--model", required=True, help="model file written by 'privrec fit --output'")
    _data_args(p)
    _out_args(p)
    p.set_defaults(func=cmd_evaluate)

    for name, key, helptext, func in (
        ("recommend", "--user", "top-N items for one user of a dataset", cmd_recommend),
        ("similar", "--item", "items most similar to an item (cosine of item factors)", cmd_similar),
    ):
        p = subparsers.add_parser(name, help=helptext)
        p.add_argument("--model", required=True, help="model file written by 'privrec fit --output'")
        p.add_argument(key, required=True, help=f"{key[2:]} id as in the dataset")
        p.add_argument("-n", "--n", dest="n", type=int, default=10, help="number of items (default 10)")
        _data_args(p, split=False)
        _out_args(p)
        p.set_defaults(func=func)


def _data_args(p, split: bool = True) -> None:
    p.add_argument("--dataset", default=None, help=f"dataset name (default: embedded {X.DEFAULT_DATASET})")
    p.add_argument("--data-dir", dest="data_dir", default=None, help="local folder holding the dataset files")
    p.add_argument("--scale", type=float, default=None, help="shrink a synthetic preset (e.g. 0.1)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the synthetic data and of the train/test split (public; default 0)")
    if split:
        p.add_argument("--protocol", choices=X.PROTOCOLS, default=None,
                       help="random (RMSE) or heldout-users (Recall@20); default: the dataset's paper protocol")
        p.add_argument("--heldout-users", dest="heldout_users", type=int, default=None,
                       help="number of held-out test users (heldout-users protocol)")


def _out_args(p) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")


# ---------------------------------------------------------------------------------------- helpers
class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


@contextmanager
def _errors(name: str):
    try:
        yield
    except (ValueError, FileNotFoundError, KeyError, OSError, CommandError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, KeyError):
            msg = f"not found: {msg}"
        raise _Exit(f"privrec {name}: error: {msg}") from None


class _Exit(Exception):
    pass


def _run(name, fn, args) -> int:
    try:
        with _errors(name):
            return fn(args)
    except _Exit as e:
        print(str(e), file=sys.stderr)
        return 2


class _Stages:
    """A tqdm bar over the named stages; off with --quiet, --json or when stderr is not a TTY."""

    def __init__(self, names, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(names), desc=names[0], leave=False, file=sys.stderr)
        self.names = list(names)
        self.i = 0

    def next(self):
        self.i += 1
        if self.bar is not None:
            self.bar.update(1)
            if self.i < len(self.names):
                self.bar.set_description(self.names[self.i])

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _progress_enabled(args) -> bool:
    return not (args.quiet or args.json) and sys.stderr.isatty()


def _noise_seed(args):
    """Seed of initialisation and privacy noise: None (OS entropy, the private default) unless given."""
    return getattr(args, "noise_seed", None)


def _load(args):
    name = args.dataset or X.DEFAULT_DATASET
    return name, X.load_data(name, args.data_dir, args.scale, seed=args.seed)


def _split(args, data, name):
    protocol = args.protocol or X.default_protocol(name)
    return X.make_split(data, protocol, seed=args.seed, heldout_users=args.heldout_users)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4f}"
    return str(v)


def _print_result(res: dict) -> None:
    print(f"dataset   {res.get('dataset')}  ({res['n_users']} users x {res['n_items']} items, "
          f"{res['n_train']} training interactions, protocol {res['protocol']})")
    print(f"method    {res['method']}")
    if res["method"] == "als":
        print("privacy   none (non-private reference)")
    else:
        print(f"privacy   target epsilon {res['epsilon']}, delta {res['delta']:.3g}; "
              f"epsilon spent (RDP accountant) {_fmt(res['epsilon_spent'])} over "
              f"{len(res['privacy_events'].get('events', []))} recorded events")
    print(f"fit       {res['fit_seconds']:.2f} s")
    if "metrics" in res:
        print("metrics   " + "  ".join(f"{k} {_fmt(v)}" for k, v in res["metrics"].items()))
        sliced = res["sliced"]
        keys = [k for k in sliced if k != "k"]
        nb = len(sliced[keys[0]]) if keys else 0
        header = ["bucket", "items"] + (["k"] if "k" in sliced else []) + keys
        rows = []
        for b in range(nb):
            label = f"{b}" + (" (tail)" if b == 0 else " (head)" if b == nb - 1 else "")
            row = [label, str(res["bucket_items"][b])] + ([str(sliced["k"][b])] if "k" in sliced else [])
            rows.append(row + [_fmt(sliced[k][b]) for k in keys])
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("per-popularity bucket (0 = least popular items):")
        print("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for r in rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))


# ---------------------------------------------------------------------------------------- commands
def cmd_fit(args) -> int:
    return _run("fit", _fit, args)


def _fit(args) -> int:
    if args.epsilon is not None and not args.epsilon > 0:
        raise CommandError(f"--epsilon must be > 0, got {args.epsilon}")
    if args.delta is not None and not 0 < args.delta < 1:
        raise CommandError(f"--delta must be in (0, 1), got {args.delta}")
    params = {_MODEL_FLAGS[k]: getattr(args, k) for k in _MODEL_FLAGS if getattr(args, k) is not None}
    evaluate = args.evaluate or not args.output
    stages = _Stages(["load", "split", "fit"] + (["evaluate"] if evaluate else []), _progress_enabled(args))
    try:
        name, data = _load(args)
        stages.next()
        split = _split(args, data, name)
        stages.next()
        model, res = X.run_experiment(split, args.method, epsilon=args.epsilon, delta=args.delta,
                                      params=params, seed=_noise_seed(args), evaluate=evaluate, dataset=name,
                                      show_progress=_progress_enabled(args))
        stages.next()
        if evaluate:
            stages.next()
    finally:
        stages.close()
    res["seed"] = args.seed
    res["noise_seed"] = _noise_seed(args)
    if args.output:
        model.save(args.output)
        res["output"] = str(args.output)
    if args.json:
        print(json.dumps(X.json_safe(res)))
    else:
        _print_result(res)
        if args.output:
            print(f"saved     {args.output}")
    return 0


def cmd_evaluate(args) -> int:
    return _run("evaluate", _evaluate, args)


def _load_model(path):
    from ..models import load_model

    return load_model(path)


def _evaluate(args) -> int:
    model = _load_model(args.model)
    name, data = _load(args)
    split = _split(args, data, name)
    if model.item_factors_.shape[0] != split.train.shape[1]:
        raise CommandError(f"model has {model.item_factors_.shape[0]} items but dataset {name} has "
                           f"{split.train.shape[1]}; evaluate on the dataset it was fitted on")
    ev = X.evaluate_split(model, split)
    res = {"dataset": name, "model": str(args.model), "protocol": split.protocol,
           **X.privacy_summary(model, None), **ev}
    if args.json:
        print(json.dumps(X.json_safe(res)))
    else:
        print(f"model     {args.model} on {name} ({split.protocol})")
        print(f"privacy   epsilon spent {_fmt(res['epsilon_spent'])}")
        print("metrics   " + "  ".join(f"{k} {_fmt(v)}" for k, v in ev["metrics"].items()))
        for k, vals in ev["sliced"].items():
            print(f"  {k:<22}" + "  ".join(_fmt(v) for v in vals))
    return 0


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
    rows = [{"item": X.json_safe(item_ids[i]), "score": float(s), **({"title": t} if t else {})}
            for i, s, t in zip(ids, scores, titles)]
    if args.json:
        print(json.dumps({"query": header, "items": rows}))
        return
    print(header)
    for r, row in enumerate(rows, 1):
        print(f"{r:>3}. {row['item']!s:<12} {row['score']:8.4f}  {row.get('title', '')}")


def _check_model_matches(model, data, name):
    if model.item_factors_.shape[0] != data.matrix.shape[1]:
        raise CommandError(f"model has {model.item_factors_.shape[0]} items but dataset {name} has "
                           f"{data.matrix.shape[1]}; pass the dataset the model was fitted on")


def cmd_recommend(args) -> int:
    return _run("recommend", _recommend, args)


def _model_and_data(args):
    """Validate -n, load the saved model and the dataset it must match."""
    if args.n < 1:
        raise CommandError(f"-n must be >= 1, got {args.n}")
    model = _load_model(args.model)
    name, data = _load(args)
    _check_model_matches(model, data, name)
    return model, data


def _recommend(args) -> int:
    model, data = _model_and_data(args)
    u = _find(getattr(data, "user_ids", np.arange(data.matrix.shape[0])), args.user, "user")
    row = data.matrix[[u]]
    ids, scores = model.recommend(0, row, N=args.n, recalculate_user=True)
    _show_items(args, data, ids, scores, f"top {len(ids)} for user {args.user} ({row.nnz} items in history)")
    return 0


def cmd_similar(args) -> int:
    return _run("similar", _similar, args)


def _similar(args) -> int:
    model, data = _model_and_data(args)
    i = _find(getattr(data, "item_ids", np.arange(data.matrix.shape[1])), args.item, "item")
    ids, scores = model.similar_items(i, N=args.n + 1)
    keep = ids != i
    ids, scores = ids[keep][: args.n], scores[keep][: args.n]
    title = _titles(data, [i])[0]
    _show_items(args, data, ids, scores, f"items similar to {args.item}" + (f" ({title})" if title else ""))
    return 0


def main(argv=None) -> int:
    """Stand-alone entry (tests / debugging) when ``privrec.cli`` is not available."""
    parser = argparse.ArgumentParser(prog="privrec")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)
