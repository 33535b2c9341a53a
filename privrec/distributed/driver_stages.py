"""The driver's stages of one distributed DP-ALS / ALS fit, called by :class:`privrec.distributed.fit._Driver`
in the local fit's order (see :mod:`privrec.distributed.fit` for what runs where):

* :func:`release_counts_and_mean` -- the item counts and the global mean, released by the fit's
  pipeline from exact statistics summed over the partitions;
* :func:`als_step` -- one ALS step: the user steps on the partitions, then the item step (the
  budget check, the released global Gramian, the per-block noise seeds and the reduction of
  :func:`~privrec.distributed.reduce_item_blocks`, or the exact solve at epsilon = inf) and the
  ledger record, with what every step reads in a :class:`Sweep`;
* :func:`release_attributes` and :func:`set_ids` -- the local fit's release attributes, without
  user factors (the Flower server releases through them too);
* :func:`public_users` -- the user count the rules of a fit read (the declared roster's size, or
  the noisy count of an undeclared one), and :func:`catalogue_declared` -- whether a partitioned
  table's item axis is a declared catalogue.

``driver`` is the :class:`~privrec.distributed.fit._Driver` of the fit: its client, task keys,
per-partition submission, tree sums and shared values (``driver.share``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..models.dpals_release import item_side, release_item_side
from ..privacy.mechanisms import Release
from ..solvers import make_solver
from ..solvers._base import NOISE_BLOCK
from .partition import PartitionedInteractions
from .reduce import item_blocks, reduce_item_blocks
from .tasks import (
    _exact_counts,
    _exact_sum,
    _gram,
    _release_blocks,
    _sampled_counts,
    _sampled_sum,
    _solve_exact,
    _spend,
    _statistics,
    _user_step,
    _warm,
)

# ---------------------------------------------------------------------- counts and mean


def release_counts_and_mean(driver, cfg, pipe, base: list, ukeys: list | None) -> tuple[np.ndarray, Any]:
    """``(counts, mu)``: the pipeline's own releases of the item counts and the global mean (the
    local fit's draws, in its order), with the exact statistics summed over the partitions (``base``:
    the partitions' training matrices; ``ukeys``: their users' sampling keys)."""
    if cfg.private:
        k = cfg.count_sample
        counts = pipe.release_sampled_counts(
            lambda key, blocks=base, keys=ukeys: driver.total(
                driver.per_partition(_sampled_counts, blocks, k, key, name="counts", user_keys=keys), "counts-sum"
            ),
            k,
        )
    else:
        counts = np.asarray(driver.total(driver.per_partition(_exact_counts, base, name="counts"), "counts-sum"))
        counts = counts.astype(np.float64, copy=False)
    mu = 0.0
    if cfg.center and cfg.private:
        mu = pipe.release_sampled_mean(
            lambda key, half, mid, blocks=base, keys=ukeys: driver.total(
                driver.per_partition(
                    _sampled_sum, blocks, cfg.count_sample, key, half, mid, name="mean", user_keys=keys
                ),
                "mean-sum",
            ),
            cfg.count_sample,
            cfg.rating_bound,
            cfg.rating_range,
        )
    elif cfg.center:
        total, n = driver.total(driver.per_partition(_exact_sum, base, name="mean"), "mean-sum")
        mu = total / n if n else 0.0
    return counts, mu


# ---------------------------------------------------------------------- one ALS step


@dataclass
class Sweep:
    """What every ALS step of one distributed fit reads, fixed before the first step."""

    cfg: Any  # the resolved settings (ridges from the released head counts)
    proxy: Any  # the DPALS whose methods build the item solver (ALS: its exact DPALS path)
    task_model: Any  # the estimator the partition tasks call
    pipe: Any  # the fit's PrivatePipeline (records every step's release)
    rng: Any  # the pipeline's generator: the global Gramian's noise, the noise seeds
    train_scale: float
    counts_h: np.ndarray  # the released counts of the head items
    n_users: int
    reg_items: Any  # the item ridge (scalar or per head item)
    reg_dtype: np.ndarray  # the item ridge per head item in the fit's dtype
    reg_future: Any  # its future for the block roots
    states: list  # per partition: the persisted PartitionState


def als_step(driver, sweep: Sweep, t: int, V: np.ndarray, b_items, warms: list) -> tuple[np.ndarray, Any, list]:
    """ALS step ``t`` from the released item side ``(V, b_items)`` and the users' previous solutions
    ``warms`` (one future per partition, ``None`` before the first step): the user steps, the item
    step's release (recorded in the pipeline) and the next ``(V, b_items, warms)``."""
    cfg, model = sweep.cfg, driver.model
    d, dtype = cfg.factors, cfg.dtype
    side = driver.share({"V": V, "b": b_items}, "items", t)
    solver, max_norm, gravity, public = _item_solver(driver, sweep, V, b_items)
    step_futs = [
        driver.client.submit(
            _user_step, s, side, sweep.task_model, cfg, max_norm, gravity, warms[p], key=driver.key("user", t, p)
        )
        for p, s in enumerate(sweep.states)
    ]
    warms = [driver.client.submit(_warm, f, key=driver.key("warm", t, p)) for p, f in enumerate(step_futs)]
    if cfg.private:
        out, info = _private_item_step(driver, sweep, t, solver, step_futs, gravity, public)
    else:
        out, info = _exact_item_step(driver, sweep, t, step_futs, gravity)
    width = d + (1 if cfg.biases else 0)
    params = np.concatenate([r[0] for r in out]) if out else np.zeros((0, width), dtype=dtype)
    result = Release(params, solver.labelled_events(), info)
    sweep.pipe.record(result, prefix=f"ALS step {t}: ")
    if driver.als:
        params = np.asarray(result.params, dtype=dtype)
        V = np.ascontiguousarray(params[:, :d])
        if cfg.biases:
            b_items = np.ascontiguousarray(params[:, d] * dtype.type(cfg.bias_feature))
    else:
        V, b_items = item_side(model, cfg, result, solver)
    return V, b_items, warms


