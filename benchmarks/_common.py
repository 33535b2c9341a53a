"""Helpers shared by the benchmark scripts: paths, result files, timing, the shared-datasets folder."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

if str(ROOT) not in sys.path:  # allow `python benchmarks/x.py` from a checkout
    sys.path.insert(0, str(ROOT))

from privrec._io import atomic_write_json, atomic_write_text  # noqa: E402
from privrec.evaluation.experiment import json_safe  # noqa: E402


def shared_datasets() -> Path | None:
    """``../shared/datasets`` beside the repository (override: ``PRIVREC_SHARED_DATASETS``)."""
    env = os.environ.get("PRIVREC_SHARED_DATASETS")
    p = Path(env) if env else ROOT.parent / "shared" / "datasets"
    return p if p.is_dir() else None


def environment() -> dict:
    import numpy as np

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(path: Path, obj) -> Path:
    atomic_write_json(path, json_safe(obj))
    return path


def write_text(path: Path, text: str) -> Path:
    atomic_write_text(path, text)
    return path


def read_json(path: Path):
    return json.loads(Path(path).read_text())


def log(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rating_recall(recommend, targets, history, k: int = 20, threshold: float = 4.0, batch: int = 4096) -> float:
    """Recall@k on held-out ratings: ``recommend(users, history_rows) -> (ids, scores)`` (it filters
    the history's items), relevant = held-out rating >= ``threshold``, each user's recall
    ``hits / min(k, n_relevant)``, averaged over users with a relevant item; users in batches
    (bounded memory on large catalogues)."""
    import numpy as np
    import scipy.sparse as sp

    rel = sp.csr_matrix(targets, copy=True)
    rel.data = (rel.data >= threshold).astype(np.float32)
    rel.eliminate_zeros()
    rel.sort_indices()
    history = sp.csr_matrix(history)
    n_rel = np.diff(rel.indptr)
    users = np.flatnonzero(n_rel > 0)
    hits = np.zeros(users.size)
    for s0 in range(0, users.size, batch):
        u = users[s0 : s0 + batch]
        ids, _ = recommend(u, history[u])
        ids = np.asarray(ids)
        valid = ids >= 0  # padding, where fewer than k items could be recommended
        found = np.asarray(rel[u[:, None], np.where(valid, ids, 0)].todense()) > 0  # (batch, k) lookups
        hits[s0 : s0 + u.size] = (found & valid).sum(axis=1) / np.minimum(k, n_rel[u])
    return float(hits.mean()) if users.size else 0.0
