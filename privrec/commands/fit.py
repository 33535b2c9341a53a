"""``privrec fit``: fit a recommender, evaluate it and explain the result.

Load a dataset (default: the embedded generated ``synthetic-skew``; ``--ratings FILE`` for the
user's own CSV / Parquet file) -> split by protocol -> fit a method (non-private ALS or one of the
six private methods) -> evaluate -> print the metrics next to the yardsticks (the trivial
baseline, the popularity ranking of the fit's own released counts and, when cheap, non-private
ALS), a per-popularity-bucket table and a plain-language privacy summary with the epsilon computed
by the accountant (:mod:`privrec.commands.report`). Explicit ratings (random protocol) get
Recall@20 beside RMSE. ``--json`` prints one JSON object instead; ``--output`` saves the model;
``--plot`` draws the bucket table; ``--model-card`` writes a model card. ``--budget-file`` charges
the fit to a lifetime privacy budget (:class:`privrec.privacy.Budget`): checked before the fit,
recorded after it, refused (exit status 3) when it would exceed the lifetime epsilon. Every option
and output path is checked before any data is loaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..evaluation import experiment as X
from ..evaluation.memory import run_memory
from ..privacy.budget import Budget, BudgetExceededError
from ..privacy.ledger import check_pld_delta
from ._data import _check_data_args, _data_args, _load, _split
from ._fitting import _fit_model, command_model
from ._memory import check_command_memory, run_stages
from ._parsers import _out_args, add_command
from ._paths import _check_output_path
from ._running import CommandError, _progress_enabled, _run, _Stages, _warn
from ._yardsticks import _add_ranking, _baselines, _compare_args
from .report import (
    _add_description,
    _check_plot,
    _delta_warning,
    _fmt_eps,
    _is_private_release,
    _print_json,
    _print_result,
    privacy_paragraph,
    save_bucket_plot,
    separate_non_private,
    write_model_card,
)

# CLI flag -> estimator parameter name (passed only when given; unknown to a method -> error)
_MODEL_FLAGS = {
    "factors": "factors",
    "iterations": "iterations",
    "regularization": "regularization",
    "weight_exponent": "mu",
    "budget": "budget",
    "max_norm": "max_norm",
    "unobserved_weight": "unobserved_weight",
    "rating_range": "rating_range",
}
_FLAG_NAMES = {k: "--" + k.replace("_", "-") for k in _MODEL_FLAGS}
#: default target epsilon of the private methods
DEFAULT_EPSILON = 5.0
_ADAPTIVE = ("ada-dpals", "ada-dpsgd")


FIT_DESCRIPTION = """\
Fit a recommender, evaluate it on held-out data and explain the result.

By default privrec fits the private model ada-dpals at epsilon 5 on a small
generated dataset (synthetic-skew, no download). Use --dataset NAME for a known
dataset (see 'privrec datasets list') or --ratings FILE for your own CSV or
Parquet file with one row per (user, item, rating).

Every metric is printed next to its yardsticks: the trivial baseline (the
training global mean for rating prediction, the exact popularity ranking for
top-k; both non-private), the popularity ranking of the fit's own released noisy
counts (private, no extra cost) and non-private ALS, which is fitted when the
training data has fewer than 2,000,000 ratings or with --compare-als. A private
model is only worth its noise if it beats the trivial baseline. Explicit ratings
get Recall@20 beside RMSE: relevant = held-out ratings >= --relevance-threshold
(default: the top quarter of the rating scale, 4 on 1-5), training items excluded.

Figures computed from the exact data (sizes, metrics on held-out data, bucket
tables, non-private baselines, timings) are marked [non-private]: the guarantee
does not cover them. --json keeps them in a separate "non_private" object.

The privacy summary says what the guarantee means for this run: removing all of
one user's ratings changes the probability of any released item factors by at
most a factor e^epsilon, except with probability delta. User embeddings are never
released; each user recomputes their own from the item factors.

