"""privrec._io temporary files (kill -9 leftovers) and the shared checks of privrec._validation."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import scipy.sparse as sp

from privrec._io import TEMP_PATTERN, atomic_path, atomic_write_text, clean_stale_temp, writer_gone, writer_tag
from privrec._validation import check_csr_structure, check_memory, check_random_state_seed, memory_limit

DAY = 86400


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_during_atomic_write_leaves_a_recognisable_temp_that_the_next_write_removes(tmp_path):
    code = textwrap.dedent(f"""
        import os, signal
        from privrec._io import atomic_path
        with atomic_path({str(tmp_path / "model.npz")!r}) as tmp:
            open(tmp, "wb").write(b"x" * 100000)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert out.returncode == -signal.SIGKILL
    left = list(tmp_path.iterdir())
    assert len(left) == 1 and TEMP_PATTERN.match(left[0].name), left
    _age(left[0], 2 * DAY)
    atomic_write_text(tmp_path / "model.npz", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]


def test_stale_cleanup_only_touches_old_privrec_temp_names(tmp_path):
    old_tmp = tmp_path / ".privrec-a.npz.k3j4.tmp"
    old_dir = tmp_path / ".privrec-ml-100k.x1.extract"
    fresh = tmp_path / ".privrec-b.npz.k3j4.tmp"
    user_tmp = tmp_path / "notes.tmp"
    hidden = tmp_path / ".a.npz.k3j4.tmp"  # no privrec marker: not ours
    for p in (old_tmp, fresh, user_tmp, hidden):
        p.write_text("x")
    old_dir.mkdir()
    (old_dir / "f").write_text("x")
    for p in (old_tmp, old_dir, user_tmp, hidden):
        _age(p, 2 * DAY)
    removed = clean_stale_temp(tmp_path)
    assert sorted(p.name for p in removed) == sorted([old_tmp.name, old_dir.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fresh.name, user_tmp.name, hidden.name])


def test_atomic_path_names_and_failure(tmp_path):
    target = tmp_path / "out.json"
    with atomic_path(target) as tmp:
        assert TEMP_PATTERN.match(tmp.name) and tmp.parent == tmp_path
        tmp.write_text("ok")
    assert target.read_text() == "ok"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "ok" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


