"""``privrec benchmark {tradeoff,mu,sliced,speed,synthetic} [script options]``.

Dispatches to the scripts in the checkout's ``benchmarks/`` folder (they are not part of the
installed package): ``tradeoff`` / ``mu`` / ``sliced`` run ``bench_tradeoff.py`` with the matching
``--part``; ``speed`` runs ``bench_speed.py``; ``synthetic`` runs ``bench_appendix_c.py`` (the
synthetic experiment of Krichene et al. 2023, Appendix C). Remaining options go to the script
unchanged, e.g. ``privrec benchmark tradeoff --quick``. Results land in ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from privrec.commands._parsers import add_command

_SCRIPTS = {
    "tradeoff": ("bench_tradeoff.py", ["--part", "tradeoff"]),
    "mu": ("bench_tradeoff.py", ["--part", "mu"]),
    "sliced": ("bench_tradeoff.py", ["--part", "sliced"]),
    "speed": ("bench_speed.py", []),
    "synthetic": ("bench_appendix_c.py", []),
}


DESCRIPTION = """\
Run a reproduction benchmark from the checkout's benchmarks/ folder.

  tradeoff   privacy-utility trade-off of the six private methods and ALS
  mu         sweep of the adaptive-weight exponent mu
  sliced     metrics per item-popularity bucket
  speed      fit and evaluation speed against the implicit library
  synthetic  the synthetic multi-task experiment (Krichene et al. 2023, Appendix C)

Options after the benchmark name go to the script unchanged; every script has
--quick (seconds) and --help. Results are written to benchmarks/results/. The
scripts are not installed with the package: run from a privrec checkout or set
PRIVREC_BENCHMARKS to the benchmarks folder.

Examples:
  privrec benchmark tradeoff --quick
  privrec benchmark speed --help
"""


def register(subparsers) -> None:
    p = add_command(subparsers, "benchmark", "run a reproduction benchmark from benchmarks/", DESCRIPTION)
    p.add_argument("which", choices=sorted(_SCRIPTS), help="benchmark to run")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="options passed to the script (e.g. --quick)")
    p.set_defaults(func=cmd_benchmark)


def benchmarks_dir() -> Path | None:
    """The ``benchmarks/`` folder: ``$PRIVREC_BENCHMARKS``, else beside the package, else ./benchmarks."""
    cands = [
        os.environ.get("PRIVREC_BENCHMARKS"),
        Path(__file__).resolve().parents[2] / "benchmarks",
        Path.cwd() / "benchmarks",
    ]
    for c in cands:
        if c and Path(c).is_dir():
            return Path(c)
    return None


def load_script(name: str):
    """Import a benchmark script as a module (its folder goes on ``sys.path`` for its helpers)."""
    folder = benchmarks_dir()
    if folder is None or not (folder / name).is_file():
        raise FileNotFoundError(
            f"benchmark script {name} not found (run from a privrec checkout or set PRIVREC_BENCHMARKS)"
        )
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(f"privrec_bench_{Path(name).stem}", folder / name)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load benchmark script {folder / name}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses in the script look their module up here
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    return mod


@contextmanager
def _one_line_argparse_errors(name: str):
    """While a script runs, its argparse errors are one line (``privrec benchmark NAME: error: ...``)."""
    from unittest import mock  # here, not at import: the CLI imports every command module at start-up

    def error(self, message):
        text = " ".join(str(message).split())
        self.exit(2, f"privrec benchmark {name}: error: {text} (see 'privrec benchmark {name} --help')\n")

    with mock.patch.object(argparse.ArgumentParser, "error", error):
        yield


def cmd_benchmark(args) -> int:
    script, extra = _SCRIPTS[args.which]
    try:
        mod = load_script(script)
    except (FileNotFoundError, ImportError) as exc:
        print(f"privrec benchmark: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    main = getattr(mod, "main", None)
    if main is None:
        print(f"privrec benchmark: error: {script} has no main(argv)", file=sys.stderr)
        return 2
    rest = [a for a in args.script_args if a != "--"]
    try:
        with _one_line_argparse_errors(args.which):
            rc = main(extra + rest)
    except SystemExit as exc:  # argparse inside the script (--help: 0, bad option: 2)
        rc = exc.code if isinstance(exc.code, int) else 2
    except (ValueError, FileNotFoundError) as exc:
        print(f"privrec benchmark: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    # scripts return an exit status or their results (a dict): anything but an int means success
    return rc if isinstance(rc, int) and not isinstance(rc, bool) else 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
