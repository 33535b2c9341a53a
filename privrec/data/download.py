"""Download and extract the public benchmark datasets (spec 004 §7) on users' machines.

Only the official URLs below are ever contacted, and only when a user asks for it
(``privrec datasets prepare NAME --download`` / ``load_dataset(..., download=True)``). A download
streams to a temporary file beside the cache (hashing as it goes), checks the byte count against
``Content-Length``, the SHA-256 when one is known, and the zip's own CRCs, extracts into a temporary
folder and only then renames the result into place. Any failure removes the temporary files, so
the cache never holds a truncated archive or a half-extracted folder.

Checksums: we record a SHA-256 only where we know it for certain. For the archives below we do
not, so ``sha256`` is ``None`` and integrity rests on the exact ``Content-Length`` byte count plus
the CRC-32 of every zip member (``zipfile.testzip``) and the presence of the expected data file.
A caller who knows a digest can pass ``sha256=`` and it is enforced.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path


class DownloadError(ValueError):
    """A download failed (network error, truncated transfer, checksum or archive mismatch)."""


@dataclass(frozen=True)
class Source:
    url: str
    folder: str           # folder the data ends up in, under the data root
    main_file: str        # file that must exist inside ``folder`` after extraction
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
    "ml-latest-small": Source(f"{_GL}/movielens/ml-latest-small.zip", "ml-latest-small", "ratings.csv",
                              "ml-latest-small"),
    "lastfm-2k": Source(f"{_GL}/hetrec2011/hetrec2011-lastfm-2k.zip", "hetrec2011-lastfm-2k", "user_artists.dat",
                        None),
    "msd": Source("http://millionsongdataset.com/sites/default/files/challenge/train_triplets.txt.zip",
                  "msd-taste-profile", "train_triplets.txt", None),
}


def default_data_root() -> Path:
    """``$PRIVREC_DATA`` if set, else ``./datasets`` (relative to the working directory)."""
    env = os.environ.get("PRIVREC_DATA")
    return Path(env) if env else Path("datasets")


def _stream(url: str, dest, timeout: float, chunk: int = 1 << 20) -> tuple[int, str]:
    """Copy ``url`` into the open binary file ``dest``; return (bytes, sha256 hex)."""
    digest = hashlib.sha256()
    n = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - fixed official URLs / caller's
            expected = resp.headers.get("Content-Length")
            while True:
                try:
                    block = resp.read(chunk)
                except http.client.IncompleteRead as exc:
                    raise DownloadError(f"transfer from {url} was interrupted after {n + len(exc.partial)} bytes "
                                        f"(expected {expected})") from None
                if not block:
                    break
                dest.write(block)
                digest.update(block)
                n += len(block)
    except DownloadError:
        raise
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise DownloadError(f"could not download {url}: {exc}") from None
    if expected is not None and int(expected) != n:
        raise DownloadError(f"transfer from {url} was interrupted: got {n} of {expected} bytes")
    return n, digest.hexdigest()


def _safe_extract(zf: zipfile.ZipFile, target: Path) -> None:
    root = target.resolve()
    for member in zf.namelist():
        out = (target / member).resolve()
        if root != out and root not in out.parents:
            raise DownloadError(f"archive member {member!r} would be written outside {target}")
    zf.extractall(target)


def download_dataset(name: str, data_root=None, *, url: str | None = None, sha256: str | None = None,
                     timeout: float = 60.0, force: bool = False) -> Path:
    """Download and extract dataset ``name`` under ``data_root``; return its folder.

    ``url`` / ``sha256`` override the registry (mirrors, tests). Nothing is fetched when the
    expected file is already there (unless ``force``).
    """
    if name not in SOURCES:
        raise ValueError(f"no download source for {name!r}; downloadable: {sorted(SOURCES)}")
    src = SOURCES[name]
    url = url or src.url
    sha256 = (sha256 or src.sha256 or "").lower() or None
    root = Path(data_root) if data_root is not None else default_data_root()
    final = root / src.folder
    if (final / src.main_file).is_file() and not force:
        return final
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp_zip = tempfile.mkstemp(prefix=f".{name}.", suffix=".zip.partial", dir=root)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".extract", dir=root))
    try:
        with os.fdopen(fd, "wb") as fh:
            _, digest = _stream(url, fh, timeout)
        if sha256 is not None and digest != sha256:
            raise DownloadError(f"checksum mismatch for {url}: sha256 {digest}, expected {sha256}")
        try:
            with zipfile.ZipFile(tmp_zip) as zf:
                bad = zf.testzip()
                if bad is not None:
                    raise DownloadError(f"archive from {url} is corrupt (bad CRC in {bad!r})")
                _safe_extract(zf, tmp_dir)
        except zipfile.BadZipFile as exc:
            raise DownloadError(f"archive from {url} is not a valid zip file ({exc})") from None
        extracted = tmp_dir / src.zip_folder if src.zip_folder else tmp_dir
        if not (extracted / src.main_file).is_file():
            raise DownloadError(f"archive from {url} does not contain {src.zip_folder or '.'}/{src.main_file}")
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".old", dir=root))
            os.replace(final, old / "x")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(extracted, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_zip)
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return final
