"""The DP-ALS fit on Dask: :func:`fit` runs :meth:`privrec.models.DPALS.fit` over user partitions.

What runs where (one sweep = user step, then item step):

* **driver** -- everything that draws randomness or is released, in exactly the order of the local
  :meth:`~privrec.models.DPALS.fit`: configuration (``_resolve_config`` on the public shape),
  calibration (:class:`privrec.pipeline.PrivatePipeline`), the sampling keys (one
  :func:`~privrec.allocation.sampling_key` per sampled release), the Gaussian releases of the item
  counts and of the global mean (from tree-summed exact per-partition statistics), the head
  restriction, the item ridge, the initial item factors, and per ALS step the budget check, the
  released global Gramian (``unobserved_weight > 0``), the per-block noise seeds
  (``SSPSolver.noise_seeds``) and the ledger record; finally the ledger-vs-plan check and the
  release attributes;
* **partition tasks** (:mod:`privrec.distributed.tasks`; where the partition's CSR block lives;
  the state persists on the workers between steps) -- binarisation (implicit feedback), sampled counts / rating sums with the
  partition's users' keys (counter-based sampling keyed on the stable hash of each user's id:
  the same entries as on the whole matrix), head restriction, centering, the per-user allocation (uniform / tail with the
  driver's key, adaptive), the per-user ridge, the item-major batch structure, and per step the
  user step (``DPALS._user_step``, warm-started CG by default), labels (minus the user bias, clipped when private),
  features ``[U, c]`` and the unit spend;
* **reduction** (:func:`~privrec.distributed.reduce_item_blocks`) -- per public block of
  ``block_tasks`` items (a multiple of ``NOISE_BLOCK``): each partition's exact statistics
  (``chunk_statistics``), a fixed fan-in tree sum, and at the root ``SSPSolver.release_block``
  with the seed of each noise block it covers (or the exact ridge solve at epsilon = inf).

Equality with the local fit: the same random draws in the same order give the same noise, the
same sampled entries, the same allocation and the same ledger; only floating-point sums are
taken in another order (statistics over partitions, the global Gramian, the non-private mean and
user-ridge normaliser) and the exact user / item solves batch their rows differently, so the
factors agree to float tolerance (float32: a few ulps per sum, observed within ~1e-6 of the
factors' scale after a few steps; ``tests/test_distributed_fit.py`` asserts 1e-4), while the
ledger, the noise scales and the privacy report are identical. For a fixed ``(n_partitions, fan_in, block_tasks)`` a
distributed run is bit-identical across schedules, retries and lost workers (every task is pure
and every random draw is an argument).

Undeclared axes (``DPALS(axes="release")``, add/remove DP): before the stages above the driver
releases the noisy user count and, unless ``items`` declared the catalogue, the private item
selection -- each partition returns its users' weighted per-item counts (keyed on their ids), the
driver tree-sums them and releases with the local fit's mechanisms and draws
(:func:`privrec.models.dpals_axes.release_axes`) -- then plans from them
(:func:`~privrec.models.dpals_axes.plan_on_axes`) and runs that plan on blocks restricted to the
selected items (built where each partition lives).

Not gathered: ``user_factors_`` (``None``): project users from their own histories with
``transform`` / ``partial_fit_users`` / ``recommend(userid, user_items)`` (billboard projection,
free). Trust model: workers and driver together are the trusted curator of central DP, as the
process running the local fit is. The exact per-item statistics are noised at their roots on the
workers; the driver receives aggregates only -- the exact (sampled) item counts, rating sums and,
with ``unobserved_weight > 0``, the global Gramian before it adds their noise, as the local fit
computes them -- never a user's row.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
import warnings
from collections.abc import Callable

import numpy as np

from .._io import progress_steps
from .._params import _param_fingerprint
from .._validation import check_memory
from ..models.dpals_axes import finish_axes, plan_on_axes, release_axes, set_selected_ids
from ..privacy import make_rng
from ..solvers._base import NOISE_BLOCK
from ..solvers._linalg import as_task_array
from ..tuning.auto import run_automatic_selection
from ..tuning.plan import plan_axes, plan_fit
from ._client import get_client
from .driver_stages import (
    Sweep,
    als_step,
    catalogue_declared,
    public_users,
    release_attributes,
    release_counts_and_mean,
)
from .driver_stages import set_ids as _set_ids
from .partition import PartitionedInteractions, _release_freed_memory, partition_interactions
from .reduce import DEFAULT_FAN_IN, tree_sum
from .selection import DaskSelectionData

# the worker-side task bodies (moved to .tasks; re-exported: importable from here, as before the split)
from .tasks import (  # noqa: F401
    PartitionState,
    StepData,
    _block_nnz,
    _exact_counts,
    _exact_sum,
    _gram,
    _head_user_counts,
    _identity,
    _out_of_range,
    _partition_user_keys,
    _prepare,
    _release_blocks,
    _sampled_counts,
    _sampled_sum,
    _scan,
    _select_columns,
    _solve_exact,
    _spend,
    _statistics,
    _training_matrix,
    _user_count_sums,
    _user_step,
    _warm,
    _weighted_counts,
    _with_user_reg,
)
from .tasks import _weights as _weights

#: item tasks per reduction block (4 noise blocks: 1024 x (d+1)^2 float32 Gramians = 4.5 MB at d = 32)
DEFAULT_BLOCK_TASKS = 4 * NOISE_BLOCK
#: values up to this size travel as a task argument (recomputable after a worker loss); larger ones
#: are scattered to every worker (no lineage: a copy must survive on some worker)
_INLINE_BYTES = 16 << 20


# ---------------------------------------------------------------------- the driver


def _check_model(model) -> None:
    from ..models import ALS, DPALS

    if not isinstance(model, (DPALS, ALS)):
        raise TypeError(f"privrec.distributed.fit fits a DPALS or an ALS, got {type(model).__name__}")
    if isinstance(model, ALS) and model.feedback != "explicit":
        raise ValueError(
            "privrec.distributed.fit runs ALS as the exact DPALS path, which has no confidence weights: "
            "ALS(feedback='implicit') is fitted locally only (or use DPALS(feedback='implicit', epsilon=inf))"
        )


def _als_proxy(als):
    """The exact, non-private DPALS path with ALS's settings (see :func:`fit`)."""
    from ..models import DPALS

    same = ("factors", "biases", "center", "unobserved_weight", "init_scale", "dtype", "num_threads")
    return DPALS(
        method="ada-dpals",
        epsilon=math.inf,
        iterations=max(1, int(als.iterations)),
        user_solver="cholesky",
        regularization=als.regularization,
        reg_exponent=als.reg_exponent,
        user_regularization=als.regularization,
        user_reg_exponent=als.reg_exponent,
        item_frac=1.0,
        **{name: getattr(als, name) for name in same},
    )


