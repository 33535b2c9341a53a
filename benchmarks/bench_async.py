"""Asynchronous DP learning with per-owner budgets (spec 003): ridge regression, relative fitness psi.

Three parts, all with :class:`privrec.convex.AsyncDPLearner` (per-example L1 clipping, box
projection, c = 1/2 "proof" coefficient), f(theta) = (sigma/2)||theta||^2 + (1/n) sum (y - theta^T x)^2,
psi(theta) = f(theta) / f(theta*) - 1 on the union of the owners' data (theta* = exact ridge optimum).
Step constant: rho = 0.5 T^2 sigma, i.e. a data-independent step 0.5 = 1 / (smoothness bound 2 + sigma)
with features clipped to ||x|| <= 1 (the paper's rho = 3e3 is for its own feature scaling).

1. ``trajectory``: real data -- ``../shared/datasets/insurance/insurance.csv`` (1,338 records; target
   ``charges``; one-hot categorical features; if the folder is absent: scikit-learn's bundled
   ``diabetes``, 442 records) -- features standardised and scaled to ||x|| <= 1, target divided by
   its max |y| (non-private pre-processing, as in the paper), split contiguously over N = 3 owners;
   percentiles 25/50/75 and mean of psi(theta_{L,k}) over 100 runs vs k, eps in {0.1, 1, 10}, T = 1000.
   With n ~ 10^3 (the paper had 7.5 * 10^5) the per-answer budget eps_i / T makes the noise large, so
   the step is chosen per eps from rho in {0.5, 0.05, 0.005} T^2 sigma by the final mean psi
   (non-private tuning, reported).
2. ``scaling``: a documented synthetic generator (x ~ N(0, I_5)/sqrt(5) clipped to ||x|| <= 1,
   y = <theta_0, x> + 0.1 N(0, 1), theta_0 ~ N(0, I)/2), N = 3 owners of n_i records each,
   n_i in {1000, 3000, 10000}, eps in {0.1, 0.3, 1, 3, 10}: E psi(theta_{L,T}) minus the noise-free
   floor (eps = inf, same T), fitted by c * sum_i 1/eps_i^2 / n^2 (spec 003, Theorem 2 large-T term);
   reported: c, the log-log slope (theory: 1) and R^2.
3. ``region``: same generator, n_i = 2000 per owner; owner 1 alone reaches psi(theta*_1) (its own
   ridge optimum, evaluated on the union); the learner with N in {2, 3, 5, 8, 12} owners, all at
   eps in {0.1, 1, 10, 100}, reaches E psi(theta_{L,T}); the table marks where owner 1 gains. Run
   twice: homogeneous owners, and heterogeneous owners (owner j's coefficients theta_0 + 0.3 g_j,
   g_j ~ N(0, I)/2), the analogue of the paper's contiguous split of real data, where owner 1's own
   optimum is biased for the union.

The scaling fit uses the cells whose excess is below 1 (the small-noise regime of Theorem 2's
leading term); with larger noise the per-example clipping caps the restoring gradient and psi grows
faster than the noise variance (the all-cells slope is reported too).

Claims (spec 003, qualitative): psi decreases with k; larger eps is better; E psi ~ 1/(n^2 eps^2);
collaboration beats isolation once N and eps are large enough. Reported as measured. Noise uses
fixed seeds (experiments only: a known seed voids the guarantee).

Accounting: every ``simulate`` call records each run's Laplace answers in per-owner ledgers
(``AsyncDPLearner.simulation_report``); each result carries, from the accountant at the learner's
delta, the largest single-run epsilon over owners (the guarantee of one run, as in the paper) and
the epsilon of publishing all the call's runs together (their composition). The trajectory step
tuning makes three such calls per eps; all three are reported.

    python benchmarks/bench_async.py --quick
    python benchmarks/bench_async.py

Writes ``benchmarks/results/async[_quick].{json,md,png}``.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
import _publish as P

from privrec.convex import AsyncDPLearner, ridge_objective, ridge_optimum

SIGMA = 1e-2
FULL = dict(
    T=1000,
    runs=100,
    traj_eps=(0.1, 1.0, 10.0),
    n_owners=3,
    scale_sizes=(1000, 3000, 10000),
    scale_eps=(0.1, 0.3, 1.0, 3.0, 10.0),
    scale_runs=20,
    region_n_i=2000,
    region_owners=(2, 3, 5, 8, 12),
    region_eps=(0.1, 1.0, 10.0, 100.0),
    region_runs=10,
    grad_bound=1.0,
)
QUICK = dict(
    T=100,
    runs=5,
    traj_eps=(1.0, 10.0),
    n_owners=3,
    scale_sizes=(300, 1000),
    scale_eps=(1.0, 10.0),
    scale_runs=3,
    region_n_i=300,
    region_owners=(2, 5),
    region_eps=(1.0, 100.0),
    region_runs=3,
    grad_bound=1.0,
)


def _scale_rows(X):
    X = (X - X.mean(axis=0)) / np.maximum(X.std(axis=0), 1e-12)
    n = np.linalg.norm(X, axis=1)
    return X / max(float(n.max()), 1e-12)


def load_real():
    """insurance.csv if the shared folder exists, else scikit-learn's diabetes."""
    root = C.shared_datasets()
    path = root / "insurance" / "insurance.csv" if root else None
    if path is not None and path.exists():
        import pandas as pd

        df = pd.read_csv(path)
        y = df.pop("charges").to_numpy(dtype=np.float64)
        X = pd.get_dummies(df, columns=["sex", "smoker", "region"], drop_first=True, dtype=float).to_numpy()
        name = "insurance"
    else:
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True)
        name = "diabetes (sklearn; shared insurance.csv not found)"
    X = _scale_rows(X.astype(np.float64))
    y = y / np.max(np.abs(y))
    return name, X, y


