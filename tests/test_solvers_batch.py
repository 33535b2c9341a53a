"""TaskBatch construction, alignment and the per-unit budget (spec 004 §1-§2)."""

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.allocation import adaptive_weights
from privrec.solvers import TaskBatch


def _data(seed=0, n_users=30, n_items=8, d=3):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < 0.5) * rng.integers(1, 6, (n_users, n_items))
    ui = sp.csr_matrix(dense.astype(np.float32))
    counts = np.maximum(np.diff(ui.tocsc().indptr), 1).astype(float)
    w = adaptive_weights(ui, counts, 0.5, 2.0)
    feats = rng.normal(size=(n_users, d))
    return ui, w, feats


def test_from_csr_transpose_groups_by_task_and_keeps_alignment():
    ui, w, feats = _data()
    b = TaskBatch.from_csr(ui, w, feats, transpose=True)
    assert b.n_tasks == ui.shape[1] and b.n_units == ui.shape[0] and b.dim == 3 and b.nnz == ui.nnz
    lab, wd = ui.toarray(), w.toarray()
    t = b.task_ids()
    np.testing.assert_array_equal(b.labels, lab[b.feature_ids, t])
    np.testing.assert_allclose(b.weights, wd[b.feature_ids, t])
    np.testing.assert_array_equal(b.sizes, np.diff(ui.tocsc().indptr))
    # tasks x units orientation gives the same batch
    b2 = TaskBatch.from_csr(ui.T.tocsr(), w.T.tocsr(), feats)
    np.testing.assert_array_equal(b2.indptr, b.indptr)
    np.testing.assert_array_equal(b2.feature_ids, b.feature_ids)


def test_zero_weights_dropped_and_budget_computed():
    ui = sp.csr_matrix(np.array([[1, 2, 0], [3, 0, 4]], dtype=np.float32))
    w = ui.copy()
    w.data = np.array([1.0, 0.0, 0.5, 2.0], dtype=np.float32)
    b = TaskBatch.from_csr(ui, w, np.ones((2, 2)), transpose=True)
    assert b.nnz == 3 and b.sizes.tolist() == [2, 0, 1]
    np.testing.assert_allclose(b.unit_spend(), [1.0, 4.25])
    assert b.unit_budget() == pytest.approx(4.25)
    assert b.check_budget(5.0) == pytest.approx(4.25)
    with pytest.raises(ValueError, match="exceeds the declared budget"):
        b.check_budget(4.0)
    keep_all = TaskBatch.from_csr(ui, w, np.ones((2, 2)), transpose=True, drop_zero_weights=False)
    assert keep_all.nnz == 4


def test_with_features():
    ui, w, feats = _data()
    b = TaskBatch.from_csr(ui, w, feats, transpose=True)
    b2 = b.with_features(np.zeros_like(feats))
    assert b2.features.sum() == 0 and b2.indptr is b.indptr
    with pytest.raises(ValueError):
        b.with_features(np.zeros((3, 3)))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(indptr=[0, 2], feature_ids=[0, 5], labels=[1.0, 1.0], weights=[1.0, 1.0]),  # unit id out of range
        dict(indptr=[0, 2], feature_ids=[0, 1], labels=[1.0], weights=[1.0, 1.0]),  # length mismatch
        dict(indptr=[1, 2], feature_ids=[0, 1], labels=[1.0, 1.0], weights=[1.0, 1.0]),  # indptr[0] != 0
        dict(indptr=[0, 2, 1], feature_ids=[0, 1], labels=[1.0, 1.0], weights=[1.0, 1.0]),  # decreasing
        dict(indptr=[0, 2], feature_ids=[0, 1], labels=[1.0, np.nan], weights=[1.0, 1.0]),  # NaN label
        dict(indptr=[0, 2], feature_ids=[0, 1], labels=[1.0, 1.0], weights=[1.0, -1.0]),  # negative weight
        dict(indptr=[0, 2], feature_ids=[0.0, 1.0], labels=[1.0, 1.0], weights=[1.0, 1.0]),  # float ids
    ],
)
def test_bad_batches(kwargs):
    with pytest.raises(ValueError):
        TaskBatch(features=np.ones((2, 2)), **{k: np.asarray(v) for k, v in kwargs.items()})


