"""What ``privrec fit`` and ``privrec evaluate`` print and write about a result.

The plain-language privacy paragraph (:func:`privacy_paragraph`) and the warning about a large
delta; the text tables of the metrics next to the yardsticks and per popularity bucket; the
budget, data-size and timing lines; the JSON object; the per-bucket plot
(:func:`save_bucket_plot`) and the model card (:func:`write_model_card`).

Every figure computed from the exact data -- data sizes, evaluation metrics on held-out data, the
per-bucket tables, the non-private baselines, running times -- is not covered by the privacy
guarantee: the text output marks it ``[non-private]`` and ``--json`` keeps it in a separate
``"non_private"`` object (:func:`separate_non_private`), so that what may be published with the
release (the model, its privacy report, the budget) is never mixed with what may not.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

from .._io import atomic_path
from ..evaluation import experiment as X
from ..evaluation.metrics import ranking_k_note
from ..privacy import suggested_delta
from ._paths import _check_output_path
from ._running import CommandError
from ._yardsticks import TOP_K

_WIDTH = 100
#: the tag of every printed figure computed from the exact data
MARK = "[non-private]"
#: result keys computed from the exact data; ``--json`` puts them in the ``"non_private"`` object
NON_PRIVATE_KEYS = (
    "n_users",
    "n_items",
    "n_train",
    "fit_seconds",
    "eval_seconds",
    "relevance_threshold",
    "metrics",
    "sliced",
    "bucket_items",
    "baselines",
    "peak_memory_mb",
    "memory_estimate_mb",
)
NON_PRIVATE_NOTE = (
    "exact figures computed from the data (sizes, evaluation on the held-out data, per-bucket tables "
    "from exact counts, baselines fitted without noise, running times, peak memory); the privacy guarantee "
    "does not cover them: do not publish them with the release"
)


def peak_memory_mb() -> float:
    """This process's peak resident set size so far, in MiB (``getrusage(RUSAGE_SELF).ru_maxrss``:
    KiB on Linux, bytes on macOS); NaN where ``resource`` is unavailable (Windows)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return math.nan
    import sys

    peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024.0


def _ranking_k(metrics: dict | None) -> int:
    """The k of the ranking metrics in ``metrics`` (``recall@12`` -> 12; :data:`TOP_K` without one):
    :data:`TOP_K`, or the number of items of a smaller catalogue."""
    for key in metrics or {}:
        name, _, k = str(key).partition("@")
        if name == "recall" and k.isdigit():
            return int(k)
    return TOP_K


def _primary(protocol: str, metrics: dict | None = None) -> tuple[str, str, str]:
    """(overall metric, sliced metric, direction) of a protocol (``metrics``: the k of Recall@k)."""
    if protocol == "random":
        return "rmse", "rmse", "lower is better"
    return f"recall@{_ranking_k(metrics)}", "recall", "higher is better"


# ---------------------------------------------------------------------------------------- privacy text
def privacy_paragraph(
    report: dict | None, feedback: str = "explicit", noise_seed=None, width: int | None = _WIDTH
) -> str:
    """A plain-language summary of a privacy report (``model.privacy_report()``).

    What epsilon, delta and "user-level" mean for the release, which accountant computed epsilon,
    what is released and what is treated as public. ``report=None`` describes a non-private model.
    ``width=None`` returns one unwrapped line.
    """
    fill = (lambda text: textwrap.fill(text, width)) if width else (lambda text: text)
    if not report or not report.get("events"):
        return fill(
            "None: this is a non-private model. Its item factors are fitted on the exact data and can "
            "reveal individual users' ratings; use it as a reference, not as a release."
        )
    eps = _as_float(report.get("epsilon"))
    delta = _as_float(report.get("delta"))
    if not math.isfinite(eps):
        return fill(
            "None: epsilon is infinite (privacy switched off), so the released item factors carry no guarantee."
        )
    unit = "interactions" if feedback == "implicit" else "ratings"
    acc = str(report.get("accountant", "rdp")).lower()
    acc_name = {"pld": "PLD (privacy loss distribution)", "rdp": "RDP (Renyi differential privacy)"}.get(acc, acc)
    other_key, other_name = ("epsilon_rdp", "RDP") if acc == "pld" else ("epsilon_pld", "PLD")
    other = _as_float(report.get(other_key))
    target = _as_float(report.get("target_epsilon"))
    n_events = len(report.get("events", []))
    factor = math.exp(eps) if eps < 700 else math.inf
    parts = [
        f"This release is ({eps:.3g}, {delta:.3g})-differentially private at the user level.",
        f"User-level means the protected unit is everything one user contributed: removing all of one user's {unit} "
        f"changes the probability of any released item factors by at most a factor e^{eps:.3g} = {factor:.3g}, "
        f"except with probability delta = {delta:.3g}.",
        f"epsilon = {eps:.4g}"
        + (f" (target {target:g})" if math.isfinite(target) else "")
        + f" was computed by the {acc_name} accountant over the {n_events} recorded noise events of the fit"
        + (f" (the {other_name} accountant gives {other:.4g} for the same noise)." if math.isfinite(other) else "."),
        (
            "Covered by it: the item factors and the popularity prior (the noisy item counts divided by the number "
            "of users)."
            if feedback == "implicit"
            else "Covered by it: the item factors and item biases, and the intermediate noisy statistics listed in the "
            "report (item counts and, when centering, the global mean)."
        )
        + " User embeddings are never released: each user's embedding is recomputed from the released item side "
        "and that user's own history, at no privacy cost. " + _axes_sentence(report),
    ]
    if noise_seed is not None:
        parts.append(
            f"WARNING: --noise-seed {noise_seed} fixed the noise; anyone who knows the seed can regenerate "
            "and subtract it, so this run has no privacy guarantee (experiments only)."
        )
    return fill(" ".join(parts))


