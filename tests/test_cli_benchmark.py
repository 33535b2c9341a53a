"""``privrec benchmark``: dispatch to the scripts, plain help, one-line errors (scripts faked in tmp_path)."""

import argparse

from privrec.cli import main

SCRIPT = """
import argparse

def main(argv=None):
    p = argparse.ArgumentParser(prog="bench_speed")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--preset", choices=["a", "b"])
    args = p.parse_args(argv)
    if args.preset == "b":
        raise ValueError("preset b needs\\n the real data")
    print("ran", args.quick)
    return 0
"""


def fake_scripts(tmp_path, monkeypatch):
    (tmp_path / "bench_speed.py").write_text(SCRIPT)
    monkeypatch.setenv("PRIVREC_BENCHMARKS", str(tmp_path))


def test_script_argument_errors_are_one_line(tmp_path, monkeypatch, capsys):
    fake_scripts(tmp_path, monkeypatch)
    original = argparse.ArgumentParser.error
    assert main(["benchmark", "speed", "--bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "privrec benchmark speed: error: unrecognized arguments: --bogus (see 'privrec benchmark speed --help')"
    ]
    assert argparse.ArgumentParser.error is original  # restored after the script


def test_script_value_error_is_one_line_and_success_passes_through(tmp_path, monkeypatch, capsys):
    fake_scripts(tmp_path, monkeypatch)
    assert main(["benchmark", "speed", "--preset", "b"]) == 2
    assert capsys.readouterr().err.strip() == "privrec benchmark: error: preset b needs the real data"
    assert main(["benchmark", "speed", "--quick"]) == 0
    assert capsys.readouterr().out.strip() == "ran True"


def test_missing_benchmarks_folder_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVREC_BENCHMARKS", str(tmp_path))  # empty folder
    assert main(["benchmark", "speed"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bench_speed.py not found" in err[0]
