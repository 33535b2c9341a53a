"""DP-ALS as a Flower app: clients hold users, the server holds the noise and the ledger.

The server (:func:`fit_dpals`, run inside a ``ServerApp``) runs :meth:`privrec.models.DPALS.fit`'s
stages in the local fit's order, as the Dask driver of :mod:`privrec.distributed.fit` does, with
the per-partition task bodies of that module running on the clients:

* **roster** -- every client reports how many users it holds (the public roster) and the counts
  the input checks need (ratings, ratings outside the declared range: sums only);
* configuration (``DPALS._resolve_config`` on the public shape), calibration
  (:class:`privrec.pipeline.PrivatePipeline`), then the **item counts** and the **global mean**:
  the server draws each sampling key, every client returns its users' sampled per-item counts
  (rating sums), the server adds them and releases them with the pipeline's own mechanisms;
* the head restriction, the item ridge and the initial item factors (server, public values);
* per ALS step t, **"ALS step t"**: the server broadcasts the released item factors and biases
  with the public allocation inputs; each client solves its users' embeddings (warm-started CG at
  its users' previous solution, kept on the client), clips them, allocates its users' weights
  (Krichene et al. 2023, Sec. 4: uniform / tail / adaptive, each user's spend <= budget, checked on the client) and
  returns the weighted per-item Gramians and right-hand sides of all items (dense: the server
  learns nothing from the shape) -- ``distributed.fit._user_step`` and ``_statistics``. The
  server adds them up, draws the noise seeds once per public block of 256 items
  (``SSPSolver.noise_seeds``, with the global Gramian first when ``unobserved_weight > 0``), adds
  the noise once per released statistic and solves (``_release_blocks``, the Dask root), and
  records the step's events;
* the ledger check against the plan (``PrivatePipeline.finish``) and the local fit's release
  attributes (``DPALS._release_item_side``).

Same answer: the same ``random_state`` gives the same sampling keys, noise seeds and noise, the
same allocation (keyed on each user's id), the same ledger and epsilon as ``DPALS.fit`` on the
whole matrix with declared axes (``axes="warn"``, or ``roster=True, catalogue=True``), and as the
local fit of the same table with released axes (the default); only the float32 sums of the per-item statistics are added in another order (per
client, then over clients), so the factors agree to float tolerance (observed ~1e-6 of their
scale; the tests assert 1e-4, as for Dask).

Trust (stated in :func:`privacy_report`): the released item side is (epsilon, delta) user-level DP
whoever reads it: under add/remove of one user with the axes released (the default), under the
zero-out relation of ``DPALS`` with both axes declared. The server sees the *exact* sums over
clients of the per-item statistics before it adds the noise, and -- privrec's Flower apps use no
secure aggregation (docs/federated-flower.md) -- each client's own sums, so it must be trusted with
them as the Dask driver is. Clients see only released values and the public sampling keys.

Undeclared axes (``DPALS(axes="release")``, the default; the clients' shards are undeclared unless
``roster=True`` / ``catalogue=True``): before the fit the server releases the noisy number
of users on the clients' roster and, unless the clients' columns are a declared catalogue, the
private item selection from the clients' summed weighted per-item counts -- the local fit's
releases (:func:`privrec.models.dpals_axes.release_axes`) -- plans the fit from them and sends the
selected columns with every message of the fit; the report then states add/remove of one user.

Dropouts: a client that fails a round is asked again (the same message: the same answer) and
left out of that release after ``max_retries``; each user still contributes at most once to each
release, so the sensitivity, the noise and the ledger are unchanged. :attr:`DPALS.federation_`
(set by the fit) lists which releases ran with fewer users.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import scipy.sparse as sp
from flwr.app import Array, ArrayRecord, Context, Message

from ..._params import _param_fingerprint
from ...allocation import stable_user_keys
from ...allocation.partition import weighted_item_counts
from ...distributed.driver_stages import public_users, release_attributes
from ...distributed.fit import (
    _prepare,
    _release_blocks,
    _sampled_counts,
    _sampled_sum,
    _set_ids,
    _statistics,
    _training_matrix,
    _user_step,
)
from ...models.dpals_axes import ReleasedAxes, finish_axes, plan_on_axes, release_axes, set_selected_ids
from ...models.dpals_release import item_side
from ...privacy import make_rng
from ...privacy.mechanisms import Release
from ...solvers._linalg import as_task_array
from ...tuning.auto import run_automatic_selection
from ...tuning.plan import plan_axes, plan_fit
from ._common import DEFAULT_WAIT, Fault, Federation, check_fault, config_of, content, read_arrays, summed
from .dpals_messages import _RELEASE_ARRAYS as _RELEASE_ARRAYS
from .dpals_messages import _config_from_json, _config_json, _opt_int, _release_message, _release_model
from .shards import Shard, load_shard, save_shard, split_users  # noqa: F401 (re-exported)

APP = "dpals"


# ---------------------------------------------------------------------- the client


def _roster(shard: Shard, config: dict[str, Any]) -> dict:
    R = _matrix(shard, False)
    data = np.asarray(R.data)
    out = {"index": int(shard.index), "units": shard.n_users, "n_items": int(R.shape[1]), "nnz": int(R.nnz)}
    lo_hi = json.loads(str(config["rating_range"]))
    if lo_hi is not None:
        outside = (data < lo_hi[0]) | (data > lo_hi[1])
    else:
        outside = np.abs(data) > float(config["rating_bound"])
    out["outside"] = int(np.count_nonzero(outside))
    out["negative"] = int(np.count_nonzero(data < 0))
    return out


def _warm_start(state, job: str, t: int):
    """The users' solution of step ``t - 1`` kept on the client (``None``: none, solve exactly)."""
    name = f"dpals-warm-{job}"
    if name not in state:
        return None
    kept = state[name]
    key = f"step-{t - 1}"
    return kept[key].numpy() if key in kept else None


