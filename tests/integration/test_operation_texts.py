"""Agent-written operation texts (stage, error, hint) reach live pages in the reader's language, as they do
after a reload: over the websocket (the page's language cookie or Accept-Language) and over the REST API the
page back-fills from. Agents send each text in English with its msgid and params (workers.i18n); the panel
fills the msgid's translation with them, and never guesses a template back from the English. Texts the
catalog does not know, and texts sent without their structure, stay as they were written."""

from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from panel.accounts.models import ApiToken
from panel.asgi import application
from panel.nodes.models import Node
from panel.operations.models import Operation
from tests.conftest import api_client_for, sent_by_the_agent
from tests.integration.conftest import event_batch, ingest_as_its_node
from workers.i18n import gettext_noop as _
from workers.i18n import message_of
from workers.tasks.deploy_launch import LaunchFailed

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_wired_to_redis"),
    pytest.mark.timeout(60),
]

ROOT = Path(__file__).resolve().parents[2]
STAGE, STAGE_ZH = "Planning the install", "正在规划安装"
ERROR, ERROR_ZH = "port 8000 is already in use on this node", "此节点上端口 8000 已被占用"
HINT, HINT_ZH = "Install the agent on this node first.", "请先在该节点上安装代理。"
UNKNOWN_ERROR = "disk /data is full on texts-node"


def make_operation():
    node = Node.objects.create(name="texts-node", transport="agent")
    return Operation.objects.create(kind="inventory", node=node, target=node.name)


def progress_then_failure(operation):
    def body(emitter):
        emitter.emit("state", state="running")
        emitter.progress(40, _("Planning the install"))
        failure = LaunchFailed(_("port {port} is already in use on this node").format(port=8000), _(HINT))
        emitter.finish("failed", error=message_of(failure), hint=failure.hint)

    for batch in sent_by_the_agent(operation, body):
        ingest_as_its_node(batch)


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
        assert set(seen["error"]) == {ERROR_ZH}  # the template translated, then filled with its port
    seen = await texts_seen(english)
    assert STAGE in seen["stage"]
    assert set(seen["hint"]) == {HINT}
    assert set(seen["error"]) == {ERROR}
    for communicator in (chinese, by_cookie, english):
        await communicator.disconnect()


def test_the_api_answers_in_the_requests_language_and_gives_the_structured_form_beside(alice):
    operation = make_operation()
    progress_then_failure(operation)
    client = api_client_for(alice)

    detail = client.get(f"/api/v1/operations/{operation.id}/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert (detail["stage"], detail["hint"], detail["error"]) == (STAGE_ZH, HINT_ZH, ERROR_ZH)
    assert detail["texts"]["error"] == {
        "msgid": "port {port} is already in use on this node",
        "params": {"port": 8000},
    }
    page = client.get(
        f"/api/v1/operations/{operation.id}/events/?after_seq=0", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert [event["payload"].get("stage") for event in page.json()["results"]] == [None, STAGE_ZH, None]
    assert page.json()["results"][2]["payload"]["texts"]["error"]["params"] == {"port": 8000}

    detail = client.get(f"/api/v1/operations/{operation.id}/").json()
    assert (detail["stage"], detail["hint"], detail["error"]) == (STAGE, HINT, ERROR)


def test_a_text_the_catalog_does_not_know_stays_as_the_agent_wrote_it(alice):
    operation = make_operation()
    ingest_as_its_node(
        event_batch(operation, (1, "state", {"state": "failed", "error": UNKNOWN_ERROR}), final_seq=1)
    )
    detail = api_client_for(alice).get(f"/api/v1/operations/{operation.id}/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert detail.json()["error"] == UNKNOWN_ERROR


def test_a_filled_text_stored_without_its_structure_is_shown_as_stored_not_guessed_back(alice):
    """A row of an older agent: the English as it came. Only a whole msgid is looked up in the catalog."""
    node = Node.objects.create(name="old-agent-node", transport="agent")
    operation = Operation.objects.create(
        kind="inventory", node=node, status="failed", error=ERROR, hint=HINT, texts={}
    )
    detail = api_client_for(alice).get(f"/api/v1/operations/{operation.id}/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert (detail.json()["error"], detail.json()["hint"]) == (ERROR, HINT_ZH)


def test_a_structure_that_no_longer_spells_the_text_is_ignored(alice):
    """The panel wrote the field itself since (a cancel, the reaper): that is shown, not the agent's."""
    operation = make_operation()
    progress_then_failure(operation)
    Operation.objects.filter(pk=operation.pk).update(error="node texts-node went away at 12:00")
    detail = api_client_for(alice).get(f"/api/v1/operations/{operation.id}/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert detail.json()["error"] == "node texts-node went away at 12:00"


def test_no_template_is_guessed_back_from_the_catalog():
    """Django's private catalog is never read to guess which template an English text was filled from."""
    for path in ROOT.glob("panel/**/*.py"):
        assert "._catalog" not in path.read_text(encoding="utf-8"), path
