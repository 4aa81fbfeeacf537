"""A disaggregated deployment changed in place (docs/serving-plane.md §1, issue 35 item 1): scale per role
(the spec, `POST …/scale/` with a role), a rolling update of one role's engines with a surge of that role,
rollback restoring the roles a revision had, and a change of topology kind (plain <-> prefill/decode) as a
planned change: the dry run's steps, the downtime it needs confirmed, a new revision."""

import pytest

from tests.integration.test_deployment_apply import client, npu_node, pending, put, spec, tiny
from tests.integration.test_deployment_replicas import advance, held, rows, settle
from tests.integration.test_deployment_roles import kv_config, split, versions

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny", "versions"]  # fixtures used by name


def scale(client, name, body, **params):
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return client.post(f"/api/v1/deployments/{name}/scale/?{query}", body, format="json")


def roles_now(name):
    return {row_name: row.role for row_name, row in rows(name).items()}


def test_scaling_decode_adds_and_removes_decode_engines_only(client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    dry = put(client, "chat", split(decode=2), dry_run="true")
    assert dry.status_code == 202, dry.json()
    body = dry.json()
    assert (body["result"], body["effect"]) == ("changed", "scale")
    assert body["changes"] == [{"field": "replicas", "role": "decode", "from": 1, "to": 2}]
    assert body["steps"] == [{"action": "start", "name": "chat-d2", "role": "decode"}]
    assert body["spec"]["roles"]["decode"]["replicas"] == 2
    assert sorted(rows("chat")) == ["chat", "chat-d1"]  # the dry run made nothing

    up = put(client, "chat", split(decode=2))
    assert up.status_code == 202, up.json()
    assert [op.target for op in pending("deploy")] == ["chat-d2"]
    assert not pending("stop")  # nothing that serves is touched
    assert roles_now("chat") == {"chat": "prefill", "chat-d1": "decode", "chat-d2": "decode"}
    new = rows("chat")["chat-d2"]
    assert (kv_config(new)["kv_role"], kv_config(new)["engine_id"]) == ("kv_consumer", "chat-d2")
    assert rows("chat")["chat"].roles_wanted == {"prefill": 1, "decode": 2}
    settle()
    assert put(client, "chat", split(decode=2)).json()["result"] == "unchanged"

    down = put(client, "chat", split(decode=1))
    assert down.json()["steps"] == [{"action": "stop", "name": "chat-d2", "role": "decode"}]
    assert [op.target for op in pending("stop")] == ["chat-d2"]
    settle()
    assert sorted(rows("chat")) == ["chat", "chat-d1"]


def test_the_scale_api_takes_a_role_records_it_and_refuses_a_role_that_does_not_fit(client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    assert put(client, "plain", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    settle()
    missing = scale(client, "chat", {"replicas": 2})
    assert missing.status_code == 400
    assert "name the role" in str(missing.json()["errors"]["role"])
    plain = scale(client, "plain", {"replicas": 2, "role": "decode"})
    assert plain.status_code == 400
    assert "without a role" in str(plain.json()["errors"]["role"])
    assert scale(client, "chat", {"replicas": 2, "role": "encode"}).status_code == 400

    dry = scale(client, "chat", {"replicas": 2, "role": "decode"}, dry_run="true")
    assert (dry.status_code, dry.json()["effect"]) == (202, "scale")
    assert sorted(rows("chat")) == ["chat", "chat-d1"]
    done = scale(client, "chat", {"replicas": 2, "role": "decode"})
    assert done.status_code == 202, done.json()
    assert sorted(rows("chat")) == ["chat", "chat-d1", "chat-d2"]
    events = client.get("/api/v1/deployments/chat/events/?kind=scale_up").json()["results"]
    assert [(e["role"], e["figures"]["from"], e["figures"]["to"]) for e in events] == [("decode", 1, 2)]
    assert "decode replicas set to 2" in events[0]["reason"]
    history = client.get("/api/v1/deployments/chat/revisions/").json()["results"]
    assert (history[0]["cause"], history[0]["effect"]) == ("scale", "scale")

    settle()
    down = scale(client, "chat", {"replicas": 1, "role": "decode"})
    assert (down.status_code, down.json()["effect"]) == (202, "scale")
    settle()
    plain_up = scale(client, "plain", {"replicas": 2})
    assert plain_up.status_code == 202, plain_up.json()
    assert sorted(rows("plain")) == ["plain", "plain-r2"]


def test_a_change_to_one_role_rolls_only_that_roles_engines_with_a_surge_of_its_role(client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    prefill_before = rows("chat")["chat"].spec
    changed = split(
        roles={"prefill": {"replicas": 1}, "decode": {"replicas": 1, "engine": {"max_model_len": 512}}}
    )
    answer = put(client, "chat", changed)
    assert answer.status_code == 202, answer.json()
    body = answer.json()
    assert body["effect"] == "rolling"
    assert body["changes"] == [
        {"field": "roles.decode.engine.max_model_len", "role": "decode", "from": 1024, "to": 512}
    ]
    assert body["steps"] == [{"action": "roll", "name": "chat-d1", "role": "decode"}]
    rollout = body["rollout"]
    assert (rollout["phase"], rollout["current"], rollout["surge"]) == ("surge", "chat-d1", "chat-d2")
    surge = rows("chat")["chat-d2"]
    assert (surge.role, kv_config(surge)["kv_role"], surge.spec["max_model_len"]) == (
        "decode",
        "kv_consumer",
        512,
    )
    for _round in range(20):
        settle()
        last = advance()
        if last.status != "running":
            break
    assert last.status == "succeeded", last.message
    now = rows("chat")
    assert sorted(now) == ["chat", "chat-d1"]  # the surge is gone
    assert now["chat-d1"].spec["max_model_len"] == 512
    assert kv_config(now["chat-d1"])["engine_id"] == "chat-d1"
    assert now["chat"].spec == prefill_before  # the prefill never restarted
    assert now["chat"].restart_count == 0
    assert put(client, "chat", changed).json()["result"] == "unchanged"


def test_rollback_restores_the_roles_a_revision_had(client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    assert scale(client, "chat", {"replicas": 2, "role": "decode"}).status_code == 202
    settle()
    dry = client.post("/api/v1/deployments/chat/rollback/?dry_run=true")
    assert dry.json()["changes"] == [{"field": "replicas", "role": "decode", "from": 2, "to": 1}]
    back = client.post("/api/v1/deployments/chat/rollback/?to_revision=1")
    assert back.status_code == 202, back.json()
    settle()
    assert roles_now("chat") == {"chat": "prefill", "chat-d1": "decode"}
    assert rows("chat")["chat"].roles_wanted == {"prefill": 1, "decode": 1}
    history = client.get("/api/v1/deployments/chat/revisions/").json()["results"]
    assert (history[0]["cause"], history[0]["restored"]) == ("rollback", 1)


def test_plain_to_prefill_decode_and_back_is_a_planned_change_that_stops_first(client, tiny, versions):
    assert put(client, "chat", spec(placement={"node": "npu-a", "npus": 1})).status_code == 201
    settle()
    dry = put(client, "chat", split(), dry_run="true")
    assert dry.status_code == 202, dry.json()
    body = dry.json()
    assert (body["result"], body["effect"]) == ("changed", "topology")
    fields = {change["field"] for change in body["changes"]}
    assert {"kv_connector", "roles"} <= fields
    assert body["steps"] == [
        {"action": "start", "name": "chat-d1", "role": "decode"},
        {"action": "restart", "name": "chat", "role": "prefill"},
    ]
    plan = next(w["message"] for w in body["warnings"] if w["code"] == "topology_plan")
    assert "start chat-d1" in plan
    assert "restart at once chat" in plan
    assert "stop first" in plan
    assert any(w["code"] == "downtime" for w in body["warnings"])
    assert body["spec"]["roles"]["decode"]["replicas"] == 1

    refused = put(client, "chat", split())
    assert refused.status_code == 409
    assert "allow_downtime" in refused.json()["errors"]
    assert sorted(rows("chat")) == ["chat"]

    applied = put(client, "chat", split(), allow_downtime="true")
    assert applied.status_code == 202, applied.json()
    assert applied.json()["effect"] == "topology"
    assert roles_now("chat") == {"chat": "prefill", "chat-d1": "decode"}
    assert kv_config(rows("chat")["chat"])["kv_role"] == "kv_producer"
    assert [op.target for op in pending("stop")] == ["chat"]  # restarts with its new launch
    assert [op.target for op in pending("deploy")] == ["chat-d1"]
    settle()
    assert {row.observed_state for row in rows("chat").values()} == {"running"}
    again = put(client, "chat", split())
    assert again.status_code == 200, again.json()
    history = client.get("/api/v1/deployments/chat/revisions/").json()["results"]
    assert (history[0]["effect"], history[0]["spec"]["kv_connector"]) == ("topology", "mooncake")

    back = client.post("/api/v1/deployments/chat/rollback/?allow_downtime=true")
    assert back.status_code == 202, back.json()
    assert back.json()["steps"] == [
        {"action": "restart", "name": "chat", "role": ""},
        {"action": "stop", "name": "chat-d1", "role": "decode"},
    ]
    settle()
    assert roles_now("chat") == {"chat": ""}
    row = rows("chat")["chat"]
    assert (row.roles_wanted, held(row)) == ({}, [0])
    assert "kv_transfer_config" not in row.spec["parts"][0]["launch"]
    assert "topology" not in row.plan
    exported = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert "roles" not in exported


def test_a_stopped_deployment_takes_its_new_topology_for_later(client, tiny, versions):
    assert put(client, "chat", split(state="stopped")).status_code == 201
    settle()
    answer = put(client, "chat", split(prefill=2, state="stopped"))
    assert answer.status_code == 202, answer.json()
    assert answer.json()["effect"] == "none"
    assert answer.json()["steps"] == [{"action": "create", "name": "chat-r2", "role": "prefill"}]
    assert not pending("deploy")
    assert roles_now("chat") == {"chat": "prefill", "chat-r2": "prefill", "chat-d1": "decode"}
    assert {row.desired_state for row in rows("chat").values()} == {"stopped"}


def test_routing_and_labels_of_a_disaggregated_deployment_are_kept_and_change_nothing_that_runs(
    client, tiny, versions
):
    created = put(client, "chat", split(routing="prefix", labels={"app": "chat"}))
    assert created.status_code == 201, created.json()
    primary = rows("chat")["chat"]
    assert (primary.routing, primary.labels) == ("prefix", {"app": "chat"})
    settle()
    exported = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert exported["routing"] == "prefix"
    answer = put(client, "chat", split(routing="session", labels={"app": "chat"}))
    assert answer.status_code == 202, answer.json()
    assert (answer.json()["effect"], answer.json()["changes"]) == (
        "none", [{"field": "routing", "from": "prefix", "to": "session"}],
    )  # fmt: skip
    assert not pending("stop")
    assert not pending("deploy")
    assert rows("chat")["chat"].routing == "session"


def test_create_by_post_takes_routing(client, tiny):
    body = {
        "name": "routed",
        "model": tiny.pk,
        "artifact": tiny.artifacts.get().pk,
        "nodes": [{"node": "npu-a", "npus": [0]}],
        "max_model_len": 1024,
        "routing": "prefix",
    }
    answer = client.post("/api/v1/deployments/", body, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["routing"] == "prefix"
    revision = client.get("/api/v1/deployments/routed/revisions/").json()["results"][0]
    assert revision["spec"]["routing"] == "prefix"
    refused = client.post(
        "/api/v1/deployments/", {**body, "name": "other", "routing": "round_robin"}, format="json"
    )
    assert refused.status_code == 400
    assert "routing" in refused.json()["errors"]


def test_stop_start_and_delete_take_the_engines_a_scale_added(client, tiny, versions):
    assert put(client, "chat", split()).status_code == 201
    settle()
    assert scale(client, "chat", {"replicas": 2, "role": "prefill"}).status_code == 202
    assert scale(client, "chat", {"replicas": 2, "role": "decode"}).status_code == 202
    settle()
    assert roles_now("chat") == {
        "chat": "prefill",
        "chat-r2": "prefill",
        "chat-d1": "decode",
        "chat-d2": "decode",
    }
    assert client.post("/api/v1/deployments/chat/stop/").status_code == 202
    assert sorted(op.target for op in pending("stop")) == ["chat", "chat-d1", "chat-d2", "chat-r2"]
    settle()
    assert client.post("/api/v1/deployments/chat/start/").status_code == 202
    assert sorted(op.target for op in pending("deploy")) == ["chat", "chat-d1", "chat-d2", "chat-r2"]
    settle()
    assert client.delete("/api/v1/deployments/chat/").status_code == 202
    settle()
    assert rows("chat") == {}


def test_a_topology_that_does_not_fit_beside_the_old_one_is_refused_naming_the_engine(client, tiny, versions):
    assert put(client, "chat", spec(placement={"node": "npu-a", "npus": 1}, replicas=4)).status_code == 201
    settle()
    refused = put(client, "chat", split(prefill=4, decode=1), dry_run="true")
    assert refused.status_code == 400, refused.json()
    assert "chat-d1 (decode 1) does not fit" in str(refused.json()["errors"]["roles.decode"])
    assert sorted(rows("chat")) == ["chat", "chat-r2", "chat-r3", "chat-r4"]
    assert {row.role for row in rows("chat").values()} == {""}


def test_scale_is_refused_where_the_autoscaler_owns_the_count(client, tiny, versions):
    scaled = spec(
        placement={"node": "npu-a", "npus": 1},
        autoscale={"min": 1, "max": 2, "target": {"waiting_per_replica": 4}},
    )
    assert put(client, "auto", scaled).status_code == 201
    refused = scale(client, "auto", {"replicas": 2})
    assert refused.status_code == 400
    assert "the autoscaler owns the count" in str(refused.json()["errors"]["replicas"])
