"""Every code block of README.md and docs/quickstart.md runs, as a reader would run it.

Per file, top to bottom, in one temporary working folder:

* every ```python block is executed in one namespace shared by the file's blocks (as a reader
  pasting them in order);
* every command of a ```bash block (``\\`` continuations joined, ``&&`` chains split) that starts
  with ``privrec`` is passed to ``privrec.cli.main`` -- the function the ``privrec`` entry point
  and ``python -m privrec.cli`` call -- in this process (a subprocess per command would spend
  most of the time budget importing numpy, scipy and pandas again; tests/test_cli_*.py run the
  real entry points). It must exit 0, or with the status a trailing ``# exits N`` comment
  states. Any other command must match one of the few :data:`SKIPPED` patterns (installing
  privrec, running the test suite);
* ```text and unlabelled blocks show output or a layout; they are not code.

An HTML comment on the line just above a block steers it:

* ``<!-- docs-test: skip (reason) -->`` skips the block (network access, minutes of benchmarks, a
  cluster). The reason is required and skips are counted (:data:`MAX_SKIPS`);
* ``<!-- docs-test: data PLACEHOLDER = FOLDER -->``: the block needs a real dataset. It runs in
  its own test, namespace and folder, with PLACEHOLDER replaced by FOLDER under the shared
  datasets directory (``../shared/datasets`` or ``$PRIVREC_SHARED_DATASETS``), and is skipped
  when that folder is absent; such a block must therefore be self-contained.

The working folder holds ``ratings.csv`` (the generated ``synthetic-skew`` set with columns
``user_id``, ``movie_id``, ``stars``), standing in for the reader's own file of the quick start.
A python line ``NAME.config_["factors"]  # N ...`` states the model's rank; it is checked, so the
docs' claims about when the default model is personal stay true.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = ["README.md", "docs/quickstart.md"]
SHARED = Path(os.environ.get("PRIVREC_SHARED_DATASETS", ROOT.parent / "shared" / "datasets"))

#: bash commands that are shown but not run: installing privrec and running the test suite
SKIPPED = ("python3 -m venv ", ". .venv/bin/activate", "pip install ", "python -m pytest ")
#: at most this many blocks over both files carry a skip marker
MAX_SKIPS = 4
LANGUAGES = {"python", "bash", "text", ""}
MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")
SKIP = re.compile(r"skip \((.+)\)")
DATA = re.compile(r"data (\S+) = (\S+)")
EXITS = re.compile(r"#\s*exits (\d+)\b")
FACTORS_CLAIM = re.compile(r'^(\w+)\.config_\["factors"\]\s+#\s*(\d+)\b')


@dataclass(frozen=True)
class Block:
    path: str
    line: int  # line of the opening fence (1-based)
    lang: str
    code: str
    skip: str | None = None
    data: tuple[str, str] | None = None  # (placeholder, folder under SHARED)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse(path: str) -> list[Block]:
    """The fenced blocks of a Markdown file, with the marker just above each."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    marker: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        m = MARKER.fullmatch(text)
        if m:
            assert marker is None, f"{path}:{i + 1}: two docs-test markers in a row"
            marker = (i + 1, m.group(1))
        elif lines[i].startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"{path}:{i + 1}: unclosed code block"
            skip = data = None
            if marker is not None:
                if s := SKIP.fullmatch(marker[1]):
                    skip = s.group(1).strip()
                elif d := DATA.fullmatch(marker[1]):
                    data = (d.group(1), d.group(2))
                else:
                    raise AssertionError(f"{path}:{marker[0]}: unknown docs-test marker {marker[1]!r}")
            code = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(path, i + 1, lines[i][3:].strip(), code, skip, data))
            marker, i = None, end
        elif text and marker is not None:
            raise AssertionError(f"{path}:{marker[0]}: a docs-test marker must be the line just above a block")
        i += 1
    assert marker is None, f"{path}:{marker[0]}: a docs-test marker must be the line just above a block"
    return blocks


def commands(block: Block) -> list[str]:
    """The shell commands of a bash block: continuations joined, ``&&`` chains split."""
    out = []
    for line in block.code.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.extend(part.strip() for part in line.split("&&"))
    return out


