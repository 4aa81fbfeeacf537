"""Replicas and rolling updates through `PUT /api/v1/deployments/{name}/`: scale 1 → 3 → 1, a rollout with
a surge replica, one without room for a surge, a failed rollout, 409 during a rollout, the spec round trip.
Agents are not involved: launches and stops are finished the way the ingest finishes them, and the
reconcile tick is called by hand."""

import pytest

from tests.integration.test_deployment_apply import client, finish, npu_node, pending, put, spec, tiny

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name

RUNTIME = {"runtime": {"pid": 100, "port": 8000, "log_path": "/x.log"}}


def one_npu(**overrides):
    return spec(placement={"node": "npu-a", "npus": 1}, **overrides)


def settle():
    """Finish every pending launch (succeeded) and stop, until none is left."""
    while True:
        operations = pending("deploy") + pending("stop")
        if not operations:
            return
        for operation in operations:
            finish(operation, result=RUNTIME if operation.kind == "deploy" else None)


def settle_stops_only():
    """Finish every pending stop (a restart then sends its launch), leaving launches pending."""
    for operation in pending("stop"):
        finish(operation)


def rows(name):
    from panel.deployments.models import Deployment

    return {
        row.name: row
        for row in Deployment.objects.filter(name__startswith=name).exclude(desired_state="deleted")
    }


def held(row):
    return sorted(row.npus.values_list("logic_id", flat=True))


def advance():
    """One reconcile tick (it probes running engines too: those probes go unanswered here)."""
    from panel.deployments.models import Rollout
    from panel.deployments.rollouts.reconcile import tick

    running_before = Rollout.objects.filter(status="running").count()
    assert tick()["rollouts"] == running_before
    return Rollout.objects.order_by("-pk").first()


def test_scale_one_to_three_and_back_to_one(client, tiny):
    assert put(client, "chat", one_npu()).status_code == 201
    settle()
    up = put(client, "chat", one_npu(replicas=3))
    assert up.status_code == 202, up.json()
    body = up.json()
    assert (body["effect"], body["replicas"]) == ("scale", {"wanted": 3, "now": 1})
    assert body["changes"] == [{"field": "replicas", "from": 1, "to": 3}]
    assert not pending("stop")  # the primary is not touched
    settle()
    now = rows("chat")
    assert sorted(now) == ["chat", "chat-r2", "chat-r3"]
    assert {name: held(row) for name, row in now.items()} == {"chat": [0], "chat-r2": [1], "chat-r3": [2]}
    assert {row.spec["served_model_name"] for row in now.values()} == {"chat"}
    assert len({row.spec["port"] for row in now.values()}) == 3
    assert {row.observed_state for row in now.values()} == {"running"}
    assert now["chat-r2"].replica_of == now["chat"]

    detail = client.get("/api/v1/deployments/chat/").json()
    assert [(r["name"], r["status"]) for r in detail["replicas"]] == [
        ("chat-r2", "running"),
        ("chat-r3", "running"),
    ]
    assert detail["replicas_wanted"] == 3
    assert put(client, "chat", one_npu(replicas=3)).json()["result"] == "unchanged"

    down = put(client, "chat", one_npu(replicas=1))
    assert (down.json()["effect"], down.json()["replicas"]) == ("scale", {"wanted": 1, "now": 3})
    assert sorted(op.target for op in pending("stop")) == ["chat-r2", "chat-r3"]
    settle()
    from panel.deployments.models import Deployment

    assert list(Deployment.objects.values_list("name", flat=True)) == ["chat"]
    assert held(Deployment.objects.get(name="chat")) == [0]


def test_scale_down_takes_the_highest_replicas(client, tiny):
    put(client, "chat", one_npu(replicas=3))
    settle()
    put(client, "chat", one_npu(replicas=2))
    assert [op.target for op in pending("stop")] == ["chat-r3"]
    settle()
    assert sorted(rows("chat")) == ["chat", "chat-r2"]


