"""privrec.distributed without Dask (issue 27): the install hint names privrec's own extra, and an ALS
the distributed path cannot fit (implicit feedback) is refused before any work."""

import sys

import numpy as np
import pytest
import scipy.sparse as sp

from privrec.distributed import SerialClient, fit
from privrec.distributed._client import get_client
from privrec.models import ALS


def test_missing_dask_names_the_privrec_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `from distributed import ...` raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'privrec\[dask\]'") as info:
        get_client()
    assert "dask[distributed]" not in str(info.value)


def test_implicit_feedback_als_is_refused_by_the_distributed_fit():
    R = sp.random(20, 10, density=0.3, format="csr", random_state=0, dtype=np.float32)
    with pytest.raises(ValueError, match="feedback='implicit'"):
        fit(ALS(feedback="implicit"), R, client=SerialClient())
