"""Atomic file writes and privrec's temporary files.

An atomic write goes to a temporary file in the same folder, is fsync'ed, then renamed over the
target, so a crash never leaves a truncated file where a good one is expected.

Every temporary file or folder privrec creates is named
``.privrec-<what>.h<host>p<pid>.<random><kind>`` with ``<kind>`` one of ``.tmp`` (atomic writes,
cache entries being written), ``.partial`` (a download in progress) or ``.extract`` (an archive
being extracted); :data:`TEMP_PATTERN` matches exactly these names (and those of older privrec
versions, without the ``h<host>p<pid>`` part). ``<pid>`` is the writer's process id and
``<host>`` 8 hex digits identifying its machine and PID namespace (:func:`writer_tag`). A process
killed with SIGKILL (or by a signal privrec does not handle) cannot remove its temporary files, so
the next write into the same folder (:func:`atomic_path`, a download, a cache write) removes those
matching the pattern whose writer is known to be gone -- same ``<host>``, no process ``<pid>``
(POSIX only) -- and any that are older than :data:`STALE_AFTER` seconds (a day). A temporary file
of a live writer, of another machine or container, or whose writer cannot be checked is kept until
it is a day old. Nothing else is ever removed.

:func:`atomic_path` writes through a symbolic link (the file the link points to is replaced
atomically; the link stays) and refuses, with a ``ValueError``, to replace anything but a regular
file (a folder, ``/dev/null``, ``/dev/stdout``, a FIFO or a socket): :func:`check_write_target`.
While it writes, SIGTERM (when the process has not set its own handler) is handled like SIGINT:
it raises :class:`Terminated` (a ``SystemExit`` with status 143 = 128 + SIGTERM), so the
temporary file is removed, ``finally`` blocks run and the process exits quietly. The written
file keeps the permission bits of the file it replaces; a new file gets the default mode of the
process (``0o666`` less the umask), as ``open()`` would create it (:func:`replacement_mode`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TEMP_PREFIX = ".privrec-"
TEMP_KINDS = (".tmp", ".partial", ".extract")
TEMP_PATTERN = re.compile(r"^\.privrec-.+\.(tmp|partial|extract)$")
STALE_AFTER = 24 * 3600.0
#: the ``h<host>p<pid>`` part of a temporary name (the last one: ``<what>`` may hold anything)
_OWNER = re.compile(r"^\.privrec-.*\.h(?P<host>[0-9a-f]{8})p(?P<pid>[1-9][0-9]{0,9})\.")


@functools.cache
def writer_tag() -> str:
    """8 hex digits identifying this machine and PID namespace (a hash of the host name and, on
    Linux, of ``/proc/self/ns/pid``): a process id read from a temporary name is only checked
    when the name carries this tag, i.e. when the writer ran where that id means the same process."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except (OSError, AttributeError):
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}\0{namespace}".encode()).hexdigest()[:8]


def temp_prefix(what: str) -> str:
    """Prefix of a privrec temporary name for ``what`` (a file or dataset name, sanitised), with
    this process as the writer (``.privrec-<what>.h<host>p<pid>.``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(what))[:80] or "x"
    return f"{TEMP_PREFIX}{safe}.h{writer_tag()}p{os.getpid()}."


def _pid_exists(pid: int) -> bool:
    """Whether process ``pid`` may exist (``True`` when it cannot be checked)."""
    if pid == os.getpid():
        return True
    if os.name != "posix":  # os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # PermissionError: it exists, owned by another user
        return True
    return True


def writer_gone(name: str) -> bool:
    """Whether ``name`` is a privrec temporary name whose writer is known to have exited: it was
    created on this machine and PID namespace (:func:`writer_tag`) by a process that no longer
    exists. Names of older versions (no writer recorded) and of other machines are never "gone"."""
    m = _OWNER.match(name)
    if m is None or not TEMP_PATTERN.match(name) or m.group("host") != writer_tag():
        return False
    return not _pid_exists(int(m.group("pid")))


def make_temp_file(folder, what: str, kind: str = ".tmp", suffix: str = "") -> Path:
    """Create an empty privrec temporary file in ``folder`` (closed) and return its path."""
    if kind not in TEMP_KINDS:
        raise ValueError(f"kind must be one of {TEMP_KINDS}, got {kind!r}")
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(what), suffix=suffix + kind, dir=folder)
    os.close(fd)
    return Path(tmp)


def make_temp_dir(folder, what: str, kind: str = ".tmp") -> Path:
    """Create a privrec temporary folder in ``folder`` and return its path."""
    if kind not in TEMP_KINDS:
        raise ValueError(f"kind must be one of {TEMP_KINDS}, got {kind!r}")
    return Path(tempfile.mkdtemp(prefix=temp_prefix(what), suffix=kind, dir=folder))


def is_privrec_temp(name: str) -> bool:
    """Whether ``name`` (a file name, not a path) is one of privrec's temporary names."""
    return bool(TEMP_PATTERN.match(name))


