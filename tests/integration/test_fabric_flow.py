"""The NPU network check end to end: a node's check through its real agent and the sim's hccn_tool, the
gate before a two-node launch (each node's report made by the agent's probe on its own sim host, applied as
the ingest applies it), what the node page and the API show, and a failing check stopping the launch."""

import os
import time

import pytest
from django.db import transaction
from django.test import Client

from tests.conftest import api_client_for
from tests.integration.conftest import TEST_NODE
from workers.hosts import LocalRunner
from workers.sim import fabric as sim_fabric
from workers.sim.tree import create_host
from workers.steps.fabric import probe_fabric

pytestmark = pytest.mark.django_db


def make_node(name, address="", npus=8, **facts):
    from panel.nodes.models import Node, Npu

    node = Node.objects.create(name=name, transport="agent", address=address, facts=facts)
    for logic_id in range(npus):
        Npu.objects.create(
            node=node, npu_id=logic_id, logic_id=logic_id, name="910B3", hbm_total_mb=65536, numa_node=0
        )
    return node


def page_of(user, url):
    client = Client()
    client.force_login(user)
    return client.get(url).content.decode()


# --- one node, through its agent ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(240)
def test_a_nodes_check_runs_on_its_agent_and_its_page_shows_each_npu(celery_worker, bob, charlie):
    from panel.fabric.models import FabricCheck, NodeFabric

    make_node(TEST_NODE)
    sim_fabric.set_ip(celery_worker.sim_root, 2, present=False)
    client = Client()
    client.force_login(bob)
    response = client.post(f"/fabric/nodes/{TEST_NODE}/check/")
    assert response.status_code == 302
    assert response["Location"].startswith("/operations/")

    check = FabricCheck.objects.get()
    deadline = time.monotonic() + 180
    while check.status == "running" and time.monotonic() < deadline:
        time.sleep(0.3)
        check.refresh_from_db()
    assert check.status == "fail", check.verdict
    fabric = NodeFabric.objects.get(node__name=TEST_NODE)
    assert [row["device"] for row in fabric.npus] == list(range(8))
    assert [row["status"] for row in fabric.npus].count("pass") == 7
    assert (fabric.npus[2]["ip"], fabric.npus[2]["status"]) == (None, "fail")
    assert fabric.npus[0]["ip"] == sim_fabric.npu_ip(TEST_NODE, 0)

    page = page_of(charlie, f"/nodes/{TEST_NODE}/")
    assert 'data-testid="fabric-npus"' in page
    assert '<tr data-device="2" data-result="fail">' in page
    assert "-.-.-.-" in page
    assert "hccn_tool -i &lt;N&gt; -ip -s address" in page
    assert 'data-testid="check-fabric"' not in page  # charlie only views

    page = page_of(bob, f"/nodes/{TEST_NODE}/")
    assert 'data-testid="check-fabric"' in page


# --- the gate before a launch on two nodes --------------------------------------------------------------


@pytest.fixture
def two_hosts(tmp_path):
    """Two sim A2 hosts on one switch, known to the panel as nodes with two NPUs each."""
    roots = {}
    for index, name in enumerate(("fab-head", "fab-tail")):
        root = tmp_path / name
        create_host(root, "atlas-800i-a2", name)
        sim_fabric.join_switch(root, tmp_path / "switch")
        sim_fabric.set_host(root, host_ip=f"10.1.0.{index + 1}")
        make_node(name, address=f"10.1.0.{index + 1}", npus=2, hccl_ifname="eth0")
        roots[name] = root
    return roots


@pytest.fixture
def moe_model(tmp_path):
    from panel.catalog.models import Model
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    assert make_tiny([str(tmp_path / "ds"), "--arch", "deepseek_v2"]) == 0
    return Model.objects.create(name="tiny-ds", facts=inspect_model(tmp_path / "ds")), tmp_path / "ds"


def deploy_on_both(model, path, user):
    from panel.deployments.placement.planning import plan_request
    from panel.deployments.services import create_deployment

    body = {
        "name": "ds-pair",
        "model": model.pk,
        "path": str(path),
        "nodes": [{"node": "fab-head", "npus": [0, 1]}, {"node": "fab-tail", "npus": [0, 1]}],
        "tensor_parallel_size": 2,
        "data_parallel_size": 2,
    }
    return create_deployment(plan_request(body), user=user)


def pending(kind):
    from panel.operations.models import Operation

    return {op.node.name: op for op in Operation.objects.filter(kind=kind, status="pending")}


