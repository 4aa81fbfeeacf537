"""Many nodes back at once (a switch up again, a panel that fell behind): their first metrics bring them
back online in one transaction with one announcement, whatever their number. Per node, 512 of them cost the
ingest a transaction, four channel-layer trips and a reload of the node cache each, and put it minutes
behind (bench/fleet.py at 512 nodes)."""

import asyncio
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from panel.monitoring import services
from panel.monitoring.metrics import store
from panel.monitoring.models import Alert
from panel.nodes.models import Node
from panel.nodes.services import mark_silent_nodes_offline
from tests.metric_batches import a_batch
from tests.panel_sockets import connect_as

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


@pytest.fixture
def silent_nodes(_wired_to_redis, settings):
    """A factory: n agent nodes the offline sweep marked offline, each with its open offline alert."""
    settings.REDIS_URL = _wired_to_redis
    made = []

    def make(n: int, prefix: str) -> list[Node]:
        long_ago = timezone.now() - timedelta(minutes=5)
        created = [
            Node.objects.create(
                name=f"{prefix}-{i}", transport="agent", status="online", last_heartbeat=long_ago
            )
            for i in range(n)
        ]
        made.extend(created)
        assert sorted(mark_silent_nodes_offline()) == sorted(node.name for node in created)
        services.nodes.forget()
        return created

    yield make
    store.client().delete(store.HEARTBEATS_DUE, store.HEARTBEATS_WRITE, store.FLEET_DUE)
    for node in made:
        store.forget_node(node.name)
        store.client().delete(store.heartbeat_key(node.name))
    services.nodes.forget()


def bring_back(nodes: list[Node]) -> int:
    """Ingest one batch of each node as one drain; returns the SQL statements it ran. The batched heartbeat
    write and the fleet summary are not due (their own timers), so what is counted is the coming back."""
    redis = store.client()
    redis.delete(store.HEARTBEATS_DUE)
    redis.set(store.HEARTBEATS_WRITE, "1", ex=60)
    redis.set(store.FLEET_DUE, "1", ex=60)
    with CaptureQueriesContext(connection) as queries:
        services.ingest_batches([a_batch(node.name, seq=1) for node in nodes])
    return len(queries)


def test_a_burst_back_online_costs_the_same_queries_for_3_nodes_as_for_24(silent_nodes):
    few, many = silent_nodes(3, "few"), silent_nodes(24, "many")
    assert Alert.objects.open().filter(key="agent_offline").count() == 27

    few_queries, many_queries = bring_back(few), bring_back(many)

    assert many_queries == few_queries, (few_queries, many_queries)
    assert set(Node.objects.values_list("status", flat=True)) == {"online"}
    assert not Alert.objects.open().exists()
    assert Alert.objects.filter(key="agent_offline", resolved_at__isnull=False).count() == 27


def test_a_node_back_online_once_is_not_brought_back_again_by_its_next_batch(silent_nodes):
    (node,) = silent_nodes(1, "again")
    bring_back([node])
    Node.objects.filter(pk=node.pk).update(status="offline")  # as if the sweep ran right after
    services.nodes.forget()
    bring_back([node])  # within HEARTBEAT_EVERY_S: the batched heartbeat write brings it back, not this
    assert Node.objects.get(pk=node.pk).status == "offline"


async def test_browsers_hear_each_node_back_and_each_alert_resolved(silent_nodes, alice):
    nodes = await database_sync_to_async(silent_nodes)(4, "heard")
    names = {node.name for node in nodes}
    fleet = await connect_as(alice, ["fleet", "alerts"])
    try:
        await database_sync_to_async(bring_back)(nodes)
        back, resolved = set(), set()
        async with asyncio.timeout(15):
            while back != names or resolved != names:
                data = await fleet.receive_json_from(timeout=15)
                for message in data if isinstance(data, list) else [data]:
                    if message.get("type") == "node.status" and message["status"] == "online":
                        back.add(message["node"])
                    if message.get("type") == "alert" and message["event"] == "resolved":
                        resolved.add(message["alert"]["node"])
                        assert message["open_unacknowledged"] == 0
    finally:
        await fleet.disconnect()


def test_a_batched_heartbeat_write_stamps_each_node_with_when_its_metrics_came(silent_nodes, monkeypatch):
    (node,) = silent_nodes(1, "stamped")
    bring_back([node])  # online again, its next batch is an ordinary one
    before = timezone.now()
    bring_back([node])  # taken by the drain now; the batched write is not due yet
    came = timezone.now()
    written_at = came + timedelta(seconds=2.9)  # the write comes with a later drain
    monkeypatch.setattr(services.timezone, "now", lambda: written_at)
    services.write_heartbeats()
    heard = Node.objects.get(pk=node.pk).last_heartbeat
    # Not the write's time: a node that lost power right after that batch was silent from then on.
    assert before - timedelta(seconds=1) <= heard <= came
