"""A disaggregated deployment through `PUT /api/v1/deployments/{name}/` (docs/serving-plane.md §1): `roles:`
prefill and decode, each its own rows, NPUs and port, each engine launched with its role's
--kv-transfer-config from the launch matrix; strict refusals; a topology change in the dry run's diff."""

import re

import pytest

from tests.integration.test_deployment_apply import client, npu_node, pending, put, spec, tiny
from tests.integration.test_deployment_replicas import advance, held, rows, settle

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


def split(prefill=1, decode=1, connector="mooncake", **overrides):
    body = {
        "placement": {"node": "npu-a", "npus": 1},
        "kv_connector": connector,
        "roles": {
            "prefill": {"replicas": prefill},
            "decode": {"replicas": decode, "engine": {"max_model_len": 1024}},
        },
    }
    return spec(**{**body, **overrides})


@pytest.fixture
def versions(npu_node):
    npu_node.versions = {"vllm-ascend": "0.13.0", "vllm": "0.13.0"}
    npu_node.save()
    return npu_node


def kv_config(row):
    return row.spec["parts"][0]["launch"]["kv_transfer_config"]


def test_a_dry_run_plans_every_role_and_creates_nothing(client, tiny, versions):
    answer = put(client, "chat", split(prefill=2, decode=1), dry_run="true")
    assert answer.status_code == 201, answer.json()  # what the apply would answer
    body = answer.json()
    assert (body["result"], body["effect"]) == ("created", "create")
    assert body["spec"]["kv_connector"] == "mooncake"
    roles = body["spec"]["roles"]
    assert (roles["prefill"]["replicas"], roles["decode"]["replicas"]) == (2, 1)
    assert roles["decode"]["placement"] == {"node": "npu-a", "npus": 1}
    assert rows("chat") == {}
    assert any(w["code"] == "kv_connector" and "kv_consumer" in w["message"] for w in body["warnings"])


def test_create_makes_one_row_per_engine_each_with_its_role_and_kv_transfer_config(client, tiny, versions):
    answer = put(client, "chat", split(prefill=2, decode=1))
    assert answer.status_code == 201, answer.json()
    now = rows("chat")
    assert sorted(now) == ["chat", "chat-d1", "chat-r2"]
    assert {name: row.role for name, row in now.items()} == {
        "chat": "prefill", "chat-r2": "prefill", "chat-d1": "decode",
    }  # fmt: skip
    assert now["chat"].roles_wanted == {"prefill": 2, "decode": 1}
    assert now["chat-d1"].replica_of == now["chat"]
    assert len({tuple(held(row)) for row in now.values()}) == 3  # NPUs of their own
    assert len({row.spec["port"] for row in now.values()}) == 3
    assert {row.spec["served_model_name"] for row in now.values()} == {"chat"}
    assert now["chat-d1"].spec["max_model_len"] == 1024
    producer, consumer = kv_config(now["chat"]), kv_config(now["chat-d1"])
    assert (producer["kv_role"], consumer["kv_role"]) == ("kv_producer", "kv_consumer")
    assert producer["kv_connector"] == consumer["kv_connector"] == "MooncakeConnectorV1"
    assert (producer["engine_id"], consumer["engine_id"]) == ("chat", "chat-d1")
    assert producer["kv_connector_extra_config"] == {
        "prefill": {"tp_size": 1, "dp_size": 1}, "decode": {"tp_size": 1, "dp_size": 1},
    }  # fmt: skip
    assert now["chat-d1"].spec["parts"][0]["launch"]["env"]["HCCL_IF_IP"] == "10.2.0.1"
    launches = pending("deploy")
    assert sorted(op.target for op in launches) == ["chat", "chat-d1", "chat-r2"]
    detail = client.get("/api/v1/deployments/chat/").json()
    assert (detail["role"], detail["roles_wanted"]) == ("prefill", {"prefill": 2, "decode": 1})
    assert sorted((r["name"], r["role"]) for r in detail["replicas"]) == [
        ("chat-d1", "decode"), ("chat-r2", "prefill"),
    ]  # fmt: skip
    settle()
    again = put(client, "chat", client.get("/api/v1/deployments/chat/?format=spec").json())
    assert again.status_code == 200, again.json()
    assert again.json()["result"] == "unchanged"


def test_a_plain_spec_keeps_plain_rows(client, tiny, versions):
    assert put(client, "plain", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    row = rows("plain")["plain"]
    assert (row.role, row.roles_wanted) == ("", {})
    assert "kv_transfer_config" not in row.spec["parts"][0]["launch"]
    exported = client.get("/api/v1/deployments/plain/?format=spec").json()
    assert "roles" not in exported
    assert "kv_connector" not in exported


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        (split(roles={"prefill": {"replicas": 1}}), "roles", "decode"),
        (split(connector=None), "kv_connector", "KV connector"),
        (split(replicas=2), "replicas", "per role"),
        (spec(kv_connector="mooncake"), "kv_connector", "prefill and decode"),
        (split(roles={"prefill": {}, "decode": {}, "encode": {}}), "roles", "encode"),
        (split(connector="nixl"), "kv_connector", "does not run on vllm-ascend"),
        (
            split(autoscale={"min": 1, "max": 2, "target": {"waiting_per_replica": 4}}),
            "autoscale",
            "each role",
        ),
    ],
)
def test_a_topology_that_cannot_run_is_refused_with_the_field(client, tiny, versions, body, field, says):
    if body.get("kv_connector") is None:
        body.pop("kv_connector")
    answer = put(client, "chat", body)
    assert answer.status_code == 400, answer.json()
    errors = answer.json()["errors"]
    found = " ".join(f"{key} {value}" for key, value in errors.items() if key.startswith(field))
    assert says in found, errors
    assert rows("chat") == {}


