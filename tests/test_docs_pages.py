"""Page-level facts of the docs and README (issue 27): the implicit migration guide renders without
clipped table cells, and the README's Dask equality claim states what it is equal to."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_implicit_guide_has_no_wide_table_to_clip():
    """The theme clips a table wider than the page: the guide lists the methods instead, one bullet
    each, and no line of a table (if one is added later) is wider than 100 characters."""
    text = (ROOT / "docs" / "implicit.md").read_text()
    wide = [line for line in text.splitlines() if line.startswith("|") and len(line) > 100]
    assert wide == []
    for name in ("AlternatingLeastSquares(", "recommend(", "similar_items(", "partial_fit_items(", "save("):
        assert re.search(r"^- \*\*`" + re.escape(name), text, re.M), name
    assert 'ALS(feedback="implicit"' in text


def test_readme_dask_equality_claim_has_its_caveat():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Scaling out with Dask") :]
    section = section[: section.index("\n## ", 3)]
    assert "partition_interactions(...).to_local()" in section
    assert "not of the original frame" in section
