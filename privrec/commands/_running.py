"""How a command handler runs: user errors, warnings and progress.

:func:`_run` runs a handler ``fn(args) -> int``. Errors a user can cause (:class:`CommandError`,
``ValueError``, a missing file, an ``OSError``) print one line ``privrec <command>: error: ...`` to
stderr and exit with status 2; a release refused by its privacy budget prints ``privrec <command>:
refused: ...`` and exits with status 3; with ``--json`` a failure also prints ``{"error": "...",
"exit_status": N}`` on stdout. Library warnings (and :func:`_warn`'s, e.g. ignored options, a large
delta) are one line each on stderr, in CLI words (:func:`cli_wording`). :class:`_Stages` is the
progress bar over a command's stages.
"""

from __future__ import annotations

import re
import sys
import warnings
from contextlib import contextmanager

from ..privacy.budget import BudgetExceededError
from ._parsers import report_error

#: exit status of a fit refused by its privacy budget (2 is a user error, 1 an I/O failure; as privrec.cli)
EXIT_REFUSED = 3


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class _Exit(Exception):
    """A failure to report: ``message`` (the stderr line), ``status``, ``detail`` (the JSON ``error``)."""

    def __init__(self, message: str, status: int = 2, detail: str | None = None):
        super().__init__(message)
        self.status = status
        self.detail = message if detail is None else detail


@contextmanager
def _errors(name: str):
    try:
        yield
    except BrokenPipeError:  # handled quietly by privrec.cli.main
        raise
    except BudgetExceededError as exc:
        msg = f"refused: {_one_line(exc)}"
        raise _Exit(f"privrec {name}: {msg}", EXIT_REFUSED, msg) from None
    except (ValueError, FileNotFoundError, KeyError, OSError, CommandError) as exc:
        msg = cli_wording(_one_line(exc))
        if isinstance(exc, KeyError):
            msg = f"not found: {msg}"
        raise _Exit(f"privrec {name}: error: {msg}", 2, msg) from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.split()) if text else type(exc).__name__


#: the library's advice in Python words -> the same advice as CLI flags
_CLI_WORDS = (
    (re.compile(r"\bduplicates='(\w+)'"), r"--duplicates \1"),
    (re.compile(r"\brating_range=\(low, high\)"), "--rating-range LOW HIGH"),
)


def cli_wording(message: str) -> str:
    """An error or warning of the library as the CLI says it: ``duplicates='sum'`` becomes
    ``--duplicates sum``, ``rating_range=(low, high)`` becomes ``--rating-range LOW HIGH``."""
    for pattern, repl in _CLI_WORDS:
        message = pattern.sub(repl, message)
    return message


def _run(name, fn, args) -> int:
    """Run ``fn(args)``: user errors -> one line and status 2; warnings -> one line each."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"privrec {name}: warning: {cli_wording(' '.join(str(message).split()))}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show
            with _errors(name):
                return fn(args)
    except _Exit as e:  # one line on stderr; with --json also {"error": ..., "exit_status": ...} on stdout
        return report_error(str(e), e.status, bool(getattr(args, "json", False)), e.detail)


def _warn(args, message: str) -> None:
    """One-line warning on stderr, also kept for the JSON output."""
    args._warnings.append(message)
    print(f"privrec {args.command}: warning: {message}", file=sys.stderr)


class _Stages:
    """A tqdm bar over the named stages; off with --quiet, --json or when stderr is not a TTY."""

    def __init__(self, names, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(names), desc=names[0], leave=False, file=sys.stderr)
        self.names = list(names)
        self.i = 0

    def next(self):
        self.i += 1
        if self.bar is not None:
            self.bar.update(1)
            if self.i < len(self.names):
                self.bar.set_description(self.names[self.i])

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _progress_enabled(args) -> bool:
    return not (args.quiet or args.json) and sys.stderr.isatty()
