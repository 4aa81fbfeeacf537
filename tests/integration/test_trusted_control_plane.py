"""The control plane under attack and under faults, through the real panel tasks and a real Celery worker:
messages signed with node A's credential change nothing of node B; a task nobody signed runs nothing; a
message's models root is ignored; redelivered and lost attempts end in one finished operation whose log
keeps every attempt; operations whose agent is gone end failed with a reason and release what they held;
what the broker did not take is sent later."""

import os
import time
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from tests.conftest import api_client_for
from tests.deployment_helpers import wait_for
from tests.integration.conftest import TEST_NODE, event_batch
from tests.node_trust import as_node_a, operation_on, rejected
from workers.identity import seal_for_panel, use_keys
from workers.task_names import HEARTBEAT, INGEST_DEPLOYMENT_PROBE, INGEST_EVENTS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.mark.usefixtures("_wired_to_redis")
def test_node_a_cannot_write_events_for_node_bs_operation(nodes_a_and_b):
    from panel.operations.tasks import ingest_events

    node_a, node_b = nodes_a_and_b
    operation = operation_on(node_b)
    as_node_a(nodes_a_and_b)
    before = rejected("event_batch")
    batch = event_batch(operation, (1, "state", {"state": "succeeded", "result": {"facts": {"x": 1}}}))
    # Signed honestly as A but about B's operation, then signed as A while claiming to be B.
    assert ingest_events(seal_for_panel(INGEST_EVENTS, "node-a", {**batch, "node": "node-a"})) == 0
    forged = seal_for_panel(INGEST_EVENTS, "node-a", batch)
    assert ingest_events({**forged, "node": "node-b", "signer": "node-b"}) == 0
    operation.refresh_from_db()
    assert (operation.status, operation.last_seq) == ("pending", 0)
    assert rejected("event_batch") == before + 2


@pytest.mark.usefixtures("_wired_to_redis")
def test_node_a_cannot_beat_for_node_b_and_a_removed_node_is_refused(nodes_a_and_b):
    from panel.nodes.tasks import heartbeat
    from workers.contracts import Heartbeat, utcnow

    node_a, node_b = nodes_a_and_b
    as_node_a(nodes_a_and_b)
    beat_b = Heartbeat(node="node-b", time=utcnow(), agent_version="x").model_dump(mode="json")
    heartbeat({**seal_for_panel(HEARTBEAT, "node-a", beat_b), "node": "node-b"})
    node_b.refresh_from_db()
    assert node_b.last_heartbeat is None
    beat_a = Heartbeat(node="node-a", time=utcnow(), agent_version="x").model_dump(mode="json")
    heartbeat(seal_for_panel(HEARTBEAT, "node-a", beat_a))
    node_a.refresh_from_db()
    assert node_a.last_heartbeat is not None  # A's own beat counts
    node_a.delete()  # revokes A's credential
    before = rejected("heartbeat")
    heartbeat(seal_for_panel(HEARTBEAT, "node-a", beat_a))
    assert rejected("heartbeat") == before + 1


@pytest.mark.usefixtures("_wired_to_redis")
def test_node_a_cannot_set_the_pid_or_log_of_node_bs_deployment(nodes_a_and_b):
    from panel.catalog.models import Model
    from panel.deployments.models import Deployment
    from panel.deployments.tasks import ingest_deployment_probe

    node_a, node_b = nodes_a_and_b
    deployment = Deployment.objects.create(name="on-b", model=Model.objects.create(name="m"))
    deployment.nodes.add(node_b)
    as_node_a(nodes_a_and_b)
    probe = {"node": "node-a", "time": timezone.now().isoformat(), "results": [{"name": "on-b", "pid": 1}]}
    probe["results"][0]["lines"] = ["injected log line"]
    probe["results"][0]["log_offset"] = 99
    before = rejected("probe")
    ingest_deployment_probe(seal_for_panel(INGEST_DEPLOYMENT_PROBE, "node-a", probe))
    deployment.refresh_from_db()
    assert deployment.runtime == {}
    assert not deployment.log_lines.exists()
    assert rejected("probe") == before + 1


