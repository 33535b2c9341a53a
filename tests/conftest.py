"""Test-wide settings: parsed-data caches go to a temporary folder, never into the checkout; under
pytest-xdist (README: ``-n 2``) whole modules go to a worker, those with a ``slow`` test first."""

import os

import pytest


def pytest_configure(config):
    # the README's test command runs these too (CI runs everything); ``-m "not slow"`` leaves them out
    config.addinivalue_line(
        "markers", "slow: a long end-to-end test (a deployment, a simulation runtime, a build; over ~20 s)"
    )


@pytest.fixture(autouse=True, scope="session")
def _isolated_privrec_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("PRIVREC_CACHE", str(tmp_path_factory.mktemp("privrec-cache")))
    yield
    mp.undo()


# ---------------------------------------------------------------- one Dask LocalCluster for the distributed modules
# Starting a 2-process LocalCluster (and importing privrec in its workers) costs 10-15 s on 2 cores, and
# an idle one still polls (~5% of a core per process), so the modules that use ``client`` share one that
# lives from the first of them to the last in collection order, and is closed as soon as the next test
# to run lies outside that span (under pytest-xdist each worker starts its own when it needs one).
_CLUSTER: dict = {}
_ORDER = pytest.StashKey[int]()
_SPAN: dict = {}


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the order the scheduler hands out
        items[:] = _slow_modules_first(items)
    uses = [i for i, item in enumerate(items) if "client" in getattr(item, "fixturenames", ())]
    _SPAN["first"], _SPAN["last"] = (uses[0], uses[-1]) if uses else (0, -1)
    for i, item in enumerate(items):
        item.stash[_ORDER] = i


def _close_cluster():
    cluster = _CLUSTER.pop("cluster", None)
    if cluster is not None:
        cluster.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the module-scoped client (if this was its module's last test) is closed by now
    if "cluster" in _CLUSTER:
        i = nextitem.stash.get(_ORDER, -1) if nextitem is not None else -1
        if not _SPAN.get("first", 0) <= i <= _SPAN.get("last", -1):
            _close_cluster()


def pytest_sessionfinish(session):
    _close_cluster()


@pytest.fixture(scope="module")
def client():
    """A client of the shared 2-process ``LocalCluster`` for the distributed tests (one per test
    module, so that what a module persisted on the cluster is released when it ends; those modules
    skip themselves when the optional ``dask`` extra is missing). Both workers are up when a module
    starts, even if the previous module killed one (its nanny restarts it)."""
    distributed = pytest.importorskip(
        "distributed", reason="dask.distributed is optional (pip install 'privrec[dask]')"
    )
    if "cluster" not in _CLUSTER:
        import dask

        # the killed-worker tests kill a worker twice; the cluster closes a nanny whose worker is not back
        # under its name when this timeout after a loss expires, which a second loss at that moment
        # triggers (its nanny then never restarts it): the nannies restart their workers themselves
        dask.config.set({"distributed.deploy.lost-worker-timeout": "1h"})
        _CLUSTER["cluster"] = distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=50
        )
    with distributed.Client(_CLUSTER["cluster"]) as c:
        c.wait_for_workers(2, timeout=120)
        yield c


# ---------------------------------------------------------------- pytest-xdist: whole modules, slow ones first
def _uses_client(item) -> bool:
    return "client" in getattr(item, "fixturenames", ())


def _slow_modules_first(items):
    """``items`` by module: modules holding a ``slow`` test first, then by number of tests (most
    first, xdist's own order), the modules that share the Dask cluster next to each other; the
    order inside a module is kept. The longest runs start first and the short modules fill the end."""
    modules: dict = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    rank = {m: (not any(t.get_closest_marker("slow") for t in ts), -len(ts), 1) for m, ts in modules.items()}
    cluster = [m for m, ts in modules.items() if any(_uses_client(t) for t in ts)]
    if cluster:  # one block at the rank of the first of them
        first = min(rank[m] for m in cluster)
        rank.update(dict.fromkeys(cluster, (*first[:2], 0)))
    order = sorted(modules, key=rank.__getitem__)  # stable: ties keep the collection order
    return [item for m in order for item in modules[m]]


def _dist_given(config) -> bool:
    words = [*map(str, config.invocation_params.args), *config.getini("addopts")]
    words += os.environ.get("PYTEST_ADDOPTS", "").split()
    return any(w.split("=")[0] == "--dist" for w in words)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown (and unused) without it
def pytest_xdist_make_scheduler(config, log):
    """``-n N`` without ``--dist``: one module at a time per worker (``--dist loadfile``), so a module's
    fixtures (a Ray simulation, the Dask cluster, a benchmark run) start once, in the order of
    :func:`_slow_modules_first` (xdist's own reordering by size is off). An explicit ``--dist`` wins."""
    if _dist_given(config):
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)
