"""The gateway's HTTP/1.1 to the engines against a real asyncio server: chunked, Content-Length and
close-delimited answers, chunks split across TCP writes, kept-alive connections, timeouts and breaks."""

import asyncio

import httpx
import pytest

from panel.gateway.proxy.transport import EngineTransport


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