def _keep_warm(state, job: str, t: int, warm: np.ndarray) -> None:
    """Keep the solutions of steps ``t`` and ``t - 1`` (a retried step ``t`` starts again from ``t - 1``)."""
    name = f"dpals-warm-{job}"
    kept = {k: v for k, v in (state[name].items() if name in state else []) if k == f"step-{t - 1}"}
    kept[f"step-{t}"] = Array(np.ascontiguousarray(warm))
    state[name] = ArrayRecord(kept)


def _matrix(shard: Shard, implicit: bool, config: dict[str, Any] | None = None) -> sp.csr_matrix:
    """The shard's rows of the fit's matrix (``distributed.fit._training_matrix``: binarised when
    implicit); with ``config["part"] == "train"`` (the automatic selection's candidates) only the
    training part of each user's ratings (:func:`privrec.tuning.selection.split_holdout` keyed on
    the users' ids, as the local and the Dask fit split them)."""
    R = _training_matrix(cast(Any, shard), 0, implicit)
    if config is not None and str(config.get("part", "")) == "train":
        R = _holdout(shard, R, config)[0]
    return R


def _holdout(shard: Shard, R: sp.csr_matrix, config: dict[str, Any]) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    from ...tuning.selection import split_holdout

    train, held = split_holdout(
        sp.csr_matrix(R, dtype=np.float64),
        float(config["holdout"]),
        int(str(config["holdout_key"])),
        stable_user_keys(shard.user_ids),
    )
    return train.astype(np.float32), held