def remove_path(path) -> None:
    """Remove a file, symlink or folder tree; a missing path is fine."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            path.unlink()


def clean_stale_temp(folder, max_age: float = STALE_AFTER, now: float | None = None, extra=None) -> list[Path]:
    """Remove privrec temporary files / folders in ``folder`` whose writer is gone
    (:func:`writer_gone`, whatever their age) or that are older than ``max_age`` seconds.

    Only names matching :data:`TEMP_PATTERN` (or the compiled regex ``extra``, for names written
    by older privrec versions) are touched; errors are ignored (best effort). Returns what was removed.
    """
    folder = Path(folder)
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (TEMP_PATTERN.match(name) or (extra is not None and extra.match(name))):
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if age > max_age or writer_gone(name):
            remove_path(entry.path)
            removed.append(Path(entry.path))
    return removed


_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file (or a symbolic link), else ``None``."""
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    return next((what for test, what in _FILE_KINDS if test(mode)), "not a regular file")


def check_write_target(path) -> Path:
    """The file an atomic write to ``path`` replaces, or a one-line ``ValueError``.

    ``path`` itself, or -- when ``path`` is a symbolic link -- the file it points to (every link
    followed): a write goes through the link, which stays. A dangling link's target is created
    (its folder must exist). Refused: anything that exists and is not a regular file (a folder, a
    device such as ``/dev/null`` or ``/dev/stdout``, a FIFO, a socket), a link loop, and a path
    under a file. Nothing is created or changed.
    """
    path = Path(path)
    try:
        st = os.stat(path)  # follows links, including /dev/stdout -> /proc/self/fd/1 -> the terminal or pipe
    except FileNotFoundError:
        st = None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"cannot write {path}: a loop of symbolic links") from None
        if exc.errno == errno.ENOTDIR:
            raise ValueError(f"cannot write {path}: a part of its folder is a file, not a folder") from None
        raise
    if st is not None:
        what = _not_regular(st.st_mode)
        if what is not None:
            raise ValueError(
                f"cannot write {path}: it is {what}, not a regular file (privrec writes only regular files, "
                "and never replaces a folder, device, FIFO or socket)"
            )
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if st is None and not target.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: a symbolic link to {target}, whose folder does not exist")
    return target


def _umask() -> int:
    """The process's umask: read from ``/proc/self/status`` (Linux), else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replacement_mode(target) -> int:
    """Permission bits an atomic write to ``target`` gives the file: those of the existing file it
    replaces (so a ``0o664`` budget file or a ``0o644`` model keeps its mode), else ``0o666`` less
    the umask (what ``open(target, "w")`` would create)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~_umask()


class Terminated(SystemExit):
    """SIGTERM received during an atomic write (:func:`atomic_path`): raised like SIGINT's
    ``KeyboardInterrupt`` so that the temporary file is removed; exit status 143 (128 + SIGTERM)."""


