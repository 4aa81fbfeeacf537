"""Revisions and one change at a time through the API: every applied spec is numbered (create, apply,
rollback), `rollout undo --to-revision N` applies one again, a change that another request made between
this one's reading and its writing makes it a 409 naming that revision, and an undo of a deployment whose
spec names its NPUs surges beside them instead of restarting the only replica in place. Agents are not
involved: launches and stops are finished the way the ingest finishes them."""

import pytest

from tests.conftest import api_client_for
from tests.integration.test_deployment_apply import client, npu_node, put, spec, tiny
from tests.integration.test_deployment_replicas import advance, one_npu, rows, settle

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


def revisions(client, name="chat"):
    answer = client.get(f"/api/v1/deployments/{name}/revisions/")
    assert answer.status_code == 200, answer.json()
    return answer.json()["results"]


def roll_to_the_end():
    for _round in range(20):
        settle()
        rollout = advance()
        if rollout is None or rollout.status != "running":
            return rollout
    raise AssertionError("the rollout did not end")


def test_every_applied_spec_is_a_numbered_revision(client, tiny):
    put(client, "chat", one_npu())
    settle()
    assert put(client, "chat", one_npu(engine={"max_model_len": 4096})).status_code == 202
    roll_to_the_end()
    assert put(client, "chat", one_npu(engine={"max_model_len": 4096})).json()["result"] == "unchanged"
    put(client, "chat", one_npu(engine={"max_model_len": 4096}, labels={"tier": "prod"}))

    newest, changed, created = revisions(client)
    assert [r["number"] for r in (newest, changed, created)] == [3, 2, 1]
    assert (created["cause"], created["effect"], created["user"]) == ("create", "create", "bob")
    assert changed["changes"] == [{"field": "engine.max_model_len", "from": 2048, "to": 4096}]
    assert (changed["effect"], changed["outcome"]) == ("rolling", "succeeded")
    assert changed["rollout"] is not None
    assert changed["spec"]["engine"]["max_model_len"] == 4096
    assert newest["spec"]["labels"] == {"tier": "prod"}
    assert newest["outcome"] == "succeeded"
    assert revisions(client, "chat") == revisions(client, str(rows("chat")["chat"].pk))


def test_undo_to_a_revision_applies_it_again_as_a_new_revision(client, tiny):
    put(client, "chat", one_npu())
    settle()
    for length in (4096, 1024):
        put(client, "chat", one_npu(engine={"max_model_len": length}))
        roll_to_the_end()
    answer = client.post("/api/v1/deployments/chat/rollback/?to_revision=1")
    assert answer.status_code == 202, answer.json()
    assert answer.json()["changes"] == [{"field": "engine.max_model_len", "from": 1024, "to": 2048}]
    roll_to_the_end()
    newest = revisions(client)[0]
    assert (newest["number"], newest["cause"], newest["restored"]) == (4, "rollback", 1)
    assert rows("chat")["chat"].spec["max_model_len"] == 2048

    missing = client.post("/api/v1/deployments/chat/rollback/?to_revision=9")
    assert missing.status_code == 400
    assert "no revision 9" in missing.json()["errors"]["to_revision"][0]


def test_a_change_made_meanwhile_by_another_request_makes_this_one_a_409(client, tiny, alice, monkeypatch):
    """Alice's apply lands between Bob's reading of the deployment and his write: his is refused."""
    from panel.deployments.spec import apply as apply_module
    from panel.deployments.spec.spec import parse_spec

    put(client, "chat", one_npu())
    settle()
    real = apply_module.plan_for
    other = {"done": False}

    def alice_applies_first(*args, **kwargs):
        if not other["done"]:
            other["done"] = True
            raw = one_npu(labels={"by": "alice"})
            apply_module.apply("chat", parse_spec(raw, "chat"), alice)
        return real(*args, **kwargs)

    monkeypatch.setattr(apply_module, "plan_for", alice_applies_first)
    refused = put(client, "chat", one_npu(engine={"max_model_len": 4096}))
    assert refused.status_code == 409, refused.json()
    assert "revision 2 by alice" in refused.json()["detail"]
    assert [r["number"] for r in revisions(client)] == [2, 1]
    assert rows("chat")["chat"].spec["max_model_len"] == 2048
    assert not rows("chat")["chat"].rollouts.exists()


