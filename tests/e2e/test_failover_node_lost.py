"""Failover off a lost node on the real stack (issue 37; panel/deployments/failover/replace.py): a replica's
node goes silent (the power: its engine killed, no heartbeat), the heartbeat sweep marks it offline and the
gateway leaves its instance out at once; past the bound the leader starts the replica again on the live node
through the rolling update's path (a surge first), with a `replica_moved` decision; the node's return moves
nothing back.

The in-process agent can be only one node (its identity is this process's environment), so the lost node,
`ghost`, has no agent: the replica is created on the live node as usual, then its engine is killed and its
row pointed at ghost's NPU as if it had run there. What follows is real: the sweep, the gateway's exclusion,
the reconcile loop, the launch on the live node by the agent over Celery and Redis, the streaming client.
The whole path with two real agents and a powered-off host is tests/faults/failover_scenarios.py
(node-power-off-failover) and bench/failover.py."""

import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

import panel.deployments.tasks  # noqa: F401  registers the panel's probe ingest on the shared app
from panel.catalog.models import ModelArtifact
from panel.core.domain.choices import DecisionKind
from panel.deployments.decision_models import Decision
from panel.deployments.models import Deployment
from panel.gateway.instances import failover
from panel.nodes.models import Node, Npu
from panel.nodes.services import mark_silent_nodes_offline
from tests.conftest import api_client_for
from tests.deployment_helpers import wait_for
from tests.e2e.test_gateway_disruptions import StreamingClient, replicas_running, sim_spec
from tests.gateway_helpers import key_for
from tests.integration.conftest import TEST_NODE
from workers.engine.running import runtime

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("own_ports", "fresh_gateway_state"),
]


def as_if_it_ran_on(row: Deployment, ghost: Node, sim_root) -> None:
    """The host under `row` loses power: its engine dies; the row says it ran on ghost's NPU 0."""
    record = runtime.load_record(str(sim_root), row.name)
    assert record is not None
    os.killpg(record.pid, signal.SIGKILL)
    spec = dict(row.spec)
    spec["parts"] = [{**part, "node": ghost.name} for part in spec["parts"]]
    nodes_runtime = (row.runtime or {}).get("nodes") or {}
    row.spec, row.runtime = spec, {"nodes": {ghost.name: nodes_runtime.get(TEST_NODE, {})}}
    row.save()
    row.nodes.set([ghost])
    row.npus.set([ghost.npus.get(npu_id=0)])


def on_node(name: str, node: str) -> bool:
    row = Deployment.objects.get(name=name)
    return row.observed_state == "running" and list(row.nodes.values_list("name", flat=True)) == [node]


@pytest.mark.usefixtures("reconcile_loop")
def test_a_replica_on_a_lost_node_is_started_on_the_live_one_and_stays_there(
    node_with_npus, celery_worker, tiny_model, bob, gateway, monkeypatch
):
    monkeypatch.setenv("SIM_ENGINE_START_DELAY", "0.3")
    monkeypatch.setenv("SIM_ENGINE_TOKEN_DELAY", "0.05")
    ghost = Node.objects.create(
        name="ghost", transport="agent", address="127.0.0.1", status="online", last_heartbeat=timezone.now()
    )
    Npu.objects.create(node=ghost, npu_id=0, chip_id=0, logic_id=0, name="910B3", hbm_total_mb=65536)
    model, folder = tiny_model
    # The model's copy on the live node: a move to another node goes where a copy is (placement).
    ModelArtifact.objects.create(model=model, node=node_with_npus, path=str(folder), ready=True)
    client = api_client_for(bob)
    created = client.put("/api/v1/deployments/chat/", sim_spec(model, folder, replicas=2), format="json")
    assert created.status_code == 201, created.json()
    wait_for(lambda: replicas_running(client, "chat", 2), 60, "two replicas running")

    with StreamingClient(gateway, key_for(bob)) as streaming:
        wait_for(lambda: len(streaming.results) >= 3, 30, "the client streaming")
        as_if_it_ran_on(Deployment.objects.get(name="chat-r2"), ghost, celery_worker.sim_root)
        # The live node heard from just now (the in-process agent sends no heartbeats), ghost 16 s ago.
        Node.objects.filter(pk=node_with_npus.pk).update(status="online", last_heartbeat=timezone.now())
        Node.objects.filter(pk=ghost.pk).update(last_heartbeat=timezone.now() - timedelta(seconds=16))
        assert mark_silent_nodes_offline() == ["ghost"]
        assert failover.exclusions()["chat-r2/0"] == {"cause": "node_offline", "node": "ghost"}
        wait_for(lambda: on_node("chat-r2", TEST_NODE), 120, "chat-r2 running on the live node")
        wait_for(lambda: replicas_running(client, "chat", 2), 60, "the surge removed")
        served = len(streaming.results)
        wait_for(lambda: len(streaming.results) >= served + 3, 30, "answers after the move")

        # The node comes back: nothing moves back to it.
        Node.objects.filter(pk=ghost.pk).update(status="online", last_heartbeat=timezone.now())
        failover.publish()
        moved = Decision.objects.filter(kind=DecisionKind.REPLICA_MOVED)
        wait_for(lambda: moved.get().outcome == "done", 30, "the move settled")
        served = len(streaming.results)
        wait_for(lambda: len(streaming.results) >= served + 10, 60, "answers with the node back")
    assert moved.count() == 1
    assert on_node("chat-r2", TEST_NODE)
    assert "chat-r2/0" not in failover.exclusions()
    decision = moved.get()
    assert (decision.deployment_name, decision.replica) == ("chat", "chat-r2")
    assert "chat-r2 ran on ghost, which has been silent for" in decision.reason
    assert decision.figures["silent_s"] >= 30
    # No request failed before its first byte; a stream the killed engine cut ended with an error event.
    unstarted = [r for r in streaming.failures() if r[0] != 200 or '"error"' not in r[2]]
    assert unstarted == [], unstarted[:3]
