"""Privacy audits of privrec's private estimators with known power (:mod:`privrec.privacy.audit`).

Two parts; every result states the smallest accounting error it could detect (``eps_max``: the
largest eps_lower its number of runs or canaries can give at 95%; ``power_2x``: its power against
an ideal canary on a Gaussian mechanism whose true epsilon is twice the claimed one;
``detectable_eps``: the smallest true epsilon it flags with probability >= 90%).

**1. White-box audit of the DP-ALS item step** (the headline; ``audit_solver_release``). For each
shipped method a real ``DPALS`` fit at epsilon = 4 runs on a canary dataset -- ``canaries`` users,
user u the only rater of its own ``budget`` items, every rating 5 (the label bound; no centering,
no biases, one factor, one ALS step, near-zero initial factors and user ridge, so every user
embedding sits on the clip) -- and its item-step solver and batch (the ``TaskBatch`` DPALS built:
clipped user factors, clipped labels, the method's allocation weights) are captured. Each audit
then solves that batch again with the captured solver, each canary kept with probability 1/2,
noise from OS entropy, and reads the noisy statistics the solver releases (SSP: Gramians and
right-hand sides; noisy GD: the noisy gradient) through :func:`~privrec.privacy.audit.tap_solver`.
Each canary's score is the Gaussian likelihood ratio of its own items' statistics, so one solve
gives one independent trial per canary. The claim is the captured solver's ledger events for
those releases (PLD accountant at delta = 1e-5); the model's total reported epsilon (counts +
item step) is shown beside it. Noisy GD (``dpsgd-*``): the initial iterate (a public input: the
previous release) is set to the worst case for each canary (``worst_case_gd_init``), so the
canary reaches the gradient bound Gamma_x (R Gamma_x + B); with DPALS's own near-zero start it
reaches only the label half.

* Honest rows: the correct noise, ``honest_solves`` solves pooled per method: eps_lower must stay
  <= the claimed epsilon.
* Controls: the same captured solver with its noise multiplier halved (the report still claims
  the calibrated one: true epsilon of the release = epsilon of 2 x mu), ``control_repetitions``
  independent audits of one solve each; the detection rate is the share with eps_lower > claim.

Not audited by part 1: the count release, centering, allocation, the user step, composition
over ALS steps, the projection and solve after the noise (post-processing) -- part 2 covers fits
end to end, with far less power.

**2. Black-box audits of whole fits** (``run_audit``). For every mechanism: two neighbouring
datasets, D (canary absent, or the original record) and D' (canary present, or the record
replaced), ``runs`` fits on each with noise from OS entropy (``random_state=None``), one scalar
statistic of the *released* output per fit, the test "statistic above a threshold -> canary
present" chosen on the first half of the runs and evaluated on the second half, and the one-sided
Clopper-Pearson lower bound on epsilon at 95% confidence (both rates' upper bounds holding
jointly):

    eps_lower = max( log((1 - delta - FPR_up) / FNR_up), log((1 - delta - FNR_up) / FPR_up) )

With a few hundred runs these can only catch gross errors: their ``eps_max`` is near 4 and
their power against a 2x error is 0 (the columns say so). d' (mean shift of the statistic over its
pooled standard deviation) and the epsilon of a mu-GDP mechanism with mu = d' show how strong each
canary is (a Gaussian-model point estimate, not a bound). A ``control`` row (a scalar Gaussian
mechanism whose noise is 10x too small for the epsilon it claims) shows that the test catches a
gross violation, and a ``power`` row runs the DPALS canary at a large epsilon.

Black-box canaries (each chosen to saturate the mechanism's sensitivity in a direction the statistic knows):

* DPALS (each method; user-level add/remove): 200 users all rate the same 20 items with 0.2; the
  canary user rates the same 20 items with 5 (the rating bound). Settings that make the canary strongest (the
  guarantee must hold for every setting): one factor, one ALS step, one GD step (``dpsgd-*``),
  no centering / biases, near-zero user ridge and initial factors so every user's embedding
  saturates the clip with the same sign, budget 20 (= the canary's items, weight 1 each) and the
  RDP accountant (the default PLD calibration is far slower per fit and only changes the noise
  scale by a few percent). Statistic: ``|sum of the 20 released item factors|``.
* MultiTaskDPRegressor (user-level): 100 users in tasks 1-5; the canary is the only user of task
  0, with feature (1, 0) = the clip and label 1 = the label bound. Statistic: first coordinate of
  task 0's parameters.
* JointDPSGD (replace one record; ``joint`` and ``full`` regimes): 4 owners with one record each
  (x = 1, y = -1000), all owners every step, last iterate; the canary replaces owner 0's label by
  +1000 (gradient reversed: the full 2L sensitivity). Statistic: the shared weight (+ owner 0's
  personal bias under full DP).
* FederatedDPRegressor (ISRL-DP MB-SGD, replace one record in one silo): 2 silos of 5 records
  (x = 1, y = -1000), full batches, the canary replaces one record of silo 0 by y = +1000.
  Statistic: coef + intercept. Reported epsilon: silo 0's.

    python benchmarks/bench_audit.py --quick     # seconds, for CI (structure only: too few canaries for power)
    python benchmarks/bench_audit.py             # the full audit (9 minutes on a shared 2-core machine)

Writes ``benchmarks/results/audit[_quick].{json,md}``. ``--only NAME ...`` keeps the rows whose
name contains one of the given strings (white-box rows are named ``item step <method>``).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

from privrec.privacy.audit import (
    audit_power,
    audit_solver_release,
    canary_design,
    gdp_epsilon,
    run_audit,
    separation,
    worst_case_gd_init,
)

DELTA = 1e-5
EPSILON = 4.0
CONFIDENCE = 0.95
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
# white-box item-step fits: the same strongest-canary settings, the model's default (PLD) accountant,
# every item trained, budget = the canary's number of items
WHITEBOX_SETTINGS = {k: v for k, v in DPALS_AUDIT_SETTINGS.items() if k not in ("budget", "accountant")}
WHITEBOX_SETTINGS["item_frac"] = 1.0
WHITEBOX_FULL = dict(
    canaries=240_000,
    budget=4,
    honest_solves=2,
    control_repetitions=20,
    control_methods=("dpals-uniform", "dpsgd-uniform"),
    power_simulations=400,
    control_power_simulations=200,
)
WHITEBOX_QUICK = dict(
    canaries=2_000,
    budget=4,
    honest_solves=1,
    control_repetitions=2,
    control_methods=("dpals-uniform", "dpsgd-uniform"),
    power_simulations=100,
    control_power_simulations=100,
)
FULL = dict(
    runs=600,
    joint_runs=1500,
    control_runs=4000,
    axes_runs=200_000,
    power_runs=300,
    power_simulations=400,
    whitebox=WHITEBOX_FULL,
)
QUICK = dict(
    runs=40,
    joint_runs=60,
    control_runs=4000,
    axes_runs=20_000,
    power_runs=40,
    power_simulations=100,
    whitebox=WHITEBOX_QUICK,
)
REQUIRED_DETECTION = 0.9


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


# ------------------------------------------------------------- the releases of undeclared axes (issue 42)
def _axes_plan(epsilon: float = EPSILON, **params):
    from privrec.models import DPALS
    from privrec.tuning.plan import plan_axes

    model = DPALS(epsilon=epsilon, delta=DELTA, axes="release", **params)
    return plan_axes(model, roster=False, catalogue=False)


def _noisy_count_case(release, z: float, noise_factor: float, d0: int, d1: int, **text) -> dict:
    """An audit case of a noisy count of the axes (``release(n, multiplier)``, claimed multiplier
    ``z``) on the neighbours ``d0`` / ``d1``; ``noise_factor < 1``: the control. ``text``: ``name``
    (honest) and ``control`` names, ``neighbouring``, ``canary``, ``statistic``, ``settings``."""
    from privrec.privacy import gaussian_event
    from privrec.privacy.ledger import epsilon_of_event

    claimed = epsilon_of_event(gaussian_event(z), DELTA, "pld")
    control = noise_factor < 1
    return dict(
        name=text["control"] if control else text["name"],
        family="axes",
        epsilon=claimed,
        fit_release=lambda n, seed: float(release(n, z * noise_factor).value),
        d0=d0,
        d1=d1,
        reported=lambda: claimed,
        neighbouring=text["neighbouring"],
        canary=text["canary"],
        statistic=text["statistic"],
        settings={"noise_multiplier": z * noise_factor, "claimed_multiplier": z, **text.get("settings", {})},
        expect_violation=control,
    )


def user_count_case(noise_factor: float = 1.0, epsilon: float = EPSILON) -> dict:
    """The noisy user count of an undeclared roster (``partition.release_user_count``, the
    multiplier a ``DPALS(epsilon, axes="release")`` fit uses): D has 1,000 users, D' one more.
    ``noise_factor < 1``: the control (less noise than the claim)."""
    from privrec.allocation import partition

    return _noisy_count_case(
        lambda n, z: partition.release_user_count(n, z, None),
        _axes_plan(epsilon).user_multiplier,
        noise_factor,
        1000,
        1001,
        name="user count (undeclared roster)",
        control="control: user count, half the noise",
        neighbouring="add one user (1,000 -> 1,001 users)",
        canary="the added user (sensitivity 1)",
        statistic="the released noisy count",
    )


def catalogue_size_case(noise_factor: float = 1.0, epsilon: float = EPSILON) -> dict:
    """The noisy catalogue size of an undeclared catalogue with implicit feedback
    (``partition.release_catalogue_size``, the multiplier and per-user sample size of a
    ``DPALS(epsilon, feedback="implicit", axes="release")`` fit): D has 5,000 sampled items, D' one
    user more who alone sampled ``max_items`` new ones (the sensitivity). ``noise_factor < 1``: the
    control."""
    from privrec.allocation import partition

    axes = _axes_plan(epsilon, feedback="implicit")
    k = axes.max_items
    return _noisy_count_case(
        lambda n, z: partition.release_catalogue_size(n, k, z, None),
        axes.catalogue_multiplier,
        noise_factor,
        5000,
        5000 + k,
        name="catalogue size (undeclared catalogue)",
        control="control: catalogue size, half the noise",
        neighbouring=f"add one user who alone sampled {k} items (5,000 -> {5000 + k} sampled items)",
        canary=f"the added user's {k} items (sensitivity {k})",
        statistic="the released noisy size",
        settings={"max_items": k},
    )


def item_selection_case(noise_factor: float = 1.0, epsilon: float = EPSILON) -> dict:
    """The private item selection of an undeclared catalogue (``partition.release_item_selection``
    with the multiplier, sample size and delta term of a ``DPALS(epsilon, axes="release")`` fit):
    item 0's weighted count sits far above the threshold (it is kept in every run); the canary user
    of D' rates item 0 only (weight 1, the full sensitivity). Statistic: item 0's released noisy
    weighted count (the Gaussian part of the selection; its threshold's delta term is checked by
    ``tests/test_addremove.py``)."""
    from privrec.allocation import partition

    axes = _axes_plan(epsilon)
    z, k, d = axes.item_multiplier, axes.max_items, axes.item_delta
    tau = partition.selection_threshold(z, k, d)
    claimed = float(_axes_ledger_epsilon(z))

    def fit_release(weighted, seed):
        rel = partition.release_item_selection(np.asarray(weighted), z * noise_factor, k, d, None)
        kept = rel.value.tolist()
        return float(rel.info["counts"][kept.index(0)]) if 0 in kept else -1e9

    base = np.array([tau + 12.0 * z, 50.0])  # item 0 passes in every run: its released noisy count is read
    control = noise_factor < 1
    return dict(
        name=("control: item selection, half the noise" if control else "item selection (undeclared catalogue)"),
        family="axes",
        epsilon=claimed,
        fit_release=fit_release,
        d0=base,
        d1=base + np.array([1.0, 0.0]),
        reported=lambda: claimed,
        neighbouring="add one user who rates item 0 only",
        canary="weight 1 on a kept item (the full sensitivity)",
        statistic="item 0's released noisy weighted count",
        settings={"noise_multiplier": z * noise_factor, "claimed_multiplier": z, "threshold": tau, "delta_term": d},
        expect_violation=control,
    )


def _axes_ledger_epsilon(z: float) -> float:
    """Epsilon the ledger claims for the selection alone: its Gaussian at delta - its delta term."""
    from privrec.privacy import PrivacyLedger, gaussian_event
    from privrec.tuning.plan import ITEM_SELECTION_DELTA_LABEL

    led = PrivacyLedger()
    led.record("item selection", gaussian_event(z))
    led.spend_delta(ITEM_SELECTION_DELTA_LABEL, _axes_plan().item_delta)
    return led.epsilon(DELTA, "pld")


# ------------------------------------------------------------------------------------ white box
def canary_ratings(n_canaries: int, k: int) -> sp.csr_matrix:
    """User u rates items u*k .. u*k + k - 1 with 5 (the label bound): every item has one rater."""
    rows = np.repeat(np.arange(n_canaries), k)
    cols = np.arange(n_canaries * k)
    return sp.csr_matrix((np.full(rows.size, 5.0), (rows, cols)), shape=(n_canaries, n_canaries * k))


def capture_item_step(method: str, n_canaries: int, k: int, epsilon: float = EPSILON) -> dict:
    """Fit DPALS on the canary dataset and capture the item step's solver and batch (what the fit
    passes to ``solver.solve``), with the model's reported epsilon and configuration."""
    from privrec.models import DPALS

    model = DPALS(method=method, epsilon=epsilon, delta=DELTA, random_state=None, budget=k, **WHITEBOX_SETTINGS)
    captured: dict = {}
    build = model._item_solver  # the fit's own factory of the item-step solver

    def capture(cfg, z, reg_items, V, b_items, batch):
        solver = build(cfg, z, reg_items, V, b_items, batch)
        captured.update(solver=solver, batch=batch)
        return solver

    model._item_solver = capture  # type: ignore[method-assign]
    model.fit(canary_ratings(n_canaries, k), show_progress=False)
    if "solver" not in captured:
        raise RuntimeError("the DPALS fit did not build a private item step")
    report = model.privacy_report()
    return {
        "solver": captured["solver"],
        "batch": captured["batch"],
        "model_epsilon": float(report["epsilon"]),
        "model_accountant": model.config_.get("accountant", "pld"),
        "config": {key: model.config_[key] for key in ("max_norm", "label_bound", "budget", "gramian_ratio")},
    }


