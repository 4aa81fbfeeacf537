"""The NPU network check end to end: a node's check through its real agent and the sim's hccn_tool, the
gate before a two-node launch (each node's report made by the agent's probe on its own sim host, applied as
the ingest applies it), what the node page and the API show, and a failing check stopping the launch."""

import os
import time

import pytest
from django.db import transaction
from django.test import Client

from tests.conftest import api_client_for
from tests.fabric_helpers import hosts_on_one_switch, sim_path
from tests.integration.conftest import TEST_NODE
from workers.hosts import LocalRunner
from workers.sim import fabric as sim_fabric
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
    roots = hosts_on_one_switch(tmp_path, ("fab-head", "fab-tail"), "10.1.0")
    for index, name in enumerate(roots):
        make_node(name, address=f"10.1.0.{index + 1}", npus=2, hccl_ifname="eth0")
    return roots


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


class Recorded(LocalRunner):
    """A runner that notes each command it runs (the tool's name and its arguments)."""

    def __init__(self, commands: list, **kwargs):
        super().__init__(**kwargs)
        self.commands = commands

    async def run(self, argv, **kwargs):
        self.commands.append([os.path.basename(argv[0]), *argv[1:]])
        return await super().run(argv, **kwargs)


def answer(operation, result) -> None:
    """End a node's fabric check operation with `result`, applied as the ingest applies it."""
    from panel.operations.services import on_terminal

    operation.status, operation.result = "succeeded", result
    operation.save()
    with transaction.atomic():
        on_terminal(operation)


def run_agents(roots, commands: list | None = None) -> int:
    """Do what each node's agent does with its pending fabric check: the probe on its sim host; the
    result is applied as the ingest applies a finished operation. Returns how many ran; `commands` gets
    each command the agents ran."""
    import asyncio

    ran = 0
    for name, operation in pending("fabric_check").items():
        root = roots[name]
        runner = Recorded([] if commands is None else commands, base_env=sim_path(root))
        request = operation.task_kwargs["request"]
        report = asyncio.run(probe_fabric(runner, request, str(root / "usr/local/Ascend")))
        answer(operation, {"report": report})
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
    assert second["fab-head"].task_kwargs["request"]["pings_only"] == [0, 1]
    commands = []
    assert run_agents(two_hosts, commands) == 2  # ...round 2 pings them, and only pings
    ran = [argv for argv in commands if argv[1:] != ["-h"]]  # the agent's look for hccn_tool aside
    assert [argv[0] for argv in ran] == ["hccn_tool"] * 4, ran  # each node's two NPUs, one peer each
    assert all("-ping" in argv for argv in ran), ran

    check = FabricCheck.objects.get()
    assert (check.status, check.round) == ("pass", 2)
    assert set(pending("deploy")) == {"fab-head", "fab-tail"}
    assert Deployment.objects.get(pk=deployment.pk).reason == ""
    head = NodeFabric.objects.get(node__name="fab-head")
    assert head.peers == ["fab-tail"]
    assert head.npus[1]["pings"][0]["loss_pct"] == 0.0
    assert (head.npus[1]["ip"], head.npus[1]["link"]) == (sim_fabric.npu_ip("fab-head", 1), "UP")  # round 1's
    assert head.interface["peers"] == [{"node": "fab-tail", "address": "10.1.0.2", "loss_pct": 0.0}]


def test_npu_addresses_the_inventories_reported_are_pinged_in_one_round(two_hosts, moe_model, bob):
    from panel.fabric.models import FabricCheck
    from panel.nodes.models import Node

    for name in two_hosts:  # what each agent's inventory read (workers.inventory)
        node = Node.objects.get(name=name)
        node.facts = {**node.facts, "npu_roce_ips": {str(d): sim_fabric.npu_ip(name, d) for d in range(8)}}
        node.save()
    deploy_on_both(*moe_model, bob)
    request = pending("fabric_check")["fab-head"].task_kwargs["request"]
    assert request["peers"][0]["npu_ips"] == [
        sim_fabric.npu_ip("fab-tail", 0),
        sim_fabric.npu_ip("fab-tail", 1),
    ]
    assert run_agents(two_hosts) == 2
    check = FabricCheck.objects.get()
    assert (check.status, check.round) == ("pass", 1)  # no second round to learn them
    assert set(pending("deploy")) == {"fab-head", "fab-tail"}


def test_inventory_npu_addresses_that_are_no_addresses_are_not_sent_to_a_peer_to_ping(
    two_hosts, moe_model, bob
):
    """A node's inventory is its own word: what its npu_roce_ips holds that is no address (or a map that is
    none) does not reach the other node's request; the check learns the addresses in its first round."""
    from panel.fabric.models import FabricCheck
    from panel.nodes.models import Node

    head, tail = Node.objects.get(name="fab-head"), Node.objects.get(name="fab-tail")
    head.facts = {**head.facts, "npu_roce_ips": {"0": "10.1.0.9 -c 99999", "1": ["10.1.0.9"] * 10_000}}
    tail.facts = {**tail.facts, "npu_roce_ips": ["10.1.0.9"] * 10_000}
    head.save()
    tail.save()
    deploy_on_both(*moe_model, bob)
    requests = {name: op.task_kwargs["request"] for name, op in pending("fabric_check").items()}
    assert requests["fab-tail"]["peers"][0]["npu_ips"] == [None, None]
    assert requests["fab-head"]["peers"][0]["npu_ips"] == [None, None]
    while run_agents(two_hosts):
        pass
    assert (FabricCheck.objects.get().status, FabricCheck.objects.get().round) == ("pass", 2)
    assert set(pending("deploy")) == {"fab-head", "fab-tail"}


# What a buggy or hostile agent may send as its fabric check's result.
MALFORMED_RESULTS = {
    "not an object": ["report"],
    "an npu that is no object": {"report": {"npus": ["npu 0"]}},
    "a ping target that is no address": {
        "report": {"npus": [{"device": 0, "pings": [{"node": "fab-head", "target": "10.1.0.1; reboot"}]}]}
    },
    "a huge list": {"report": {"npus": [{"device": 0, "ip": "10.1.0.9", "link": "UP"}] * 100_000}},
}


@pytest.mark.parametrize("result", MALFORMED_RESULTS.values(), ids=MALFORMED_RESULTS)
def test_a_malformed_report_fails_its_node_alone_and_the_other_nodes_report_is_judged(two_hosts, bob, result):
    from panel.fabric.models import FabricCheck, NodeFabric
    from panel.fabric.services import start_check
    from panel.nodes.models import Node

    start_check(list(Node.objects.filter(name__in=two_hosts)), user=bob)
    answer(pending("fabric_check")["fab-tail"], result)
    # The sound node ends last: its ingest, which judges both, goes through.
    assert run_agents({"fab-head": two_hosts["fab-head"]}) == 1

    check = FabricCheck.objects.get()
    assert (check.status, check.round) == ("fail", 1)
    (refused,) = [entry for entry in check.verdict["checklist"] if entry["status"] == "fail"]
    assert refused["check"] == "fabric_report"
    assert refused["detail"].startswith("fab-tail: the panel refused its agent's NPU network report ("), (
        refused
    )
    assert len(refused["detail"]) < 400
    assert check.verdict["failing"] == {"nodes": ["fab-tail"], "npus": [], "paths": []}
    head = NodeFabric.objects.get(node__name="fab-head")
    assert (head.status, [row["status"] for row in head.npus]) == ("pass", ["pass", "pass"])
    assert not NodeFabric.objects.filter(node__name="fab-tail").exists()


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
