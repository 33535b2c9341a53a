"""Fuzzing of files (Hypothesis-driven mutations): dataset sources, cache entries, model files, archives.

Each valid file is mutated (bit flips, inserted separators / line breaks / byte-order marks,
deleted or duplicated bytes, truncation). A reader must then either raise a ``ValueError`` (one
line) or return exactly what a correct reader of the mutated bytes returns: a loader never
swallows a line and never accepts a value outside the dataset's declared range; a cache entry or
a model file is read back unchanged or rejected, never returned changed. Deterministic and small
(the whole fuzz suite stays within about a minute); ``PRIVREC_FUZZ_EXAMPLES`` runs more.
"""

import functools
import math
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privrec._io import TEMP_PATTERN
from privrec._validation import check_csr_structure
from privrec.data import loaders
from privrec.data.cache import cached_load
from privrec.data.download import download_dataset
from privrec.models import ALS, DPALS, load_model

N = int(os.environ.get("PRIVREC_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=N or 60,
    deadline=None,
    derandomize=not N,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ_SLOW = settings(FUZZ, max_examples=N or 15)

INTERESTING = b":\t,\n\r-.05 9e\xef\xbb\xbf\x00\xff"


@st.composite
def mutations(draw, max_ops=3):
    ops = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "dupline", "bom"]))
        ops.append(
            (
                kind,
                draw(st.floats(0, 1, exclude_max=True)),
                draw(st.integers(0, 7)),
                draw(st.sampled_from(list(INTERESTING))),
            )
        )
    return ops


def mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for kind, where, bit, byte in ops:
        pos = int(where * len(b)) if b else 0
        if kind == "flip" and b:
            b[pos] ^= 1 << bit
        elif kind == "insert":
            b.insert(pos, byte)
        elif kind == "delete" and b:
            del b[pos]
        elif kind == "truncate":
            del b[pos:]
        elif kind == "dupline":
            lines = bytes(b).split(b"\n")
            i = int(where * len(lines))
            lines.insert(i, lines[i])
            b = bytearray(b"\n".join(lines))
        elif kind == "bom":
            b[:0] = b"\xef\xbb\xbf"
    return bytes(b)


# ---------------------------------------------------------------- dataset source files

SOURCES = {
    "ml-100k": (
        "u.data",
        loaders.load_movielens_100k,
        False,
        b"196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n244\t51\t2\t880606923\n",
    ),
    "ml-1m": (
        "ratings.dat",
        loaders.load_movielens_dat,
        False,
        b"1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n3::50::1::978298000\n",
    ),
    "ml-10m": (
        "ratings.dat",
        loaders.load_movielens_dat,
        False,
        b"1::122::5::838985046\n1::185::4.5::838983525\n2::231::0.5::838983392\n",
    ),
    "ml-20m": (
        "ratings.csv",
        loaders.load_movielens_csv,
        True,
        b"userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n1,29,4.0,1112484676\n7,2,0.5,1112484819\n",
    ),
    "lastfm-2k": (
        "user_artists.dat",
        loaders.load_lastfm_hetrec,
        None,
        b"userID\tartistID\tweight\n2\t51\t13883\n2\t52\t11690\n3\t51\t5\n",
    ),
    "msd": (
        "train_triplets.txt",
        loaders.load_msd_taste_profile,
        False,
        b"b80344d0\tSOAKIMP12A\t1\nb80344d0\tSOBBMDR12A\t2\n85c1f87f\tSOAKIMP12A\t7\n",
    ),
}


