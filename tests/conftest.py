"""Test-wide settings: parsed-data caches go to a temporary folder, never into the checkout."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_privrec_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("PRIVREC_CACHE", str(tmp_path_factory.mktemp("privrec-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def client():
    """A 2-process Dask ``LocalCluster`` client for the distributed tests (one per test module;
    those modules skip themselves when the optional ``dask`` extra is missing)."""
    distributed = pytest.importorskip(
        "distributed", reason="dask.distributed is optional (pip install 'privrec[dask]')"
    )
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=50
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c
