"""The only code that sends to channel-layer groups (live metrics frames go through panel.realtime.frames).
Call it after the data is committed, so whatever a browser saw can always be fetched again over REST."""

import asyncio
import contextlib
import logging
import os
import threading

import orjson
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

# Group names. The consumer checks every requested name against these shapes and the user's permissions.
FLEET = "fleet"
ALERTS = "alerts"
# Every deployment's status messages and every operation's summaries, for the lists that follow them
# (`?watch=true`, panel/core/rest/watch.py). Like user groups, never joinable by sockets (groups.py admits no
# such name): a socket's groups are checked once, and these carry objects the viewer may not see.
DEPLOYMENTS = "deployments"
OPERATIONS = "operations"


def user_group(user_id) -> str:
    """Internal, never joinable by clients (groups.py admits no such name): every socket of one user."""
    return f"user.{user_id}"


def operation_group(operation_id) -> str:
    return f"operation.{operation_id}"


def node_group(node_name: str) -> str:
    return f"node.{node_name}"


def deployment_group(name: str) -> str:
    return f"deployment.{name}"


def broadcast(group: str, message: dict, *, also: tuple[str, ...] = ()) -> None:
    """Send `message` (JSON-able, with a "type") to every socket subscribed to `group`, and to the `also`
    groups (DEPLOYMENTS, OPERATIONS) in the same trip to the channel layer. Lossy by design: a failure to
    reach the channel layer is logged, never raised into the caller's transaction."""
    broadcast_each([(name, message) for name in (group, *also)])


def broadcast_each(messages: list[tuple[str, dict]]) -> None:
    """`broadcast` of many (group, message) pairs in one trip to the channel layer: what a burst of nodes
    coming back online announces, in one event-loop hop instead of one per message."""
    _send_all(
        [
            (group, {"type": "panel.message", "group": group, "message": message})
            for group, message in messages
        ]
    )


def credentials_changed(user_id) -> None:
    """Tell every socket of a user to re-check its credential now (a token was revoked, the user was
    deactivated); those whose credential no longer signs in close. Lossy like `broadcast`: the sockets
    also re-check on their own, every PANEL_WS_RECHECK_S while they forward data."""
    _send(user_group(user_id), {"type": "panel.credentials"})


def _send(group: str, event: dict) -> None:
    _send_all([(group, event)])


def _send_all(sends: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    what = ", ".join(event["type"] for _group, event in sends)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # a plain thread: the usual caller
    else:
        log.error("sending %s failed: called inside an event loop, where abroadcast is the way", what)
        return
    future = asyncio.run_coroutine_threadsafe(_send_each(layer, sends), _sending_loop())
    try:
        future.result(SEND_TIMEOUT_S)
    except Exception:
        log.exception("sending %s failed", what)


async def _send_each(layer, sends: list[tuple[str, dict]]) -> None:
    global _pools_of
    if _pools_of is not layer:
        # A new layer object (tests make one per test): the old one's connections on this loop go.
        old, _pools_of = _pools_of, layer
        if old is not None:
            with contextlib.suppress(Exception):
                await old.close_pools()
    for group, event in sends:
        try:
            await layer.group_send(group, event)
        except Exception:
            log.exception("sending %s to %s failed", event["type"], group)


# Sync callers (the panel worker's tasks, web views' threads) send on one event loop of the process's own.
# async_to_sync from a plain thread made a new loop, a new thread and a new Redis connection per call: 4.3 ms
# of CPU per broadcast against 0.7 ms here, and a fleet's event batches and announcements are many a second.
SEND_TIMEOUT_S = 10.0
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0
_loop_lock = threading.Lock()
_pools_of = None  # the layer whose connections the loop holds


def _sending_loop() -> asyncio.AbstractEventLoop:
    global _loop, _loop_pid
    with _loop_lock:
        if _loop is None or _loop_pid != os.getpid():  # none yet, or a forked child's copy of the parent's
            _loop, _loop_pid = asyncio.new_event_loop(), os.getpid()
            threading.Thread(target=_loop.run_forever, name="broadcasts", daemon=True).start()
        return _loop


async def abroadcast(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group, {"type": "panel.message", "group": group, "message": message})


def carries_frames(group: str) -> bool:
    """Groups whose live metrics travel as frames (panel.realtime.frames): the fleet and node groups."""
    return group == FLEET or group.startswith("node.")


def frame(group: str, message: dict) -> str:
    """The websocket text a subscriber of `group` receives for `message`, serialised once for all of them."""
    return orjson.dumps({"group": group, **message}).decode()
