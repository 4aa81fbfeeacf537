"""The preflight of a disaggregated deployment (panel/deployments/launch/pd_fabric.py): each engine's launch
waits for the NPU network check of its host and the other role's host (the agents' hccn_tool readers on two
sim hosts on one switch), then goes out or stops with the host, the NPU and the fix; a split the vllm-ascend
version's Mooncake connector refuses is refused by the dry run; the dry run says what the last check saw."""

import pytest
from django.test import Client

from tests.conftest import api_client_for
from tests.integration.test_fabric_flow import make_node, pending, run_agents
from workers.sim import fabric as sim_fabric
from workers.sim.tree import create_host

pytestmark = pytest.mark.django_db

HOSTS = ("pd-p", "pd-d")


@pytest.fixture
def pd_hosts(tmp_path):
    """Two sim A2 hosts on one switch with vllm-ascend 0.13.0, two NPUs each, and a tiny model on both."""
    from panel.catalog.models import Model, ModelArtifact
    from workers.models.inspect import inspect_model
    from workers.models.tiny import main as make_tiny

    assert make_tiny([str(tmp_path / "tiny"), "--arch", "qwen2"]) == 0
    model = Model.objects.create(
        name="tiny-qwen", repo_id="Acme/Tiny", facts=inspect_model(tmp_path / "tiny")
    )
    roots = {}
    for index, name in enumerate(HOSTS):
        root = tmp_path / name
        create_host(root, "atlas-800i-a2", name)
        sim_fabric.join_switch(root, tmp_path / "switch")
        sim_fabric.set_host(root, host_ip=f"10.3.0.{index + 1}")
        node = make_node(name, address=f"10.3.0.{index + 1}", npus=2, hccl_ifname="eth0")
        node.status, node.versions = "online", {"vllm-ascend": "0.13.0", "vllm": "0.13.0"}
        node.save()
        ModelArtifact.objects.create(model=model, node=node, path="/models/tiny", ready=True)
        roots[name] = root
    return roots


def split(prefill_tp=1, decode_tp=1, prefill_node="pd-p", decode_node="pd-d"):
    return {
        "model": "tiny-qwen",
        "engine": {"max_model_len": 1024},
        "kv_connector": "mooncake",
        "roles": {
            "prefill": {
                "placement": {"node": prefill_node, "npus": prefill_tp},
                "engine": {"tensor_parallel_size": prefill_tp},
            },
            "decode": {
                "placement": {"node": decode_node, "npus": decode_tp},
                "engine": {"tensor_parallel_size": decode_tp},
            },
        },
    }


def put(user, body, **params):
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return api_client_for(user).put(f"/api/v1/deployments/chat/?{query}", body, format="json")


def launched() -> list[str]:
    from panel.operations.models import Operation

    return sorted(Operation.objects.filter(kind="deploy").values_list("target", flat=True))


def settle(roots):
    while run_agents(roots):
        pass


def test_each_engine_waits_for_the_network_to_the_other_roles_host_then_launches(pd_hosts, bob):
    from panel.deployments.models import Deployment
    from panel.fabric.models import FabricCheck

    answer = put(bob, split())
    assert answer.status_code == 201, answer.json()
    rows = {row.name: row for row in Deployment.objects.filter(name__startswith="chat")}
    assert {name: row.role for name, row in rows.items()} == {"chat": "prefill", "chat-d1": "decode"}
    assert all("Checking the NPU network" in row.reason for row in rows.values())
    assert pending("deploy") == {}

    checks = {check.deployment: check for check in FabricCheck.objects.all()}
    assert set(checks) == {"chat", "chat-d1"}
    prefill_check = checks["chat"]
    assert prefill_check.node_names == ["pd-d", "pd-p"]
    plan = prefill_check.verdict["plan"]
    assert plan["devices"] == {"pd-p": [0], "pd-d": [0]}  # the engine's NPU and the decode engine's
    assert plan["peers"] == {"pd-p": ["pd-d"], "pd-d": ["pd-p"]}
    assert plan["interfaces"]["pd-d"] == ["10.3.0.2", "eth0"]  # what the decode engine's env names

    settle(pd_hosts)
    assert {check.status for check in FabricCheck.objects.all()} == {"pass"}
    assert launched() == ["chat", "chat-d1"]
    for row in Deployment.objects.filter(name__startswith="chat"):
        assert (row.observed_state, row.reason) == ("starting", "")


