"""Listening to channel-layer groups from an HTTP request (a `?wait=`, a `?watch=true`), the way the
websocket consumer does for a socket: a channel of its own, joined to the groups *before* the caller reads
the database, so whatever is committed after that read arrives as a message.

    async with Inbox([deployment_group(name)]) as inbox:
        state = ...read the database...
        message = await inbox.next(timeout=5.0, wanted=lambda m: m["type"] == "deployment.status")

Broadcasts are lossy (panel/realtime/broadcast.py): callers also re-read the database now and then.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

RETRY_S = 1.0
STOP_TIMEOUT_S = 10.0
CLOSE = "inbox.close"  # what an inbox sends itself to end its receive


class Inbox:
    def __init__(self, groups: list[str]):
        self.groups = list(groups)
        self.layer = get_channel_layer()
        self.channel = ""
        self._messages: asyncio.Queue[dict] = asyncio.Queue()
        self._pump: asyncio.Task | None = None

    async def __aenter__(self) -> "Inbox":
        self.channel = await self.layer.new_channel()
        try:
            for group in self.groups:
                await self.layer.group_add(group, self.channel)
        except Exception:  # Redis away: the caller's own re-reads of the database carry on alone
            log.warning("joining %s failed; nothing will arrive", ", ".join(self.groups), exc_info=True)
            return self
        # One receive runs for the inbox's whole life: cancelling a channel-layer receive midway can drop
        # what it had buffered (channels_redis deletes the buffer), so timeouts wait on our own queue.
        self._pump = asyncio.create_task(self._receive_forever())
        return self

    async def __aexit__(self, *exc) -> None:
        for group in self.groups:
            try:
                await self.layer.group_discard(group, self.channel)
            except Exception:  # Redis away: the membership expires with the layer's group expiry
                log.warning("leaving %s failed", group, exc_info=True)
        if self._pump is not None:
            await self._stop_pump(self._pump)

    async def _stop_pump(self, pump: asyncio.Task) -> None:
        """The pump may be the receive that runs the process's one blocking Redis read for every channel.
        Cancelling it midway stalled that exit for up to a minute (seen with forty waits ending at once),
        so the pump is sent a message of its own and ends on it; it is cancelled only if that message
        cannot be sent or does not arrive."""
        try:
            await self.layer.send(self.channel, {"type": CLOSE})
            await asyncio.wait_for(asyncio.shield(pump), STOP_TIMEOUT_S)
            return
        except Exception:
            log.warning("the inbox of %s did not end on its own", self.channel, exc_info=True)
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump

    async def _receive_forever(self) -> None:
        while True:
            try:
                event = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: callers re-read the database on their own meanwhile
                log.warning("receiving on %s failed; retrying in %s s", self.channel, RETRY_S, exc_info=True)
                await asyncio.sleep(RETRY_S)
                continue
            if event.get("type") == CLOSE:
                return
            if event.get("type") == "panel.message":
                self._messages.put_nowait(event["message"])

    async def next(self, timeout: float, wanted: Callable[[dict], bool] = bool) -> dict | None:
        """The next message `wanted` accepts (others are dropped), or None once `timeout` seconds passed."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                message = await asyncio.wait_for(self._messages.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return None
            if wanted(message):
                return message
