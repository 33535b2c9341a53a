"""The privrec model file: its format and the checks that reading one runs.

A model file (FORMAT_VERSION 2, docs/data-and-model-files.md) is an ``.npz`` zip archive, as
written by ``numpy.savez`` and read with ``numpy.lib.format``, holding exactly ``__meta__`` (0-d
unicode array: the JSON metadata), ``__sha256__`` (0-d unicode array: :func:`_content_hash` of the
metadata text and every array; optional on read) and one ``<name>.npy`` member per saved array.
Version-1 files (no dtypes in the metadata, no hash) are still read.

This module holds the format's constants and the checks of an untrusted file that do not depend
on the model class, in the order :meth:`FactorizationModel.load` runs them: the zip members
(:func:`_npz_members`; stored or deflated only, and each member's declared sizes bounded by the
file's size before anything is read), the declared array sizes against the memory limit and the
memory the process may still allocate under its ``RLIMIT_AS`` / ``RLIMIT_DATA`` limits, each
``.npy`` header before its data (:func:`_read_header`), the metadata's JSON and its depth, the
parameters, the content hash, and the privacy report, whose epsilons are recomputed from its
recorded events (:func:`_verify_privacy_report`). What a model writes into such a file and restores
from it -- the array schema of each class, the id maps, pickling -- is
:mod:`privrec.models.persistence`. A failed check raises :class:`_BadModelFile`, which ``load``
turns into a one-line ``ValueError`` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zipfile
import zlib

import numpy as np

from .._validation import _gib, memory_limit

FORMAT_NAME = "privrec-model"
FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_FLOAT_DTYPES = ("float32", "float64")
_MAX_META_BYTES = 256 << 20  # UTF-32 text of the metadata (privacy reports with many events)
#: zip compression methods a model file may use -> the most bytes one compressed byte can expand
#: to. numpy writes .npz members stored (``np.savez``, 1:1) or deflated (``np.savez_compressed``);
#: deflate cannot exceed 1032:1 (RFC 1951: a 258-byte match costs at least 2 bits). bzip2 and lzma
#: (whose ratios are unbounded in practice) are refused, so every declared size is bounded by the
#: size of the file itself before anything is read.
_MAX_EXPANSION = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: 1032}
_MAX_JSON_DEPTH = 64
_EPS_RTOL = 1e-6


class _BadModelFile(ValueError):
    """A check of the model file failed (the message does not name the file; ``load`` adds it)."""


def _c_order(a: np.ndarray) -> np.ndarray:
    """C-contiguous copy if needed, keeping 0-d arrays 0-d (``np.ascontiguousarray`` makes them 1-d)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def _one_line(exc: BaseException) -> str:
    return " ".join((str(exc) or type(exc).__name__).split())


