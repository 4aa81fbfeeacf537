"""The preflight of a disaggregated deployment (panel/deployments/launch/pd_fabric.py): the engines' launches
wait for one NPU network check of the NPU pairs Mooncake moves KV over (workers/engine/launch/kv_pairs.py;
the agents' hccn_tool readers on two sim hosts on one switch), then go out or each stops with the host, the
NPU and the fix that concern it; a failure on an NPU or path no pair uses stops nothing. A split the
vllm-ascend version's Mooncake connector refuses is refused by the dry run; the dry run says what the last
check saw."""

import pytest
from django.test import Client

from tests.conftest import api_client_for
from tests.fabric_helpers import hosts_on_one_switch
from tests.integration.test_fabric_flow import answer, make_node, pending, run_agents
from workers.sim import fabric as sim_fabric

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
    roots = hosts_on_one_switch(tmp_path, HOSTS, "10.3.0")
    for index, name in enumerate(HOSTS):
        node = make_node(name, address=f"10.3.0.{index + 1}", npus=2, hccl_ifname="eth0")
        node.status, node.versions = "online", {"vllm-ascend": "0.13.0", "vllm": "0.13.0"}
        node.save()
        ModelArtifact.objects.create(model=model, node=node, path="/models/tiny", ready=True)
    return roots


