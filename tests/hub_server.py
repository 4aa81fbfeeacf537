"""A small threaded HTTP server that answers like the Hugging Face and ModelScope file APIs for one folder.

Hugging Face:  GET /api/models/{owner}/{name}/revision/{rev}   (siblings with size and lfs.sha256)
               GET /{owner}/{name}/resolve/{rev}/{path}        (Range honoured)
ModelScope:    GET /api/v1/models/{owner}/{name}/repo/files?Revision=&Recursive=true
               GET /api/v1/models/{owner}/{name}/repo?Revision=&FilePath=   (302 to a blob, Range honoured)

`cut_after`: the next transfer longer than that stops after that many bytes (a dropped connection).
"""

from __future__ import annotations

import hashlib
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from tests.serving_thread import serving_thread

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_SUFFIXES = (".safetensors",)


class HubServer:
    def __init__(self, folder: Path, repo_id: str):
        self.folder, self.repo_id = folder, repo_id
        self.cut_after: int | None = None
        self.ranges_seen: list[str] = []
        self.corrupt: set[str] = set()
        handler = type("Handler", (_Handler,), {"hub": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = serving_thread(self.server)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def files(self) -> list[Path]:
        return sorted(p for p in self.folder.rglob("*") if p.is_file())

    def relative(self, path: Path) -> str:
        return path.relative_to(self.folder).as_posix()


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer

    def log_message(self, *args):
        pass

    def do_GET(self):
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        repo = re.escape(self.hub.repo_id)
        path = unquote(url.path)
        if re.fullmatch(rf"/api/models/{repo}/revision/[^/]+", path):
            return self._json(self._hf_info())
        if m := re.fullmatch(rf"/{repo}/resolve/[^/]+/(.+)", path):
            return self._file(m.group(1))
        if re.fullmatch(rf"/api/v1/models/{repo}/repo/files", path):
            return self._json(self._modelscope_files())
        if re.fullmatch(rf"/api/v1/models/{repo}/repo", path) and "FilePath" in query:
            self.send_response(302)
            self.send_header("Location", f"/blobs/{query['FilePath']}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if m := re.fullmatch(r"/blobs/(.+)", path):
            return self._file(m.group(1))
        self._json({"error": f"no route for {path}"}, status=404)
        return None

    def _hf_info(self):
        siblings = []
        for file in self.hub.files():
            entry = {"rfilename": self.hub.relative(file), "size": file.stat().st_size, "blobId": "0" * 40}
            if file.name.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"sha256": _sha256(file), "size": file.stat().st_size, "pointerSize": 134}
            siblings.append(entry)
        return {"id": self.hub.repo_id, "modelId": self.hub.repo_id, "sha": COMMIT, "siblings": siblings}

    def _modelscope_files(self):
        files = [
            {
                "Path": self.hub.relative(f),
                "Name": f.name,
                "Size": f.stat().st_size,
                "Type": "blob",
                "Sha256": _sha256(f),
                "IsLFS": f.name.endswith(LFS_SUFFIXES),
            }
            for f in self.hub.files()
        ]
        return {"Code": 200, "Success": True, "Data": {"Files": files}}

    def _file(self, relative: str):
        file = self.hub.folder / relative
        if not file.is_file():
            return self._json({"error": "not found"}, status=404)
        data = file.read_bytes()
        if relative in self.hub.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        if header := self.headers.get("Range"):
            self.hub.ranges_seen.append(f"{relative} {header}")
            start = int(re.fullmatch(r"bytes=(\d+)-", header).group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        cut = self.hub.cut_after
        if cut is not None and cut < len(body):
            self.hub.cut_after = None
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return None
        self.wfile.write(body)
        return None

    def _json(self, data, status=200):
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
