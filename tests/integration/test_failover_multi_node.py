"""A multi-node replica (one DP engine over two nodes) is re-placed as a whole by the failover
(panel/deployments/failover/replace.py `_whole`): a part on a lost node or on a failed NPU re-plans every
part, on online nodes with free healthy NPUs (its own nodes first), with a surge copy first only where two
copies fit (policy.surge_room). Agents are not involved: the NPU network checks, launches and stops are
finished the way the ingest finishes them, the reconcile tick is called by hand."""

from datetime import timedelta

import pytest
from django.utils import timezone

from panel.core.domain.choices import DecisionKind, NpuHealthState
from panel.deployments.decision_models import Decision
from panel.deployments.failover import replace
from panel.deployments.models import Deployment, Rollout
from panel.nodes.models import Node, Npu
from panel.nodes.services import mark_silent_nodes_offline
from panel.operations.models import Operation
from tests.fabric_helpers import network_checked
from tests.integration.test_deployment_replicas import advance, settle

pytestmark = pytest.mark.django_db

NAME = "ds-two"


def make_nodes(count: int, npus: int) -> list[Node]:
    nodes = []
    for index in range(count):
        node = Node.objects.create(
            name=f"n{index + 1}",
            transport="agent",
            address=f"10.1.0.{index + 1}",
            status="online",
            last_heartbeat=timezone.now(),
        )
        for logic_id in range(npus):
            Npu.objects.create(
                node=node, npu_id=logic_id, logic_id=logic_id, name="910B3", hbm_total_mb=65536, numa_node=0
            )
        nodes.append(node)
    return nodes


def running_on_two(moe_model, bob) -> Deployment:
    """ds-two: TP 2, DP 2 over n1 and n2 (NPUs 0 and 1 of each), running."""
    from panel.catalog.models import ModelArtifact
    from panel.deployments.placement.planning import plan_request
    from panel.deployments.services import create_deployment

    model, path = moe_model
    for node in Node.objects.all():  # the model's copy on every node: a move goes where one is
        ModelArtifact.objects.create(model=model, node=node, path=str(path), ready=True)
    body = {
        "name": NAME,
        "model": model.pk,
        "path": str(path),
        "nodes": [{"node": "n1", "npus": [0, 1]}, {"node": "n2", "npus": [0, 1]}],
        "tensor_parallel_size": 2,
        "data_parallel_size": 2,
    }
    create_deployment(plan_request(body), user=bob)
    roll()
    return Deployment.objects.get(name=NAME)


def roll() -> None:
    """Pass the network checks, finish launches and stops, tick: until nothing is pending or running."""
    for _round in range(30):
        network_checked()
        settle()
        if not Rollout.objects.filter(status="running").exists():
            return
        advance()
    raise AssertionError("the move's rollout did not end")


def lose(node: Node) -> None:
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now() - timedelta(seconds=40))
    assert mark_silent_nodes_offline() == [node.name]


def parts(row: Deployment) -> dict[str, list[int]]:
    return {part["node"]: part["launch"]["logic_ids"] for part in row.spec["parts"]}


def test_a_part_on_a_lost_node_moves_the_whole_replica_with_a_surge_where_two_copies_fit(moe_model, bob):
    _n1, n2, _n3, _n4 = make_nodes(4, 4)
    row = running_on_two(moe_model, bob)
    assert parts(row) == {"n1": [0, 1], "n2": [0, 1]}
    lose(n2)
    assert replace.step_all() == 1
    rollout = Rollout.objects.get()
    assert rollout.spec["surge"] is True  # n1 has 2 free, n3 and n4 4 each: two copies fit
    decision = Decision.objects.get(kind=DecisionKind.REPLICA_MOVED)
    assert "every part is placed again, as a whole" in decision.reason
    roll()
    assert Rollout.objects.get().status == "succeeded"
    assert Operation.objects.filter(target=f"{NAME}-r2", kind="deploy").exists()  # the surge came first
    moved = Deployment.objects.get(name=NAME)
    # Its own NPUs on n1 kept, n3's other two (the surge held 0 and 1), the lost n2 left.
    assert parts(moved) == {"n1": [0, 1], "n3": [2, 3]}
    assert moved.observed_state == "running"
    assert sorted(moved.spec["parts"][i]["role"] for i in range(2)) == ["follower", "head"]
    assert not Deployment.objects.filter(name=f"{NAME}-r2").exists()
    assert not Operation.objects.filter(node=n2).exclude(kind__in=["deploy", "fabric_check"]).exists()
    assert [e["name"] for e in Node.objects.get(pk=n2.pk).left_engines] == [NAME]  # stopped on its return


def test_without_room_for_two_copies_the_replica_is_replaced_at_once(moe_model, bob):
    _n1, n2, _n3 = make_nodes(3, 2)
    running_on_two(moe_model, bob)
    lose(n2)
    assert replace.step_all() == 1
    assert Rollout.objects.get().spec["surge"] is False
    roll()
    assert Rollout.objects.get().status == "succeeded"
    assert not Operation.objects.filter(target=f"{NAME}-r2").exists()
    moved = Deployment.objects.get(name=NAME)
    assert parts(moved) == {"n1": [0, 1], "n3": [0, 1]}
    assert moved.observed_state == "running"


def test_a_failed_npu_of_one_part_re_places_every_part_off_it(moe_model, bob):
    """A link down on n2's NPU 1 (the same path as a lost node): the whole replica is planned again, n2
    keeping its part on healthy NPUs (no room for two copies on two nodes of four NPUs: in place)."""
    make_nodes(2, 4)
    running_on_two(moe_model, bob)
    Npu.objects.filter(node__name="n2", logic_id=1).update(
        health_state=NpuHealthState.FAILED,
        health_reason={"signal": "link_down", "detail": "down 31 s", "by": "policy"},
        health_changed_at=timezone.now(),
    )
    assert replace.step_all() == 1
    roll()
    assert Rollout.objects.get().status == "succeeded"
    moved = Deployment.objects.get(name=NAME)
    assert moved.observed_state == "running"
    now = parts(moved)
    assert sorted(now) == ["n1", "n2"]  # its own nodes still fit
    assert 1 not in now["n2"]
    assert len(now["n2"]) == 2