def test_a_rolling_update_with_a_surge_replaces_one_replica_at_a_time(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "chat", one_npu(replicas=2))
    settle()
    answer = put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096}))
    assert answer.status_code == 202, answer.json()
    assert answer.json()["effect"] == "rolling"
    seen = [(answer.json()["rollout"]["phase"], answer.json()["rollout"]["current"])]
    assert answer.json()["rollout"]["surge"] == "chat-r3"
    for _round in range(20):
        # While a replica is replaced, the others (and the surge) serve.
        serving = [r.name for r in rows("chat").values() if r.observed_state == "running"]
        assert len(serving) >= 2, serving
        settle()
        rollout = advance()
        seen.append((rollout.phase, rollout.current))
        if rollout.status != "running":
            break
    assert rollout.status == "succeeded", rollout.message
    assert (rollout.done, rollout.total) == (2, 2)
    phases = [step for i, step in enumerate(seen) if i == 0 or step != seen[i - 1]]
    assert phases == [
        ("surge", "chat"),
        ("replace", "chat"),
        ("cleanup", "chat"),
        ("surge", "chat-r2"),
        ("replace", "chat-r2"),
        ("cleanup", "chat-r2"),
        ("done", ""),
    ]
    now = rows("chat")
    assert sorted(now) == ["chat", "chat-r2"]  # the surge is gone
    assert {row.spec["max_model_len"] for row in now.values()} == {4096}
    assert {row.observed_state for row in now.values()} == {"running"}
    assert Deployment.objects.get(name="chat").restart_count == 1
    detail = client.get("/api/v1/deployments/chat/").json()["rollout"]
    assert (detail["status"], detail["done"], detail["total"]) == ("succeeded", 2, 2)
    assert put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096})).json()["result"] == (
        "unchanged"
    )


def test_without_room_for_a_surge_replicas_are_replaced_in_place(client, tiny):
    put(client, "chat", spec(replicas=2))  # 2 x 2 NPUs: the node is full
    settle()
    answer = put(client, "chat", spec(replicas=2, engine={"max_model_len": 4096}))
    rollout = answer.json()["rollout"]
    assert (rollout["phase"], rollout["current"], rollout["surge"]) == ("replace", "chat", "")
    assert "replaced in place" in rollout["message"]
    assert "no free NPU" in rollout["message"].lower() or "free NPUs" in rollout["message"]
    assert [op.target for op in pending("stop")] == ["chat"]
    settle()
    rollout = advance()
    assert (rollout.phase, rollout.current) == ("replace", "chat-r2")
    settle()
    rollout = advance()
    assert rollout.status == "succeeded"
    assert {row.spec["max_model_len"] for row in rows("chat").values()} == {4096}


def test_a_failed_surge_stops_the_rollout_and_leaves_the_replicas_serving(client, tiny):
    put(client, "chat", one_npu(replicas=2))
    settle()
    before = {name: (row.spec, row.restart_count) for name, row in rows("chat").items()}
    answer = put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096}))
    assert answer.json()["rollout"]["surge"] == "chat-r3"
    (launch,) = pending("deploy")
    assert launch.target == "chat-r3"
    finish(launch, status="failed")
    rollout = advance()
    assert rollout.status == "failed"
    assert "chat-r3" in rollout.message
    settle()  # the surge's stop
    now = rows("chat")
    assert sorted(now) == ["chat", "chat-r2"]
    assert {name: (row.spec, row.restart_count) for name, row in now.items()} == before
    assert {row.observed_state for row in now.values()} == {"running"}
    detail = client.get("/api/v1/deployments/chat/").json()["rollout"]
    assert detail["status"] == "failed"
    # A failed rollout is over: the next apply may try again.
    assert put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096})).status_code == 202


def test_apply_during_a_rollout_is_refused(client, tiny):
    put(client, "chat", one_npu())
    settle()
    assert put(client, "chat", one_npu(engine={"max_model_len": 4096})).json()["effect"] == "rolling"
    again = put(client, "chat", one_npu(engine={"max_model_len": 1024}))
    assert again.status_code == 409
    assert "rolling update" in again.json()["detail"]
    assert put(client, "chat", one_npu(replicas=2)).status_code == 409


def test_the_spec_round_trips_with_replicas(client, tiny):
    put(client, "chat", one_npu(replicas=3, engine={"max_model_len": 2048, "served_model_name": "qwen"}))
    settle()
    exported = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert exported["replicas"] == 3
    assert exported["engine"]["served_model_name"] == "qwen"
    assert {row.spec["served_model_name"] for row in rows("chat").values()} == {"qwen"}
    again = put(client, "chat", exported)
    assert again.json().get("result") == "unchanged", again.json()


