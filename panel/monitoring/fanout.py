"""Metrics broadcasts from one long-lived event loop per process.

`broadcast()` runs each send through async_to_sync, which gives channels_redis a fresh event loop and so a
fresh Redis connection every time; at 1 Hz × 64 nodes that dominated the ingest's CPU and latency. The
metrics path hands its messages to this loop instead (fire and forget: metrics are lossy by design) and
still sends them through panel.realtime.broadcast.abroadcast."""

import asyncio
import logging
import threading

from panel.realtime.broadcast import abroadcast

log = logging.getLogger(__name__)

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    if _loop is None:
        with _lock:
            if _loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="metrics-fanout", daemon=True).start()
                _loop = loop
    return _loop


async def _send(group: str, message: dict) -> None:
    try:
        await abroadcast(group, message)
    except Exception:
        log.exception("metrics broadcast to %s failed", group)


def send(group: str, message: dict) -> None:
    """Queue `message` for `group` and return at once."""
    asyncio.run_coroutine_threadsafe(_send(group, message), _running_loop())
