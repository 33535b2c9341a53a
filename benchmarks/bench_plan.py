"""Wall time of whole default fits (issue 38: one plan per fit must not slow a fit down).

Times ``DPALS(epsilon=E).fit`` on the embedded ``synthetic-skew`` data (5,000 users: at ε = 5 the
private bias model, at ε = 20 the automatic selection), the plan memo cleared before every fit (a
user fits once per process). Run it in two checkouts to compare them, e.g. in a ``git worktree`` of
an older commit and in this one; results in ``benchmarks/results/plan.md``.

    python benchmarks/bench_plan.py --epsilons 5 20 --repeats 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[5.0, 20.0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from privrec.data.registry import load_dataset
    from privrec.models import DPALS

    data = load_dataset("synthetic-skew")
    DPALS(epsilon=1.0, show_progress=False).fit(data)  # warm-up: imports and accountant caches
    out = {}
    for eps in args.epsilons:
        times = []
        for _ in range(args.repeats):
            try:
                from privrec.tuning import plan as plan_module

                plan_module._PLANS.clear()
            except (ImportError, AttributeError):  # a checkout without the plan memo
                pass
            model = DPALS(epsilon=eps, show_progress=False)
            t0 = time.perf_counter()
            model.fit(data)
            times.append(time.perf_counter() - t0)
        out[str(eps)] = {"median_s": statistics.median(times), "min_s": min(times), "repeats": args.repeats}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
