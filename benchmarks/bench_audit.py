"""Empirical privacy audit of privrec's private estimators (:mod:`privrec.privacy.audit`).

For every mechanism: two neighbouring datasets, D (canary absent, or the original record) and D'
(canary present, or the record replaced), ``runs`` fits on each with noise from OS entropy
(``random_state=None``; seeds play no part), one scalar statistic of the *released* output per fit,
the test "statistic above a threshold -> canary present" with orientation and threshold chosen on
the first half of the runs and evaluated on the second half, and the one-sided Clopper-Pearson
lower bound on epsilon at 95% confidence (both rates' upper bounds holding jointly):

    eps_lower = max( log((1 - delta - FPR_up) / FNR_up), log((1 - delta - FNR_up) / FPR_up) )

``eps_lower > eps_reported`` would prove (at 95%) that the estimator's privacy report is wrong.
``eps_lower <= eps_reported`` only says this canary found no violation: a black-box audit that
sees one final output per fit is a *lower* bound, loose for a correct mechanism at moderate
epsilon. Two extra columns make the strength of each canary visible: d' (mean shift of the
statistic between D and D' over its pooled standard deviation) and the epsilon a mu-GDP mechanism
with mu = d' would have (a Gaussian-model point estimate, not a bound). A ``control`` row (a scalar
Gaussian mechanism whose noise is 10x too small for the epsilon it claims) shows that the test
catches a real violation, and a ``power`` row runs the DPALS canary at a large epsilon.

Canaries (each chosen to saturate the mechanism's sensitivity in a direction the statistic knows):

* DPALS (each method; user-level add/remove): 200 users all rate the same 20 items with 0.2; the
  canary user rates the same 20 items with 5 (the rating bound). Settings that make the canary strongest (the
  guarantee must hold for every setting): one factor, one ALS step, one GD step (``dpsgd-*``),
  no centering / biases, near-zero user ridge and initial factors so every user's embedding
  saturates the clip with the same sign, budget 20 (= the canary's items, weight 1 each) and the
  RDP accountant (the default PLD calibration is far slower per fit and only changes the noise
  scale by a few percent). Statistic: ``|sum of the 20 released item factors|``: every embedding
  has the same sign, so each item factor is about (sum of ratings x embedding) / (sum of squared
  embeddings), and the canary's 5s (everyone else: 0.2) raise all 20 factors together -- the
  right-hand-side release's full sensitivity, in a known direction (the low ratings of the others
  keep the factors small, so the noisy Gramian in the denominator adds little variance). The noisy-GD item step
  (``dpsgd-*``) bounds the whole per-example gradient Gamma_x (R Gamma_x + B) with R = B / Gamma_x,
  and a one-step canary starting from ~0 moves only the label half of it, so those rows are
  weaker by construction.
* MultiTaskDPRegressor (user-level): 100 users in tasks 1-5; the canary is the only user of task
  0, with feature (1, 0) = the clip and label 1 = the label bound, so its whole budget is one
  example. Large public ridge (SSP) / one GD step with a constant step (noisy GD) keep the release
  linear in the noisy right-hand side; noisy GD: one step from 0, small constant step, radius
  0.01 (so the gradient bound Gamma_x (R Gamma_x + B) is almost all the label term the canary
  saturates). Statistic: first coordinate of task 0's parameters.
* JointDPSGD (replace one record; ``joint`` and ``full`` regimes): 4 owners with one record each
  (x = 1, y = -1000, so every clipped joint gradient is constant), all owners every step (no
  sampling), last iterate; the canary replaces owner 0's label by +1000 (gradient reversed: the
  full 2L sensitivity). Statistic: the shared weight (joint: the personal block of owner 0 is not
  part of the joint-DP release) or shared weight + owner 0's personal bias (full DP).
* FederatedDPRegressor (ISRL-DP MB-SGD, replace one record in one silo): 2 silos of 5 records
  (x = 1, y = -1000), full batches (K = n_i), the canary replaces one record of silo 0 by
  y = +1000. Statistic: coef + intercept. Reported epsilon: silo 0's.

    python benchmarks/bench_audit.py --quick     # seconds, for CI
    python benchmarks/bench_audit.py             # the full audit (a few minutes)

Writes ``benchmarks/results/audit[_quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

from privrec.privacy.audit import gdp_epsilon, run_audit, separation

DELTA = 1e-5
EPSILON = 4.0
DPALS_METHODS = ("dpals-uniform", "dpals-tail", "ada-dpals", "dpsgd-uniform", "dpsgd-tail", "ada-dpsgd")
# settings under which the DPALS canary is strongest (applied when DPALS accepts them)
DPALS_AUDIT_SETTINGS = dict(
    factors=1,
    iterations=1,
    gd_iterations=1,
    biases=False,
    center=False,
    regularization=1e-5,
    reg_exponent=0.0,
    user_regularization=1e-12,
    user_reg_exponent=0.0,
    init_scale=1e-6,
    budget=20,
    accountant="rdp",
)
FULL = dict(runs=600, joint_runs=1500, control_runs=4000, power_runs=300)
QUICK = dict(runs=40, joint_runs=60, control_runs=4000, power_runs=40)


# ------------------------------------------------------------------------------------------ DPALS
def _dpals_data(n_users: int = 200, n_items: int = 20, canary: bool = False) -> sp.csr_matrix:
    """Every user rates the same ``n_items`` items with 0.2; the canary rates them with 5 (the bound)."""
    rows = np.repeat(np.arange(n_users), n_items)
    cols = np.tile(np.arange(n_items), n_users)
    vals = np.full(rows.size, 0.2)
    if canary:
        rows = np.r_[rows, np.full(n_items, n_users)]
        cols = np.r_[cols, np.arange(n_items)]
        vals = np.r_[vals, np.full(n_items, 5.0)]
    return sp.csr_matrix((vals, (rows, cols)), shape=(n_users + int(canary), n_items))


def _dpals_settings():
    from privrec.models import DPALS

    accepted = set(inspect.signature(DPALS.__init__).parameters)
    used = {k: v for k, v in DPALS_AUDIT_SETTINGS.items() if k in accepted}
    return DPALS, used, sorted(set(DPALS_AUDIT_SETTINGS) - set(used))


def dpals_case(method: str, epsilon: float = EPSILON, label: str | None = None) -> dict:
    DPALS, used, dropped = _dpals_settings()

    def fit_release(data, seed):  # seed unused: all randomness (noise, init, sampling) is OS entropy
        model = DPALS(method=method, epsilon=epsilon, delta=DELTA, random_state=None, **used).fit(
            data, show_progress=False
        )
        return float(np.linalg.norm(np.asarray(model.item_factors_, dtype=np.float64).sum(axis=0)))

    def reported():
        model = DPALS(method=method, epsilon=epsilon, delta=DELTA, random_state=None, **used)
        return float(model.fit(_dpals_data(canary=True), show_progress=False).privacy_report()["epsilon"])

    return dict(
        name=label or f"DPALS {method}",
        family="dpals",
        epsilon=epsilon,
        fit_release=fit_release,
        d0=_dpals_data(),
        d1=_dpals_data(canary=True),
        reported=reported,
        neighbouring="add/remove one user",
        canary="user rating the 20 items everyone rates 0.2 with 5",
        statistic="|sum of released item factors|",
        settings={**used, "dropped (not accepted)": dropped},
    )


# -------------------------------------------------------------------------------------- multitask
def _multitask_problems():
    from privrec.convex import MultiTaskProblem

    rng = np.random.default_rng(0)  # data only
    n, m, d = 100, 6, 2
    tasks = np.concatenate([rng.choice(np.arange(1, m), 2, replace=False) for _ in range(n)])
    users = np.repeat(np.arange(n), 2)
    X = rng.standard_normal((tasks.size, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = rng.uniform(-1, 1, tasks.size)
    p0 = MultiTaskProblem(tasks, users, y, features=X, n_tasks=m)
    p1 = MultiTaskProblem(np.r_[tasks, 0], np.r_[users, n], np.r_[y, 1.0], features=np.r_[X, [[1.0, 0.0]]], n_tasks=m)
    return p0, p1


def multitask_case(solver: str, epsilon: float = EPSILON) -> dict:
    from privrec.convex import MultiTaskDPRegressor

    # SSP: a large public ridge keeps theta linear in the noisy right-hand side; noisy GD: one step
    # from 0 with a small constant step and a small radius, so the per-example gradient bound
    # Gamma_x (R Gamma_x + B) is almost all label term, which the canary saturates
    extra = dict(reg=100.0) if solver == "ssp" else dict(iterations=1, schedule=1e-4, radius=0.01)

    def make():
        return MultiTaskDPRegressor(solver=solver, epsilon=epsilon, delta=DELTA, random_state=None, **extra)

    def fit_release(problem, seed):
        return float(make().fit(problem=problem).params_[0, 0])

    p0, p1 = _multitask_problems()
    return dict(
        name=f"MultiTaskDPRegressor ({solver})",
        family="multitask",
        epsilon=epsilon,
        fit_release=fit_release,
        d0=p0,
        d1=p1,
        reported=lambda: float(make().fit(problem=p1).privacy_report()["epsilon"]),
        neighbouring="add/remove one user",
        canary="sole user of task 0 with x = (1, 0) (the clip), y = 1 (the label bound)",
        statistic="task 0's first parameter",
        settings=extra,
    )


# ------------------------------------------------------------------------------------------ joint
def joint_case(regime: str, epsilon: float = EPSILON) -> dict:
    from privrec.convex import JointDPSGD, PersonalBiasLinear

    X = np.ones((4, 1))
    owner = np.arange(4)
    y0 = np.full(4, -1000.0)
    y1 = y0.copy()
    y1[0] = 1000.0
    settings = dict(n_steps=50, owners_per_step=4, records_per_owner=1, clip_norm=1.0, average=False)

    def make():
        return JointDPSGD(
            PersonalBiasLinear(1), regime=regime, epsilon=epsilon, delta=DELTA, random_state=None, **settings
        )

    def fit_release(y, seed):
        est = make().fit(X, y, owner)
        s = float(np.asarray(est.shared_).ravel()[0])
        return s + float(np.asarray(est.personal_)[0].ravel()[0]) if regime == "full" else s

    return dict(
        name=f"JointDPSGD (regime={regime!r})",
        family="joint",
        epsilon=epsilon,
        fit_release=fit_release,
        d0=y0,
        d1=y1,
        reported=lambda: float(make().fit(X, y1, owner).privacy_report()["epsilon"]),
        neighbouring="replace one record",
        canary="owner 0's only record: label -1000 -> +1000 (clipped gradient reversed)",
        statistic="shared weight" + (" + owner 0's personal bias" if regime == "full" else ""),
        settings=settings,
    )


# -------------------------------------------------------------------------------------- federated
def federated_case(epsilon: float = EPSILON) -> dict:
    from privrec.convex.federated import FederatedDPRegressor

    X = np.ones((10, 1))
    silos = np.repeat([0, 1], 5)
    y0 = np.full(10, -1000.0)
    y1 = y0.copy()
    y1[0] = 1000.0
    settings = dict(
        algorithm="mb_sgd", rounds=20, batch_size=5, step_size=0.1, clip=1.0, sampling="without_replacement"
    )

    def make():
        return FederatedDPRegressor(epsilon=epsilon, delta=DELTA, random_state=None, **settings)

    def fit_release(y, seed):
        est = make().fit(X, y, silos)
        return float(np.asarray(est.coef_).ravel()[0] + np.asarray(est.intercept_).ravel()[0])

    return dict(
        name="FederatedDPRegressor (ISRL-DP MB-SGD)",
        family="federated",
        epsilon=epsilon,
        fit_release=fit_release,
        d0=y0,
        d1=y1,
        reported=lambda: float(np.asarray(make().fit(X, y1, silos).epsilons_)[0]),
        neighbouring="replace one record of silo 0",
        canary="one record of silo 0: label -1000 -> +1000 (clipped gradient reversed)",
        statistic="coef + intercept",
        settings=settings,
    )


# ---------------------------------------------------------------------------------------- control
def control_case(epsilon: float = EPSILON) -> dict:
    """A scalar Gaussian mechanism (sensitivity 1) claiming ``epsilon`` with 10x too little noise."""
    from privrec.privacy import calibrate_noise_multiplier, gaussian_event

    z = calibrate_noise_multiplier(epsilon, DELTA, gaussian_event) / 10.0

    def fit_release(value, seed):
        return float(value + np.random.default_rng().normal(0.0, z))

    return dict(
        name="control: Gaussian with 10x too little noise",
        family="control",
        epsilon=epsilon,
        fit_release=fit_release,
        d0=0.0,
        d1=1.0,
        reported=lambda: epsilon,
        neighbouring="value 0 -> 1 (sensitivity 1)",
        canary="the full sensitivity",
        statistic="the released value",
        settings={"noise_multiplier": z},
        expect_violation=True,
    )


# ------------------------------------------------------------------------------------------- run
def cases(cfg: dict) -> list[tuple[dict, int]]:
    out = [(dpals_case(m), cfg["runs"]) for m in DPALS_METHODS]
    out.append((dpals_case("ada-dpals", 50.0, "power: DPALS ada-dpals at eps = 50"), cfg["power_runs"]))
    out += [(multitask_case("ssp"), cfg["runs"]), (multitask_case("noisy_gd"), cfg["runs"])]
    out += [(joint_case("joint"), cfg["joint_runs"]), (joint_case("full"), cfg["joint_runs"])]
    out.append((federated_case(), cfg["joint_runs"]))
    out.append((control_case(), cfg["control_runs"]))
    return out


def audit_case(case: dict, runs: int) -> dict:
    res, s0, s1 = run_audit(
        case["fit_release"], case["d0"], case["d1"], n_runs=runs, delta=DELTA, confidence=0.95, return_scores=True
    )
    eps_rep = case["reported"]()
    dprime = separation(s0, s1)
    return {
        "mechanism": case["name"],
        "family": case["family"],
        "epsilon_target": case["epsilon"],
        "epsilon_reported": eps_rep,
        "epsilon_lower_95": res.eps_lower,
        "runs_per_dataset": runs,
        "fpr": res.fpr,
        "fnr": res.fnr,
        "fpr_upper": res.fpr_upper,
        "fnr_upper": res.fnr_upper,
        "threshold": res.threshold,
        "orientation": res.orientation,
        "n_eval": res.n_eval,
        "epsilon_point": res.eps_point,
        "d_prime": dprime,
        "epsilon_gdp_of_d_prime": gdp_epsilon(dprime, DELTA),
        "lower_le_reported": bool(res.eps_lower <= eps_rep),
        "expect_violation": case.get("expect_violation", False),
        "neighbouring": case["neighbouring"],
        "canary": case["canary"],
        "statistic": case["statistic"],
        "settings": case["settings"],
    }


def run(quick: bool = False, only=None, quiet: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    rows = []
    for case, runs in cases(cfg):
        if only and not any(o.lower() in case["name"].lower() for o in only):
            continue
        row = audit_case(case, runs)
        rows.append(row)
        C.log(
            f"{row['mechanism']}: eps_lower={row['epsilon_lower_95']:.3f} reported={row['epsilon_reported']:.3f} "
            f"d'={row['d_prime']:.2f}",
            quiet,
        )
    findings = [r["mechanism"] for r in rows if not r["lower_le_reported"] and not r["expect_violation"]]
    control_ok = all(not r["lower_le_reported"] for r in rows if r["expect_violation"])
    return {
        "config": {**cfg, "delta": DELTA, "epsilon": EPSILON, "confidence": 0.95, "quick": quick},
        "rows": rows,
        "violations": findings,
        "control_caught": control_ok,
        "environment": C.environment(),
    }


def _f(v, nd=3) -> str:
    if isinstance(v, bool):
        return "yes" if v else "**NO**"
    if v is None:
        return "—"
    return "inf" if isinstance(v, float) and math.isinf(v) else f"{v:.{nd}f}"


def markdown(res: dict, command: str) -> str:
    cfg = res["config"]
    L = [
        f"# Empirical privacy audit ({'quick' if cfg['quick'] else 'full'} run)",
        "",
        f"Produced by `{command}` ({res['environment']['time_utc']}). See the docstring of "
        "`benchmarks/bench_audit.py` for the method; `privrec/privacy/audit.py` for the statistics.",
        "",
        f"delta = {cfg['delta']}, target epsilon = {cfg['epsilon']} (unless stated), confidence 95% "
        "(Clopper-Pearson upper bounds on FPR and FNR, jointly), threshold chosen on half the runs and "
        "evaluated on the other half. Noise always from OS entropy. eps_lower <= eps_reported means "
        "*no violation found*, not a proof of privacy; d' and eps(d') show how strong each canary is "
        "(Gaussian-model point estimate, not a bound).",
        "",
        "| mechanism | eps reported | eps_lower (95%) | runs / dataset | FPR / FNR (eval) | d' | eps(d') point "
        "| eps_lower <= eps_reported |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        ok = (
            ("yes" if r["lower_le_reported"] else "no: **violation**")
            if not r["expect_violation"]
            else ("no: violation caught, as intended" if not r["lower_le_reported"] else "yes: **control not caught**")
        )
        L.append(
            f"| {r['mechanism']} | {_f(r['epsilon_reported'])} | {_f(r['epsilon_lower_95'])} | "
            f"{r['runs_per_dataset']} | {r['fpr']:.3f} / {r['fnr']:.3f} | {_f(r['d_prime'], 2)} | "
            f"{_f(r['epsilon_gdp_of_d_prime'], 2)} | {ok} |"
        )
    L += ["", "Canaries and statistics:", ""]
    for r in res["rows"]:
        L.append(
            f"- **{r['mechanism']}** ({r['neighbouring']}): canary = {r['canary']}; statistic = "
            f"{r['statistic']}; settings {r['settings']}"
        )
    L += ["", "## Verdict", ""]
    if res["violations"]:
        L.append("**Violations found (eps_lower > eps_reported at 95%): " + ", ".join(res["violations"]) + ".**")
    else:
        L.append("No mechanism's lower bound exceeds its reported epsilon: no violation found by these canaries.")
    L.append(f"Control (deliberately broken Gaussian) caught: {_f(res['control_caught'])}.")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few runs per mechanism (seconds)")
    p.add_argument("--out", type=Path, default=C.RESULTS, help="output folder")
    p.add_argument("--only", nargs="+", default=None, help="run only mechanisms whose name contains one of these")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    res = run(args.quick, args.only, args.quiet)
    command = "python benchmarks/bench_audit.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    command = command.replace(f" --out {args.out}", "") if args.out == C.RESULTS else command
    tag = "audit_quick" if args.quick else "audit"
    args.out.mkdir(parents=True, exist_ok=True)
    C.write_json(args.out / f"{tag}.json", {**res, "command": command})
    md = markdown(res, command)
    C.write_text(args.out / f"{tag}.md", md)
    if not args.quiet:
        print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
