"""The decisions deployments record today (docs/serving-plane.md §2), so a deployment's timeline tells what
happened: each revision, a person's scale, start, stop and restart (with who), a rolling update from start
to end, the reconcile loop's restarts in place and its giving up. Agents are not involved: launches and
stops are finished the way the ingest finishes them."""

import pytest
from django.utils import timezone

from panel.deployments.models import Decision
from tests.integration.test_deployment_apply import client, finish, npu_node, put, tiny
from tests.integration.test_deployment_replicas import one_npu, pending, rows, settle
from tests.integration.test_deployment_revisions import roll_to_the_end

pytestmark = pytest.mark.django_db

__all__ = ["client", "npu_node", "tiny"]  # fixtures used by name


def timeline(name="chat") -> list[tuple]:
    """(kind, outcome, who) of every decision about `name`, oldest first."""
    found = Decision.objects.filter(deployment_name=name).order_by("time", "id")
    return [(d.kind, d.outcome, d.username or d.actor) for d in found]


def test_revisions_a_persons_scale_and_a_rolling_update(client, tiny):
    put(client, "chat", one_npu())
    settle()
    assert put(client, "chat", one_npu(replicas=2)).status_code == 202
    settle()
    assert put(client, "chat", one_npu(replicas=2, engine={"max_model_len": 4096})).status_code == 202
    roll_to_the_end()
    assert timeline() == [
        ("revision", "done", "bob"),
        ("scale_up", "done", "bob"),
        ("revision", "done", "bob"),
        ("rollout", "done", "bob"),
        ("revision", "done", "bob"),
    ]
    scale = Decision.objects.get(kind="scale_up")
    assert (scale.figures, scale.reason) == (
        {"from": 1, "to": 2, "revision": 2},
        "Replicas set to 2 (were 1).",
    )
    rollout = Decision.objects.get(kind="rollout")
    assert (rollout.figures, rollout.outcome_text) == ({"replicas": 2}, "All 2 replicas run the new launch.")
    assert Decision.objects.filter(kind="revision").order_by("time", "id").last().reason == (
        "Revision 3 applied: engine.max_model_len changed."
    )


def test_the_scale_page_records_the_scale_alone(client, tiny, bob):
    from django.test import Client

    put(client, "chat", one_npu())
    settle()
    browser = Client()
    browser.force_login(bob)
    assert browser.post("/deployments/chat/scale/", {"replicas": "1"}).status_code == 302  # unchanged
    assert browser.post("/deployments/chat/scale/", {"replicas": "2"}).status_code == 302
    assert timeline()[1:] == [("scale_up", "done", "bob")]


def test_a_persons_stop_start_and_restart_settle_when_the_engine_does(client, tiny):
    put(client, "chat", one_npu())
    settle()
    assert client.post("/api/v1/deployments/chat/stop/").status_code == 202
    assert timeline()[-1] == ("stop", "pending", "bob")
    settle()
    assert timeline()[-1] == ("stop", "done", "bob")
    assert client.post("/api/v1/deployments/chat/start/").status_code == 202
    settle()
    assert timeline()[-1] == ("start", "done", "bob")
    assert client.post("/api/v1/deployments/chat/restart/").status_code == 202
    assert timeline()[-2:] == [("restart", "pending", "bob"), ("rollout", "pending", "bob")]
    roll_to_the_end()
    assert timeline()[-2:] == [("restart", "done", "bob"), ("rollout", "done", "bob")]


def test_failed_launches_restart_with_their_back_off_then_give_up(client, tiny, settings):
    settings.PANEL_DEPLOY_MAX_RESTARTS = 2
    put(client, "chat", one_npu())
    for _attempt in range(3):
        (launch,) = pending("deploy")
        finish(launch, status="failed")
        chat = rows("chat")["chat"]
        chat.next_restart_at = timezone.now()  # the back-off is over
        chat.save()
        from panel.deployments.rollouts.reconcile import tick

        tick()
    assert rows("chat")["chat"].observed_state == "failed"
    assert timeline()[1:] == [
        ("restart", "failed", "leader"),
        ("restart", "failed", "leader"),
        ("gave_up", "done", "leader"),
    ]
    first, second, gave_up = Decision.objects.filter(kind__in=["restart", "gave_up"]).order_by("time", "id")
    assert first.figures == {"failed_restarts": 1, "after_s": 0}  # the first restart at once
    assert second.figures["failed_restarts"] == 2
    assert second.figures["after_s"] > 0  # then with a back-off
    assert gave_up.figures == {"failed_restarts": 2}
    assert gave_up.reason.endswith("Gave up after 2 failed restarts.")


def test_an_engine_that_exited_is_restarted_in_place_and_the_restart_settles_when_it_runs(client, tiny):
    from panel.deployments.rollouts.reconcile import ingest_probe

    put(client, "chat", one_npu())
    settle()
    ingest_probe({"node": "npu-a", "results": [{"name": "chat", "alive": False, "healthy": False}]})
    restart = Decision.objects.get(kind="restart")
    assert (restart.outcome, restart.actor, restart.reason) == (
        "pending",
        "leader",
        "The engine process exited.",
    )
    assert restart.figures == {"restarts": 1}
    settle()  # the new launch reaches running
    restart.refresh_from_db()
    assert restart.outcome == "done"