def _data_lines(raw: bytes, header: bool) -> int:
    """Rows a correct reader sees: lines ended by \\n, \\r\\n or \\r, without a final empty one."""
    pieces = re.split(rb"\r\n|\n|\r", raw)
    if pieces and pieces[-1] == b"":
        pieces.pop()
    return len(pieces) - int(header)


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="privrec-fuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@FUZZ
@given(st.sampled_from(sorted(SOURCES)), mutations())
def test_mutated_source_files(workdir, dataset, ops):
    filename, loader, header, valid = SOURCES[dataset]
    raw = mutate(valid, ops)
    folder = Path(tempfile.mkdtemp(dir=workdir))
    (folder / filename).write_bytes(raw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicate rows created by "dupline" are reported, resolved
            x = loader(folder, name=dataset)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    check_csr_structure(x.matrix)
    valid_values = loaders.RATING_RANGES[dataset]
    assert valid_values.valid(x.matrix.data).all(), x.matrix.data
    has_header = x.info.get("header", header) if header is None else header
    assert x.info["input_rows"] == _data_lines(raw, bool(has_header))  # no line swallowed


# ---------------------------------------------------------------- cache entries


@pytest.fixture(scope="module")
def cache_setup(workdir):
    src = workdir / "ml-100k"
    src.mkdir()
    rng = np.random.default_rng(0)
    rows = {(int(u), int(i)) for u, i in zip(rng.integers(1, 30, 300), rng.integers(1, 80, 300))}
    (src / "u.data").write_text(
        "".join(f"{u}\t{i}\t{(u + i) % 5 + 1}\t{880000000 + u * 100 + i}\n" for u, i in sorted(rows))
    )
    (src / "u.item").write_text(
        "".join(f"{j}|Movie {j}|01-Jan-1995||url|{'|'.join(['0'] * 18 + ['1'])}\n" for j in range(1, 80)),
        encoding="latin-1",
    )
    cache = workdir / "cache"
    original = cached_load(
        lambda: loaders.load_movielens_100k(src), [src / "u.data", src / "u.item"], "ml-100k", cache_dir=cache
    )
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    pristine = workdir / "pristine-cache"
    shutil.copytree(entry, pristine)
    return src, cache, entry, pristine, original


@FUZZ
@given(
    st.sampled_from(["entries.parquet", "users.parquet", "items.parquet", "info.json", "manifest.json"]), mutations()
)
def test_mutated_cache_entries_never_return_changed_data(cache_setup, victim, ops):
    src, cache, entry, pristine, original = cache_setup
    shutil.rmtree(entry, ignore_errors=True)
    shutil.copytree(pristine, entry)
    (entry / victim).write_bytes(mutate((pristine / victim).read_bytes(), ops))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cached_load(
            lambda: loaders.load_movielens_100k(src), [src / "u.data", src / "u.item"], "ml-100k", cache_dir=cache
        )
    assert (got.matrix != original.matrix).nnz == 0
    np.testing.assert_array_equal(got.user_ids, original.user_ids)
    np.testing.assert_array_equal(got.item_ids, original.item_ids)
    np.testing.assert_array_equal(got.timestamps, original.timestamps)
    assert list(got.item_metadata.title) == list(original.item_metadata.title)


# ---------------------------------------------------------------- model files


def _ratings():
    rng = np.random.default_rng(0)
    dense = (rng.random((30, 15)) < 0.35) * rng.integers(1, 6, (30, 15))
    dense[:, 0] = 4
    return sp.csr_matrix(dense.astype(np.float32))


@functools.cache
def _model_file(name: str):
    """(saved bytes, fitted model); a cached function, not a fixture, so that a failing example
    prints only its mutations."""
    R = _ratings()
    model = (
        ALS(factors=3, iterations=1, random_state=0)
        if name == "als"
        else DPALS(epsilon=2.0, factors=2, iterations=1, budget=3, random_state=0)
    ).fit(R)
    with tempfile.TemporaryDirectory(prefix="privrec-fuzz-") as d:
        model.save(Path(d) / "m.npz")
        return (Path(d) / "m.npz").read_bytes(), model


def _check_model_bytes(workdir, raw, model):
    path = Path(tempfile.mkdtemp(dir=workdir)) / "m.npz"
    path.write_bytes(raw)
    try:
        loaded = load_model(path)
    except ValueError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    # accepted: then it is the same model (a flip in zip bookkeeping that changes nothing)
    assert type(loaded) is type(model) and loaded.get_params().keys() == model.get_params().keys()
    np.testing.assert_array_equal(loaded.item_factors_, model.item_factors_)


@FUZZ
@given(mutations())
def test_mutated_als_files(workdir, ops):
    raw, model = _model_file("als")
    _check_model_bytes(workdir, mutate(raw, ops), model)


@FUZZ_SLOW
@given(mutations())
def test_mutated_dpals_files(workdir, ops):
    raw, model = _model_file("dpals")
    _check_model_bytes(workdir, mutate(raw, ops), model)


# ---------------------------------------------------------------- downloaded archives


def _zip(members: dict) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


ARCHIVE = _zip(
    {
        "ml-100k/u.data": "1\t2\t3\t4\n2\t2\t5\t6\n" * 50,
        "ml-100k/u.item": "1|A|x||u|" + "0|" * 18 + "1\n",
        "ml-100k/README": "tiny",
    }
)


@FUZZ_SLOW
@given(mutations())
def test_mutated_archives(workdir, ops):
    case = Path(tempfile.mkdtemp(dir=workdir))
    archive = case / "ml-100k.zip"
    archive.write_bytes(mutate(ARCHIVE, ops))
    root = case / "root"
    root.mkdir()
    try:
        folder = download_dataset("ml-100k", root, url=archive.as_uri(), timeout=5)
    except ValueError as exc:
        assert "\n" not in str(exc)
        assert [p.name for p in root.iterdir()] == []
    else:
        assert (folder / "u.data").is_file() and folder.parent == root
    assert not [p for p in root.iterdir() if TEMP_PATTERN.match(p.name)]
    assert sorted(p.name for p in case.iterdir()) == ["ml-100k.zip", "root"]  # nothing written outside root
    shutil.rmtree(case, ignore_errors=True)


# ---------------------------------------------------------------- model files with forged sizes
# A crafted file may lie in its zip directory (sizes, compression method), its .npy headers and its
# metadata. Whatever it claims, load_model must answer with a one-line ValueError or the very model
# that was saved, without ever allocating what the file merely declares.

_BIG = [2**31 - 1, 2**31, 2**32 + 7, 4_800_000_128, 2**40, 2**62]


@st.composite
def size_forgeries(draw):
    return (
        draw(st.sampled_from(["__meta__", "item_factors_", "user_factors_", "item_bias_"])),
        # what lies, together (the probe's file: header + metadata + directory sizes)
        draw(st.sets(st.sampled_from(["file_size", "compress_size", "header", "metadata", "method"]), min_size=1)),
        draw(st.sampled_from(_BIG) | st.integers(0, 1 << 20)),
        draw(st.booleans()),  # deflate the members (np.savez_compressed) instead of storing them
        draw(st.booleans()),  # keep __sha256__
    )


def _npy_header(shape, descr) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


def _forge(raw: bytes, forgery) -> bytes:
    """``raw`` with ``forgery``'s lies: a member's header and / or the metadata declare about
    ``value`` bytes, its zip directory entry claims ``value`` bytes (or exactly what the forged
    header needs), or it uses another compression method."""
    import io
    import json
    import zipfile

    target, fields, value, deflate, keep_sha = forgery
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        members = {n[:-4]: zf.read(n) for n in zf.namelist()}
    meta = json.loads(str(np.load(io.BytesIO(members["__meta__"]))))
    if not keep_sha:
        members.pop("__sha256__", None)
    claimed = value
    if target == "__meta__":
        if "header" in fields:  # a text scalar claiming `value` bytes
            header = _npy_header((), f"<U{max(1, min(value // 4, 2**29))}")
            members["__meta__"] = header + members["__meta__"][128:]
            claimed = len(header) + max(4, min(value, 2**31))
    elif fields & {"header", "metadata"}:
        arr = np.load(io.BytesIO(members[target]))
        shape = (max(1, value // (4 * max(1, math.prod(arr.shape[1:])))), *arr.shape[1:]) if arr.ndim else ()
        if "header" in fields:  # the member's own header claims the big shape
            header = _npy_header(shape, arr.dtype.str)
            members[target] = header + arr.tobytes()
            claimed = len(header) + math.prod(shape) * arr.dtype.itemsize
        if "metadata" in fields or "header" in fields:
            meta["arrays"][target]["shape"] = list(shape)
            members["__meta__"] = _npy_to_bytes(np.array(json.dumps(meta)))
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    if "method" in fields:
        method = zipfile.ZIP_BZIP2 if value % 2 else zipfile.ZIP_LZMA
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as zf:
        for name, data in members.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as fh:
                fh.write(data)
            info = zf.filelist[-1]
            if name == target and "file_size" in fields:
                info.file_size = claimed
            if name == target and "compress_size" in fields:
                info.compress_size = claimed
    return out.getvalue()


def _npy_to_bytes(arr) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@FUZZ
@given(size_forgeries())
def test_forged_sizes_never_allocate_what_they_declare(workdir, forgery):
    import tracemalloc

    raw, model = _model_file("als")
    forged = _forge(raw, forgery)
    tracemalloc.start()
    try:
        _check_model_bytes(workdir, forged, model)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, f"{peak / 2**20:.0f} MiB for a {len(forged)}-byte file"


# ---------------------------------------------------------------- save() targets

_TARGETS = ["new", "regular", "link", "link-chain", "dangling", "loop", "folder", "fifo", "under-file", "to-dev-null"]


@FUZZ_SLOW
@given(st.sampled_from(_TARGETS), st.booleans())
def test_save_to_any_kind_of_path(workdir, kind, relative):
    """A save writes a loadable model at the path (through any links, which stay) or refuses with
    a one-line error and changes nothing; it never leaves a temporary file or replaces a node that
    is not a regular file."""
    _, model = _model_file("als")
    case = Path(tempfile.mkdtemp(dir=workdir))
    path = case / "m.npz"
    real = case / "real.npz"
    if kind == "regular":
        path.write_bytes(b"old")
    elif kind in ("link", "link-chain", "dangling"):
        if kind != "dangling":
            real.write_bytes(b"old")
        hop = case / "hop.npz"
        first = hop if kind == "link-chain" else real
        path.symlink_to(first.name if relative else first)
        if kind == "link-chain":
            hop.symlink_to(real.name if relative else real)
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        if not hasattr(os, "mkfifo"):
            return
        os.mkfifo(path)
    elif kind == "under-file":
        (case / "file").write_text("x")
        path = case / "file" / "m.npz"
    elif kind == "to-dev-null":
        if not os.path.exists("/dev/null"):
            return
        path.symlink_to("/dev/null")
    before = {p.name: os.lstat(p) for p in case.iterdir()}
    try:
        model.save(path)
    except (ValueError, FileNotFoundError) as exc:
        assert kind in ("loop", "folder", "fifo", "under-file", "to-dev-null"), (kind, exc)
        assert "\n" not in str(exc)
        after = {p.name: os.lstat(p) for p in case.iterdir()}
        assert {k: (v.st_mode, v.st_ino) for k, v in after.items()} == {
            k: (v.st_mode, v.st_ino) for k, v in before.items()
        }
    else:
        assert kind in ("new", "regular", "link", "link-chain", "dangling"), kind
        written = real if kind in ("link", "link-chain", "dangling") else path
        np.testing.assert_array_equal(load_model(written).item_factors_, model.item_factors_)
        if written is real:
            assert path.is_symlink()
    assert not [p for p in case.rglob("*") if TEMP_PATTERN.match(p.name)]
    shutil.rmtree(case, ignore_errors=True)


# ---------------------------------------------------------------- temporary files: what the next write removes


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["privrec", "legacy", "foreign"]),  # our name, an older privrec's, someone else's
            st.sampled_from(["dead", "alive", "self", "other-host"]),
            st.sampled_from([".tmp", ".partial", ".extract", ".bak"]),
            st.booleans(),  # older than a day
            st.booleans(),  # a folder
        ),
        max_size=6,
    )
)
def test_temp_cleanup_removes_exactly_dead_or_stale_privrec_temporaries(workdir, entries):
    import time

    from privrec._io import STALE_AFTER, clean_stale_temp, writer_tag

    pids = {"dead": _dead_pid(), "alive": os.getppid(), "self": os.getpid(), "other-host": _dead_pid()}
    case = Path(tempfile.mkdtemp(dir=workdir))
    expect = set()
    for k, (origin, writer, kind, old, folder) in enumerate(entries):
        tag = writer_tag() if writer != "other-host" else ("0" * 8 if writer_tag() != "0" * 8 else "1" * 8)
        owner = f"h{tag}p{pids[writer]}."
        name = {
            "privrec": f".privrec-f{k}.npz.{owner}abcd{k:04d}{kind}",
            "legacy": f".privrec-f{k}.npz.abcd{k:04d}{kind}",
            "foreign": f".notes-f{k}.{owner}abcd{k:04d}{kind}",
        }[origin]
        p = case / name
        if folder:
            p.mkdir()
            (p / "inside").write_text("x")
        else:
            p.write_text("x")
        if old:
            t = time.time() - 2 * STALE_AFTER
            os.utime(p, (t, t))
        ours = origin != "foreign" and kind != ".bak"
        gone = origin == "privrec" and writer == "dead"
        if ours and (old or gone):
            expect.add(name)
    created = {p.name for p in case.iterdir()}
    removed = {p.name for p in clean_stale_temp(case)}
    assert removed == expect
    assert {p.name for p in case.iterdir()} == created - expect
    shutil.rmtree(case, ignore_errors=True)


