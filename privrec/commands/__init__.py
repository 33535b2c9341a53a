"""Subcommand modules of the ``privrec`` CLI.

Each module listed in :data:`COMMAND_MODULES` exposes ``register(subparsers)`` that adds its
subcommand(s) with ``set_defaults(func=handler)``; ``handler(args) -> int`` is the exit status.
Adding a command is one line here. A listed module that is absent is skipped.
"""

COMMAND_MODULES = [
    "datasets",
    "models",
    "benchmark",
]