def client_answer(shard: Shard, config: dict[str, Any], values: dict, state) -> tuple[dict, dict]:
    """One DP-ALS client's answer to one message: ``(config, arrays)`` of the reply.

    ``state``: the client's ``Context.state`` (keeps its users' previous solutions). A message of a
    fit on a private item selection carries the selected ``columns``: the client answers on its
    users' ratings of those items only, as the local fit restricts its matrix to them."""
    stage = str(config["stage"])
    if stage == "roster":
        return _roster(shard, config), {}
    if "columns" in values:
        shard = _on_columns(shard, values["columns"])
    if stage == "axes":  # the item selection's weighted counts: a sum over the shard's users
        R = _matrix(shard, bool(config["implicit"]))
        keys = stable_user_keys(shard.user_ids)
        weighted = weighted_item_counts(R, int(config["k"]), int(str(config["key"])), keys)
        return {}, {"weighted": np.asarray(weighted, dtype=np.float64)}
    if stage == "counts":
        R = _matrix(shard, bool(config["implicit"]), config)
        keys = stable_user_keys(shard.user_ids)
        counts = _sampled_counts(R, 0, int(config["k"]), int(str(config["key"])), user_keys=keys)
        return {}, {"counts": np.asarray(counts, dtype=np.float64)}
    if stage == "mean":
        R = _matrix(shard, bool(config["implicit"]), config)
        keys = stable_user_keys(shard.user_ids)
        k, key, half, mid = int(config["k"]), int(str(config["key"])), float(config["half"]), float(config["mid"])
        total, n = _sampled_sum(R, 0, k, key, half, mid, user_keys=keys)
        return {}, {"sums": np.array([total, n], dtype=np.float64)}
    if stage == "step":
        from ...models.dpals import DPALS

        cfg = _config_from_json(str(config["cfg"]))
        t, job = int(config["t"]), str(config["job"]) + str(config.get("part_tag", ""))
        proxy = DPALS(num_threads=1)  # the user step's settings all come from cfg
        R = _matrix(shard, cfg.implicit, config)
        head, counts_h = values["head"], values["counts_h"]
        prepared = _prepare(
            R,
            0,
            head,
            float(config["mu"]),
            counts_h,
            _opt_int(str(config["alloc_key"])),
            int(config["n_users"]),
            proxy,
            cfg,
            user_keys=stable_user_keys(shard.user_ids),
        )
        side = {"V": values["V"], "b": values.get("b")}
        gravity = str(config["gravity"]) or None
        step = _user_step(prepared, side, proxy, cfg, float(config["max_norm"]), gravity, _warm_start(state, job, t))
        _keep_warm(state, job, t, step.warm)
        G, b = _statistics(step, 0, slice(0, head.size), float(config["label_bound"]), False, None)
        over = int(step.spend > cfg.budget)  # checked here: a user's spend is private
        return {"over_budget": over}, {"G": G, "b": b, "gram": step.gram}
    if stage == "losses":  # the automatic selection's score of one candidate: a sum over the shard's users
        from ...tuning.selection import user_losses

        R = _training_matrix(cast(Any, shard), 0, False)
        train, held = _holdout(shard, R, config)
        cap = int(config["rating_cap"]) or None
        loss = user_losses(_release_model(config, values), train, held, float(config["clip"]), cap).sum()
        return {}, {"loss": np.array([loss], dtype=np.float64)}
    raise ValueError(f"unknown DP-ALS stage {stage!r}")


def _on_columns(shard: Shard, columns) -> Shard:
    """The shard on the selected item ``columns`` (sorted column indices) only."""
    m = shard.matrix[:, np.asarray(columns, dtype=np.int64)].tocsr()
    m.sort_indices()
    return Shard(shard.index, shard.user_ids, m)


def register_client(app, load: Callable[[Context], Shard], fault: Fault | None = None) -> None:
    """Register the DP-ALS handler (message type ``query.dpals``) on a Flower ``ClientApp``.

    ``load(context) -> Shard``: the client's users (e.g. ``shards[partition-id]`` in a simulation,
    :func:`load_shard` of a path in the node configuration when deployed)."""

    @app.query(APP)
    def dpals(msg: Message, context: Context) -> Message:
        shard = load(context)
        config = config_of(msg.content)
        check_fault(fault, APP, shard.index, config)
        reply_config, reply_arrays = client_answer(shard, config, read_arrays(msg.content), context.state)
        return Message(content(reply_config, **reply_arrays), reply_to=msg)


# ---------------------------------------------------------------------- the server


