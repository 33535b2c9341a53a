"""The ``privrec`` command line (``privrec ...`` or ``python cli.py ...`` from a checkout).

Subcommands live in :mod:`privrec.commands` modules (see ``COMMAND_MODULES`` there). User errors
(bad arguments, missing data, invalid input) print one line to stderr and give a non-zero exit
status, without a traceback: 2 for bad arguments and invalid input, 1 for I/O failures.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from privrec import __version__
from privrec.commands import COMMAND_MODULES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privrec",
        description="Recommender systems and multi-task learning under user-level differential privacy.",
    )
    parser.add_argument("--version", action="version", version=f"privrec {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        full = f"privrec.commands.{name}"
        try:
            module = importlib.import_module(full)
        except ModuleNotFoundError as exc:
            if exc.name == full:  # the command module is simply not there: skip it
                continue
            print(f"privrec: warning: command module {name!r} could not be imported ({exc})", file=sys.stderr)
            continue
        except Exception as exc:  # a broken module must not take the other commands down
            print(f"privrec: warning: command module {name!r} could not be imported ({exc})", file=sys.stderr)
            continue
        module.register(subparsers)
    return parser


def main(argv=None) -> int:
    """Run the CLI; return the exit status (never raises for user errors)."""
    parser = build_parser()
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
    except KeyboardInterrupt:
        print("privrec: interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:
        print(f"privrec {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"privrec {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
