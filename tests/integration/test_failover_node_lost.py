"""Failover's re-placement (panel/deployments/failover/replace.py) through the rolling update's own path, on
the panel's side: a node offline past the bound has its replicas started on an online node with free NPUs
and the model's copy (nothing is sent to the silent node), a `replica_moved` decision with its figures;
nothing moves back when the node returns; a disaggregated deployment's decode engine moves like a prefill
one. Agents are not involved: launches and stops are finished the way the ingest finishes them, the
reconcile tick is called by hand (tests/e2e/test_failover_node_lost.py runs it on real Celery and engines)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from panel.catalog.models import ModelArtifact
from panel.core.domain.choices import DecisionKind, NpuHealthState
from panel.deployments.decision_models import Decision
from panel.deployments.failover import replace
from panel.deployments.models import Rollout
from panel.gateway.instances import failover
from panel.nodes.models import Node, Npu
from panel.nodes.services import mark_silent_nodes_offline
from panel.operations.models import Operation
from tests.integration.test_deployment_apply import client, npu_node, put, spec, tiny
from tests.integration.test_deployment_replicas import advance, held, rows, settle
from tests.integration.test_deployment_roles import split, versions

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny", "versions"]  # fixtures used by name


@pytest.fixture
def second_node(tiny):
    """npu-b: online, four free NPUs and a ready copy of the model."""
    node = Node.objects.create(
        name="npu-b", transport="agent", status="online", address="10.2.0.2", last_heartbeat=timezone.now()
    )
    for logic_id in range(4):
        Npu.objects.create(
            node=node, npu_id=logic_id, logic_id=logic_id, name="910B3", hbm_total_mb=65536, numa_node=0
        )
    ModelArtifact.objects.create(model=tiny, node=node, path="/models/tiny-qwen", ready=True)
    return node


def silent(node: Node, seconds: float) -> None:
    """The node's last heartbeat `seconds` ago, then the heartbeat sweep (beat runs it every 2 s)."""
    Node.objects.filter(pk=node.pk).update(
        status="online", last_heartbeat=timezone.now() - timedelta(seconds=seconds)
    )
    assert mark_silent_nodes_offline() == [node.name]


def roll_to_the_end() -> Rollout:
    for _round in range(20):
        settle()
        rollout = advance()
        if rollout.status != "running":
            return rollout
    raise AssertionError("the move's rollout did not end")


def test_a_node_offline_past_the_bound_has_its_replica_moved_and_nothing_moves_back(
    client, tiny, npu_node, second_node
):
    npu_node.last_heartbeat = timezone.now()
    npu_node.save()
    assert put(client, "chat", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    settle()

    silent(npu_node, 20)  # offline (past 3 x 5 s), not yet past the bound: only the gateway acts
    assert failover.exclusions()["chat/0"] == {"cause": "node_offline", "node": "npu-a"}
    assert replace.step_all() == 0
    assert not Decision.objects.filter(kind=DecisionKind.REPLICA_MOVED).exists()

    Node.objects.filter(pk=npu_node.pk).update(last_heartbeat=timezone.now() - timedelta(seconds=40))
    sent_before = Operation.objects.filter(node=npu_node).count()
    assert replace.step_all() == 1
    decision = Decision.objects.get(kind=DecisionKind.REPLICA_MOVED)
    assert decision.figures["silent_s"] >= 40
    assert (decision.figures["offline_after_s"], decision.figures["moved_after_s"]) == (15.0, 30.0)
    assert "chat ran on npu-a, which has been silent for 4" in decision.reason
    assert roll_to_the_end().status == "succeeded"
    now = rows("chat")
    assert sorted(now) == ["chat"]  # the surge came and went
    assert list(now["chat"].nodes.values_list("name", flat=True)) == ["npu-b"]
    assert Operation.objects.filter(node=npu_node).count() == sent_before  # nothing sent to the silent node
    assert Decision.objects.get(pk=decision.pk).outcome == "done"

    # The node comes back: hysteresis, nothing moves back to it.
    Node.objects.filter(pk=npu_node.pk).update(status="online", last_heartbeat=timezone.now())
    for _tick in range(3):
        assert replace.step_all() == 0
        settle()
        advance()
    assert Decision.objects.filter(kind=DecisionKind.REPLICA_MOVED).count() == 1
    assert Rollout.objects.count() == 1
    assert list(rows("chat")["chat"].nodes.values_list("name", flat=True)) == ["npu-b"]
    assert "chat/0" not in failover.exclusions()


def test_a_decode_engine_on_a_failed_npu_is_moved_too(client, tiny, versions):
    assert put(client, "chat", split(prefill=1, decode=1)).status_code == 201
    settle()
    decode = rows("chat")["chat-d1"]
    (sick,) = decode.npus.all()
    Npu.objects.filter(pk=sick.pk).update(
        health_state=NpuHealthState.FAILED,
        health_reason={"signal": "health_word", "detail": "Critical", "by": "policy"},
        health_changed_at=timezone.now(),
    )
    assert replace.step_all() == 1
    rollout = Rollout.objects.get()
    assert rollout.todo == ["chat-d1"]
    decision = Decision.objects.get(kind=DecisionKind.REPLICA_MOVED)
    assert (decision.replica, decision.role) == ("chat-d1", "decode")
    assert roll_to_the_end().status == "succeeded"
    moved = rows("chat")
    assert sorted(moved) == ["chat", "chat-d1"]
    assert moved["chat-d1"].role == "decode"
    assert sick.logic_id not in held(moved["chat-d1"])
    assert moved["chat-d1"].spec["parts"][0]["launch"]["kv_transfer_config"]["kv_role"] == "kv_consumer"


def test_a_move_with_nowhere_to_go_is_recorded_once_as_failed(client, tiny, npu_node):
    assert put(client, "chat", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    settle()
    silent(npu_node, 40)  # lost, and no other node holds the model
    assert replace.step_all() == 0
    decision = Decision.objects.get(kind=DecisionKind.REPLICA_MOVED)
    assert decision.outcome == "failed"
    assert decision.outcome_parts[0]["text"].startswith("The move cannot be placed now")
    assert "No online node" in decision.outcome_parts[0]["params"]["why"]
    assert not Rollout.objects.exists()
    assert replace.step_all() == 0  # within RETRY_S: not again
    assert Decision.objects.filter(kind=DecisionKind.REPLICA_MOVED).count() == 1
    assert list(rows("chat")["chat"].nodes.values_list("name", flat=True)) == ["npu-a"]
