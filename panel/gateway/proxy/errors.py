"""Errors as OpenAI's API words them, so SDKs raise the exception they would raise against OpenAI:
`{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

import orjson

INVALID_REQUEST = "invalid_request_error"
JSON = b"application/json"


class ChunkStream(Protocol):
    """An answer's body as it comes: chunks, and a close that ends it early (and records it once)."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


@dataclass
class Answer:
    """What the gateway answers: a status, headers and either a body or a stream of chunks."""

    status: int
    body: bytes = b""
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    stream: ChunkStream | None = None  # panel.gateway.proxy.handler.Relay

    def header(self, name: str, value: str) -> Answer:
        self.headers.append((name.lower().encode(), value.encode()))
        return self


def error(
    status: int, message: str, kind: str = INVALID_REQUEST, code: str | None = None, **headers
) -> Answer:
    body = orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    answer = Answer(status, body)
    for name, value in headers.items():
        answer.header(name.replace("_", "-"), value)
    return answer


def as_openai_error(body, status: int) -> dict | None:
    """An engine's error body in OpenAI's shape. vLLM answers `{"object": "error", "message", "type",
    "code"}` (older) or `{"error": {...}}` (newer), FastAPI `{"detail": ...}`, its auth `{"error": "..."}`.
    None when `body` already has OpenAI's shape."""
    if not isinstance(body, dict):
        return {"error": {"message": str(body), "type": "server_error", "param": None, "code": status}}
    inner = body.get("error")
    if isinstance(inner, dict) and "message" in inner:
        return None
    message = body.get("message") or body.get("detail") or inner or str(body)
    kind = body.get("type") or (INVALID_REQUEST if status < 500 else "server_error")
    return {"error": {"message": str(message), "type": kind, "param": body.get("param"), "code": status}}