def test_a_link_down_on_the_decode_host_stops_its_engines_with_the_host_npu_and_fix(pd_hosts, bob, charlie):
    from panel.deployments.models import Deployment

    sim_fabric.set_link(pd_hosts["pd-d"], 0, up=False)
    assert put(bob, split()).status_code == 201
    settle(pd_hosts)

    assert launched() == []
    for name in ("chat", "chat-d1"):
        failed = Deployment.objects.get(name=name)
        assert failed.observed_state == "failed", (name, failed.reason)
        assert failed.reason.startswith(
            "The NPU network between the prefill and decode hosts failed its check: "
            "pd-d: the NIC link of NPU 0 is not UP"
        ), failed.reason
        assert "hccn_tool -i <N> -link -g must say UP" in failed.reason
    api = api_client_for(charlie).get("/api/v1/deployments/chat/").json()
    assert "pd-d: the NIC link of NPU 0 is not UP" in api["reason"]

    client = Client()
    client.force_login(charlie)
    client.cookies["django_language"] = "zh-hans"
    page = client.get("/deployments/chat/").content.decode()
    assert "预填充与解码主机之间的 NPU 网络检查未通过" in page


def test_one_host_for_both_roles_launches_without_a_check(pd_hosts, bob):
    from panel.fabric.models import FabricCheck

    assert put(bob, split(decode_node="pd-p")).status_code == 201
    assert not FabricCheck.objects.exists()
    assert launched() == ["chat", "chat-d1"]


def test_a_dry_run_refuses_a_split_the_mooncake_connector_cannot_run(pd_hosts, bob):
    answer = put(bob, split(prefill_tp=1, decode_tp=2), dry_run="true")
    assert answer.status_code == 400, answer.json()
    (message,) = answer.json()["errors"]["roles"]
    assert "vllm-ascend 0.13.0's MooncakeConnectorV1 needs the prefill TP at least the decode TP" in message
    assert "prefill TP 1 and decode TP 2" in message
    assert "mooncake_connector.py" in message

    zh = api_client_for(bob)
    zh.credentials(HTTP_ACCEPT_LANGUAGE="zh-hans")
    answer = zh.put("/api/v1/deployments/chat/?dry_run=true", split(1, 2), format="json")
    assert "预填充 TP 不能小于解码 TP" in answer.json()["errors"]["roles"][0]


def test_a_dry_run_says_when_the_hosts_were_never_checked_together_and_what_failed_last(pd_hosts, bob):
    answer = put(bob, split(), dry_run="true")
    assert answer.status_code == 201, answer.json()
    (info,) = [w for w in answer.json()["warnings"] if w["code"] == "pd_fabric"][:1]
    assert info["level"] == "info"
    assert "before each engine launches, the NPU network between them is checked" in info["message"]

    sim_fabric.set_link(pd_hosts["pd-d"], 0, up=False)
    assert put(bob, split()).status_code == 201
    settle(pd_hosts)
    from panel.deployments.models import Deployment

    Deployment.objects.filter(name__startswith="chat").delete()
    answer = put(bob, split(), dry_run="true")
    assert answer.status_code == 201, answer.json()
    warned = [w for w in answer.json()["warnings"] if w["code"] == "pd_fabric" and w["level"] == "warning"]
    assert warned, answer.json()["warnings"]
    assert "failed its last check on pd-d: pd-d: the NIC link of NPU 0 is not UP" in warned[0]["message"]
    assert "hccn_tool -i <N> -link -g must say UP" in warned[0]["message"]


def test_a_change_that_moves_decode_to_another_host_says_the_network_will_be_checked(pd_hosts, bob):
    assert put(bob, split(decode_node="pd-p")).status_code == 201
    answer = put(bob, split(), dry_run="true")
    assert answer.status_code == 202, answer.json()
    assert answer.json()["effect"] == "rolling"
    said = [w["message"] for w in answer.json()["warnings"] if w["code"] == "pd_fabric"]
    assert said
    assert "pd-d and pd-p hold prefill and decode engines" in said[0]


def test_a_host_whose_engine_env_names_no_hccl_address_is_checked_on_the_nodes_own(pd_hosts, bob):
    from panel.deployments.launch.pd_fabric import pd_plan
    from panel.deployments.models import Deployment

    assert put(bob, split(), dry_run="false").status_code == 201
    decode = Deployment.objects.get(name="chat-d1")
    decode.spec["parts"][0]["launch"]["env"] = {}
    decode.save(update_fields=["spec"])
    plan = pd_plan(Deployment.objects.get(name="chat"))
    assert plan is not None
    assert plan["interfaces"] == {"pd-p": ("10.3.0.1", "eth0")}  # pd-d: the check's default, its address
    assert plan["peers"] == {"pd-p": ["pd-d"], "pd-d": ["pd-p"]}
