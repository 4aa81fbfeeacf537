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
from panel.deployments.failover import fence, replace
from panel.deployments.models import Rollout
from panel.gateway.instances import failover
from panel.nodes.models import Node, Npu
from panel.nodes.services import mark_silent_nodes_offline, record_heartbeat
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


def serving_on(client, npu_node) -> None:
    """`chat` on one NPU of npu-a, which has just heartbeated, settled."""
    npu_node.last_heartbeat = timezone.now()
    npu_node.save()
    assert put(client, "chat", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    settle()


def test_a_node_offline_past_the_bound_has_its_replica_moved_and_nothing_moves_back(
    client, tiny, npu_node, second_node
):
    serving_on(client, npu_node)

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


def test_a_node_cut_off_that_returns_has_the_moved_replicas_old_engine_stopped_not_the_serving_one(
    client, tiny, npu_node, second_node
):
    serving_on(client, npu_node)
    old_runtime = rows("chat")["chat"].runtime["nodes"]["npu-a"]
    silent(npu_node, 40)
    assert replace.step_all() == 1
    assert roll_to_the_end().status == "succeeded"
    assert list(rows("chat")["chat"].nodes.values_list("name", flat=True)) == ["npu-b"]
    # Nothing was sent to the silent node; what may still run there is noted on it.
    assert not Operation.objects.filter(node=npu_node).exclude(kind="deploy").exists()
    (left,) = Node.objects.get(pk=npu_node.pk).left_engines
    assert (left["name"], left["moved_to"], left["silent"]) == ("chat", ["npu-b"], True)

    # Its agent heartbeats again (it was cut off, not powered off): the old engine there is stopped, by its
    # very pid; the row serving on npu-b is left alone, and nothing moves back.
    record_heartbeat(
        {"node": "npu-a", "time": timezone.now().isoformat(), "agent_version": "t"}, signer="npu-a"
    )
    (fenced,) = Operation.objects.filter(node=npu_node, kind="stop")
    assert fenced.target == "chat@npu-a"
    assert fenced.task_kwargs["payload"]["name"] == "chat"
    assert fenced.task_kwargs["payload"]["runtime"]["pid"] == old_runtime["pid"]
    assert not Operation.objects.filter(node=second_node, kind="stop", status="pending").exists()
    decision = Decision.objects.get(kind=DecisionKind.ENGINE_FENCED)
    assert decision.reason.startswith("chat was moved off npu-a while the node was silent; npu-a is back")
    assert Node.objects.get(pk=npu_node.pk).left_engines == []
    settle()  # the fence's stop ends: the serving row does not take it for one of its own
    assert rows("chat")["chat"].observed_state == "running"
    for _tick in range(3):
        assert replace.step_all() == 0
        advance()
    assert list(rows("chat")["chat"].nodes.values_list("name", flat=True)) == ["npu-b"]
    assert Decision.objects.filter(kind=DecisionKind.ENGINE_FENCED).count() == 1  # once, not every beat


def test_a_row_placed_on_the_returned_node_again_is_not_fenced(client, tiny, npu_node, second_node):
    assert put(client, "chat", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    settle()
    row = rows("chat")["chat"]
    Node.objects.filter(pk=npu_node.pk).update(
        left_engines=[{"name": "chat", "runtime_kind": "process", "runtime": {}, "moved_to": ["npu-b"]}]
    )
    fence.fence(Node.objects.get(pk=npu_node.pk))  # it heartbeats again
    assert not Operation.objects.filter(node=npu_node, kind="stop").exists()
    assert not Decision.objects.filter(kind=DecisionKind.ENGINE_FENCED).exists()
    assert rows("chat")["chat"].pk == row.pk


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


def test_a_replica_on_a_failed_npu_whose_restart_is_due_is_moved_not_started_there_again(
    client, tiny, npu_node, second_node
):
    from panel.deployments.models import Deployment
    from panel.deployments.rollouts.reconcile import tick

    serving_on(client, npu_node)
    row = rows("chat")["chat"]
    # Its chip left npu-smi: the engine died with it, the probe found it dead, a restart is due.
    row.npus.update(
        health_state=NpuHealthState.FAILED,
        health_changed_at=timezone.now(),
        health_reason={"signal": "chip_gone"},
    )
    Deployment.objects.filter(pk=row.pk).update(
        observed_state="unhealthy", next_restart_at=timezone.now() - timedelta(seconds=1)
    )
    tick()
    assert Decision.objects.filter(kind=DecisionKind.REPLICA_MOVED).count() == 1
    # No launch of the old plan on the failed chip: the move's surge is the only launch sent.
    (launch,) = Operation.objects.filter(kind="deploy", status="pending")
    assert launch.target.startswith("chat-r"), launch.target
    assert not rows(launch.target)[launch.target].npus.filter(health_state=NpuHealthState.FAILED).exists()