def audited_solver(capture: dict):
    """``(solver, design)``: the captured solver (for noisy GD with the worst-case public initial
    iterate) and the canary design of the captured batch (every user is a canary)."""
    solver, batch = capture["solver"], capture["batch"]
    design = canary_design(batch, np.arange(batch.n_units), solver.max_norm, solver.label_bound)
    if type(solver).__name__ == "NoisyGDSolver":
        solver = dataclasses.replace(solver, init=worst_case_gd_init(design, solver.radius).astype(solver.dtype))
    return solver, design


def _solver_settings(solver) -> dict:
    out = {"solver": type(solver).__name__, "noise_multiplier": float(solver.noise_multiplier)}
    out.update(budget=solver.budget, max_norm=float(solver.max_norm), label_bound=float(solver.label_bound))
    if hasattr(solver, "gramian_ratio"):
        out["gramian_ratio"] = float(solver.gramian_ratio)
    if hasattr(solver, "radius"):
        out.update(radius=float(solver.radius), iterations=int(solver.iterations), init="worst case per canary")
    return out


def whitebox_row(audit, name: str, method: str, capture: dict, solver, claimed, kind: str) -> dict:
    d = audit.to_dict()
    return {
        "name": name,
        "method": method,
        "kind": kind,
        **{k: d[k] for k in ("eps_lower", "eps_claimed", "eps_max", "power_2x", "detectable_eps", "fpr", "fnr")},
        "eps_point": d["eps_point"],
        "n_without": d["n_without"],
        "n_with": d["n_with"],
        "n_eval": d["n_eval"],
        "threshold": d["threshold"],
        "releases": d["releases"],
        "mu_claimed": d["mu_claimed"],
        "mu_canary": d["mu_canary"],
        "saturation": d["mu_canary"] / d["mu_claimed"],
        "d_prime": d["separation"],
        "eps_true": gdp_epsilon(d["mu_claimed"] * claimed.noise_multiplier / solver.noise_multiplier, DELTA)
        if kind == "control"
        else None,
        "solves": d["solves"],
        "canaries_per_solve": d["n_canaries"],
        "model_epsilon": capture["model_epsilon"],
        "model_accountant": capture["model_accountant"],
        "detected": bool(audit.detected),
        "lower_le_claimed": bool(audit.eps_lower <= audit.eps_claimed),
        "lower_le_model": bool(audit.eps_lower <= capture["model_epsilon"]),
        "settings": _solver_settings(solver),
    }


