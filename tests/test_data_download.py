"""Downloads against a local http.server on 127.0.0.1 (no other network access)."""

import hashlib
import http.server
import io
import os
import threading
import time
import warnings
import zipfile
from pathlib import Path

import pytest

import privrec.data.download as download_mod
from privrec.cli import main
from privrec.data.download import SOURCES, DownloadError, Source, default_data_root, download_dataset
from privrec.data.registry import load_dataset


def _zip_bytes(members: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


GOOD = _zip_bytes({"ml-100k/u.data": "1\t2\t3\t4\n2\t2\t5\t6\n", "ml-100k/README": "tiny"})


def _corrupt_deflate() -> bytes:
    """A zip whose u.data deflate stream starts with an invalid block type (zlib.error on read)."""
    data = bytearray(_zip_bytes({"ml-100k/u.data": "1\t2\t3\t4\n" * 2000}))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("ml-100k/u.data")
    start = info.header_offset + 30 + len(info.filename.encode())
    data[start] = 0x07  # BFINAL=1, BTYPE=11 (reserved): "invalid block type"
    return bytes(data)


def _duplicate_members() -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns "Duplicate name"
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("ml-100k/u.data", "1\t2\t3\t4\n")
            zf.writestr("ml-100k/u.data", "9\t9\t1\t4\n")
    return buf.getvalue()


STATIC = {
    "/good.zip": GOOD,
    "/good2.zip": _zip_bytes({"ml-100k/u.data": "7\t8\t4\t1\n", "ml-100k/u.item": "", "__MACOSX/junk": "x"}),
    "/bomb.zip": _zip_bytes({"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/zeros": "\0" * (5 << 20)}),
    "/corrupt.zip": _corrupt_deflate(),
    "/dupe.zip": _duplicate_members(),
    "/filedir.zip": _zip_bytes(
        {"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/extra": "a file", "ml-100k/extra/inside": "and a folder"}
    ),
    "/evil.zip": _zip_bytes({"ml-100k/u.data": "1\t2\t3\t4\n", "ml-100k/../../evil.txt": "x"}),
}


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        if self.path in STATIC:
            body = STATIC[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/trickle.zip":  # one byte every 50 ms, 100 bytes at most (bounded)
            self.send_response(200)
            self.send_header("Content-Length", str(len(GOOD)))
            self.end_headers()
            try:
                for b in GOOD[:100]:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:  # the client gave up
                pass
            self.close_connection = True
        elif self.path == "/short.zip":  # claims more bytes than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(len(GOOD) + 5000))
            self.end_headers()
            self.wfile.write(GOOD[: len(GOOD) // 2])
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/notzip.zip":
            body = b"this is not an archive"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _leftovers(root: Path):
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_successful_download_and_extract(server, tmp_path):
    sha = hashlib.sha256(GOOD).hexdigest()
    folder = download_dataset("ml-100k", tmp_path, url=f"{server}/good.zip", sha256=sha)
    assert folder == tmp_path / "ml-100k"
    assert (folder / "u.data").read_text().startswith("1\t2\t3\t4")
    assert _leftovers(tmp_path) == ["ml-100k"]  # no temporary files remain
    # already present: no second fetch (a bad URL would otherwise fail)
    assert download_dataset("ml-100k", tmp_path, url=f"{server}/missing.zip") == folder


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    with pytest.raises(DownloadError, match="checksum mismatch"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/good.zip", sha256="0" * 64)
    assert _leftovers(tmp_path) == []


def test_interrupted_transfer_leaves_nothing(server, tmp_path):
    with pytest.raises(DownloadError, match="interrupted"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/short.zip", timeout=10)
    assert _leftovers(tmp_path) == []


def test_not_a_zip_and_http_errors(server, tmp_path):
    with pytest.raises(DownloadError, match="not a valid zip"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/notzip.zip")
    with pytest.raises(DownloadError, match="could not download"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/missing.zip")
    assert _leftovers(tmp_path) == []


def test_archive_without_expected_file(server, tmp_path):
    # the Last.fm archive has its files at the root: the test zip has them under ml-100k/
    with pytest.raises(DownloadError, match="does not contain"):
        download_dataset("lastfm-2k", tmp_path, url=f"{server}/good.zip")
    assert _leftovers(tmp_path) == []


def test_registry_and_defaults(monkeypatch, tmp_path):
    assert all(
        s.url.startswith(("https://files.grouplens.org/", "http://millionsongdataset.com/")) for s in SOURCES.values()
    )
    with pytest.raises(ValueError, match="no download source"):
        download_dataset("synthetic-skew", tmp_path)
    monkeypatch.setenv("PRIVREC_DATA", str(tmp_path))
    assert default_data_root() == tmp_path
    monkeypatch.delenv("PRIVREC_DATA")
    assert default_data_root() == Path("datasets")


# ---------------------------------------------------------------- issue: data loss, limits, leftovers


def _user_folder(root: Path) -> Path:
    folder = root / "ml-100k"
    (folder / "sub").mkdir(parents=True)
    (folder / "my_notes.txt").write_text("precious")
    (folder / "sub" / "results.csv").write_text("a,b\n")
    return folder


def _user_files_intact(folder: Path) -> None:
    assert (folder / "my_notes.txt").read_text() == "precious"
    assert (folder / "sub" / "results.csv").read_text() == "a,b\n"


def test_force_redownload_keeps_the_users_other_files(server, tmp_path):
    folder = _user_folder(tmp_path)
    (folder / "u.data").write_text("1\t1\t1\t1\n")
    out = download_dataset("ml-100k", tmp_path, url=f"{server}/good2.zip", force=True)
    assert out == folder
    _user_files_intact(folder)
    assert (folder / "u.data").read_text() == "7\t8\t4\t1\n"  # the dataset's own file is refreshed
    assert (folder / "u.item").is_file() and not (tmp_path / "__MACOSX").exists()
    assert _leftovers(tmp_path) == ["ml-100k"]


def test_load_dataset_download_into_existing_folder_keeps_files(server, tmp_path, monkeypatch):
    folder = _user_folder(tmp_path)  # the folder exists but lacks u.data
    monkeypatch.setitem(download_mod.SOURCES, "ml-100k", Source(f"{server}/good.zip", "ml-100k", "u.data", "ml-100k"))
    x = load_dataset("ml-100k", data_dir=tmp_path, download=True, cache_dir=tmp_path / "cache")
    assert x.nnz == 2
    _user_files_intact(folder)


def test_cli_prepare_download_keeps_files(server, tmp_path, monkeypatch, capsys):
    folder = _user_folder(tmp_path)
    monkeypatch.setitem(download_mod.SOURCES, "ml-100k", Source(f"{server}/good.zip", "ml-100k", "u.data", "ml-100k"))
    rc = main(
        [
            "datasets",
            "prepare",
            "ml-100k",
            "--download",
            "--data-dir",
            str(tmp_path),
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    _user_files_intact(folder)
    assert (folder / "u.data").is_file()


def test_failed_download_leaves_existing_folder_untouched(server, tmp_path):
    folder = _user_folder(tmp_path)
    (folder / "u.data").write_text("old")
    with pytest.raises(DownloadError):
        download_dataset("ml-100k", tmp_path, url=f"{server}/corrupt.zip", force=True)
    _user_files_intact(folder)
    assert (folder / "u.data").read_text() == "old"
    assert _leftovers(tmp_path) == ["ml-100k"]


def test_trickling_server_is_cut_off_by_the_low_speed_limit(server, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match="too slow"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/trickle.zip", timeout=1)
    assert time.monotonic() - t0 < 4.5  # the server would trickle for 5 s
    assert _leftovers(tmp_path) == []


def test_overall_deadline(server, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match="deadline"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/trickle.zip", timeout=3, deadline=0.3, min_rate=0)
    assert time.monotonic() - t0 < 4.5
    assert _leftovers(tmp_path) == []


def test_zip_bomb_ratio_and_size_limits(server, tmp_path):
    with pytest.raises(DownloadError, match="zip bomb"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/bomb.zip")
    with pytest.raises(DownloadError, match="limit"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/good.zip", max_bytes=10)
    assert _leftovers(tmp_path) == []


def test_corrupt_deflate_data_is_a_clear_error(server, tmp_path):
    with pytest.raises(DownloadError, match="corrupt"):
        download_dataset("ml-100k", tmp_path, url=f"{server}/corrupt.zip")
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("path", ["/dupe.zip", "/filedir.zip"])
def test_conflicting_members_are_rejected(server, tmp_path, path):
    with pytest.raises(DownloadError, match="conflicting"):
        download_dataset("ml-100k", tmp_path, url=f"{server}{path}")
    assert _leftovers(tmp_path) == []


def test_member_escaping_the_folder_is_rejected(server, tmp_path):
    with pytest.raises(DownloadError, match="outside"):
        download_dataset("ml-100k", tmp_path / "root", url=f"{server}/evil.zip")
    assert not (tmp_path / "evil.txt").exists()


def test_stale_privrec_temp_files_are_cleaned_on_the_next_run(server, tmp_path):
    old = time.time() - 2 * 86400
    stale_zip = tmp_path / ".privrec-ml-100k.k2j3h4.zip.partial"
    stale_dir = tmp_path / ".privrec-ml-100k.a8s7d6.extract"
    legacy = tmp_path / ".ml-100k.qwerty.zip.partial"  # name used by earlier privrec versions
    fresh = tmp_path / ".privrec-ml-1m.zzz.zip.partial"  # may belong to a download still running
    foreign = tmp_path / "holiday.partial"  # not ours
    stale_zip.write_bytes(b"x" * 100)
    (stale_dir / "ml-100k").mkdir(parents=True)
    (stale_dir / "ml-100k" / "u.data").write_text("x")
    legacy.write_bytes(b"x")
    fresh.write_bytes(b"x")
    foreign.write_bytes(b"x")
    for p in (stale_zip, stale_dir, legacy, foreign):
        os.utime(p, (old, old))
    download_dataset("ml-100k", tmp_path, url=f"{server}/good.zip")
    assert not stale_zip.exists() and not stale_dir.exists() and not legacy.exists()
    assert fresh.exists() and foreign.exists()
    assert sorted(_leftovers(tmp_path)) == sorted([fresh.name, foreign.name, "ml-100k"])


def test_bad_download_arguments(tmp_path):
    for kwargs, needle in [
        ({"timeout": 0}, "timeout"),
        ({"deadline": -1}, "deadline"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"min_rate": -1}, "min_rate"),
    ]:
        with pytest.raises(ValueError, match=needle):
            download_dataset("ml-100k", tmp_path, url="http://127.0.0.1:9/x.zip", **kwargs)
    assert _leftovers(tmp_path) == []
