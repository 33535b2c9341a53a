"""The CLI skeleton and ``privrec datasets list | info | prepare``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from privrec.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PRIVREC_SHARED_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVREC_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("PRIVREC_CACHE", str(tmp_path / "cache"))


def _ml100k(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "u.data").write_text("1\t10\t5\t1\n1\t11\t3\t2\n2\t10\t4\t3\n3\t12\t1\t4\n")
    return folder


def test_help_everywhere(capsys):
    for argv in (
        [],
        ["--help"],
        ["datasets", "--help"],
        ["datasets", "info", "--help"],
        ["datasets", "list", "--help"],
        ["datasets", "prepare", "--help"],
    ):
        rc = main(argv)
        out = capsys.readouterr()
        assert rc == (2 if not argv else 0)
        assert "usage" in (out.out + out.err)


def test_list(capsys):
    assert main(["datasets", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = {r["name"]: r for r in rows}
    assert names["synthetic-skew"]["kind"] == "synthetic" and names["ml-20m"]["downloadable"]
    assert main(["datasets", "list"]) == 0
    assert "ml20m-like" in capsys.readouterr().out


def test_info_json_on_local_folder(tmp_path, capsys):
    folder = _ml100k(tmp_path / "mine")
    assert main(["datasets", "info", "ml-100k", "--data-dir", str(folder), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["users"], s["items"], s["interactions"]) == (3, 3, 4)
    assert s["density"] == pytest.approx(4 / 9)
    assert s["top10_item_share"] == pytest.approx(0.5)  # top 1 of 3 items holds 2 of 4
    assert s["per_user"] == {"min": 1, "median": 1.0, "mean": 4 / 3, "max": 2}
    assert s["per_item"]["max"] == 2


def test_info_synthetic_text(capsys):
    assert main(["datasets", "info", "synthetic-skew", "--scale", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "users          1,000" in out and "top-10% items" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["datasets", "info", "ml-20m"], "privrec datasets prepare ml-20m --download"),
        (["datasets", "info", "nope"], "unknown dataset"),
        (["datasets", "info", "synthetic-skew", "--scale", "-1"], "scale"),
        (["datasets", "frobnicate"], "invalid choice"),
        (["datasets", "info"], "required"),
    ],
)
def test_user_errors_are_one_line_without_traceback(argv, needle, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_malformed_file_error_names_line(tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "u.data").write_text("1\t2\t3\t4\n1\t2\tx\t4\n")
    assert main(["datasets", "info", "ml-100k", "--data-dir", str(folder), "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 2" in err and len(err.splitlines()) == 1


def test_prepare_fills_cache(tmp_path, capsys):
    folder = _ml100k(tmp_path / "data" / "ml-100k")
    assert main(["datasets", "prepare", "ml-100k"]) == 0  # found under $PRIVREC_DATA
    assert str(folder) in capsys.readouterr().out
    assert any((tmp_path / "cache").iterdir())
    assert main(["datasets", "prepare", "synthetic-skew"]) == 0


@pytest.mark.skipif(not (SHARED / "ml-100k" / "u.data").is_file(), reason="shared datasets not present")
def test_done_when_real_data_via_shim(tmp_path, capsys):
    env = dict(os.environ, PRIVREC_CACHE=str(tmp_path / "c"))
    res = subprocess.run(
        [sys.executable, "cli.py", "datasets", "info", "ml-100k", "--data-dir", str(SHARED / "ml-100k"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert (s["users"], s["items"], s["interactions"]) == (943, 1682, 100_000)
    assert main(["datasets", "info", "lastfm", "--data-dir", str(SHARED / "hetrec2011-lastfm-2k"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["users"], s["items"], s["interactions"]) == (1892, 17632, 92834)


# ---------------------------------------------------------------- issue: tracebacks, side effects


def _cache_entry(cache: Path) -> Path:
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    return entry


def test_corrupt_cache_info_json_is_rebuilt_with_a_one_line_warning(tmp_path, capsys):
    folder = _ml100k(tmp_path / "mine")
    argv = ["datasets", "info", "ml-100k", "--data-dir", str(folder), "--json"]
    assert main(argv) == 0
    capsys.readouterr()
    (_cache_entry(tmp_path / "cache") / "info.json").write_text("[1, 2]")
    assert main(argv) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["interactions"] == 4
    warning_lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(warning_lines) == 1 and "warning" in warning_lines[0] and "Traceback" not in out.err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["datasets", "info", "synthetic-skew", "--seed", "-1"], "--seed must be a non-negative integer seed"),
        (["datasets", "info", "synthetic-skew", "--scale", "2"], "--scale must be in (0, 1]"),
    ],
)
def test_bad_synthetic_options_name_the_option(argv, needle, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_out_of_range_rating_is_one_line_exit_2(tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "u.data").write_text("1\t2\t3\t4\n1\t3\t99\t4\n")
    assert main(["datasets", "info", "ml-100k", "--data-dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 2" in err and "integers 1-5" in err and len(err.splitlines()) == 1


def test_info_leaves_the_working_directory_alone(tmp_path, monkeypatch, capsys):
    folder = _ml100k(tmp_path / "mine")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("PRIVREC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert main(["datasets", "info", "ml-100k", "--data-dir", str(folder)]) == 0
    assert "feedback       explicit: integers 1-5" in capsys.readouterr().out
    assert list(work.iterdir()) == []
    assert list((tmp_path / "xdg").rglob("manifest.json"))