def _share(client, value, key: str):
    """A future of ``value`` for task arguments: a task (recomputable) when small, scattered otherwise."""
    values = value.values() if isinstance(value, dict) else [value]
    nbytes = sum(v.nbytes for v in values if isinstance(v, np.ndarray))
    if nbytes > _INLINE_BYTES and not getattr(client, "serial", False):
        return client.scatter([value], broadcast=True, hash=False)[0]  # one future for the whole value
    return client.submit(_identity, value, key=key)


def _check_block_tasks(block_tasks) -> int:
    if isinstance(block_tasks, bool) or not isinstance(block_tasks, (int, np.integer)) or block_tasks < NOISE_BLOCK:
        raise ValueError(f"block_tasks must be a positive multiple of NOISE_BLOCK = {NOISE_BLOCK}, got {block_tasks!r}")
    if block_tasks % NOISE_BLOCK:
        raise ValueError(f"block_tasks must be a multiple of NOISE_BLOCK = {NOISE_BLOCK}, got {block_tasks}")
    return int(block_tasks)


def fit(
    model,
    data,
    *,
    client=None,
    n_partitions: int | None = None,
    user_col="user",
    item_col="item",
    rating_col="rating",
    items=None,
    duplicates: str = "error",
    show_progress: bool = False,
    fan_in: int = DEFAULT_FAN_IN,
    block_tasks: int = DEFAULT_BLOCK_TASKS,
    max_in_flight: int | None = None,
    _leaf_hook: Callable | None = None,
    _shape: tuple[int, int] | None = None,
):
    """Fit ``model`` (a :class:`~privrec.models.DPALS` or :class:`~privrec.models.ALS`) on partitioned
    data with Dask; returns ``model``, fitted as by its own ``fit`` (see the module docstring).

    ``data``: a :class:`~privrec.distributed.PartitionedInteractions`, or anything
    :func:`~privrec.distributed.partition_interactions` takes (a Dask / pandas DataFrame, a Parquet
    path or glob), partitioned here with ``n_partitions``, the column names, ``items`` (public item
    vocabulary) and ``duplicates`` (and released afterwards). ``client``: a ``distributed.Client``
    (default: the data's, else the current one) or a :class:`~privrec.distributed.SerialClient`.
    ``fan_in``: of the summation trees; ``block_tasks``: item tasks per reduction block (a multiple
    of ``NOISE_BLOCK``; it changes the order of float sums, never the noise); ``max_in_flight``:
    blocks reduced at once (memory bound, default 4). ``_leaf_hook(offset, items)``: called at the
    start of every statistics task (fault-injection tests only). ``_shape``: the public shape a
    candidate of the automatic selection after the axes' releases plans for (the noisy user count,
    the selected items; internal: such a fit releases no axes of its own).

    ``DPALS(axes="release")``: the partitions' users are not a declared roster, and their item axis
    is a declared catalogue only when ``items`` were given (a vocabulary the partitions still have,
    by fingerprint). Before the fit the driver releases a noisy user count and, without a declared
    catalogue, the private item selection (weighted Gaussian thresholding; each partition returns
    its users' weighted per-item counts, keyed on their ids, and the driver adds them) with the local
    fit's mechanisms, labels and random draws (:func:`privrec.models.dpals_axes.release_axes`),
    plans the fit from them (:func:`~privrec.models.dpals_axes.plan_on_axes`), fits the selected
    items' ratings and composes the ledger as the local fit
    (:func:`~privrec.models.dpals_axes.finish_axes`): the guarantee is stated under add/remove of
    one user, and ``item_ids_`` are the selected items' ids.

    DPALS: every method (SSP: ``dpals-uniform``, ``dpals-tail``, ``ada-dpals``; noisy GD: ``dpsgd-uniform``,
    ``dpsgd-tail``, ``ada-dpsgd``, whose T inner steps run at each block's root from the summed
    statistics, with public start and step sizes), explicit or implicit
    feedback, biases, centering, ``unobserved_weight``, ``item_frac``, finite or infinite epsilon.
    Released attributes equal the local fit's (factors to float tolerance; ledger, noise scales,
    configuration and trained items identical); ``user_factors_`` / ``user_bias_`` are ``None``
    (not gathered: use ``transform``, ``partial_fit_users`` or ``recommend(userid, user_items)``)
    and ``user_ids_`` is ``None`` (no user factors to index), ``fit_timings_["projection"]`` is 0
    and ``fit_timings_`` has no ``user_steps`` (the user steps run on the workers).
    The per-task solves use ``model.num_threads`` threads (default 1: parallelism comes from the
    partitions, so use at least as many partitions as worker threads).

    ALS: run as the exact non-private DPALS path (epsilon = inf: exact mean, all weights 1, exact
    ridge solves of both half-steps, the frequency-scaled ridge ``regularization`` on both sides),
    i.e. it equals ``ALS(solver="cholesky")`` with the same settings to float tolerance; with
    ``solver="cg"`` (ALS's default) the solves are exact anyway (a ``UserWarning`` says so: CG's
    warm-started iterations would need one reduction per CG step). The gravity term (unobserved
    weight) is ALS's (user factors only, no bias coordinate). Sets ``item_factors_``,
    ``item_bias_``, ``global_mean_``, ``user_reg_norm_``, ``item_reg_norm_``; ``user_factors_`` and
    ``user_bias_`` are ``None``.
    """
    from ..models import ALS

    _check_model(model)
    block_tasks = _check_block_tasks(block_tasks)
    if isinstance(model, ALS):
        model._validate()
        if model.solver != "cholesky":
            warnings.warn(
                f"ALS(solver={model.solver!r}) is fitted with exact (Cholesky) solves by privrec.distributed.fit: "
                "the result equals ALS(solver='cholesky')",
                UserWarning,
                stacklevel=2,
            )
    owned = not isinstance(data, PartitionedInteractions)
    if owned and n_partitions is None:
        # a public default: the number of partitions fixes the order of float sums, so it must
        # not come from the (private) size of the data, as partition_interactions' default would
        n_partitions = 4 * _worker_threads(get_client(client))
    if owned:
        parts = partition_interactions(
            data, user_col, item_col, rating_col, n_partitions, items, client, duplicates=duplicates
        )
    else:
        parts = data
        if n_partitions is not None and n_partitions != parts.n_partitions:
            raise ValueError(
                f"n_partitions={n_partitions} differs from the data's {parts.n_partitions} partitions "
                "(repartition with partition_interactions, or leave n_partitions=None)"
            )
    try:
        run_client = get_client(client or parts.client)
        options = dict(fan_in=fan_in, block_tasks=block_tasks, max_in_flight=max_in_flight, _leaf_hook=_leaf_hook)
        axes = released = None
        fitted, shape = parts, _shape
        if not isinstance(model, ALS):
            model.axes_ = None  # as DPALS.fit: set below when the axes are released
            axes = None if _shape is not None else _axes_plan(model, parts)
        if axes is not None:  # DPALS(axes="release"): the axes' releases, then the fit planned from them
            released, plan, fitted = _release_axes(model, parts, axes, run_client, options)
            shape = (plan.n_users, plan.n_items)
        else:
            plan = None if isinstance(model, ALS) else _plan(model, parts, shape)
        try:
            if plan is not None and plan.kind == "selection":  # the local fit's selection, on the partitions
                data = DaskSelectionData(
                    fitted, run_client, fit, {**options, **({} if shape is None else {"_shape": shape})}
                )
                try:
                    run_automatic_selection(model, plan, data, show_progress)
                finally:
                    data.release()
                _set_ids(model, fitted)
            else:
                driver = _Driver(model, fitted, run_client, fan_in, block_tasks, max_in_flight, _leaf_hook)
                driver.run(show_progress, plan)
        finally:
            if fitted is not parts:
                fitted.release()
        if released is not None:
            if released.selected:  # the released item axis: the selected items, with their ids
                set_selected_ids(model, np.asarray(parts.item_ids)[released.items])
            finish_axes(model, released)
    finally:
        if owned:
            parts.release()

    model._fitted_params = _param_fingerprint(model)  # save() refuses parameters changed after this fit
    return model