def _content_hash(meta_text: str, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the metadata text and every array (name, dtype, shape, C-order bytes)."""
    h = hashlib.sha256()
    h.update(b"privrec-model-content\0")
    h.update(meta_text.encode("utf-8"))
    for k in sorted(arrays):
        a = _c_order(np.asarray(arrays[k]))
        h.update(f"\0{k}\0{a.dtype.str}\0{list(a.shape)}\0".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def _npz_members(zf: zipfile.ZipFile, file_size: int | None = None) -> dict[str, zipfile.ZipInfo]:
    """The members of an .npz by array name; with ``file_size`` (bytes of the whole file), each
    member's declared sizes are checked against it first (:func:`_check_member_size`)."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        fname = info.filename
        if not fname.endswith(".npy") or "/" in fname or "\\" in fname:
            raise _BadModelFile(f"unexpected member {fname[:60]!r} (a model file holds only .npy arrays)")
        key = fname[:-4]
        if key in members:
            raise _BadModelFile(f"member {key[:60]!r} appears twice")
        if file_size is not None:
            _check_member_size(info, key, file_size)
        members[key] = info
    return members


def _check_member_size(info: zipfile.ZipInfo, what: str, file_size: int) -> None:
    """A member's declared sizes must be possible in a file of ``file_size`` bytes: its compressed
    bytes fit in the file, and its uncompressed size is at most :data:`_MAX_EXPANSION` times them
    (stored: equal; deflated: 1032:1). The zip directory is not trusted: a forged size would
    otherwise make the reader allocate what it declares."""
    expansion = _MAX_EXPANSION.get(info.compress_type)
    if expansion is None:
        raise _BadModelFile(
            f"member {what[:60]!r} uses zip compression method {info.compress_type}; a model file's members are "
            "stored or deflated (as numpy writes them)"
        )
    if info.compress_size > file_size:
        raise _BadModelFile(
            f"member {what[:60]!r} claims {info.compress_size:,} compressed bytes, more than the whole file "
            f"({file_size:,} bytes)"
        )
    if info.file_size > expansion * info.compress_size:
        how = "stored" if expansion == 1 else f"deflated, at most {expansion}:1"
        raise _BadModelFile(
            f"member {what[:60]!r} claims {info.file_size:,} bytes but holds {info.compress_size:,} "
            f"({how}): its size is forged"
        )


def _check_declared_sizes(specs: dict, members: dict[str, zipfile.ZipInfo], file_size: int) -> None:
    """Before any array is read: every array the metadata declares fits in its member (whose size
    :func:`_check_member_size` bounded by the file's), and all of them together fit in
    :func:`privrec._validation.memory_limit` (``$PRIVREC_MAX_ARRAY_BYTES``) and, with
    :data:`_LOAD_HEADROOM` to spare, in what the process may still allocate under its soft
    ``RLIMIT_AS`` / ``RLIMIT_DATA`` limits (the limit less the current ``VmSize`` / ``VmData``:
    :func:`_address_space_left`). The message names the limit that refused the file."""
    total = 0
    for k, (shape, dtype_str, _, dtypes) in specs.items():
        itemsize = np.dtype(dtype_str).itemsize if dtype_str is not None else min(np.dtype(t).itemsize for t in dtypes)
        nbytes = math.prod(shape) * itemsize  # exact Python ints: no overflow
        info = members[k]
        if nbytes > info.file_size:
            raise _BadModelFile(
                f"array {k}: the metadata says shape {tuple(shape)} ({_gib(nbytes)}), but its member holds only "
                f"{info.file_size:,} bytes (the file has {file_size:,})"
            )
        total += nbytes
    limit = memory_limit()
    if total > limit:
        why = (
            "set by PRIVREC_MAX_ARRAY_BYTES"
            if os.environ.get("PRIVREC_MAX_ARRAY_BYTES")
            else "half the physical memory; set PRIVREC_MAX_ARRAY_BYTES to raise it"
        )
        raise _BadModelFile(f"its arrays declare {_gib(total)}, more than the memory limit of {_gib(limit)} ({why})")
    for name, soft, used, left in _address_space_left():
        if total + _LOAD_HEADROOM > left:
            raise _BadModelFile(
                f"its arrays declare {_gib(total)}, more than this process can still allocate under its {name} "
                f"limit ({_gib(soft)}, of which {_gib(used)} in use: {_gib(left)} left); raise the limit (ulimit "
                f"{'-v' if name == 'RLIMIT_AS' else '-d'}) or load the file in a process with more room"
            )


#: room kept free besides the arrays when a model file is read (decompression buffers, the metadata)
_LOAD_HEADROOM = 64 << 20
#: process resource limits on memory that a load must fit under, with the /proc/self/status field
#: of the current usage each limit counts
_RESOURCE_LIMITS = (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData"))


def _status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (Linux) in bytes, or ``None``."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _address_space_left() -> list[tuple[str, int, int, int]]:
    """``(limit name, soft limit, bytes in use, bytes left)`` of each finite memory limit of the
    process (``RLIMIT_AS``: address space, ``RLIMIT_DATA``: data segment; usage from
    ``/proc/self/status``, 0 where it cannot be read). Empty without such limits (or without the
    ``resource`` module, e.g. on Windows)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return []
    out = []
    for name, field in _RESOURCE_LIMITS:
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            soft = resource.getrlimit(which)[0]
        except (OSError, ValueError):
            continue
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        used = _status_bytes(field) or 0
        out.append((name, int(soft), used, max(0, int(soft) - used)))
    return out


def _read_header(fh, what: str):
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise _BadModelFile(f"member {what}: unsupported .npy version {version}")
        return tuple(int(n) for n in shape), bool(fortran), np.dtype(dtype)
    except _BadModelFile:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError):
        raise
    except Exception as exc:  # numpy parses the header with ast.literal_eval: SyntaxError, TokenError, ...
        raise _BadModelFile(f"member {what} has a corrupt .npy header ({type(exc).__name__})") from None


#: bytes read from a zip member at a time: ``ZipExtFile.readinto`` reads (and decompresses) into a
#: temporary ``bytes`` of the requested size, so one unbounded read would need the array twice over
_READ_CHUNK = 16 << 20


def _read_exact(fh, nbytes: int, what: str) -> np.ndarray:
    """Exactly ``nbytes`` from ``fh`` into a new buffer, :data:`_READ_CHUNK` bytes at a time (the
    peak memory is the array plus one chunk); a short or overlong member is a :class:`_BadModelFile`."""
    buf = np.empty(nbytes, dtype=np.uint8)
    view = buf.data
    got = 0
    while got < nbytes:
        n = fh.readinto(view[got : got + _READ_CHUNK])
        if not n:
            raise _BadModelFile(f"member {what} is truncated ({got} of {nbytes} data bytes)")
        got += n
    if fh.read(1):
        raise _BadModelFile(f"member {what} has trailing data after its array")
    return buf


def _read_text_member(zf, info, what: str, max_bytes: int) -> str:
    if info.file_size > max_bytes:
        raise _BadModelFile(f"member {what} is too large ({info.file_size} bytes)")
    with zf.open(info) as fh:
        shape, fortran, dtype = _read_header(fh, what)
        if shape != () or dtype.kind != "U":
            raise _BadModelFile(f"member {what} must be a text scalar, got dtype {dtype} shape {shape}")
        if dtype.itemsize > info.file_size:  # checked before allocating what the header declares
            raise _BadModelFile(
                f"member {what} declares {dtype.itemsize:,} bytes of text but holds only {info.file_size:,}"
            )
        raw = _read_exact(fh, dtype.itemsize, what)
    return str(raw.view(dtype)[0])


def _read_array_member(zf, info, what, shape, dtype_str, ndims, dtypes) -> np.ndarray:
    with zf.open(info) as fh:
        fshape, fortran, dtype = _read_header(fh, what)
        if dtype.name not in dtypes or dtype.hasobject or dtype.fields is not None:
            raise _BadModelFile(f"array {what} has dtype {dtype}, expected {'/'.join(dtypes)}")
        if dtype_str is not None and np.dtype(dtype_str) != dtype:
            raise _BadModelFile(f"array {what} has dtype {dtype}, metadata says {dtype_str}")
        if len(fshape) not in ndims:
            raise _BadModelFile(f"array {what} has {len(fshape)} dimension(s), expected {'/'.join(map(str, ndims))}")
        if fshape != shape:
            raise _BadModelFile(f"array {what} has shape {fshape}, metadata says {shape}")
        nbytes = int(np.prod(fshape, dtype=object)) * dtype.itemsize
        if nbytes > info.file_size:
            raise _BadModelFile(f"array {what} claims shape {fshape} but its member holds only {info.file_size} bytes")
        raw = _read_exact(fh, nbytes, what)
    arr = raw.view(dtype)
    arr = arr.reshape(fshape[::-1]).T if fortran else arr.reshape(fshape)
    arr = _c_order(arr)
    flat = arr.reshape(-1)
    step = max(1, _READ_CHUNK // max(1, arr.itemsize))  # a chunk at a time: no array-sized temporary
    if not all(np.isfinite(flat[k : k + step]).all() for k in range(0, flat.size, step)):
        raise _BadModelFile(f"array {what} contains NaN or infinite values")
    return arr


def _json_depth(obj) -> int:
    depth, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        depth = max(depth, d)
        if depth > _MAX_JSON_DEPTH:
            break
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return depth


def _parse_meta(text: str) -> dict:
    try:
        meta = json.loads(text)
    except RecursionError:
        raise _BadModelFile(f"metadata is nested too deeply (more than {_MAX_JSON_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise _BadModelFile(f"metadata is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise _BadModelFile("not a privrec model file (format tag missing)")
    if _json_depth(meta) > _MAX_JSON_DEPTH:
        raise _BadModelFile(f"metadata is nested too deeply (more than {_MAX_JSON_DEPTH} levels)")
    return meta


def _scalar_param(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _check_params(params, target) -> dict:
    if not isinstance(params, dict):
        raise _BadModelFile(f"metadata 'params' must be an object, got {type(params).__name__}")
    known = set(target._get_param_names())
    for k, v in params.items():
        if k not in known:
            raise _BadModelFile(f"unknown parameter {k[:40]!r} for {target.__name__}")
        if not (_scalar_param(v) or (isinstance(v, list) and all(_scalar_param(x) for x in v))):
            raise _BadModelFile(f"parameter {k} must be a number, string, boolean, null or a list of those")
    return dict(params)


def _as_epsilon(value, what: str) -> float:
    if value in ("inf", "Infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise _BadModelFile(f"privacy report: {what} must be a non-negative number or 'inf', got {str(value)[:40]!r}")
    return float(value)


def _same_epsilon(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=_EPS_RTOL, abs_tol=1e-12)


def _verify_privacy_report(report, params: dict) -> None:
    """Recompute epsilon from the report's events; any disagreement means the file was edited."""
    from ..privacy.ledger import epsilon_from_report

    if not isinstance(report, dict):
        raise _BadModelFile("privacy report must be an object")
    events = report.get("events")
    if not isinstance(events, list) or not all(
        isinstance(e, dict) and isinstance(e.get("event"), dict) for e in events
    ):
        raise _BadModelFile("privacy report: 'events' must be a list of recorded events")
    delta = report.get("delta")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise _BadModelFile(f"privacy report: delta must be in (0, 1), got {str(delta)[:40]!r}")
    if isinstance(params.get("delta"), (int, float)) and not math.isclose(params["delta"], delta, rel_tol=_EPS_RTOL):
        raise _BadModelFile(f"privacy report delta {delta} differs from the model's delta {params['delta']}")
    if "epsilon_rdp" not in report:
        raise _BadModelFile("privacy report lacks epsilon_rdp")
    claimed = {"rdp": _as_epsilon(report["epsilon_rdp"], "epsilon_rdp")}
    if report.get("epsilon_pld") is not None:
        claimed["pld"] = _as_epsilon(report["epsilon_pld"], "epsilon_pld")
    accountant = report.get("accountant", "rdp")  # the accountant the noise was calibrated with
    if accountant not in ("rdp", "pld"):
        raise _BadModelFile(f"privacy report: unknown accountant {str(accountant)[:20]!r}")
    if accountant not in claimed:
        raise _BadModelFile(f"privacy report lacks epsilon_{accountant}, the value of its accountant")
    if "epsilon" in report and not _same_epsilon(_as_epsilon(report["epsilon"], "epsilon"), claimed[accountant]):
        raise _BadModelFile(f"privacy report: epsilon differs from epsilon_{accountant}")
    target_eps = params.get("epsilon", report.get("target_epsilon"))
    if (
        "target_epsilon" in report
        and "epsilon" in params
        and not _same_epsilon(
            _as_epsilon(report["target_epsilon"], "target_epsilon"),
            _as_epsilon(params["epsilon"], "the epsilon parameter"),
        )
    ):
        raise _BadModelFile("privacy report: target_epsilon differs from the model's epsilon parameter")
    private = target_eps is not None and not math.isinf(_as_epsilon(target_eps, "target epsilon"))
    if private and not events and not math.isinf(claimed["rdp"]):
        raise _BadModelFile("privacy report of a private model records no events (epsilon cannot be recomputed)")
    for accountant, value in claimed.items():
        try:
            actual = epsilon_from_report(report, accountant)
        except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
            raise _BadModelFile(
                f"privacy report events are malformed ({type(exc).__name__}: {_one_line(exc)[:200]})"
            ) from None
        if not _same_epsilon(actual, value):
            raise _BadModelFile(
                f"privacy report claims epsilon_{accountant} = {value:g} but its recorded events "
                f"give {actual:g}: the report was edited"
            )
