"""Subcommand modules of the ``privrec`` CLI.

Each module listed in :data:`COMMAND_MODULES` exposes ``register(subparsers)`` that adds its
subcommand(s) with ``set_defaults(func=handler)``; ``handler(args) -> int`` is the exit status.
Adding a command is one line here. Every listed module must import: :func:`privrec.cli.main`
stops with exit status 1 and the traceback when one does not (a broken installation must not
look like a missing feature).
"""

#: modules of :mod:`privrec.commands` whose ``register(subparsers)`` the CLI calls, in order
COMMAND_MODULES = [
    "datasets",
    "fit",
    "evaluate",
    "recommend",
    "benchmark",
    "export",
    "compare",
]