def fit_dpals(
    model,
    grid,
    *,
    min_clients: int = 1,
    wait: float = DEFAULT_WAIT,
    timeout: float | None = None,
    max_retries: int = 2,
    job: str = "",
    roster: bool = False,
    catalogue: bool = False,
):
    """Fit the :class:`~privrec.models.DPALS` ``model`` on the clients of ``grid`` (call it from a
    ``ServerApp``'s main); returns ``model``, fitted as by ``DPALS.fit`` (module docstring).

    ``DPALS(axes="release")`` (the default): the clients' users and item columns are released as the local fit
    releases an undeclared roster and catalogue (``roster`` / ``catalogue``: that axis is a
    declared public one, not released). The server releases the noisy count of the users on the
    roster and the private item selection (each client returns its users' weighted per-item counts,
    keyed on their ids; the server adds them) with the local fit's mechanisms, labels and random
    draws (:func:`privrec.models.dpals_axes.release_axes`), plans the fit from them
    (:func:`~privrec.models.dpals_axes.plan_on_axes`), fits the selected columns (sent with every
    message of the fit) and composes the ledger as the local fit
    (:func:`~privrec.models.dpals_axes.finish_axes`): the guarantee is stated under add/remove of
    one user; ``item_ids_`` are the selected columns (the clients' item order). With
    ``axes="warn"`` the clients' users and columns are the declared roster and catalogue
    (zero-out).

    Private fits with every method (SSP ``dpals-*`` / ``ada-dpals``, noisy GD ``dpsgd-*`` /
    ``ada-dpsgd``), explicit or implicit feedback, biases, centering, ``unobserved_weight``,
    ``item_frac``. ``epsilon = inf`` is not supported (fit locally). ``user_factors_`` is ``None``
    (users project themselves: ``transform`` / ``recommend(userid, user_items)``).
    ``federation_`` holds the round log (:class:`~privrec.federated.flower._common.RoundLog`).
    """
    from ...models import DPALS

    if not isinstance(model, DPALS):
        raise TypeError(f"fit_dpals fits a DPALS, got {type(model).__name__}")
    fed = Federation(grid, APP, min_clients=min_clients, wait=wait, timeout=timeout, max_retries=max_retries, job=job)
    rating_range = model._rating_range()
    rating_bound = max(abs(v) for v in rating_range) if rating_range else float(model.rating_bound)
    clients = fed.connect({"rating_range": json.dumps(rating_range), "rating_bound": rating_bound})
    n_items_seen = {int(r["n_items"]) for r in clients.values()}
    if len(n_items_seen) != 1:
        raise ValueError(f"the clients disagree on the number of items: {sorted(n_items_seen)}")
    n_users, n_items = sum(fed.units.values()), n_items_seen.pop()
    model.axes_ = None  # as DPALS.fit: set below when the axes are released
    axes = plan_axes(model, roster=bool(roster), catalogue=bool(catalogue)) if model._releases_axes else None
    if axes is not None:  # DPALS(axes="release"): the axes' releases, then the fit planned from them
        _check_roster(model, model._resolve_config(None), clients)  # every rating, whichever items are selected
        _fit_released_axes(model, fed, axes, n_users, n_items)
        _finish_federated(model, fed)
        return model
    plan = plan_fit(model, (n_users, n_items), keys="user ids")
    if not plan.private:
        raise ValueError("a Flower fit is private (finite epsilon); fit epsilon=inf locally with DPALS.fit")
    _check_roster(model, plan.config, clients)
    _run_plan(model, fed, plan, (n_users, n_items))
    _finish_federated(model, fed)
    return model


def _run_plan(model, fed: Federation, plan, shape: tuple[int, int], columns: np.ndarray | None = None) -> None:
    """Run the fit's ``plan`` for the public ``shape`` on the clients (``columns``: the selected
    item columns every message carries): the local fit's selection, or one fit."""
    if plan.kind == "selection":  # the local fit's selection: candidates on the clients' training parts
        run_automatic_selection(model, plan, FlowerSelectionData(fed, shape, columns), show_progress=False)
        n_items = shape[1]
        _set_ids(model, cast(Any, SimpleNamespace(item_ids=np.arange(n_items), info={}, n_items=n_items)))
    else:
        _fit_plan(model, fed, plan, shape, columns=columns)


def _fit_released_axes(model, fed: Federation, axes, n_users: int, n_items: int) -> ReleasedAxes:
    """The local :func:`~privrec.models.dpals_axes.fit_released_axes` after its input checks, on the
    clients: the axes' releases (the weighted counts summed over clients), the one plan made from
    them, its fit on the selected columns, the composed ledger and the ids."""
    cfg = model._resolve_config(None)

    def weighted(key: int) -> np.ndarray:
        config = {"stage": "axes", "k": int(axes.max_items), "key": str(key), "implicit": cfg.implicit}
        replies = _ask(fed, "item selection", config)
        return summed(replies, ["weighted"], {"weighted": ((n_items,), np.float64)})["weighted"]

    released = release_axes(model, axes, n_users, n_items, weighted)
    plan = plan_on_axes(model, released, "user ids")
    columns = released.items if released.selected else None
    _run_plan(model, fed, plan, (plan.n_users, plan.n_items), columns)
    if released.selected:  # the released item axis: the selected columns
        set_selected_ids(model, released.items)
    finish_axes(model, released)
    return released


