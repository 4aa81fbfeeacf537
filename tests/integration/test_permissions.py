"""A viewer cannot change anything through pages, API or websocket; anonymous users get nothing."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from panel.asgi import application
from panel.nodes.models import Node
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(db):
    return Node.objects.create(name="perm-node")


def test_a_viewer_cannot_start_an_operation_through_the_api(charlie, node):
    response = api_client_for(charlie).post(f"/api/v1/nodes/{node.pk}/inventory/")
    assert response.status_code == 403
    assert node.operations.count() == 0


def test_a_viewer_cannot_start_an_operation_through_a_page(charlie, node):
    client = Client()
    client.force_login(charlie)
    response = client.post(f"/nodes/{node.name}/inventory/")
    assert response.status_code == 403
    assert node.operations.count() == 0


def test_a_viewer_can_read_nodes_and_operations(charlie, node):
    client = api_client_for(charlie)
    assert client.get("/api/v1/nodes/").json()["results"][0]["name"] == "perm-node"
    assert client.get("/api/v1/operations/").status_code == 200


def test_an_operator_can_start_an_operation(bob, node, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = api_client_for(bob).post(f"/api/v1/nodes/{node.pk}/inventory/")
    assert response.status_code == 202
    assert node.operations.get().created_by == bob


def test_a_user_without_a_role_sees_nothing(db, node):
    from django.contrib.auth import get_user_model

    nobody = get_user_model().objects.create_user("dave", password="dave-password")
    assert api_client_for(nobody).get("/api/v1/nodes/").status_code == 403
    client = Client()
    client.force_login(nobody)
    assert client.get("/nodes/").status_code == 403


def test_anonymous_pages_redirect_to_login_and_api_says_401(db):
    response = Client().get("/nodes/")
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
    assert Client().get("/api/v1/nodes/").status_code == 401


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_wired_to_redis")
async def test_an_anonymous_socket_is_refused_before_accept():
    communicator = WebsocketCommunicator(application, "/ws/", headers=[(b"origin", b"http://127.0.0.1")])
    connected, code = await communicator.connect()
    assert not connected
    assert code == 4401
    await communicator.disconnect()  # as the server does after a refusal; ends the consumer's tasks


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_wired_to_redis")
async def test_a_socket_cannot_join_groups_of_objects_that_do_not_exist(charlie):
    from panel.accounts.models import ApiToken

    await database_sync_to_async(Node.objects.create)(name="visible")
    _token, raw = await database_sync_to_async(ApiToken.issue)(charlie, "ws")
    communicator = WebsocketCommunicator(
        application,
        "/ws/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"authorization", f"Bearer {raw}".encode())],
    )
    assert (await communicator.connect())[0]
    groups = ["node.visible", "node.missing", "operation.not-a-uuid", "secret.stuff", "fleet"]
    await communicator.send_json_to({"type": "subscribe", "groups": groups})
    reply = await communicator.receive_json_from(timeout=5)
    assert reply["groups"] == ["fleet", "node.visible"]
    assert reply["refused"] == sorted(["node.missing", "operation.not-a-uuid", "secret.stuff"])
    await communicator.disconnect()
