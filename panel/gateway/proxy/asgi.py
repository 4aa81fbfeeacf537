"""The gateway as an ASGI application, beside Django's in panel/asgi.py (which sends it /v1/).

Not a Django view on purpose: the panel's middleware is for its pages (sessions, CSRF, messages, locale,
clickjacking headers, django-axes) and, under ASGI, costs a thread hop per middleware and request; the
gateway authenticates with API keys and answers JSON or a stream, so it needs none of it. Measured with
bench/gateway.py, the middleware doubled the CPU a request costs. The gateway still uses Django's ORM,
settings and translations.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import SimpleNamespace

from django.conf import settings
from django.utils import translation
from django.utils.translation.trans_real import get_supported_language_variant, parse_accept_lang_header

from panel.core.web.client_ip import client_ip
from panel.core.web.middleware import too_large_text
from panel.gateway.proxy.errors import INVALID_REQUEST, Answer, error
from panel.gateway.proxy.handler import Request, handle

log = logging.getLogger(__name__)


def language_of(accept: str) -> str:
    for code, _quality in parse_accept_lang_header(accept):
        if code == "*":
            break
        with contextlib.suppress(LookupError):
            return get_supported_language_variant(code)
    return settings.LANGUAGE_CODE


class TooLarge(Exception):
    pass


def body_limit() -> int | None:
    """The largest request body the gateway takes: the API's (DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB unless
    PANEL_MAX_BODY_BYTES says otherwise), read per request so a changed setting applies at once. A prompt is
    JSON like any API body; a limit the API keeps would mean little if /v1 in the same process held ten
    times as much per request in memory."""
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def _declared_length(headers: dict[str, str]) -> int | None:
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None  # chunked (or no body): counted while it arrives


async def _body(receive, limit: int | None) -> bytes | None:
    """The request body, or None when the client left; TooLarge as soon as more than `limit` bytes came, so
    a chunked body (no Content-Length) past the limit is never held whole."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if limit is not None and size > limit:
            raise TooLarge
        if not message.get("more_body"):
            return b"".join(chunks)


def too_large(limit: int, accept_language: str) -> Answer:
    with translation.override(language_of(accept_language)):
        message = too_large_text(limit)
    return error(413, message, INVALID_REQUEST, "request_too_large")


async def _send(answer: Answer, send) -> None:
    start = [(b"content-type", answer.content_type), *answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": start})
    if answer.stream is None:
        await send({"type": "http.response.body", "body": answer.body})
        return
    async for chunk in answer.stream:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _until_disconnect(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(request: Request) -> Answer:
    with translation.override(language_of(request.headers.get("accept-language", ""))):
        try:
            return await handle(request)
        except Exception:
            log.exception("gateway request %s %s failed", request.method, request.path)
            return error(500, "The gateway failed on this request; its log has the details.", "server_error")


class _Exchange:
    """A request's answer and its sending, in one task: each task started or awaited on the way to the first
    byte costs a turn of the event loop, which under a full relay load is a millisecond or more."""

    def __init__(self, request: Request, send):
        self.request = request
        self.send = send
        self.answer: Answer | None = None

    async def run(self) -> None:
        self.answer = await _answer(self.request)
        await _send(self.answer, self.send)


def _client_address(scope, headers: dict[str, str]) -> str:
    meta = {
        "REMOTE_ADDR": (scope.get("client") or ("", 0))[0],
        "HTTP_X_FORWARDED_FOR": headers.get("x-forwarded-for", ""),
    }
    return client_ip(SimpleNamespace(META=meta)) or "unknown"


async def application(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
    limit = body_limit()
    declared = _declared_length(headers)
    # Refused before a byte of the body is read when its length is declared, else once the count passes it.
    try:
        if limit is not None and declared is not None and declared > limit:
            raise TooLarge
        body = await _body(receive, limit)
    except TooLarge:
        assert limit is not None, "only a limit refuses a body"
        await _send(too_large(limit, headers.get("accept-language", "")), send)
        return
    if body is None:
        return
    # A client that goes away cancels its request wherever it is: waiting for an engine's answer, or in the
    # middle of a stream. The engine's connection then closes (and the engine stops generating); the usage
    # record says 499.
    request = Request(scope["method"], scope["path"], headers, body, _client_address(scope, headers))
    exchange = _Exchange(request, send)
    work = asyncio.ensure_future(exchange.run())
    gone = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            work.result()
    finally:
        for task in (work, gone):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        answer = exchange.answer
        if answer is not None and answer.stream is not None:
            await answer.stream.aclose()  # recorded once: a no-op when the stream ran its course
