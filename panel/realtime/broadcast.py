"""The only code that sends to channel-layer groups (live metrics frames go through panel.realtime.frames).
Call it after the data is committed, so whatever a browser saw can always be fetched again over REST."""

import logging

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

# Group names. The consumer checks every requested name against these shapes and the user's permissions.
FLEET = "fleet"
ALERTS = "alerts"
# Every deployment's status messages and every operation's summaries, for the lists that follow them
# (`?watch=true`, panel/core/watch.py). Like user groups, never joinable by sockets (groups.py admits no
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
    _send_all(
        [(name, {"type": "panel.message", "group": name, "message": message}) for name in (group, *also)]
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

    async def send_each():
        for group, event in sends:
            try:
                await layer.group_send(group, event)
            except Exception:
                log.exception("sending %s to %s failed", event["type"], group)

    try:
        async_to_sync(send_each)()
    except Exception:  # called where no event loop can be run from (inside one)
        log.exception("sending %s failed", ", ".join(event["type"] for _group, event in sends))


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