def _finish_federated(model, fed: Federation) -> None:
    """The round log, the fitted-state checks; a warning when a release ran with fewer users."""
    import warnings

    from ...models._base import _check_fitted_factors

    model.federation_ = fed.log.as_dict()
    short = model.federation_.get("short_rounds") or []
    if short:
        warnings.warn(
            f"{len(short)} release(s) of this Flower fit ran without some clients' users (e.g. {short[0]!r}): the "
            "guarantee holds, but the model was fitted on fewer users; see model.federation_['rounds']",
            UserWarning,
            stacklevel=3,
        )
    _check_fitted_factors(model)
    model._fitted_params = _param_fingerprint(model)


def _ask(fed: Federation, label: str, config: dict, values: dict | None = None) -> dict:
    """``fed.ask``, refused when no client answered: a release must contain some users' data (the
    noise alone would pass for a model)."""
    replies = fed.ask(label, config, values)
    if not replies:
        raise RuntimeError(
            f"no Flower client answered the round {label!r}: nothing was released; check the clients' logs"
        )
    return replies


class FlowerSelectionData:
    """The clients' users for :func:`privrec.tuning.selection.run_selection`: each client splits its
    users' ratings by the same keyed holdout (its users' ids), fits every candidate on the training
    parts (the ``part`` fields of each message) and returns the sum of its users' clipped held-out
    losses against a candidate's release -- the server sees that sum before it adds the score noise,
    as it sees every other statistic (:data:`TRUST_STATEMENT`)."""

    def __init__(self, fed: Federation, shape: tuple[int, int], columns: np.ndarray | None = None):
        self.fed = fed
        self.shape = shape
        self.columns = columns  # the selected item columns (a fit after the axes' releases), sent with every message
        self.part: dict[str, Any] = {}
        self.fits = 0

    def split(self, fraction: float, key: int) -> None:
        self.part = {"part": "train", "holdout": float(fraction), "holdout_key": str(int(key))}

    def _fit(self, model, part: dict[str, Any]):
        from ...tuning.plan import plan_fit

        self.fits += 1
        plan = plan_fit(model, self.shape, keys="user ids")
        return _fit_plan(model, self.fed, plan, self.shape, {**part, "part_tag": f"-fit{self.fits}"}, self.columns)

    def fit(self, model, show_progress: bool):
        return self._fit(model, self.part)

    def score(self, model, clip: float, rating_cap) -> float:
        config, arrays = _release_message(model)
        config.update(self.part, stage="losses", clip=float(clip), rating_cap=int(rating_cap or 0))
        if self.columns is not None:
            arrays = {**arrays, "columns": np.asarray(self.columns, dtype=np.int64)}
        replies = _ask(self.fed, "selection losses", config, arrays)
        return float(summed(replies, ["loss"], {"loss": ((1,), np.float64)})["loss"][0])

    def refit(self, model, show_progress: bool):
        return self._fit(model, {})

    def finish(self, model) -> None:
        """Nothing to gather: users project themselves (``user_factors_`` stays ``None``)."""


