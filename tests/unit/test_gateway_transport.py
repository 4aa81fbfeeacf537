"""The gateway's HTTP/1.1 to the engines against a real asyncio server: chunked, Content-Length and
close-delimited answers, chunks split across TCP writes, kept-alive connections, timeouts and breaks."""

import asyncio

import httpx
import pytest

from panel.gateway.proxy.transport import MAX_HEAD_BYTES, READ_AHEAD_BYTES, EngineTransport


async def serve(handler):
    """A server on loopback whose connections `handler(reader, writer, count)` answers; returns
    (server, port, connections seen)."""
    seen = []

    async def on_connection(reader, writer):
        seen.append(writer)
        try:
            await handler(reader, writer, len(seen))
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


async def read_request(reader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    return head + await reader.readexactly(length)


def client(**timeouts) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=EngineTransport(), timeout=httpx.Timeout(5, **timeouts))


async def test_a_chunked_stream_comes_out_chunk_by_chunk_whatever_the_writes_and_the_connection_is_kept():
    events = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"

    async def handler(reader, writer, _count):
        for _ in range(2):  # two answers on one kept-alive connection
            await read_request(reader)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            for i in range(0, len(wire), 5):  # the framing cut anywhere
                writer.write(wire[i : i + 5])
                await writer.drain()
                await asyncio.sleep(0)

    server, port, seen = await serve(handler)
    async with server, client() as http:
        for _ in range(2):
            request = http.build_request(
                "POST", f"http://127.0.0.1:{port}/v1/chat/completions", content=b"{}"
            )
            response = await http.send(request, stream=True)
            assert response.status_code == 200
            assert b"".join([chunk async for chunk in response.stream]) == b"".join(events)
            await response.aclose()
    assert len(seen) == 1


async def test_content_length_and_close_delimited_answers_and_their_headers():
    async def handler(reader, writer, count):
        await read_request(reader)
        if count == 1:
            writer.write(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 25\r\n\r\n"
            )
            writer.write(b'{"error": "Unauthorized"}')
            await writer.drain()
            await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"ok": true}')
        await writer.drain()

    server, port, seen = await serve(handler)
    async with server, client() as http:
        refused = await http.post(f"http://127.0.0.1:{port}/v1/models", content=b"")
        assert (refused.status_code, refused.json()) == (401, {"error": "Unauthorized"})
        assert refused.headers["content-type"] == "application/json"
        assert (await http.post(f"http://127.0.0.1:{port}/v1/models", content=b"")).json() == {"ok": True}
        again = await http.post(f"http://127.0.0.1:{port}/v1/models", content=b"")  # the last one was closed
        assert again.status_code == 200
    assert len(seen) == 2


async def test_a_silent_engine_times_out_a_refused_one_fails_to_connect_a_broken_one_is_a_protocol_error():
    async def silent(reader, writer, _count):
        await read_request(reader)
        await asyncio.sleep(2)

    server, port, _seen = await serve(silent)
    async with server, client(read=0.2) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(f"http://127.0.0.1:{port}/v1/completions", content=b"{}")

    async def broken(reader, writer, _count):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
        await writer.drain()

    server, port, _seen = await serve(broken)
    async with server, client() as http:
        response = await http.send(
            http.build_request("POST", f"http://127.0.0.1:{port}/x", content=b""), stream=True
        )
        with pytest.raises(httpx.RemoteProtocolError):
            [chunk async for chunk in response.stream]
        await response.aclose()
        unused = server.sockets[0].getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        async with client() as http:
            await http.post(f"http://127.0.0.1:{unused}/x", content=b"")


TIMEOUTS = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": None}


async def test_post_sends_the_body_and_headers_as_given_reads_a_whole_answer_and_keeps_its_connection():
    """EngineTransport.post, as the gateway calls engines (no httpx.AsyncClient in between)."""
    requests = []

    async def handler(reader, writer, _count):
        for _ in range(2):
            requests.append(await read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n")
            writer.write(b'{"ok": true}')
            await writer.drain()

    server, port, seen = await serve(handler)
    transport = EngineTransport()
    async with server:
        for _ in range(2):
            answer = await transport.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", b'{"a": 1}', {"Authorization": "Bearer k"},
                TIMEOUTS,
            )  # fmt: skip
            assert (answer.status_code, answer.json(), answer.is_closed) == (200, {"ok": True}, True)
        await transport.aclose()
    head, body = requests[0].split(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{port}".encode() in head.lower()
    assert b"authorization: Bearer k" in head.replace(b"Authorization", b"authorization")
    assert body == b'{"a": 1}'
    assert len(seen) == 1  # the second call went over the first one's connection


async def test_post_with_stream_answers_before_the_body_and_its_read_timeout_is_the_one_given():
    more = asyncio.Event()

    async def handler(reader, writer, _count):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await more.wait()  # nothing of the body until the test has the response
        writer.write(b"5\r\nhello\r\n0\r\n\r\n")
        await writer.drain()
        await read_request(reader)
        await asyncio.sleep(2)  # the next call hears nothing

    server, port, _seen = await serve(handler)
    transport = EngineTransport()
    url = f"http://127.0.0.1:{port}/v1/completions"
    async with server:
        response = await transport.post(url, b"{}", {}, TIMEOUTS, stream=True)
        assert response.status_code == 200
        more.set()
        assert b"".join([chunk async for chunk in response.stream]) == b"hello"
        await response.aclose()
        with pytest.raises(httpx.ReadTimeout):
            await transport.post(url, b"{}", {}, {**TIMEOUTS, "read": 0.2})
        await transport.aclose()


async def test_the_gateway_posts_within_its_configured_timeouts(settings):
    from panel.gateway.proxy import relay

    settings.PANEL_GATEWAY_READ_TIMEOUT_S = 0.2

    async def silent(reader, writer, _count):
        await read_request(reader)
        await asyncio.sleep(2)

    server, port, _seen = await serve(silent)
    async with server:
        with pytest.raises(httpx.ReadTimeout):
            await relay.post(f"http://127.0.0.1:{port}/v1/completions", b"{}", {})


async def test_the_chunks_already_here_come_out_as_one_piece_so_a_streams_end_is_one_write_on():
    """An engine writes its last events and the end of its answer at once: they go on together, not one by
    one (each piece is a write to the gateway's client)."""
    first, last = b"data: one\n\n", [b"data: two\n\n", b"data: [DONE]\n\n"]
    more = asyncio.Event()

    async def handler(reader, writer, _count):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(first), first))
        await writer.drain()
        await more.wait()
        writer.write(b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in last) + b"0\r\n\r\n")
        await writer.drain()
        await read_request(reader)  # the connection is kept for the next call

    server, port, seen = await serve(handler)
    transport = EngineTransport()
    async with server:
        url = f"http://127.0.0.1:{port}/v1/completions"
        response = await transport.post(url, b"{}", {}, TIMEOUTS, stream=True)
        pieces = response.stream.__aiter__()
        assert await pieces.__anext__() == first
        more.set()
        assert [piece async for piece in pieces] == [b"".join(last)]
        await response.aclose()
        assert transport._idle[("127.0.0.1", port)]  # read to its end: back among the kept connections
        await transport.aclose()
    assert len(seen) == 1


