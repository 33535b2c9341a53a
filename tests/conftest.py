"""Test-wide settings: parsed-data caches go to a temporary folder, never into the checkout."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_privrec_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("PRIVREC_CACHE", str(tmp_path_factory.mktemp("privrec-cache")))
    yield
    mp.undo()