@functools.cache
def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


# ---------------------------------------------------------------- CLI failures with --json

_BAD_FLAGS = [
    ["--epsilon", "-1"],
    ["--epsilon", "nan"],
    ["--delta", "2"],
    ["--factors", "-3"],
    ["--iterations", "0"],
    ["--heldout-users", "0"],
    ["--method", "no-such-method"],
    ["--bogus"],
    ["--ratings", "/no/such/file.csv"],
    ["--dataset", "no-such-dataset"],
    ["--output", "/dev/null"],
    ["--output", "{dir}"],
    ["--output", "{file}/m.npz"],
    ["--plot", "{dir}/x.unknown-type"],
    ["--budget-file", "{dir}/no-budget.json"],
    ["--lifetime-epsilon", "1"],
]


@FUZZ
@given(st.lists(st.sampled_from(_BAD_FLAGS), min_size=1, max_size=3), st.booleans())
def test_cli_failures_with_json_print_one_error_object(workdir, flags, json_first):
    """Any failing ``privrec fit --json`` prints exactly one JSON object ``{"error", "exit_status"}``
    on stdout, whose status is the exit status, and one line on stderr -- before any fit."""
    import contextlib
    import io
    import json

    import privrec.commands.fit as F
    from privrec.cli import main

    case = Path(tempfile.mkdtemp(dir=workdir))
    (case / "file").write_text("x")
    argv = [a.format(dir=case, file=case / "file") for f in flags for a in f]
    argv = ["fit", "--json", *argv] if json_first else ["fit", *argv, "--json"]
    out, err = io.StringIO(), io.StringIO()

    def ran(*args, **kwargs):
        raise AssertionError(f"a fit ran for {argv}")

    fit_model = F._fit_model
    F._fit_model = ran
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    finally:
        F._fit_model = fit_model
        shutil.rmtree(case, ignore_errors=True)
    assert rc in (1, 2, 3), (argv, rc)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, (argv, out.getvalue())
    obj = json.loads(lines[0])
    assert set(obj) == {"error", "exit_status"} and obj["exit_status"] == rc and obj["error"]
    assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()


