"""Parquet cache of parsed datasets, keyed by a fingerprint of the source files.

Parsing a 20M-line ratings file and building the CSR takes seconds; reading the already-built
arrays back from Parquet takes a fraction of that (measured in ``benchmarks/bench_data.py``).

The key of a source file is its size, its modification time (ns) and a BLAKE2b hash of its
first and last MiB, plus the loader name and :data:`CACHE_VERSION`; any edit to a source file
changes it. (A full SHA-256 of a multi-GB file would cost about as much as parsing it.)

Layout: ``<cache_dir>/<dataset>-<key>/`` holding ``entries.parquet`` (CSR ``indices``, ``data``,
optional ``timestamp``), ``users.parquet`` (``user_id``, ``count``), ``items.parquet``
(``item_id`` + metadata columns) and ``info.json``. The folder is written under a temporary name
and renamed into place, so a crash never leaves a half-written cache entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from privrec.data.interactions import Interactions

CACHE_VERSION = 1
_EDGE = 1 << 20


def default_cache_dir() -> Path:
    """``$PRIVREC_CACHE`` if set, else ``<data root>/.cache`` (data root: ``$PRIVREC_DATA`` or ``./datasets``)."""
    env = os.environ.get("PRIVREC_CACHE")
    if env:
        return Path(env)
    from privrec.data.download import default_data_root

    return default_data_root() / ".cache"


def fingerprint(paths, loader: str) -> str:
    """Cache key for the given source files read by ``loader`` (see module docstring)."""
    h = hashlib.blake2b(digest_size=12)
    h.update(f"v{CACHE_VERSION}:{loader}".encode())
    for p in sorted(Path(p) for p in paths):
        st = p.stat()
        h.update(f"|{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
        with open(p, "rb") as fh:
            h.update(fh.read(_EDGE))
            if st.st_size > 2 * _EDGE:
                fh.seek(-_EDGE, os.SEEK_END)
                h.update(fh.read(_EDGE))
    return h.hexdigest()


def _ids_back(col: pa.ChunkedArray) -> np.ndarray:
    arr = col.to_numpy()
    return arr.astype(str) if arr.dtype == object else arr


def save(x: Interactions, folder) -> Path:
    """Write ``x`` into the cache folder ``folder`` atomically."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        cols = {"indices": pa.array(x.matrix.indices), "data": pa.array(x.matrix.data)}
        if x.timestamps is not None:
            cols["timestamp"] = pa.array(x.timestamps)
        pq.write_table(pa.table(cols), tmp / "entries.parquet", compression="zstd", compression_level=1)
        pq.write_table(pa.table({"user_id": pa.array(x.user_ids), "count": pa.array(x.user_counts)}),
                       tmp / "users.parquet", compression="zstd", compression_level=1)
        items = pd.DataFrame({"item_id": x.item_ids})
        if x.item_metadata is not None:
            for c in x.item_metadata.columns:
                if c != "item_id":
                    items[c] = x.item_metadata[c].to_numpy()
        pq.write_table(pa.Table.from_pandas(items, preserve_index=False), tmp / "items.parquet", compression="zstd", compression_level=1)
        info = {k: v for k, v in x.info.items() if isinstance(v, (str, int, float, bool, type(None)))}
        (tmp / "info.json").write_text(json.dumps({"name": x.name, "info": info,
                                                   "has_metadata": x.item_metadata is not None}))
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load(folder) -> Interactions:
    """Read an ``Interactions`` written by :func:`save`."""
    folder = Path(folder)
    meta = json.loads((folder / "info.json").read_text())
    entries = pq.read_table(folder / "entries.parquet")
    users = pq.read_table(folder / "users.parquet")
    items = pq.read_table(folder / "items.parquet")
    counts = users.column("count").to_numpy()
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    matrix = sp.csr_matrix((entries.column("data").to_numpy(), entries.column("indices").to_numpy(), indptr),
                           shape=(len(counts), items.num_rows))
    matrix.has_sorted_indices = True
    ts = entries.column("timestamp").to_numpy() if "timestamp" in entries.column_names else None
    item_ids = _ids_back(items.column("item_id"))
    md = None
    if meta.get("has_metadata"):
        md = items.to_pandas()
    info = dict(meta.get("info", {}))
    info["cache"] = str(folder)
    return Interactions(matrix, _ids_back(users.column("user_id")), item_ids, timestamps=ts, item_metadata=md,
                        name=meta.get("name", ""), info=info)


def cached_load(loader, sources, name: str, cache_dir=None, use_cache: bool = True) -> Interactions:
    """Return ``loader()`` through the cache: parse once, then read Parquet while ``sources`` are unchanged.

    An unwritable cache folder only costs speed (a warning is emitted), never the load itself.
    """
    if not use_cache:
        return loader()
    sources = [Path(p) for p in sources if Path(p).is_file()]
    if not sources:
        return loader()  # the loader raises the missing-file error
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entry = folder / f"{name}-{fingerprint(sources, name)}"
    if (entry / "info.json").is_file():
        try:
            return load(entry)
        except (OSError, ValueError, pa.ArrowException) as exc:
            warnings.warn(f"ignoring unreadable cache entry {entry}: {exc}", UserWarning, stacklevel=2)
    x = loader()
    try:
        save(x, entry)
    except OSError as exc:
        warnings.warn(f"could not write the dataset cache at {entry}: {exc}", UserWarning, stacklevel=2)
    return x