@pytest.mark.usefixtures("_wired_to_redis")
def test_metrics_signed_by_a_for_b_are_dropped_and_counted(nodes_a_and_b):
    from panel.monitoring.metrics.inbox import MetricsIngester
    from panel.monitoring.metrics.store import read_latest
    from workers.contracts import HostSample, MetricBatch, MetricSample, utcnow
    from workers.identity import inbox_line

    as_node_a(nodes_a_and_b)
    sample = MetricSample(
        time=utcnow(), host=HostSample(cpu_pct=1, memory_used_mb=1, memory_total_mb=2, load1=0)
    )
    forged = MetricBatch(node="node-b", samples=[sample], seq=1, sent_at=utcnow()).model_dump_json().encode()
    before = rejected("metrics")
    MetricsIngester().ingest_all([inbox_line("node-a", forged), b"unsigned " + forged])
    assert rejected("metrics") == before + 2
    assert "node-b" not in read_latest(["node-b"])


def start(node, task_name, **task_kwargs):
    from panel.operations.services import create_operation

    return create_operation(kind="model_delete", node=node, task_name=task_name, task_kwargs=task_kwargs)


def wait_terminal(operation, timeout=60):
    def ended():
        operation.refresh_from_db()
        return operation.is_terminal

    wait_for(ended, timeout, f"operation {operation.kind} to end")
    return operation


def test_a_message_cannot_widen_what_the_agent_may_delete(celery_worker):
    from panel.nodes.models import Node
    from workers.task_names import AGENT_DELETE_MODEL

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    victim = celery_worker.sim_root / "etc" / "important"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("keep me")
    operation = wait_terminal(start(node, AGENT_DELETE_MODEL, path="/etc/important", models_root="/"))
    assert operation.status == "failed"
    assert "is not inside the models root /data/models" in operation.error
    assert victim.read_text() == "keep me"


def test_an_unsigned_task_on_a_nodes_queue_runs_nothing(celery_worker):
    from panel.nodes.models import Node
    from panel.operations.models import Operation
    from workers.celery_app import app
    from workers.task_names import AGENT_DELETE_MODEL, node_queue
    from workers.tasks.base import AgentTask

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    folder = celery_worker.sim_root / "data" / "models" / "victim"
    folder.mkdir(parents=True)
    operation = Operation.objects.create(kind="model_delete", node=node, target="victim")
    refused_before = AgentTask.rejected
    app.send_task(
        AGENT_DELETE_MODEL,
        kwargs={"operation_id": str(operation.id), "path": "/data/models/victim"},
        task_id=str(operation.id),
        queue=node_queue(TEST_NODE),
    )
    wait_for(lambda: AgentTask.rejected > refused_before, 30, "the agent to refuse the unsigned task")
    operation.refresh_from_db()
    assert operation.status == "pending"
    assert folder.exists()


def test_a_lost_attempt_is_sent_again_and_its_log_keeps_both_attempts_in_order(celery_worker, settings):
    """Attempt 1 started and died with its agent (its lease released, never finished); the agent's next
    heartbeat no longer lists it, so the reaper sends the task again and attempt 2 finishes it."""
    from panel.nodes.models import Node
    from panel.operations import reaper
    from panel.operations.services import ingest_events
    from workers.leases import OperationLease
    from workers.task_names import AGENT_INVENTORY

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    # Attempt 1 holds the lease, so the delivery the outbox sends runs nothing. Taken before the commit
    # sends the task: the in-process worker would otherwise win the lease on a quick machine.
    with transaction.atomic():
        operation = start(node, AGENT_INVENTORY)
        lease = OperationLease(str(operation.id))
        lease.acquire()
    wait_for(lambda: operation_field(operation, "sent_at"), 10, "the operation to be sent")
    running = event_batch(operation, (1, "state", {"state": "running"}), (2, "log", {"line": "one"}))
    ingest_events(running, sender=node)
    time.sleep(1)
    lease.release()  # the agent died: the kernel dropped its flock
    operation.refresh_from_db()
    assert operation.status == "running"
    Node.objects.filter(pk=node.pk).update(
        last_heartbeat=timezone.now() + timedelta(seconds=60),
        agent_reported_at=timezone.now() + timedelta(seconds=60),
        agent_running=[],
        agent_done=[],
    )
    reaper._last_run.update(at=time.monotonic(), settled_at=0.0)
    report = reaper.reap()
    assert report["resent"] == [str(operation.id)]
    operation = wait_terminal(operation)
    assert operation.status == "succeeded", operation.error
    assert operation.attempt == 2
    # The ending batch can arrive before earlier ones (several sending threads): the log is whole once
    # final_seq is set, which ingest does when every event of the ending attempt is stored.
    wait_for(lambda: operation_field(operation, "final_seq") is not None, 30, "the whole log of attempt 2")
    operation.refresh_from_db()
    events = list(operation.events.order_by("seq").values_list("seq", "attempt", "agent_seq"))
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))  # one contiguous log
    assert events[:2] == [(1, 1, 1), (2, 1, 2)]
    second = [agent_seq for _, attempt, agent_seq in events if attempt == 2]
    # Every event of attempt 2 stored once, none lost. Not in the agent's order: its batches leave from
    # several threads, and `seq` is the order of arrival (panel.operations.ordering reads the agent's order).
    assert sorted(second) == list(range(1, len(second) + 1))
    assert operation.final_seq == operation.last_seq
    assert OperationLease(str(operation.id))._record()["finished"] == "succeeded"


