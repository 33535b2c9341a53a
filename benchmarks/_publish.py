"""Command line and output writing shared by the convex benchmarks (appendix C, joint DP, async).

Each of those scripts parses ``--quick / --out / --quiet`` (plus its own options), runs, then
writes ``<tag>.json`` (results with the verdicts of its claims), ``<tag>.md`` and ``<tag>.png``
(when matplotlib is installed) atomically into ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _common as C


def parser(doc: str) -> argparse.ArgumentParser:
    """ArgumentParser with the common ``--quick``, ``--out`` and ``--quiet`` options."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small configuration (seconds)")
    p.add_argument("--out", type=Path, default=C.RESULTS, help="output folder")
    p.add_argument("--quiet", action="store_true")
    return p


def publish(res: dict, tag: str, args, analyse, markdown, plot) -> int:
    """Add ``quick`` and ``claims`` to ``res``; write JSON, Markdown and plot; print unless quiet."""
    res["quick"] = bool(args.quick)
    claims = analyse(res)
    res["claims"] = claims
    C.write_json(args.out / f"{tag}.json", res)
    md = markdown(res, claims)
    C.write_text(args.out / f"{tag}.md", md)
    plot(res, args.out / f"{tag}.png")
    if not args.quiet:
        print(md)
    return 0


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or ``None`` without the optional ``plots`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - optional extra
        return None
    return plt


def save_figure(fig, path: Path) -> str:
    """Tight layout, write ``path`` (PNG, 90 dpi), close the figure; return the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path)
