"""A heartbeat from an online, inventoried node is one conditional UPDATE, no lock and no transaction
(panel.nodes.services._beat_in_place); every heartbeat that changes what the panel knows still takes the
locked path and sends its signals: coming online, a row the offline sweep changed since it was read, an
agent installed over SSH taking over, a first inventory."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from panel.core.domain.choices import NodeStatus, NodeTransport
from panel.nodes.models import Node
from panel.nodes.services import record_heartbeat
from panel.nodes.signals import node_online
from workers.contracts import Heartbeat, utcnow

pytestmark = pytest.mark.django_db

NAME = "beat-node"


def beat(**fields) -> dict:
    return Heartbeat(node=NAME, time=utcnow(), agent_version="2.0", interval_s=2.0, **fields).model_dump(
        mode="json"
    )


@pytest.fixture
def online_node():
    return Node.objects.create(
        name=NAME,
        transport=NodeTransport.AGENT,
        status=NodeStatus.ONLINE,
        inventoried_at=timezone.now(),
        last_heartbeat=timezone.now() - timedelta(seconds=4),
        agent_version="1.0",
    )


@pytest.fixture
def came_online():
    seen = []

    def receiver(sender, node, **kwargs):
        seen.append(node.name)

    node_online.connect(receiver, weak=False)
    yield seen
    node_online.disconnect(receiver)


def test_a_steady_heartbeat_is_one_update_without_a_lock(online_node, came_online):
    before = online_node.last_heartbeat
    with CaptureQueriesContext(connection) as captured:
        node = record_heartbeat(beat(running=["op-1"], done=["op-0"]), signer=NAME, node=online_node)
    statements = [q["sql"] for q in captured.captured_queries]
    assert [sql.split()[0] for sql in statements] == ["UPDATE"], statements
    assert "FOR UPDATE" not in statements[0]
    stored = Node.objects.get(pk=online_node.pk)
    assert stored.last_heartbeat > before
    assert (stored.agent_version, stored.heartbeat_interval) == ("2.0", 2.0)
    assert (stored.agent_running, stored.agent_done) == (["op-1"], ["op-0"])
    assert node.last_heartbeat == stored.last_heartbeat
    assert came_online == []  # nothing changed that anyone must hear about


def test_the_central_agents_probe_for_an_ssh_node_leaves_the_agents_leases_alone(online_node):
    Node.objects.filter(pk=online_node.pk).update(transport=NodeTransport.SSH, agent_running=["kept"])
    online_node.refresh_from_db()
    record_heartbeat(beat(running=["other"]), signer="central", node=online_node)
    stored = Node.objects.get(pk=online_node.pk)
    assert stored.transport == NodeTransport.SSH
    assert stored.agent_running == ["kept"]
    assert stored.agent_version == "2.0"


def test_an_offline_node_comes_back_through_the_locked_path_and_is_announced(online_node, came_online):
    Node.objects.filter(pk=online_node.pk).update(status=NodeStatus.OFFLINE)
    online_node.refresh_from_db()
    with CaptureQueriesContext(connection) as captured:
        record_heartbeat(beat(), signer=NAME, node=online_node)
    assert any("FOR UPDATE" in q["sql"] for q in captured.captured_queries) or connection.vendor == "sqlite"
    assert Node.objects.get(pk=online_node.pk).status == NodeStatus.ONLINE
    assert came_online == [NAME]


def test_a_row_the_offline_sweep_changed_after_it_was_read_is_not_overwritten_blindly(
    online_node, came_online
):
    Node.objects.filter(pk=online_node.pk).update(status=NodeStatus.OFFLINE)  # online_node still says online
    record_heartbeat(beat(), signer=NAME, node=online_node)
    assert Node.objects.get(pk=online_node.pk).status == NodeStatus.ONLINE
    assert came_online == [NAME]  # the locked path saw it offline and announced the return


def test_an_agent_installed_over_ssh_takes_over_through_the_locked_path(online_node):
    Node.objects.filter(pk=online_node.pk).update(transport=NodeTransport.SSH)
    online_node.refresh_from_db()
    record_heartbeat(beat(running=["op-9"]), signer=NAME, node=online_node)
    stored = Node.objects.get(pk=online_node.pk)
    assert stored.transport == NodeTransport.AGENT
    assert stored.agent_running == ["op-9"]


def test_without_the_row_given_it_is_read_once_and_an_unknown_node_is_ignored(online_node):
    with CaptureQueriesContext(connection) as captured:
        record_heartbeat(beat(), signer=NAME)
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["SELECT", "UPDATE"]
    assert record_heartbeat({**beat(), "node": "no-such-node"}, signer="no-such-node") is None