@pytest.mark.skipif(os.name != "posix" or not hasattr(signal, "SIGKILL"), reason="needs POSIX processes")
def test_temp_files_of_dead_writers_are_removed_by_the_next_write_even_when_fresh(tmp_path):
    code = textwrap.dedent(f"""
        import os, signal
        from privrec._io import atomic_path
        with atomic_path({str(tmp_path / "model.npz")!r}) as tmp:
            open(tmp, "wb").write(b"x" * 100000)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    assert proc.wait(timeout=120) == -signal.SIGKILL
    (left,) = list(tmp_path.iterdir())
    assert TEMP_PATTERN.match(left.name) and f"p{proc.pid}." in left.name  # the writer is in the name
    assert writer_gone(left.name)
    atomic_write_text(tmp_path / "model.npz", "new")  # seconds later, not a day
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]


def test_only_privrec_temp_files_of_known_dead_writers_go_early(tmp_path):
    dead, tag = _dead_pid(), writer_tag()
    other_tag = "0" * 8 if tag != "0" * 8 else "1" * 8
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "dead": f".privrec-a.npz.h{tag}p{dead}.k3j4abcd.tmp",
            "dead dir": f".privrec-ml-100k.h{tag}p{dead}.x1y2z3w4.extract",
            "alive": f".privrec-b.npz.h{tag}p{sleeper.pid}.k3j4abcd.tmp",
            "mine": f".privrec-c.npz.h{tag}p{os.getpid()}.k3j4abcd.tmp",
            "other machine": f".privrec-d.npz.h{other_tag}p{dead}.k3j4abcd.tmp",
            "no writer (older privrec)": ".privrec-e.npz.k3j4abcd.tmp",
            "not privrec's": f".e.npz.h{tag}p{dead}.k3j4abcd.tmp",
            "not a temp kind": f".privrec-f.npz.h{tag}p{dead}.k3j4abcd.bak",
        }
        for what, name in names.items():
            if what == "dead dir":
                (tmp_path / name).mkdir()
                (tmp_path / name / "f").write_text("x")
            else:
                (tmp_path / name).write_text("x")
        removed = clean_stale_temp(tmp_path)
        assert sorted(p.name for p in removed) == sorted([names["dead"], names["dead dir"]])
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            n for w, n in names.items() if w not in ("dead", "dead dir")
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert clean_stale_temp(tmp_path) == [tmp_path / names["alive"]]  # its writer is gone now


# ---------------------------------------------------------------- check_csr_structure


def _csr(data, indices, indptr, shape):
    """A CSR whose arrays are set as given, bypassing scipy's (partial) construction checks."""
    m = sp.csr_matrix(shape, dtype=np.float32)
    m.data, m.indices, m.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
    return m


def test_check_csr_structure_reports_each_defect():
    ok = _csr([1.0, 2.0], [0, 2], [0, 1, 2], (2, 3))
    assert check_csr_structure(ok) is True
    assert check_csr_structure(_csr([1.0, 2.0], [2, 0], [0, 2, 2], (2, 3))) is False  # unsorted row
    cases = [
        (_csr([1.0, 2.0], [0, 3], [0, 1, 2], (2, 3)), r"outside \[0, 3\).*3 in row 1"),
        (_csr([1.0, 2.0], [0, -2], [0, 1, 2], (2, 3)), "outside"),
        (_csr([1.0, 2.0], [0, 1], [0, 2, 1, 2], (3, 3)), "decreases at row 1"),
        (_csr([1.0, 2.0], [0, 1], [1, 1, 2], (2, 3)), r"indptr\[0\]"),
        (_csr([1.0, 2.0], [0, 1], [0, 1, 1], (2, 3)), r"indptr\[-1\]"),
        (_csr([1.0, 2.0], [0, 1], [0, 2], (2, 3)), "n_rows"),
        (_csr([1.0], [0, 1], [0, 1, 2], (2, 3)), "values"),
        (_csr([1.0, np.nan], [0, 1], [0, 1, 2], (2, 3)), "NaN"),
        (_csr(["a", "b"], [0, 1], [0, 1, 2], (2, 3)), "numeric"),
        (_csr([1.0, 1.0, 1.0], [1, 1, 1], [0, 3, 3], (2, 3)), r"2 duplicate .*row 0, column 1"),
        (_csr([1.0, 1.0, 1.0], [0, 0, 0], [0, 1, 3], (2, 3)), r"1 duplicate .*row 1, column 0"),
    ]
    for m, needle in cases:
        with pytest.raises(ValueError, match=needle):
            check_csr_structure(m, "m")
    with pytest.raises(ValueError, match="CSR"):
        check_csr_structure(ok.tocoo())
    # a repeat across a row boundary is not a duplicate; empty rows are fine
    assert check_csr_structure(_csr([1.0, 1.0], [1, 1], [0, 1, 1, 2], (3, 3))) is True
    assert check_csr_structure(sp.csr_matrix((4, 0))) is True


def test_check_csr_structure_is_vectorised_on_large_input():
    rng = np.random.default_rng(0)
    n, per = 200_000, 10
    indices = np.sort(rng.choice(1000, size=(n, per), replace=True), axis=1)
    indices[:, 1:] += np.arange(1, per)  # strictly increasing within each row
    m = sp.csr_matrix(
        (np.ones(n * per, dtype=np.float32), indices.ravel().astype(np.int32), np.arange(0, n * per + 1, per)),
        shape=(n, 1000 + per),
    )
    assert check_csr_structure(m) is True
    m.indices[-1] = m.indices[-2]
    with pytest.raises(ValueError, match=f"1 duplicate .*row {n - 1}"):
        check_csr_structure(m)


# ---------------------------------------------------------------- memory and seeds


def test_check_memory(monkeypatch):
    assert check_memory(10, 4, 4, "factors", limit=1000) == 160
    with pytest.raises(ValueError, match=r"item factors would need .*PRIVREC_MAX_ARRAY_BYTES"):
        check_memory(10**6, 10**5, 4, "item factors")
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", "100")
    assert memory_limit() == 100
    with pytest.raises(ValueError, match="would need"):
        check_memory(10, 10, 4, "x")
    monkeypatch.setenv("PRIVREC_MAX_ARRAY_BYTES", "lots")
    with pytest.raises(ValueError, match="PRIVREC_MAX_ARRAY_BYTES"):
        memory_limit()
    with pytest.raises(ValueError, match="integer"):
        check_memory(10, 1e5, 4, "x", limit=10)


def test_check_random_state_seed():
    assert check_random_state_seed(None) is None and check_random_state_seed(3) == 3
    gen = np.random.default_rng(0)
    assert check_random_state_seed(gen) is gen
    for bad, needle in [
        (-1, "non-negative"),
        (1.5, "integer"),
        ("7", "integer"),
        (True, "integer"),
        (2**130, "2\\*\\*128"),
    ]:
        with pytest.raises(ValueError, match=needle):
            check_random_state_seed(bad, "seed")
