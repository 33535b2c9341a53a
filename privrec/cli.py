"""The ``privrec`` command line (``privrec ...`` or ``python cli.py ...`` from a checkout).

Subcommands live in :mod:`privrec.commands` modules (see ``COMMAND_MODULES`` there). A listed
module that fails to import is a broken installation, not a user error: the CLI stops with the
traceback and exit status 1 instead of silently dropping the command.

User errors (bad arguments, missing data, invalid input) print one line to stderr and exit with
status 2 (1 for operating-system I/O failures), without a traceback. A release refused by its
lifetime privacy budget (:class:`privrec.privacy.BudgetExceededError`, e.g. ``privrec fit
--budget-file``) prints one line ``privrec <command>: refused: ...`` and exits with status 3. A closed output pipe
(``privrec fit | head``) ends the program quietly, as the Python documentation recommends for
``BrokenPipeError``.

With ``--json``, a failure also prints one JSON object on stdout, ``{"error": "...",
"exit_status": N}``, so that scripts parsing the output always get an object (the one-line
message still goes to stderr).

SIGINT (Ctrl-C) at any moment of ``privrec`` -- the start-up imports included -- ends it with one
line ``privrec: interrupted`` and exit status 130, without a traceback; SIGINT is then ignored
until the process exits, so that the interpreter's shutdown cannot print one either. For that,
this module imports nothing but modules the interpreter has already loaded at start-up: argparse,
json, numpy and the command modules are imported inside :func:`main`. (The interpreter's own
start-up and the import of this small module, before :func:`main` runs, are outside privrec's
reach.) SIGTERM during a file write removes the temporary file and exits with status 143
(:func:`privrec._io.sigterm_as_exception`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from privrec import __version__
from privrec.commands import COMMAND_MODULES

#: exit status of a release refused by its privacy budget
EXIT_REFUSED = 3

DESCRIPTION = """\
Recommender systems and multi-task learning under user-level differential privacy.

privrec fits matrix-factorisation recommenders whose released item factors are
differentially private at the user level: removing all of one user's ratings
changes the probability of any released model by at most a factor e^epsilon,
except with probability delta. User embeddings are never released.

Start with:
  privrec fit                      private model on a small generated dataset
  privrec fit --method als         the non-private reference
  privrec fit --budget-file F      charge refits of the same users to one lifetime budget
  privrec compare                  private models at several epsilons beside the yardsticks
  privrec datasets list            datasets privrec knows about
  privrec COMMAND --help           options of one command
