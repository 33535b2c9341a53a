"""The text table and the plot of a :class:`privrec.evaluation.compare.Comparison` (what
``Comparison.format`` and ``Comparison.plot`` return): every figure computed from the exact data
is marked :data:`MARK`, as ``privrec fit`` marks it.

Reads a comparison's fields only (its rows' ``name``, ``privacy``, ``private``, ``note``,
``metrics``, ``mean`` and ``std``), so it imports nothing of the comparison itself.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

#: the mark of figures computed from the exact data (as ``privrec fit``)
MARK = "[non-private]"
#: width of the wrapped lines of the text table (as ``privrec fit``)
WIDTH = 100
#: metric direction: True when higher is better
_HIGHER_IS_BETTER = {"rmse": False}


def format_comparison(c: Any) -> str:
    """The comparison ``c`` as printable text (exact figures marked :data:`MARK`)."""
    head = [_metric_header(m) for m in c.metrics]
    cells = []
    for r in c.rows:
        cells.append([r.name, r.privacy] + [_cell(r, m) for m in c.metrics])
    header = ["model", "privacy of the model"] + head
    widths = [max(len(h), *(len(cell[i]) for cell in cells)) for i, h in enumerate(header)]
    lines = [
        f"dataset   {c.dataset}  (split {c.split}; {_split_words(c)})",
        *_wrap(
            f"{MARK} metrics computed on the exact held-out data: "
            + (f"rmse on {c.n_rmse_users:,} test users, " if "rmse" in c.metrics else "")
            + f"recall and ndcg on {c.n_test_users:,} users with a relevant held-out item"
            + (f"; mean ± std over {c.repeats} runs" if c.repeats > 1 else "")
        ),
    ]
    if c.relevance_threshold is not None:
        lines.append(
            f"          recall, ndcg: relevant = held-out ratings >= {c.relevance_threshold:g}, training items excluded"
        )
    if c.k_note:
        lines.append(f"          {c.k_note}")
    lines.append("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for cell in cells:
        lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(cell, widths)).rstrip())
    unit = "interactions" if c.protocol == "heldout-users" else "ratings"
    lines.append(
        f"{MARK} data     {c.n_users:,} users x {c.n_items:,} items, {c.n_train:,} training {unit} (exact counts)"
    )
    lines.append(f"{MARK} timings  {c.seconds:.1f} s in all")
    lines += _wrap(
        f"{MARK} = an exact figure computed from the data (metrics on held-out data, models fitted without "
        "noise, sizes, times): the privacy guarantee does not cover it; do not publish it with a release."
    )
    return "\n".join(lines)


def plot_comparison(c: Any, path) -> str:
    """One figure of the comparison ``c``, one panel per metric, one bar per model (± std), written
    to ``path``; needs matplotlib (the ``plots`` extra). The format follows the file's extension."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("the comparison plot needs matplotlib: pip install 'privrec[plots]'") from None
    from .._io import atomic_path

    metrics = [m for m in c.metrics if any(r.metrics.get(m) for r in c.rows)]
    fig = Figure(figsize=(4.0 * max(1, len(metrics)), 0.35 * len(c.rows) + 1.6))
    axes = np.atleast_1d(fig.subplots(1, max(1, len(metrics)), sharey=True))
    names = [f"{r.name} [{r.privacy}]" for r in c.rows]
    ypos = np.arange(len(c.rows))[::-1]
    for ax, m in zip(axes, metrics):
        means = [r.mean(m) for r in c.rows]
        stds = [r.std(m) if len(r.metrics.get(m, [])) > 1 else 0.0 for r in c.rows]
        colors = [("C9" if r.note else "C0") if r.private else "C7" for r in c.rows]
        ax.barh(ypos, [0.0 if math.isnan(v) else v for v in means], xerr=stds, color=colors)
        shown = [v for v in means if not math.isnan(v)]
        if m == "rmse" and shown:  # errors differ in the second decimal: start the axis near them
            ax.set_xlim(0.9 * min(shown), 1.02 * max(shown))
        ax.set_title(_metric_header(m), fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(ypos)
    axes[0].set_yticklabels(names, fontsize=7)
    fig.suptitle(
        f"{c.dataset}, {c.split} split: private models (blue) and non-private yardsticks (grey); "
        f"{MARK} metrics on exact held-out data",
        fontsize=8,
    )
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lower().lstrip(".") or "png")
    return str(path)


def _wrap(text: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False)


def _metric_header(metric: str) -> str:
    return f"{metric} {'↑' if _HIGHER_IS_BETTER.get(metric.split('@')[0], True) else '↓'}"


def _cell(row: Any, metric: str) -> str:
    if not row.metrics.get(metric):
        return ""
    mean = row.mean(metric)
    if math.isnan(mean):
        return "nan"
    runs = len(row.metrics[metric])  # 1 for a yardstick computed once (deterministic)
    return f"{mean:.4f}" + (f" ± {row.std(metric):.4f}" if runs > 1 else "")


def _split_words(c: Any) -> str:
    if c.split == "temporal":
        return "per user by timestamp: the latest 10% of each user's ratings tested"
    if c.split == "random":
        return f"80/10/10 of the ratings, seed {c.info.get('split_seed', 0)}"
    return f"{c.info.get('n_heldout', '?')} held-out test users, binarised"