def test_a_change_whose_surge_room_another_change_took_meanwhile_names_that_change(
    client, tiny, alice, monkeypatch
):
    """Alice's rolling change lands between Bob's reading and his planning, and her surge takes the last
    free NPU: Bob's change has no room for a surge now, but what stands in his way is her rollout (a 409
    that `--wait-for-lock` waits out), not downtime to confirm (which it does not retry). In bench/api_race.py
    a round of 20 parallel applies answered its losers "stops serving ... confirm"."""
    from panel.deployments.spec import apply as apply_module
    from panel.deployments.spec.spec import parse_spec

    put(client, "other", spec())  # 2 of the node's 4 NPUs; chat takes 1: one left, for one surge
    put(client, "chat", one_npu())
    settle()
    real = apply_module.plan_for
    other = {"done": False}

    def alice_applies_first(*args, **kwargs):
        if not other["done"]:
            other["done"] = True
            raw = one_npu(engine={"max_model_len": 1024})
            assert apply_module.apply("chat", parse_spec(raw, "chat"), alice).effect == "rolling"
        return real(*args, **kwargs)

    monkeypatch.setattr(apply_module, "plan_for", alice_applies_first)
    refused = put(client, "chat", one_npu(engine={"max_model_len": 4096}))
    assert refused.status_code == 409, refused.json()
    assert "allow_downtime" not in refused.json().get("errors", {}), refused.json()
    assert "A rolling update of chat is under way (revision 2" in refused.json()["detail"]
    assert "by alice" in refused.json()["detail"]
    assert [r["number"] for r in revisions(client)] == [2, 1]
    assert roll_to_the_end().status == "succeeded"
    assert rows("chat")["chat"].spec["max_model_len"] == 1024


def test_a_disaggregated_change_that_would_stop_serving_names_a_rollout_under_way_first(client, tiny):
    """The prefill/decode path asks for its downtime confirmation through the same refusal."""
    from panel.deployments.conflicts import DeploymentConflict
    from panel.deployments.downtime import DowntimeNotAllowed
    from panel.deployments.spec.topology_change import confirmed_downtime

    put(client, "chat", one_npu())
    settle()
    primary = rows("chat")["chat"]
    assert confirmed_downtime(primary, "no room", allowed=False, dry_run=True)["code"] == "downtime"
    with pytest.raises(DowntimeNotAllowed):
        confirmed_downtime(primary, "no room", allowed=False, dry_run=False)
    assert put(client, "chat", one_npu(engine={"max_model_len": 4096})).json()["effect"] == "rolling"
    with pytest.raises(DeploymentConflict, match="A rolling update of chat is under way") as refused:
        confirmed_downtime(primary, "no room", allowed=False, dry_run=False)
    assert not isinstance(refused.value, DowntimeNotAllowed)


def test_undo_of_a_spec_naming_its_npus_surges_beside_them(client, tiny):
    """`rollout undo` restarted the only replica in place ("No free NPUs for a surge replica" with 7 free):
    the spec kept for it names NPU 0, which the surge may not take."""
    put(client, "chat", one_npu())
    settle()
    put(client, "chat", one_npu(engine={"max_model_len": 4096}))
    roll_to_the_end()
    answer = client.post("/api/v1/deployments/chat/rollback/")
    assert answer.status_code == 202, answer.json()
    rollout = answer.json()["rollout"]
    assert (rollout["phase"], rollout["surge"]) == ("surge", "chat-r2"), rollout["message"]
    assert roll_to_the_end().status == "succeeded"
    assert rows("chat")["chat"].spec["max_model_len"] == 2048


def test_a_change_that_would_stop_serving_needs_allow_downtime(client, tiny):
    put(client, "other", spec())  # 2 NPUs of 4, and chat the other 2: no room for a surge
    put(client, "chat", spec())
    settle()
    change = spec(engine={"max_model_len": 4096})
    dry = put(client, "chat", change, dry_run="true")
    (said,) = [w for w in dry.json()["warnings"] if w["code"] == "downtime"]
    assert "stops serving chat for about" in said["message"]

    refused = put(client, "chat", change)
    assert refused.status_code == 409
    assert "allow_downtime" in refused.json()["errors"]
    assert not rows("chat")["chat"].rollouts.exists()

    taken = put(client, "chat", change, allow_downtime="true")
    assert taken.status_code == 202, taken.json()
    assert "replaced in place" in taken.json()["rollout"]["message"]


def test_restart_of_a_serving_deployment_surges_first(client, tiny):
    put(client, "chat", one_npu())
    settle()
    answer = client.post("/api/v1/deployments/chat/restart/")
    assert answer.status_code == 202, answer.json()
    rollout = answer.json()["rollout"]
    assert (rollout["status"], rollout["surge"]) == ("running", "chat-r2")
    assert rows("chat")["chat"].observed_state == "running"  # it serves until the surge does
    assert roll_to_the_end().status == "succeeded"
    assert sorted(rows("chat")) == ["chat"]


def test_a_viewer_reads_the_history_too(client, tiny, charlie):
    put(client, "chat", one_npu())
    assert [r["number"] for r in revisions(api_client_for(charlie))] == [1]


def test_a_deployment_made_by_the_wizards_request_starts_at_revision_1(client, tiny):
    from panel.catalog.models import ModelArtifact

    artifact = ModelArtifact.objects.get(model=tiny)
    body = {
        "name": "chat",
        "model": tiny.pk,
        "artifact": artifact.pk,
        "nodes": [{"node": "npu-a", "npus": [0]}],
    }
    made = client.post("/api/v1/deployments/", body, format="json")
    assert made.status_code == 201, made.json()
    (first,) = revisions(client)
    assert (first["number"], first["cause"], first["spec"]["placement"]) == (
        1,
        "create",
        {"node": "npu-a", "npus": [0]},
    )