def _axes_plan(model, parts: PartitionedInteractions):
    """The releases of the undeclared axes of a ``DPALS(axes="release")`` fit on ``parts``
    (:func:`privrec.tuning.plan.plan_axes`), or ``None``: the partitions' users are those with
    ratings (no declared roster); their items are a declared catalogue when given
    (:func:`~privrec.distributed.driver_stages.catalogue_declared`)."""
    if not model._releases_axes:
        return None
    return plan_axes(model, roster=False, catalogue=catalogue_declared(parts))


def _release_axes(model, parts: PartitionedInteractions, axes, client, options: dict):
    """``(released, plan, fitted)``: the local :func:`~privrec.models.dpals_axes.fit_released_axes`
    up to its fit, on the partitions -- the input checks on every rating, the axes' releases (the
    weighted counts summed over partitions, keyed on the users' ids), the one plan made from them
    and the partitions on the selected items' columns (``parts`` itself when the catalogue is
    declared) that the plan is fitted on."""
    o = options
    driver = _Driver(model, parts, client, o["fan_in"], o["block_tasks"], o["max_in_flight"], o["_leaf_hook"])
    cfg = model._resolve_config(None)
    _, _, lo_v, hi_v = driver.scan_values(cfg)  # every rating checked, whichever items are selected
    if not cfg.implicit:
        model._check_rating_span(lo_v, hi_v, cfg)
    base = driver.per_partition(_training_matrix, parts.blocks, cfg.implicit, name="axes-matrix")
    ukeys = driver.per_partition(_partition_user_keys, parts.blocks, name="axes-user-keys")

    def weighted(key: int) -> np.ndarray:
        counts = driver.per_partition(_weighted_counts, base, axes.max_items, key, name="axes-counts", user_keys=ukeys)
        return np.asarray(driver.total(counts, "axes-counts-sum"), dtype=np.float64)

    released = release_axes(model, axes, parts.n_users, parts.n_items, weighted)
    plan = plan_on_axes(model, released, "user ids")
    fitted = _on_columns(driver, parts, released.items) if released.selected else parts
    return released, plan, fitted


