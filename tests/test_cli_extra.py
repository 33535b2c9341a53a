"""CLI error handling that needs no fit: exit codes of interrupted / failing commands, benchmark
script loading, and unreadable --ratings files (each a one-line error before any fitting)."""

import pytest

from privrec.cli import main


def _run(argv, capsys):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip()


@pytest.mark.parametrize(
    "exc, code, needle",
    [
        (KeyboardInterrupt(), 130, "privrec: interrupted"),
        (PermissionError("disk says no"), 1, "privrec benchmark: error: disk says no"),
        (ValueError("bad\nvalue"), 2, "privrec benchmark: error: bad value"),
    ],
)
def test_command_failures_become_exit_codes(monkeypatch, capsys, exc, code, needle):
    import privrec.commands.benchmark as B

    def boom(args):
        raise exc

    monkeypatch.setattr(B, "cmd_benchmark", boom)
    rc, out, err = _run(["benchmark", "speed"], capsys)
    assert rc == code and err == needle and out == ""


def test_broken_pipe_exits_quietly(monkeypatch, capsys):
    import privrec.commands.benchmark as B

    def closed(args):
        raise BrokenPipeError

    monkeypatch.setattr(B, "cmd_benchmark", closed)
    assert main(["benchmark", "speed"]) == 1


def test_no_command_prints_help(capsys):
    rc, _, err = _run([], capsys)
    assert rc == 2 and "COMMAND" in err