"""


class CommandImportError(RuntimeError):
    """A command module listed in ``COMMAND_MODULES`` could not be imported or registered."""


class UsageError(SystemExit):
    """An argument error (exit status 2); ``text`` is the message, already printed to stderr."""

    def __init__(self, text: str):
        super().__init__(2)
        self.text = text


_PARSER_CLASS: type | None = None


def _parser_class() -> type:
    """:class:`ArgumentParser`, defined on first use (``argparse`` is not imported at start-up)."""
    global _PARSER_CLASS
    if _PARSER_CLASS is None:
        import argparse

        class ArgumentParser(argparse.ArgumentParser):
            """``argparse`` parser whose errors are one line (``privrec fit: error: ...``), exit status 2."""

            def error(self, message):
                text = " ".join(str(message).split())
                print(f"{self.prog}: error: {text} (see '{self.prog} --help')", file=sys.stderr)
                raise UsageError(text)

        _PARSER_CLASS = ArgumentParser
    return _PARSER_CLASS


def __getattr__(name: str):
    if name == "ArgumentParser":
        return _parser_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _wants_json(args, argv) -> bool:
    """Whether the command line asked for ``--json`` (``args`` may be ``None``: parsing failed)."""
    if args is not None:
        return bool(getattr(args, "json", False))
    tokens = sys.argv[1:] if argv is None else list(argv)
    if "--" in tokens:
        tokens = tokens[: tokens.index("--")]
    return "--json" in tokens


def build_parser():
    """The top-level parser with every command of :data:`privrec.commands.COMMAND_MODULES`.

    Raises :class:`CommandImportError` if a command module cannot be imported or has no
    ``register(subparsers)``.
    """
    import argparse

    parser = _parser_class()(
        prog="privrec", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"privrec {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        full = f"privrec.commands.{name}"
        try:
            module = importlib.import_module(full)
        except Exception as exc:
            raise CommandImportError(
                f"command module {full} failed to import: {type(exc).__name__}: {_one_line(exc)}"
            ) from exc
        register = getattr(module, "register", None)
        if not callable(register):
            raise CommandImportError(f"command module {full} has no register(subparsers) function")
        register(subparsers)
    return parser


#: exit status after SIGINT (128 + 2, as a shell reports it)
EXIT_INTERRUPTED = 130


def main(argv=None) -> int:
    """Run the CLI; return the exit status (never raises for user errors or SIGINT).

    ``argv=None`` (the ``privrec`` program, ``python cli.py``) reads ``sys.argv`` and owns the
    process: after a SIGINT, or once the command is done, SIGINT is ignored until the process
    exits. A list (tests, callers embedding the CLI) leaves the signal handlers alone.
    """
    owner = argv is None
    state: dict = {}
    try:
        import signal  # noqa: F401 -- loaded now, so that the handlers below only look it up

        try:
            rc = _main(argv, state)
            sys.stdout.flush()  # a closed pipe is detected here, inside the handler below
            return rc
        except BrokenPipeError:
            _silence_stdout()
            return 1
    except KeyboardInterrupt:  # start-up imports, argument parsing, the command, the final flush
        if owner:
            _ignore_sigint()
        # a file a library had open when the interrupt arrived (threadpoolctl reads /proc/self/maps)
        # is closed by the collector: no "unclosed file" ResourceWarning after the one-line message
        import warnings

        warnings.filterwarnings("ignore", category=ResourceWarning)
        return _interrupted(state.get("args"), argv)
    finally:
        if owner:
            _ignore_sigint()


def _ignore_sigint() -> None:
    with contextlib.suppress(ValueError, OSError, ImportError):  # ValueError: not the main thread
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupted(args, argv) -> int:
    """One line ``privrec: interrupted`` (and the JSON error object with ``--json``); status 130."""
    with contextlib.suppress(OSError):  # a closed stderr / stdout: nothing more to say
        print("privrec: interrupted", file=sys.stderr)
        if _wants_json(args, argv):
            import json

            print(json.dumps({"error": "interrupted", "exit_status": EXIT_INTERRUPTED}), flush=True)
    return EXIT_INTERRUPTED


def _main(argv, state: dict | None = None) -> int:
    # here, not at import: see the module docstring
    import json
    import traceback

    from privrec._io import Terminated
    from privrec.commands._parsers import report_error
    from privrec.privacy.budget import BudgetExceededError

    state = {} if state is None else state
    try:
        parser = build_parser()
    except CommandImportError as exc:
        traceback.print_exc()
        print(f"privrec: error: {exc} (a broken installation or a bug; please report it)", file=sys.stderr)
        return 1
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:  # an argument error (2, message already printed)
        if _wants_json(None, argv):
            print(json.dumps({"error": exc.text, "exit_status": 2}), flush=True)
        return 2
    except SystemExit as exc:  # --help / --version (0)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    state["args"] = args
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    as_json = _wants_json(args, argv)
    where = f"privrec {args.command}"
    try:
        return int(func(args) or 0)
    except BrokenPipeError:
        raise
    except Terminated as exc:
        return report_error(f"{where}: terminated", int(exc.code or 143), as_json, "terminated")
    except BudgetExceededError as exc:
        return report_error(f"{where}: refused: {_one_line(exc)}", EXIT_REFUSED, as_json, f"refused: {_one_line(exc)}")
    except (ValueError, FileNotFoundError) as exc:
        return report_error(f"{where}: error: {_one_line(exc)}", 2, as_json, _one_line(exc))
    except OSError as exc:
        return report_error(f"{where}: error: {_one_line(exc)}", 1, as_json, _one_line(exc))


def _silence_stdout() -> None:
    """Point stdout at ``os.devnull`` so the interpreter's final flush cannot fail again.

    The recipe of the Python documentation (``signal`` module, "Note on SIGPIPE").
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests)
        pass


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
