"""The ``privrec`` entry point itself: plain help, one-line errors, broken pipes, broken command modules."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import privrec.cli as cli
import privrec.commands
from privrec.cli import main

ROOT = Path(__file__).resolve().parents[1]
#: what must never leak into --help: reStructuredText markup and internal issue / spec references
RAW = re.compile(r"``|:(mod|class|func|meth|data|attr):`|\bissue \d|\bspec 0\d\d|§")


@pytest.mark.parametrize("argv", [[], ["fit"], ["evaluate"], ["recommend"], ["similar"], ["benchmark"], ["datasets"]])
def test_help_is_plain_text(argv, capsys):
    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: privrec")
    bad = RAW.search(out)
    assert bad is None, f"raw markup or internal reference in help: {bad.group(0)!r}"


def test_fit_help_explains_baselines_and_privacy(capsys):
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "trivial baseline" in text and "--compare-als" in text
    assert "removing all of one user's ratings" in text and "never released" in text
    assert "privrec fit --ratings ratings.csv" in text  # examples keep their line breaks


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: privrec" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["nosuch"], ["fit", "--epsilon"], ["fit", "--bogus"], ["evaluate"]])
def test_argument_errors_are_one_line_with_status_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "--help" in err[0]


def test_missing_command_module_fails_loudly(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["datasets", "no_such_module"])
    assert main(["datasets", "list", "--json"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "privrec.commands.no_such_module failed to import" in err


def test_command_module_raising_on_import_fails_loudly(monkeypatch, tmp_path, capsys):
    (tmp_path / "broken_cmd.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.setattr(privrec.commands, "__path__", [*privrec.commands.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "privrec.commands.broken_cmd", raising=False)
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["fit", "broken_cmd"])
    assert main(["fit", "--help"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("privrec: error: command module privrec.commands.broken_cmd failed to import")
    assert "RuntimeError: boom at import" in last


def test_command_module_without_register_fails_loudly(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["fit", "__init__"])  # importable, no register()
    monkeypatch.setitem(sys.modules, "privrec.commands.__init__", type(sys)("privrec.commands.__init__"))
    assert main(["fit", "--help"]) == 1
    assert "has no register(subparsers)" in capsys.readouterr().err


def test_former_models_module_still_exports_its_public_names():
    """``privrec.commands.models`` was split into one module per command; its public names stay."""
    import argparse

    import privrec.commands.models as M
    from privrec.commands import _data, evaluate, fit, recommend, report

    assert "models" not in privrec.commands.COMMAND_MODULES  # the commands register from their own modules
    assert all(getattr(M, name) is not None for name in M.__all__)
    assert M.load_ratings_file is _data.load_ratings_file and M.privacy_paragraph is report.privacy_paragraph
    assert (M.cmd_fit, M.cmd_evaluate, M.cmd_recommend, M.cmd_similar) == (
        fit.cmd_fit,
        evaluate.cmd_evaluate,
        recommend.cmd_recommend,
        recommend.cmd_similar,
    )
    subparsers = argparse.ArgumentParser().add_subparsers()
    M.register(subparsers)
    assert list(subparsers.choices) == ["fit", "evaluate", "recommend", "similar"]


@pytest.mark.parametrize(
    "argv", [["datasets", "list"], ["fit", "--method", "als", "--scale", "0.1", "--iterations", "1", "--factors", "2"]]
)
def test_closed_stdout_pipe_exits_quietly(argv):
    """``privrec ... | head`` must not print "Broken pipe" or a traceback (Python docs recipe)."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader is gone before privrec writes anything
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 1
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception ignored" not in err, err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("privrec ")


# ---------------------------------------------------------------- --json failures: an object on stdout


@pytest.mark.parametrize(
    "argv, status, needle",
    [
        (["fit", "--json", "--epsilon", "-1"], 2, "--epsilon must be > 0"),  # a command's own check
        (["fit", "--json", "--bogus"], 2, "unrecognized arguments: --bogus"),  # argparse
        (["datasets", "info", "no-such-dataset", "--json"], 2, "no-such-dataset"),  # a library ValueError
        (["datasets", "list", "--json", "--data-dir"], 2, "expected one argument"),
    ],
)
def test_json_failures_print_an_error_object_on_stdout(argv, status, needle, capsys):
    assert main(argv) == status
    cap = capsys.readouterr()
    lines = cap.out.strip().splitlines()
    assert len(lines) == 1, cap.out
    obj = json.loads(lines[0])
    assert set(obj) == {"error", "exit_status"} and obj["exit_status"] == status
    assert needle in obj["error"] and "\n" not in obj["error"]
    assert len(cap.err.strip().splitlines()) == 1  # the one-line message is still on stderr
    assert main([a for a in argv if a != "--json"]) == status  # without --json: nothing on stdout
    assert capsys.readouterr().out == ""


def test_json_interrupt_prints_an_error_object(monkeypatch, capsys):
    import privrec.commands.datasets as D

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(D, "cmd_list", interrupted)
    assert main(["datasets", "list", "--json"]) == 130
    cap = capsys.readouterr()
    assert json.loads(cap.out) == {"error": "interrupted", "exit_status": 130}
    assert cap.err.strip() == "privrec: interrupted"


# ---------------------------------------------------------------- SIGINT at any moment


def _console_script(trigger: str | None, argv: list[str], after: str = "") -> str:
    """What the installed ``privrec`` script runs, with a SIGINT sent to itself when module
    ``trigger`` is first imported (or, with ``after``, code run after ``main`` returned)."""
    return textwrap.dedent(f"""
        import os, signal, sys, time

        # as a program started from a shell: Python's own SIGINT handler, whatever disposition the
        # test process left for its children (an ignored SIGINT is inherited across exec)
        signal.signal(signal.SIGINT, signal.default_int_handler)

        class InterruptOnImport:
            def find_spec(self, name, path=None, target=None):
                if name == {trigger!r}:
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), signal.SIGINT)
                return None

        sys.meta_path.insert(0, InterruptOnImport())
        sys.argv = ["privrec", *{argv!r}]
        from privrec.cli import main
        rc = main()
        {after}
        sys.exit(rc)
    """)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="needs POSIX signals")
@pytest.mark.parametrize("trigger", ["numpy", "pandas", "privrec.privacy", "privrec.commands.fit"])
def test_sigint_during_start_up_imports_is_one_line_and_status_130(trigger):
    code = _console_script(trigger, ["datasets", "list"])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == ["privrec: interrupted"] and proc.stdout == ""


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="needs POSIX signals")
def test_sigint_after_the_command_finished_is_ignored_until_exit():
    code = _console_script(None, ["--version"], after="os.kill(os.getpid(), signal.SIGINT); time.sleep(0.2)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("privrec ")
    assert proc.stderr == ""
