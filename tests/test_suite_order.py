"""The order pytest-xdist workers hand out the suite in (conftest.py, README: ``-n 2``): modules with a
``slow`` test first, then the larger ones; a module's tests stay together and in their order; the
modules sharing the Dask cluster form one block."""

from pathlib import Path
from types import SimpleNamespace

import conftest


def _item(module, name, slow=False, client=False):
    return SimpleNamespace(
        path=Path(f"tests/{module}.py"),
        name=name,
        fixturenames=("client",) if client else (),
        get_closest_marker=lambda mark: object() if slow and mark == "slow" else None,
    )


def test_slow_modules_first_then_by_size_and_the_cluster_modules_together():
    items = [
        _item("small", "a"),
        _item("dask_a", "a", client=True),
        _item("big", "a"),
        _item("big", "b"),
        _item("big", "c"),
        _item("slow", "a"),
        _item("slow", "b", slow=True),
        _item("dask_b", "a"),
        _item("dask_b", "b", client=True),
        _item("dask_b", "c", client=True),
        _item("dask_b", "d", client=True),
    ]
    ordered = conftest._slow_modules_first(items)
    assert sorted(map(id, ordered)) == sorted(map(id, items))
    assert [(i.path.stem, i.name) for i in ordered] == [
        ("slow", "a"),
        ("slow", "b"),
        ("dask_a", "a"),  # at the rank of dask_b (4 tests), the first of the block, in collection order
        ("dask_b", "a"),
        ("dask_b", "b"),
        ("dask_b", "c"),
        ("dask_b", "d"),
        ("big", "a"),
        ("big", "b"),
        ("big", "c"),
        ("small", "a"),
    ]


def test_an_explicit_dist_keeps_xdist_s_own_scheduler(monkeypatch):
    def config(*args, addopts=()):
        return SimpleNamespace(
            invocation_params=SimpleNamespace(args=args),
            getini=lambda name: list(addopts),
            option=SimpleNamespace(loadscopereorder=True),
        )

    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    assert conftest.pytest_xdist_make_scheduler(config("-n", "2", "--dist", "load"), None) is None
    assert conftest.pytest_xdist_make_scheduler(config("-n", "2", "--dist=loadscope"), None) is None
    assert conftest.pytest_xdist_make_scheduler(config("-n", "2", addopts=["--dist=each"]), None) is None
    monkeypatch.setenv("PYTEST_ADDOPTS", "--dist load")
    assert conftest.pytest_xdist_make_scheduler(config("-n", "2"), None) is None
