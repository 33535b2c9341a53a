"""Client plumbing: the default ``distributed.Client`` and an in-process :class:`SerialClient`.

:class:`SerialClient` implements the small subset of the ``distributed.Client`` API that
:mod:`privrec.distributed` uses (``submit``, ``gather``, ``scatter``, ``compute``), running every
task immediately in the calling process. The same pure task functions then run in the same fixed
order of summation, so a serial run reproduces a cluster run bit for bit (given the same
partitioning): a reference for tests and for small data, without a scheduler.
"""

from __future__ import annotations

from collections import deque


class SerialFuture:
    """An already-computed task result (the ``distributed.Future`` methods privrec uses)."""

    __slots__ = ("_exc", "_value", "key")

    def __init__(self, key, value=None, exc: BaseException | None = None):
        self.key = key
        self._value = value
        self._exc = exc

    def result(self, timeout=None):
        if self._exc is not None:
            raise self._exc
        return self._value

    def done(self) -> bool:
        return True

    def release(self) -> None:
        self._value = None

    def __repr__(self) -> str:
        return f"SerialFuture({self.key!r})"


def _resolve(obj):
    """Replace futures (also inside lists, tuples and dicts) by their values, as Dask does."""
    if isinstance(obj, SerialFuture):
        return obj.result()
    if type(obj) in (list, tuple):
        return type(obj)(_resolve(x) for x in obj)
    if type(obj) is dict:
        return {k: _resolve(v) for k, v in obj.items()}
    return obj


class SerialClient:
    """Runs tasks in the calling process, in submission order (see module docstring)."""

    serial = True

    def submit(self, fn, *args, key=None, priority=0, pure=None, workers=None, retries=None, **kwargs):
        try:
            value = fn(*_resolve(args), **_resolve(kwargs))
        except Exception as exc:  # surfaced by .result(), like a remote task error
            return SerialFuture(key, exc=exc)
        return SerialFuture(key, value)

    def map(self, fn, *iterables, key=None, **kwargs):
        return [self.submit(fn, *args, **kwargs) for args in zip(*iterables)]

    def gather(self, futures, errors="raise"):
        if isinstance(futures, SerialFuture):
            return futures.result()
        return [self.gather(f) if isinstance(f, (list, tuple)) else _resolve(f) for f in futures]

    def scatter(self, data, broadcast=False, hash=True, workers=None):
        return SerialFuture("scatter", data)

    def compute(self, collections, **kwargs):
        import dask

        # the synchronous scheduler cannot run P2P shuffles (they need distributed workers)
        with dask.config.set({"dataframe.shuffle.method": "tasks"}):
            if isinstance(collections, (list, tuple)):
                values = dask.compute(*collections, scheduler="sync")
                return [SerialFuture(f"compute-{i}", v) for i, v in enumerate(values)]
            (value,) = dask.compute(collections, scheduler="sync")
        return SerialFuture("compute", value)

    def cancel(self, futures) -> None:
        for f in futures:
            f.release()

    def __repr__(self) -> str:
        return "SerialClient()"


def is_serial(client) -> bool:
    return bool(getattr(client, "serial", False))


def get_client(client=None):
    """``client`` itself, else the current ``distributed`` client (``ValueError`` if there is none, or
    if the client is closed: Dask's own ``ClosedClientError`` would surface half-way through)."""
    if client is not None:
        return _check_open(client)
    try:
        from distributed import get_client as _current
    except ImportError:  # pragma: no cover - the extra is not installed
        raise ValueError(
            "privrec.distributed needs dask.distributed (pip install 'privrec[dask]') or an explicit "
            "client=SerialClient()"
        ) from None
    try:
        current = _current()
    except ValueError:
        raise ValueError(
            "no Dask client: start one (distributed.Client(...)) or pass client=; for an in-process run "
            "pass client=privrec.distributed.SerialClient()"
        ) from None
    return _check_open(current)


def _check_open(client):
    """``client`` unless it is a closed (or closing) ``distributed.Client``: then a one-line ``ValueError``."""
    status = getattr(client, "status", None)
    if isinstance(status, str) and status in ("closing", "closed", "failed"):
        raise ValueError(
            f"the Dask client is {status} ({client!r}): start a new one (distributed.Client(...)) or pass "
            "client=privrec.distributed.SerialClient() for an in-process run"
        )
    return client


class _SerialCompleted:
    """``distributed.as_completed`` for already-computed futures (yields them in insertion order)."""

    def __init__(self, futures=()):
        self._queue = deque(futures)

    def add(self, future) -> None:
        self._queue.append(future)

    def __iter__(self):
        while self._queue:
            yield self._queue.popleft()


def as_completed(client, futures):
    if is_serial(client):
        return _SerialCompleted(futures)
    from distributed import as_completed as _as_completed

    return _as_completed(futures)