def split(prefill_tp=1, decode_tp=1, prefill_node="pd-p", decode_node="pd-d", decode_dp=1, prefills=1):
    return {
        "model": "tiny-qwen",
        "engine": {"max_model_len": 1024},
        "kv_connector": "mooncake",
        "roles": {
            "prefill": {
                "replicas": prefills,
                "placement": {"node": prefill_node, "npus": prefill_tp},
                "engine": {"tensor_parallel_size": prefill_tp},
            },
            "decode": {
                "placement": {"node": decode_node, "npus": decode_tp * decode_dp},
                "engine": {"tensor_parallel_size": decode_tp, "data_parallel_size": decode_dp},
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


def test_both_engines_wait_for_one_check_of_their_npu_pair_then_launch(pd_hosts, bob):
    from panel.deployments.models import Deployment
    from panel.fabric.models import FabricCheck

    answer = put(bob, split())
    assert answer.status_code == 201, answer.json()
    rows = {row.name: row for row in Deployment.objects.filter(name__startswith="chat")}
    assert {name: row.role for name, row in rows.items()} == {"chat": "prefill", "chat-d1": "decode"}
    assert all("Checking the NPU network" in row.reason for row in rows.values())
    assert pending("deploy") == {}

    check = FabricCheck.objects.get()  # one check of the pair of hosts, not one per engine
    assert check.deployment == "chat"
    assert {row.runtime["fabric_check"] for row in rows.values()} == {check.pk}
    assert check.node_names == ["pd-d", "pd-p"]
    plan = check.verdict["plan"]
    assert plan["pairs"] == [["pd-p", 0, "pd-d", 0]]  # prefill NPU 0 hands its KV to decode NPU 0
    assert plan["devices"] == {"pd-p": [0], "pd-d": [0]}
    assert plan["peers"] == {"pd-p": ["pd-d"], "pd-d": ["pd-p"]}
    assert plan["interfaces"]["pd-d"] == ["10.3.0.2", "eth0"]  # what the decode engine's env names
    requests = {name: op.task_kwargs["request"] for name, op in pending("fabric_check").items()}
    assert requests["pd-p"]["peers"][0]["pairs"] == {"0": [0]}  # the prefill end pings...
    assert requests["pd-d"]["peers"][0]["pairs"] == {}  # ...once, not back

    settle(pd_hosts)
    assert FabricCheck.objects.get().status == "pass"
    assert launched() == ["chat", "chat-d1"]
    for row in Deployment.objects.filter(name__startswith="chat"):
        assert (row.observed_state, row.reason) == ("starting", "")


def test_two_prefill_engines_and_a_decode_on_two_hosts_are_checked_once(pd_hosts, bob):
    from panel.fabric.models import FabricCheck

    assert put(bob, split(prefills=2)).status_code == 201
    check = FabricCheck.objects.get()
    assert check.verdict["plan"]["pairs"] == [["pd-p", 0, "pd-d", 0], ["pd-p", 1, "pd-d", 0]]
    settle(pd_hosts)
    assert launched() == ["chat", "chat-d1", "chat-r2"]


def test_a_link_down_on_a_paired_decode_npu_stops_the_decode_with_the_host_npu_and_fix(
    pd_hosts, bob, charlie
):
    from panel.deployments.models import Deployment

    sim_fabric.set_link(pd_hosts["pd-d"], 0, up=False)
    assert put(bob, split()).status_code == 201
    settle(pd_hosts)

    failed = Deployment.objects.get(name="chat-d1")
    assert failed.observed_state == "failed", failed.reason
    assert failed.reason.startswith(
        "The NPU network between the prefill and decode hosts failed its check: "
        "pd-d: the NIC link of NPU 0 is not UP"
    ), failed.reason
    assert "hccn_tool -i <N> -link -g must say UP" in failed.reason
    # The prefill's own NPU and host are sound: it launches (a decode started after the fix uses it).
    assert launched() == ["chat"]
    api = api_client_for(charlie).get("/api/v1/deployments/chat-d1/").json()
    assert "pd-d: the NIC link of NPU 0 is not UP" in api["reason"]

    client = Client()
    client.force_login(charlie)
    client.cookies["django_language"] = "zh-hans"
    page = client.get("/deployments/chat-d1/").content.decode()
    assert "预填充与解码主机之间的 NPU 网络检查未通过" in page


def test_a_decode_hosts_malformed_report_stops_the_decode_alone(pd_hosts, bob):
    from panel.deployments.models import Deployment

    assert put(bob, split()).status_code == 201
    answer(pending("fabric_check")["pd-d"], {"report": {"npus": [{"device": "zero"}]}})
    settle(pd_hosts)

    decode = Deployment.objects.get(name="chat-d1")
    assert decode.observed_state == "failed", decode.reason
    assert "pd-d: the panel refused its agent's NPU network report (npus.0.device: " in decode.reason
    assert launched() == ["chat"]  # the prefill's host and NPUs are not the ones that failed


def test_a_link_down_on_an_npu_no_pair_uses_does_not_fail_the_check(pd_hosts, bob):
    from panel.fabric.models import FabricCheck

    sim_fabric.set_link(pd_hosts["pd-d"], 1, up=False)  # the decode host's other NPU: no engine's
    sim_fabric.set_link(pd_hosts["pd-p"], 1, up=False)
    assert put(bob, split()).status_code == 201
    settle(pd_hosts)
    assert FabricCheck.objects.get().status == "pass"
    assert launched() == ["chat", "chat-d1"]


def test_each_decode_dp_rank_pulls_from_both_prefill_ranks_so_that_path_is_pinged(pd_hosts, bob):
    """A model of two KV heads, prefill TP 2, decode TP 1 x DP 2: each decode rank holds both heads and pulls
    them from prefill ranks 0 and 1, so prefill NPU 0 must reach decode NPU 1 (the k-th-NPU pairing of the
    multi-node check never pinged it)."""
    from panel.deployments.models import Deployment
    from panel.fabric.models import FabricCheck

    sim_fabric.set_npu_unreachable(pd_hosts["pd-p"], 0, sim_fabric.npu_ip("pd-d", 1))
    assert put(bob, split(prefill_tp=2, decode_dp=2)).status_code == 201
    plan = FabricCheck.objects.get().verdict["plan"]
    assert plan["pairs"] == [["pd-p", p, "pd-d", d] for p in (0, 1) for d in (0, 1)]
    request = pending("fabric_check")["pd-p"].task_kwargs["request"]
    assert request["peers"][0]["pairs"] == {"0": [0, 1], "1": [0, 1]}
    settle(pd_hosts)

    assert FabricCheck.objects.get().status == "fail"
    decode = Deployment.objects.get(name="chat-d1")
    assert decode.observed_state == "failed"
    assert "pd-p: NPU 0 cannot reach pd-d's NPUs (" + sim_fabric.npu_ip("pd-d", 1) in decode.reason
    assert launched() == ["chat"]


def test_equal_tp_pairs_rank_with_rank_so_a_path_between_other_ranks_is_not_pinged(pd_hosts, bob):
    from panel.fabric.models import FabricCheck

    sim_fabric.set_npu_unreachable(pd_hosts["pd-p"], 0, sim_fabric.npu_ip("pd-d", 1))
    assert put(bob, split(prefill_tp=2, decode_tp=2)).status_code == 201
    check = FabricCheck.objects.get()
    assert check.verdict["plan"]["pairs"] == [["pd-p", 0, "pd-d", 0], ["pd-p", 1, "pd-d", 1]]
    settle(pd_hosts)
    assert FabricCheck.objects.get().status == "pass"
    assert launched() == ["chat", "chat-d1"]


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
