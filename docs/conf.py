"""Sphinx configuration of the privrec documentation.

Build (warnings are errors):

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Needs the ``docs`` extra: sphinx, myst-parser and furo.
"""

from __future__ import annotations

import os
import re
import sys
from importlib.util import find_spec

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # a checkout works uninstalled

import privrec

project = "privrec"
author = "privrec contributors"
copyright = "privrec contributors; Apache-2.0 licence"
release = privrec.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# --- MyST (Markdown pages)
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# --- autodoc / napoleon: the API reference is generated from the docstrings
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_inherit_docstrings = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# Unresolved cross-references in docstrings (e.g. to numpy or scipy types) are not errors.
nitpicky = False

# The only warning type switched off: myst.header, for pages that start at a level-2 heading
# (docs/data-and-model-files.md). Everything else fails the ``-W`` build.
suppress_warnings = ["myst.header"]

# --- HTML
html_theme = "furo" if find_spec("furo") else "alabaster"
html_title = f"privrec {release}"
html_static_path: list[str] = []
html_show_sourcelink = False


# --- docstring hygiene (the docstrings belong to the package; fix the rendering here) ----------
_SKLEARN_GENERATED = (
    "set_fit_request",
    "set_predict_request",
    "set_score_request",
    "set_transform_request",
    "set_partial_fit_request",
    "set_output",
)


def _skip_member(app, what, name, obj, skip, options):
    """Hide scikit-learn's generated metadata-routing methods and the methods a class inherits from
    scikit-learn (``FactorizationModel`` lists its inherited members; their docstrings cite sklearn's
    own docs)."""
    if name in _SKLEARN_GENERATED or (name.startswith("set_") and name.endswith("_request")):
        return True
    if what == "class" and (getattr(obj, "__module__", None) or "").startswith("sklearn."):
        return True
    return None


_LITERAL = re.compile(r"(``.+?``|`[^`]+`)")
_TRAILING_UNDERSCORE = re.compile(r"(\w)_(?=[\s,.;:)/]|$)")


def _escape_text(p: str) -> str:
    p = p.replace("|", r"\|")
    return _TRAILING_UNDERSCORE.sub(r"\1\\_", p)


def _escape_plain_text(app, what, name, obj, options, lines):
    """Outside literals, escape what reStructuredText would misread in privrec's docstrings:
    bars of absolute values and norms (``|x|``, read as a substitution reference; no docstring
    uses grid tables or line blocks) and trailing underscores of fitted attributes
    (``item_factors_``, read as a hyperlink reference)."""
    for k, line in enumerate(lines):
        if "|" not in line and "_" not in line:
            continue
        parts = _LITERAL.split(line)
        lines[k] = "".join(p if i % 2 else _escape_text(p) for i, p in enumerate(parts))


_SECTION = re.compile(r"^(\s*)(Parameters|Attributes|Other Parameters)\s*$")
_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
_ENTRY = re.compile(r"^(\S[^:]*?)\s+:\s+(.*)$")


def _entry(line: str, indent: str):
    """``(names, description)`` when ``line`` is a ``name : description`` entry at ``indent``."""
    if not line.startswith(indent) or line[len(indent) :].startswith((" ", "\t")):
        return None
    m = _ENTRY.match(line[len(indent) :])
    return (m.group(1), m.group(2)) if m else None


def _name_colon_sections(app, what, name, obj, options, lines):
    """privrec's docstrings write parameters as ``name : description`` (numpy layout, no types).

    napoleon would read the description as a type, so these sections are turned into a rubric
    and a definition list before napoleon runs. A section ends at a blank line followed by text
    that is not an entry (e.g. a closing remark); free text inside a section stays a paragraph.
    """
    out, i = [], 0
    while i < len(lines):
        m = _SECTION.match(lines[i])
        if not (m and i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1])):
            out.append(lines[i])
            i += 1
            continue
        indent = m.group(1)
        out += [f"{indent}.. rubric:: {m.group(2)}", ""]
        i += 2
        mode = None  # "entry" or "text"
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                j = i + 1
                while j < len(lines) and not lines[j].strip():
                    j += 1
                if j >= len(lines) or _entry(lines[j], indent) is None:
                    break
                i += 1
                continue
            e = _entry(line, indent)
            if e is not None:
                if mode == "text":
                    out.append("")
                out += [f"{indent}``{e[0]}``", f"{indent}    {e[1]}"]
                mode = "entry"
            elif line.startswith(indent + " ") and mode == "entry":
                out.append(line)  # continuation of the entry's description
            else:
                if mode == "entry":
                    out.append("")
                out.append(line)
                mode = "text"
            i += 1
        out.append("")
    lines[:] = out


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _escape_plain_text)
    # before napoleon (priority 500), which would otherwise parse these sections
    app.connect("autodoc-process-docstring", _name_colon_sections, priority=400)