# ---------------------------------------------------------------- signals at random moments (slow)


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="needs POSIX signals")
@settings(FUZZ, max_examples=N or 6)
@given(st.sampled_from(["SIGTERM", "SIGINT"]), st.floats(0.0, 1.0))
def test_signal_at_a_random_moment_of_a_save_keeps_a_valid_file_and_no_temporary(workdir, signame, when):
    """Old file or new file, never a truncated one, and never a temporary file left behind."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    case = Path(tempfile.mkdtemp(dir=workdir))
    raw, model = _model_file("als")
    path = case / "m.npz"
    path.write_bytes(raw)
    code = textwrap.dedent(f"""
        import numpy as np
        from privrec.models import ALS
        rng = np.random.default_rng(0)
        model = ALS(factors=64, iterations=1).fit(__import__("scipy.sparse").sparse.random(
            3000, 2000, density=0.01, format="csr", dtype=np.float32, random_state=0))
        print("saving", flush=True)
        for _ in range(20):
            model.save({str(path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saving"
        time.sleep(when)
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    sig = getattr(signal, signame)
    assert proc.returncode in (0, 128 + sig, -sig), (proc.returncode, err)
    assert not [p for p in case.iterdir() if TEMP_PATTERN.match(p.name)]
    loaded = load_model(path) if path.read_bytes() != raw else None  # the old file, or a complete new one
    assert loaded is None or loaded.item_factors_.shape == (2000, 64)
    shutil.rmtree(case, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="needs POSIX signals")
@settings(FUZZ, max_examples=N or 6)
@given(st.floats(0.0, 2.5))
def test_sigint_at_a_random_moment_of_the_cli_never_prints_a_traceback(when):
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[1]
    # what the installed `privrec` script runs; the clock starts once privrec.cli is imported (the
    # interpreter's start-up and that small module's import are before privrec's code can act)
    code = (
        "import sys; sys.argv = ['privrec', 'datasets', 'info', 'synthetic-skew', '--scale', '0.1']; "
        "from privrec.cli import main; print('up', flush=True); sys.exit(main())"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "up"
    time.sleep(when)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # 130 with one line, or 0 if it had finished
    assert proc.returncode in (0, 130), (proc.returncode, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    if proc.returncode == 130:
        assert err.strip().splitlines()[-1] == "privrec: interrupted"