def test_deleting_the_primary_deletes_its_replicas(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "chat", one_npu(replicas=2))
    settle()
    assert client.delete("/api/v1/deployments/chat/").status_code == 202
    assert sorted(op.target for op in pending("stop")) == ["chat", "chat-r2"]
    settle()
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("x" * 60, one_npu(replicas=2), "name"),
        ("chat", spec(replicas=2, placement={"node": "npu-a", "npus": [0]}), "replicas"),
        ("chat", spec(replicas=2, placement=None, nodes=[{"node": "npu-a", "npus": [0]}]), "replicas"),
        ("chat", one_npu(replicas=2, engine={"port": 65534}), "engine.port"),  # replica 2: 65536
        ("chat", one_npu(replicas=5), "replicas"),  # 5 x 1 NPU on a node of 4
    ],
)
def test_replicas_that_cannot_be_placed_are_refused(client, tiny, name, body, field):
    from panel.deployments.models import Deployment

    answer = put(client, name, body)
    assert answer.status_code == 400, answer.json()
    assert field in answer.json()["errors"], answer.json()
    assert not Deployment.objects.exists()


def test_replicas_given_a_port_take_it_and_the_ports_after_it_and_keep_them(client, tiny):
    body = one_npu(replicas=3, engine={"max_model_len": 2048, "port": 19000})
    assert put(client, "chat", body).status_code == 201
    settle()
    assert {name: row.spec["port"] for name, row in rows("chat").items()} == {
        "chat": 19000,
        "chat-r2": 19002,
        "chat-r3": 19004,
    }
    assert put(client, "chat", body).json()["result"] == "unchanged"
    round_trip = client.get("/api/v1/deployments/chat/?format=spec").json()
    assert round_trip["engine"]["port"] == 19000
    assert put(client, "chat", round_trip).json()["result"] == "unchanged"


def test_a_surge_replica_gets_a_port_of_its_own_beside_pinned_ones(client, tiny):
    assert put(client, "chat", one_npu(engine={"max_model_len": 2048, "port": 19000})).status_code == 201
    settle()
    rolled = put(client, "chat", one_npu(engine={"max_model_len": 1024, "port": 19000}))
    assert rolled.json()["effect"] == "rolling", rolled.json()
    now = rows("chat")
    assert sorted(now) == ["chat", "chat-r2"]
    assert now["chat"].spec["port"] == 19000
    assert now["chat-r2"].spec["port"] not in (19000, 19001)
    assert not now["chat-r2"].plan["port_pinned"]


def test_a_replica_is_not_applied_on_its_own(client, tiny):
    put(client, "chat", one_npu(replicas=2))
    answer = put(client, "chat-r2", one_npu())
    assert answer.status_code == 400
    assert "replica of chat" in answer.json()["errors"]["name"][0]


def test_the_pages_show_the_replicas_and_the_rolling_update(client, tiny, charlie):
    from django.test import Client

    browser = Client()
    browser.force_login(charlie)
    put(client, "solo", one_npu())
    put(client, "chat", one_npu(replicas=2))
    settle()
    # A deployment of one replica that never rolled has no such section.
    assert 'data-testid="replicas"' not in browser.get("/deployments/solo/").content.decode()
    put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096}))

    page = browser.get("/deployments/chat/").content.decode()
    assert 'data-testid="replicas"' in page
    for name in ("chat", "chat-r2", "chat-r3"):  # chat-r3: the surge
        assert f'data-replica="{name}"' in page, name
    assert 'data-testid="rollout" data-status="running"' in page
    assert "0 of 2 replicas" in page
    assert "a surge replica starts with the new launch" in page

    replica = browser.get("/deployments/chat-r2/").content.decode()
    assert "a replica of chat" in replica
    assert 'data-replica="chat-r2" aria-current="true"' in replica
    listed = browser.get("/deployments/").content.decode()
    assert listed.count("replica of chat") == 2

    chinese = Client(headers={"accept-language": "zh-hans"})
    chinese.force_login(charlie)
    page = chinese.get("/deployments/chat/").content.decode()
    assert "副本" in page
    assert "最近一次滚动更新" in page
    # The rollout's message was written by the apply in English; the page shows it in the viewer's language.
    assert "chat-r3 以新的启动配置启动；之后替换 chat。" in page


