"""The sample output of docs/cli.md is the output of the command it shows.

The ```text block after the marker ``<!-- generated: privrec ARGS -->`` in docs/cli.md is what
``privrec ARGS`` prints on the embedded default dataset. The test runs the command and compares:
every word and every integer must be the same (data sizes, test users, bucket sizes, numbers of
noise events, row names, layout); decimals are compared by position only, because the noise of a
private fit is fresh on every run (and timings differ). Regenerate the block after a change of the
output with

    python tests/test_docs_cli_output.py
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
MARKER = re.compile(r"^<!-- generated: privrec (.+?) -->$", re.M)
#: a decimal number (the noise of a private fit and the timings change them from run to run)
DECIMAL = re.compile(r"\d+\.\d+")


def generated_blocks(text: str) -> list[tuple[str, int, int]]:
    """``(arguments, start, end)`` of each generated block: ``text[start:end]`` is the block's body."""
    out = []
    for m in MARKER.finditer(text):
        fence = text.index("```text\n", m.end())
        assert text[m.end() : fence].strip() == "", f"the marker {m.group(0)!r} must be just above a ```text block"
        start = fence + len("```text\n")
        end = text.index("\n```", start) + 1
        out.append((m.group(1), start, end))
    return out


def run(arguments: str) -> str:
    """What ``privrec ARGUMENTS`` prints on stdout (run in this process)."""
    import shlex

    from privrec.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(shlex.split(arguments))
    assert rc == 0, f"privrec {arguments} exited {rc}: {err.getvalue()[-2000:]}"
    return out.getvalue()


def masked(text: str) -> list[str]:
    """The lines with every decimal replaced by ``#.#`` and runs of spaces collapsed (a decimal of
    another width moves the columns after it)."""
    return [re.sub(r" +", " ", DECIMAL.sub("#.#", line)).rstrip() for line in text.strip("\n").splitlines()]


def test_cli_page_sample_outputs_are_generated_by_the_code():
    text = PAGE.read_text(encoding="utf-8")
    blocks = generated_blocks(text)
    assert any(args.startswith("fit") for args, _, _ in blocks), "docs/cli.md shows no generated privrec fit output"
    for args, start, end in blocks:
        shown, actual = masked(text[start:end]), masked(run(args))
        assert shown == actual, (
            f"docs/cli.md: the sample output of 'privrec {args}' differs from what the command prints; "
            "regenerate it with: python tests/test_docs_cli_output.py\n"
            + "\n".join(f"page: {a}\nnow:  {b}" for a, b in zip(shown, actual) if a != b)[:3000]
            + (f"\n(page {len(shown)} lines, output {len(actual)} lines)" if len(shown) != len(actual) else "")
        )


def test_masking_keeps_integers_and_words():
    """The comparison cannot miss the drift the page once had (1,000 users / 694 test users)."""
    old = "[non-private] data     1,000 users x 2,000 items, 16,000 training ratings (exact counts)"
    new = "[non-private] data     5,000 users x 2,000 items, 80,000 training ratings (exact counts)"
    assert masked(old) != masked(new)
    assert masked("rmse 0.6972  0.0009") == masked("rmse 0.7012  0.0123")


def regenerate() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for args, start, end in reversed(generated_blocks(text)):
        text = text[:start] + run(args).strip("\n") + "\n" + text[end:]
    PAGE.write_text(text, encoding="utf-8")
    print(f"regenerated {PAGE}")


if __name__ == "__main__":  # pragma: no cover
    sys.path.insert(0, str(ROOT))
    regenerate()
