"""The engine side of a request: one engine transport per process (`post`), and the SSE relay.

Chunks go to the client as they arrive. The relay holds back only an incomplete event (bytes after the last
blank line), so it can read the few events it must: the first generated token (time to first token) and the
usage chunk the gateway asked the engine for, which it drops when the client did not ask for it.

What an engine sends is bounded here too: an event longer than PANEL_GATEWAY_MAX_EVENT_BYTES (a 100 MB answer
with no event boundary was held and copied chunk after chunk) or a stream whose events come further apart
than PANEL_GATEWAY_MAX_EVENT_GAP_S ends that request's stream with an error event; the answer's usage is
read as numbers in range or not at all (`tokens_of`).
"""

from __future__ import annotations

import asyncio
import time
import weakref

import httpx
import orjson
from django.conf import settings

from panel.gateway.proxy.transport import EngineTransport

EVENT_END = b"\n\n"
DATA = b"data:"
DONE = b"data: [DONE]"

_transports: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EngineTransport] = (
    weakref.WeakKeyDictionary()
)


def _transport() -> EngineTransport:
    """This process's (event loop's) kept-alive connections to the engines, no limit on how many (a limit
    would queue streams inside the gateway)."""
    loop = asyncio.get_running_loop()
    found = _transports.get(loop)
    if found is None:
        found = _transports[loop] = EngineTransport(max_body_bytes=settings.PANEL_GATEWAY_MAX_ANSWER_BYTES)
    return found


async def post(url: str, content: bytes, headers: dict[str, str], *, stream: bool = False) -> httpx.Response:
    """POST `content` to an engine on this process's connections, within the gateway's timeouts
    (EngineTransport.post: no httpx.AsyncClient's work per call)."""
    timeouts = {
        "connect": settings.PANEL_GATEWAY_CONNECT_TIMEOUT_S,
        "read": settings.PANEL_GATEWAY_READ_TIMEOUT_S,
        "write": settings.PANEL_GATEWAY_READ_TIMEOUT_S,
        "pool": None,
    }
    return await _transport().post(url, content, headers, timeouts, stream=stream)


class EngineMisbehaved(httpx.RemoteProtocolError):
    """The engine's stream broke a bound (an event too long, events too far apart): that request ends."""


class StreamWatch:
    """Reads what it must out of an SSE stream while passing it on."""

    def __init__(self, started: float, strip_usage: bool):
        self.started = started
        self.strip_usage = strip_usage
        self.pending = b""
        self.ttft_ms: float | None = None
        self.usage: dict | None = None
        self.done = False  # [DONE] went out: the client has its whole answer
        self.max_event = settings.PANEL_GATEWAY_MAX_EVENT_BYTES
        self.max_gap = settings.PANEL_GATEWAY_MAX_EVENT_GAP_S
        self.last_event = time.monotonic()

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in what arrived so far, as they go to the client."""
        data = self.pending + chunk if self.pending else chunk
        cut = data.rfind(EVENT_END)
        if cut < 0:
            self._check(len(data))
            self.pending = data
            return b""
        complete, self.pending = data[: cut + 2], data[cut + 2 :]
        self.last_event = time.monotonic()
        self._check(len(self.pending))
        if self.ttft_ms is None or b'"usage"' in complete:
            complete = self._read(complete)
        if DONE in complete:
            self.done = True
        return complete

    def _check(self, pending: int) -> None:
        if pending > self.max_event:
            raise EngineMisbehaved(f"the engine sent an event longer than {self.max_event} bytes")
        if time.monotonic() - self.last_event > self.max_gap:
            raise EngineMisbehaved(f"the engine sent no event for {self.max_gap:.0f} s")

    def rest(self) -> bytes:
        """What remains when the stream ends: an event the engine did not finish, passed on as it is."""
        rest, self.pending = self.pending, b""
        return rest

    def _read(self, complete: bytes) -> bytes:
        events = complete.split(EVENT_END)
        kept = []
        changed = False
        for event in events[:-1]:
            message = _message(event)
            if message is None:
                kept.append(event)
                continue
            if self.ttft_ms is None and _generated(message):
                self.ttft_ms = (time.perf_counter() - self.started) * 1000
            usage = message.get("usage")
            if isinstance(usage, dict):
                self.usage = usage
                if self.strip_usage:
                    changed = True
                    if not message.get("choices"):
                        continue  # the usage-only chunk the client did not ask for
                    message.pop("usage")
                    event = DATA + b" " + orjson.dumps(message)
            kept.append(event)
        if not changed:
            return complete
        return b"".join(event + EVENT_END for event in kept)


def _message(event: bytes) -> dict | None:
    """The JSON of an SSE event's data line, or None ([DONE], comments, anything else)."""
    line = event.strip()
    if not line.startswith(DATA):
        return None
    payload = line[len(DATA) :].strip()
    if not payload.startswith(b"{"):
        return None
    try:
        message = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return message if isinstance(message, dict) else None


def _generated(message: dict) -> bool:
    """Whether a chunk carries generated text (chat delta content or completion text)."""
    for choice in message.get("choices") or ():
        delta = choice.get("delta")
        if (
            delta and (delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))
        ) or (choice.get("text")):
            return True
    return False


MAX_TOKENS = 100_000_000  # far past any context window: a larger count is an engine's bug or lie


def tokens_of(usage: dict | None) -> tuple[int, int] | None:
    """(prompt, completion) tokens of an engine's usage, or None when either is not a whole number in
    0..MAX_TOKENS (3e9, -1e6, "many"): such usage is dropped, not charged to the caller nor stored."""
    if not usage:
        return 0, 0
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name) or 0
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
            return None
        counts.append(value)
    return counts[0], counts[1]


def usage_of(content: bytes) -> dict | None:
    """The `usage` of a whole (not streamed) answer."""
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    usage = body.get("usage") if isinstance(body, dict) else None
    return usage if isinstance(usage, dict) else None
