"""Each node's lines fail alone, attacked with a node's own broker user and key on the real broker and the
real panel worker, while another node beats every half second and must stay online throughout: poison
lines signed by the attacker, unsigned junk and signed floods on the metrics path, heartbeats claiming the
other node, a `user_id` that is not the attacker's, and thousands of connections or channels."""

import json

import amqp
import pytest
from kombu import Connection

from panel.core.infra.refusals import rejected_by_reason
from tests.deployment_helpers import wait_for
from workers.contracts import utcnow
from workers.identity import inbox_line

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def refused(kind: str, reason: str) -> int:
    return rejected_by_reason().get((kind, reason), 0)


def beat(node: str, **fields) -> bytes:
    raw = {"node": node, "time": utcnow().isoformat(), "agent_version": "1", "interval_s": 1, **fields}
    return json.dumps({"heartbeat": raw}).encode()


def metrics(node: str, time: str | None = None) -> bytes:
    host = {"cpu_pct": 3.0, "memory_used_mb": 1.0, "memory_total_mb": 2.0, "load1": 0.1}
    sample = {"time": time or utcnow().isoformat(), "host": host, "npus": []}
    return json.dumps({"node": node, "samples": [sample], "seq": 1}).encode()


POISON = {
    "over-long-field": lambda name: (beat(name, agent_version="v" * 100_000), "heartbeat"),
    "interval-1e14": lambda name: (beat(name, interval_s=1e14), "heartbeat"),
    "year-one": lambda name: (metrics(name, time="0001-01-01T00:00:00+00:00"), "metrics"),
    "nan": lambda name: (metrics(name).replace(b"3.0", b"NaN"), "metrics"),
}


@pytest.mark.attack("poison-lines")
@pytest.mark.parametrize("poison", POISON)
def test_a_nodes_signed_poison_line_is_refused_alone(poison, attacker, bystander):
    from panel.nodes.models import Node

    before = refused("metrics", "malformed")
    raw, kind = POISON[poison](attacker.name)
    for _ in range(20):
        attacker.push_line(
            inbox_line(attacker.name, raw, kind=kind), "heartbeat" if kind == "heartbeat" else "metrics"
        )

    wait_for(lambda: refused("metrics", "malformed") >= before + 20, 30, "the poison lines to be refused")
    row = Node.objects.get(name=attacker.name)
    assert row.heartbeat_interval == 5.0
    assert row.last_heartbeat is None
    bystander.assert_online()


@pytest.mark.attack("flood")
def test_unsigned_junk_flooding_the_metrics_queue_keeps_no_other_node_offline(attacker, bystander):
    before = refused("metrics", "malformed") + refused("metrics", "rate")
    for n in range(5000):
        attacker.push_line(b"junk %d {" % n)

    wait_for(
        lambda: refused("metrics", "malformed") + refused("metrics", "rate") >= before + 5000, 60, "the junk"
    )
    bystander.assert_online()


@pytest.mark.attack("flood")
def test_signed_lines_past_a_nodes_rate_are_dropped_unread(attacker, bystander, settings):
    import time

    rate, burst = settings.PANEL_INGEST_METRICS_PER_S, settings.PANEL_INGEST_METRICS_PER_S * 5
    before = refused("metrics", "rate")
    started = time.monotonic()
    for _ in range(1000):
        attacker.push_line(inbox_line(attacker.name, metrics(attacker.name)))
    # What the bucket lets through: its burst, and its rate while the flood is sent and drained.
    let_through = burst + rate * (time.monotonic() - started + 5)

    wait_for(
        lambda: refused("metrics", "rate") >= before + 1000 - let_through, 60, "the lines past the rate to go"
    )
    bystander.assert_online()


@pytest.mark.attack("flood")
@pytest.mark.reaches_other_node
def test_heartbeats_naming_another_node_spend_the_attackers_own_rate(attacker, bystander):
    before = refused("metrics", "rate")
    for _ in range(500):  # signed by nobody's key, claiming the bystander, on the attacker's own user
        attacker.push_line(b"%s 0/0 %s" % (bystander.name.encode(), beat(bystander.name)), "heartbeat")

    wait_for(lambda: refused("metrics", "rate") >= before + 400, 30, "the flood to be dropped at its rate")
    bystander.assert_online()