Refits of the same users spend from one lifetime budget: --budget-file FILE
records every fit's noise events and refuses (exit status 3, before fitting) a
fit that would take the lifetime epsilon, composed over all of them by the PLD
accountant, above its limit. A new file takes its lifetime from
--lifetime-epsilon and --lifetime-delta.

Examples:
  privrec fit
  privrec fit --epsilon 1 --output model.npz --plot buckets.png
  privrec fit --dataset ml-100k --data-dir ~/data/ml-100k --epsilon 1
  privrec fit --ratings ratings.csv --user-col user_id --item-col movie_id --rating-col stars
  privrec fit --epsilon 1 --budget-file budget.json --lifetime-epsilon 4 --lifetime-delta 1e-6
  privrec fit --method als --json
"""


def register(subparsers) -> None:
    """Add ``privrec fit`` to the top-level ``privrec`` parser."""
    p = add_command(subparsers, "fit", "fit a (private) model, evaluate it and explain the result", FIT_DESCRIPTION)
    _data_args(p)
    g = p.add_argument_group("model and privacy")
    g.add_argument(
        "--method",
        choices=X.METHODS,
        default="ada-dpals",
        help="model to fit (default: ada-dpals; 'als' is the non-private reference)",
    )
    g.add_argument(
        "--epsilon",
        type=float,
        default=None,
        help=f"target epsilon of a private method (default {DEFAULT_EPSILON:g}); smaller is more private",
    )
    g.add_argument(
        "--delta",
        type=float,
        default=None,
        help="target delta (default: 1e-5 for the random protocol, 1/n_users for held-out users, the "
        "papers' convention; choose delta much smaller than 1/n_users for real use)",
    )
    g.add_argument("--factors", type=int, help="embedding dimension (default: automatic for private methods)")
    g.add_argument("--iterations", type=int, help="ALS sweeps (default: automatic for private methods)")
    g.add_argument("--regularization", type=float, help="ridge strength")
    g.add_argument(
        "--weight-exponent",
        dest="weight_exponent",
        type=float,
        help="adaptive-weight exponent mu (ada-dpals and ada-dpsgd only)",
    )
    g.add_argument("--budget", type=float, help="per-user budget (items per user / sum of squared weights)")
    g.add_argument("--max-norm", dest="max_norm", type=float, help="clipping norm of user embeddings")
    g.add_argument(
        "--unobserved-weight",
        dest="unobserved_weight",
        type=float,
        help="weight of unobserved (user, item) pairs (gravity)",
    )
    g.add_argument(
        "--rating-range",
        dest="rating_range",
        nargs=2,
        type=float,
        metavar=("LOW", "HIGH"),
        default=None,
        help="the public scale of valid ratings, e.g. --rating-range 1 5 (from the data's documentation, "
        "never from the data): private methods reject ratings outside it and clip to it, and the "
        "relevance threshold of Recall@20 is the top quarter of it",
    )
    g.add_argument(
        "--noise-seed",
        dest="noise_seed",
        type=int,
        default=None,
        help="seed of the initialisation and the privacy noise, for reproducible experiments only: "
        "anyone who knows it can subtract the noise, so a known seed VOIDS the privacy "
        "guarantee (default: fresh randomness from the operating system)",
    )
    g = p.add_argument_group("output")
    g.add_argument("--output", "-o", help="save the fitted model to this file")
    g.add_argument(
        "--evaluate", action="store_true", help="evaluate on the held-out part (always done without --output)"
    )
    g.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="save a per-popularity-bucket bar chart (PNG, PDF or SVG by extension; needs matplotlib, "
        "the 'plots' extra)",
    )
    g.add_argument(
        "--model-card",
        dest="model_card",
        metavar="FILE",
        default=None,
        help="write a Markdown model card: data shape, neighbouring relation, epsilon / delta, accountant, "
        "the resolved settings, the metrics against the yardsticks (when evaluated; marked non-private) "
        "and what is released and what is not",
    )
    _compare_args(g)
    _out_args(g)
    g = p.add_argument_group("lifetime privacy budget (refits of the same users)")
    g.add_argument(
        "--budget-file",
        dest="budget_file",
        metavar="FILE",
        default=None,
        help="charge this fit to the lifetime privacy budget in FILE (JSON): refused before fitting when the "
        "composition of every recorded fit and this one would exceed the lifetime epsilon; recorded after it. "
        "Not the per-user --budget",
    )
    g.add_argument(
        "--lifetime-epsilon",
        dest="lifetime_epsilon",
        type=float,
        default=None,
        help="lifetime epsilon of a new --budget-file (an existing file keeps its own)",
    )
    g.add_argument(
        "--lifetime-delta",
        dest="lifetime_delta",
        type=float,
        default=None,
        help="lifetime delta of a new --budget-file; every lifetime epsilon is computed at it",
    )
    g.add_argument(
        "--budget-label",
        dest="budget_label",
        metavar="TEXT",
        default=None,
        help="label of this fit in the budget file (default: method, epsilon and dataset)",
    )
    p.add_argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="print the fit's plan -- the settings, whether the automatic selection runs (its candidates and "
        "shares), every privacy event it would record and the epsilon they compose to, and with --budget-file "
        "the lifetime spend it would bring -- then stop: nothing is fitted, released or charged",
    )
    p.set_defaults(func=cmd_fit)


def _noise_seed(args):
    """Seed of initialisation and privacy noise: None (OS entropy, the private default) unless given."""
    return getattr(args, "noise_seed", None)


def cmd_fit(args) -> int:
    return _run("fit", _fit, args)


def _check_fit_args(args) -> dict:
    """Validate options, warn about ignored ones; return the estimator parameters."""
    _check_data_args(args)
    private = args.method != "als"
    if args.epsilon is not None and not args.epsilon > 0:
        raise CommandError(f"--epsilon must be > 0, got {args.epsilon}")
    if args.delta is not None and not 0 < args.delta < 1:
        raise CommandError(f"--delta must be in (0, 1), got {args.delta}")
    if not private:
        if args.epsilon is not None:
            _warn(args, "ε (--epsilon) is ignored by the non-private method als")
        if args.delta is not None:
            _warn(args, "δ (--delta) is ignored by the non-private method als")
        for flag in ("weight_exponent", "budget", "max_norm"):
            if getattr(args, flag) is not None:
                raise CommandError(
                    f"{_FLAG_NAMES[flag]} ({_MODEL_FLAGS[flag]}) does not apply to the non-private "
                    "method als; it is a private-method option"
                )
    elif args.weight_exponent is not None and args.method not in _ADAPTIVE:
        _warn(
            args,
            f"--weight-exponent (mu) is ignored by {args.method}; only the adaptive methods "
            f"({', '.join(_ADAPTIVE)}) use it",
        )
    if args.compare_als and not private:
        _warn(args, "--compare-als is ignored: the fitted model is already non-private ALS")
    _check_budget_args(args, private)
    for flag in ("factors", "iterations"):
        v = getattr(args, flag)
        if v is not None and v < (0 if flag == "factors" and private else 1):
            raise CommandError(f"{_FLAG_NAMES[flag]} must be >= {0 if flag == 'factors' and private else 1}, got {v}")
    _check_output_path(args.output, "--output")
    _check_output_path(getattr(args, "model_card", None), "--model-card")
    _check_plot(args.plot)
    if args.rating_range is not None:
        lo, hi = args.rating_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise CommandError(f"--rating-range must be two finite numbers LOW < HIGH, got {lo:g} {hi:g}")
        args.rating_range = (float(lo), float(hi))
    return {_MODEL_FLAGS[k]: getattr(args, k) for k in _MODEL_FLAGS if getattr(args, k) is not None}


def _check_budget_args(args, private: bool) -> None:
    """The --budget-file options, checked before any data is loaded: a non-private fit cannot be
    charged, a new file needs its lifetime, an existing file is opened (and checked) and refused
    (exit status 3) when nothing is left."""
    given = [f for f in ("lifetime_epsilon", "lifetime_delta", "budget_label") if getattr(args, f) is not None]
    if args.budget_file is None:
        if given:
            flags = ", ".join("--" + f.replace("_", "-") for f in given)
            raise CommandError(f"{flags} only appl{'y' if len(given) > 1 else 'ies'} with --budget-file")
        return
    lifetime = [f for f in given if f != "budget_label"]
    if not private:
        raise CommandError(
            "--budget-file: als is non-private (epsilon = inf) and cannot be charged to a privacy budget"
        )
    if args.epsilon is not None and math.isinf(args.epsilon):
        raise CommandError("--budget-file: epsilon = inf is non-private and cannot be charged to a privacy budget")
    if _noise_seed(args) is not None:
        raise CommandError(
            "--budget-file with --noise-seed: a known noise seed voids the guarantee, so the fit cannot be "
            "charged to a privacy budget"
        )
    if args.lifetime_epsilon is not None and not (math.isfinite(args.lifetime_epsilon) and args.lifetime_epsilon > 0):
        raise CommandError(f"--lifetime-epsilon must be finite and > 0, got {args.lifetime_epsilon}")
    if args.lifetime_delta is not None:
        if not 0 < args.lifetime_delta < 1:
            raise CommandError(f"--lifetime-delta must be in (0, 1), got {args.lifetime_delta}")
        check_pld_delta(args.lifetime_delta, "--lifetime-delta")  # every lifetime epsilon is a PLD one
    path = Path(args.budget_file)
    if not path.exists():
        if len(lifetime) < 2:
            raise CommandError(
                f"budget file {path} does not exist; create it with --lifetime-epsilon and --lifetime-delta"
            )
        if not path.parent.is_dir():
            raise CommandError(f"--budget-file: folder {path.parent} does not exist")
        _check_output_path(path, "--budget-file")
        return
    budget = Budget.open_or_create(path, args.lifetime_epsilon, args.lifetime_delta)  # checks the file and lifetime
    args._budget = budget  # reused for the fit (the check proper runs under its lock then)
    if budget.remaining() <= 0:
        spent, eps = budget.spent(), budget.epsilon
        raise BudgetExceededError(
            f"privacy budget {path} is used up: spent epsilon {_fmt_eps(spent)} of its lifetime "
            f"{_fmt_eps(eps)} (delta {budget.delta:g}); nothing was loaded or fitted",
            path=path,
            lifetime_epsilon=eps,
            delta=budget.delta,
            spent=spent,
            total=spent,
            n_releases=len(budget.releases),
        )


def _save_model(args, split, model) -> None:
    """Write the fitted model to ``--output`` (called inside the budget charge, right after the fit:
    a spend is recorded only once its model is saved). The model was fitted on the split's matrix:
    say where its item axis came from (a declared catalogue, or the data) and give it the split's
    item ids, so that recommend / similar / export name the same items whether or not ``--items``
    was given; the file records whether they are public (a declared catalogue) or come from the
    data (which items have ratings: not covered by the guarantee)."""
    declared = args.ratings is not None and args.items is not None
    selected = (getattr(model, "axes_", None) or {}).get("catalogue") == "private selection"
    model._item_axis = "catalogue" if declared else ("selection" if selected else "data")
    if split.item_ids is not None and not selected:  # a private selection keeps the selected items' ids
        model.item_ids_, model._item_ids_given = np.asarray(split.item_ids), declared
    try:
        model.save(args.output)
    except (OSError, ValueError) as exc:
        charged = " and nothing was charged to --budget-file" if args.budget_file else ""
        raise CommandError(
            f"could not write the model to {args.output}: {exc}; the fitted model was discarded, nothing was "
            f"released{charged}"
        ) from None


def _dry_run(args, split, epsilon, delta, params, memory) -> int:
    """``--dry-run``: the plan of the fit (public inputs: settings and the training shape), and with
    ``--budget-file`` the lifetime spend it would bring; nothing is fitted, released or charged."""
    from .._io import json_safe

    model = X.make_model(args.method, epsilon, delta, params, _noise_seed(args), split.protocol)
    planner = getattr(model, "plan", None)
    if planner is None:
        out: dict = {"estimator": type(model).__name__, "kind": "fit", "private": False}
    else:
        from ._fitting import fit_input

        data = fit_input(split, model)
        plan = planner(data) if data is not split.train else planner(shape=tuple(split.train.shape))
        out = plan.as_dict()
        budget = getattr(args, "_budget", None)
        if budget is not None:
            out["budget"] = {
                "file": str(budget.path),
                "lifetime_epsilon": budget.epsilon,
                "spent": budget.spent(),
                "after_this_fit": budget.total_with(plan),
            }
    est = run_memory(memory)
    out["memory"] = {
        "estimated_peak_mb": round(est["peak_bytes"] / (1 << 20), 1),
        "peak_stage": est["peak_stage"],
        "limit_mb": round(est["limit_bytes"] / (1 << 20), 1),
        "within_limit": est["peak_bytes"] <= est["limit_bytes"],
        "stages_mb": {k: round(v / (1 << 20), 1) for k, v in est["stages"].items()},
    }
    if args.json:
        _print_json(json_safe(out))
        return 0
    print(
        f"plan      {out['estimator']} ({out['kind']}) on {out.get('n_users', '?')} users x {out.get('n_items', '?')} items"
    )
    if "target_epsilon" in out:
        print(
            f"privacy   target epsilon {out['target_epsilon']}, delta {out['delta']:g}; the planned events compose to "
            f"epsilon {out['planned_epsilon']:.4g} ({out['accountant']} accountant); sampling keyed on {out['keys']}"
        )
    if "selection" in out:
        for k, c in enumerate(out["candidates"]):
            print(f"candidate {k}: factors {c['factors']}, iterations {c['iterations']}, epsilon {c['epsilon']:.4g}")
        sel = out["selection"]
        print(
            f"selection holdout {sel['holdout']:g} of each user's ratings; score release share {sel['shares']['selection']:.3g} of rho"
        )
    events = out.get("events", [])
    if events:
        print(
            f"events    {len(events)}: "
            + "; ".join(e["label"] for e in events[:4])
            + ("; ..." if len(events) > 4 else "")
        )
    if "budget" in out:
        b = out["budget"]
        print(
            f"budget    {b['file']}: spent {b['spent']:.4g} of {b['lifetime_epsilon']:.4g}; after this fit "
            f"{b['after_this_fit']:.4g}"
        )
    mem = out["memory"]
    print(
        f"memory    about {mem['estimated_peak_mb'] / 1024:.3g} GB at its peak, in {mem['peak_stage']} (limit "
        f"{mem['limit_mb'] / 1024:.3g} GB{'' if mem['within_limit'] else ': the run would be refused'}; estimated "
        "from the exact data sizes)"
    )
    print("dry run   nothing was fitted, released or charged")
    return 0


def _budget_result(charged: dict) -> dict:
    """The ``budget`` entry of the result: lifetime, spend before and after this fit, its label."""
    budget, ticket = charged["budget"], charged["charge"]
    release = ticket.release
    eps = budget.epsilon
    return {
        "file": str(budget.path),
        "lifetime_epsilon": eps,
        "lifetime_delta": budget.delta,
        "accountant": "pld",
        "label": release.label,
        "spent_before": ticket.spent_before,
        "spent": release.spent_after,
        "remaining": max(0.0, eps - release.spent_after),
        "releases": ticket.releases_before + 1,
    }


def _fit(args) -> int:
    args._warnings = []
    params = _check_fit_args(args)
    private = args.method != "als"
    epsilon = (DEFAULT_EPSILON if args.epsilon is None else args.epsilon) if private else None
    evaluate = args.evaluate or not args.output or args.plot is not None
    stages = _Stages(
        ["load", "split", "fit"] + (["evaluate", "baselines"] if evaluate else []), _progress_enabled(args)
    )
    try:
        name, data = _load(args)
        stages.next()
        split = _split(args, data, name)
        stages.next()
        delta = args.delta
        if private:
            delta = X.default_delta(split) if delta is None else delta
            msg = _delta_warning(delta, split.train.shape[0], split.protocol, args.delta is not None)
            if msg:
                _warn(args, msg)
        if args.ratings is not None:  # undeclared axes are released privately (add/remove DP; _fitting.fit_input)
            split.info["axes"] = {"roster": args.users is not None, "catalogue": args.items is not None}
        model_delta = delta if private else None
        unfitted = command_model(split, args.method, epsilon, model_delta, params, _noise_seed(args))
        memory = run_stages(args, split, unfitted, params, args.method, evaluate)
        if getattr(args, "dry_run", False):
            stages.close()
            return _dry_run(args, split, epsilon, model_delta, params, memory)
        what = "privrec fit" + (" --evaluate" if evaluate else "")
        estimate = check_command_memory(memory, what)  # before the fit: a refused run spends and writes nothing
        charged = None
        if args.budget_file is not None:
            label = args.budget_label or f"privrec fit --method {args.method} --epsilon {epsilon:g} on {name}"
            budget = getattr(args, "_budget", None) or Budget.open_or_create(
                args.budget_file, args.lifetime_epsilon, args.lifetime_delta
            )
            charged = {"budget": budget, "label": label}
        fitted = _fit_model(
            split,
            args.method,
            epsilon,
            delta if private else None,
            params,
            _noise_seed(args),
            _progress_enabled(args),
            charged,
            after_fit=(lambda m: _save_model(args, split, m)) if args.output else None,
            model=unfitted,
        )
        from ._fitting import on_split_axis

        released = fitted[0]  # described and carded as released; evaluated on the split's item axis
        fitted = (on_split_axis(released, split), *fitted[1:])
        model, res = X.run_experiment(
            split,
            args.method,
            epsilon=epsilon,
            delta=delta if private else None,
            params=params,
            seed=_noise_seed(args),
            evaluate=evaluate,
            dataset=name,
            fitted=fitted,
        )
        stages.next()
        if evaluate:
            threshold = _add_ranking(res, model, split, args)
            stages.next()
            res["baselines"] = _baselines(
                args, split, name, args.method, params, model, _is_private_release(res), threshold
            )
            stages.next()
    finally:
        stages.close()
    if charged is not None:
        res["budget"] = _budget_result(charged)
    res["seed"] = args.seed
    res["noise_seed"] = _noise_seed(args)
    res["memory_estimate_mb"] = estimate["peak_mb"]
    feedback = getattr(model, "feedback", "explicit")
    report = res["privacy_events"] if private else None
    res["privacy_summary"] = privacy_paragraph(report, feedback, _noise_seed(args) if private else None, width=None)
    res["warnings"] = list(args._warnings)
    _add_description(res, released)
    if args.output:  # written right after the fit, before its spend was recorded (_save_model)
        res["output"] = str(args.output)
    res = separate_non_private(res)
    if args.plot is not None:
        res["plot"] = save_bucket_plot(res, args.plot)
    if getattr(args, "model_card", None):
        res["model_card"] = write_model_card(args.model_card, released, res)
    if args.json:
        _print_json(res)
    else:
        _print_result(res)
        if args.output:
            print(f"saved     {args.output}")
        if args.plot is not None:
            print(f"plot      {args.plot}")
        if getattr(args, "model_card", None):
            print(f"card      {args.model_card}")
    return 0