def run_command(command: str, where: str) -> None:
    if command.startswith(SKIPPED):
        return
    argv = shlex.split(command, comments=True)
    assert argv[0] == "privrec", f"{where}: {command!r} is neither a privrec command nor in SKIPPED"
    odd = [a for a in argv if re.search(r"[|;<>$`*{}~]", a)]
    assert not odd, f"{where}: {command!r}: shell syntax {odd} is not supported here"
    expected = int(m.group(1)) if (m := EXITS.search(command)) else 0
    from privrec.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv[1:])
    out, err = out.getvalue(), err.getvalue()
    assert rc == expected, (
        f"{where}: {command!r} exited {rc}, the docs say {expected}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    )
    if expected == 2:  # a user error is one plain line
        assert err.strip().count("\n") == 0, f"{where}: {command!r}: {err}"
        assert err.startswith(f"privrec {argv[1]}: error: "), f"{where}: {err}"


def run_python(block: Block, namespace: dict) -> None:
    name = f"<{block.where}>"
    linecache.cache[name] = (len(block.code), None, block.code.splitlines(True), name)  # readable tracebacks
    exec(compile(block.code, name, "exec"), namespace)
    for line in block.code.splitlines():
        if m := FACTORS_CLAIM.match(line):
            got = namespace[m.group(1)].config_["factors"]
            assert got == int(m.group(2)), (
                f"{block.where}: the docs say {m.group(1)}.config_['factors'] is {m.group(2)}, the fit gives {got}: "
                "update the text about when the default model is personal"
            )


def run_block(block: Block, namespace: dict) -> None:
    if block.lang == "python":
        run_python(block, namespace)
    elif block.lang == "bash":
        for command in commands(block):
            run_command(command, block.where)


@pytest.fixture(scope="module")
def ratings_csv(tmp_path_factory) -> Path:
    from privrec.data import load_dataset

    frame = load_dataset("synthetic-skew").to_pandas()
    frame = frame.rename(columns={"item_id": "movie_id", "value": "stars"})[["user_id", "movie_id", "stars"]]
    path = tmp_path_factory.mktemp("docs-data") / "ratings.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def workdir(tmp_path, monkeypatch, ratings_csv):
    """A fresh working folder (the current directory) holding the stand-in ``ratings.csv``."""
    shutil.copy(ratings_csv, tmp_path / "ratings.csv")
    monkeypatch.chdir(tmp_path)
    return tmp_path


ALL = {path: parse(path) for path in FILES}
DATA_BLOCKS = [b for blocks in ALL.values() for b in blocks if b.data is not None]


def test_blocks_languages_markers_and_skips_are_few():
    skips = [b for blocks in ALL.values() for b in blocks if b.skip is not None]
    assert len(skips) <= MAX_SKIPS, [b.where for b in skips]
    assert all(len(b.skip) >= 10 for b in skips), "a skip marker needs a reason"
    assert len(SKIPPED) <= 4
    for path, blocks in ALL.items():
        assert sum(b.lang == "python" for b in blocks) >= 2, path
        for b in blocks:
            assert b.lang in LANGUAGES, f"{b.where}: block language {b.lang!r} is neither run nor known"
            assert not (b.skip and b.data), b.where
    # every SKIPPED pattern is used, and only on bash lines the test would otherwise run
    shown = [c for bs in ALL.values() for b in bs if b.lang == "bash" and not b.skip for c in commands(b)]
    for pattern in SKIPPED:
        assert any(c.startswith(pattern) for c in shown), f"unused SKIPPED pattern {pattern!r}"
    assert any(c.startswith("privrec fit --evaluate") for c in shown)  # the quick start's main job runs


@pytest.mark.parametrize("path", FILES)
def test_docs_blocks_run_in_order(path, workdir):
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for block in ALL[path]:
        if block.skip is None and block.data is None and block.lang in ("python", "bash"):
            run_block(block, namespace)
            ran += 1
    assert ran >= 3


@pytest.mark.parametrize("block", DATA_BLOCKS, ids=[b.where for b in DATA_BLOCKS])
def test_docs_blocks_on_real_data(block, workdir):
    placeholder, folder = block.data
    assert placeholder in block.code, f"{block.where}: {placeholder!r} is not in the block"
    if not (SHARED / folder).is_dir():
        pytest.skip(f"{SHARED / folder} not found")
    block = Block(block.path, block.line, block.lang, block.code.replace(placeholder, str(SHARED / folder)))
    run_block(block, {"__name__": "__docs__"})


def test_documented_thresholds_are_the_rule():
    """The docs quote the automatic configuration's current thresholds on n_users * min(eps, 20)."""
    from privrec.tuning import auto_config
    from privrec.tuning.rule import SELECTION_SIGNAL

    for threshold, implicit in ((int(SELECTION_SIGNAL), False), (20_000, True)):
        for path in FILES:
            assert f"≥ {threshold:,}" in (ROOT / path).read_text(encoding="utf-8"), (path, threshold)
        # ratings: the selection also needs room for the rank in the budget ("about 7% past")
        at = auto_config(threshold // 5, 2_000, 5.0 if implicit else 5.0 * 1.07, 1e-5, 5.0, implicit=implicit)
        below = auto_config(threshold // 5 - 1, 2_000, 5.0, 1e-5, 5.0, implicit=implicit)
        assert at["factors"] > 0 and below["factors"] == 0, "update the docs' sentence on when the default is personal"
    # the demo set (5,000 users) from eps ~ 13, ML-100K never
    assert auto_config(5_000, 2_000, 12.5, 1e-5, 5.0)["factors"] == 0
    assert auto_config(5_000, 2_000, 13.0, 1e-5, 5.0)["factors"] > 0
    assert auto_config(943, 1_682, 1e6, 1e-5, 5.0)["factors"] == 0
