"""Engines are inputs too: the gateway's transport refuses a status outside 100-599, a Content-Length that
is not a number or is past the bound, and a body past its bound; the SSE watch refuses an event past its
bound or events too far apart; usage that is not whole numbers in range is dropped (panel.gateway)."""

import asyncio

import httpx
import pytest

from panel.gateway.proxy.relay import EngineMisbehaved, StreamWatch, tokens_of
from panel.gateway.proxy.transport import EngineTransport


async def answer_once(raw: bytes, max_body_bytes: int | None = None) -> tuple[int, bytes]:
    """One request to a loopback server that answers `raw` and closes."""

    async def on_connection(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = EngineTransport(max_body_bytes=max_body_bytes)
    try:
        async with httpx.AsyncClient(transport=transport, timeout=5) as client:
            response = await client.get(f"http://127.0.0.1:{port}/v1/x")
            return response.status_code, response.content
    finally:
        server.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 40000 Weird\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 99 Low\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
    ],
)
async def test_an_answer_head_no_engine_should_send_is_a_protocol_error(raw):
    with pytest.raises(httpx.RemoteProtocolError):
        await answer_once(raw, max_body_bytes=1024)


async def test_a_body_past_the_bound_is_refused_however_it_is_framed():
    body = b"x" * 5000
    with pytest.raises(httpx.RemoteProtocolError, match="larger than"):
        await answer_once(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body, max_body_bytes=1024)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (
        5000,
        body,
    )
    with pytest.raises(httpx.RemoteProtocolError, match="larger than"):
        await answer_once(chunked, max_body_bytes=1024)
    assert await answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", max_body_bytes=1024) == (
        200,
        b"hello",
    )


def test_an_event_without_end_past_its_bound_ends_the_stream(settings):
    settings.PANEL_GATEWAY_MAX_EVENT_BYTES = 1000
    watch = StreamWatch(0.0, strip_usage=False)
    assert watch.feed(b"data: {}\n\n") == b"data: {}\n\n"
    assert watch.feed(b"x" * 900) == b""  # under the bound: held until its end comes
    with pytest.raises(EngineMisbehaved):
        watch.feed(b"x" * 200)


def test_events_further_apart_than_the_bound_end_the_stream(settings):
    settings.PANEL_GATEWAY_MAX_EVENT_GAP_S = 0.0
    watch = StreamWatch(0.0, strip_usage=False)
    with pytest.raises(EngineMisbehaved):
        watch.feed(b"data: a trickle with no end")


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 3e9, "completion_tokens": 1},
        {"prompt_tokens": 3_000_000_000, "completion_tokens": 1},
        {"prompt_tokens": -1_000_000, "completion_tokens": 1},
        {"prompt_tokens": "12", "completion_tokens": 1},
        {"prompt_tokens": True, "completion_tokens": 1},
        {"prompt_tokens": 1, "completion_tokens": [1]},
    ],
)
def test_usage_that_is_not_whole_numbers_in_range_is_dropped(usage):
    assert tokens_of(usage) is None


def test_usage_in_range_is_read():
    assert tokens_of({"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}) == (12, 30)
    assert tokens_of(None) == (0, 0)