@contextlib.contextmanager
def sigterm_as_exception():
    """While active, SIGTERM raises :class:`Terminated` instead of killing the process outright
    (whose temporary files would then stay behind). Only in the main thread (where Python runs
    signal handlers) and only when SIGTERM has its default action: a handler the application
    installed, or SIG_IGN, is left alone. The previous disposition is restored on exit."""
    sig = getattr(signal, "SIGTERM", None)
    active = sig is not None and threading.current_thread() is threading.main_thread()
    if active:
        try:
            active = signal.getsignal(sig) is signal.SIG_DFL
        except (ValueError, OSError):  # pragma: no cover - no signal support
            active = False
    if not active:
        yield
        return

    def terminated(signum, frame):
        signal.signal(sig, signal.SIG_IGN)  # once: a second SIGTERM must not interrupt the clean-up
        raise Terminated(128 + signum)

    signal.signal(sig, terminated)
    try:
        yield
    finally:
        signal.signal(sig, signal.SIG_DFL)


@contextlib.contextmanager
def atomic_path(path, suffix: str = ""):
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically.

    On any exception the temporary file is removed and ``path`` is left untouched, so a crash
    or interruption never leaves a truncated file where a good one is expected; SIGTERM counts as
    one (:func:`sigterm_as_exception`). The temporary name is
    ``.privrec-<name>.h<host>p<pid>.<random><suffix>.tmp``; those of dead writers and stale ones
    (older than a day) in the same folder are removed first (:func:`clean_stale_temp`).

    ``path`` goes through :func:`check_write_target`: a symbolic link is written through (its
    target is replaced atomically, in the target's folder) and anything but a regular file --
    ``/dev/null``, ``/dev/stdout``, a folder -- is refused with a ``ValueError`` before anything
    is written. A missing folder of ``path`` is created. The new file gets the mode of the file it
    replaces, or the process's default mode for a new file (:func:`replacement_mode`; the
    temporary file itself is created ``0o600``).
    """
    target = check_write_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with sigterm_as_exception():
        clean_stale_temp(target.parent)
        tmp = None
        try:
            with _signals_deferred():  # SIGINT / SIGTERM between creating the file and knowing its name
                tmp = make_temp_file(target.parent, target.name, ".tmp", suffix=suffix)
            yield Path(tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            check_write_target(target)  # not replaced by a device or folder meanwhile
            os.chmod(tmp, replacement_mode(target))  # mkstemp made it 0o600
            os.replace(tmp, target)
        except BaseException:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise


@contextlib.contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM (delivered when the block ends) in the main thread, where Python
    runs signal handlers; elsewhere, or without ``pthread_sigmask``, a no-op."""
    mask = {getattr(signal, n) for n in ("SIGINT", "SIGTERM") if hasattr(signal, n)}
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, mask)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def atomic_write_bytes(path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


def atomic_write_text(path, text: str, encoding: str = "utf-8") -> None:
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path, obj, indent: int = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=True, default=_json_default) + "\n")


def json_safe(obj: Any) -> Any:
    """A copy of ``obj`` that strict JSON accepts: non-finite floats become ``"inf"`` / ``"-inf"`` /
    ``"nan"``, numpy scalars and arrays Python numbers and lists, tuples lists, dict keys strings.

    The one sanitiser of privrec's JSON output (ledger reports, CLI and benchmark results).
    """
    import numpy as np

    def safe(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): safe(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [safe(v) for v in x]
        if isinstance(x, np.ndarray):
            return safe(x.tolist())
        if isinstance(x, np.generic):
            x = x.item()
        if isinstance(x, float) and not math.isfinite(x):
            return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        return x

    return safe(obj)


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def progress_steps(n: int, show: bool, desc: str, unit: str = "step"):
    """``range(1, n + 1)``, wrapped in a tqdm bar when ``show`` (implicit's ``show_progress``)."""
    steps = range(1, n + 1)
    if not show:
        return steps
    from tqdm.auto import tqdm

    return tqdm(steps, desc=desc, unit=unit)