def run_agents(roots) -> int:
    """Do what each node's agent does with its pending fabric check: the probe on its sim host; the
    result is applied as the ingest applies a finished operation. Returns how many ran."""
    import asyncio

    from panel.operations.services import on_terminal

    ran = 0
    for name, operation in pending("fabric_check").items():
        root = roots[name]
        runner = LocalRunner(base_env={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"})
        request = operation.task_kwargs["request"]
        report = asyncio.run(probe_fabric(runner, request, str(root / "usr/local/Ascend")))
        operation.status, operation.result = "succeeded", {"report": report}
        operation.save()
        with transaction.atomic():
            on_terminal(operation)
        ran += 1
    return ran


def test_a_two_node_launch_waits_for_its_npu_network_and_then_goes_out(two_hosts, moe_model, bob):
    from panel.deployments.models import Deployment
    from panel.fabric.models import FabricCheck, NodeFabric

    deployment = deploy_on_both(*moe_model, bob)
    assert deployment.observed_state == "starting"
    assert "Checking the NPU network" in deployment.reason
    assert pending("deploy") == {}
    first = pending("fabric_check")
    assert set(first) == {"fab-head", "fab-tail"}
    request = first["fab-head"].task_kwargs["request"]
    assert (request["devices"], request["if_ip"], request["ifname"]) == ([0, 1], "10.1.0.1", "eth0")
    assert request["peers"] == [{"node": "fab-tail", "host_ip": "10.1.0.2", "npu_ips": [None, None]}]

    assert run_agents(two_hosts) == 2  # round 1 learns the addresses...
    second = pending("fabric_check")
    assert second["fab-head"].task_kwargs["request"]["peers"][0]["npu_ips"] == [
        sim_fabric.npu_ip("fab-tail", 0),
        sim_fabric.npu_ip("fab-tail", 1),
    ]
    assert run_agents(two_hosts) == 2  # ...round 2 pings them

    check = FabricCheck.objects.get()
    assert (check.status, check.round) == ("pass", 2)
    assert set(pending("deploy")) == {"fab-head", "fab-tail"}
    assert Deployment.objects.get(pk=deployment.pk).reason == ""
    head = NodeFabric.objects.get(node__name="fab-head")
    assert head.peers == ["fab-tail"]
    assert head.npus[1]["pings"][0]["loss_pct"] == 0.0
    assert head.interface["peers"] == [{"node": "fab-tail", "address": "10.1.0.2", "loss_pct": 0.0}]


def test_a_failing_npu_network_stops_the_launch_with_the_fix(two_hosts, moe_model, bob, charlie):
    from panel.deployments.models import Deployment

    sim_fabric.set_link(two_hosts["fab-tail"], 1, up=False)
    deployment = deploy_on_both(*moe_model, bob)
    while run_agents(two_hosts):
        pass

    failed = Deployment.objects.get(pk=deployment.pk)
    assert failed.observed_state == "failed"
    assert failed.reason.startswith("The NPU network check failed: fab-tail: the NIC link of NPU 1 is not UP")
    assert "hccn_tool -i <N> -link -g must say UP" in failed.reason
    assert pending("deploy") == {}
    assert [entry["check"] for entry in failed.runtime["fabric"]["failures"]] == ["npu_link", "npu_ping"]

    page = page_of(charlie, "/nodes/fab-tail/")
    assert '<tr data-device="1" data-result="fail">' in page
    assert '<tr data-device="0" data-result="pass">' in page
    api = api_client_for(charlie).get(f"/api/v1/deployments/{deployment.pk}/").json()
    assert api["status"] == "failed"
    assert "the NIC link of NPU 1 is not UP" in api["reason"]


def test_the_reason_and_checklist_read_in_chinese(two_hosts, moe_model, bob, charlie):
    sim_fabric.set_tls(two_hosts["fab-head"], 0, enabled=True)
    deploy_on_both(*moe_model, bob)
    while run_agents(two_hosts):
        pass
    client = Client()
    client.force_login(charlie)
    client.cookies["django_language"] = "zh-hans"
    page = client.get("/deployments/ds-pair/").content.decode()
    reason = (
        "NPU 网络检查未通过： fab-head NPU 0 的 TLS 开关为 1，其他 NPU 为 0：它们之间无法建链 — 请让所有节点"
    )
    assert reason in page
    node_page = client.get("/nodes/fab-head/").content.decode()
    assert "hccn_tool -i &lt;N&gt; -tls -s enable 0" in node_page
    assert "NPU 网络（HCCL 通信网络）" in node_page


def test_a_restart_while_checking_is_refused_and_the_reconcile_loop_waits(two_hosts, moe_model, bob):
    from panel.deployments.models import Deployment
    from panel.deployments.rollouts import reconcile
    from panel.deployments.services import DeploymentConflict, restart

    deployment = deploy_on_both(*moe_model, bob)
    with pytest.raises(DeploymentConflict):
        restart(Deployment.objects.get(pk=deployment.pk), user=bob)
    assert reconcile.tick()["launches"] == 0  # the check is the launch under way
    assert len(pending("fabric_check")) == 2


# --- the API --------------------------------------------------------------------------------------------


def test_the_api_starts_a_check_and_shows_each_nodes_result(two_hosts, bob, charlie):
    api = api_client_for(bob)
    refused = api.post("/api/v1/fabric-checks/", {"nodes": ["fab-head", "nowhere"]}, format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"nodes": ["No node named nowhere."]}
    assert (
        api_client_for(charlie)
        .post("/api/v1/fabric-checks/", {"nodes": ["fab-head"]}, format="json")
        .status_code
        == 403
    )
    assert api.get("/api/v1/node-fabrics/fab-head/").status_code == 404

    started = api.post("/api/v1/fabric-checks/", {"nodes": ["fab-head", "fab-tail"]}, format="json")
    assert started.status_code == 202
    assert started.json()["status"] == "running"
    assert len(started.json()["operations"]) == 2
    while run_agents(two_hosts):
        pass
    done = api.get(f"/api/v1/fabric-checks/{started.json()['id']}/").json()
    assert (done["status"], done["round"]) == ("pass", 2)
    assert done["checklist"][0]["detail"].startswith("4 NPUs on fab-head, fab-tail: addresses, links")
    node = api.get("/api/v1/node-fabrics/fab-tail/").json()
    assert (node["status"], node["peers"], len(node["npus"])) == ("pass", ["fab-head"], 2)

    alone = api.post("/api/v1/node-fabrics/fab-head/check/")
    assert alone.status_code == 202
    assert alone.json()["nodes"] == ["fab-head"]
    (operation,) = pending("fabric_check").values()
    assert operation.task_kwargs["request"] == {"devices": [0, 1], "peers": []}
