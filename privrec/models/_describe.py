"""What was fitted, in words: ``model.describe()`` and ``model.model_card()`` (issue 27).

:func:`describe` returns a :class:`Description`: a plain, JSON-ready ``dict`` (the resolved
configuration ``config``, whether the model is *personal* -- it has a low-rank part, ``factors >
0`` -- and how each user uses that part, the data shape and the privacy guarantee in plain words,
from the privacy report's ``neighbouring_relation`` / ``public`` / ``released`` fields) whose
``str()`` is the printable text. :func:`model_card` renders the same facts, the metrics against the
yardsticks when given, and what is and is not released, as a Markdown model card.

Everything here is read from the fitted model and its privacy report: nothing touches data, so
describing a model costs no privacy. Metrics passed to the model card are computed from exact
held-out data; the card marks them as not covered by the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._io import json_safe

#: what a private DPALS release never contains (each user recomputes their own side for free)
NOT_RELEASED = (
    "user factors and user biases (each user recomputes their own from the released item side and "
    "their own history, at no privacy cost)",
    "the training users' ids (item ids are saved with the model: public when they are a declared catalogue; "
    "derived from the data, like the item axis they name, they are not covered by the guarantee)",
    "evaluation metrics, per-bucket tables and timings computed from the exact data",
    "the noise seed (a private model file never stores random_state)",
)


class Description(dict):
    """``model.describe()``: a dict of the fitted model's facts; ``str()`` / :attr:`text` print them."""

    @property
    def text(self) -> str:
        return describe_text(self)

    def __str__(self) -> str:
        return self.text


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
    return str(v)


def _e_to_the(eps: float) -> str:
    """``= e^eps`` in words: the number while it is printable (``= 148``), then its power of ten
    (``~ 10^434`` for eps = 999; ``exp`` overflows a float above eps ~ 709)."""
    if eps < 700:
        return f"= {math.exp(eps):.3g}"
    return f"~ 10^{eps / math.log(10):.4g} (a bound that protects nothing)"


def _md_text(value, limit: int = 200) -> str:
    """Text given by the caller (a dataset name, a metric or row name) made inert in Markdown: one
    line (every line break and run of whitespace becomes one space), at most ``limit``
    characters, and the characters that start Markdown or HTML constructs (code spans and fences,
    emphasis, links, HTML tags, headings; a table cell's ``|`` is escaped by :func:`_md_table`)
    escaped with a backslash."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in text)


_MD_SPECIAL = frozenset("\\`*_[]<>#~!")  # "|" is escaped by _md_table, in table cells


def _metric_cell(value, where: str) -> str:
    """A metric value in the card: a number (NaN, a metric that could not be computed, as
    ``n/a``), a string as inert text, a list of those in parentheses, ``None`` / missing as empty;
    anything else (a boolean, a dict, an object) is a one-line ``ValueError`` naming ``where``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return _md_text(value, 40)
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"model_card: metrics[{where}] must be a number, got a boolean")
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        return "n/a" if math.isnan(v) else _fmt(v)
    if isinstance(value, (list, tuple)):  # e.g. a confidence interval
        return "(" + ", ".join(_metric_cell(x, where) for x in value) + ")"
    raise ValueError(
        f"model_card: metrics[{where}] must be a number, a string or a list of those, got {type(value).__name__}"
    )


def _metric_rows(metrics: Mapping) -> dict[str, Mapping]:
    """``metrics`` as ``{row name: {metric: value}}``: a flat ``{metric: value}`` mapping is the one
    row ``"this model"``; a mix of both is a one-line ``ValueError``."""
    if not isinstance(metrics, Mapping):
        raise ValueError(
            f"model_card: metrics must be a mapping {{row name: {{metric: value}}}}, got {type(metrics).__name__}"
        )
    nested = [isinstance(v, Mapping) for v in metrics.values()]
    if all(nested):
        return dict(metrics)
    if not any(nested):
        return {"this model": metrics}
    raise ValueError(
        "model_card: metrics must be {row name: {metric: value}} (or one flat {metric: value} row), got a mix of both"
    )


