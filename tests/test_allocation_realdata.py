"""End to end on MovieLens-100K (skipped when ../shared/datasets is absent): private counts track
the true popularity, every allocation respects its budget, and one SSP item step with the
allocation is close to the exact weighted ridge at small noise (spec 004 §2, §4-§5)."""

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.allocation import adaptive_weights, private_item_counts, tail_weights, uniform_weights, user_spend
from privrec.solvers import ExactSolver, SSPSolver, TaskBatch


def _datasets() -> Path:
    env = os.environ.get("PRIVREC_SHARED_DATASETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "datasets"


@pytest.fixture(scope="module")
def ml100k():
    path = _datasets() / "ml-100k" / "u.data"
    if not path.is_file():
        pytest.skip(f"MovieLens-100K not found at {path}")
    raw = np.loadtxt(path, dtype=np.int64)
    users, items, ratings = raw[:, 0] - 1, raw[:, 1] - 1, raw[:, 2].astype(np.float32)
    m = sp.csr_matrix((ratings, (users, items)), shape=(users.max() + 1, items.max() + 1))
    m.sort_indices()
    return m


def test_private_counts_track_popularity(ml100k):
    true = np.diff(ml100k.tocsc().indptr)
    stat = private_item_counts(ml100k, count_sample=50, noise_multiplier=1.0, rng=0)
    assert np.corrcoef(true, stat.value)[0, 1] > 0.9
    # sampling at most 50 items per user removes exactly the excess of heavy users
    assert stat.info["n_sampled"] == int(np.minimum(np.diff(ml100k.indptr), 50).sum())


def test_allocations_and_one_ssp_step(ml100k):
    counts = private_item_counts(ml100k, 50, 1.0, rng=1).value
    beta = 20.0
    allocs = {
        "uniform": (uniform_weights(ml100k, 20, rng=0), 20.0),
        "tail": (tail_weights(ml100k, counts, 20, rng=0), 20.0),
        "adaptive": (adaptive_weights(ml100k, counts, 0.5, beta), beta),
    }
    for name, (w, b) in allocs.items():
        assert user_spend(ml100k, w).max() <= b, name
    w = allocs["adaptive"][0]
    # adaptive weights favour rare items: the mean weight of the rarest decile beats the top decile
    item_w = np.bincount(ml100k.indices, weights=w.data, minlength=ml100k.shape[1])
    true = np.diff(ml100k.tocsc().indptr)
    mean_w = np.divide(item_w, true, out=np.zeros_like(item_w), where=true > 0)
    order = np.argsort(true)
    seen = order[true[order] > 0]
    assert mean_w[seen[: len(seen) // 10]].mean() > 2 * mean_w[seen[-len(seen) // 10 :]].mean()
    rng = np.random.default_rng(0)
    feats = rng.normal(0, 0.1, (ml100k.shape[0], 8))
    labels = ml100k.copy()
    labels.data = labels.data - 3.5
    batch = TaskBatch.from_csr(labels, w, feats, transpose=True)
    exact = ExactSolver(reg=5.0, max_norm=0.3, label_bound=2.0, dtype=np.float64).solve(batch).params
    tiny = SSPSolver(
        noise_multiplier=1e-6, budget=beta, max_norm=0.3, label_bound=2.0, reg=5.0, dtype=np.float64
    ).solve(batch, rng=0)
    np.testing.assert_allclose(tiny.params, exact, atol=1e-5)
    noisy = SSPSolver(noise_multiplier=1.0, budget=beta, max_norm=0.3, label_bound=2.0, reg=5.0).solve(batch, rng=0)
    assert np.all(np.isfinite(noisy.params)) and noisy.params.shape == exact.shape