def synthetic(n_total: int, rng, p: int = 5, owner=None, heterogeneity: float = 0.0):
    """x ~ N(0, I_p)/sqrt(p) clipped to the unit ball, y = <theta_0 (+ owner shift), x> + 0.1 N(0, 1)."""
    X = rng.standard_normal((n_total, p)) / math.sqrt(p)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    theta0 = np.random.default_rng(12345).standard_normal(p) / 2
    coef = np.broadcast_to(theta0, (n_total, p))
    if heterogeneity > 0 and owner is not None:
        shifts = np.random.default_rng(54321).standard_normal((int(owner.max()) + 1, p)) / 2
        coef = theta0 + heterogeneity * shifts[owner]
    y = np.einsum("ij,ij->i", X, coef) + 0.1 * rng.standard_normal(n_total)
    return X, y


def _learner(cfg, eps, seed, step=0.5):
    T = cfg["T"]
    return AsyncDPLearner(
        epsilon=eps,
        n_steps=T,
        rho=step * T**2 * SIGMA,
        sigma=SIGMA,
        theta_max=1e5,
        grad_bound=cfg["grad_bound"],
        random_state=seed,
    )


def _simulate(learner, X, y, owner, runs, checkpoints=None):
    """``learner.simulate`` plus its accounting (max over owners, accountant epsilons)."""
    traj = learner.simulate(X, y, owner, runs, checkpoints)
    rep = learner.simulation_report()
    return traj, {
        "epsilon_per_run_max": _max_eps(r["epsilon_per_run_max"] for r in rep.values()),
        "epsilon_all_runs": _max_eps(r["epsilon"] for r in rep.values()),
        "runs": int(runs),
    }


def _max_eps(values) -> float:
    return max(math.inf if v == "inf" else float(v) for v in values)


def _psi(thetas, X, y, f_star):
    return ridge_objective(thetas, X, y, SIGMA) / f_star - 1.0