def _item_solver(driver, sweep: Sweep, V: np.ndarray, b_items) -> tuple[Any, float | None, str | None, Any]:
    """``(solver, max_norm, gravity, public)`` of one item step: the private model's solver (SSP or
    noisy GD, with the clip of the user features and the public task information of its step sizes)
    or the exact ridge solver."""
    cfg, proxy = sweep.cfg, sweep.proxy
    public: Any = None
    if cfg.private:
        public = SimpleNamespace(  # the public task information the noisy-GD step sizes use
            task_sizes=np.maximum(sweep.counts_h, 1.0),
            task_weights=proxy._task_weights(cfg, np.maximum(sweep.counts_h, 1.0), sweep.n_users),
            n_units=sweep.n_users,
            n_tasks=sweep.counts_h.size,
        )
        solver: Any = proxy._item_solver(cfg, sweep.train_scale, sweep.reg_items, V, b_items, public)
        return solver, solver.max_norm, ("features" if cfg.unobserved_weight > 0 else None), public
    solver = make_solver(
        "exact", reg=sweep.reg_items, unobserved_weight=cfg.unobserved_weight, dtype=cfg.dtype,
        num_threads=driver.model.num_threads,
    )  # fmt: skip
    gravity = None if cfg.unobserved_weight == 0 else ("factors" if driver.als else "features")
    return solver, None, gravity, public


def _grams(driver, step_futs: list, t: int) -> list:
    return [driver.client.submit(_gram, f, key=driver.key("gram", t, p)) for p, f in enumerate(step_futs)]


def _private_item_step(driver, sweep: Sweep, t: int, solver, step_futs: list, gravity, public) -> tuple[list, dict]:
    """``SSPSolver.solve`` (or noisy GD's) over the partitions: the budget check, the released global
    Gramian, the noise seeds, then per item block the tree sum and the release at its root."""
    cfg, client, dtype = sweep.cfg, driver.client, sweep.cfg.dtype
    m = sweep.counts_h.size
    blocks = item_blocks(m, driver.block_tasks)
    per_block = driver.block_tasks // NOISE_BLOCK
    spends = client.gather([client.submit(_spend, f, key=driver.key("spend", t, p)) for p, f in enumerate(step_futs)])
    beta = float(max(spends)) if spends else 0.0
    if solver.budget is not None and beta > solver.budget:
        raise ValueError(
            f"per-unit spend max sum w^2 = {beta:.6g} exceeds the declared budget {solver.budget:.6g}; "
            "build the weights with privrec.allocation (which enforces the budget)"
        )
    gram = None
    if gravity:
        g0 = driver.total(_grams(driver, step_futs, t), f"gram-sum-{t}")
        gram = solver.release_global_gramian(g0, sweep.rng)
    seeds = solver.noise_seeds(sweep.rng, m)
    grouped = [list(seeds[j * per_block : (j + 1) * per_block]) for j in range(len(blocks))]
    gd = None
    if cfg.solver == "noisy_gd":  # public start (the released V) and public step sizes
        steps = solver._steps(public, sweep.reg_dtype, solver.noise_std())
        eta = np.stack([steps(i) for i in range(1, solver.iterations + 1)]).astype(dtype)
        gd = driver.share({"theta0": np.asarray(solver.init, dtype=dtype), "steps": eta}, "gd", t)
    out = reduce_item_blocks(
        step_futs,
        _statistics,
        blocks,
        _release_blocks,
        seeds=grouped,
        args=(solver.label_bound, False, driver.hook),
        finish_args=(
            dataclasses.replace(solver, reg=0.0, **({"init": None, "schedule": 1.0} if gd is not None else {})),
            sweep.reg_future,
            gram,
            driver.block_tasks,
            gd,
        ),
        offsets=driver.offsets,
        fan_in=driver.fan_in,
        max_in_flight=driver.max_in_flight,
        client=client,
        key=driver.key("reduce", t),
    )
    info = (
        {"solver": "ssp", "unit_budget": beta, "projected_tasks": int(sum(r[1] for r in out))}
        if gd is None
        else {"solver": "noisy_gd", "unit_budget": beta, "iterations": int(solver.iterations)}
    )
    if out and len(out[0]) > 2:  # SSP with keep_diagonal: the noisy Gramians' diagonals and rhs
        info["noisy_gramian_diagonal"] = np.concatenate([r[2] for r in out])
        info["noisy_rhs"] = np.concatenate([r[3] for r in out])
    return out, info