def test_benchmark_scripts_are_checked(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PRIVREC_BENCHMARKS", str(tmp_path))
    (tmp_path / "bench_speed.py").write_text("X = 1\n")
    rc, _, err = _run(["benchmark", "speed"], capsys)
    assert rc == 2 and err == "privrec benchmark: error: bench_speed.py has no main(argv)"
    (tmp_path / "bench_speed.py").write_text("raise ValueError('script is broken')\n")
    rc, _, err = _run(["benchmark", "speed"], capsys)
    assert rc == 2 and "script is broken" in err
    import sys

    assert "privrec_bench_bench_speed" not in sys.modules  # a failed import leaves no half module
    (tmp_path / "bench_speed.py").write_text(
        "import argparse\n"
        "def main(argv):\n"
        "    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--quick', action='store_true')\n"
        "    a = p.parse_args(argv)\n"
        "    print('quick' if a.quick else 'full')\n"
        "    return 0\n"
    )
    rc, out, _ = _run(["benchmark", "speed", "--quick"], capsys)
    assert rc == 0 and out.strip() == "quick"
    rc, _, err = _run(["benchmark", "speed", "--bogus"], capsys)
    assert rc == 2 and err.startswith("privrec benchmark speed: error: unrecognized arguments: --bogus")


def test_unreadable_ratings_files_are_one_line_errors(tmp_path, capsys):
    bad_pq = tmp_path / "r.parquet"
    bad_pq.write_bytes(b"PAR1 not really parquet")
    rc, _, err = _run(["fit", "--ratings", str(bad_pq), "-q"], capsys)
    assert rc == 2 and "cannot read r.parquet as Parquet" in err and len(err.splitlines()) == 1
    bad_csv = tmp_path / "r.csv"
    bad_csv.write_bytes(b"\xff\xfe\x00\x81\x82 user,item\n\x9c\x9d")
    rc, _, err = _run(["fit", "--ratings", str(bad_csv), "-q"], capsys)
    assert rc == 2 and "cannot read r.csv as CSV" in err and len(err.splitlines()) == 1


@pytest.fixture
def fallback_reader(monkeypatch):
    """The CLI's own reader (used when privrec.data has no from_pandas)."""
    import privrec.data as D

    monkeypatch.delattr(D, "from_pandas", raising=False)
    monkeypatch.delattr(D, "from_parquet", raising=False)


def test_fallback_reader_rejects_missing_ids_and_non_numeric_ratings(tmp_path, capsys, fallback_reader):
    ids = tmp_path / "ids.csv"
    ids.write_text("user,item,rating\n1,2,3\n,4,5\n")
    rc, _, err = _run(["fit", "--ratings", str(ids), "-q"], capsys)
    assert rc == 2 and "ids.csv, line 3: empty 'user' field" in err
    vals = tmp_path / "vals.csv"
    vals.write_text("user,item,rating\n1,2,3\n2,4,five\n")
    rc, _, err = _run(["fit", "--ratings", str(vals), "-q"], capsys)
    assert rc == 2 and "rating column 'rating' must be numeric" in err


def test_model_label_never_calls_an_infinite_epsilon_private():
    from privrec.commands.report import _model_label

    events = {"events": [{"label": "exact solve (non-private)"}]}
    assert _model_label({"method": "ada-dpals", "privacy_events": events, "epsilon_spent": "inf"}) == (
        "ada-dpals",
        "non-private (eps inf)",
    )
    assert (
        _model_label({"method": "ada-dpals", "privacy_events": events, "epsilon_spent": 4.99})[1] == "private, eps 4.99"
    )
    assert _model_label({"method": "als"}) == ("als", "non-private")


# ---------------------------------------------------------------- output paths: checked before anything is loaded


@pytest.fixture
def nothing_may_run(monkeypatch):
    """Loading the data or fitting fails the test: the command must stop before."""
    import privrec.commands.fit as F

    def ran(*args, **kwargs):
        raise AssertionError("data was loaded or a model fitted before the output paths were checked")

    monkeypatch.setattr(F, "_load", ran)
    monkeypatch.setattr(F, "_fit_model", ran)


def _unwritable_outputs(tmp_path):
    import os

    (tmp_path / "models.npz").mkdir()  # a folder where a file is expected
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    cases = {
        "folder": (["--output", str(tmp_path / "models.npz")], "it is a folder"),
        "under a file": (["--output", str(tmp_path / "notes.txt" / "m.npz")], "is a file, not a folder"),
        "plot is a folder": (["--plot", str(tmp_path / "plot.png")], "it is a folder"),
    }
    (tmp_path / "plot.png").mkdir()
    if os.path.exists("/dev/null"):
        (tmp_path / "null.npz").symlink_to("/dev/null")
        cases["device"] = (["--output", str(tmp_path / "null.npz")], "it is a character device")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.npz")
        cases["fifo"] = (["--output", str(tmp_path / "fifo.npz")], "it is a FIFO")
    if hasattr(os, "geteuid") and os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        cases["read-only folder"] = (["--output", str(locked / "m.npz")], "cannot create a file in")
    return cases


def test_unwritable_output_paths_fail_before_loading_or_fitting(tmp_path, capsys, nothing_may_run):
    import json

    pytest.importorskip("matplotlib")
    for what, (flags, needle) in _unwritable_outputs(tmp_path).items():
        rc, out, err = _run(["fit", "--method", "als", "-q", *flags], capsys)
        assert rc == 2 and out == "", what
        assert err.startswith("privrec fit: error: --") and needle in err and "\n" not in err, (what, err)
        rc, out, _ = _run(["fit", "--method", "als", "--json", *flags], capsys)
        assert rc == 2 and needle in json.loads(out)["error"], what
    left = [p.name for p in tmp_path.rglob(".privrec-*")]
    assert left == []  # the write probe leaves nothing behind


def test_missing_output_folders_are_fine_and_created_only_by_the_save(tmp_path, capsys, monkeypatch):
    import privrec.commands.fit as F

    monkeypatch.setattr(F, "_load", lambda args: (_ for _ in ()).throw(ValueError("stop after the checks")))
    rc, _, err = _run(["fit", "--method", "als", "-q", "--output", str(tmp_path / "new" / "dir" / "m.npz")], capsys)
    assert rc == 2 and err.endswith("stop after the checks")  # the path passed; nothing was created yet
    assert list(tmp_path.iterdir()) == []
