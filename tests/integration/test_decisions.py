"""Recorded decisions (docs/serving-plane.md §2, panel/deployments/decisions.py): a row written in the
change's transaction, one `deployment.decision` frame on the deployment's socket group and monitoring's
`deployment_event_recorded` after commit, none if the change rolled back; settled later; the gateway's
`record_later` recorded by the real panel worker."""

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.db import transaction

from panel.catalog.models import Model
from panel.core.domain.choices import DecisionKind, DecisionOutcome
from panel.deployments import decisions, reasons
from panel.deployments.models import Decision, Deployment
from panel.monitoring.signals import deployment_event_recorded
from tests.deployment_helpers import wait_for
from tests.panel_sockets import connect_as

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

WAITING = reasons.part("waiting {w}/replica > {t} for {s} s: {a} → {b}", w=9.5, t=4, s=30, a=2, b=3)
FIGURES = {"waiting_per_replica": 9.5, "target": 4, "for_s": 30, "from": 2, "to": 3}


@pytest.fixture
def heard():
    """What `deployment_event_recorded` carried, in order."""
    events = []

    def receiver(sender, decision, settled, **kwargs):
        events.append((decision["kind"], decision["outcome"], settled))

    deployment_event_recorded.connect(receiver, dispatch_uid="test-decisions-heard")
    yield events
    deployment_event_recorded.disconnect(dispatch_uid="test-decisions-heard")


@pytest.fixture
def qwen(_wired_to_redis, settings):
    settings.REDIS_URL = _wired_to_redis
    return Deployment.objects.create(name="qwen", model=Model.objects.create(name="m"))


def test_a_decision_is_written_with_its_change_and_settled(qwen, heard):
    with transaction.atomic():
        decision = decisions.record(qwen, DecisionKind.SCALE_UP, reason=[WAITING], figures=FIGURES)
        assert heard == []  # not before the change commits
    assert heard == [("scale_up", "pending", False)]
    stored = Decision.objects.get()
    assert (stored.deployment, stored.deployment_name, stored.actor, stored.role) == (
        qwen,
        "qwen",
        "leader",
        "",
    )
    assert stored.reason == "waiting 9.5/replica > 4 for 30 s: 2 → 3"
    assert stored.figures == FIGURES
    with transaction.atomic():
        decisions.settle(decision, DecisionOutcome.FAILED, "No free NPU for the new replica.")
    stored.refresh_from_db()
    assert (stored.outcome, stored.outcome_text) == ("failed", "No free NPU for the new replica.")
    assert stored.settled is not None
    assert heard[-1] == ("scale_up", "failed", True)


def test_a_change_that_rolls_back_leaves_no_decision_and_tells_nobody(qwen, heard):
    def change():
        with transaction.atomic():
            decisions.record(qwen, DecisionKind.SCALE_DOWN, reason="idle")
            raise RuntimeError("the change failed")

    with pytest.raises(RuntimeError):
        change()
    assert not Decision.objects.exists()
    assert heard == []


def test_last_is_per_kind_and_role_and_a_replicas_decision_goes_on_its_primary(qwen):
    replica = Deployment.objects.create(name="qwen-r2", model=qwen.model, replica_of=qwen)
    assert decisions.last(qwen, DecisionKind.SCALE_REFUSED) is None
    decisions.record(qwen, DecisionKind.SCALE_REFUSED, reason="no room", role="decode")
    newest = decisions.record(replica, DecisionKind.SCALE_REFUSED, reason="still no room", role="decode")
    decisions.record(qwen, DecisionKind.SCALE_REFUSED, reason="plain", role="")
    assert decisions.last(replica, DecisionKind.SCALE_REFUSED, role="decode") == newest
    assert (newest.deployment, newest.replica) == (qwen, "qwen-r2")
    assert decisions.last(qwen, DecisionKind.SCALE_REFUSED).reason == "plain"


def test_bad_calls_fail_in_their_caller(qwen):
    with pytest.raises(decisions.BadDecision, match="kind 'scale_sideways'"):
        decisions.record(qwen, "scale_sideways", reason="x")
    with pytest.raises(decisions.BadDecision, match="role 'mixed'"):
        decisions.record(qwen, DecisionKind.WAKE, reason="x", role="mixed")
    with pytest.raises(decisions.BadDecision, match="actor 'robot'"):
        decisions.record_later(qwen.pk, DecisionKind.WAKE, reason="x", actor="robot")
    decision = decisions.record(qwen, DecisionKind.WAKE, reason="x")
    with pytest.raises(decisions.BadDecision, match="not pending"):
        decisions.settle(decision, DecisionOutcome.PENDING)


def test_the_name_is_kept_after_the_deployment_is_deleted(qwen):
    decisions.record(qwen, DecisionKind.RESTART, reason="The engine process exited.", outcome="done")
    qwen.delete()
    stored = Decision.objects.get()
    assert (stored.deployment, stored.deployment_name, stored.outcome) == (None, "qwen", "done")


def test_the_gateways_decision_is_recorded_by_the_panel_worker(qwen, celery_worker, alice, heard):
    retried = reasons.part(
        "NPU {npu} of {node} failed: request retried on {other}.", npu=3, node="a", other="b"
    )
    assert decisions.record_later(qwen.pk, DecisionKind.REQUEST_RETRIED, reason=[retried], figures={"npu": 3})
    assert decisions.record_later(
        qwen.pk, DecisionKind.WAKE, reason="first request", user=alice, actor="user"
    )
    wait_for(lambda: Decision.objects.count() == 2, 30, "the worker records both")
    retry = Decision.objects.get(kind="request_retried")
    assert (retry.actor, retry.reason_parts, retry.figures) == ("gateway", [retried], {"npu": 3})
    assert Decision.objects.get(kind="wake").username == "alice"
    assert decisions.record_decision(987654, DecisionKind.WAKE, reason=[]) is None  # gone: nothing written


async def test_the_deployments_socket_hears_each_record_and_settle(qwen, alice):
    socket = await connect_as(alice, ["deployment.qwen"])
    try:

        def decide():
            with transaction.atomic():
                decision = decisions.record(
                    qwen, DecisionKind.SLEEP, reason="idle for 300 s", figures={"idle_s": 300}
                )
            decisions.settle(decision, DecisionOutcome.DONE)

        await database_sync_to_async(decide)()
        frames = []
        async with asyncio.timeout(15):
            while len(frames) < 2:
                message = await socket.receive_json_from(timeout=15)
                if message.get("type") == "deployment.decision":
                    frames.append(message)
        assert [f["decision"]["outcome"] for f in frames] == ["pending", "done"]
        first = frames[0]
        assert (first["name"], first["decision"]["kind"], first["decision"]["figures"]) == (
            "qwen",
            "sleep",
            {"idle_s": 300},
        )
        assert first["decision"]["reason"] == "idle for 300 s"
    finally:
        await socket.disconnect()
