"""The agent asks before it runs (workers.asking): a delivery the panel no longer wants runs nothing, however
valid its signature. An agent frozen with a delivery in hand resumes after the admin failed the operation
and started it again: the old delivery runs nothing. A delivery held back while the reaper sent a newer one
runs nothing; the newer one runs."""

import contextlib
import fcntl
import json
import os

import pytest

from panel.nodes.agents import trust
from tests.deployment_helpers import wait_for
from tests.integration.conftest import TEST_NODE
from workers.celery_app import app
from workers.leases import state_dir
from workers.task_names import AGENT_INVENTORY

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@contextlib.contextmanager
def deliveries_held_back(monkeypatch):
    """What the panel sends an agent is kept here instead of reaching it (the agent froze with the message in
    hand); `release(i)` lets delivery i go, as the agent resuming would run it."""
    held = []
    with monkeypatch.context() as patch:
        patch.setattr(trust.celery_app, "send_task", lambda *args, **kwargs: held.append((args, kwargs)))
        yield held


def release(held, index: int) -> None:
    args, kwargs = held[index]
    app.send_task(*args, **kwargs)


def lease_record(operation) -> dict:
    path = state_dir() / "operations" / f"{operation.id}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def lease_free(operation) -> bool:
    """Whether no delivery holds the operation's lease now (the agent's flock, workers.leases)."""
    fd = os.open(state_dir() / "operations" / f"{operation.id}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def wait_ended(operation, timeout=60):
    def ended():
        operation.refresh_from_db()
        return operation.is_terminal

    wait_for(ended, timeout, f"operation {operation.id} to end")
    return operation


def inventory_on(node):
    from panel.operations.services import create_operation

    return create_operation(kind="inventory", node=node, task_name=AGENT_INVENTORY)


def test_a_frozen_agent_resumed_after_the_admin_failed_and_retried_the_operation_runs_nothing(
    celery_worker, monkeypatch, alice
):
    from panel.nodes.models import Node
    from panel.operations.reaper import force_fail

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    with deliveries_held_back(monkeypatch) as held:
        stuck = inventory_on(node)
        wait_for(lambda: held, 10, "the operation to be sent")
    assert force_fail(stuck, alice, "the agent froze")
    retried = wait_ended(inventory_on(node))
    assert retried.status == "succeeded"

    release(held, 0)  # the frozen agent resumes with the first delivery, still signed and fresh
    wait_for(lambda: lease_record(stuck).get("finished"), 60, "the agent to take up the old delivery")

    stuck.refresh_from_db()
    assert lease_record(stuck)["finished"] == "ended on the panel"
    assert stuck.status == "failed"
    assert stuck.error.startswith("Force-failed by alice")
    # It said it was picked up (so the reaper can tell if it dies while asking), then ran no step.
    assert [(e.kind, e.payload) for e in stuck.events.all()] == [("state", {"state": "running"})]


def test_a_delivery_held_back_while_a_newer_one_was_sent_runs_nothing_and_the_newer_runs(
    celery_worker, monkeypatch
):
    from panel.nodes.models import Node
    from panel.operations.dispatch import resend

    node = Node.objects.create(name=TEST_NODE, transport="agent")
    with deliveries_held_back(monkeypatch) as held:
        operation = inventory_on(node)
        wait_for(lambda: held, 10, "the first delivery")
        operation.refresh_from_db()
        resend(operation)  # the reaper's new attempt
        assert len(held) == 2
    release(held, 0)
    wait_for(lambda: lease_record(operation).get("attempts"), 60, "the agent to take up the old delivery")
    wait_for(lambda: lease_free(operation), 60, "the old delivery to let the lease go")
    assert not lease_record(operation).get("finished")  # replaced, not ended: the newer one may run
    release(held, 1)
    operation = wait_ended(operation)
    assert operation.status == "succeeded"
    # The first delivery took the lease, said it was picked up, asked, and ran nothing.
    first = [(e.kind, e.payload) for e in operation.events.filter(attempt=1)]
    assert first == [("state", {"state": "running"})]
    assert operation.events.filter(attempt=2, kind="log").exists()
