"""Orchestration of a two-node data-parallel deployment, decided on the panel: head and follower launches
(after their NPU network check passed), running only once both are up, a failed follower restarting the
pair, and a stop that ends on both nodes. Agents are not involved: operation outcomes are applied the way
the ingest applies them."""

import pytest

from tests.conftest import api_client_for
from tests.fabric_helpers import network_checked

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_nodes():
    from panel.nodes.models import Node, Npu

    nodes = []
    for index, name in enumerate(("head-node", "follower-node")):
        node = Node.objects.create(name=name, transport="agent", address=f"10.1.0.{index + 1}")
        for logic_id in range(2):
            Npu.objects.create(
                node=node, npu_id=logic_id, logic_id=logic_id, name="910B3", hbm_total_mb=65536, numa_node=0
            )
        nodes.append(node)
    return nodes


def request_body(model, path):
    return {
        "name": "ds-two",
        "model": model.pk,
        "path": str(path),
        "nodes": [{"node": "head-node", "npus": [0, 1]}, {"node": "follower-node", "npus": [0, 1]}],
        "tensor_parallel_size": 2,
        "data_parallel_size": 2,
    }


def finish(operation, status, result=None, error=""):
    from django.db import transaction

    from panel.deployments.rollouts.reconcile import on_operation_terminal

    operation.status, operation.result, operation.error = status, result or {}, error
    operation.save()
    with transaction.atomic():
        on_operation_terminal(operation)


def operations(kind):
    from panel.operations.models import Operation

    pending = list(Operation.objects.filter(kind=kind, status="pending"))
    by_node = {op.node.name: op for op in pending}
    assert len(by_node) == len(pending), "one pending operation of a kind per node"
    return by_node


def test_the_review_shows_a_head_and_a_headless_follower(two_nodes, moe_model, bob):
    model, path = moe_model
    review = api_client_for(bob).post("/api/v1/deployments/plan/", request_body(model, path), format="json")
    assert review.status_code == 200, review.json()
    head, follower = review.json()["nodes"]
    assert (head["role"], follower["role"]) == ("head", "follower")
    assert "--headless" in follower["argv"]
    assert follower["argv"][follower["argv"].index("--data-parallel-start-rank") + 1] == "1"
    assert head["argv"][head["argv"].index("--data-parallel-address") + 1] == "10.1.0.1"
    assert follower["env"]["HCCL_IF_IP"] == "10.1.0.2"


def test_two_nodes_start_as_one_and_stop_as_one(two_nodes, moe_model, bob):
    from panel.deployments.models import Deployment
    from panel.deployments.placement.planning import plan_request
    from panel.deployments.services import create_deployment, stop

    model, path = moe_model
    deployment = create_deployment(plan_request(request_body(model, path)), user=bob)
    network_checked()
    launches = operations("deploy")
    assert set(launches) == {"head-node", "follower-node"}
    assert deployment.observed_state == "starting"

    finish(launches["head-node"], "succeeded", {"runtime": {"pid": 100, "port": 8000, "log_path": "/h.log"}})
    assert Deployment.objects.get(pk=deployment.pk).observed_state == "starting"  # the follower is not up
    finish(
        launches["follower-node"], "succeeded", {"runtime": {"pid": 200, "port": 8000, "log_path": "/f.log"}}
    )
    assert Deployment.objects.get(pk=deployment.pk).observed_state == "running"

    stop(Deployment.objects.get(pk=deployment.pk), user=bob)
    stops = operations("stop")
    assert set(stops) == {"head-node", "follower-node"}
    assert stops["follower-node"].params["deployment"] == deployment.pk
    finish(stops["head-node"], "succeeded")
    assert Deployment.objects.get(pk=deployment.pk).observed_state == "stopping"
    finish(stops["follower-node"], "succeeded")
    assert Deployment.objects.get(pk=deployment.pk).observed_state == "stopped"


def test_a_failed_follower_stops_the_head_and_schedules_a_restart(two_nodes, moe_model, bob):
    from panel.deployments.models import Deployment
    from panel.deployments.placement.planning import plan_request
    from panel.deployments.services import create_deployment

    model, path = moe_model
    deployment = create_deployment(plan_request(request_body(model, path)), user=bob)
    network_checked()
    launches = operations("deploy")
    finish(launches["head-node"], "succeeded", {"runtime": {"pid": 100, "port": 8000, "log_path": "/h.log"}})
    finish(launches["follower-node"], "failed", error="the engine exited during start-up")

    failed = Deployment.objects.get(pk=deployment.pk)
    assert failed.observed_state == "unhealthy"
    assert failed.failed_restarts == 1
    assert failed.next_restart_at is not None
    assert "exited" in failed.reason
    assert set(operations("stop")) == {"head-node", "follower-node"}


def test_restart_stops_every_node_then_launches_again_and_a_stopped_one_just_starts(
    two_nodes, moe_model, bob
):
    from panel.deployments.models import Deployment
    from panel.deployments.placement.planning import plan_request
    from panel.deployments.services import create_deployment, restart

    model, path = moe_model
    deployment = create_deployment(plan_request(request_body(model, path)), user=bob)
    network_checked()
    for node, launch in operations("deploy").items():
        finish(launch, "succeeded", {"runtime": {"pid": 100, "port": 8000, "log_path": f"/{node}.log"}})

    restart(Deployment.objects.get(pk=deployment.pk), user=bob)
    assert Deployment.objects.get(pk=deployment.pk).observed_state == "stopping"
    for stop_operation in operations("stop").values():
        finish(stop_operation, "succeeded")
    network_checked()
    again = Deployment.objects.get(pk=deployment.pk)
    assert again.observed_state == "starting"
    assert again.restart_count == 1
    assert set(operations("deploy")) == {"head-node", "follower-node"}

    for launch in operations("deploy").values():
        finish(launch, "failed", error="stopped by the test")
    for stop_operation in operations("stop").values():
        finish(stop_operation, "succeeded")
    Deployment.objects.filter(pk=deployment.pk).update(observed_state="stopped", desired_state="stopped")
    restart(Deployment.objects.get(pk=deployment.pk), user=bob)
    assert Deployment.objects.get(pk=deployment.pk).observed_state == "starting"
    network_checked()
    assert set(operations("deploy")) == {"head-node", "follower-node"}
