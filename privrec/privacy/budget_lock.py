"""The inter-process lock of :class:`privrec.privacy.budget.Budget`.

Every change to a budget file happens under an exclusive ``fcntl.flock`` on a sidecar file,
``<real path>.lock`` beside the file the budget's path resolves to (:func:`_lock_path`), so every
path to one file -- through symlinks or from other folders -- takes the same lock.
:class:`_BudgetLock` (a mixin of ``Budget``) holds it: re-entrant within one object and thread,
waited for as long as it takes or for ``lock_timeout`` seconds (:func:`_check_lock_timeout`),
then ``TimeoutError``.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path


class _BudgetLock:
    """``_locked()`` over ``self.lock_path`` (waiting at most ``self.lock_timeout`` seconds; errors name
    ``self.path``), re-entrant through ``self._thread_lock`` and ``self._depth``."""

    path: Path
    lock_path: Path
    lock_timeout: float | None
    _thread_lock: threading.RLock
    _depth: int

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The lock of ``Budget.lock`` (which yields the budget): the outermost entry of an object
        takes the ``flock``, nested entries in its thread only count their depth."""
        with self._thread_lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows
                raise OSError("privacy budget files need POSIX file locking (fcntl), not available here") from None
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                self._acquire(fd, fcntl)
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _acquire(self, fd: int, fcntl) -> None:
        if self.lock_timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + float(self.lock_timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"privacy budget {self.path} is locked by another process (waited {self.lock_timeout:g} s)"
                    ) from None
                time.sleep(0.05)


def _lock_path(path: Path) -> Path:
    """``<real path>.lock``: one lock per budget file however it is reached (symlinks, relative
    paths, other folders)."""
    real = Path(os.path.realpath(path))
    return real.with_name(real.name + ".lock")


def _check_lock_timeout(value) -> float | None:
    """``lock_timeout``: ``None`` or a finite number of seconds >= 0 (one-line ``ValueError`` /
    ``TypeError`` naming it otherwise: a NaN would wait forever)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"lock_timeout must be a number of seconds or None, got {type(value).__name__} {value!r}")
    if not math.isfinite(float(value)) or value < 0:
        raise ValueError(f"lock_timeout must be a finite number of seconds >= 0 or None, got {value!r}")
    return float(value)
