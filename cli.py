"""Thin shim so ``python cli.py ...`` works from a checkout; the CLI lives in :mod:`privrec.cli`."""

import sys

from privrec.cli import main

if __name__ == "__main__":
    sys.exit(main())
