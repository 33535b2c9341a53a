"""``privrec evaluate``: evaluate a saved model on the same split of the same data.

Pass the same data options and ``--seed`` as for the fit. The metrics are printed next to the
yardsticks (the trivial baseline and, when cheap, non-private ALS) with the model's privacy
summary (:mod:`privrec.commands.report`); ``--json`` prints one JSON object instead.
"""

from __future__ import annotations

from ..evaluation import experiment as X
from ._data import _check_data_args, _data_args, _load, _load_model, _split
from ._memory import check_command_memory, run_stages
from ._parsers import _out_args, add_command
from ._running import CommandError, _run
from ._yardsticks import _add_ranking, _baselines, _compare_args
from .report import (
    _add_description,
    _is_private_release,
    _print_evaluation,
    _print_json,
    privacy_paragraph,
    separate_non_private,
)

EVALUATE_DESCRIPTION = """\
Evaluate a model saved by 'privrec fit --output' on the same split of the same
data (pass the same data options and --seed as for the fit). Prints the metrics
next to the trivial baseline and, when cheap, non-private ALS, and the model's
privacy summary.

Example:
  privrec evaluate --model model.npz --dataset ml-100k --data-dir ~/data/ml-100k
"""


def register(subparsers) -> None:
    """Add ``privrec evaluate`` to the top-level ``privrec`` parser."""
    p = add_command(subparsers, "evaluate", "evaluate a saved model on a dataset split", EVALUATE_DESCRIPTION)
    p.add_argument("--model", required=True, help="model file written by 'privrec fit --output'")
    _data_args(p)
    g = p.add_argument_group("output")
    _compare_args(g)
    _out_args(g)
    p.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args) -> int:
    return _run("evaluate", _evaluate, args)


def _evaluate(args) -> int:
    args._warnings = []
    _check_data_args(args)
    model = _load_model(args.model)
    name, data = _load(args)
    split = _split(args, data, name)
    if model.item_factors_.shape[0] != split.train.shape[1]:
        raise CommandError(
            f"model has {model.item_factors_.shape[0]} items but dataset {name} has "
            f"{split.train.shape[1]}; evaluate on the dataset it was fitted on"
        )
    method = getattr(model, "method", None) if hasattr(model, "privacy_report") else "als"
    stages = run_stages(args, split, model, {}, method or type(model).__name__.lower(), True, fit=False)
    estimate = check_command_memory(stages, "privrec evaluate")  # before any ranking or yardstick fit
    ev = X.evaluate_split(model, split)
    res = {
        "dataset": name,
        "model": str(args.model),
        "method": method or type(model).__name__.lower(),
        "protocol": split.protocol,
        "n_users": int(split.train.shape[0]),
        "n_items": int(split.train.shape[1]),
        "n_train": int(split.train.nnz),
        **X.privacy_summary(model, None),
        **ev,
    }
    threshold = _add_ranking(res, model, split, args)
    res["baselines"] = _baselines(args, split, name, res["method"], {}, model, _is_private_release(res), threshold)
    report = res["privacy_events"] if res["privacy_events"].get("events") else None
    res["privacy_summary"] = privacy_paragraph(report, getattr(model, "feedback", "explicit"), width=None)
    res["memory_estimate_mb"] = estimate["peak_mb"]
    res["warnings"] = list(args._warnings)
    _add_description(res, model)
    res = separate_non_private(res)
    if args.json:
        _print_json(res)
    else:
        _print_evaluation(res)
    return 0