async def chunked_answer(wire: bytes) -> bytes:
    """The body EngineTransport.post reads from an engine that answers chunked with `wire` after its head,
    then sends nothing more with the connection open (2 s read timeout)."""
    answer = await head_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + wire)
    return answer.content


@pytest.mark.parametrize(
    ("wire", "refusal"),
    [
        (b"f" * (1024 * 1024), "size line is too long"),  # no line end: nothing a body bound counts
        (b"5\r\nhello\r\n0\r\n" + b"X-Trailer: filler\r\n" * 10_000, "trailers are too long"),
        (b"-2\r\n\r\n0\r\n\r\n", "bad chunk size"),
    ],
)
async def test_a_chunk_size_line_or_trailers_without_end_or_a_negative_size_is_a_protocol_error(
    wire, refusal
):
    """As h11 under httpx's default transport bounded them: without a bound the first two grew the buffer
    or went on until the engine stopped sending, and the read timeout never came while bytes did."""
    with pytest.raises(httpx.RemoteProtocolError, match=refusal):
        await chunked_answer(wire)


async def test_trailers_within_the_bound_are_read_past():
    assert await chunked_answer(b"5\r\nhello\r\n0\r\nX-Trailer: one\r\nX-Other: two\r\n\r\n") == b"hello"


async def test_an_engine_sending_faster_than_the_reader_takes_waits_in_tcp_not_in_the_buffer():
    """A reader held up (the gateway's client slow to take a stream) leaves the socket unread past
    READ_AHEAD_BYTES, as httpx's default transport read only when asked; the whole answer still comes."""
    piece = b"x" * (64 * 1024)
    pieces = 256  # 16 MiB, far past what may wait in the buffer

    async def handler(reader, writer, _count):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(pieces):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await read_request(reader)  # the connection is kept for the next call

    server, port, _seen = await serve(handler)
    transport = EngineTransport()
    async with server:
        response = await transport.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}, TIMEOUTS, stream=True)
        body = response.stream.__aiter__()
        read = len(await body.__anext__())
        await asyncio.sleep(0.5)  # the engine goes on sending meanwhile
        assert len(response.stream._connection.buffer) <= 2 * READ_AHEAD_BYTES
        read += sum([len(more) async for more in body])
        assert read == len(piece) * pieces
        await response.aclose()
        assert transport._idle[("127.0.0.1", port)]  # read to its end, reading again: kept
        await transport.aclose()


async def head_answer(raw: bytes) -> httpx.Response:
    """EngineTransport.post's answer from an engine that answers `raw` (in 64 KiB writes) and keeps the
    connection open (2 s read timeout)."""

    async def handler(reader, writer, _count):
        await read_request(reader)
        for i in range(0, len(raw), 64 * 1024):
            writer.write(raw[i : i + 64 * 1024])
            await writer.drain()
        await asyncio.sleep(5)

    server, port, _seen = await serve(handler)
    transport = EngineTransport()
    try:
        async with server:
            return await transport.post(f"http://127.0.0.1:{port}/v1/x", b"{}", {}, {**TIMEOUTS, "read": 2.0})
    finally:
        await transport.aclose()


async def test_interim_answers_are_read_past_within_the_head_bound_and_a_head_past_it_is_refused_at_once():
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    whole = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    assert (await head_answer(interim * 2 + whole)).content == b"ok"
    # Interim answers without end (each recursed once, to a RecursionError) count toward the head's bound.
    with pytest.raises(httpx.RemoteProtocolError, match="head is too long"):
        await head_answer(interim * 5000 + whole)
    # A head past the bound is refused whether or not its end came in the same read.
    with pytest.raises(httpx.RemoteProtocolError, match="head is too long"):
        await head_answer(b"HTTP/1.1 200 OK\r\nX-Filler: " + b"f" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n")