def test_from_csr_rejects_misaligned_or_non_csr():
    ui, w, feats = _data()
    with pytest.raises(ValueError, match="aligned"):
        TaskBatch.from_csr(ui, w[:, :-1], feats, transpose=True)
    with pytest.raises(ValueError, match="CSR"):
        TaskBatch.from_csr(ui.tocsc(), w, feats, transpose=True)
    with pytest.raises(ValueError, match="rows"):
        TaskBatch.from_csr(ui, w, feats[:-1], transpose=True)
    with pytest.raises(ValueError, match="NaN"):
        TaskBatch.from_csr(ui, w, np.full_like(feats, np.nan), transpose=True)


def test_unit_repeated_in_a_task_spends_the_square_of_its_summed_weight():
    """Removing a unit repeated in one task moves that task's Gramian by (sum w) |x|^2, so the
    budget the solvers check must be sum_i (sum w)^2, not sum w^2."""
    from privrec.solvers import weighted_statistics

    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    # task 0: unit 0 twice (weights 1, 1) and unit 1; task 1: unit 0 once (weight 1)
    batch = TaskBatch([0, 3, 4], [0, 0, 1, 0], x, [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    without = TaskBatch([0, 1, 1], [1], x, [1.0], [1.0])
    G1, _ = weighted_statistics(batch, max_norm=1.0, label_bound=1.0)
    G2, _ = weighted_statistics(without, max_norm=1.0, label_bound=1.0)
    measured = np.linalg.norm(G1 - G2)  # sqrt(2^2 + 1^2) with max_norm 1
    assert batch.unit_spend() == pytest.approx([5.0, 1.0])
    assert measured <= np.sqrt(batch.unit_budget()) * (1 + 1e-12)
    with pytest.raises(ValueError, match="exceeds the declared budget"):
        batch.check_budget(3.0)
    # unsorted but distinct units per task: plain sum of squares
    unsorted = TaskBatch([0, 2], [1, 0], x, [1.0, 1.0], [0.5, 2.0])
    assert unsorted.unit_spend() == pytest.approx([4.0, 0.25])


def test_unit_spend_blocks_match_one_bincount(monkeypatch):
    """unit_spend sums w^2 block by block with the exact float64 sums of one bincount."""
    import privrec.solvers.batch as batch_mod

    rng = np.random.default_rng(3)
    R = sp.random(400, 60, density=0.2, format="csr", random_state=3, dtype=np.float32)
    W = R.copy()
    W.data = rng.random(R.nnz).astype(np.float32)
    W.data[rng.random(R.nnz) < 0.3] = 0.0
    b = TaskBatch.from_csr(R, W, rng.standard_normal((400, 3)), transpose=True)
    ref = np.bincount(b.feature_ids, weights=b.weights.astype(np.float64) ** 2, minlength=b.n_units)
    monkeypatch.setattr(batch_mod, "_SPEND_CHUNK", 97)
    got = b.unit_spend()
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, ref)


def test_from_csr_drops_zero_weights_task_by_task():
    rng = np.random.default_rng(4)
    R = sp.random(50, 9, density=0.4, format="csr", random_state=4, dtype=np.float32)
    W = R.copy()
    W.data = rng.random(R.nnz).astype(np.float32)
    W.data[rng.random(R.nnz) < 0.5] = 0.0
    W.data[R.indices == 2] = 0.0  # one task loses every example
    for transpose, units in ((True, 50), (False, 9)):
        b = TaskBatch.from_csr(R, W, np.ones((units, 2)), transpose=transpose)
        dense_w = (W.T if transpose else W).toarray()
        dense_r = (R.T if transpose else R).toarray()
        np.testing.assert_array_equal(b.sizes, (dense_w != 0).sum(axis=1))
        assert b.feature_ids.dtype == np.int32 and b.indptr.dtype == np.int64
        for i in range(b.n_tasks):
            s = slice(b.indptr[i], b.indptr[i + 1])
            cols = np.flatnonzero(dense_w[i])
            np.testing.assert_array_equal(b.feature_ids[s], cols)
            np.testing.assert_array_equal(b.weights[s], dense_w[i, cols])
            np.testing.assert_array_equal(b.labels[s], dense_r[i, cols])
    # never a view of the caller's indices
    b = TaskBatch.from_csr(R, R.copy(), np.ones((9, 2)))
    assert not np.shares_memory(b.feature_ids, R.indices)
