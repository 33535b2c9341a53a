"""Downloads against a local http.server on 127.0.0.1 (no other network access)."""

import hashlib
import http.server
import io
import threading
import zipfile
from pathlib import Path

import pytest

from privrec.data.download import SOURCES, DownloadError, default_data_root, download_dataset


def _zip_bytes(members: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


GOOD = _zip_bytes({"ml-100k/u.data": "1\t2\t3\t4\n2\t2\t5\t6\n", "ml-100k/README": "tiny"})


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        if self.path == "/good.zip":
            body = GOOD
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
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
    assert all(s.url.startswith(("https://files.grouplens.org/", "http://millionsongdataset.com/"))
               for s in SOURCES.values())
    with pytest.raises(ValueError, match="no download source"):
        download_dataset("synthetic-skew", tmp_path)
    monkeypatch.setenv("PRIVREC_DATA", str(tmp_path))
    assert default_data_root() == tmp_path
    monkeypatch.delenv("PRIVREC_DATA")
    assert default_data_root() == Path("datasets")