def run_whitebox(wcfg: dict, only=None, quiet: bool = False) -> dict:
    """Honest audits of every method's item step and the under-noised controls (module docstring)."""
    honest, controls = [], []
    t0 = time.perf_counter()
    for method in DPALS_METHODS:
        name = f"item step {method}"
        ctrl_name = f"control: item step {method}, half the noise"
        want_honest = not only or any(o.lower() in name.lower() for o in only)
        want_ctrl = method in wcfg["control_methods"] and (
            not only or any(o.lower() in ctrl_name.lower() for o in only)
        )
        if not (want_honest or want_ctrl):
            continue
        cap = capture_item_step(method, wcfg["canaries"], wcfg["budget"])
        solver, design = audited_solver(cap)
        if want_honest:
            a = audit_solver_release(
                solver,
                cap["batch"],
                design,
                DELTA,
                solves=wcfg["honest_solves"],
                power_simulations=wcfg["power_simulations"],
                confidence=CONFIDENCE,
            )
            row = whitebox_row(a, name, method, cap, solver, solver, "honest")
            honest.append(row)
            C.log(
                f"{name}: eps_lower={row['eps_lower']:.3f} claimed={row['eps_claimed']:.3f} "
                f"model={row['model_epsilon']:.3f} saturation={row['saturation']:.4f}",
                quiet,
            )
        if want_ctrl:
            weak = solver.with_noise_multiplier(solver.noise_multiplier / 2.0)
            reps = []
            for r in range(wcfg["control_repetitions"]):
                a = audit_solver_release(
                    weak,
                    cap["batch"],
                    design,
                    DELTA,
                    claimed=solver,
                    power_simulations=wcfg["control_power_simulations"],
                    confidence=CONFIDENCE,
                )
                reps.append(whitebox_row(a, ctrl_name, method, cap, weak, solver, "control"))
                C.log(f"{ctrl_name} #{r + 1}: eps_lower={a.eps_lower:.3f} claimed={a.eps_claimed:.3f}", quiet)
            first = reps[0]
            lows = np.array([x["eps_lower"] for x in reps])
            predicted = audit_power(
                first["eps_claimed"],
                first["eps_true"],
                int(np.mean([x["n_without"] for x in reps])),
                int(np.mean([x["n_with"] for x in reps])),
                DELTA,
                CONFIDENCE,
                orientation=1,
                simulations=wcfg["power_simulations"],
            )
            controls.append(
                {
                    "name": ctrl_name,
                    "method": method,
                    "repetitions": len(reps),
                    "detected": int(sum(x["detected"] for x in reps)),
                    "detection_rate": float(np.mean([x["detected"] for x in reps])),
                    "predicted_power": predicted,
                    "eps_claimed": first["eps_claimed"],
                    "eps_true": first["eps_true"],
                    "model_epsilon": first["model_epsilon"],
                    "eps_lower_min": float(lows.min()),
                    "eps_lower_median": float(np.median(lows)),
                    "eps_lower_max": float(lows.max()),
                    "above_model_epsilon": int(sum(x["eps_lower"] > x["model_epsilon"] for x in reps)),
                    "canaries_per_solve": first["canaries_per_solve"],
                    "settings": first["settings"],
                    "repetition_rows": reps,
                }
            )
    return {"honest": honest, "controls": controls, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------- run
def cases(cfg: dict) -> list[tuple[dict, int]]:
    out = [(dpals_case(m), cfg["runs"]) for m in DPALS_METHODS]
    out.append((dpals_case("ada-dpals", 50.0, "power: DPALS ada-dpals at eps = 50"), cfg["power_runs"]))
    out += [(multitask_case("ssp"), cfg["runs"]), (multitask_case("noisy_gd"), cfg["runs"])]
    out += [(joint_case("joint"), cfg["joint_runs"]), (joint_case("full"), cfg["joint_runs"])]
    out.append((federated_case(), cfg["joint_runs"]))
    out.append((control_case(), cfg["control_runs"]))
    # the releases of undeclared axes: microseconds per run, so many runs
    out += [(user_count_case(), cfg["axes_runs"]), (user_count_case(0.5), cfg["axes_runs"])]
    out += [(item_selection_case(), cfg["axes_runs"]), (item_selection_case(0.5), cfg["axes_runs"])]
    out += [(catalogue_size_case(), cfg["axes_runs"]), (catalogue_size_case(0.5), cfg["axes_runs"])]
    return out


def audit_case(case: dict, runs: int, power_simulations: int = 400) -> dict:
    eps_rep = case["reported"]()
    res, s0, s1 = run_audit(
        case["fit_release"],
        case["d0"],
        case["d1"],
        n_runs=runs,
        delta=DELTA,
        confidence=CONFIDENCE,
        return_scores=True,
        epsilon_claimed=eps_rep,
        power_simulations=power_simulations,
    )
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
        "eps_max": res.eps_max,
        "power_2x": res.power_2x,
        "detectable_eps": res.detectable_eps,
        "d_prime": dprime,
        "epsilon_gdp_of_d_prime": gdp_epsilon(dprime, DELTA),
        "lower_le_reported": bool(res.eps_lower <= eps_rep),
        "expect_violation": case.get("expect_violation", False),
        "neighbouring": case["neighbouring"],
        "canary": case["canary"],
        "statistic": case["statistic"],
        "settings": case["settings"],
    }


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - platforms without getloadavg
        return []


