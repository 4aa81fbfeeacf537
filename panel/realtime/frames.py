"""Live metrics frames: one Redis pub/sub message per ingest drain, fanned out in each web process.

The panel worker publishes every frame of a drain (a node's metrics, the fleet summary) as one message on
one Redis channel; each web process holds one subscription for all its sockets and hands every socket the
frames of the groups it joined (permission-checked when it subscribed), as one websocket message. So a
busy second costs a web process one Redis message per drain instead of one channel-layer message per
socket, and a socket one send per drain instead of one per node. Lossy by design, like the metrics path:
a process that is not subscribed at that moment misses the frames, and a page back-fills over REST.

Wire format: lines of "<group>\\t<frame JSON>"; group names cannot hold tabs or newlines and JSON text has
no raw newline, so the web process splits lines instead of parsing JSON it only forwards. A socket gets a
lone frame as is, several as a JSON array of frames.
"""

import asyncio
import logging
import threading

import redis
import redis.asyncio
from django.conf import settings

log = logging.getLogger(__name__)

RETRY_S = 2.0

_publishers: dict[str, redis.Redis] = {}
_publishers_lock = threading.Lock()


def channel() -> str:
    """The pub/sub channel on REDIS_URL, named with the channel layer's prefix (which keeps test sessions
    apart)."""
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"].get("prefix", "asgi")
    return f"{prefix}:metrics-frames"


def encode(frames: list[tuple[str, str]]) -> str:
    return "\n".join(f"{group}\t{text}" for group, text in frames)


def decode(payload: str) -> list[tuple[str, str]]:
    frames = []
    for line in payload.split("\n"):
        group, _, text = line.partition("\t")
        if text:
            frames.append((group, text))
    return frames


def publish(frames: list[tuple[str, str]]) -> None:
    """Send [(group, frame text)] to every web process (one Redis round trip). Failures are logged only.
    The ingest path instead adds its PUBLISH of `encode(frames)` on `channel()` to its own pipeline."""
    if not frames:
        return
    url = settings.REDIS_URL
    client = _publishers.get(url)
    if client is None:
        with _publishers_lock:
            client = _publishers.setdefault(url, redis.Redis.from_url(url))
    try:
        client.publish(channel(), encode(frames))
    except redis.RedisError:
        log.exception("publishing %d metrics frames failed", len(frames))


def joined_text(texts: list[str]) -> str:
    return texts[0] if len(texts) == 1 else f"[{','.join(texts)}]"


class FrameHub:
    """This process's subscription, shared by its sockets; runs while at least one socket wants frames."""

    def __init__(self):
        self.sockets: set = set()  # consumers with `groups_joined` and an async `forward_frames(texts)`
        self._task: asyncio.Task | None = None
        self._ready: asyncio.Event | None = None

    async def join(self, socket) -> None:
        """Deliver frames to `socket` from now on; returns once the subscription is live."""
        self.sockets.add(socket)
        ready = self._ready
        if ready is None or self._task is None or self._task.done():
            ready = self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._listen(ready))
        await ready.wait()

    async def leave(self, socket) -> None:
        self.sockets.discard(socket)
        if not self.sockets and self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            # A socket may leave from inside a delivery (its credential just expired): the subscription task
            # then ends at its next await instead of waiting for itself.
            if task is not asyncio.current_task():
                await asyncio.gather(task, return_exceptions=True)

    async def deliver(self, payload: str) -> None:
        by_group: dict[str, list[str]] = {}
        for group, text in decode(payload):
            by_group.setdefault(group, []).append(text)
        for socket in list(self.sockets):
            # A socket's few groups looked up, not each of a drain's 513 frames (512 nodes) tested per socket.
            texts = [text for group in socket.groups_joined for text in by_group.get(group, ())]
            if texts:
                try:
                    await socket.forward_frames(texts)
                except Exception:  # a socket closing mid-send must not cost the others their frames
                    log.debug("metrics frames to a closing socket dropped", exc_info=True)

    async def _listen(self, ready: asyncio.Event) -> None:
        while True:
            client = redis.asyncio.Redis.from_url(settings.REDIS_URL, decode_responses=True)
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(channel())
                    ready.set()
                    async for message in pubsub.listen():
                        await self.deliver(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: pages back-fill what they missed when frames resume
                log.exception("metrics frames subscription lost; resubscribing in %s s", RETRY_S)
                ready.set()
                await asyncio.sleep(RETRY_S)
            finally:
                await client.aclose()


_hubs: dict[asyncio.AbstractEventLoop, FrameHub] = {}


def hub() -> FrameHub:
    """The hub of the running event loop (one in a web process; tests run each in a loop of its own)."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        for stale in [other for other in _hubs if other.is_closed()]:
            del _hubs[stale]
        found = _hubs[loop] = FrameHub()
    return found
