"""The panel's websocket as a signed-in user's client opens it: an API token, then a subscription."""

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from panel.asgi import application


async def connect_as(user, groups):
    from panel.accounts.models import ApiToken

    _token, raw = await database_sync_to_async(ApiToken.issue)(user, "ws")
    communicator = WebsocketCommunicator(
        application,
        "/ws/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"authorization", f"Bearer {raw}".encode())],
    )
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"type": "subscribe", "groups": groups})
    reply = await communicator.receive_json_from(timeout=10)
    assert reply["refused"] == []
    return communicator
