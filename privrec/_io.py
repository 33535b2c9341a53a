"""Atomic file writes and privrec's temporary files.

An atomic write goes to a temporary file in the same folder, is fsync'ed, then renamed over the
target, so a crash never leaves a truncated file where a good one is expected.

Every temporary file or folder privrec creates is named ``.privrec-<what>.<random><kind>`` with
``<kind>`` one of ``.tmp`` (atomic writes, cache entries being written), ``.partial`` (a download
in progress) or ``.extract`` (an archive being extracted); :data:`TEMP_PATTERN` matches exactly
these names. A process killed with SIGKILL cannot remove its temporary files, so the next write
into the same folder (:func:`atomic_path`, a download, a cache write) removes those matching the
pattern that are older than :data:`STALE_AFTER` seconds (a day): recent ones may belong to a
process still running. Nothing else is ever removed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

TEMP_PREFIX = ".privrec-"
TEMP_KINDS = (".tmp", ".partial", ".extract")
TEMP_PATTERN = re.compile(r"^\.privrec-.+\.(tmp|partial|extract)$")
STALE_AFTER = 24 * 3600.0


def temp_prefix(what: str) -> str:
    """Prefix of a privrec temporary name for ``what`` (a file or dataset name, sanitised)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(what))[:80] or "x"
    return f"{TEMP_PREFIX}{safe}."


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
    """Remove privrec temporary files / folders in ``folder`` older than ``max_age`` seconds.

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
        if age > max_age:
            remove_path(entry.path)
            removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def atomic_path(path, suffix: str = ""):
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically.

    On any exception the temporary file is removed and ``path`` is left untouched, so a crash
    or interruption never leaves a truncated file where a good one is expected. The temporary
    name is ``.privrec-<name>.<random><suffix>.tmp``; stale ones (older than a day, left by a
    killed process) in the same folder are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temp(path.parent)
    tmp = make_temp_file(path.parent, path.name, ".tmp", suffix=suffix)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