def test_a_replica_that_fails_with_the_new_launch_goes_back_to_its_old_one(client, tiny):
    from panel.deployments.models import Deployment

    put(client, "chat", spec(replicas=2))  # 2 x 2 NPUs: no room for a surge, so in place
    settle()
    held_before = held(Deployment.objects.get(name="chat"))
    answer = put(client, "chat", spec(replicas=2, engine={"max_model_len": 4096}))
    assert answer.json()["rollout"]["phase"] == "replace"
    settle_stops_only()
    (launch,) = pending("deploy")  # chat restarts with the new launch, which fails
    finish(launch, status="failed")
    rollout = advance()
    assert rollout.status == "failed"
    assert "chat did not start with the new launch" in rollout.message
    assert "went back to its previous launch" in rollout.message
    shown = client.get("/api/v1/deployments/chat/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()["rollout"]
    assert shown["message"] == rollout.message  # English, as the logs have it
    assert "chat 未能以新的启动配置启动。" in shown["message_display"]
    assert "chat 已恢复为之前的启动配置并重新启动。" in shown["message_display"]
    chat = Deployment.objects.get(name="chat")
    assert chat.spec["max_model_len"] == 2048
    assert held(chat) == held_before
    assert "Rolled back" in chat.reason
    settle()
    now = rows("chat")
    assert {row.observed_state for row in now.values()} == {"running"}
    assert {row.spec["max_model_len"] for row in now.values()} == {2048}  # chat-r2 was never reached


def test_a_surge_beside_a_pinned_port_gets_a_port_of_its_own(client, tiny):
    from panel.deployments.models import Deployment

    pinned = one_npu(engine={"max_model_len": 2048, "port": 18555})
    put(client, "chat", pinned)
    settle()
    answer = put(client, "chat", one_npu(engine={"max_model_len": 4096, "port": 18555}))
    assert answer.json()["rollout"]["surge"] == "chat-r2", answer.json()
    surge = Deployment.objects.get(name="chat-r2")
    assert surge.spec["port"] != 18555
    assert Deployment.objects.get(name="chat").spec["port"] == 18555


def test_a_wait_for_running_waits_for_every_replica_and_the_rollout(client, tiny, bob):
    """`?wait=running` (apply --wait) answers once the spec's replicas run and no rolling update moves
    them, not as soon as the primary runs."""
    from panel.deployments.api.waiting import DeploymentWaiter
    from panel.deployments.models import Deployment

    def waited():
        chat = Deployment.objects.get(name="chat")
        return DeploymentWaiter().check(("chat", chat.pk), "running", bob)[0]

    from panel.core.rest.streams import REACHED

    put(client, "chat", one_npu(replicas=2))
    finish(next(op for op in pending("deploy") if op.target == "chat"), result=RUNTIME)
    assert Deployment.objects.get(name="chat").observed_state == "running"
    assert waited() is None  # chat-r2 is still starting
    settle()
    assert waited() == REACHED

    put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096}))
    assert waited() is None  # a rolling update is under way, though every replica runs now
    for _ in range(12):
        settle()
        if advance().status != "running":
            break
    assert advance().status == "succeeded"
    assert waited() == REACHED


def test_apply_wait_exits_1_when_the_rollout_it_started_failed():
    from panel.cli.commands.apply import failed_rollout
    from panel.cli.errors import CliError

    started = {"id": 7, "status": "running"}
    failed_rollout("chat", {"rollout": started, "deployment": {"rollout": {"id": 7, "status": "succeeded"}}})
    failed_rollout("chat", {"rollout": None, "deployment": {"rollout": {"id": 6, "status": "failed"}}})
    with pytest.raises(CliError, match="the rolling update failed: chat did not start") as raised:
        failed_rollout(
            "chat",
            {
                "rollout": started,
                "deployment": {"rollout": {"id": 7, "status": "failed", "message": "chat did not start."}},
            },
        )
    assert raised.value.code == 1