def _fit_plan(model, fed: Federation, plan, shape: tuple[int, int], part: dict[str, Any] | None = None, columns=None):
    """One federated fit of ``plan`` (kind ``"fit"``) on the clients' users (``part``: the
    selection's training parts; ``columns``: the selected item columns; both sent with every
    message). The local fit's stages, in its order."""
    part = dict(part or {})
    extra = {} if columns is None else {"columns": np.asarray(columns, dtype=np.int64)}
    # what the rules read: the declared roster's size, or the noisy count of an undeclared one
    users, n_users = public_users(plan, shape[0])
    n_items = shape[1]
    cfg = plan.config

    # 1. the local fit's sequence: rng, init_rng, pipeline, calibration ------------------------
    dtype, d = cfg.dtype, cfg.factors
    rng = make_rng(model.random_state)
    init_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    t_start = time.perf_counter()
    pipe = model._pipeline(cfg, rng)
    cal = pipe.use_calibration(plan.calibration)
    k = cfg.count_sample

    def counts_round(key: int) -> np.ndarray:
        config = {"stage": "counts", "k": k, "key": str(key), "implicit": cfg.implicit, **part}
        replies = _ask(fed, "item counts", config, extra or None)
        return summed(replies, ["counts"], {"counts": ((n_items,), np.float64)})["counts"]

    def mean_round(key: int, half: float, mid: float) -> tuple[float, float]:
        config = {"stage": "mean", "k": k, "key": str(key), "half": half, "mid": mid, "implicit": cfg.implicit}
        replies = _ask(fed, "global mean", {**config, **part}, extra or None)
        total, n = summed(replies, ["sums"], {"sums": ((2,), np.float64)})["sums"]
        return float(total), float(n)

    counts = pipe.release_sampled_counts(counts_round, k)
    mu = pipe.release_sampled_mean(mean_round, k, cfg.rating_bound, cfg.rating_range) if cfg.center else 0.0
    head = pipe.head(counts, cfg.item_frac)
    counts_h = counts[head]
    cfg = model._released_ridges(cfg, counts_h, users)
    alloc_key = pipe.allocation_key(cfg.allocation)  # drawn where the local pipe.allocate draws it
    model._exposure_parts = []  # this fit's noisy weighted counts (dpals_release.collect_exposure)

    # 2. ridges and initial factors ------------------------------------------------------------
    reg_items, _ = model._item_regularization(cfg, counts_h, cal.train_scale)
    V = (init_rng.standard_normal((head.size, d)) * cfg.init_scale).astype(dtype)
    b_items = np.zeros(head.size, dtype=dtype) if cfg.biases else None
    m = head.size
    reg_dtype = as_task_array(reg_items, m, "reg", dtype)
    width = d + (1 if cfg.biases else 0)
    step_times: list[float] = []
    t_pre = time.perf_counter() - t_start
    cfg_text = _config_json(cfg)

    # 3. alternating steps ---------------------------------------------------------------------
    for t in range(1, cfg.iterations + 1):
        t_step = time.perf_counter()
        sizes = np.maximum(counts_h, 1.0)
        public = SimpleNamespace(  # the public task information the noisy-GD step sizes use
            task_sizes=sizes, task_weights=model._task_weights(cfg, sizes, n_users), n_units=n_users, n_tasks=m
        )
        solver: Any = model._item_solver(cfg, cal.train_scale, reg_items, V, b_items, public)
        gravity = "features" if cfg.unobserved_weight > 0 else ""
        config = {
            "stage": "step",
            "t": t,
            "cfg": cfg_text,
            "mu": float(mu),
            "alloc_key": "" if alloc_key is None else str(alloc_key),
            "n_users": n_users,
            "max_norm": float(solver.max_norm),
            "gravity": gravity,
            "label_bound": float(solver.label_bound),
            **part,
        }
        values = {"V": V, "b": b_items, "head": head, "counts_h": counts_h, **extra}
        replies = _ask(fed, f"ALS step {t}", config, values)
        if any(int(config_of(r)["over_budget"]) for r in replies.values()):
            raise ValueError(
                f"a client's per-user spend exceeds the declared budget {cfg.budget:.6g}; "
                "build the weights with privrec.allocation (which enforces the budget)"
            )
        shapes = {"G": ((m, width, width), dtype), "b": ((m, width), dtype), "gram": ((width, width), dtype)}
        stats = summed(replies, ["G", "b", "gram"], shapes)
        gram = solver.release_global_gramian(stats["gram"], rng) if gravity else None  # SSPSolver.solve's order
        seeds = solver.noise_seeds(rng, m)
        gd = None
        if cfg.solver == "noisy_gd":  # public start (the released V) and public step sizes
            steps = solver._steps(public, reg_dtype, solver.noise_std())
            eta = np.stack([steps(i) for i in range(1, solver.iterations + 1)]).astype(dtype)
            gd = {"theta0": np.asarray(solver.init, dtype=dtype), "steps": eta}
        root = dataclasses.replace(solver, reg=0.0, **({"init": None, "schedule": 1.0} if gd is not None else {}))
        out = _release_blocks((stats["G"], stats["b"]), 0, seeds, root, reg_dtype, gram, 0, gd)
        if gd is None:
            info: dict[str, Any] = {"solver": "ssp", "projected_tasks": int(out[1])}
            if len(out) > 2:  # SSP with keep_diagonal: the noisy Gramians' diagonals and rhs
                info["noisy_gramian_diagonal"], info["noisy_rhs"] = out[2], out[3]
        else:
            info = {"solver": "noisy_gd", "iterations": int(solver.iterations)}
        result = Release(out[0], solver.labelled_events(), info)
        pipe.record(result, prefix=f"ALS step {t}: ")
        V, b_items = item_side(model, cfg, result, solver)
        step_times.append(time.perf_counter() - t_step)

    # 4. ledger check and the Dask fit's release (the local fit's, without user factors) --------
    ledger = pipe.finish()
    catalogue = SimpleNamespace(item_ids=np.arange(n_items), info={}, n_items=n_items)  # the clients' columns, no ids
    release_attributes(
        model, catalogue, cfg, cal, ledger, head, counts, V, b_items, mu, 1.0, 1.0, users, n_items, als=False
    )
    model.fit_timings_ = {"preprocess": t_pre, "steps": step_times, "projection": 0.0}
    return model


