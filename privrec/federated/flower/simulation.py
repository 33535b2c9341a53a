"""Running the apps on Flower's simulation runtime (``flwr.simulation.run_simulation``, Ray backend).

:func:`simulate` runs one ``ServerApp`` whose main executes ``jobs`` in order (each a callable of
the ``Grid``) against ``n_clients`` virtual SuperNodes running ``client_app``; the ServerApp runs in
a thread of this process, so a job's results (a fitted model, a returned value) are this
process's objects. :func:`fit_simulation` and :func:`mb_sgd_simulation` are the one-job cases.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from . import dpals as _dpals
from . import isrl as _isrl
from ._common import Fault


def partition_id(context: Context) -> int:
    """The client's partition number: ``partition-id`` of the node configuration (set by the
    simulation runtime, or ``--node-config "partition-id=3"`` on a deployed SuperNode)."""
    return int(context.node_config["partition-id"])


def client_app(
    shards: Sequence[_dpals.Shard] | None = None,
    silos: Sequence[Any] | None = None,
    loss=None,
    fault: Fault | None = None,
) -> ClientApp:
    """A ``ClientApp`` whose node ``partition-id = k`` holds ``shards[k]`` (DP-ALS) and / or
    ``silos[k]`` (ISRL-DP MB-SGD with ``loss``). The data travel with the app to the simulation's
    workers: for simulations and tests (a deployment loads each node's own data:
    :mod:`privrec.federated.flower.app`). ``fault(info) -> bool``, tests only: the client raises
    (as a crashed client) when it returns True; ``info`` holds the app, the client index, the
    stage, ``attempt`` and the round fields of the message."""
    app = ClientApp()
    if shards is not None:
        shard_list = list(shards)
        _dpals.register_client(app, lambda context: shard_list[partition_id(context)], fault)
    if silos is not None:
        silo_list = list(silos)
        _isrl.register_client(
            app, lambda context: (partition_id(context), silo_list[partition_id(context)]), loss, fault
        )
    return app


def backend_config(num_cpus: int | None = None) -> dict:
    """Ray settings for a small machine: one CPU per client process, ``num_cpus`` in all (default:
    the usable cores), quiet logs."""
    if num_cpus is None:
        num_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": int(num_cpus), "logging_level": logging.ERROR, "log_to_driver": False},
    }


#: virtual address space below which Ray's runtime cannot start (its object store and worker
#: processes reserve far more address space than they use); under such a limit it used to block
#: silently until killed
_RAY_MIN_ADDRESS_SPACE = 64 << 30


def _check_ray_can_start() -> None:
    """One-line ``RuntimeError`` before Ray is started under an address-space limit it cannot run in
    (``ulimit -v``: Ray's processes reserve tens of GB of virtual memory and then hang)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < _RAY_MIN_ADDRESS_SPACE:
        raise RuntimeError(
            f"Flower's simulation runtime (Ray) cannot start under this process's address-space limit "
            f"(ulimit -v = {soft >> 20:,} MiB; Ray reserves tens of GB of virtual memory): lift the limit "
            "(ulimit -v unlimited), or run the clients in this process with "
            "privrec.federated.flower.testing.InProcessGrid and fit_dpals"
        )


class _DeprecationNotice(logging.Filter):
    """Drops Flower's notice that ``run_simulation`` is deprecated in favour of ``flwr run``: privrec's
    in-process simulation calls it on purpose (a deployment uses ``flwr run``, examples/flower_app)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "run_simulation" not in record.getMessage() or "deprecated" not in record.getMessage().lower()


def simulate(
    jobs: Sequence[Callable[[Grid], Any]], app: ClientApp, n_clients: int, backend: dict | None = None
) -> list:
    """Run ``jobs`` (callables of the ``Grid``) one after the other in one ``ServerApp`` on the
    simulation runtime with ``n_clients`` SuperNodes running ``app``; returns their results.
    An exception in a job is raised here."""
    from flwr.simulation import run_simulation

    _check_ray_can_start()
    results: list[Any] = []
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        for job in jobs:
            results.append(job(grid))

    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.WARNING)
    quiet = _DeprecationNotice()  # privrec runs the simulation engine itself (docs/federated-flower.md)
    flwr_logger.addFilter(quiet)
    pythonpath = os.environ.get("PYTHONPATH")  # Flower's Ray backend overwrites it for its workers
    try:
        run_simulation(server, app, num_supernodes=int(n_clients), backend_config=backend or backend_config())
    finally:
        flwr_logger.removeFilter(quiet)
        flwr_logger.setLevel(level)
        if pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pythonpath
    if len(results) != len(jobs):
        raise RuntimeError(f"the ServerApp ran {len(results)} of {len(jobs)} jobs")
    return results


def fit_simulation(model, user_items, *, n_clients: int = 10, backend: dict | None = None, **options):
    """``model`` (a DPALS) fitted by :func:`~privrec.federated.flower.fit_dpals` on ``n_clients``
    simulated clients, each holding consecutive users of ``user_items`` (:func:`split_users`).
    ``options``: those of ``fit_dpals`` (``timeout``, ``max_retries``, ...)."""
    shards = _dpals.split_users(user_items, n_clients)
    job = lambda grid: _dpals.fit_dpals(model, grid, min_clients=n_clients, **options)
    return simulate([job], client_app(shards=shards), n_clients, backend)[0]


def mb_sgd_simulation(silos, loss, *, backend: dict | None = None, **kwargs):
    """:func:`~privrec.federated.flower.mb_sgd_on_grid` with one simulated client per silo of ``silos``
    (a ``SiloSet`` or a list of ``Silo``); ``kwargs`` as ``mb_sgd``."""
    silo_list = list(silos)
    job = lambda grid: _isrl.mb_sgd_on_grid(grid, loss, min_clients=len(silo_list), **kwargs)
    return simulate([job], client_app(silos=silo_list, loss=loss), len(silo_list), backend)[0]
