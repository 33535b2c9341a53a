"""Shared hypothesis strategies for allocation / solver property tests (small random users x items
matrices with ratings, and the neighbouring dataset), plus a check of the helpers themselves."""

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st


@st.composite
def interaction_matrices(draw, max_users=12, max_items=9):
    n_users = draw(st.integers(1, max_users))
    n_items = draw(st.integers(1, max_items))
    seed = draw(st.integers(0, 2**31 - 1))
    density = draw(st.floats(0.05, 1.0))
    rng = np.random.default_rng(seed)
    mask = rng.random((n_users, n_items)) < density
    ratings = rng.integers(1, 6, size=(n_users, n_items)).astype(np.float32)
    m = sp.csr_matrix(np.where(mask, ratings, 0.0).astype(np.float32))
    m.sort_indices()
    return m


def remove_user(m: sp.csr_matrix, j: int) -> sp.csr_matrix:
    """The neighbouring dataset: user j's row emptied (all of j's data removed)."""
    keep = np.ones(m.shape[0], dtype=bool)
    keep[j] = False
    d = sp.diags(keep.astype(m.dtype))
    out = (d @ m).tocsr()
    out.eliminate_zeros()
    return out


def test_remove_user_empties_exactly_one_row():
    m = sp.csr_matrix(np.arange(1, 13, dtype=np.float32).reshape(3, 4))
    out = remove_user(m, 1)
    assert out.shape == m.shape and out.nnz == 8
    np.testing.assert_array_equal(out.toarray()[[0, 2]], m.toarray()[[0, 2]])
    assert out[1].nnz == 0


def remove_unit(batch, j: int):
    """The neighbouring TaskBatch: every example of unit j removed (other weights unchanged)."""
    from privrec.solvers import TaskBatch

    keep = batch.feature_ids != j
    sizes = np.bincount(batch.task_ids()[keep], minlength=batch.n_tasks)
    return TaskBatch(
        np.concatenate(([0], np.cumsum(sizes))),
        batch.feature_ids[keep],
        batch.features,
        batch.labels[keep],
        batch.weights[keep],
    )


def test_remove_unit_drops_only_that_units_examples():
    from privrec.solvers import TaskBatch

    b = TaskBatch(np.array([0, 2, 3]), np.array([0, 1, 1]), np.eye(2), np.array([1.0, 2.0, 3.0]), np.ones(3))
    nb = remove_unit(b, 1)
    assert nb.indptr.tolist() == [0, 1, 1] and nb.labels.tolist() == [1.0]
