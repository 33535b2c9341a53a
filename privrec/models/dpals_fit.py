"""The ALS loop of one DPALS fit (Krichene et al., ICML 2023, Alg. 3): pre-processing releases,
the alternating user and private item steps, the release. :meth:`privrec.models.DPALS.fit` runs
it for a plan of kind ``"fit"``; the Dask driver and the Flower server run the same stages over
their partitions or clients.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import scipy.sparse as sp

from .._io import progress_steps
from ..privacy import clip_labels, make_rng
from ..solvers import make_solver
from ..solvers.memory import check_fit_memory
from .dpals_config import binarised, check_overflow
from .dpals_release import item_side, release_item_side
from .fit_memory import dpals_memory_options

__all__ = ["run_fit"]


def run_fit(model, R_full: sp.csr_matrix, user_keys, plan, show_progress: bool = True, callback=None):
    """One private (or exact) DPALS fit of ``plan`` (a :class:`~privrec.tuning.plan.FitPlan` of kind
    ``"fit"``) on the checked CSR ``R_full``, its users sampled with ``user_keys``: the stages of
    :class:`privrec.pipeline.PrivatePipeline` in the order of Krichene et al. (ICML 2023), Alg. 3
    (module docstring of :mod:`privrec.models.dpals`), the model's own stage methods called for each
    step, the recorded events checked against the plan; sets the release on ``model``."""
    n_users, n_items = R_full.shape
    cfg = plan.config
    # what the rules read: the declared roster's size, or the noisy count of an undeclared one
    public_users = plan.public_users if plan.n_users > 0 else float(n_users)
    rule_users = max(1, int(round(public_users)))
    check_fit_memory(
        n_users,
        n_items,
        cfg.factors,
        cfg.dtype.itemsize,
        "DPALS",
        **dpals_memory_options(cfg, model.num_threads),
    )
    if cfg.implicit:
        R_full = binarised(R_full)
    else:
        model._check_ratings(R_full, cfg)
    dtype, d = cfg.dtype, cfg.factors
    rng = make_rng(model.random_state)
    init_rng = np.random.default_rng(rng.integers(0, 2**63 - 1)) if cfg.private else make_rng(model.random_state)
    t_start = time.perf_counter()
    pipe = model._pipeline(cfg, rng)
    cal = pipe.use_calibration(plan.calibration)  # the plan's: calibrated once, from public inputs

    # 1. pre-processing: counts, centering, head, allocation ---------------------------
    keys = user_keys if cfg.private else None  # per-user samples keyed on user ids
    counts = pipe.release_counts(R_full, cfg.count_sample, user_keys=keys)
    mu = (
        pipe.release_mean(R_full, cfg.count_sample, cfg.rating_bound, cfg.rating_range, user_keys=keys)
        if cfg.center
        else 0.0
    )
    head = pipe.head(counts, cfg.item_frac)
    R = (R_full[:, head] if head.size != n_items else R_full).tocsr()
    R.sort_indices()
    counts_h = counts[head]
    cfg = model._released_ridges(cfg, counts_h, public_users)
    centered = R.copy()
    centered.data = centered.data.astype(dtype, copy=True)
    if mu:
        centered.data -= dtype.type(mu)
    W = pipe.allocate(
        R, counts_h, cfg.allocation if cfg.private else "full", cfg.budget, cfg.mu, dtype=dtype, user_keys=keys
    )
    rows = np.repeat(np.arange(n_users), np.diff(R.indptr))

    # 2. alternating steps --------------------------------------------------------------
    reg_items, _ = model._item_regularization(cfg, counts_h, cal.train_scale)
    reg_users, norm_u = model._user_regularization(cfg, np.diff(R.indptr))
    V = (init_rng.standard_normal((head.size, d)) * cfg.init_scale).astype(dtype)
    b_items = np.zeros(head.size, dtype=dtype) if cfg.biases else None
    c = dtype.type(cfg.bias_feature)
    step_times: list[float] = []
    user_times: list[float] = []  # the (non-private) user step's share of each step
    batch0 = order = warm = None
    model._exposure_parts = []
    t_pre = time.perf_counter() - t_start
    for t in progress_steps(cfg.iterations, show_progress, "DPALS"):
        t_step = time.perf_counter()
        U, b_users, warm = model._user_step(cfg, centered, V, b_items, reg_users, warm)
        check_overflow(cfg, t, "user", U, b_users)
        user_times.append(time.perf_counter() - t_step)
        labels = centered.copy()
        if b_users is not None:
            labels.data -= b_users[rows]
        if cfg.private:
            labels.data = clip_labels(labels.data, cfg.label_bound).astype(dtype, copy=False)
        feats = np.hstack([U, np.full((n_users, 1), c, dtype=dtype)]) if cfg.biases else U
        if batch0 is None:
            # the batch's (task, unit) structure never changes between steps: regroup the entry
            # positions once and then only gather the new labels (saves a sort per step)
            where = labels.copy()
            where.data = np.arange(1, labels.nnz + 1, dtype=np.float64)
            batch0 = model.item_batch(cfg, where, W, feats, counts_h, rule_users)
            order = batch0.labels.astype(np.int64) - 1
        batch = dataclasses.replace(batch0, labels=labels.data[order], features=feats)
        if cfg.private:
            solver = model._item_solver(cfg, cal.train_scale, reg_items, V, b_items, batch)
        else:
            solver = make_solver(
                "exact", reg=reg_items, unobserved_weight=cfg.unobserved_weight, dtype=dtype,
                num_threads=model.num_threads,
            )  # fmt: skip
        result = solver.solve(batch, rng=rng)
        pipe.record(result, prefix=f"ALS step {t}: ")
        V, b_items = item_side(model, cfg, result, solver)
        check_overflow(cfg, t, "item", V, b_items)
        step_times.append(time.perf_counter() - t_step)
        if callback is not None:  # implicit 0.7 contract: callback(iteration, elapsed_seconds, loss)
            callback(t - 1, step_times[-1], None)
    model.ledger_ = pipe.finish()
    model.noise_scales_ = {"count": cal.count_scale, "train": cal.train_scale}

    # 3. release --------------------------------------------------------------------------
    release_item_side(model, cfg, head, counts, V, b_items, mu, norm_u, public_users, n_items, cal.count_scale)
    t_proj = time.perf_counter()
    model.user_factors_, model.user_bias_ = model._project_users(R_full)
    model.fit_timings_ = {
        "preprocess": t_pre,
        "steps": step_times,
        "user_steps": user_times,
        "projection": time.perf_counter() - t_proj,
    }
    return model
