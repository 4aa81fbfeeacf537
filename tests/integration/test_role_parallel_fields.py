"""Each role's TP and DP on the wizard's topology step and on the Edit page (issue 35): given, they reach the
role's engines (their launch and both roles' KV config); empty, the planner picks them; a TP x DP the role's
NPUs cannot hold is refused on the role's field by the planner, and a split the Mooncake connector refuses
(prefill TP below decode TP) is refused with the launch matrix's reason, in both languages."""

import re

import pytest

from panel.deployments.models import Deployment
from tests.integration.test_deployment_apply import client, npu_node, put, tiny
from tests.integration.test_deployment_edit_topology import role_fields
from tests.integration.test_deployment_idle_page import page_client
from tests.integration.test_deployment_replicas import advance, settle
from tests.integration.test_deployment_roles import split, versions
from tests.integration.test_wizard_topology import errors_of, qwen, split_fields, start
from tests.wizard_steps import client_for, engine_fields

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "qwen", "tiny", "versions"]  # fixtures used by name


def launch_of(name: str) -> dict:
    return Deployment.objects.get(name=name).spec["parts"][0]["launch"]


def test_the_wizard_takes_each_roles_tp_and_dp_into_its_engines_and_both_kv_configs(bob, qwen):
    client = client_for(bob)
    start(client, qwen)
    page = client.get("/deployments/new/placement/").content.decode()
    assert 'name="prefill_tp"' in page
    assert 'name="decode_dp"' in page
    fields = split_fields(prefill_npus="2", prefill_tp="2", prefill_dp="1", decode_npus="2", decode_tp="1",
                          decode_dp="2")  # fmt: skip
    answer = client.post("/deployments/new/placement/", fields)
    assert answer.status_code == 302, errors_of(answer.content.decode(), "topology")
    # Back on the step, the fields show what was chosen.
    again = client.get("/deployments/new/placement/").content.decode()
    assert re.search(r'name="decode_dp" value="2"', again)
    answer = client.post("/deployments/new/engine/", engine_fields(max_model_len="1024"))
    assert answer.status_code == 302, answer.content.decode()[:3000]
    assert client.post("/deployments/new/review/").status_code == 302

    prefill, decode = launch_of("chat"), launch_of("chat-d1")
    assert (prefill["tensor_parallel_size"], prefill["data_parallel_size"]) == (2, 1)
    assert (decode["tensor_parallel_size"], decode["data_parallel_size"]) == (1, 2)
    both = {"prefill": {"tp_size": 2, "dp_size": 1}, "decode": {"tp_size": 1, "dp_size": 2}}
    assert prefill["kv_transfer_config"]["kv_connector_extra_config"] == both
    assert decode["kv_transfer_config"]["kv_connector_extra_config"] == both


def test_a_tp_and_dp_the_roles_npus_cannot_hold_is_refused_by_the_planner(bob, qwen):
    client = client_for(bob)
    start(client, qwen)
    answer = client.post("/deployments/new/placement/", split_fields(prefill_npus="1", prefill_tp="2"))
    assert answer.status_code == 200
    page = answer.content.decode()
    said = " ".join(errors_of(page, field) for field in ("prefill_npus", "prefill_tp", "topology"))
    assert "chat (prefill 1) does not fit" in said, page[:3000]
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    ("language", "says"),
    [
        ("en", "needs the prefill TP at least the decode TP"),
        ("zh-hans", "要求预填充 TP 不能小于解码 TP"),
    ],
)
def test_a_split_mooncake_cannot_run_is_refused_with_the_matrix_reason(bob, qwen, language, says):
    client = client_for(bob)
    client.cookies["django_language"] = language
    start(client, qwen)
    fields = split_fields(prefill_npus="1", prefill_tp="1", decode_npus="2", decode_tp="2", decode_dp="1")
    answer = client.post("/deployments/new/placement/", fields)
    assert answer.status_code == 200
    assert says in errors_of(answer.content.decode(), "topology"), answer.content.decode()[:3000]


def test_the_edit_page_shows_and_changes_a_roles_tp_and_dp(bob, client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    browser = page_client(bob)
    page = browser.get("/deployments/chat/edit/").content.decode()
    assert re.search(r'name="decode_tp" value="1"', page)
    assert re.search(r'name="decode_dp" value="1"', page)

    # Two NPUs per decode engine as DP 2 (TP stays 1, below the prefill's); no room for a surge beside it.
    fields = role_fields("chat", decode_npus=2, decode_tp=1, decode_dp=2)
    applied = browser.post("/deployments/chat/edit/", {**fields, "confirm": "1", "allow_downtime": "on"})
    assert applied.status_code == 302, re.findall(
        r'data-testid="(?:edit-errors|error-[a-z_]+)">(.*?)</(?:div|ul)>', applied.content.decode(), re.S
    )
    for _round in range(20):  # the rolling update, step by step
        settle()
        last = advance()
        if last is None or last.status != "running":
            break
    decode = Deployment.objects.filter(name__startswith="chat", role="decode").order_by("-pk").first()
    launch = decode.spec["parts"][0]["launch"]
    assert (launch["tensor_parallel_size"], launch["data_parallel_size"]) == (1, 2)
    assert launch["kv_transfer_config"]["kv_connector_extra_config"]["decode"] == {"tp_size": 1, "dp_size": 2}


def test_the_edit_page_refuses_a_decode_tp_above_the_prefill_tp(bob, client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    fields = role_fields("chat", decode_npus=2, decode_tp=2, decode_dp=1)
    page = page_client(bob).post("/deployments/chat/edit/", {**fields, "preview": "1"}).content.decode()
    assert "needs the prefill TP at least the decode TP" in page
    assert 'data-testid="edit-apply"' not in page


def test_the_review_says_the_network_between_the_roles_hosts_is_checked_before_the_launch(bob, qwen):
    from panel.catalog.models import ModelArtifact
    from tests.integration.test_wizard_topology import a2_node

    other = a2_node("a2-other", {"vllm-ascend": "0.13.0", "vllm": "0.13.0"}, address="10.9.0.2")
    ModelArtifact.objects.create(model=qwen.model, node=other, path="/models/qwen", ready=True)
    client = client_for(bob)
    start(client, qwen)
    answer = client.post("/deployments/new/placement/", split_fields(decode_node="a2-other"))
    assert answer.status_code == 302, answer.content.decode()[:3000]
    assert client.post("/deployments/new/engine/", engine_fields(max_model_len="1024")).status_code == 302
    review = client.get("/deployments/new/review/").content.decode()
    assert "a2-node and a2-other hold prefill and decode engines" in review
    client.cookies["django_language"] = "zh-hans"
    review = client.get("/deployments/new/review/").content.decode()
    assert "a2-node 与 a2-other 上分别运行预填充和解码引擎" in review
