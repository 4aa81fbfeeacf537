"""A node, with its own broker user and key, speaks for another node or replays what it captured: every
line and task is refused and counted, the other node's rows are untouched, and it stays online."""

import json

import pytest

from panel.core.infra.refusals import rejected_by_reason
from tests.deployment_helpers import wait_for
from workers.contracts import utcnow
from workers.identity import inbox_line, seal_for_panel
from workers.task_names import INGEST_EVENTS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def refused(kind: str, reason: str) -> int:
    return rejected_by_reason().get((kind, reason), 0)


def beat(node: str) -> bytes:
    raw = {"node": node, "time": utcnow().isoformat(), "agent_version": "forged", "interval_s": 1}
    return json.dumps({"heartbeat": raw}).encode()


def metrics(node: str) -> bytes:
    host = {"cpu_pct": 99.0, "memory_used_mb": 1.0, "memory_total_mb": 2.0, "load1": 99.0}
    return json.dumps({"node": node, "samples": [{"time": utcnow().isoformat(), "host": host}]}).encode()


def sealed_with(key_of: str, signer: str, raw: bytes, kind: str) -> bytes:
    """A line signed with node `key_of`'s key (the attacker's), naming `signer`."""
    line = inbox_line(key_of, raw, kind=kind)
    return signer.encode() + line[line.index(b" ") :]


@pytest.mark.attack("impersonation")
@pytest.mark.reaches_other_node
def test_a_heartbeat_about_another_node_signed_with_the_attackers_key_is_refused(attacker, bystander):
    from panel.nodes.models import Node

    before = refused("heartbeat", "sender")
    attacker.push_line(inbox_line(attacker.name, beat(bystander.name), kind="heartbeat"), "heartbeat")
    wait_for(lambda: refused("heartbeat", "sender") > before, 30, "the heartbeat to be refused")
    assert Node.objects.get(name=bystander.name).agent_version != "forged"
    bystander.assert_online()


@pytest.mark.attack("impersonation")
@pytest.mark.reaches_other_node
def test_a_heartbeat_naming_the_other_node_as_signer_fails_its_signature(attacker, bystander):
    before = refused("heartbeat", "signature")
    line = sealed_with(attacker.name, bystander.name, beat(bystander.name), "heartbeat")
    attacker.push_line(line, "heartbeat")
    wait_for(lambda: refused("heartbeat", "signature") > before, 30, "the heartbeat to be refused")
    bystander.assert_online()


@pytest.mark.attack("impersonation")
@pytest.mark.reaches_other_node
def test_metrics_about_another_node_are_refused(attacker, bystander):
    from panel.monitoring.metrics import store

    before = refused("metrics", "sender")
    attacker.push_line(inbox_line(attacker.name, metrics(bystander.name)))
    wait_for(lambda: refused("metrics", "sender") > before, 30, "the metrics to be refused")
    latest = store.read_latest([bystander.name]).get(bystander.name)
    assert not latest or latest["host"]["cpu_pct"] != 99.0
    bystander.assert_online()


@pytest.mark.attack("impersonation")
@pytest.mark.reaches_other_node
def test_an_event_batch_for_another_nodes_operation_is_refused(attacker, bystander):
    from panel.nodes.models import Node
    from panel.operations.models import Operation

    node = Node.objects.get(name=bystander.name)
    operation = Operation.objects.create(
        kind="inventory", node=node, target=node.name, task_name="agent.inventory"
    )
    event = {"seq": 1, "time": utcnow().isoformat(), "kind": "state", "payload": {"state": "succeeded"}}
    batch = {"operation_id": str(operation.id), "node": node.name, "events": [event], "final_seq": 1}
    before = refused("event_batch", "sender")
    envelope = seal_for_panel(INGEST_EVENTS, node.name, batch, signer=attacker.name)

    attacker.send_task(INGEST_EVENTS, [envelope])

    wait_for(lambda: refused("event_batch", "sender") > before, 30, "the event batch to be refused")
    operation.refresh_from_db()
    assert operation.status != "succeeded"
    assert not operation.events.exists()
    bystander.assert_online()


@pytest.mark.attack("replay")
@pytest.mark.reaches_other_node
def test_another_nodes_captured_heartbeat_replayed_by_the_attacker_counts_once(attacker, bystander):
    captured = inbox_line(bystander.name, beat(bystander.name), kind="heartbeat")
    before = refused("heartbeat", "replayed")
    for _ in range(5):
        attacker.push_line(captured, "heartbeat")
    wait_for(lambda: refused("heartbeat", "replayed") >= before + 4, 30, "the replays to be refused")
    bystander.assert_online()


@pytest.mark.attack("replay")
def test_a_nodes_own_event_batch_sent_again_is_refused_as_a_replay(attacker, bystander):
    from panel.nodes.models import Node
    from panel.operations.models import Operation

    node = Node.objects.get(name=attacker.name)
    operation = Operation.objects.create(
        kind="inventory", node=node, target=node.name, task_name="agent.inventory"
    )
    event = {"seq": 1, "time": utcnow().isoformat(), "kind": "log", "payload": {"line": "once"}}
    envelope = seal_for_panel(
        INGEST_EVENTS, node.name, {"operation_id": str(operation.id), "node": node.name, "events": [event]}
    )
    before = refused("event_batch", "replayed")

    for _ in range(3):
        attacker.send_task(INGEST_EVENTS, [envelope])

    wait_for(lambda: refused("event_batch", "replayed") >= before + 2, 30, "the replays to be refused")
    assert operation.events.count() == 1
    bystander.assert_online()
