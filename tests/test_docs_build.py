"""The documentation site builds with warnings as errors (``python -m sphinx -W ...``).

Skipped when the ``docs`` extra (sphinx, myst-parser) is not installed.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: the prose pages written for the site (docstrings and data-and-model-files.md are checked elsewhere)
PAGES = [
    "index.md",
    "quickstart.md",
    "cli.md",
    "choosing-epsilon-delta.md",
    "implicit.md",
    "algorithms.md",
    "references.md",
    *(
        f"privacy/{p}.md"
        for p in ("index", "dpals", "addremove", "multitask", "joint-dp", "federated", "srgd", "async")
    ),
]


@pytest.mark.slow  # a Sphinx build of the whole site
def test_docs_build_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    for page in [
        "index",
        "quickstart",
        "choosing-epsilon-delta",
        "implicit",
        "algorithms",
        "changelog",
        "privacy/joint-dp",
        "api/models",
        "api/federated",
    ]:
        assert (out / f"{page}.html").is_file(), page
    api = (out / "api" / "models.html").read_text(encoding="utf-8")
    assert 'id="privrec.models.DPALS"' in api and 'id="privrec.models.DPALS.privacy_report"' in api
    assert "set_fit_request" not in api  # scikit-learn's generated methods are hidden


@pytest.mark.parametrize("page", PAGES)
def test_guide_pages_cite_papers_not_internal_specs(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    assert not re.search(r"\bspec 0\d\d|\bissue \d|§", text), page


def test_changelog_follows_keep_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog") and "keepachangelog.com" in text
    heads = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert heads[0] == "Unreleased" and "0.1.0" in heads
    unreleased = text.split("## [0.1.0]")[0]
    for needle in (
        "Private biases",
        "Automatic configuration",
        "PLD is the default accountant",
        "Implicit feedback with a popularity prior",
        "Joint-DP accounting",
        "replace-one",
        "Shuffle bound",
        "Data safety and validation",
        "Model file schema v2",
    ):
        assert needle in unreleased, needle