def test_a_version_without_the_connector_is_refused_naming_it(client, tiny, npu_node):
    npu_node.versions = {"vllm-ascend": "0.9.1"}
    npu_node.save()
    answer = put(client, "chat", split())
    assert answer.status_code == 400
    assert "vllm-ascend 0.9.1 has no mooncake connector" in str(answer.json()["errors"]["kv_connector"])
    assert rows("chat") == {}


def test_a_topology_change_shows_in_the_dry_run(client, tiny, versions):
    """What applying it does is tests/integration/test_deployment_roles_change.py's."""
    assert put(client, "chat", split()).status_code == 201
    settle()
    dry = put(client, "chat", split(decode=2), dry_run="true")
    assert dry.status_code == 202, dry.json()
    assert (dry.json()["result"], dry.json()["effect"]) == ("changed", "scale")
    assert dry.json()["changes"] == [{"field": "replicas", "role": "decode", "from": 1, "to": 2}]
    plain = put(client, "chat", spec(placement={"node": "npu-a", "npus": 1}), dry_run="true")
    assert {c["field"] for c in plain.json()["changes"]} >= {"kv_connector", "roles"}
    assert plain.json()["effect"] == "topology"


def test_stopping_a_disaggregated_deployment_stops_every_role_and_delete_takes_them_all(
    client, tiny, versions
):
    assert put(client, "chat", split()).status_code == 201
    settle()
    stopped = put(client, "chat", split(state="stopped"))
    assert stopped.status_code in (200, 202), stopped.json()
    assert sorted(op.target for op in pending("stop")) == ["chat", "chat-d1"]
    settle()
    assert {row.desired_state for row in rows("chat").values()} == {"stopped"}
    assert client.delete("/api/v1/deployments/chat/").status_code in (202, 204)
    assert {row.desired_state for row in rows("chat").values()} <= {"deleted"}


def test_the_page_lists_the_replicas_per_role_in_both_languages(client, tiny, versions, charlie):
    from django.test import Client

    assert put(client, "chat", split(prefill=2, decode=1)).status_code == 201
    browser = Client()
    browser.force_login(charlie)
    page = browser.get("/deployments/chat/").content.decode()
    rows_shown = re.findall(r'data-replica="([^"]+)"[^>]*>.*?<td data-field="role">([^<]+)</td>', page, re.S)
    assert rows_shown == [("chat", "Prefill"), ("chat-r2", "Prefill"), ("chat-d1", "Decode")]
    assert "0 of 3 wanted running" in page
    chinese = Client(headers={"accept-language": "zh-hans"})
    chinese.force_login(charlie)
    zh = chinese.get("/deployments/chat/").content.decode()
    assert [role for _name, role in re.findall(
        r'data-replica="([^"]+)"[^>]*>.*?<td data-field="role">([^<]+)</td>', zh, re.S
    )] == ["预填充", "预填充", "解码"]  # fmt: skip


def test_stop_start_and_restart_act_on_every_role(client, tiny, versions):
    assert put(client, "chat", split(prefill=2, decode=1)).status_code == 201
    settle()
    assert client.post("/api/v1/deployments/chat/stop/").status_code == 202
    assert sorted(op.target for op in pending("stop")) == ["chat", "chat-d1", "chat-r2"]
    settle()
    assert {row.observed_state for row in rows("chat").values()} == {"stopped"}
    assert client.post("/api/v1/deployments/chat/start/").status_code == 202
    assert sorted(op.target for op in pending("deploy")) == ["chat", "chat-d1", "chat-r2"]
    settle()
    restarted = client.post("/api/v1/deployments/chat/restart/")
    assert restarted.status_code == 202, restarted.json()
    rollout = restarted.json()["rollout"]
    assert (rollout["current"], rollout["surge"]) == ("chat", "chat-r3")  # a surge of its own role
    assert [op.target for op in pending("deploy")] == ["chat-r3"]
    assert rows("chat")["chat-r3"].role == "prefill"
    for _round in range(30):
        settle()
        last = advance()
        if last.status != "running":
            break
    assert last.status == "succeeded", last.message
    now = rows("chat")
    assert sorted(now) == ["chat", "chat-d1", "chat-r2"]
    assert {name: row.restart_count for name, row in now.items()} == {"chat": 1, "chat-d1": 1, "chat-r2": 1}
    assert {row.observed_state for row in now.values()} == {"running"}


def test_a_restart_that_leaves_a_role_without_a_serving_engine_needs_the_downtime_confirmed(
    client, tiny, versions
):
    assert put(client, "chat", split()).status_code == 201
    assert put(client, "filler", spec(placement={"node": "npu-a", "npus": 2})).status_code == 201
    settle()
    refused = client.post("/api/v1/deployments/chat/restart/")
    assert refused.status_code == 409
    assert "stops serving chat" in refused.json()["errors"]["allow_downtime"][0]
    assert not pending("stop")
    restarted = client.post("/api/v1/deployments/chat/restart/?allow_downtime=true")
    assert restarted.status_code == 202, restarted.json()
    rollout = restarted.json()["rollout"]
    assert (rollout["phase"], rollout["current"], rollout["surge"]) == ("replace", "chat", "")
    assert [op.target for op in pending("stop")] == ["chat"]  # one engine at a time, in place