def model_config(model) -> dict:
    """The resolved configuration of a fitted model (``config_``), JSON-ready."""
    cfg = getattr(model, "config_", None)
    if cfg is None and hasattr(model, "_resolved"):  # a loaded ALS: resolved again from its parameters
        cfg = model._resolved()
    if cfg is None:
        cfg = {k: v for k, v in model.get_params(deep=False).items() if k not in ("show_progress", "num_threads")}
    cfg = {k: np.dtype(v).name if isinstance(v, (type, np.dtype)) else v for k, v in cfg.items()}
    return json_safe(cfg)


def _factors(model) -> int:
    return int(np.asarray(model.item_factors_).shape[1])


def _n_users(model, cfg: dict) -> float | int | None:
    if cfg.get("n_users") is not None:
        n = float(cfg["n_users"])  # a noisy count (undeclared roster) is shown as released, not rounded to it
        return int(n) if n == int(n) else round(n, 1)
    uf = getattr(model, "user_factors_", None)
    return None if uf is None else int(np.asarray(uf).shape[0])


def model_label(model, cfg: dict | None = None) -> str:
    """Short name: the method, and what kind of model it is when that is not the usual one."""
    cfg = model_config(model) if cfg is None else cfg
    name = type(model).__name__
    factors = _factors(model)
    if name == "DPALS":
        label = str(model.method)
        if factors == 0:
            return f"{label} (bias-only: factors=0)"
        return label
    if name == "ALS":
        return "ALS (implicit feedback, Hu et al. 2008)" if cfg.get("feedback") == "implicit" else "ALS"
    return name


def _personal_part(model, cfg: dict) -> str:
    """How the personal (low-rank) part is used, in words."""
    factors = _factors(model)
    implicit = model._is_implicit_feedback()
    if factors == 0:
        if implicit:
            return (
                "none (factors = 0): items are ranked by the released popularity prior alone, the same for every user"
            )
        return (
            "none (factors = 0): the bias model; a prediction is the global mean + the item bias + the user's own bias"
        )
    if type(model).__name__ == "DPALS" and model._personal_mode() == "loo":
        return (
            f"yes ({factors} factors), chosen per user: exact leave-one-out on each user's own ratings picks one of "
            "two fits of the user's residuals, the joint ridge fit of the personal part and the user bias (ridge "
            "user_regularization) or the user bias alone (no personal part), so a user whose history the released "
            "factors do not predict falls back to the bias model (personal='loo')"
        )
    return f"yes ({factors} factors): every user's embedding is a ridge fit of their own history on the item factors"


def _selection_statement(sel: dict) -> str:
    """How a model chosen by :func:`privrec.tuning.select_private` was chosen and released."""
    cands = sel.get("candidates") or []
    chosen = int(sel.get("chosen", 0))
    shapes = [c.get("factors") for c in cands]
    eps_c = sel.get("epsilon_candidates") or []
    released = sel.get("released", "refitted on every rating")
    own = sel.get("epsilon_refit") if sel.get("refit", True) else (eps_c[chosen] if chosen < len(eps_c) else None)
    return (
        f"chosen by accounted private selection among {len(cands)} candidates (factors {shapes}): "
        f"candidate {chosen} (factors {shapes[chosen] if chosen < len(shapes) else '?'}), {released}. "
        + (f"Its settings show its own share, epsilon {_fmt(float(own))}; " if own is not None else "")
        + "the guarantee above covers the whole procedure (candidates, held-out scores"
        + (", refit)" if sel.get("refit", True) else ")")
    )