def operation_field(operation, name):
    operation.refresh_from_db()
    return getattr(operation, name)


def test_a_delivery_of_a_finished_operation_runs_nothing(celery_worker):
    from panel.nodes.models import Node
    from panel.operations.dispatch import resend
    from workers.task_names import AGENT_INVENTORY

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    operation = wait_terminal(start(node, AGENT_INVENTORY))
    events = operation.events.count()
    resend(operation)  # a terminal operation is not sent again at all
    operation.refresh_from_db()
    assert operation.dispatches == 1
    from panel.nodes.agents.trust import send_agent_task

    send_agent_task(node, AGENT_INVENTORY, {"operation_id": str(operation.id)}, task_id=str(operation.id))
    time.sleep(3)  # the agent drops the delivery: its lease record says the operation ended
    operation.refresh_from_db()
    assert (operation.events.count(), operation.attempt) == (events, 1)


@pytest.mark.usefixtures("_wired_to_redis")
def test_an_offline_nodes_operations_fail_and_a_delete_there_still_releases_its_npus(db):
    from panel.catalog.models import Model
    from panel.deployments import services
    from panel.deployments.models import Deployment
    from panel.nodes.models import Node, Npu
    from panel.operations import reaper

    node = Node.objects.create(name="gone", last_heartbeat=timezone.now() - timedelta(minutes=5))
    npu = Npu.objects.create(node=node, npu_id=0, chip_id=0, hbm_total_mb=65536)
    deployment = Deployment.objects.create(
        name="on-gone",
        model=Model.objects.create(name="m"),
        observed_state="running",
        spec={"parts": [{"node": "gone", "npus": [0]}]},
    )
    deployment.nodes.add(node)
    deployment.npus.add(npu)
    services.delete(deployment)
    stop = node.operations.get(kind="stop")
    assert stop.status == "pending"
    reaper._last_run.update(at=time.monotonic(), settled_at=0.0)
    assert str(stop.id) in reaper.reap()["failed"]
    stop.refresh_from_db()
    assert stop.status == "failed"
    assert "went offline" in stop.error
    assert not Deployment.objects.filter(name="on-gone").exists()
    assert not npu.deployments.exists()


@pytest.mark.usefixtures("_wired_to_redis")
def test_an_operation_nobody_picks_up_fails_with_a_reason(db, settings):
    from panel.nodes.models import Node
    from panel.operations import reaper

    node = Node.objects.create(name="quiet", last_heartbeat=timezone.now())
    operation = operation_on(node)
    operation.sent_at = timezone.now() - timedelta(seconds=settings.PANEL_OPERATION_PICKUP_S + 1)
    operation.save()
    reaper._last_run.update(at=time.monotonic(), settled_at=0.0)
    reaper.reap()
    operation.refresh_from_db()
    assert operation.status == "failed"
    assert "No agent picked the operation up" in operation.error


def test_what_the_broker_did_not_take_is_accepted_and_sent_later(celery_worker, alice, monkeypatch):
    from kombu.exceptions import OperationalError

    import panel.nodes.agents.trust
    from panel.nodes.models import Node
    from panel.operations.dispatch import send_unsent
    from panel.operations.models import Operation

    Node.objects.create(name=TEST_NODE, transport="agent")
    real_send = panel.nodes.agents.trust.celery_app.send_task

    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(panel.nodes.agents.trust.celery_app, "send_task", broker_down)
    node_pk = Node.objects.get(name=TEST_NODE).pk
    response = api_client_for(alice).post(f"/api/v1/nodes/{node_pk}/inventory/")
    assert response.status_code in (201, 202), response.content
    operation = Operation.objects.get(pk=response.json()["id"])
    assert (operation.sent_at, operation.status) == (None, "pending")
    assert "Connection refused" in operation.send_error
    monkeypatch.setattr(panel.nodes.agents.trust.celery_app, "send_task", real_send)
    Operation.objects.filter(pk=operation.pk).update(updated=timezone.now() - timedelta(seconds=10))
    assert send_unsent() == 1
    operation = wait_terminal(operation)
    assert operation.status == "succeeded"
    assert operation.dispatches == 1