def _check_roster(model, cfg, roster: dict) -> None:
    """The local fit's input checks from the clients' counts (sums only)."""
    nnz = sum(int(r["nnz"]) for r in roster.values())
    if nnz == 0:
        raise ValueError("user_items holds no ratings (nnz = 0); every user and item has no data")
    outside = sum(int(r["outside"]) for r in roster.values())
    if cfg.implicit:
        if sum(int(r["negative"]) for r in roster.values()):
            raise ValueError("implicit feedback must be non-negative (counts, clicks); got negative values")
    elif outside and cfg.rating_range is not None:
        lo, hi = cfg.rating_range
        raise ValueError(
            f"{outside} ratings lie outside the declared rating_range [{lo:g}, {hi:g}]; fix the data or declare "
            "the right range"
        )
    elif outside:
        import warnings

        warnings.warn(
            f"{outside} ratings lie beyond rating_bound={cfg.rating_bound:g}: they are clipped in every private "
            "statistic; declare rating_range=(low, high) for this scale, or use feedback='implicit' for counts",
            UserWarning,
            stacklevel=3,
        )


# ---------------------------------------------------------------------- report


#: the trust statement of a Flower fit (added to the privacy report by :func:`privacy_report`)
TRUST_STATEMENT = {
    "runtime": "Flower (ServerApp + one ClientApp per group of users)",
    "server_sees": (
        "the exact sums over clients of the numbers of ratings (and of ratings outside the declared range, for the "
        "input checks), the sampled item counts, the sampled rating sums and, per ALS step, the weighted per-item "
        "Gramians and right-hand sides (and the global Gramian with unobserved_weight > 0), before it adds the "
        "noise, and each client's own sums (privrec's Flower apps use no secure aggregation), so the server is "
        "trusted with them as the Dask driver is"
    ),
    "clients_see": "the released item side, the public settings and the public sampling keys; never the noise seeds",
    "dropouts": "a client left out of a release removes its users from that release only (each user at most once "
    "per release): the noise, the events and epsilon are unchanged",
}


def privacy_report(model) -> dict:
    """``model.privacy_report()`` (events, epsilon, neighbouring relation, what is public) plus the
    trust statement of the federation and its round log."""
    report = model.privacy_report()
    report["federation"] = {**TRUST_STATEMENT, **(getattr(model, "federation_", None) or {})}
    if getattr(model, "axes_", None):  # DPALS(axes="release"): what the server saw of the axes' releases
        report["federation"]["server_sees"] += (
            "; before the fit, the exact number of users on the clients (the noisy count's input) and, without a "
            "declared catalogue, the sums over clients of the users' weighted per-item counts of the item selection, "
            "before it adds the noise"
        )
    return report