def _privacy(model) -> dict:
    """The privacy guarantee in plain words (and its numbers)."""
    report_fn = getattr(model, "privacy_report", None)
    report = report_fn() if report_fn is not None else None
    if not report or not report.get("events"):
        return {
            "private": False,
            "statement": (
                "none: a non-private model fitted on the exact data; its factors can reveal individual users' "
                "data, so use it as a reference, not as a release"
            ),
        }
    eps, delta = float(report.get("epsilon", math.inf)), float(report.get("delta", math.nan))
    out: dict[str, Any] = {
        "private": math.isfinite(eps),
        "epsilon": eps,
        "delta": delta,
        "target_epsilon": report.get("target_epsilon"),
        "accountant": str(report.get("accountant", "rdp")),
        "n_events": len(report.get("events", [])),
        "neighbouring_relation": report.get("neighbouring_relation"),
        "public": list(report.get("public") or []),
        "released": list(report.get("released") or []),
    }
    if not math.isfinite(eps):
        out["statement"] = (
            "none: epsilon is infinite (privacy switched off), so the released item side carries no guarantee"
        )
        return out
    unit = "interactions" if model._is_implicit_feedback() else "ratings"
    acc = {"pld": "PLD (privacy loss distribution)", "rdp": "RDP (Renyi DP)"}.get(out["accountant"], out["accountant"])
    target = out["target_epsilon"]
    out["statement"] = (
        f"({eps:.3g}, {delta:.3g})-differentially private at the user level: removing all of one user's {unit} "
        f"(see the neighbouring relation) changes the probability of any released output by at most a factor e^{eps:.3g} "
        f"{_e_to_the(eps)}, except with probability {delta:.3g}. epsilon was computed by the {acc} accountant over "
        f"the {out['n_events']} recorded noise events of the fit"
        + (f" (target {_fmt(float(target))})" if isinstance(target, (int, float)) else "")
        + "."
    )
    sel = getattr(model, "selection_", None)
    if sel:
        out["selection"] = _selection_statement(sel)
    if getattr(model, "random_state", None) is not None:
        out["seed_warning"] = (
            f"random_state={model.random_state!r} fixed the noise: anyone who knows the seed can regenerate and "
            "subtract it, so this fit has no guarantee for them (experiments only)"
        )
    return out


def describe(model) -> Description:
    """The facts of a fitted model (see the module docstring)."""
    model._check_fitted()
    cfg = model_config(model)
    factors = _factors(model)
    out = Description(
        model=type(model).__name__,
        label=model_label(model, cfg),
        method=str(getattr(model, "method", "als" if type(model).__name__ == "ALS" else "implicit-als")),
        feedback="implicit" if model._is_implicit_feedback() else "explicit",
        shape={"n_users": _n_users(model, cfg), "n_items": int(model.n_items_)},
        factors=factors,
        personal=factors > 0,
        personal_part=_personal_part(model, cfg),
        config=cfg,
        privacy=_privacy(model),
    )
    axis = getattr(model, "_item_axis", None)
    if axis is not None:
        out["item_axis"] = {"source": axis, "public": axis in ("catalogue", "selection")}
    return out


