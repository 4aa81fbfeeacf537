"""A websocket lives no longer than the credential it opened with: revoking its API token, deactivating its
user or ending its session closes it with CLOSE_SIGNED_OUT, and nothing more is forwarded to it."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from panel.accounts.models import ApiToken
from panel.asgi import application
from panel.realtime.broadcast import FLEET, abroadcast
from panel.realtime.consumers import CLOSE_SIGNED_OUT
from tests.conftest import api_client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("_wired_to_redis")]

ORIGIN = (b"origin", b"http://127.0.0.1")


async def open_socket(*headers) -> WebsocketCommunicator:
    """A socket subscribed to the fleet group."""
    communicator = WebsocketCommunicator(application, "/ws/", headers=[ORIGIN, *headers])
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"type": "subscribe", "groups": [FLEET]})
    assert (await communicator.receive_json_from(timeout=5))["groups"] == [FLEET]
    return communicator


async def token_socket(user, name="ws"):
    token, raw = await database_sync_to_async(ApiToken.issue)(user, name)
    return token, await open_socket((b"authorization", f"Bearer {raw}".encode()))


async def session_socket(user):
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    socket = await open_socket((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return client, socket


async def assert_closed_signed_out(communicator):
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": CLOSE_SIGNED_OUT,
    }
    await communicator.disconnect()  # as the server does once the client answers the close


async def assert_still_served(communicator):
    await abroadcast(FLEET, {"type": "ping"})
    assert await communicator.receive_json_from(timeout=5) == {"group": FLEET, "type": "ping"}
    await communicator.disconnect()


async def test_revoking_the_token_through_the_api_closes_its_socket_at_once(charlie):
    token, socket = await token_socket(charlie)
    response = await database_sync_to_async(api_client_for(charlie).delete)(f"/api/v1/tokens/{token.pk}/")
    assert response.status_code == 204
    await assert_closed_signed_out(socket)


async def test_revoking_the_token_on_the_settings_page_closes_its_socket(charlie):
    token, socket = await token_socket(charlie)
    client = Client()
    await database_sync_to_async(client.force_login)(charlie)
    response = await database_sync_to_async(client.post)(f"/accounts/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    await assert_closed_signed_out(socket)


async def test_revoking_another_token_of_the_same_user_leaves_the_socket_open(charlie):
    _token, socket = await token_socket(charlie)
    other, _raw = await database_sync_to_async(ApiToken.issue)(charlie, "other")
    await database_sync_to_async(api_client_for(charlie).delete)(f"/api/v1/tokens/{other.pk}/")
    await assert_still_served(socket)


async def test_deactivating_the_user_closes_their_session_and_token_sockets(charlie, bob):
    _client, by_session = await session_socket(charlie)
    _token, by_token = await token_socket(charlie)
    _bob_client, bobs = await session_socket(bob)
    charlie.is_active = False
    await database_sync_to_async(charlie.save)()
    await assert_closed_signed_out(by_session)
    await assert_closed_signed_out(by_token)
    await assert_still_served(bobs)


async def test_a_socket_whose_session_ended_is_closed_at_its_next_message(charlie):
    client, socket = await session_socket(charlie)
    await database_sync_to_async(client.logout)()  # deletes the session; nothing tells the socket
    await socket.send_json_to({"type": "subscribe", "groups": [FLEET]})
    await assert_closed_signed_out(socket)


async def test_an_expired_token_gets_no_more_data_once_the_recheck_is_due(charlie, settings):
    settings.PANEL_WS_RECHECK_S = 0  # every forwarded message is due a check
    token, socket = await token_socket(charlie)
    # A queryset update sends no signal: only the consumer's own re-check can notice.
    await database_sync_to_async(ApiToken.objects.filter(pk=token.pk).update)(
        expires=timezone.now() - timedelta(1)
    )
    await abroadcast(FLEET, {"type": "ping"})
    await assert_closed_signed_out(socket)


async def test_a_socket_within_its_recheck_interval_is_served_without_a_check(charlie, settings):
    settings.PANEL_WS_RECHECK_S = 3600
    token, socket = await token_socket(charlie)
    await database_sync_to_async(ApiToken.objects.filter(pk=token.pk).update)(
        expires=timezone.now() - timedelta(1)
    )
    # Until the interval passes (or a notice or a client message comes) data still flows: the check is
    # periodic, not per frame, so the metrics path stays cheap.
    await assert_still_served(socket)


async def test_a_user_who_must_change_a_temporary_password_joins_no_group(charlie):
    from panel.accounts.temporary import mark_temporary

    await database_sync_to_async(mark_temporary)(charlie)
    _token, raw = await database_sync_to_async(ApiToken.issue)(charlie, "ws-temporary")
    socket = WebsocketCommunicator(
        application, "/ws/", headers=[ORIGIN, (b"authorization", f"Bearer {raw}".encode())]
    )
    assert (await socket.connect())[0]
    await socket.send_json_to({"type": "subscribe", "groups": [FLEET]})
    answer = await socket.receive_json_from(timeout=5)
    assert (answer["groups"], answer["refused"]) == ([], [FLEET])
    await socket.disconnect()
