"""One structural check of sparse inputs at every public entry (issue: segfaults on corrupt CSR).

``as_user_items`` / ``check_fit_matrix`` (models' fit / recommend / transform) and
``Interactions`` go through the same check, with the same duplicate policy: reject.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.data import Interactions
from privrec.models import ALS, DPALS
from privrec.models._base import as_user_items, check_fit_matrix


def _R(n_users=30, n_items=12, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < 0.3) * rng.integers(1, 6, (n_users, n_items))
    dense[0, :3] = [1, 2, 3]  # row 0 has >= 3 entries
    return sp.csr_matrix(dense.astype(np.float32))


def _corrupt(kind: str) -> sp.csr_matrix:
    m = _R()
    if kind == "index_too_large":
        m.indices[1] = m.shape[1] + 5
    elif kind == "index_negative":
        m.indices[1] = -1
    elif kind == "indptr_decreasing":
        m.indptr[3] = m.indptr[2] - 1
    elif kind == "indptr_not_zero":
        m.indptr[0] = 1
    elif kind == "indptr_end":
        m.indptr[-1] = m.nnz - 1
    elif kind == "indptr_length":
        m.indptr = m.indptr[:-1]
    elif kind == "nan":
        m.data[2] = np.nan
    elif kind == "inf":
        m.data[2] = np.inf
    return m


CORRUPTIONS = [
    "index_too_large",
    "index_negative",
    "indptr_decreasing",
    "indptr_not_zero",
    "indptr_end",
    "indptr_length",
    "nan",
    "inf",
]


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_as_user_items_rejects_corrupt_csr(kind):
    m = _corrupt(kind)
    with pytest.raises(ValueError) as info:
        as_user_items(m)
    msg = str(info.value)
    assert "\n" not in msg and "user_items" in msg


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_interactions_rejects_corrupt_csr(kind):
    with pytest.raises(ValueError):
        Interactions(_corrupt(kind))


def test_fit_rejects_out_of_range_columns_without_crashing():
    """Today ALS dies inside scipy / the gather (signal 11 or IndexError): run it in a child process."""
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp
        from privrec.models import ALS
        R = sp.random(40, 12, density=0.3, format="csr", random_state=0, dtype=np.float32)
        R.data[:] = 3.0
        R.indices[5] = 1_000_000
        try:
            ALS(factors=2, iterations=1, biases=False, center=False, random_state=0).fit(R)
            print("FITTED")
        except ValueError as exc:
            print("ValueError:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-500:])
    assert out.stdout.startswith("ValueError:") and "column index" in out.stdout


@pytest.mark.parametrize("model", [ALS(factors=2, iterations=1), DPALS(epsilon=float("inf"), factors=2, iterations=1)])
def test_models_reject_corrupt_indices_at_fit(model):
    with pytest.raises(ValueError, match="column index"):
        model.fit(_corrupt("index_too_large"))


def test_duplicates_are_rejected_not_summed():
    m = sp.csr_matrix(
        (np.array([3.0, 3.0, 1.0], dtype=np.float32), np.array([1, 1, 0]), np.array([0, 2, 3])), shape=(2, 3)
    )
    with pytest.raises(ValueError, match=r"1 duplicate .*row 0, column 1"):
        as_user_items(m)
    with pytest.raises(ValueError, match="duplicate"):
        check_fit_matrix(m)
    with pytest.raises(ValueError, match="duplicate"):
        ALS(factors=2, iterations=1).fit(m)
    with pytest.raises(ValueError, match="duplicate"):
        Interactions(m)


def test_duplicates_in_unsorted_rows_and_coo_are_rejected():
    m = sp.csr_matrix((np.ones(4, dtype=np.float32), np.array([2, 0, 2, 1]), np.array([0, 3, 4])), shape=(2, 3))
    with pytest.raises(ValueError, match=r"1 duplicate .*row 0, column 2"):
        as_user_items(m)
    coo = sp.coo_matrix((np.ones(3), (np.array([0, 0, 1]), np.array([1, 1, 0]))), shape=(2, 3))
    with pytest.raises(ValueError, match="1 duplicate"):
        Interactions(coo)
    csc = sp.csc_matrix((np.ones(3), np.array([0, 0, 1]), np.array([0, 0, 2, 3])), shape=(2, 3))
    with pytest.raises(ValueError, match="duplicate"):
        Interactions(csc)


def test_unsorted_rows_are_sorted_with_values_and_timestamps():
    m = sp.csr_matrix(
        (np.array([5.0, 1.0, 2.0], dtype=np.float32), np.array([2, 0, 1]), np.array([0, 2, 3])), shape=(2, 3)
    )
    out = as_user_items(m)
    assert out.has_sorted_indices
    np.testing.assert_array_equal(out.toarray(), [[1, 0, 5], [0, 2, 0]])
    x = Interactions(m, timestamps=np.array([50, 10, 20]))
    np.testing.assert_array_equal(x.matrix.indices, [0, 2, 1])
    np.testing.assert_array_equal(x.matrix.data, [1, 5, 2])
    np.testing.assert_array_equal(x.timestamps, [10, 50, 20])  # still aligned with the values


def test_valid_input_passes_unchanged():
    m = _R()
    out = as_user_items(m)
    assert out.dtype == np.float32 and out.indices.dtype == np.int32
    assert (out != m).nnz == 0
    x = Interactions(m)
    assert x.nnz == m.nnz


def test_flags_set_by_hand_are_not_trusted():
    """A damaged cache used to set has_sorted_indices = True on whatever it read."""
    m = sp.csr_matrix((np.ones(3, dtype=np.float32), np.array([1, 1, 0]), np.array([0, 2, 3])), shape=(2, 3))
    m.has_sorted_indices = True
    m.has_canonical_format = True
    with pytest.raises(ValueError, match="duplicate"):
        as_user_items(m)


def test_recommend_and_transform_check_their_input():
    R = _R()
    model = ALS(factors=2, iterations=1, random_state=0).fit(R)
    bad = _corrupt("index_too_large")
    with pytest.raises(ValueError, match="column index"):
        model.transform(bad)
    with pytest.raises(ValueError, match="column index"):
        model.recommend(np.arange(bad.shape[0]), bad, N=2)
