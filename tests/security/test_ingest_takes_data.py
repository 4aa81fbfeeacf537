"""Ingest takes data, never work: a node's own broker user publishing ingest tasks that carry Celery's
control fields (callbacks, errbacks, chain, chord, an eta, a countdown, a far expiry, a group, a shadow name,
retries, time limits) has each refused and counted before anything runs; the webhook never hears of it, no
other node's queue gets a message, nothing is held unacknowledged, and another node stays online."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from celery import signature

from panel.core.infra.refusals import rejected_by_reason
from tests.deployment_helpers import wait_for
from workers.identity import seal_for_panel
from workers.task_names import AGENT_INVENTORY, INGEST_EVENTS
from workers.topology import INGEST_QUEUE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def alert_receiver(settings):
    """A real HTTP endpoint as the alert webhook: what reaches it is recorded."""
    import http.server
    import threading

    received = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.PANEL_ALERT_WEBHOOK_URL = f"http://127.0.0.1:{server.server_port}/alerts"
    yield received
    server.shutdown()


def refused_control() -> int:
    return rejected_by_reason().get(("ingest-task", "control"), 0)


def an_event_batch(node: str) -> dict:
    batch = {"operation_id": "none", "node": node, "events": []}
    return seal_for_panel(INGEST_EVENTS, node, batch)


def webhook(payload: dict):
    return signature("panel.monitoring.send_alert_webhook", args=[payload])


IN_TWO_HOURS = datetime.now(UTC) + timedelta(hours=2)
CONTROL_FIELDS = {
    "callbacks": {"link": webhook({"alert": "forged critical"})},
    "errbacks": {"link_error": webhook({"alert": "forged"})},
    "chain": {"chain": [webhook({"alert": "forged"})]},
    "chord": {"chord": webhook({"alert": "forged"})},
    "eta": {"eta": datetime.now(UTC) + timedelta(hours=1)},
    "countdown": {"countdown": 3600},
    "far-expiry": {"expires": IN_TWO_HOURS},
    "group": {"group_id": "forged-group"},
    "shadow": {"shadow": "panel.audit.prune"},
    "retries": {"retries": 7},
    "time-limit": {"time_limit": 1},
}


@pytest.mark.attack("ingest-control")
@pytest.mark.attacks_panel
@pytest.mark.parametrize("field", CONTROL_FIELDS)
def test_an_ingest_task_carrying_a_control_field_is_refused_before_it_runs(
    field, attacker, bystander, alert_receiver, rabbit
):
    before = refused_control()

    attacker.send_task(INGEST_EVENTS, [an_event_batch(attacker.name)], **CONTROL_FIELDS[field])

    wait_for(lambda: refused_control() > before, 30, f"the {field} message to be refused")
    queue = rabbit.api("GET", f"/api/queues/{rabbit.vhost}/{INGEST_QUEUE}").json()
    assert queue.get("messages_unacknowledged", 0) == 0  # taken and acknowledged, not held
    time.sleep(1.0)  # a callback the worker published would have reached the webhook by now
    assert alert_receiver == []
    bystander.assert_online()


@pytest.mark.attack("ingest-control")
@pytest.mark.reaches_other_node
def test_a_chain_into_another_nodes_queue_puts_nothing_there(attacker, bystander, rabbit):
    from panel.nodes.agents.broker_admin import node_user

    target = signature(
        AGENT_INVENTORY, args=[], queue=node_user(bystander.name), routing_key=node_user(bystander.name)
    )
    before = refused_control()

    for _ in range(20):
        attacker.send_task(INGEST_EVENTS, [an_event_batch(attacker.name)], chain=[target] * 50)

    wait_for(lambda: refused_control() >= before + 20, 30, "every chained message to be refused")
    queue = rabbit.api("GET", f"/api/queues/{rabbit.vhost}/{node_user(bystander.name)}").json()
    assert queue.get("messages", 0) == 0
    bystander.assert_online()


@pytest.mark.attack("ingest-control")
def test_a_flood_of_eta_messages_is_not_held_past_the_queues_bound(attacker, bystander, rabbit):
    before = refused_control()
    later = datetime.now(UTC) + timedelta(hours=1)

    for _ in range(200):
        attacker.send_task(INGEST_EVENTS, [an_event_batch(attacker.name)], eta=later)

    wait_for(lambda: refused_control() >= before + 200, 60, "every eta message to be refused")

    def unacknowledged() -> int:
        queue = rabbit.api("GET", f"/api/queues/{rabbit.vhost}/{INGEST_QUEUE}").json()
        return queue.get("messages_unacknowledged", 0)

    # A refusal is counted just before its message is acknowledged, and the management API's figures are
    # sampled every few seconds: read at once, the last one read 1 (2026-12-07). A message held for its eta
    # would stay unacknowledged for the hour.
    wait_for(lambda: unacknowledged() == 0, 30, "no eta message to be held unacknowledged")
    bystander.assert_online()


# kombu's Redis transport adds headers["redelivered"] = True to a message it restores after a worker died
# holding it: the guard took that for a control field and the batch was lost.
@pytest.mark.parametrize("headers", [{}, {"redelivered": True}], ids=["sent", "redelivered"])
def test_a_plain_event_batch_from_a_node_still_arrives(attacker, panel_worker, headers):
    """The positive check beside the attacks: what an agent's send_task writes is taken."""
    from panel.nodes.models import Node
    from panel.operations.models import Operation

    node = Node.objects.get(name=attacker.name)
    operation = Operation.objects.create(
        kind="inventory", node=node, target=node.name, task_name=AGENT_INVENTORY
    )
    event = {"seq": 1, "time": datetime.now(UTC).isoformat(), "kind": "log", "payload": {"line": "hello"}}
    batch = {"operation_id": str(operation.id), "node": node.name, "events": [event]}
    before = refused_control()

    attacker.send_task(INGEST_EVENTS, [seal_for_panel(INGEST_EVENTS, node.name, batch)], headers=headers)

    wait_for(lambda: operation.events.exists(), 30, "the event batch to be stored")
    assert refused_control() == before
