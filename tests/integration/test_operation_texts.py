"""Agent-written operation texts (stage, error, hint) reach live pages in the reader's language, as they do
after a reload: over the websocket (the page's language cookie or Accept-Language) and over the REST API the
page back-fills from. Texts the catalog does not know stay as the agent wrote them."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from panel.accounts.models import ApiToken
from panel.asgi import application
from panel.nodes.models import Node
from panel.operations.models import Operation
from tests.conftest import api_client_for
from tests.integration.conftest import event_batch, ingest_as_its_node

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_wired_to_redis"),
    pytest.mark.timeout(60),
]

STAGE, STAGE_ZH = "Planning the install", "正在规划安装"
HINT, HINT_ZH = "Install the agent on this node first.", "请先在该节点上安装代理。"
UNKNOWN_ERROR = "disk /data is full on texts-node"


def make_operation():
    node = Node.objects.create(name="texts-node", transport="agent")
    return Operation.objects.create(kind="inventory", node=node, target=node.name)


def progress_then_failure(operation):
    ingest_as_its_node(
        event_batch(
            operation, (1, "state", {"state": "running"}), (2, "progress", {"percent": 40, "stage": STAGE})
        )
    )
    ingest_as_its_node(
        event_batch(
            operation, (3, "state", {"state": "failed", "error": UNKNOWN_ERROR, "hint": HINT}), final_seq=3
        )
    )


async def socket(user, operation, *headers):
    _token, raw = await database_sync_to_async(ApiToken.issue)(user, f"texts {headers}")
    communicator = WebsocketCommunicator(
        application,
        "/ws/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"authorization", f"Bearer {raw}".encode()), *headers],
    )
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"type": "subscribe", "groups": [f"operation.{operation.id}"]})
    assert (await communicator.receive_json_from(timeout=10))["type"] == "subscribed"
    return communicator


async def texts_seen(communicator) -> dict:
    """The stages, errors and hints a socket received until the operation's final status."""
    seen = {"stage": [], "error": [], "hint": []}
    while True:
        message = await communicator.receive_json_from(timeout=20)
        payloads = [event["payload"] for event in message.get("events", [])]
        for item in [message, *payloads]:
            for name, found in seen.items():
                if item.get(name):
                    found.append(item[name])
        if message["type"] == "operation.status" and message["final_seq"] == message["last_seq"] == 3:
            return seen


async def test_a_chinese_page_gets_translated_texts_live_and_an_english_one_the_agents_words(alice):
    operation = await database_sync_to_async(make_operation)()
    chinese = await socket(alice, operation, (b"accept-language", b"zh-CN,zh;q=0.9"))
    by_cookie = await socket(alice, operation, (b"cookie", b"django_language=zh-hans"))
    english = await socket(alice, operation, (b"accept-language", b"en-US,en;q=0.9"))

    await database_sync_to_async(progress_then_failure)(operation)

    for communicator in (chinese, by_cookie):
        seen = await texts_seen(communicator)
        assert STAGE_ZH in seen["stage"]
        assert STAGE not in seen["stage"]
        assert set(seen["hint"]) == {HINT_ZH}
        assert set(seen["error"]) == {UNKNOWN_ERROR}  # not in the catalog: as the agent wrote it
    seen = await texts_seen(english)
    assert STAGE in seen["stage"]
    assert set(seen["hint"]) == {HINT}
    for communicator in (chinese, by_cookie, english):
        await communicator.disconnect()


def test_the_api_the_page_back_fills_from_answers_in_the_requests_language(alice):
    operation = make_operation()
    progress_then_failure(operation)
    client = api_client_for(alice)

    detail = client.get(f"/api/v1/operations/{operation.id}/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert (detail["stage"], detail["hint"], detail["error"]) == (STAGE_ZH, HINT_ZH, UNKNOWN_ERROR)
    page = client.get(
        f"/api/v1/operations/{operation.id}/events/?after_seq=0", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert [event["payload"].get("stage") for event in page.json()["results"]] == [None, STAGE_ZH, None]

    detail = client.get(f"/api/v1/operations/{operation.id}/").json()
    assert (detail["stage"], detail["hint"]) == (STAGE, HINT)
