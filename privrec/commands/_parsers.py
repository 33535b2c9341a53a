"""Argument-parser helpers shared by the command modules."""

from __future__ import annotations

import argparse
import json
import sys


def add_command(subparsers, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """Add subcommand ``name``; its ``--help`` shows ``description`` with its line breaks (examples)."""
    return subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def _out_args(p) -> None:
    """``--json`` and ``--quiet``, which every model command takes."""
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")


def report_error(line: str, status: int, as_json: bool = False, message: str | None = None) -> int:
    """Print the one-line error ``line`` to stderr and, when ``as_json`` (``--json``), the object
    ``{"error": message or line, "exit_status": status}`` as one line on stdout, so that scripts
    parsing the output get an object on failure too; return ``status``."""
    print(line, file=sys.stderr)
    if as_json:
        print(json.dumps({"error": line if message is None else message, "exit_status": status}), flush=True)
    return status