def test_an_admin_force_fails_a_stuck_operation_and_others_may_not(nodes_a_and_b, alice, bob):
    operation = operation_on(nodes_a_and_b[1])
    assert api_client_for(bob).post(f"/api/v1/operations/{operation.id}/force-fail/").status_code == 403
    response = api_client_for(alice).post(
        f"/api/v1/operations/{operation.id}/force-fail/", {"reason": "host reinstalled"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "failed"
    assert response.json()["error"] == "Force-failed by alice: host reinstalled"
    from panel.audit.models import AuditEntry

    entry = AuditEntry.objects.get(action="operation.force_failed")
    assert (entry.actor, entry.target) == (alice, str(operation.id))
    assert entry.details["reason"] == "host reinstalled"
    again = api_client_for(alice).post(f"/api/v1/operations/{operation.id}/force-fail/")
    assert again.status_code == 409


def test_an_agent_refuses_to_start_without_its_credential(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_PANEL_AGENT_KEY")}
    env["ASCEND_PANEL_NODE_NAME"] = f"n-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, "-m", "workers.agent"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "holds no credential" in done.stderr


@pytest.mark.usefixtures("_wired_to_redis")
def test_an_agent_that_is_back_within_the_grace_keeps_its_running_operation(db, settings):
    from panel.nodes.models import Node
    from panel.operations import reaper

    node = Node.objects.create(name="restarting", last_heartbeat=timezone.now() - timedelta(seconds=30))
    assert node.effective_status == "offline"  # three 5 s heartbeats missed
    operation = operation_on(node)
    operation.status, operation.sent_at = "running", timezone.now()
    operation.save()
    reaper._last_run.update(at=time.monotonic(), settled_at=0.0)
    assert reaper.reap()["failed"] == []  # 30 s of silence: within PANEL_OPERATION_OFFLINE_GRACE_S


def test_a_cancel_flag_that_cannot_be_read_does_not_cancel_an_install(monkeypatch):
    from workers import cancellation

    def unreadable():
        raise PermissionError(13, "Permission denied", "/var/lib/ascend-panel/cancel")

    monkeypatch.setattr(cancellation, "_flags_dir", unreadable)
    assert cancellation.cancel_requested(str(uuid.uuid4())) is False


@pytest.mark.usefixtures("_wired_to_redis")
def test_the_central_agent_speaks_only_for_nodes_it_reaches_over_ssh(db):
    from panel.nodes.agents.trust import panel_central_key
    from panel.nodes.models import Node
    from panel.operations.tasks import ingest_events
    from workers.identity import CENTRAL

    use_keys({CENTRAL: panel_central_key()})
    agent_only = Node.objects.create(name="agent-only", transport="agent")
    # An SSH node whose agent the central agent has just installed: its last events may come after the
    # new agent's first heartbeat made it an agent node.
    installed = Node.objects.create(name="installed", transport="agent", ssh_username="root")
    for node, accepted in ((agent_only, False), (installed, True)):
        operation = operation_on(node, kind="install")
        batch = event_batch(operation, (1, "state", {"state": "running"}))
        stored = ingest_events(seal_for_panel(INGEST_EVENTS, node.name, batch, signer=CENTRAL))
        assert (stored == 1) is accepted, node.name


@pytest.mark.usefixtures("_wired_to_redis")
def test_metrics_signed_with_a_rotated_credential_are_refused_at_once(nodes_a_and_b):
    from panel.nodes.agents.trust import trusted_metrics
    from panel.nodes.models import new_credential_id
    from workers.identity import inbox_line, split_inbox_line

    node_a, _ = nodes_a_and_b
    as_node_a(nodes_a_and_b)
    signer, sig, raw = split_inbox_line(inbox_line("node-a", b'{"node": "node-a"}'))
    assert trusted_metrics([(signer, sig, raw, "node-a")]) == [True]
    node_a.credential_id = new_credential_id()  # what joining again does
    node_a.save(update_fields=["credential_id", "updated"])
    assert trusted_metrics([(signer, sig, raw, "node-a")]) == [False]
