"""Local stand-ins for the places notifications go, each a real server on 127.0.0.1 that checks what it is
sent the way its vendor documents: a JSON webhook (bearer token), the DingTalk, Feishu/Lark and WeCom group
bots (their signing and answers), and an SMTP server (aiosmtpd, with a login)."""

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from tests.serving_thread import serving_thread

HOUR_S = 3600


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def dingtalk_answer(query: dict, body: dict, secret: str) -> dict:
    """DingTalk's robot: `timestamp` (ms, within an hour) and `sign` in the query, sign =
    Base64(HmacSHA256(secret, "timestamp\\nsecret")) (url-encoded on the wire); errcode 0 when taken."""
    stamp, sign = query.get("timestamp", [""])[0], query.get("sign", [""])[0]
    if not stamp.isdigit() or abs(time.time() * 1000 - int(stamp)) > HOUR_S * 1000:
        return {"errcode": 310000, "errmsg": "invalid timestamp"}
    expected = base64.b64encode(
        hmac.new(secret.encode(), f"{stamp}\n{secret}".encode(), hashlib.sha256).digest()
    )
    if not hmac.compare_digest(sign.encode(), expected):
        return {"errcode": 310000, "errmsg": "sign not match"}
    if body.get("msgtype") != "markdown" or not body.get("markdown", {}).get("text"):
        return {"errcode": 40035, "errmsg": "missing parameter"}
    return {"errcode": 0, "errmsg": "ok"}


def feishu_answer(body: dict, secret: str) -> dict:
    """Feishu's custom bot: `timestamp` (s, within an hour) and `sign` in the body, sign =
    Base64(HmacSHA256(key="timestamp\\nsecret", msg="")); code 0 when taken."""
    stamp = str(body.get("timestamp", ""))
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > HOUR_S:
        return {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"}
    expected = base64.b64encode(
        hmac.new(f"{stamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    ).decode()
    if not hmac.compare_digest(str(body.get("sign", "")), expected):
        return {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"}
    if body.get("msg_type") != "text" or not body.get("content", {}).get("text"):
        return {"code": 9499, "msg": "Bad Request"}
    return {"code": 0, "msg": "success", "data": {}}


def wecom_answer(query: dict, body: dict, key: str) -> dict:
    """WeCom's group bot: the key in the URL; errcode 0 when taken."""
    if query.get("key", [""])[0] != key:
        return {"errcode": 93000, "errmsg": "invalid webhook url"}
    if body.get("msgtype") != "markdown" or not body.get("markdown", {}).get("content"):
        return {"errcode": 40008, "errmsg": "invalid message type"}
    return {"errcode": 0, "errmsg": "ok"}


class Receiver:
    """One HTTP receiver of one format. `statuses`: HTTP codes to answer in turn before answering 200."""

    def __init__(self, kind: str, secret: str = "", statuses: tuple[int, ...] = ()):
        self.kind, self.secret = kind, secret
        self.statuses = list(statuses)
        self.received: list[dict] = []  # every request: {"path", "status", "answer", "body", "time"}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, answer = receiver.answer(self.path, dict(self.headers), body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = serving_thread(self.server)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def url(self) -> str:
        return {
            "dingtalk": f"{self.base}/robot/send?access_token=tok",
            "feishu": f"{self.base}/open-apis/bot/v2/hook/abc",
            "wecom": f"{self.base}/cgi-bin/webhook/send?key={self.secret}",
            "webhook": f"{self.base}/alerts",
        }[self.kind]

    def answer(self, path: str, headers: dict, body: dict) -> tuple[int, dict]:
        query = parse_qs(urlsplit(path).query)
        with self.lock:
            forced = self.statuses.pop(0) if self.statuses else None
        if forced is not None:
            status, answer = forced, {"error": "forced"}
        elif self.kind == "dingtalk":
            status, answer = 200, dingtalk_answer(query, body, self.secret)
        elif self.kind == "feishu":
            status, answer = 200, feishu_answer(body, self.secret)
        elif self.kind == "wecom":
            status, answer = 200, wecom_answer(query, body, self.secret)
        else:
            good = not self.secret or headers.get("Authorization") == f"Bearer {self.secret}"
            status, answer = (200, {"ok": True}) if good else (401, {"error": "bad token"})
        with self.lock:
            self.received.append(
                {"path": path, "status": status, "answer": answer, "body": body, "time": time.time()}
            )
        return status, answer

    def taken(self) -> list[dict]:
        """What it accepted (HTTP 200 and the vendor's success code)."""
        with self.lock:
            return [
                r for r in self.received
                if r["status"] == 200 and not r["answer"].get("errcode") and not r["answer"].get("code")
            ]  # fmt: skip

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Mailbox:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that takes a login with `user`/`password` only."""

    def __init__(self, user: str, password: str):
        self.messages: list[dict] = []
        self.logins: list[str] = []
        mailbox = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                mailbox.messages.append(
                    {
                        "from": envelope.mail_from,
                        "to": list(envelope.rcpt_tos),
                        "data": envelope.content.decode(),
                    }
                )
                return "250 OK"

        def authenticate(server, session, envelope, mechanism, auth_data):
            good = auth_data.login.decode() == user and auth_data.password.decode() == password
            if good:
                mailbox.logins.append(user)
            return AuthResult(success=good)

        self.controller = Controller(
            Handler(),
            hostname="127.0.0.1",
            port=free_port(),
            authenticator=authenticate,
            auth_require_tls=False,
        )
        self.controller.start()

    @property
    def port(self) -> int:
        return self.controller.port

    def close(self) -> None:
        self.controller.stop()
