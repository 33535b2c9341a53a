"""A newcomer's first hour (issue 40): README's two commands install the core package and run the
main job, then install the test extras and run the tests; .ci/run runs exactly those commands; the
main job needs no optional extra; the docs cite papers, not unpublished specs."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: extras the main job must not need
OPTIONAL = ("matplotlib", "dask", "flwr", "faiss", "sphinx", "ray")


def quickstart_commands() -> list[str]:
    section = README[README.index("## Quick start") :]
    section = section[: section.index("\n## ", 3)]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README's quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_has_two_commands_core_install_then_tests():
    step1, step2 = quickstart_commands()  # exactly two
    assert step1 == "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && privrec fit --evaluate"
    install, tests = step2.split(" && ", 1)
    assert install == 'pip install -e ".[test]"'
    assert tests.startswith("python -m pytest ")


def test_test_extra_holds_every_other_extra():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    (spec,) = extras["test"]
    named = set(re.fullmatch(r"privrec\[(.+)\]", spec).group(1).split(","))
    assert named == set(extras) - {"test"}
    core = " ".join(meta["dependencies"]).lower()
    assert not [m for m in ("matplotlib", "dask", "flwr", "faiss", "sphinx") if m in core]


def test_ci_runs_the_readme_commands():
    out = subprocess.run([str(ROOT / ".ci" / "run"), "--print-steps"], capture_output=True, text=True, check=True)
    step1, step2 = quickstart_commands()
    install, tests = step2.split(" && ", 1)
    assert out.stdout.splitlines() == [step1.split(". .venv/bin/activate && ", 1)[1], install, tests]
    ci = (ROOT / ".ci" / "run").read_text()
    for check in ("ruff check", "ruff format --check", "mypy", "sphinx", "scikit-learn==$oldest", "datasets info"):
        assert check in ci, check


def test_readme_states_the_measured_venv_size():
    assert re.search(r"\*\*\d+ MB\*\* virtual environment \(`du -sh \.venv`", README)


def test_main_job_runs_without_the_optional_extras(monkeypatch, tmp_path):
    """``privrec fit --evaluate`` with matplotlib, Dask, Flower, faiss and Sphinx unimportable; only
    ``--plot`` asks for matplotlib, with a one-line error."""
    import importlib.abc

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in OPTIONAL:
                raise ImportError(f"No module named {fullname!r} (hidden by the test)")
            return None

    for name in [m for m in sys.modules if m.split(".")[0] in OPTIONAL]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Absent(), *sys.meta_path])
    from privrec.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["fit", "--evaluate", "--quiet", "--scale", "0.2"])
    assert rc == 0, err.getvalue()
    assert "rmse" in out.getvalue()
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["fit", "--plot", str(tmp_path / "b.png")])
    assert rc == 2 and "needs matplotlib: pip install 'privrec[plots]'" in err.getvalue()


def _user_docs() -> list[Path]:
    own = [p for p in (ROOT / "docs").glob("*.md") if p.name not in ("federated-flower.md", "performance.md")]
    return [ROOT / "README.md", *own]


def test_user_docs_cite_papers_not_specs():
    """No spec ships with the package: the docs cite the papers (docs/references.md)."""
    for path in _user_docs():
        hits = re.findall(r"\bspec(?:s)? \d{3}\b", path.read_text(encoding="utf-8"), re.I)
        assert hits == [], f"{path.name}: {hits}"


def test_implicit_guide_lists_recommend_all_as_provided():
    from privrec.serving import recommend_all

    text = (ROOT / "docs" / "implicit.md").read_text(encoding="utf-8")
    assert callable(recommend_all)
    not_provided = [line for line in text.splitlines() if "not provided" in line]
    assert not any("recommend_all" in line for line in not_provided)
    assert "privrec.serving.recommend_all" in text
