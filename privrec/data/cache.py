"""Parquet cache of parsed datasets, keyed by a fingerprint of the source files.

Parsing a 20M-line ratings file and building the CSR takes seconds; reading the already-built
arrays back from Parquet takes a fraction of that (measured in ``benchmarks/bench_data.py``).

Location: ``$PRIVREC_CACHE`` if set, else ``<user cache dir>/datasets`` from ``platformdirs``
(``~/.cache/privrec/datasets`` on Linux, ``~/Library/Caches/privrec/datasets`` on macOS,
``%LOCALAPPDATA%\\privrec\\Cache\\datasets`` on Windows); never the current directory.
``cache_dir=`` / ``--cache-dir`` override it per call.

Key: a BLAKE2b hash of the *whole* content of every source file (streamed, 1 MiB at a time), their
names and sizes, the loader name and :data:`CACHE_VERSION`. Any change to a source file, anywhere
in it, changes the key; touching a file without changing it does not.

Layout: ``<cache_dir>/<dataset>-<key>/`` holding ``entries.parquet`` (CSR ``indices``, ``data``,
optional ``timestamp``), ``users.parquet`` (``user_id``, ``count``), ``items.parquet``
(``item_id`` + metadata columns), ``info.json`` and ``manifest.json`` (the SHA-256 of each of the
four other files). Every read verifies the checksums (the bytes are hashed as they are read, then
parsed from memory) and the rebuilt matrix goes through the full CSR structure check; an entry
that fails (bit flips, truncation, a hand-edited file) is reported with a ``UserWarning`` and the
source files are parsed again (the entry is rewritten). The folder is written under a temporary
name (``.privrec-<entry>.h<host>p<pid>.<random>.tmp``, see :mod:`privrec._io`) and renamed into
place, so a crash never leaves a half-written entry; the temporary folder of a killed process is
removed by the next write once that process is gone (or once it is a day old). Parquet is parsed
from copies in Arrow's own memory (:func:`arrow_owned`), never from Python objects that Arrow's
worker threads could release during interpreter exit.

Parquet needs pyarrow (the optional extra ``privrec[parquet]``): without it :func:`cached_load`
parses the source files every time (the loaders of the benchmark datasets need pyarrow too, and
say so), and :func:`save` / :func:`load` raise a one-line ``ImportError`` naming the extra.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from privrec._io import clean_stale_temp, make_temp_dir, remove_path
from privrec._optional import available, require
from privrec.data.interactions import Interactions

if TYPE_CHECKING:
    import pyarrow as pa

CACHE_VERSION = 2
_CHUNK = 1 << 20
_FILES = ("entries.parquet", "users.parquet", "items.parquet", "info.json")
_MANIFEST = "manifest.json"


class CacheIntegrityError(ValueError):
    """A cache entry is unreadable or its content does not match its checksums."""


def default_cache_dir() -> Path:
    """``$PRIVREC_CACHE`` if set, else ``<platformdirs user cache dir for privrec>/datasets``."""
    env = os.environ.get("PRIVREC_CACHE")
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
    except ImportError:  # pragma: no cover - platformdirs is a declared dependency
        return Path.home() / ".cache" / "privrec" / "datasets"
    return Path(platformdirs.user_cache_dir("privrec", appauthor=False)) / "datasets"


def file_digest(path, algorithm: str = "blake2b") -> str:
    """Hex digest of the whole file, streamed (constant memory)."""
    h = hashlib.new(algorithm)
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb") as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


def fingerprint(paths, loader: str) -> str:
    """Cache key for the given source files read by ``loader`` (see module docstring)."""
    h = hashlib.blake2b(digest_size=12)
    h.update(f"v{CACHE_VERSION}:{loader}".encode())
    for p in sorted(Path(p) for p in paths):
        h.update(f"|{p.name}:{p.stat().st_size}:{file_digest(p)}".encode())
    return h.hexdigest()


def _ids_back(col: pa.ChunkedArray) -> np.ndarray:
    arr = col.to_numpy()
    return arr.astype(str) if arr.dtype == object else arr


def _sha256_file(path: Path) -> str:
    return file_digest(path, "sha256")


def _arrow():
    """``(pyarrow, pyarrow.parquet)``, or the one-line error naming ``privrec[parquet]``."""
    feature = "the Parquet dataset cache (privrec.data.cache)"
    return require("pyarrow", feature), require("pyarrow.parquet", feature)


def __getattr__(name: str):
    """``pa`` / ``pq``, the module's former top-level imports, loaded on first use."""
    if name in ("pa", "pq"):
        return _arrow()[name == "pq"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def save(x: Interactions, folder) -> Path:
    """Write ``x`` into the cache folder ``folder`` atomically, with a checksum manifest."""
    pa, pq = _arrow()
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temp(folder.parent)
    tmp = make_temp_dir(folder.parent, folder.name, ".tmp")
    try:
        cols = {"indices": pa.array(x.matrix.indices), "data": pa.array(x.matrix.data)}
        if x.timestamps is not None:
            cols["timestamp"] = pa.array(x.timestamps)
        opts = dict(compression="zstd", compression_level=1)
        pq.write_table(pa.table(cols), tmp / "entries.parquet", **opts)
        pq.write_table(
            pa.table({"user_id": pa.array(x.user_ids), "count": pa.array(x.user_counts)}), tmp / "users.parquet", **opts
        )
        items = pd.DataFrame({"item_id": x.item_ids})
        if x.item_metadata is not None:
            for c in x.item_metadata.columns:
                if c != "item_id":
                    items[c] = x.item_metadata[c].to_numpy()
        pq.write_table(pa.Table.from_pandas(items, preserve_index=False), tmp / "items.parquet", **opts)
        info = {k: v for k, v in x.info.items() if isinstance(v, (str, int, float, bool, type(None))) and k != "cache"}
        (tmp / "info.json").write_text(
            json.dumps({"name": x.name, "info": info, "has_metadata": x.item_metadata is not None})
        )
        manifest = {"cache_version": CACHE_VERSION, "files": {f: _sha256_file(tmp / f) for f in _FILES}}
        (tmp / _MANIFEST).write_text(json.dumps(manifest, separators=(",", ":")))
        old = None
        if folder.exists():  # an earlier (e.g. corrupt) entry of ours under the same key
            old = make_temp_dir(folder.parent, folder.name, ".tmp")
            os.replace(folder, old / "old")
        os.replace(tmp, folder)
        if old is not None:
            remove_path(old)
    except BaseException:
        remove_path(tmp)
        raise
    return folder


def _read_verified(folder: Path) -> dict[str, bytes]:
    """The four files of an entry, each checked against the manifest's SHA-256."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_bytes())
    except (OSError, ValueError) as exc:
        raise CacheIntegrityError(f"manifest unreadable ({type(exc).__name__}: {exc})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or set(files) != set(_FILES) or manifest.get("cache_version") != CACHE_VERSION:
        raise CacheIntegrityError("manifest is malformed or from another cache version")
    out = {}
    for name in _FILES:
        data = (folder / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != files[name]:
            raise CacheIntegrityError(f"{name} does not match its checksum")
        out[name] = data
    return out


def arrow_owned(data: bytes) -> pa.Buffer:
    """A copy of ``data`` in memory allocated by Arrow (one ``memcpy``), to parse from.

    ``pa.BufferReader(data)`` on a Python ``bytes`` wraps the Python object itself, and
    ``pq.read_table``'s worker threads may drop the last reference to it *after* ``read_table``
    has returned. Releasing a Python object takes the GIL; at interpreter exit that thread is then
    killed inside a C++ destructor and the process aborts with ``terminate called without an
    active exception`` (exit status 134; ``privrec datasets info`` on a cached dataset, about 1
    run in 100, in a core dump: ``arrow::py::PyBuffer::~PyBuffer`` -> ``PyGILState_Ensure`` ->
    ``pthread_exit`` during ``Py_FinalizeEx``). Memory Arrow owns is freed without Python.
    """
    pa, _ = _arrow()
    buf = pa.allocate_buffer(len(data))
    if len(data):
        np.frombuffer(buf, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    return buf


def _table(data: bytes, columns: tuple[str, ...], what: str) -> pa.Table:
    pa, pq = _arrow()
    table = pq.read_table(pa.BufferReader(arrow_owned(data)))
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise CacheIntegrityError(f"{what} lacks column(s) {missing}")
    return table


def load(folder) -> Interactions:
    """Read an ``Interactions`` written by :func:`save`, verifying checksums and structure.

    Raises :class:`CacheIntegrityError` (a ``ValueError``) or ``OSError`` when the entry is
    unusable; the returned matrix has passed :func:`privrec._validation.check_csr_structure`.
    """
    _arrow()  # a missing pyarrow is not a corrupt entry: fail before reading it
    folder = Path(folder)
    raw = _read_verified(folder)
    meta = json.loads(raw["info.json"])
    if not isinstance(meta, dict) or not isinstance(meta.get("info", {}), dict):
        raise CacheIntegrityError("info.json is not an object")
    entries = _table(raw["entries.parquet"], ("indices", "data"), "entries.parquet")
    users = _table(raw["users.parquet"], ("user_id", "count"), "users.parquet")
    items = _table(raw["items.parquet"], ("item_id",), "items.parquet")
    counts = users.column("count").to_numpy()
    if counts.dtype.kind not in "iu" or (counts.size and counts.min() < 0):
        raise CacheIntegrityError("users.parquet holds invalid per-user counts")
    indices = entries.column("indices").to_numpy()
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    if int(indptr[-1]) != len(indices):
        raise CacheIntegrityError(f"per-user counts add up to {int(indptr[-1])}, but there are {len(indices)} entries")
    # scipy does not check index bounds here: Interactions runs the full structure check
    matrix = sp.csr_matrix((entries.column("data").to_numpy(), indices, indptr), shape=(len(counts), items.num_rows))
    ts = entries.column("timestamp").to_numpy() if "timestamp" in entries.column_names else None
    item_ids = _ids_back(items.column("item_id"))
    md = items.to_pandas() if meta.get("has_metadata") else None
    info = dict(meta.get("info", {}))
    info["cache"] = str(folder)
    return Interactions(
        matrix,
        _ids_back(users.column("user_id")),
        item_ids,
        timestamps=ts,
        item_metadata=md,
        name=str(meta.get("name", "")),
        info=info,
    )


def _unreadable() -> tuple[type[BaseException], ...]:
    """What a corrupt or unreadable entry can raise (pyarrow is installed when an entry is read)."""
    pa, _ = _arrow()
    return (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError, pa.ArrowException)


def cached_load(loader, sources, name: str, cache_dir=None, use_cache: bool = True) -> Interactions:
    """Return ``loader()`` through the cache: parse once, then read Parquet while ``sources`` are unchanged.

    A cache entry that fails its integrity check is reported with a ``UserWarning`` and replaced
    by a fresh parse. An unwritable cache folder only costs speed (a warning), never the load.
    """
    if not use_cache or not available("pyarrow"):  # no pyarrow: no Parquet cache, every load parses
        return loader()
    sources = [Path(p) for p in sources if Path(p).is_file()]
    if not sources:
        return loader()  # the loader raises the missing-file error
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    entry = folder / f"{name}-{fingerprint(sources, name)}"
    if entry.is_dir():
        try:
            return load(entry)
        except _unreadable() as exc:
            msg = " ".join(str(exc).split()) or type(exc).__name__
            warnings.warn(
                f"cache entry {entry} is corrupt or unreadable ({msg}); parsing the source files again",
                UserWarning,
                stacklevel=2,
            )
    x = loader()
    try:
        save(x, entry)
    except OSError as exc:
        warnings.warn(f"could not write the dataset cache at {entry}: {exc}", UserWarning, stacklevel=2)
    return x