def describe_text(d: Mapping) -> str:
    """Printable text of a :func:`describe` dict."""
    shape = d["shape"]
    users = "?" if shape.get("n_users") is None else f"{shape['n_users']:,}"
    name = d["label"] if str(d["label"]).startswith(d["model"]) else f"{d['model']} {d['label']}"
    lines = [
        f"{name} -- {d['feedback']} feedback, {users} users x {shape['n_items']:,} items",
        f"personal:  {d['personal_part']}",
        f"privacy:   {d['privacy']['statement']}",
    ]
    p = d["privacy"]
    if p.get("neighbouring_relation"):
        lines.append(f"  relation: {p['neighbouring_relation']}")
    if p.get("public"):
        lines.append("  public:   " + "; ".join(p["public"]))
    if p.get("released"):
        lines.append("  released: " + ", ".join(p["released"]))
    if p.get("seed_warning"):
        lines.append(f"  WARNING:  {p['seed_warning']}")
    lines.append("settings:  " + ", ".join(f"{k}={_fmt(v)}" for k, v in d["config"].items()))
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; every cell on one line, its ``|`` escaped."""

    def cell(c) -> str:
        return " ".join(str(c).split()).replace("|", "\\|")

    head, body = [cell(c) for c in header], [[cell(c) for c in r] for r in rows]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]


def model_card(
    model, path=None, metrics: Mapping[str, Mapping[str, Any]] | None = None, dataset: str | None = None
) -> str:
    """Markdown model card of a fitted model; written atomically to ``path`` when given.

    ``metrics``: ``{row name: {metric: value}}``, e.g. the model and its yardsticks on the same
    held-out data (``{"this model": {...}, "ALS (non-private)": {...}}``), or one flat ``{metric:
    value}`` row (named ``"this model"``); the card marks them as exact figures that the guarantee
    does not cover. A NaN value is shown as ``n/a``; a value that is not a number, a string or a
    list of those is a one-line ``ValueError``. ``dataset``: a name for the data section. Names
    and text given here are made inert: one line, Markdown and HTML characters escaped (no
    headings, code fences or tags can be injected). Returns the Markdown text.
    """
    from .. import __version__

    d = describe(model)
    p = d["privacy"]
    shape = d["shape"]
    users = "unknown" if shape.get("n_users") is None else f"{shape['n_users']:,}"
    out = [f"# Model card: {d['label']}", "", f"Written by privrec {__version__} (`model.model_card()`).", ""]
    out += ["## Model", ""]
    out += [
        f"- class: `{d['model']}`, method: `{d['method']}`",
        f"- feedback: {d['feedback']}",
        f"- personal part: {d['personal_part']}",
        "",
    ]
    out += ["## Data", ""]
    if dataset:
        out.append(f"- dataset: {_md_text(dataset)}")
    noisy = isinstance(shape.get("n_users"), float)
    out.append(f"- shape: {users} users{' (a noisy count)' if noisy else ''} x {shape['n_items']:,} items")
    axis = d.get("item_axis")
    if axis:
        where = {
            "catalogue": "a declared public catalogue",
            "data": "the items that have ratings (derived from the data: not covered by the guarantee)",
            "matrix": "the columns of the given matrix",
            "selection": "the items chosen by a private item selection (released under the ledger)",
        }.get(axis["source"], str(axis["source"]))
        out.append(f"- item axis: {where}")
    out.append("")
    out += ["## Privacy", "", p["statement"], ""]
    if "epsilon" in p:
        out += [
            f"- epsilon: {_fmt(p['epsilon'])}"
            + (f" (target {_fmt(p['target_epsilon'])})" if p.get("target_epsilon") is not None else ""),
            f"- delta: {_fmt(p['delta'])}",
            f"- accountant: {p['accountant']} ({p['n_events']} recorded noise events)",
        ]
        if p.get("neighbouring_relation"):
            out.append(f"- neighbouring relation: {p['neighbouring_relation']}")
        if p.get("public"):
            out.append("- treated as public: " + "; ".join(p["public"]))
        if p.get("selection"):
            out.append(f"- model selection: {p['selection']}")
        if p.get("seed_warning"):
            out.append(f"- **warning**: {p['seed_warning']}")
        out.append("")
    out += ["## What is released", ""]
    if p.get("private"):
        out += ["Released (covered by the guarantee):", ""]
        out += [f"- `{r}`" for r in p.get("released") or []]
        out += ["", "Not released:", ""]
        out += [f"- {r}" for r in NOT_RELEASED]
    else:
        out.append(
            "Nothing is covered by a privacy guarantee: every array of this model is fitted on the exact data. "
            "Do not publish it as a private release."
        )
    out.append("")
    out += ["## Settings", "", "The resolved configuration (`config_`); every value is public.", ""]
    out += _md_table(["setting", "value"], [[f"`{k}`", _fmt(v)] for k, v in d["config"].items()])
    out.append("")
    rows_by_name = _metric_rows(metrics) if metrics is not None else {}
    if rows_by_name:
        names = list(rows_by_name)
        keys: list = []
        for row in rows_by_name.values():
            keys += [k for k in row if k not in keys]
        out += [
            "## Metrics",
            "",
            "Against the yardsticks, on the same held-out data. **Not private**: exact figures computed from the "
            "data, which the guarantee does not cover; do not publish them with the release.",
            "",
        ]
        rows = [
            [_md_text(n, 80)] + [_metric_cell(rows_by_name[n].get(k, ""), f"{n!r}][{k!r}") for k in keys] for n in names
        ]
        out += _md_table(["model"] + [_md_text(k, 40) for k in keys], rows)
        out.append("")
    text = "\n".join(out)
    if path is not None:
        from .._io import atomic_write_text

        atomic_write_text(path, text)
    return text
