"""The core install has no pyarrow and no implicit (issue 40: README step 1's venv <= 400 MB).

One subprocess runs with an import hook that makes ``import pyarrow`` / ``import implicit`` (and
their submodules) raise ``ModuleNotFoundError``, as in an install without the ``parquet`` and
``implicit`` extras (``sys.modules["pyarrow"] = None`` would not do: scikit-learn looks pyarrow up
in ``sys.modules`` and would take that None for the module): ``import privrec``
works, the main job (``privrec fit --evaluate`` on the embedded default data, through the CLI's
``main()``) prints its table, and every Parquet write or read -- and ``ImplicitALS`` -- fails with
a one-line ``ImportError`` naming the extra that installs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PARQUET_HINT = "pip install 'privrec[parquet]'"
IMPLICIT_HINT = "pip install 'privrec[implicit]'"

SCRIPT = textwrap.dedent(
    """
    import contextlib, importlib.abc, io, json, sys
    from pathlib import Path

    ABSENT = ("pyarrow", "implicit")

    class Absent(importlib.abc.MetaPathFinder):  # what an install without the two extras looks like
        def find_spec(self, fullname, path=None, target=None):
            if fullname.partition(".")[0] in ABSENT:
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None

    assert not [m for m in sys.modules if m.partition(".")[0] in ABSENT]
    sys.meta_path.insert(0, Absent())
    work = Path(sys.argv[1])
    out = {}

    def error(call):
        try:
            call()
        except ImportError as exc:
            return {"type": type(exc).__name__, "message": str(exc), "value_error": isinstance(exc, ValueError)}
        return None

    import privrec, privrec.data, privrec.models, privrec.serving  # noqa: E401
    out["imported"] = privrec.__file__

    from privrec.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        out["main_rc"] = main(["fit", "--evaluate", "--quiet"])
    out["main_stdout"], out["main_stderr"] = stdout.getvalue(), stderr.getvalue()

    import numpy as np
    import scipy.sparse as sp

    from privrec.data import cache, loaders
    from privrec.models import ALS, ImplicitALS
    from privrec.serving import recommend_all

    rng = np.random.default_rng(0)
    R = sp.random(40, 30, density=0.2, format="csr", random_state=rng, data_rvs=lambda n: rng.integers(1, 6, n))
    model = ALS(factors=2, iterations=1, random_state=0).fit(R, show_progress=False)
    target = work / "top.parquet"
    out["write"] = error(lambda: recommend_all(model, R, target, N=3))
    out["write_left_file"] = target.exists()

    (work / "u.data").write_text("1\\t2\\t3\\t4\\n2\\t3\\t4\\t5\\n")
    out["loader"] = error(lambda: loaders.load_movielens_100k(work))
    entry = work / "cache"
    out["cache_load"] = error(lambda: cache.load(entry))
    calls = []

    def loader():
        calls.append(1)
        return "parsed"

    out["cached_load"] = cache.cached_load(loader, [work / "u.data"], "ml-100k", cache_dir=entry)
    out["cache_written"] = entry.exists()

    ratings = work / "ratings.parquet"
    ratings.write_bytes(b"PAR1 not read: pyarrow is missing PAR1")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        out["read_rc"] = main(["fit", "--ratings", str(ratings), "--quiet"])
    out["read_stderr"] = stderr.getvalue()

    out["implicit"] = error(lambda: ImplicitALS(factors=2, iterations=1).fit(R, show_progress=False))
    out["leaked"] = sorted(m for m in sys.modules if m.partition(".")[0] in ABSENT)
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def without_extras(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("no-extras")
    # this checkout's privrec, whatever is installed; in a scratch folder (nothing written beside the code)
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(work)],
        capture_output=True,
        text=True,
        cwd=work,
        env={**os.environ, "PYTHONPATH": path},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _one_line_error(err: dict | None, hint: str) -> str:
    assert err is not None, "no ImportError raised"
    message = err["message"]
    assert "\n" not in message and message.endswith(hint), message
    assert err["value_error"], "the CLI reports ValueErrors in one line"
    return message


def test_core_dependencies_leave_pyarrow_and_implicit_to_extras():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(meta["dependencies"]).lower()
    assert "pyarrow" not in core and "implicit" not in core
    extras = meta["optional-dependencies"]
    assert extras["parquet"] == ["pyarrow>=12"] and extras["implicit"] == ["implicit>=0.7"]
    for needs_parquet in ("dask", "serving"):  # Dask reads Parquet; recommend_all writes it
        assert "privrec[parquet]" in extras[needs_parquet], needs_parquet


def test_import_and_main_job_without_pyarrow(without_extras):
    out = without_extras
    assert Path(out["imported"]).parent == ROOT / "privrec" and out["leaked"] == []
    assert out["main_rc"] == 0, out["main_stderr"]
    table = out["main_stdout"]
    assert "synthetic-skew" in table and "ada-dpals" in table
    assert "rmse" in table and "recall@20" in table and "per-popularity bucket" in table
    assert "differentially private at the user level" in table


def test_parquet_write_names_the_extra(without_extras):
    message = _one_line_error(without_extras["write"], PARQUET_HINT)
    assert message.startswith("recommend_all (writes Parquet) needs pyarrow")
    assert not without_extras["write_left_file"]


def test_parquet_reads_name_the_extra(without_extras):
    out = without_extras
    assert "benchmark datasets" in _one_line_error(out["loader"], PARQUET_HINT)
    assert "dataset cache" in _one_line_error(out["cache_load"], PARQUET_HINT)
    # without pyarrow the cache is skipped (each load parses), never reported as a corrupt entry
    assert out["cached_load"] == "parsed" and not out["cache_written"]
    # the CLI: one line on stderr, exit status 2 (a user error), no traceback
    assert out["read_rc"] == 2
    (line,) = out["read_stderr"].strip().splitlines()
    assert line.startswith("privrec fit: error: a Parquet --ratings file needs pyarrow") and line.endswith(PARQUET_HINT)


def test_implicit_als_names_the_extra(without_extras):
    assert _one_line_error(without_extras["implicit"], IMPLICIT_HINT).startswith("ImplicitALS")


def test_require_re_raises_a_broken_dependency(monkeypatch):
    """Only the package itself missing is explained as a missing extra; a broken install is not."""
    import importlib

    from privrec import _optional

    def broken(name):
        raise ModuleNotFoundError("No module named 'six'", name="six")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError) as info:
        _optional.require("pyarrow", "x")
    assert not isinstance(info.value, _optional.MissingExtraError)


def test_require_in_process(monkeypatch):
    from privrec import _optional

    assert _optional.require("json", "x").dumps([]) == "[]"
    for name in [m for m in sys.modules if m == "implicit" or m.startswith("implicit.")] + ["implicit"]:
        monkeypatch.setitem(sys.modules, name, None)
    assert not _optional.available("implicit")
    with pytest.raises(_optional.MissingExtraError, match=r"^f needs implicit: pip install 'privrec\[implicit\]'$"):
        _optional.require("implicit.cpu.als", "f")
