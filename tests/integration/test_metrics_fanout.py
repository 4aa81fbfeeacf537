"""Live metrics frames, sent in batches by panel.monitoring.fanout through the real channel layer, reach only
the sockets that joined their group, in order, and are not re-serialised per socket."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from panel.asgi import application

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("_wired_to_redis"),
]


async def connect_as(user, groups):
    from panel.accounts.models import ApiToken

    _token, raw = await sync_to_async(ApiToken.issue)(user, f"ws {'+'.join(groups)}")
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


async def test_a_socket_gets_the_frames_of_the_groups_it_joined_and_no_others(alice):
    from panel.monitoring import fanout
    from panel.nodes.models import Node

    for name in ("fan-a", "fan-b"):
        await sync_to_async(Node.objects.create)(name=name, transport="agent")
    node_a = await connect_as(alice, ["node.fan-a"])
    fleet = await connect_as(alice, ["fleet"])
    alerts_only = await connect_as(alice, ["alerts"])

    for seq in (1, 2, 3):
        fanout.send("node.fan-b", {"type": "metrics", "node": "fan-b", "seq": seq})
        fanout.send("node.fan-a", {"type": "metrics", "node": "fan-a", "seq": seq})
    fanout.send("fleet", {"type": "fleet.summary", "nodes": []})

    frames = [await node_a.receive_json_from(timeout=10) for _ in range(3)]
    assert [(f["group"], f["seq"]) for f in frames] == [("node.fan-a", seq) for seq in (1, 2, 3)]
    summary = await fleet.receive_json_from(timeout=10)
    assert summary == {"group": "fleet", "type": "fleet.summary", "nodes": []}
    assert await node_a.receive_nothing(timeout=0.5)
    assert await fleet.receive_nothing(timeout=0.1)
    assert await alerts_only.receive_nothing(timeout=0.1)
    for communicator in (node_a, fleet, alerts_only):
        await communicator.disconnect()


async def test_a_socket_that_leaves_its_node_groups_stops_getting_frames(alice):
    from panel.monitoring import fanout
    from panel.nodes.models import Node

    await sync_to_async(Node.objects.create)(name="fan-c", transport="agent")
    communicator = await connect_as(alice, ["node.fan-c"])
    fanout.send("node.fan-c", {"type": "metrics", "node": "fan-c", "seq": 1})
    assert (await communicator.receive_json_from(timeout=10))["seq"] == 1

    await communicator.send_json_to({"type": "subscribe", "groups": ["alerts"]})
    assert (await communicator.receive_json_from(timeout=10))["groups"] == ["alerts"]
    fanout.send("node.fan-c", {"type": "metrics", "node": "fan-c", "seq": 2})
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()