def part_trajectory(cfg, quiet):
    name, X, y = load_real()
    owner = np.minimum(np.arange(y.size) * cfg["n_owners"] // y.size, cfg["n_owners"] - 1)  # contiguous
    f_star = float(ridge_objective(ridge_optimum(X, y, SIGMA), X, y, SIGMA))
    ks = sorted(set(np.unique(np.linspace(1, cfg["T"], 20).astype(int)).tolist()))
    out = {"dataset": name, "n": int(y.size), "p": int(X.shape[1]), "k": ks, "curves": {}}
    for eps in cfg["traj_eps"]:
        best, tried = None, []
        for step in (0.5, 0.05, 0.005):
            traj, acct = _simulate(_learner(cfg, eps, 0, step), X, y, owner, cfg["runs"], ks)
            tried.append({"step": step, **acct})
            psi = np.stack([_psi(traj[k], X, y, f_star) for k in ks])  # (K, runs)
            if best is None or psi[-1].mean() < best[1][-1].mean():
                best = (step, psi)
        step, psi = best
        out["curves"][str(eps)] = {
            "step": step,
            "accounting": tried,
            "mean": psi.mean(axis=1).tolist(),
            "p25": np.percentile(psi, 25, axis=1).tolist(),
            "p50": np.percentile(psi, 50, axis=1).tolist(),
            "p75": np.percentile(psi, 75, axis=1).tolist(),
        }
        C.log(f"trajectory eps={eps}: final mean psi {psi[-1].mean():.4g}", quiet)
    return out


def part_scaling(cfg, quiet):
    rows = []
    N = cfg["n_owners"]
    for n_i in cfg["scale_sizes"]:
        X, y = synthetic(N * n_i, np.random.default_rng(n_i))
        owner = np.repeat(np.arange(N), n_i)
        f_star = float(ridge_objective(ridge_optimum(X, y, SIGMA), X, y, SIGMA))
        floor = float(np.mean(_psi(_learner(cfg, math.inf, 0).simulate(X, y, owner, 1)[cfg["T"]], X, y, f_star)))
        for eps in cfg["scale_eps"]:
            traj, acct = _simulate(_learner(cfg, eps, 1), X, y, owner, cfg["scale_runs"])
            e_psi = float(np.mean(_psi(traj[cfg["T"]], X, y, f_star)))
            rows.append(
                dict(
                    n_i=n_i,
                    n=N * n_i,
                    epsilon=eps,
                    mean_psi=e_psi,
                    floor=floor,
                    excess=e_psi - floor,
                    x=N / eps**2 / (N * n_i) ** 2,
                    accounting=acct,
                )
            )
        C.log(f"scaling n_i={n_i} done", quiet)
    xs = np.array([r["x"] for r in rows])
    ex = np.array([r["excess"] for r in rows])
    pos = ex > 0
    slope_all = float(np.polyfit(np.log(xs[pos]), np.log(ex[pos]), 1)[0]) if pos.sum() >= 2 else float("nan")
    ok = pos & (ex < 1.0)
    if ok.sum() < 2:  # too few small-noise cells (quick mode): fall back to every cell
        ok = pos
    lx, ly = np.log(xs[ok]), np.log(ex[ok])
    slope = float(np.polyfit(lx, ly, 1)[0])
    c = float(np.exp(np.median(ly - lx)))  # fit with slope fixed at 1
    pred = np.log(c) + lx
    r2 = float(1 - np.sum((ly - pred) ** 2) / max(np.sum((ly - ly.mean()) ** 2), 1e-300))
    return {
        "rows": rows,
        "fit": {
            "c": c,
            "loglog_slope": slope,
            "r2_slope_one": r2,
            "cells_fitted": int(ok.sum()),
            "loglog_slope_all_cells": slope_all,
        },
    }


def part_region(cfg, quiet, heterogeneity=0.0):
    rows = []
    n_i = cfg["region_n_i"]
    for N in cfg["region_owners"]:
        owner = np.repeat(np.arange(N), n_i)
        X, y = synthetic(N * n_i, np.random.default_rng(1000 + N), owner=owner, heterogeneity=heterogeneity)
        f_star = float(ridge_objective(ridge_optimum(X, y, SIGMA), X, y, SIGMA))
        alone = float(_psi(ridge_optimum(X[:n_i], y[:n_i], SIGMA), X, y, f_star))
        for eps in cfg["region_eps"]:
            traj, acct = _simulate(_learner(cfg, eps, 2), X, y, owner, cfg["region_runs"])
            e_psi = float(np.mean(_psi(traj[cfg["T"]], X, y, f_star)))
            rows.append(
                dict(
                    owners=N,
                    epsilon=eps,
                    psi_collaborative=e_psi,
                    psi_alone=alone,
                    owner1_gains=bool(e_psi < alone),
                    accounting=acct,
                )
            )
        C.log(f"region (heterogeneity {heterogeneity}) N={N} done", quiet)
    return {"rows": rows, "n_i": n_i, "heterogeneity": heterogeneity}


def analyse(res):
    tr = res["trajectory"]["curves"]
    eps_sorted = sorted(tr, key=float)
    decreasing = {e: bool(tr[e]["p50"][-1] < tr[e]["p50"][0]) for e in tr}
    final = [tr[e]["mean"][-1] for e in eps_sorted]
    better_with_eps = bool(all(a >= b for a, b in zip(final, final[1:])))
    fit = res["scaling"]["fit"]
    out = {
        "psi_decreases_with_k": decreasing,
        "larger_eps_better": better_with_eps,
        "scaling_slope_near_one": bool(abs(fit["loglog_slope"] - 1) < 0.25),
        "scaling_fit": fit,
    }
    for key in ("region", "region_heterogeneous"):
        region = res[key]["rows"]
        big = max(r["owners"] for r in region), max(r["epsilon"] for r in region)
        small = min(r["owners"] for r in region), min(r["epsilon"] for r in region)
        g = {(r["owners"], r["epsilon"]): r["owner1_gains"] for r in region}
        out[key] = {
            "gains_at_large_N_eps": bool(g[big]),
            "no_gain_at_small_N_eps": bool(not g[small]),
            "gain_cells": int(sum(g.values())),
            "cells": len(region),
            "gain_region": sorted([list(k) for k, v in g.items() if v]),
        }
    return out


def markdown(res, claims):
    cfg = res["config"]
    tr = res["trajectory"]
    L = [
        f"# Asynchronous DP learner ({'quick' if res.get('quick') else 'full'} run)",
        "",
        f"Ridge, sigma={SIGMA}, T={cfg['T']}, rho=0.5 T^2 sigma, per-example L1 clip {cfg['grad_bound']}, "
        f"c=1/2. Run time {res['seconds']:.0f} s.",
        "",
        f"## psi(theta_L,k) over {cfg['runs']} runs: {tr['dataset']} (n={tr['n']}, p={tr['p']}, N={cfg['n_owners']})",
        "",
        "| eps | k | mean | p25 | p50 | p75 |",
        "|---|---|---|---|---|---|",
    ]
    ks = tr["k"]
    show = sorted({0, len(ks) // 4, len(ks) // 2, len(ks) - 1})
    for e, cur in tr["curves"].items():
        for i in show:
            L.append(
                f"| {e} (step {cur['step']:g}) | {ks[i]} | {cur['mean'][i]:.4g} | {cur['p25'][i]:.4g} | {cur['p50'][i]:.4g} | "
                f"{cur['p75'][i]:.4g} |"
            )
    L += [
        "",
        "Accounting (RDP accountant over each simulate call's recorded Laplace events, delta = "
        f"{res.get('delta', 'learner default')}): largest single-run epsilon over owners / epsilon of "
        "publishing all the call's runs together:",
        "",
        "| eps | step | eps one run (max owner) | eps all runs |",
        "|---|---|---|---|",
    ]
    for e, cur in tr["curves"].items():
        for a in cur.get("accounting", []):
            L.append(f"| {e} | {a['step']:g} | {a['epsilon_per_run_max']:.4g} | {a['epsilon_all_runs']:.4g} |")
    fit = res["scaling"]["fit"]
    L += [
        "",
        f"## E psi vs eps and n (synthetic, N={cfg['n_owners']}, {cfg['scale_runs']} runs; excess over the "
        "noise-free floor)",
        "",
        "| n_i | eps | E psi | floor | excess | sum(1/eps^2)/n^2 |",
        "|---|---|---|---|---|---|",
    ]
    for r in res["scaling"]["rows"]:
        L.append(
            f"| {r['n_i']} | {r['epsilon']:g} | {r['mean_psi']:.4g} | {r['floor']:.3g} | {r['excess']:.4g} | "
            f"{r['x']:.3g} |"
        )
    L.append(
        f"\nFit excess = c sum_i 1/eps_i^2 / n^2 on the {fit['cells_fitted']} cells with excess < 1: "
        f"c = {fit['c']:.4g}; free log-log slope {fit['loglog_slope']:.3f} (theory 1); R^2 with slope 1: "
        f"{fit['r2_slope_one']:.3f}. All cells: slope {fit['loglog_slope_all_cells']:.3f}."
    )
    for key in ("region", "region_heterogeneous"):
        reg = res[key]
        L += [
            "",
            f"## Does owner 1 gain by collaborating? (n_i = {reg['n_i']}, owner heterogeneity "
            f"{reg['heterogeneity']}; alone = its own ridge optimum)",
            "",
            "| owners N | eps | E psi collaborative | psi alone | gains |",
            "|---|---|---|---|---|",
        ]
        for r in reg["rows"]:
            L.append(
                f"| {r['owners']} | {r['epsilon']:g} | {r['psi_collaborative']:.4g} | {r['psi_alone']:.4g} | "
                f"{'yes' if r['owner1_gains'] else 'no'} |"
            )
    accts = [r["accounting"] for part in ("scaling", "region", "region_heterogeneous") for r in res[part]["rows"]]
    worst = max(
        (
            a["epsilon_per_run_max"] / r_eps
            for a, r_eps in zip(
                accts,
                [r["epsilon"] for part in ("scaling", "region", "region_heterogeneous") for r in res[part]["rows"]],
            )
        ),
        default=float("nan"),
    )
    L += ["", f"Scaling / region cells: largest ratio (accountant epsilon of one run) / (owner budget) = {worst:.4g}."]
    L += [
        "",
        "## Claims (measured)",
        "",
        f"- psi decreases with k (median): {claims['psi_decreases_with_k']}",
        f"- larger eps gives lower final E psi: {claims['larger_eps_better']}",
        f"- E psi excess ~ sum 1/eps^2 / n^2 (slope within 0.25 of 1): {claims['scaling_slope_near_one']} "
        f"(slope {fit['loglog_slope']:.3f})",
    ] + [
        f"- {key}: owner 1 gains at the largest N and eps: {claims[key]['gains_at_large_N_eps']}; not at the "
        f"smallest: {claims[key]['no_gain_at_small_N_eps']} ({claims[key]['gain_cells']}/{claims[key]['cells']} "
        f"cells gain: {claims[key]['gain_region']})"
        for key in ("region", "region_heterogeneous")
    ]
    return "\n".join(L) + "\n"


def plot(res, path):
    plt = P.pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    tr = res["trajectory"]
    for e, cur in tr["curves"].items():
        line = ax[0].plot(tr["k"], cur["p50"], label=f"eps={e} (median)")[0]
        ax[0].fill_between(tr["k"], cur["p25"], cur["p75"], alpha=0.2, color=line.get_color())
    ax[0].set_yscale("log")
    ax[0].set_xlabel("k")
    ax[0].set_ylabel("psi")
    ax[0].set_title(tr["dataset"][:30])
    ax[0].legend(fontsize=8)
    rows = res["scaling"]["rows"]
    for n_i in sorted({r["n_i"] for r in rows}):
        sel = [r for r in rows if r["n_i"] == n_i]
        ax[1].loglog([r["x"] for r in sel], [max(r["excess"], 1e-12) for r in sel], "o-", label=f"n_i={n_i}")
    xs = np.array(sorted(r["x"] for r in rows))
    ax[1].loglog(xs, res["scaling"]["fit"]["c"] * xs, "k--", label="c sum 1/eps^2 / n^2")
    ax[1].set_xlabel("sum_i 1/eps_i^2 / n^2")
    ax[1].set_ylabel("E psi - floor")
    ax[1].legend(fontsize=8)
    reg = res["region"]["rows"]
    for eps in sorted({r["epsilon"] for r in reg}):
        sel = [r for r in reg if r["epsilon"] == eps]
        ax[2].semilogy([r["owners"] for r in sel], [r["psi_collaborative"] for r in sel], "o-", label=f"eps={eps:g}")
    alone = [r for r in reg if r["epsilon"] == reg[0]["epsilon"]]
    ax[2].semilogy([r["owners"] for r in alone], [r["psi_alone"] for r in alone], "k--", label="owner 1 alone")
    ax[2].set_xlabel("owners N")
    ax[2].set_ylabel("psi")
    ax[2].legend(fontsize=8)
    return P.save_figure(fig, path)


def main(argv=None) -> int:
    args = P.parser(__doc__).parse_args(argv)
    cfg = QUICK if args.quick else FULL
    t0 = time.time()
    res = {"config": cfg, "sigma": SIGMA, "quick": bool(args.quick), "delta": AsyncDPLearner().delta}
    res["trajectory"] = part_trajectory(cfg, args.quiet)
    res["scaling"] = part_scaling(cfg, args.quiet)
    res["region"] = part_region(cfg, args.quiet)
    res["region_heterogeneous"] = part_region(cfg, args.quiet, heterogeneity=0.3)
    res["seconds"] = time.time() - t0
    res["environment"] = C.environment()
    return P.publish(res, "async_quick" if args.quick else "async", args, analyse, markdown, plot)


if __name__ == "__main__":
    raise SystemExit(main())
