"""The gateway's HTTP/1.1 to the engines: an httpx transport written for this one job.

The gateway talks to vLLM's API servers (uvicorn) only: plain HTTP/1.1 on the cluster network, JSON bodies,
answers framed by Content-Length or chunked (the SSE streams). A stream of 128 chats at 30 tokens/s is ~4,000
chunks a second through one web process; httpx's default transport (httpcore, h11 and anyio, some eight layers
of generators per chunk) cost as much CPU per chunk as the web server itself (bench/gateway.py). This
transport keeps httpx's client API, request building and exception types, and reads each chunk with one buffer
and one future: an asyncio Protocol per connection, kept-alive connections per engine, the read timeout a
timer rather than a task.

An engine is an input like any other: a status outside 100-599, a Content-Length that is not a number, a
head past MAX_HEAD_BYTES or a body past the transport's `max_body_bytes` is a protocol error (that request
fails, the connection is dropped), so a broken or hostile engine cannot grow a web process without end. A
chunk's size line and the trailers after the last chunk are bounded as a head is (h11, under httpx's default
transport, bounded them the same way): a size line without end, or trailer lines without end, which no
body bound counts, fail the request too.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import httpx

MAX_HEAD_BYTES = 64 * 1024
# How far a connection reads ahead of its reader: past this the socket is left unread until the reader asks
# for more, so an engine that sends faster than the gateway's client takes waits in TCP rather than growing
# the buffer (httpx's default transport read 64 KiB when asked, no more). asyncio reads up to 256 KiB at a
# time, so a buffer holds at most about twice this.
READ_AHEAD_BYTES = 256 * 1024


class _Connection(asyncio.Protocol):
    """One TCP connection to an engine: bytes arrive into a buffer; a reader waits on one future."""

    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.waiter: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_AHEAD_BYTES:
            assert self.transport is not None, "bytes come on a connection made"
            self.transport.pause_reading()  # resumed by `more`, once the reader took what is here
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    @property
    def reusable(self) -> bool:
        # An idle kept-alive connection with bytes (or an EOF) waiting was closed or broken by the engine.
        return (
            not self.closed
            and not self.buffer
            and self.transport is not None
            and not self.transport.is_closing()
        )

    async def more(self, timeout: float | None, request: httpx.Request) -> None:
        """Wait until more bytes arrived (or the engine closed); httpx.ReadTimeout after `timeout`."""
        if self.closed:
            raise httpx.RemoteProtocolError("the engine closed the connection mid-answer", request=request)
        self.read_on()
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = loop.call_later(timeout, _expire, waiter, timeout, request) if timeout is not None else None
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self.waiter = None

    def read_on(self) -> None:
        """Read the socket again if data_received paused it: the reader took what it could."""
        if self.transport is not None:
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future, timeout: float, request: httpx.Request) -> None:
    if not waiter.done():
        waiter.set_exception(
            httpx.ReadTimeout(f"no data from the engine within {timeout} s", request=request)
        )


class _Body(httpx.AsyncByteStream):
    """A response body as it arrives: chunked, of a Content-Length, or up to the connection's end."""

    def __init__(self, transport: EngineTransport, key, connection: _Connection, request, framing, timeout):
        self._transport = transport
        self._key = key
        self._connection = connection
        self._request = request
        self._framing = framing  # ("chunked", None) | ("length", n) | ("close", None)
        self._timeout = timeout
        self._done = False
        self._chunk_left: int | None = None  # chunked: the data left of the chunk being read, or a line next
        self._trailers: int | None = None  # chunked: after the last chunk, the bytes of its trailers so far

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._bounded(self._pieces())

    def _pieces(self) -> AsyncIterator[bytes]:
        kind, length = self._framing
        if kind == "length":
            return self._by_length(length)
        if kind == "chunked":
            return self._chunked()
        return self._to_close()

    async def _bounded(self, pieces: AsyncIterator[bytes]):
        limit, read = self._transport.max_body_bytes, 0
        async for piece in pieces:
            read += len(piece)
            if limit is not None and read > limit:
                raise httpx.RemoteProtocolError(
                    f"the engine's answer is larger than {limit} bytes", request=self._request
                )
            yield piece

    async def _by_length(self, remaining: int):
        connection = self._connection
        while remaining > 0:
            if not connection.buffer:
                await connection.more(self._timeout, self._request)
                if not connection.buffer:
                    raise httpx.RemoteProtocolError("the engine's answer ended early", request=self._request)
            piece = bytes(connection.buffer[:remaining])
            del connection.buffer[: len(piece)]
            if not piece:
                continue
            remaining -= len(piece)
            yield piece
        self._done = True

    async def _to_close(self):
        connection = self._connection
        while True:
            if connection.buffer:
                piece = bytes(connection.buffer)
                connection.buffer.clear()
                yield piece
            elif connection.closed:
                self._done = True
                return
            else:
                await connection.more(self._timeout, self._request)

    async def _chunked(self):
        """Chunked transfer coding (RFC 9112 7.1). The data of every chunk the buffer holds goes on as one
        piece, and a chunk's data as soon as it is here: an engine writes its last events and the end of its
        answer at once, and passed on one by one they reached the client as a write each, a wake-up each of
        the client that reads them (on a quiet machine the end of an answer came 1.3 ms after its last token
        through the gateway, 0.4 ms straight from the engine)."""
        while True:
            data = self._take_chunks()
            if data:
                yield data
            if self._done:
                return
            await self._need_more()

    def _take_chunks(self) -> bytes:
        """The chunk data in the buffer now, taken out of it with its framing; `_done` once the last chunk
        and its trailers (none from uvicorn) are read."""
        buffer = self._connection.buffer
        taken = []
        while not self._done:
            if self._chunk_left is None:  # a chunk's size line, or after the last chunk a trailer line
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD_BYTES:
                        raise httpx.RemoteProtocolError(
                            "the engine's chunk size line is too long", request=self._request
                        )
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 2]
                self._read_line(line)
            elif self._chunk_left > 0:
                if not buffer:
                    break
                piece = bytes(buffer[: self._chunk_left])
                del buffer[: len(piece)]
                self._chunk_left -= len(piece)
                taken.append(piece)
            else:  # the CRLF after a chunk's data
                if len(buffer) < 2:
                    break
                del buffer[:2]
                self._chunk_left = None
        return b"".join(taken)

    def _read_line(self, line: bytes) -> None:
        """A chunk's size line, or after the last chunk a trailer line (an empty one ends the body)."""
        if self._trailers is not None:
            self._trailers += len(line) + 2
            if self._trailers > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("the engine's trailers are too long", request=self._request)
            self._done = not line
            return
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
            if size < 0:
                raise ValueError(size)
        except ValueError:
            raise httpx.RemoteProtocolError(
                f"bad chunk size {size_text[:40]!r}", request=self._request
            ) from None
        if size == 0:
            self._trailers = 0
        else:
            self._chunk_left = size

    async def _need_more(self) -> None:
        before = len(self._connection.buffer)
        await self._connection.more(self._timeout, self._request)
        if len(self._connection.buffer) == before:
            raise httpx.RemoteProtocolError(
                "the engine closed the connection mid-answer", request=self._request
            )

    async def aclose(self) -> None:
        kind, _length = self._framing
        if self._done and kind != "close":
            self._transport._release(self._key, self._connection)
        else:
            self._connection.close()  # unread bytes would be taken for the next answer


class EngineTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with kept-alive connections per engine (host, port); no TLS, no proxies."""

    def __init__(self, max_idle_per_engine: int = 256, max_body_bytes: int | None = None):
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._max_idle = max_idle_per_engine
        self.max_body_bytes = max_body_bytes

    async def post(
        self, url: str, content: bytes, headers: dict[str, str], timeouts: dict, *, stream: bool = False
    ) -> httpx.Response:
        """POST `content` to `url`: the response with its head read, and its body too unless `stream`.
        `timeouts`: httpx's (connect, read, write, pool) in seconds.

        Straight to this transport rather than through an httpx.AsyncClient: what a client adds per request
        (auth and redirect flows, a cookie jar, a timer around the body, an INFO log line) is nothing an
        engine call needs, and it cost ~80 us of CPU per call on the way to the first byte (a disaggregated
        request makes two)."""
        extensions = {"timeout": timeouts}
        request = httpx.Request("POST", url, content=content, headers=headers, extensions=extensions)
        response = await self.handle_async_request(request)
        if not stream:
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol("engines are called over plain HTTP", request=request)
        timeouts = request.extensions.get("timeout") or {}
        key = (request.url.host, request.url.port or 80)
        connection = await self._connection(key, timeouts.get("connect"), request)
        assert connection.transport is not None, "_connection gives connected connections"
        try:
            connection.transport.write(_head(request) + await request.aread())
            status, headers = await self._read_head(connection, timeouts.get("read"), request)
        except BaseException:
            connection.close()
            raise
        try:
            framing = _framing(request, status, headers, self.max_body_bytes)
        except BaseException:
            connection.close()
            raise
        keep_alive = not any(name == b"connection" and b"close" in value.lower() for name, value in headers)
        body = _Body(self, key if keep_alive else None, connection, request, framing, timeouts.get("read"))
        return httpx.Response(status, headers=headers, stream=body, request=request)

    async def _connection(self, key, timeout, request) -> _Connection:
        idle = self._idle.get(key) or []
        while idle:
            connection = idle.pop()
            if connection.reusable:
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _transport, connection = await loop.create_connection(_Connection, key[0], key[1])
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"no connection to {key[0]}:{key[1]} in {timeout} s", request=request
            ) from None
        except OSError as failure:
            raise httpx.ConnectError(f"{key[0]}:{key[1]}: {failure}", request=request) from None
        return connection

    async def _read_head(self, connection: _Connection, timeout, request) -> tuple[int, list]:
        """The status and headers of the answer; interim (100) answers before it are read past, all of its
        heads together within MAX_HEAD_BYTES."""
        buffer, read, status = connection.buffer, 0, 100
        while status == 100:  # an interim answer: the real one follows
            while (end := buffer.find(b"\r\n\r\n")) < 0 and read + len(buffer) <= MAX_HEAD_BYTES:
                before = len(buffer)
                await connection.more(timeout, request)
                if len(buffer) == before:
                    raise httpx.RemoteProtocolError(
                        "the engine closed the connection before answering", request=request
                    )
            read += end + 4
            if end < 0 or read > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("the engine's answer head is too long", request=request)
            head = bytes(buffer[:end]).split(b"\r\n")
            del buffer[: end + 4]
            status = _status(head[0], request)
        headers = []
        for line in head[1:]:
            name, _, value = line.partition(b":")
            headers.append((name.strip().lower(), value.strip()))
        return status, headers

    def _release(self, key, connection: _Connection) -> None:
        if key is None or not connection.reusable:
            connection.close()
            return
        idle = self._idle.setdefault(key, [])
        if len(idle) >= self._max_idle:
            connection.close()
        else:
            connection.read_on()  # idle, its answer read: an EOF or stray bytes must be seen before reuse
            idle.append(connection)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                with contextlib.suppress(Exception):
                    connection.close()
        self._idle.clear()


def _status(line: bytes, request: httpx.Request) -> int:
    try:
        _version, code, *_reason = line.split(b" ", 2)
        status = int(code)
        if not 100 <= status <= 599:
            raise ValueError(status)
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad status line {line[:80]!r}", request=request) from None
    return status


def _head(request: httpx.Request) -> bytes:
    target = request.url.raw_path
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), target)]
    lines += [b"%s: %s" % (name, value) for name, value in request.headers.raw]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _framing(request: httpx.Request, status: int, headers: list, limit: int | None) -> tuple[str, int | None]:
    if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return "length", 0
    values = dict(headers)
    if b"chunked" in values.get(b"transfer-encoding", b"").lower():
        return "chunked", None
    if b"content-length" in values:
        text = values[b"content-length"]
        if not text.isdigit() or (limit is not None and int(text) > limit):
            raise httpx.RemoteProtocolError(f"unacceptable Content-Length {text[:40]!r}", request=request)
        return "length", int(text)
    return "close", None