def run(quick: bool = False, only=None, quiet: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    t_start = time.perf_counter()
    load_start = _load()
    whitebox = run_whitebox(cfg["whitebox"], only, quiet)
    rows = []
    t_black = time.perf_counter()
    for case, runs in cases(cfg):
        if only and not any(o.lower() in case["name"].lower() for o in only):
            continue
        row = audit_case(case, runs, cfg["power_simulations"])
        rows.append(row)
        C.log(
            f"{row['mechanism']}: eps_lower={row['epsilon_lower_95']:.3f} reported={row['epsilon_reported']:.3f} "
            f"d'={row['d_prime']:.2f} eps_max={row['eps_max']:.2f} power_2x={row['power_2x']:.2f}",
            quiet,
        )
    black_seconds = time.perf_counter() - t_black
    findings = [r["mechanism"] for r in rows if not r["lower_le_reported"] and not r["expect_violation"]]
    findings += [r["name"] for r in whitebox["honest"] if not (r["lower_le_claimed"] and r["lower_le_model"])]
    control_ok = all(not r["lower_le_reported"] for r in rows if r["expect_violation"])
    wb_rates = [c["detection_rate"] for c in whitebox["controls"]]
    return {
        "config": {
            **{k: v for k, v in cfg.items() if k != "whitebox"},
            "whitebox": dict(cfg["whitebox"]),
            "delta": DELTA,
            "epsilon": EPSILON,
            "confidence": CONFIDENCE,
            "quick": quick,
            "required_detection": REQUIRED_DETECTION,
        },
        "whitebox": whitebox,
        "rows": rows,
        "violations": findings,
        "control_caught": control_ok,
        "whitebox_controls_detected": bool(wb_rates) and min(wb_rates) >= REQUIRED_DETECTION,
        "timing": {
            "wall_seconds": time.perf_counter() - t_start,
            "whitebox_seconds": whitebox["seconds"],
            "blackbox_seconds": black_seconds,
            "load_average_start": load_start,
            "load_average_end": _load(),
        },
        "environment": C.environment(),
    }


def _f(v, nd=3) -> str:
    if isinstance(v, bool):
        return "yes" if v else "**NO**"
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return "inf" if isinstance(v, float) and math.isinf(v) else f"{v:.{nd}f}"


def markdown(res: dict, command: str) -> str:
    cfg, wb, tm = res["config"], res["whitebox"], res["timing"]
    w = cfg["whitebox"]
    L = [
        f"# Privacy audit with known power ({'quick' if cfg['quick'] else 'full'} run)",
        "",
        f"Produced by `{command}` ({res['environment']['time_utc']}; {res['environment']['cpus']} CPUs). "
        "See the docstring of `benchmarks/bench_audit.py` for the method, `privrec/privacy/audit/` for "
        "the statistics and `docs/privacy/audit.md` for what each part does and does not audit.",
        "",
        f"Wall time {tm['wall_seconds']:.0f} s (white box {tm['whitebox_seconds']:.0f} s, black box "
        f"{tm['blackbox_seconds']:.0f} s); load average {tm['load_average_start']} at the start, "
        f"{tm['load_average_end']} at the end (the machine may have been shared).",
        "",
        f"delta = {cfg['delta']}, target epsilon = {cfg['epsilon']} (unless stated), confidence 95% "
        "(Clopper-Pearson upper bounds on FPR and FNR, jointly), test chosen on half the trials and "
        "evaluated on the other half, noise always from OS entropy. eps_lower <= claimed means *no "
        "violation found*, not a proof of privacy. What each audit can detect: **eps_max** = the largest "
        "eps_lower its sample sizes allow; **power 2x** = probability of eps_lower > claimed against an "
        "ideal canary on a Gaussian mechanism whose true epsilon is 2 x the claimed one; **detectable eps** "
        "= the smallest such true epsilon flagged with probability >= 90% (simulated audits; for canaries "
        "below the sensitivity, i.e. the black-box rows, these are upper bounds on the real power).",
        "",
        "## 1. White-box audit of the DP-ALS item step",
        "",
        f"{w['canaries']:,} canary users per solve (each the only rater of its own {w['budget']} items, "
        "rating 5), each kept with probability 1/2; the item-step solver and batch of a real `DPALS` "
        "fit at epsilon = 4 (one ALS step); scores = Gaussian likelihood ratio of each canary's items' "
        "released noisy statistics. **Claimed** = epsilon of the audited releases (the captured solver's "
        "ledger events, PLD); **model** = the fit's total reported epsilon (counts + item step). "
        "mu canary / mu claimed = 1 means the canaries reach the declared sensitivity.",
        "",
        "| item step | releases audited | claimed eps | model eps | eps_lower (95%) | canaries without / with "
        "| mu canary / mu claimed | d' measured | eps_max | power 2x | detectable eps (90%) | eps_lower <= claimed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in wb["honest"]:
        L.append(
            f"| {r['method']} | {', '.join(r['releases'])} | {_f(r['eps_claimed'])} | {_f(r['model_epsilon'])} | "
            f"{_f(r['eps_lower'])} | {r['n_without']:,} / {r['n_with']:,} ({r['solves']} solves) | "
            f"{_f(r['saturation'], 4)} | {_f(r['d_prime'], 3)} | {_f(r['eps_max'], 2)} | {_f(r['power_2x'], 2)} | "
            f"{_f(r['detectable_eps'], 2)} | {_f(r['lower_le_claimed'])} |"
        )
    L += [
        "",
        "Controls: the captured solver with **half the noise multiplier**, the report still claiming the "
        "calibrated one; one solve per audit.",
        "",
        "| control | true eps of the release | claimed eps | model eps | audits | detected (eps_lower > claimed) "
        "| detection rate | predicted power | eps_lower min / median / max | eps_lower > model eps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in wb["controls"]:
        L.append(
            f"| {c['method']} | {_f(c['eps_true'], 2)} | {_f(c['eps_claimed'])} | {_f(c['model_epsilon'])} | "
            f"{c['repetitions']} | {c['detected']} | **{c['detection_rate']:.0%}** | {c['predicted_power']:.0%} | "
            f"{_f(c['eps_lower_min'], 2)} / {_f(c['eps_lower_median'], 2)} / {_f(c['eps_lower_max'], 2)} | "
            f"{c['above_model_epsilon']} of {c['repetitions']} |"
        )
    L += ["", "Audited solvers (as the DPALS fits built them):", ""]
    for r in wb["honest"]:
        L.append(f"- **{r['method']}**: {r['settings']}")
    L += [
        "",
        "## 2. Black-box audits of whole fits",
        "",
        "| mechanism | eps reported | eps_lower (95%) | runs / dataset | FPR / FNR (eval) | d' | eps(d') point "
        "| eps_max | power 2x | detectable eps (90%) | eps_lower <= eps_reported |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
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
            f"{_f(r['epsilon_gdp_of_d_prime'], 2)} | {_f(r['eps_max'], 2)} | {_f(r['power_2x'], 2)} | "
            f"{_f(r['detectable_eps'], 1)} | {ok} |"
        )
    L += ["", "Canaries and statistics:", ""]
    for r in res["rows"]:
        L.append(
            f"- **{r['mechanism']}** ({r['neighbouring']}): canary = {r['canary']}; statistic = "
            f"{r['statistic']}; settings {r['settings']}"
        )
    L += ["", "## Verdict", ""]
    if res["violations"]:
        L.append("**Violations found (eps_lower > claimed at 95%): " + ", ".join(res["violations"]) + ".**")
    else:
        L.append(
            "No lower bound exceeds its claimed epsilon (white box: the item step's own claim and the model's "
            "total; black box: the reported epsilon): no violation found."
        )
    for c in wb["controls"]:
        L.append(
            f"White-box control ({c['method']}, half the noise, true eps {_f(c['eps_true'], 2)} vs claimed "
            f"{_f(c['eps_claimed'], 2)}): detected in {c['detected']} of {c['repetitions']} audits "
            f"({c['detection_rate']:.0%}; required {cfg['required_detection']:.0%})."
        )
    if any(r["expect_violation"] for r in res["rows"]):
        L.append(f"Black-box control (10x too little noise) caught: {_f(res['control_caught'])}.")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few runs and canaries per mechanism (seconds)")
    p.add_argument("--out", type=Path, default=C.RESULTS, help="output folder")
    p.add_argument("--only", nargs="+", default=None, help="run only rows whose name contains one of these")
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
