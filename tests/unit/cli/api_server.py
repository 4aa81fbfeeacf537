"""A local HTTP server that answers as the panel's API documents (docs/cli.md, the issue 13 contract), for
the CLI's unit tests of exit codes and of what it sends. Each route answers from a script of responses,
in order, the last one repeating; every request is recorded. The real panel is tests/e2e/test_cli*.
"""

import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.serving_thread import serving_thread


@dataclass
class Answer:
    status: int = 200
    body: object = None
    content_type: str = "application/json"
    # (event, data) or (event, data, id) for a text/event-stream answer
    events: list = field(default_factory=list)


@dataclass
class Request:
    method: str
    path: str
    query: dict
    headers: dict
    body: object


class ScriptedApi:
    def __init__(self):
        self.routes: dict[tuple[str, str], list[Answer]] = {}
        self.requests: list[Request] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = serving_thread(self.server)

    def on(self, method: str, path: str, *answers: Answer) -> None:
        self.routes[(method, path)] = list(answers)

    def sent(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if (r.method, r.path) == (method, path)]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, method: str, path: str) -> Answer:
        script = self.routes.get((method, path))
        if not script:
            return Answer(404, {"detail": "Not found."})
        return script.pop(0) if len(script) > 1 else script[0]

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                api.requests.append(Request(self.command, parts.path, query, dict(self.headers), body))
                answer = api._answer(self.command, parts.path)
                if answer.events:
                    text = "".join(
                        (f"id: {e[2]}\n" if len(e) > 2 else "")
                        + f"event: {e[0]}\ndata: {json.dumps(e[1])}\n\n"
                        for e in answer.events
                    )
                    payload, kind = (": keepalive\n\n" + text).encode(), "text/event-stream"
                else:
                    payload, kind = json.dumps(answer.body).encode(), answer.content_type
                self.send_response(answer.status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        return Handler


DEPLOYMENT = {
    "id": 7,
    "name": "qwen-chat",
    "model": 3,
    "model_name": "qwen2.5-7b-instruct",
    "nodes": ["sim-a2"],
    "npus": [{"node": "sim-a2", "logic_id": 0, "npu_id": 0}, {"node": "sim-a2", "logic_id": 1, "npu_id": 1}],
    "status": "running",
    "desired_state": "running",
    "reason": "",
    "reason_display": "",
    "endpoint": "http://10.0.0.5:18000/v1",
    "created": "2026-01-01T10:00:00Z",
    "findings": {"findings": [], "log_tail": []},
}


def deployment(**changes) -> dict:
    return {**DEPLOYMENT, **changes}


def page(*items) -> dict:
    return {"count": len(items), "next": None, "previous": None, "results": list(items)}