def _as_float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _delta_warning(delta: float, n_users: int, protocol: str, user_chose: bool) -> str | None:
    """Warning text when delta >= 1/n_users (``None`` otherwise)."""
    if delta is None or not n_users or delta < 1.0 / n_users:
        return None
    suggest = suggested_delta(n_users)
    text = (
        f"delta = {delta:.3g} is not smaller than 1/n_users = 1/{n_users:,} {MARK}: with delta >= 1/n a mechanism that "
        "publishes the full data of one randomly chosen user meets the definition."
    )
    if protocol == "heldout-users" and not user_chose:
        text += (
            " The held-out-users protocol uses delta = 1/n by the paper's convention (Krichene et al. 2023) "
            "so that results are comparable with it."
        )
    return text + f" For real use choose delta much smaller than 1/n_users, e.g. --delta {suggest:.0e}."


def _is_private_release(res: dict) -> bool:
    """Whether a result's model carries a guarantee (recorded events and a finite epsilon)."""
    return bool((res.get("privacy_events") or {}).get("events")) and math.isfinite(_as_float(res.get("epsilon_spent")))


# ---------------------------------------------------------------------------------------- printing
def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4f}"
    return str(v)


def _table(header, rows, indent="  ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return [line.rstrip() for line in lines]


def separate_non_private(res: dict) -> dict:
    """The result with every figure computed from the exact data moved to ``res["non_private"]``.

    What stays at the top level is what may accompany the release: the settings, the privacy report
    and summary, the budget, warnings and file names. ``non_private`` holds :data:`NON_PRIVATE_KEYS`
    and a ``note`` saying that the guarantee does not cover them.
    """
    out = {k: v for k, v in res.items() if k not in NON_PRIVATE_KEYS}
    out["non_private"] = {"note": NON_PRIVATE_NOTE, **{k: res[k] for k in NON_PRIVATE_KEYS if k in res}}
    used = _ranking_k(res.get("metrics"))
    if used < TOP_K:  # a catalogue of fewer than TOP_K items: ranked at k = n_items (ranking_k)
        out["non_private"]["ranking_k_note"] = ranking_k_note(TOP_K, res.get("n_items", used))
    if "peak_memory_mb" not in out["non_private"]:  # the run's peak so far: fit, evaluation and yardsticks
        out["non_private"]["peak_memory_mb"] = round(peak_memory_mb(), 1)
    return out


def _model_label(res: dict) -> tuple[str, str]:
    """(name, privacy) of the fitted model for the tables (the name says when the model is bias-only)."""
    name = str(res.get("label") or res.get("method", "model"))
    if res.get("method") == "als" or not res.get("privacy_events", {}).get("events"):
        return name, "non-private"
    if math.isinf(_as_float(res.get("epsilon_spent"))):  # epsilon = inf: events, but no guarantee
        return name, "non-private (eps inf)"
    return name, f"private, eps {_fmt_eps(res.get('epsilon_spent'))}"


def _fmt_setting(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_fmt_setting(x) for x in v) + ")"
    return str(v)


def _fmt_eps(v) -> str:
    f = _as_float(v)
    return f"{f:.3g}" if math.isfinite(f) else str(v)


#: order and table label of the baselines
_BASELINES = (
    ("private_popularity", ""),
    ("trivial", "trivial baseline: "),
    ("popularity", "trivial baseline: "),
    ("als", ""),
    ("als_ranking", ""),
)


def _rows(res: dict) -> list[tuple[str, str, dict, dict]]:
    """(name, privacy of the ranker, metrics, sliced) of the model and of each baseline present."""
    ev = res["non_private"]
    rows = [(*_model_label(res), ev["metrics"], ev["sliced"])]
    for key, prefix in _BASELINES:
        b = (ev.get("baselines") or {}).get(key)
        if b:
            privacy = "non-private"
            if b.get("private"):
                privacy = f"private, eps {_fmt_eps(res.get('epsilon_spent'))} (this release)"
            rows.append((prefix + b["name"], privacy, b["metrics"], b.get("sliced") or {}))
    return rows


def _metric_note(res: dict) -> str | None:
    """What the ranking metrics of explicit ratings count as relevant (``None`` without them)."""
    t = res["non_private"].get("relevance_threshold")
    if t is None:
        return None
    k = _ranking_k(res["non_private"].get("metrics"))
    return f"recall@{k}, ndcg@{k}: relevant = held-out ratings >= {t:g}, training items excluded"


def _print_comparison(res: dict) -> None:
    """Overall metric of the model next to the baselines, then the per-bucket table (all marked non-private)."""
    ev = res["non_private"]
    overall, sliced_key, direction = _primary(res["protocol"], ev["metrics"])
    base = ev.get("baselines") or {}
    rows = _rows(res)
    hidden = (overall, "n_users", "n_test", "ranking_users")
    other = [k for k in ev["metrics"] if k not in hidden]
    header = ["model", "privacy of the model", overall] + other
    table = [[name, priv, _fmt(m.get(overall))] + [_fmt(m.get(k)) for k in other] for name, priv, m, _ in rows]
    print(
        f"metrics   {MARK} {overall} ({direction}) on {ev['metrics'].get('n_users', '?')} test users, "
        "computed on the exact held-out data"
    )
    note = _metric_note(res)
    if note:
        print(f"          {note}")
    if ev.get("ranking_k_note"):
        print(f"          {ev['ranking_k_note']}")
    for line in _table(header, table):
        print(line)
    if base.get("als_skipped"):
        print(f"  (non-private ALS not fitted: {base['als_skipped']})")
    if (base.get("als") or {}).get("evaluation_sample"):
        print(f"  (non-private ALS: {base['als']['evaluation_sample']})")
    verdict = _verdict(res)
    if verdict:
        print(textwrap.fill(verdict, _WIDTH, initial_indent="  note: ", subsequent_indent="  "))
    sliced = ev["sliced"]
    keys = [k for k in sliced if k != "k"]
    nb = len(sliced[keys[0]]) if keys else 0
    short = {"trivial": "trivial", "als": "ALS"}
    extra = [(short[k], base[k]["sliced"].get(sliced_key)) for k in ("trivial", "als") if base.get(k)]
    header = ["bucket", "items"] + (["k"] if "k" in sliced else []) + keys + [f"{n} {sliced_key}" for n, _ in extra]
    table = []
    for b in range(nb):
        label = f"{b}" + (" (tail)" if b == 0 else " (head)" if b == nb - 1 else "")
        row = [label, str(ev["bucket_items"][b])] + ([str(sliced["k"][b])] if "k" in sliced else [])
        row += [_fmt(sliced[k][b]) for k in keys]
        row += [_fmt(vals[b]) if vals is not None else "" for _, vals in extra]
        table.append(row)
    print(f"{MARK} per-popularity bucket (0 = least popular items; buckets from exact training counts):")
    for line in _table(header, table):
        print(line)


def _verdict(res: dict) -> str | None:
    """A plain sentence when a private model does not beat the trivial baseline."""
    if _model_label(res)[1] == "non-private":
        return None
    ev = res["non_private"]
    triv = (ev.get("baselines") or {}).get("trivial")
    overall, _, _ = _primary(res["protocol"], ev["metrics"])
    if not triv:
        return None
    mine, ref = _as_float(ev["metrics"].get(overall)), _as_float(triv["metrics"].get(overall))
    if not (math.isfinite(mine) and math.isfinite(ref)):
        return None
    worse = mine > ref if overall == "rmse" else mine < ref
    if not worse:
        return None
    return (
        f"at this epsilon and data size the private model does not beat the trivial baseline ({overall} "
        f"{mine:.4f} vs {ref:.4f}); more users or a larger epsilon help, and the trivial model itself may be "
        "the better choice."
    )


def _print_budget(res: dict) -> None:
    b = res.get("budget")
    if not b:
        return
    n = b["releases"]
    print(
        f"budget    {b['file']}: lifetime eps {_fmt_eps(b['lifetime_epsilon'])} at delta "
        f"{_as_float(b['lifetime_delta']):g}; spent eps {_fmt_eps(b['spent_before'])} -> "
        f"{_fmt_eps(b['spent'])} (PLD over every event of {n} release{'s' if n != 1 else ''}); "
        f"remaining {_fmt_eps(b['remaining'])}; this fit recorded as {b['label']!r}"
    )


def _print_non_private(res: dict) -> None:
    """The footer: exact sizes and running times, and what the mark means."""
    ev = res["non_private"]
    unit = "interactions" if res["protocol"] == "heldout-users" else "ratings"
    if "n_users" in ev:
        print(
            f"{MARK} data     {ev['n_users']:,} users x {ev['n_items']:,} items, "
            f"{ev['n_train']:,} training {unit} (exact counts)"
        )
    spans = (("fit_seconds", "fit"), ("eval_seconds", "evaluation"))
    times = [f"{label} {ev[key]:.2f} s" for key, label in spans if key in ev]
    als = (ev.get("baselines") or {}).get("als")
    if als and "fit_seconds" in als:
        times.append(f"non-private ALS fit {als['fit_seconds']:.2f} s")
    if als and als.get("eval_seconds") is not None:
        times.append(f"its evaluation {als['eval_seconds']:.2f} s")
    peak = ev.get("peak_memory_mb")
    if peak is None:
        peak = peak_memory_mb()
    if math.isfinite(_as_float(peak)):
        estimated = ev.get("memory_estimate_mb")
        about = f" (estimated beforehand: {_as_float(estimated) / 1024:.2f} GB)" if estimated is not None else ""
        times.append(f"peak memory {_as_float(peak) / 1024:.2f} GB{about}")
    if times:
        print(f"{MARK} timings  " + ", ".join(times))
    print(
        textwrap.fill(
            f"{MARK} = an exact figure computed from the data (sizes, metrics on held-out data, bucket tables, "
            "baselines fitted without noise, running times, peak memory): the privacy guarantee does not cover it; do not "
            "publish it with the release.",
            _WIDTH,
            subsequent_indent="  ",
        )
    )


def _print_result(res: dict) -> None:
    print(f"dataset   {res.get('dataset')}  (protocol {res['protocol']})")
    label = res.get("label") or res["method"]
    print(f"method    {label}" + ("  (non-private reference)" if res["method"] == "als" else ""))
    if res.get("personal_part"):
        print(textwrap.fill(res["personal_part"], _WIDTH, initial_indent="personal  ", subsequent_indent="          "))
    if res.get("config"):
        settings = ", ".join(f"{k}={_fmt_setting(v)}" for k, v in res["config"].items())
        print(
            textwrap.fill(
                settings, _WIDTH, initial_indent="settings  ", subsequent_indent="          ", break_on_hyphens=False
            )
        )
    if "metrics" in res["non_private"]:
        _print_comparison(res)
    _print_budget(res)
    _print_privacy(res)
    _print_non_private(res)


def _print_evaluation(res: dict) -> None:
    """The text output of ``privrec evaluate``: the comparison, the privacy summary, the footer."""
    print(f"model     {res['model']} on {res['dataset']} ({res['protocol']} protocol)")
    _print_comparison(res)
    _print_privacy(res)
    _print_non_private(res)


def _print_privacy(res: dict) -> None:
    print("privacy")
    print(textwrap.fill(res["privacy_summary"], _WIDTH, initial_indent="  ", subsequent_indent="  "))


def _print_json(res: dict) -> None:
    """The ``--json`` output: the result as one JSON object on one line."""
    print(json.dumps(X.json_safe(res)))


# ---------------------------------------------------------------------------------------- plot
def _check_plot(path) -> None:
    """Fail before fitting when --plot cannot be written."""
    if path is None:
        return
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CommandError("--plot needs matplotlib: pip install 'privrec[plots]'") from None
    path = Path(path)
    ext = path.suffix.lower().lstrip(".")
    supported = Figure().canvas.get_supported_filetypes()
    if ext not in supported:
        raise CommandError(
            f"--plot {path.name}: unknown image type {path.suffix!r}; use one of "
            f"{', '.join('.' + e for e in sorted(supported))}"
        )
    if not path.parent.is_dir():
        raise CommandError(f"--plot: folder {path.parent} does not exist")
    _check_output_path(path, "--plot")


def save_bucket_plot(res: dict, path) -> str:
    """Grouped bar chart of the primary metric per popularity bucket: the model and its baselines."""
    from matplotlib.figure import Figure

    _, key, direction = _primary(res["protocol"])
    labelled = [(f"{name} ({priv})", sliced.get(key)) for name, priv, _, sliced in _rows(res)]
    series = [(label, vals) for label, vals in labelled if vals is not None]
    nb = len(series[0][1])
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    w = 0.8 / len(series)
    for j, (label, vals) in enumerate(series):
        ax.bar(
            [b + j * w for b in range(nb)], [math.nan if v is None else v for v in vals], w, label=label, color=f"C{j}"
        )
    ax.set_xticks([b + 0.4 - w / 2 for b in range(nb)])
    ax.set_xticklabels([f"{b}" + (" (tail)" if b == 0 else " (head)" if b == nb - 1 else "") for b in range(nb)])
    ax.set_xlabel("item popularity bucket (0 = least popular)")
    ax.set_ylabel(f"{key} ({direction})")
    ax.set_title(f"{res.get('dataset')}: {key} per popularity bucket (non-private: exact held-out data)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:  # atomic, and never over a device or through a replaced link
        fig.savefig(tmp, format=Path(path).suffix.lower().lstrip("."))
    return str(path)


# ---------------------------------------------------------------------------------------- model description and card
def _add_description(res: dict, model) -> None:
    """What was fitted (``model.describe()``): the label (``"ada-dpals (bias-only: factors=0)"`` for
    a model without a personal part), whether the model is personal and how users use that part,
    and the resolved configuration -- all public settings, so they stay beside the release. The
    data shape in the configuration is left to the ``non_private`` object (``n_users`` /
    ``n_items``), as everywhere in the CLI's output."""
    d = model.describe()
    res["label"] = d["label"]
    res["personal"] = bool(d["personal"])
    res["personal_part"] = d["personal_part"]
    res["config"] = {k: v for k, v in d["config"].items() if k not in ("n_users", "n_items")}
    axes = getattr(model, "axes_", None)
    if axes:  # undeclared axes were released under the ledger: their released sizes are part of the release
        if axes.get("roster") == "noisy count":
            res["config"]["n_users"] = d["config"].get("n_users")
        if axes.get("catalogue") == "private selection":
            res["config"]["n_items"] = d["config"].get("n_items")


def _axes_sentence(report: dict) -> str:
    """What the report treats as public about the users and items, by its relation."""
    relation = str(report.get("neighbouring_relation", ""))
    released = " ".join(report.get("released", []))
    if "add/remove" in relation:
        axis = (
            "the items are those chosen by a private selection (their ids are released under it)"
            if "private selection" in released
            else "the item catalogue was declared and is public"
        )
        if "noisy number of items" in released:
            axis += ", and the number of items somebody rated is released as a noisy count (it sizes the trained head)"
        return (
            "Nothing about the users is treated as public: the guarantee holds for adding or removing one user, "
            f"and their number is released as a noisy count; {axis}."
        )
    if "private selection" in released:
        return "The number of users (the declared roster) is treated as public; the items are chosen by a private selection."
    return "The numbers of users and items are treated as public."


def write_model_card(path, model, res: dict) -> str:
    """Write ``model.model_card`` with the metrics of the model and of its yardsticks (when evaluated)."""
    metrics = None
    if "metrics" in res.get("non_private", {}):
        hidden = ("n_users", "n_test", "ranking_users")
        metrics = {
            f"{name} ({privacy})": {k: v for k, v in m.items() if k not in hidden} for name, privacy, m, _ in _rows(res)
        }
    model.model_card(path, metrics=metrics, dataset=res.get("dataset"))
    return str(path)
