"""Argument-parser helpers shared by the command modules."""

from __future__ import annotations

import argparse


def add_command(subparsers, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """Add subcommand ``name``; its ``--help`` shows ``description`` with its line breaks (examples)."""
    return subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
