"""Replays, as a node (or anyone on the broker) that captured signed messages would run them: a heartbeat
replayed every few seconds keeps a frozen node offline, as a task or as an inbox line; one signed too long
ago counts for nothing; a captured stop replayed after its lease record was pruned and with its unsigned
`expires` header stripped stops nothing, and neither does it once the agent lost its nonces too (the panel
says the stop ended)."""

import json
import subprocess
from datetime import timedelta

import pytest
from django.utils import timezone

from panel.core.infra.refusals import rejected_by_reason
from panel.nodes.agents import trust
from tests.deployment_helpers import wait_for
from tests.integration.conftest import TEST_NODE
from workers import metrics_inbox
from workers.celery_app import app
from workers.contracts import Heartbeat, utcnow
from workers.engine.running import runtime
from workers.hosts.local import LocalRunner
from workers.hosts.sync_loop import run_coroutine_sync
from workers.identity import envelope_parts, inbox_line, new_stamp, seal_for_panel, signature, signing_key
from workers.leases import running_operations, state_dir
from workers.task_names import AGENT_STOP_DEPLOYMENT, HEARTBEAT, PANEL_QUEUE
from workers.tasks.base import AgentTask

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def refreshed(operation):
    operation.refresh_from_db()
    return operation


def refused(kind: str, reason: str) -> int:
    return rejected_by_reason().get((kind, reason), 0)


def a_heartbeat(node: str) -> dict:
    return Heartbeat(node=node, time=utcnow(), agent_version="1", interval_s=5).model_dump(mode="json")


def frozen(node) -> None:
    """The node's agent froze: three beats missed, the sweep marked it offline."""
    from panel.core.domain.choices import NodeStatus
    from panel.nodes.models import Node

    Node.objects.filter(pk=node.pk).update(
        status=NodeStatus.OFFLINE, last_heartbeat=timezone.now() - timedelta(minutes=10)
    )


def test_a_replayed_heartbeat_keeps_a_frozen_node_offline(celery_worker):
    from panel.core.domain.choices import NodeStatus
    from panel.nodes.models import Node

    node = Node.objects.create(name="frozen-node", transport="agent")
    captured = seal_for_panel(HEARTBEAT, node.name, a_heartbeat(node.name))
    app.send_task(HEARTBEAT, args=[captured], queue=PANEL_QUEUE)
    wait_for(lambda: Node.objects.get(pk=node.pk).status == NodeStatus.ONLINE, 30, "the live heartbeat")

    frozen(node)
    before = refused("heartbeat", "replayed")
    for _ in range(3):
        app.send_task(HEARTBEAT, args=[captured], queue=PANEL_QUEUE)
    wait_for(lambda: refused("heartbeat", "replayed") >= before + 3, 30, "every replay to be refused")
    node.refresh_from_db()
    assert node.status == NodeStatus.OFFLINE
    assert timezone.now() - node.last_heartbeat > timedelta(minutes=9)


def test_a_heartbeat_signed_longer_ago_than_a_heartbeat_counts_marks_nothing_online(celery_worker):
    """Held back and sent later (a delayed broker, or a capture never sent before): the stamp, inside the
    signature, says it is stale."""
    from panel.core.domain.choices import NodeStatus
    from panel.nodes.models import Node

    node = Node.objects.create(name="late-node", transport="agent")
    frozen(node)
    body = a_heartbeat(node.name)
    stamp = new_stamp(10, now=timezone.now().timestamp() - 60)
    late = {
        "node": node.name,
        "signer": node.name,
        "body": body,
        "stamp": stamp,
        "sig": signature(signing_key(node.name), *envelope_parts(stamp, HEARTBEAT, node.name, body)),
    }
    before = refused("heartbeat", "stale")
    app.send_task(HEARTBEAT, args=[late], queue=PANEL_QUEUE)
    wait_for(lambda: refused("heartbeat", "stale") > before, 30, "the stale heartbeat to be refused")
    assert Node.objects.get(pk=node.pk).status == NodeStatus.OFFLINE