@pytest.mark.attack("broker-limits")
@pytest.mark.reaches_other_node
def test_a_node_cannot_publish_as_another_nodes_broker_user(attacker, bystander):
    from panel.nodes.agents.broker_admin import node_user

    with Connection(attacker.url) as connection:
        channel = connection.default_channel
        channel.confirm_select()
        message = amqp.Message(b"line", user_id=node_user(bystander.name))
        with pytest.raises(amqp.exceptions.PreconditionFailed):
            channel.basic_publish_confirm(message, exchange="ingest", routing_key="heartbeat")
    bystander.assert_online()


REFUSED_BY_THE_BROKER = (amqp.exceptions.NotAllowed, amqp.exceptions.ConnectionForced, ConnectionError)


def open_connections(url: str, n: int, opened: list) -> None:
    for _ in range(n):
        connection = Connection(url, connect_timeout=5)
        connection.connect()
        connection.default_channel.basic_qos(0, 1, False)
        opened.append(connection)


def open_channels(client, n: int) -> None:
    for _ in range(n):
        client.channel()


@pytest.mark.attack("broker-limits")
def test_a_node_cannot_hold_more_connections_than_its_limit(attacker, settings):
    opened = []
    try:
        with pytest.raises(REFUSED_BY_THE_BROKER):
            open_connections(attacker.url, settings.PANEL_BROKER_NODE_MAX_CONNECTIONS + 5, opened)
        assert len(opened) <= settings.PANEL_BROKER_NODE_MAX_CONNECTIONS
    finally:
        for connection in opened:
            connection.release()


@pytest.mark.attack("broker-limits")
def test_a_node_cannot_open_more_channels_than_its_limit(attacker, settings):
    with Connection(attacker.url, connect_timeout=5) as connection:
        connection.connect()
        with pytest.raises(REFUSED_BY_THE_BROKER):
            open_channels(connection.connection, settings.PANEL_BROKER_NODE_MAX_CHANNELS + 5)


@pytest.mark.attack("broker-limits")
@pytest.mark.reaches_other_node
def test_a_node_cannot_read_another_nodes_queue_counts_with_a_passive_declare(attacker, bystander):
    from panel.nodes.agents.broker_admin import node_user, passive_declares_checked

    if not passive_declares_checked():
        pytest.skip("this RabbitMQ answers passive declares without a permission check (fixed in 4.2.6)")
    with Connection(attacker.url) as connection, pytest.raises(amqp.exceptions.AccessRefused):
        connection.default_channel.queue_declare(node_user(bystander.name), passive=True)


def test_a_join_sets_the_node_users_limits(rabbit, attacker, settings):
    from panel.nodes.agents.broker_admin import node_user

    limits = rabbit.api("GET", f"/api/user-limits/{node_user(attacker.name)}").json()
    assert limits[0]["value"] == {
        "max-connections": settings.PANEL_BROKER_NODE_MAX_CONNECTIONS,
        "max-channels": settings.PANEL_BROKER_NODE_MAX_CHANNELS,
    }


def test_closing_a_test_broker_deletes_the_users_it_gave_rights_to_whatever_their_name():
    from urllib.parse import quote

    from tests.rabbitmq import scratch_broker

    broker = scratch_broker("cleanup")
    stray = "node.fixed-name-for-cleanup"
    broker.api("PUT", f"/api/users/{stray}", json={"password": "x", "tags": ""})
    rights = {"configure": "^$", "write": "^$", "read": "^$"}
    broker.api("PUT", f"/api/permissions/{quote(broker.vhost, safe='')}/{stray}", json=rights)

    broker.close()

    assert broker.api("GET", f"/api/users/{stray}").status_code == 404
    assert broker.api("GET", "/api/whoami").status_code == 200  # the administrator is still there
