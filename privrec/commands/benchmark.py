"""``privrec benchmark {tradeoff,mu,sliced,speed,synthetic} [script options]`` (issue 5).

Dispatches to the scripts in the checkout's ``benchmarks/`` folder (they are not part of the
installed package): ``tradeoff`` / ``mu`` / ``sliced`` run ``bench_tradeoff.py`` with the matching
``--part``; ``speed`` runs ``bench_speed.py``; ``synthetic`` runs ``bench_appendix_c.py`` (spec 004
§7 Appendix C). Remaining options go to the script unchanged, e.g.
``privrec benchmark tradeoff --quick``. Results land in ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

_SCRIPTS = {
    "tradeoff": ("bench_tradeoff.py", ["--part", "tradeoff"]),
    "mu": ("bench_tradeoff.py", ["--part", "mu"]),
    "sliced": ("bench_tradeoff.py", ["--part", "sliced"]),
    "speed": ("bench_speed.py", []),
    "synthetic": ("bench_appendix_c.py", []),
}


def register(subparsers) -> None:
    p = subparsers.add_parser("benchmark", help="run a reproduction benchmark from benchmarks/",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("which", choices=sorted(_SCRIPTS), help="benchmark to run")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="options passed to the script (e.g. --quick)")
    p.set_defaults(func=cmd_benchmark)


def benchmarks_dir() -> Path | None:
    """The ``benchmarks/`` folder: ``$PRIVREC_BENCHMARKS``, else beside the package, else ./benchmarks."""
    cands = [os.environ.get("PRIVREC_BENCHMARKS"), Path(__file__).resolve().parents[2] / "benchmarks",
             Path.cwd() / "benchmarks"]
    for c in cands:
        if c and Path(c).is_dir():
            return Path(c)
    return None


def load_script(name: str):
    """Import a benchmark script as a module (its folder goes on ``sys.path`` for its helpers)."""
    folder = benchmarks_dir()
    if folder is None or not (folder / name).is_file():
        raise FileNotFoundError(f"benchmark script {name} not found (run from a privrec checkout "
                                "or set PRIVREC_BENCHMARKS)")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(f"privrec_bench_{Path(name).stem}", folder / name)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses in the script look their module up here
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    return mod


def cmd_benchmark(args) -> int:
    script, extra = _SCRIPTS[args.which]
    try:
        mod = load_script(script)
    except (FileNotFoundError, ImportError) as exc:
        print(f"privrec benchmark: error: {exc}", file=sys.stderr)
        return 2
    main = getattr(mod, "main", None)
    if main is None:
        print(f"privrec benchmark: error: {script} has no main(argv)", file=sys.stderr)
        return 2
    rest = [a for a in args.script_args if a != "--"]
    try:
        rc = main(extra + rest)
    except SystemExit as exc:  # argparse inside the script
        rc = exc.code if isinstance(exc.code, int) else 2
    except ValueError as exc:
        print(f"privrec benchmark: error: {exc}", file=sys.stderr)
        return 2
    # scripts return an exit status or their results (a dict): anything but an int means success
    return rc if isinstance(rc, int) and not isinstance(rc, bool) else 0