def _on_columns(driver, parts: PartitionedInteractions, columns: np.ndarray) -> PartitionedInteractions:
    """``parts`` on the selected item ``columns`` only (one new block per partition, built where
    the partition lives); its item axis is the selection, not a declared catalogue."""
    client = driver.client
    cols = driver.share(np.asarray(columns, dtype=np.int64), "axes-columns")
    blocks = [
        client.submit(_select_columns, b, driver.offsets[p], cols, key=driver.key("axes-block", p))
        for p, b in enumerate(parts.blocks)
    ]
    nnz = client.gather([client.submit(_block_nnz, b, key=driver.key("axes-nnz", p)) for p, b in enumerate(blocks)])
    info = {k: v for k, v in parts.info.items() if k != "item_vocabulary_sha256"}
    info["item_vocabulary"] = "selection"
    ids = np.asarray(parts.item_ids)[np.asarray(columns, dtype=np.int64)]
    return PartitionedInteractions(client, blocks, ids, parts.partition_sizes, np.asarray(nnz, dtype=np.int64), info)


def _plan(model, parts: PartitionedInteractions, shape: tuple[int, int] | None = None):
    """The fit's :class:`~privrec.tuning.plan.FitPlan` for the partitioned roster and catalogue
    (the same plan as the local fit of the same users: sampling keyed on their ids); ``shape``: the
    public shape when it is not the partitions' (a selection's candidate after the axes' releases)."""
    return plan_fit(model, parts.shape if shape is None else shape, keys="user ids")


