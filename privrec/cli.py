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
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from privrec import __version__
from privrec.commands import COMMAND_MODULES
from privrec.privacy.budget import BudgetExceededError

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
  privrec datasets list            datasets privrec knows about
  privrec COMMAND --help           options of one command
"""


class CommandImportError(RuntimeError):
    """A command module listed in ``COMMAND_MODULES`` could not be imported or registered."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` parser whose errors are one line (``privrec fit: error: ...``), exit status 2."""

    def error(self, message):
        text = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {text} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command of :data:`privrec.commands.COMMAND_MODULES`.

    Raises :class:`CommandImportError` if a command module cannot be imported or has no
    ``register(subparsers)``.
    """
    parser = ArgumentParser(
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


def main(argv=None) -> int:
    """Run the CLI; return the exit status (never raises for user errors)."""
    try:
        rc = _main(argv)
        sys.stdout.flush()  # a closed pipe is detected here, inside the handler below
        return rc
    except BrokenPipeError:
        _silence_stdout()
        return 1


def _main(argv) -> int:
    try:
        parser = build_parser()
    except CommandImportError as exc:
        traceback.print_exc()
        print(f"privrec: error: {exc} (a broken installation or a bug; please report it)", file=sys.stderr)
        return 1
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version (0) or an argument error (2, message already printed)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print("privrec: interrupted", file=sys.stderr)
        return 130
    except BudgetExceededError as exc:
        print(f"privrec {args.command}: refused: {_one_line(exc)}", file=sys.stderr)
        return EXIT_REFUSED
    except (ValueError, FileNotFoundError) as exc:
        print(f"privrec {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"privrec {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


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
