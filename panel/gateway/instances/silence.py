"""An engine that went silent because its host lost power or its NPU failed: the request waiting on it ends
within seconds, not at the gateway's read bounds (PANEL_GATEWAY_MAX_EVENT_GAP_S, 600 s).

A host that loses power sends no reset, so the TCP connection to its engine stays open and the gateway waits.
The panel knows sooner (panel.gateway.instances.failover: the heartbeat sweep marks the node offline, the
health policy fails the NPU, and both publish `gw:excluded`). A `Watchdog` beside each request wakes every
SILENT_S; only when its engine has sent nothing for that long does it read the excluded entry (one Redis
round trip per silent slice, none per chunk of a healthy stream), and when the instance is out for a cause
that means the engine cannot answer (`cuts`) it aborts the wait. The request then ends as a cut one does:
an error naming the cause, or, before a byte went to the client, a try on another instance.

A draining node is not such a cause: its engine still serves, and the drain waits for its requests.

The watchdog is one small task per request, woken every SILENT_S. PANEL_GATEWAY_SILENCE_WATCHDOG=0 leaves it
out, only so that bench/gateway.py --watchdog can measure what it costs (docs/serving-plane.md §6).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable

import httpx
from django.conf import settings

from panel.gateway.instances import failover

log = logging.getLogger(__name__)

SILENT_S = 2.0  # how long an engine may be silent before its instance's exclusion is read
CUTTING = frozenset({failover.NPU_FAILED, failover.NODE_OFFLINE})


def cuts(cause: dict | None, silent_s: float) -> bool:
    """Whether a request whose engine has been silent for `silent_s` ends now, its instance excluded for
    `cause` (failover.cause_of)."""
    return silent_s >= SILENT_S and cause is not None and cause.get("cause") in CUTTING


class Excluded(httpx.TransportError):
    """The engine went silent and the panel took its instance out (`cause`): the wait was given up."""

    def __init__(self, cause: dict):
        super().__init__(f"the instance was excluded ({cause.get('cause')}) while its engine was silent")
        self.cause = cause


class Watchdog:
    """Watches one request's instance while it waits on its engine; `abort` is called once when `cuts`."""

    def __init__(
        self,
        redis,
        instance,
        heard: Callable[[], float],
        abort: Callable[[], object],  # may return an awaitable, awaited then
    ):
        self.redis, self.instance, self.heard, self.abort = redis, instance, heard, abort
        self.cause: dict | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> Watchdog:
        if settings.PANEL_GATEWAY_SILENCE_WATCHDOG:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def stop(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SILENT_S)
            silent = time.monotonic() - self.heard()
            if silent < SILENT_S:
                continue
            cause = await failover.cause_for(self.redis, self.instance)
            if cuts(cause, silent):
                self.cause = cause
                log.warning("gave up on %s, silent %.1f s: %s", self.instance.id, silent, cause)
                done = self.abort()
                if inspect.isawaitable(done):
                    await done
                return


async def guarded(redis, instance, waiting: Awaitable):
    """`waiting`'s result (a wait on `instance`'s engine in this task), or Excluded when the engine stays
    silent and the panel takes the instance out meanwhile: the task is cancelled out of the wait, as
    asyncio.timeout does, and that cancel is taken back."""
    if not settings.PANEL_GATEWAY_SILENCE_WATCHDOG:
        return await waiting
    task = asyncio.current_task()
    assert task is not None, "guarded runs in a task"
    since = time.monotonic()
    dog = Watchdog(redis, instance, lambda: since, task.cancel).start()
    try:
        return await waiting
    except asyncio.CancelledError:
        if dog.cause is not None and task.uncancel() == 0:
            raise Excluded(dog.cause) from None
        raise
    finally:
        dog.stop()
