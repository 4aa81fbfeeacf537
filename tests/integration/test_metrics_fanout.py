"""Live metrics frames, published once per ingest drain (panel.realtime.frames) on the real Redis, reach
only the sockets that joined their group, in order, several to a websocket message."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from panel.asgi import application
from panel.realtime.broadcast import frame
from panel.realtime.frames import publish

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("_wired_to_redis"),
]


async def connect_as(user, groups):
    from panel.accounts.models import ApiToken

    _token, raw = await database_sync_to_async(ApiToken.issue)(user, f"ws {'+'.join(groups)}")
    communicator = WebsocketCommunicator(
        application,
        "/ws/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"authorization", f"Bearer {raw}".encode())],
    )
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"type": "subscribe", "groups": groups})
    reply = await communicator.receive_json_from(timeout=10)
    assert reply["groups"] == sorted(groups)
    return communicator


async def frames_from(communicator) -> list[dict]:
    """The frames of the next websocket message: a lone frame, or a JSON array of them."""
    data = json.loads(await communicator.receive_from(timeout=10))
    return data if isinstance(data, list) else [data]


def metrics(node: str, seq: int) -> tuple[str, str]:
    group = f"node.{node}"
    return group, frame(group, {"type": "metrics", "node": node, "seq": seq})


async def test_a_socket_gets_the_frames_of_the_groups_it_joined_and_no_others(alice):
    from panel.nodes.models import Node

    for name in ("fan-a", "fan-b"):
        await database_sync_to_async(Node.objects.create)(name=name, transport="agent")
    node_a = await connect_as(alice, ["node.fan-a"])
    fleet = await connect_as(alice, ["fleet"])
    alerts_only = await connect_as(alice, ["alerts"])

    drain = []
    for seq in (1, 2, 3):
        drain += [metrics("fan-b", seq), metrics("fan-a", seq)]
    drain.append(("fleet", frame("fleet", {"type": "fleet.summary", "nodes": []})))
    await database_sync_to_async(publish)(drain)

    got = await frames_from(node_a)
    assert [(f["group"], f["seq"]) for f in got] == [("node.fan-a", seq) for seq in (1, 2, 3)]
    assert await frames_from(fleet) == [{"group": "fleet", "type": "fleet.summary", "nodes": []}]
    assert await node_a.receive_nothing(timeout=0.5)
    assert await fleet.receive_nothing(timeout=0.1)
    assert await alerts_only.receive_nothing(timeout=0.1)
    for communicator in (node_a, fleet, alerts_only):
        await communicator.disconnect()


async def test_a_socket_that_leaves_its_node_groups_stops_getting_frames(alice):
    from panel.nodes.models import Node

    await database_sync_to_async(Node.objects.create)(name="fan-c", transport="agent")
    communicator = await connect_as(alice, ["node.fan-c"])
    await database_sync_to_async(publish)([metrics("fan-c", 1)])
    assert [f["seq"] for f in await frames_from(communicator)] == [1]

    await communicator.send_json_to({"type": "subscribe", "groups": ["alerts"]})
    assert (await communicator.receive_json_from(timeout=10))["groups"] == ["alerts"]
    await database_sync_to_async(publish)([metrics("fan-c", 2)])
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()


async def test_frames_stop_and_the_socket_closes_once_its_token_expired(alice, settings):
    from datetime import timedelta

    from django.utils import timezone

    from panel.accounts.models import ApiToken
    from panel.nodes.models import Node
    from panel.realtime.consumers import CLOSE_SIGNED_OUT

    settings.PANEL_WS_RECHECK_S = 0  # every forwarded message is due a check
    await database_sync_to_async(Node.objects.create)(name="fan-d", transport="agent")
    communicator = await connect_as(alice, ["node.fan-d"])
    await database_sync_to_async(ApiToken.objects.filter(user=alice).update)(
        expires=timezone.now() - timedelta(1)
    )
    await database_sync_to_async(publish)([metrics("fan-d", 1)])
    assert await communicator.receive_output(timeout=10) == {
        "type": "websocket.close",
        "code": CLOSE_SIGNED_OUT,
    }
    await communicator.disconnect()
