"""A node's own broker user, used as an attacker holding that node would: with the URL its join answer gave,
it can read its own queue and publish to the ingest exchange, and nothing else."""

import json

import amqp
import pytest
from django.test import Client
from kombu import Connection

from panel.nodes.agents.broker_admin import node_permissions, node_user
from panel.nodes.agents.join import issue_join_token

pytestmark = pytest.mark.django_db


def join(name: str, *, rotate: bool = False) -> dict:
    token = issue_join_token(name, rotate_credential=rotate)
    answer = Client().post(
        "/nodes/agent/join/", {"node": name, "token": token}, content_type="application/json"
    )
    assert answer.status_code == 200, answer.content
    return answer.json()


def channel_of(url: str):
    connection = Connection(url, connect_timeout=5)
    connection.connect()
    return connection, connection.channel()


def test_a_join_creates_the_node_user_with_only_its_own_queue_and_the_ingest_exchange(rabbit, settings):
    name = rabbit.node_name("npu-a")
    answer = join(name)

    assert answer["broker_url"].startswith(f"amqp://node.{name}:")
    assert answer["broker_url"].endswith(f"@{rabbit.agent_url.removeprefix('amqp://')}")
    assert "redis" not in json.dumps(answer).lower()
    assert settings.REDIS_URL.split("@")[-1] not in json.dumps(answer)
    permissions = rabbit.api("GET", f"/api/permissions/{rabbit.vhost}/node.{name}").json()
    assert {k: permissions[k] for k in ("configure", "write", "read")} == node_permissions(name)
    own_queue = f"^node\\.npu\\-a\\-{rabbit.suffix}$"
    assert node_permissions(name) == {"configure": "^$", "write": "^ingest$", "read": own_queue}


@pytest.mark.attack("broker-reach")
@pytest.mark.reaches_other_node
def test_a_node_cannot_read_another_nodes_queue(rabbit):
    own, other = rabbit.node_name("npu-b"), rabbit.node_name("npu-c")
    url = join(own)["broker_url"]
    join(other)
    connection, channel = channel_of(url)
    with connection:
        assert channel.basic_get(f"node.{own}") is None  # its own queue: readable (and empty)
        with pytest.raises(amqp.exceptions.AccessRefused):
            channel.basic_get(f"node.{other}")


@pytest.mark.attack("broker-reach")
@pytest.mark.reaches_other_node
@pytest.mark.parametrize(
    ("exchange", "routing_key"),
    [("panel", "panel"), ("", "panel"), ("nodes", "node.anyone"), ("amq.direct", "panel")],
)
def test_a_node_cannot_publish_anywhere_but_the_ingest_exchange(rabbit, exchange, routing_key):
    url = join(rabbit.node_name(f"npu-p{len(exchange)}"))["broker_url"]
    connection, channel = channel_of(url)
    with connection:
        channel.confirm_select()
        channel.basic_publish_confirm(amqp.Message(b"{}"), exchange="ingest", routing_key="ingest")
        with pytest.raises(amqp.exceptions.AccessRefused):
            channel.basic_publish_confirm(amqp.Message(b"{}"), exchange=exchange, routing_key=routing_key)


@pytest.mark.attack("broker-reach")
@pytest.mark.reaches_other_node
def test_a_node_cannot_declare_queues_or_exchanges_or_bind_its_queue_elsewhere(rabbit):
    name = rabbit.node_name("npu-d")
    url = join(name)["broker_url"]
    attempts = [
        lambda channel: channel.queue_declare("stolen", durable=False),
        lambda channel: channel.exchange_declare("evil", "fanout"),
        lambda channel: channel.queue_bind(f"node.{name}", "ingest", "ingest"),
        lambda channel: channel.queue_delete("ingest"),
    ]
    for attempt in attempts:
        connection, channel = channel_of(url)
        with connection, pytest.raises(amqp.exceptions.AccessRefused):
            attempt(channel)


def test_removing_a_node_deletes_its_user_and_cuts_its_connection(rabbit, alice):
    from panel.deployments.rollouts.node_actions import remove_node
    from panel.nodes.models import Node

    name = rabbit.node_name("npu-e")
    url = join(name)["broker_url"]
    connection, channel = channel_of(url)
    remove_node(Node.objects.get(name=name))

    assert rabbit.api("GET", f"/api/users/{node_user(name)}").status_code == 404
    # Closed by the broker: forced close, or a reset when the close frame is not read first.
    with pytest.raises((amqp.exceptions.ConnectionForced, ConnectionError)):
        channel.basic_get(f"node.{name}")
    with pytest.raises(amqp.exceptions.AccessRefused):
        Connection(url, connect_timeout=5).connect()


def test_joining_again_rotates_the_password_and_the_old_one_stops_working(rabbit):
    name = rabbit.node_name("npu-f")
    old = join(name)["broker_url"]
    # An admin's token made to rotate the joined node's credential.
    new = join(name, rotate=True)["broker_url"]

    assert old != new
    with pytest.raises(amqp.exceptions.AccessRefused):
        Connection(old, connect_timeout=5).connect()
    connection, channel = channel_of(new)
    with connection:
        assert channel.basic_get(f"node.{name}") is None


def test_a_join_while_the_broker_admin_is_down_creates_nothing_and_the_token_still_works(rabbit, settings):
    from panel.nodes.models import JoinToken, Node

    name = rabbit.node_name("npu-g")
    reachable = settings.PANEL_BROKER_ADMIN_URL
    settings.PANEL_BROKER_ADMIN_URL = "http://guest:guest@127.0.0.1:9"
    token = issue_join_token(name)
    answer = Client().post(
        "/nodes/agent/join/", {"node": name, "token": token}, content_type="application/json"
    )

    assert answer.status_code == 503
    assert "management API" in answer.json()["detail"]
    assert not Node.objects.filter(name=name).exists()
    assert JoinToken.objects.get(node_name=name).used is None
    settings.PANEL_BROKER_ADMIN_URL = reachable
    retried = Client().post(
        "/nodes/agent/join/", {"node": name, "token": token}, content_type="application/json"
    )
    assert retried.status_code == 200


def test_outside_make_run_and_tests_a_panel_on_redis_hands_no_node_its_redis(rabbit, settings):
    from panel.nodes.models import Node

    settings.CELERY_BROKER_URL = settings.REDIS_URL
    settings.DEVELOPMENT_MODE = False
    name = rabbit.node_name("npu-h")
    answer = Client().post(
        "/nodes/agent/join/", {"node": name, "token": issue_join_token(name)}, content_type="application/json"
    )

    assert answer.status_code == 503
    assert "RabbitMQ" in answer.json()["detail"]
    assert "redis://" not in answer.content.decode()
    assert not Node.objects.filter(name=name).exists()