def _exact_item_step(driver, sweep: Sweep, t: int, step_futs: list, gravity) -> tuple[list, dict]:
    """The exact item ridge solves (epsilon = inf, ALS): per item block the tree sum of the exact
    statistics and the solve at its root, with the gravity Gramian of ALS or of ``ExactSolver``."""
    cfg, dtype, d = sweep.cfg, sweep.cfg.dtype, sweep.cfg.factors
    gram = None
    if gravity:
        g0 = np.asarray(driver.total(_grams(driver, step_futs, t), f"gram-sum-{t}"))
        if gravity == "factors":  # ALS's gravity_gramian: float64, zero bias coordinate, then cast
            G = np.zeros((d + (1 if cfg.biases else 0),) * 2, dtype=np.float64)
            G[:d, :d] = cfg.unobserved_weight * g0
            gram = G.astype(dtype)
        else:  # ExactSolver: global_gramian(x) * alpha in the fit's dtype
            gram = g0.astype(dtype, copy=False) * dtype.type(cfg.unobserved_weight)
    out = reduce_item_blocks(
        step_futs,
        _statistics,
        item_blocks(sweep.counts_h.size, driver.block_tasks),
        _solve_exact,
        args=(None, True, driver.hook),
        finish_args=(sweep.reg_future, gram, driver.block_tasks),
        offsets=driver.offsets,
        fan_in=driver.fan_in,
        max_in_flight=driver.max_in_flight,
        client=driver.client,
        key=driver.key("reduce", t),
    )
    return out, {"solver": "exact"}


# ---------------------------------------------------------------------- the release


def release_attributes(
    model, parts, cfg, cal, ledger, head, counts, V, b_items, mu, norm_u, norm_i, n_users, n_items, *, als: bool
) -> None:
    """The release attributes of the local fit (``DPALS.fit`` / ``ALS.fit`` when ``als``), without
    user factors; ``parts`` gives the item ids (:func:`set_ids`)."""
    if als:  # ALS's own release attributes
        item_factors = np.zeros((n_items, cfg.factors), dtype=cfg.dtype)
        item_factors[head] = V
        model.item_factors_ = item_factors
        model.item_bias_ = None
        if cfg.biases:
            model.item_bias_ = np.zeros(n_items, dtype=cfg.dtype)
            model.item_bias_[head] = b_items
        model.global_mean_ = np.asarray(mu, dtype=np.float64)
        model.user_reg_norm_ = np.asarray(norm_u, dtype=np.float64)
        model.item_reg_norm_ = np.asarray(norm_i, dtype=np.float64)
    else:  # exactly DPALS.fit's release
        release_item_side(
            model, cfg, head, counts, V, b_items, mu, norm_u, n_users, n_items, count_scale=cal.count_scale
        )
        model.ledger_ = ledger
        model.noise_scales_ = {"count": cal.count_scale, "train": cal.train_scale}
    model.user_factors_ = None
    model.user_bias_ = None
    set_ids(model, parts)


def public_users(plan, n_users: int) -> tuple[Any, int]:
    """``(users, rule_users)``: the user count the rules of ``plan``'s fit read on ``n_users``
    users -- the declared roster's size (``n_users`` itself, as before the axes' releases existed),
    or, as the local fit (:func:`privrec.models.dpals_fit.run_fit`), the noisy count of an
    undeclared roster (``plan.public_users``; rounded, at least 1, where a rule needs an integer)."""
    if plan is None or (plan.users_released is None and int(plan.n_users) == int(n_users)):
        return n_users, n_users
    users = plan.public_users if plan.n_users > 0 else float(n_users)
    return users, max(1, int(round(users)))


def catalogue_declared(parts) -> bool:
    """Whether the item axis of ``parts`` is the declared public catalogue it was built with (given
    ids, unchanged by fingerprint), as the local fit reads an ``Interactions``."""
    from ..data.frames import vocabulary_fingerprint

    info = parts.info
    return info.get("item_vocabulary") == "given" and info.get("item_vocabulary_sha256") == vocabulary_fingerprint(
        np.asarray(parts.item_ids)
    )


def set_ids(model, parts: PartitionedInteractions) -> None:
    """Id maps as FactorizationModel's fit wrapper sets them (fit_input of an Interactions)."""
    from ..models._base import _is_identity_ids

    n_items = parts.n_items
    item_ids = np.asarray(parts.item_ids)
    item_ids_or_none = None if _is_identity_ids(item_ids, n_items) else item_ids
    given = item_ids_or_none is not None and catalogue_declared(parts)
    model.user_factors_ = None
    model.user_bias_ = None
    model.user_ids_ = None
    model.item_ids_ = item_ids_or_none
    model._item_ids_given = bool(given)
    model._item_axis = "catalogue" if given else "data"  # a partitioned table: its items, unless given
    model._id_lookup = {}
