"""The /v1 gateway takes no larger a body than the API (DATA_UPLOAD_MAX_MEMORY_SIZE): a declared length over
it is refused before a byte is read, a chunked body once its count passes it, with 413 in OpenAI's error
shape. The ASGI application is driven directly, so what it read of the body is counted exactly."""

import json

import pytest

from panel.gateway.proxy.asgi import _body, application

LIMIT = 2_621_440  # Django's default, the panel's: 2.5 MB
CHUNK = 64 * 1024


class Client:
    """An ASGI peer: sends `chunks` of body as the server would and records what the app sent back."""

    def __init__(self, chunks: list[bytes], headers: dict[str, str]):
        self.chunks = chunks
        self.received = 0  # body messages the app asked for
        self.sent: list[dict] = []
        self.scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "headers": [(name.encode(), value.encode()) for name, value in headers.items()],
            "client": ("127.0.0.1", 50000),
        }

    async def receive(self):
        if self.received >= len(self.chunks):
            return {"type": "http.disconnect"}
        self.received += 1
        more = self.received < len(self.chunks)
        return {"type": "http.request", "body": self.chunks[self.received - 1], "more_body": more}

    async def send(self, message):
        self.sent.append(message)

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    @property
    def error(self) -> dict:
        return json.loads(b"".join(m.get("body", b"") for m in self.sent[1:]))["error"]


@pytest.fixture(autouse=True)
def api_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT


def thirty_megabytes() -> list[bytes]:
    return [b"x" * CHUNK for _ in range(30 * 1024 * 1024 // CHUNK)]


async def test_a_declared_length_over_the_limit_is_a_413_before_any_of_the_body_is_read():
    chunks = thirty_megabytes()
    client = Client(chunks, {"content-type": "application/json", "content-length": str(30 * 1024 * 1024)})
    await application(client.scope, client.receive, client.send)
    assert client.received == 0
    assert client.status == 413
    assert dict(client.sent[0]["headers"])[b"content-type"] == b"application/json"
    assert client.error == {
        "message": "The request body is larger than the 2.5 MB the panel takes.",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large",
    }


async def test_a_chunked_body_is_refused_as_soon_as_its_count_passes_the_limit():
    chunks = thirty_megabytes()
    client = Client(chunks, {"content-type": "application/json", "transfer-encoding": "chunked"})
    await application(client.scope, client.receive, client.send)
    assert client.status == 413
    assert client.error["code"] == "request_too_large"
    assert client.received == LIMIT // CHUNK + 1  # the chunk that passed the limit, and no more
    assert client.received < len(chunks)


async def test_a_declared_length_that_understates_the_body_is_still_counted():
    client = Client(thirty_megabytes(), {"content-type": "application/json", "content-length": "100"})
    await application(client.scope, client.receive, client.send)
    assert client.status == 413
    assert client.received == LIMIT // CHUNK + 1


async def test_the_refusal_speaks_the_callers_language():
    headers = {"content-length": str(LIMIT + 1), "accept-language": "zh-CN,zh;q=0.9"}
    client = Client([b"x"], headers)
    await application(client.scope, client.receive, client.send)
    assert client.status == 413
    assert "2.5 MB" in client.error["message"]
    assert "请求体" in client.error["message"]


async def test_a_body_at_the_limit_is_read_whole(settings):
    body = [b"y" * CHUNK] * (LIMIT // CHUNK) + [b"y" * (LIMIT % CHUNK)]
    client = Client(body, {})
    assert await _body(client.receive, LIMIT) == b"y" * LIMIT


async def test_the_limit_follows_the_setting(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
    headers = {"content-length": str(30 * 1024 * 1024)}
    client = Client([b"x"], headers)
    await application(client.scope, client.receive, client.send)
    assert "10 MB" in client.error["message"]