def _worker_threads(client) -> int:
    """Worker threads of the cluster (public: the deployment, not the data); 1 for a serial client."""
    if getattr(client, "serial", False):
        return 1
    return max(1, sum(client.nthreads().values()))


class _Driver:
    """One distributed fit (driver side). See the module docstring for the call sequence; the
    stages' bodies are in :mod:`privrec.distributed.driver_stages`."""

    def __init__(self, model, parts: PartitionedInteractions, client, fan_in, block_tasks, max_in_flight, hook):
        from ..models import ALS

        self.model = model
        self.als = isinstance(model, ALS)
        self.parts = parts
        self.client = client
        self.fan_in = fan_in
        self.block_tasks = block_tasks
        self.max_in_flight = max_in_flight
        self.hook = hook
        self.token = f"privrec-fit-{uuid.uuid4().hex[:12]}"
        self.offsets = [int(o) for o in parts.offsets[:-1]]

    # -------------------------------------------------------------- helpers
    def key(self, *names) -> str:
        return "-".join([self.token, *(str(n) for n in names)])

    def per_partition(self, fn, inputs: list, *args, name: str, user_keys: list | None = None) -> list:
        """Futures of ``fn(inputs[p], offset_p, *args)``, one per partition (runs where the input is);
        with ``user_keys`` (one future per partition) ``fn`` also gets ``user_keys=user_keys[p]``."""
        extra = [{} if user_keys is None else {"user_keys": user_keys[p]} for p in range(len(inputs))]
        return [
            self.client.submit(fn, inp, self.offsets[p], *args, key=self.key(name, p), **extra[p])
            for p, inp in enumerate(inputs)
        ]

    def total(self, futures: list, name: str):
        return tree_sum(futures, self.fan_in, self.client, key=self.key(name)).result()

    def share(self, value, *names):
        """A future of ``value`` for task arguments (:func:`_share`), keyed by ``names``."""
        return _share(self.client, value, self.key(*names))

    # -------------------------------------------------------------- the fit
    def run(self, show_progress: bool, plan=None) -> None:
        """One fit: ``plan`` (a :class:`~privrec.tuning.plan.FitPlan` of kind ``"fit"``) for a
        DPALS, the exact path's settings for an ALS."""
        model, parts, client = self.model, self.parts, self.client
        _release_freed_memory(client)  # freed shuffle buffers still held by the workers' heaps
        n_users, n_items = parts.shape
        proxy, cfg, task_model, plan = self._settings(plan)
        # what the rules read: the declared roster's size, or the noisy count of an undeclared one
        users, rule_users = public_users(None if self.als else plan, n_users)

        # 0. validation (the local fit's input checks, from per-partition summaries) ----------------
        scans, nnz, lo_v, hi_v = self.scan_values(cfg)
        if not cfg.implicit and self.als:
            self._warn_als_range(scans, nnz)
        elif not cfg.implicit:
            model._check_rating_span(lo_v, hi_v, cfg)
        base = self.per_partition(_training_matrix, parts.blocks, cfg.implicit, name="matrix")
        # per-user sampling keyed on the users' ids (the local fit's keys for the same Interactions)
        ukeys = self.per_partition(_partition_user_keys, parts.blocks, name="user-keys") if cfg.private else None

        # 1. the local fit's sequence: rng, init_rng, pipeline, calibration --------------------------
        dtype, d = cfg.dtype, cfg.factors
        rng = make_rng(None if self.als else model.random_state)  # ALS draws no noise (its pipeline is exact)
        if cfg.private:
            init_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
        elif not self.als:
            init_rng = make_rng(model.random_state)
        t_start = time.perf_counter()
        pipe = proxy._pipeline(cfg, rng)
        cal = pipe.calibrate() if self.als else pipe.use_calibration(plan.calibration)
        # counts and mean: the pipeline's own releases, with the exact statistics summed over partitions
        counts, mu = release_counts_and_mean(self, cfg, pipe, base, ukeys)
        head = pipe.head(counts, cfg.item_frac)
        counts_h = counts[head]
        cfg = proxy._released_ridges(cfg, counts_h, users)
        alloc_key = pipe.allocation_key(cfg.allocation)  # drawn where the local pipe.allocate draws it
        trains = cfg.iterations > 0
        states: list = []
        if trains:
            states = self.per_partition(
                _prepare,
                base,
                head,
                mu,
                counts_h,
                alloc_key,
                rule_users,
                task_model,
                cfg,
                name="state",
                user_keys=ukeys,
            )
        if not self.als:
            model._exposure_parts = []  # this fit's noisy weighted counts (dpals_release.collect_exposure)

        # 2. ridges and initial factors ------------------------------------------------------------
        reg_items, norm_i = proxy._item_regularization(cfg, counts_h, cal.train_scale)
        norm_u, states = self._user_ridge_norm(cfg, states, base, head, trains)
        del base, ukeys  # the states keep their lineage (recomputed from the blocks if a worker is lost)
        if self.als:
            V = model._init_item_factors(head.size, dtype)
        else:
            V = (init_rng.standard_normal((head.size, d)) * cfg.init_scale).astype(dtype)
        b_items = np.zeros(head.size, dtype=dtype) if cfg.biases else None
        reg_dtype = as_task_array(reg_items, head.size, "reg", dtype)
        sweep = Sweep(
            cfg=cfg,
            proxy=proxy,
            task_model=task_model,
            pipe=pipe,
            rng=rng,
            train_scale=cal.train_scale,
            counts_h=counts_h,
            n_users=rule_users,
            reg_items=reg_items,
            reg_dtype=reg_dtype,
            reg_future=self.share(reg_dtype, "reg") if trains else None,
            states=states,
        )
        step_times: list[float] = []
        warms: list = [None] * len(states)  # per partition: the users' previous solution (CG warm start)
        t_pre = time.perf_counter() - t_start

        # 3. alternating steps ---------------------------------------------------------------------
        for t in progress_steps(cfg.iterations, show_progress, "DPALS (distributed)"):
            t_step = time.perf_counter()
            V, b_items, warms = als_step(self, sweep, t, V, b_items, warms)
            step_times.append(time.perf_counter() - t_step)
        ledger = pipe.finish()
        del states, warms, sweep
        release_attributes(
            model, parts, cfg, cal, ledger, head, counts, V, b_items, mu, norm_u, norm_i, users, n_items, als=self.als
        )
        model.fit_timings_ = {"preprocess": t_pre, "steps": step_times, "projection": 0.0}

    def scan_values(self, cfg) -> tuple[list, int, float, float]:
        """``(scans, nnz, lowest, highest)``: the per-partition summaries of the raw ratings, after
        the local fit's refusals (no ratings; negative implicit feedback). The caller checks the
        range (``DPALS._check_rating_span``, called from the fit itself: its warning points there)."""
        client, parts = self.client, self.parts
        scans = client.gather([client.submit(_scan, b, key=self.key("scan", p)) for p, b in enumerate(parts.blocks)])
        nnz = sum(s["nnz"] for s in scans)
        if nnz == 0:
            raise ValueError("user_items holds no ratings (nnz = 0); every user and item has no data")
        lo_v, hi_v = min(s["min"] for s in scans), max(s["max"] for s in scans)
        if cfg.implicit and any(s["negative"] for s in scans):
            raise ValueError("implicit feedback must be non-negative (counts, clicks); got negative values")
        return scans, nnz, lo_v, hi_v

    def _settings(self, plan):
        """``(proxy, cfg, task_model, plan)``: the DPALS whose stages run (ALS: its exact path), the
        resolved settings, the estimator the tasks call and the DPALS's plan."""
        model, (n_users, n_items) = self.model, self.parts.shape
        proxy = _als_proxy(model) if self.als else model
        if not self.als and plan is None:
            plan = _plan(model, self.parts)
        cfg = proxy._resolve_config((n_users, n_items)) if self.als else plan.config
        if self.als:
            cfg = dataclasses.replace(cfg, iterations=int(model.iterations))
        threads = 1 if model.num_threads is None else int(model.num_threads)
        from sklearn.base import clone

        task_model = clone(proxy).set_params(num_threads=threads)  # what the tasks call (small, no fitted state)
        check_memory(n_items, cfg.factors + 1, cfg.dtype.itemsize, "DPALS item factors")
        return proxy, cfg, task_model, plan

    def _user_ridge_norm(self, cfg, states: list, base: list, head, trains: bool) -> tuple[float, list]:
        """``(norm_u, states)``: the global normaliser of the user ridge (non-private fits with a
        user ridge exponent; 1 otherwise), set in every partition's state."""
        if cfg.private or not cfg.user_reg_exponent:
            return 1.0, states
        client, e = self.client, cfg.user_reg_exponent
        if trains:
            sums = [client.submit(_user_count_sums, s, e, key=self.key("user-counts", p)) for p, s in enumerate(states)]
        else:
            sums = self.per_partition(_head_user_counts, base, head, e, name="user-counts")
        c_sum, denom = self.total(sums, "user-counts-sum")
        norm_u = c_sum / denom if denom > 0 else 1.0
        states = [
            client.submit(_with_user_reg, s, cfg.user_reg, e, norm_u, key=self.key("state-reg", p))
            for p, s in enumerate(states)
        ]
        return norm_u, states

    def _warn_als_range(self, scans: list, nnz: int) -> None:
        from ..models import RatingRangeWarning
        from ..models._base import check_rating_range

        declared = check_rating_range(self.model.rating_range)
        if declared is None:
            return
        low, high = declared
        futs = [
            self.client.submit(_out_of_range, b, low, high, key=self.key("range", p))
            for p, b in enumerate(self.parts.blocks)
        ]
        n_out = int(sum(self.client.gather(futs)))
        if n_out:
            warnings.warn(
                f"{n_out} of {nnz} ratings ({n_out / nnz:.2%}) fall outside the declared rating range "
                f"[{low:g}, {high:g}]; check the model's rating_range",
                RatingRangeWarning,
                stacklevel=4,
            )


__all__ = ["DEFAULT_BLOCK_TASKS", "PartitionState", "StepData", "fit"]
