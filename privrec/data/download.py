"""Download and extract the public benchmark datasets (Krichene et al., ICML 2023, App. D) on users' machines.

Only the official URLs below are ever contacted, and only when a user asks for it
(``privrec datasets prepare NAME --download`` / ``load_dataset(..., download=True)``).

How a download proceeds, and what it guarantees:

* The archive streams to ``<data root>/.privrec-<name>.<random>.partial`` (hashing as it goes),
  under a per-read ``timeout``, an overall ``deadline`` and a low-speed limit (less than
  ``min_rate`` bytes/s over any ``timeout``-second window aborts: a server trickling a byte every
  half second can no longer hold a download for ever). The byte count must match
  ``Content-Length``, and the SHA-256 when one is known.
* The zip is checked before anything is written: member names (no absolute paths, ``..``,
  drive letters, links, duplicate or conflicting names such as a file and a folder of the same
  name), the declared total size (``max_bytes``) and compression ratio (``max_ratio``), then it
  is extracted into a fresh ``<data root>/.privrec-<name>.<random>.extract`` folder while the
  bytes actually written are counted against the same limits. Corrupt data (bad CRC, broken
  deflate stream) is a :class:`DownloadError`.
* Only then are the dataset's own files moved into ``<data root>/<folder>``, one by one (the
  main data file last). **Nothing else in that folder is touched**: other files a user keeps
  there survive a re-download (``force=True``), and nothing is ever deleted that the download did
  not create. Any failure removes the temporary files; a killed process leaves them behind, and
  the next download into the same data root removes them once that process is gone (their names
  record it: :mod:`privrec._io`) or once they are a day old.

Checksums: we record a SHA-256 only where we know it for certain. For the archives below we do
not, so ``sha256`` is ``None`` and integrity rests on the exact ``Content-Length`` byte count plus
the CRC-32 of every zip member and the presence of the expected data file. A caller who knows a
digest can pass ``sha256=`` and it is enforced.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import stat
import struct
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from privrec._io import clean_stale_temp, make_temp_dir, make_temp_file, remove_path


class DownloadError(ValueError):
    """A download failed (network error, truncated transfer, checksum or archive mismatch)."""


@dataclass(frozen=True)
class Source:
    url: str
    folder: str  # folder the data ends up in, under the data root
    main_file: str  # file that must exist inside ``folder`` after extraction
    zip_folder: str | None  # top-level folder inside the zip (None: members at the root)
    sha256: str | None = None  # None: not known for certain (see module docstring)


_GL = "https://files.grouplens.org/datasets"
SOURCES: dict[str, Source] = {
    "ml-100k": Source(f"{_GL}/movielens/ml-100k.zip", "ml-100k", "u.data", "ml-100k"),
    "ml-1m": Source(f"{_GL}/movielens/ml-1m.zip", "ml-1m", "ratings.dat", "ml-1m"),
    "ml-10m": Source(f"{_GL}/movielens/ml-10m.zip", "ml-10M100K", "ratings.dat", "ml-10M100K"),
    "ml-20m": Source(f"{_GL}/movielens/ml-20m.zip", "ml-20m", "ratings.csv", "ml-20m"),
    "ml-25m": Source(f"{_GL}/movielens/ml-25m.zip", "ml-25m", "ratings.csv", "ml-25m"),
    "ml-latest": Source(f"{_GL}/movielens/ml-latest.zip", "ml-latest", "ratings.csv", "ml-latest"),
    "ml-latest-small": Source(
        f"{_GL}/movielens/ml-latest-small.zip", "ml-latest-small", "ratings.csv", "ml-latest-small"
    ),
    "lastfm-2k": Source(f"{_GL}/hetrec2011/hetrec2011-lastfm-2k.zip", "hetrec2011-lastfm-2k", "user_artists.dat", None),
    "msd": Source(
        "http://millionsongdataset.com/sites/default/files/challenge/train_triplets.txt.zip",
        "msd-taste-profile",
        "train_triplets.txt",
        None,
    ),
}

#: Default limits (the largest official archive, MSD, unpacks to about 3 GB; text compresses < 20:1).
DEFAULT_DEADLINE = 6 * 3600.0  # seconds for the whole transfer
DEFAULT_MIN_RATE = 1024  # bytes/s, averaged over each ``timeout``-second window
DEFAULT_MAX_BYTES = 16 << 30  # total uncompressed size of the archive
DEFAULT_MAX_RATIO = 200  # uncompressed / compressed size, per member and overall

# temporary names written by privrec < 0.2 (".ml-100k.abc123.zip.partial", ".ml-100k.abc123.extract",
# ".ml-100k.abc123.old"), also removed once stale
_LEGACY_TEMP = re.compile(r"^\.({})\..+\.(zip\.partial|extract|old)$".format("|".join(re.escape(n) for n in SOURCES)))


def default_data_root() -> Path:
    """``$PRIVREC_DATA`` if set, else ``./datasets`` (relative to the working directory)."""
    env = os.environ.get("PRIVREC_DATA")
    return Path(env).expanduser() if env else Path("datasets")


def _stream(url: str, dest, timeout: float, deadline: float, min_rate: float, chunk: int = 1 << 16) -> tuple[int, str]:
    """Copy ``url`` into the open binary file ``dest``; return (bytes, sha256 hex).

    ``timeout``: seconds any single connect / read may wait. ``deadline``: seconds for the whole
    transfer. ``min_rate``: bytes/s that each ``timeout``-second window must reach on average.
    """
    digest = hashlib.sha256()
    n = 0
    start = time.monotonic()
    window_start, window_bytes = start, 0
    expected = None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            expected = resp.headers.get("Content-Length")
            read = getattr(resp, "read1", resp.read)  # read1: returns what one recv() brings, never waits to fill
            while True:
                try:
                    block = read(chunk)
                except http.client.IncompleteRead as exc:
                    raise DownloadError(
                        f"transfer from {url} was interrupted after {n + len(exc.partial)} bytes (expected {expected})"
                    ) from None
                if not block:
                    break
                dest.write(block)
                digest.update(block)
                n += len(block)
                window_bytes += len(block)
                now = time.monotonic()
                if now - start > deadline:
                    raise DownloadError(
                        f"download from {url} exceeded its deadline of {deadline:g} s ({n} bytes received)"
                    )
                if now - window_start >= timeout:
                    rate = window_bytes / (now - window_start)
                    if rate < min_rate:
                        raise DownloadError(
                            f"download from {url} is too slow ({rate:.0f} bytes/s over the last "
                            f"{now - window_start:.0f} s, minimum {min_rate:g}); giving up"
                        )
                    window_start, window_bytes = now, 0
    except DownloadError:
        raise
    except TimeoutError:
        raise DownloadError(f"could not download {url}: no data for {timeout:g} s (timeout)") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        raise DownloadError(f"could not download {url}: {exc}") from None
    if expected is not None:
        try:
            complete = int(expected) == n
        except ValueError:
            complete = True  # a malformed header: the zip's own checks decide
        if not complete:
            raise DownloadError(f"transfer from {url} was interrupted: got {n} of {expected} bytes")
    return n, digest.hexdigest()


def _member_parts(info: zipfile.ZipInfo, url: str) -> tuple[str, ...] | None:
    """Normalised relative path of a member (``None`` for folder entries); rejects unsafe names."""
    name = info.filename
    if not name:
        raise DownloadError(f"archive from {url} has a member with an empty name")
    if "\\" in name or "\x00" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise DownloadError(f"archive from {url} has an unsafe member name {name!r}")
    parts = tuple(p for p in PurePosixPath(name).parts if p not in ("", "."))
    if any(p == ".." for p in parts):
        raise DownloadError(f"archive member {name!r} would be written outside the dataset folder")
    mode = (info.external_attr >> 16) & 0o170000
    if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise DownloadError(f"archive from {url} has a link or special file {name!r}")
    if info.is_dir() or not parts:
        return None
    return parts


def _plan_extraction(
    zf: zipfile.ZipFile, url: str, compressed_size: int, max_bytes: int, max_ratio: float
) -> list[tuple[zipfile.ZipInfo, tuple[str, ...]]]:
    """Check every member (names, conflicts, sizes, ratios) before writing anything."""
    files: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
    seen: dict[str, str] = {}
    dirs: set[str] = set()
    total = 0
    for info in zf.infolist():
        if info.flag_bits & 0x1:
            raise DownloadError(f"archive from {url} has an encrypted member {info.filename!r}")
        parts = _member_parts(info, url)
        if parts is None:
            continue
        key = "/".join(parts).casefold()
        if key in seen:
            raise DownloadError(
                f"archive from {url} has conflicting members {seen[key]!r} and {info.filename!r} (the same file twice)"
            )
        seen[key] = info.filename
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]).casefold())
        total += info.file_size
        if info.file_size > max_ratio * max(info.compress_size, 1) and info.file_size > (1 << 20):
            raise DownloadError(
                f"archive member {info.filename!r} from {url} expands {info.file_size} bytes from "
                f"{info.compress_size} (ratio above {max_ratio:g}): refusing a possible zip bomb"
            )
        files.append((info, parts))
    clash = sorted(set(seen) & dirs)
    if clash:
        raise DownloadError(
            f"archive from {url} has conflicting members: {seen[clash[0]]!r} is both a file and a folder"
        )
    if total > max_bytes:
        raise DownloadError(f"archive from {url} would expand to {total} bytes, more than the limit of {max_bytes}")
    if total > max_ratio * max(compressed_size, 1) and total > (1 << 20):
        raise DownloadError(
            f"archive from {url} would expand {compressed_size} bytes to {total} (ratio above "
            f"{max_ratio:g}): refusing a possible zip bomb"
        )
    return files


def _extract(zf: zipfile.ZipFile, files, target: Path, url: str, max_bytes: int) -> None:
    """Extract the planned members, counting the bytes really written (sizes in headers can lie)."""
    written = 0
    for info, parts in files:
        out = target.joinpath(*parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        left = info.file_size
        try:
            src = zf.open(info)
        except OSError as exc:  # a header offset outside the file: corrupt archive
            raise DownloadError(f"archive from {url} is corrupt (member {info.filename!r}: {exc})") from None
        with src, open(out, "xb") as dst:
            while True:
                try:
                    block = src.read(1 << 20)
                except OSError as exc:  # reading the archive (not writing the output): corrupt data
                    raise DownloadError(f"archive from {url} is corrupt (member {info.filename!r}: {exc})") from None
                if not block:
                    break
                left -= len(block)
                written += len(block)
                if left < 0 or written > max_bytes:
                    raise DownloadError(
                        f"archive member {info.filename!r} from {url} holds more data than its "
                        f"header declares: refusing a possible zip bomb"
                    )
                dst.write(block)


def _move_into_place(extracted: Path, final: Path, main_file: str) -> None:
    """Move every extracted file to the same relative path under ``final`` (main data file last).

    A file of the dataset already at that path is replaced (it is the dataset's own file being
    refreshed); nothing else under ``final`` is touched.
    """
    files = sorted(
        (p for p in extracted.rglob("*") if p.is_file() and not p.is_symlink()),
        key=lambda p: (p.relative_to(extracted).as_posix() == main_file, p.as_posix()),
    )
    for src in files:
        rel = src.relative_to(extracted)
        dest = final / rel
        for parent in reversed(rel.parents[:-1]):
            d = final / parent
            if d.exists() and not d.is_dir():
                raise DownloadError(
                    f"cannot place the dataset file {rel}: {d} exists and is not a folder (left untouched)"
                )
        if dest.is_dir() and not dest.is_symlink():
            raise DownloadError(f"cannot place the dataset file {rel}: {dest} is a folder (left untouched)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)


def download_dataset(
    name: str,
    data_root=None,
    *,
    url: str | None = None,
    sha256: str | None = None,
    timeout: float = 60.0,
    force: bool = False,
    deadline: float = DEFAULT_DEADLINE,
    min_rate: float = DEFAULT_MIN_RATE,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_ratio: float = DEFAULT_MAX_RATIO,
) -> Path:
    """Download and extract dataset ``name`` under ``data_root``; return its folder.

    ``url`` / ``sha256`` override the registry (mirrors, tests). Nothing is fetched when the
    expected file is already there (unless ``force``). ``timeout`` bounds each network wait,
    ``deadline`` the whole transfer (seconds), ``min_rate`` the average bytes/s over each
    ``timeout``-second window; ``max_bytes`` / ``max_ratio`` bound the extracted size. Files other
    than the dataset's own in the target folder are never modified or deleted (see module docstring).
    """
    if not isinstance(name, str) or name not in SOURCES:
        raise ValueError(f"no download source for {name!r}; downloadable: {sorted(SOURCES)}")
    for label, value in (("timeout", timeout), ("deadline", deadline), ("max_ratio", max_ratio)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(
                f"{label} must be a positive number of seconds, got {value!r}"
                if label != "max_ratio"
                else f"max_ratio must be > 0, got {value!r}"
            )
    if timeout == float("inf"):
        raise ValueError("timeout must be finite")
    if isinstance(min_rate, bool) or not isinstance(min_rate, (int, float)) or min_rate < 0:
        raise ValueError(f"min_rate must be a number >= 0, got {min_rate!r}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive integer, got {max_bytes!r}")
    src = SOURCES[name]
    url = url or src.url
    if sha256 is not None and not isinstance(sha256, str):
        raise ValueError(f"sha256 must be a hex string, got {type(sha256).__name__}")
    sha256 = (sha256 or src.sha256 or "").lower() or None
    if data_root is not None and not isinstance(data_root, (str, os.PathLike)):
        raise ValueError(f"data_root must be a path (str or os.PathLike), got {type(data_root).__name__}")
    if not isinstance(url, str):
        raise ValueError(f"url must be a string, got {type(url).__name__}")
    root = Path(data_root).expanduser() if data_root is not None else default_data_root()
    final = root / src.folder
    if (final / src.main_file).is_file() and not force:
        return final
    if final.exists() and not final.is_dir():
        raise DownloadError(f"cannot download {name}: {final} exists and is not a folder (left untouched)")
    root.mkdir(parents=True, exist_ok=True)
    clean_stale_temp(root, extra=_LEGACY_TEMP)
    tmp_zip = make_temp_file(root, name, ".partial", suffix=".zip")
    tmp_dir = make_temp_dir(root, name, ".extract")
    try:
        with open(tmp_zip, "wb") as fh:
            size, digest = _stream(url, fh, float(timeout), float(deadline), float(min_rate))
        if sha256 is not None and digest != sha256:
            raise DownloadError(f"checksum mismatch for {url}: sha256 {digest}, expected {sha256}")
        try:
            try:
                zf = zipfile.ZipFile(tmp_zip)
            except OSError as exc:  # e.g. EINVAL: a central directory pointing before the file start
                raise zipfile.BadZipFile(str(exc)) from None
            with zf:
                files = _plan_extraction(zf, url, size, max_bytes, float(max_ratio))
                _extract(zf, files, tmp_dir, url, max_bytes)
        except zipfile.BadZipFile as exc:
            raise DownloadError(f"archive from {url} is not a valid zip file or is corrupt ({exc})") from None
        except (zlib.error, EOFError, IndexError, KeyError, OverflowError, struct.error) as exc:
            raise DownloadError(f"archive from {url} is corrupt ({type(exc).__name__}: {exc})") from None
        except (NotImplementedError, RuntimeError) as exc:
            raise DownloadError(f"archive from {url} cannot be extracted ({exc})") from None
        except FileExistsError as exc:
            raise DownloadError(f"archive from {url} has conflicting members ({exc.filename})") from None
        extracted = tmp_dir / src.zip_folder if src.zip_folder else tmp_dir
        if not (extracted / src.main_file).is_file():
            raise DownloadError(f"archive from {url} does not contain {src.zip_folder or '.'}/{src.main_file}")
        final.mkdir(parents=True, exist_ok=True)
        _move_into_place(extracted, final, src.main_file)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_zip)
        remove_path(tmp_dir)
    return final


__all__ = ["DownloadError", "Source", "SOURCES", "default_data_root", "download_dataset"]