@pytest.fixture
def engines(celery_worker):
    """Stand-in engines (real processes in their own session, recorded as the agent records engines)."""
    started = []

    def start(name: str) -> subprocess.Popen:
        process = subprocess.Popen(["sleep", "600"], start_new_session=True)
        started.append(process)
        pid_start = run_coroutine_sync(LocalRunner().process_start(process.pid))
        record = runtime.EngineRecord(
            name=name,
            pid=process.pid,
            port=1,
            log_path=str(celery_worker.sim_root / f"{name}.log"),
            argv=["sleep", "600"],
            pid_start=pid_start,
        )
        runtime.save_record(str(celery_worker.sim_root), record)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_a_captured_stop_replayed_without_its_lease_record_and_expires_header_stops_nothing(
    celery_worker, engines, monkeypatch
):
    from panel.nodes.models import Node
    from panel.operations.services import create_operation

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    first_engine = engines("replay-victim")
    sent = []
    real_send = trust.celery_app.send_task

    def capture(*args, **kwargs):  # what anyone reading the node's queue sees
        message = {key: value for key, value in kwargs.items() if key != "queue"}  # the routing's Queue
        sent.append((args, json.loads(json.dumps(message))))
        return real_send(*args, **kwargs)

    payload = {"name": "replay-victim", "runtime_kind": "process", "grace_s": 2, "runtime": {}}
    with monkeypatch.context() as patch:
        patch.setattr(trust.celery_app, "send_task", capture)
        stop = create_operation(
            kind="stop",
            node=node,
            target="replay-victim",
            task_name=AGENT_STOP_DEPLOYMENT,
            task_kwargs={"payload": payload},
        )
        wait_for(lambda: first_engine.poll() is not None, 60, "the panel's stop to stop the first engine")
        wait_for(lambda: refreshed(stop).status == "succeeded", 60, "the stop to end")
        wait_for(lambda: not running_operations(), 30, "the agent to let the stop's lease go")
    current_engine = engines("replay-victim")  # the deployment started again

    # The attacker: the lease record pruned, the unsigned expiry header stripped, the message sent again.
    for leftover in (state_dir() / "operations").glob(f"{stop.id}.*"):
        leftover.unlink()
    (args, kwargs) = next(item for item in sent if item[0][0] == AGENT_STOP_DEPLOYMENT)
    kwargs.pop("expires", None)
    before = AgentTask.rejected_by_reason.get("replayed", 0)
    app.send_task(*args, **kwargs)
    wait_for(lambda: AgentTask.rejected_by_reason.get("replayed", 0) > before, 30, "the replay to be refused")
    assert current_engine.poll() is None

    # Even an agent that lost its nonces too asks first, and the panel says that stop ended long ago.
    for remembered in (state_dir() / "nonces").iterdir():
        remembered.unlink()
    app.send_task(*args, **kwargs)
    record = state_dir() / "operations" / f"{stop.id}.json"
    wait_for(lambda: record.exists() and json.loads(record.read_text()).get("finished"), 60, "the agent")
    assert json.loads(record.read_text())["finished"] == "ended on the panel"
    assert current_engine.poll() is None


def heartbeat_line(node: str, *, signed_at: float | None = None) -> bytes:
    """An agent's heartbeat as the metrics inbox carries it, signed now or at `signed_at`."""
    from workers.contracts import HeartbeatLine

    raw = HeartbeatLine(heartbeat=Heartbeat.model_validate(a_heartbeat(node))).model_dump_json().encode()
    if signed_at is None:
        return inbox_line(node, raw, kind="heartbeat")
    stamp = new_stamp(10, now=signed_at).encode()
    sig = signature(signing_key(node), b"heartbeat", stamp, raw).encode()
    return b"%s %s/%s %s" % (node.encode(), stamp, sig, raw)


def test_a_heartbeat_line_replayed_through_the_inbox_keeps_a_frozen_node_offline(celery_worker):
    """The agents' own path (workers.metrics_inbox.push_heartbeat): the panel worker's ingester drains it."""
    from panel.core.domain.choices import NodeStatus
    from panel.nodes.models import Node

    node = Node.objects.create(name="frozen-inbox-node", transport="agent")
    captured = heartbeat_line(node.name)
    metrics_inbox.push_line(captured)
    wait_for(lambda: Node.objects.get(pk=node.pk).status == NodeStatus.ONLINE, 30, "the live heartbeat")

    frozen(node)
    before = refused("heartbeat", "replayed")
    for _ in range(3):
        metrics_inbox.push_line(captured)
    wait_for(lambda: refused("heartbeat", "replayed") >= before + 3, 30, "every replay to be refused")
    late = heartbeat_line(node.name, signed_at=timezone.now().timestamp() - 60)
    stale_before = refused("heartbeat", "stale")
    metrics_inbox.push_line(late)
    wait_for(lambda: refused("heartbeat", "stale") > stale_before, 30, "the stale heartbeat to be refused")
    node.refresh_from_db()
    assert node.status == NodeStatus.OFFLINE
    assert timezone.now() - node.last_heartbeat > timedelta(minutes=9)
