"""A node that can publish to the panel's queue cannot make the panel worker run the panel's own tasks
(panel.core.infra.panel_tasks): unsigned, signed with a node's credential, or replayed, `audit.prune` and
`send_alert_webhook` run nothing and are counted; the panel's own sendings run."""

import contextlib
from datetime import timedelta

import pytest
from celery.signals import before_task_publish
from django.utils import timezone

import panel.audit.tasks  # registers the tasks with the in-process worker
import panel.monitoring.tasks  # noqa: F401
from panel.core.infra import panel_tasks
from panel.core.infra.refusals import rejected_by_reason
from tests.deployment_helpers import wait_for
from workers.celery_app import app
from workers.identity import AUTH_KWARG, new_stamp, signature
from workers.task_names import PANEL_QUEUE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120), pytest.mark.attacks_panel]


@contextlib.contextmanager
def as_a_node():
    """Publish as a node's process does: it holds no panel key, so nothing signs its panel tasks."""
    before_task_publish.disconnect(panel_tasks._sign_on_the_way_out)
    try:
        yield
    finally:
        before_task_publish.connect(panel_tasks._sign_on_the_way_out, weak=False)


def refused(reason: str) -> int:
    return rejected_by_reason().get(("panel_task", reason), 0)


@pytest.fixture
def old_audit_entry(db, settings):
    from panel.audit.models import AuditEntry

    entry = AuditEntry.objects.create(action="node.added", target="old")
    past = timezone.now() - timedelta(days=settings.PANEL_AUDIT_RETENTION_DAYS + 10)
    AuditEntry.objects.filter(pk=entry.pk).update(time=past)
    return entry


def audit_kept(entry) -> bool:
    from panel.audit.models import AuditEntry

    return AuditEntry.objects.filter(pk=entry.pk).exists()


def test_unsigned_panel_tasks_from_a_node_run_nothing(celery_worker, old_audit_entry, settings):
    before = refused("signature")
    with as_a_node():
        app.send_task("panel.audit.prune", queue=PANEL_QUEUE)
        app.send_task("panel.monitoring.send_alert_webhook", args=[{"alert": "forged"}], queue=PANEL_QUEUE)
    wait_for(lambda: refused("signature") >= before + 2, 30, "the panel worker to refuse both tasks")
    assert audit_kept(old_audit_entry)


def test_a_panel_task_signed_with_a_nodes_credential_runs_nothing(celery_worker, old_audit_entry):
    from panel.nodes.agents.trust import agent_key
    from panel.nodes.models import Node

    node_key = agent_key(Node.objects.create(name="sec-node"))
    stamp = new_stamp(60)
    forged = {
        AUTH_KWARG: {
            "stamp": stamp,
            "sig": signature(node_key, *panel_tasks._parts(stamp, "panel.audit.prune", "forged-1", [], {})),
        }
    }
    before = refused("signature")
    with as_a_node():
        app.send_task("panel.audit.prune", kwargs=forged, task_id="forged-1", queue=PANEL_QUEUE)
    wait_for(lambda: refused("signature") > before, 30, "the panel worker to refuse the forged task")
    assert audit_kept(old_audit_entry)


def test_a_captured_panel_task_replayed_runs_nothing(celery_worker, old_audit_entry):
    """The panel's own prune runs; the same message sent again (as a node that captured it would) is a
    replay: refused before it runs."""
    from panel.audit.models import AuditEntry

    captured = {AUTH_KWARG: panel_tasks.sign("panel.audit.prune", "captured-1", [], {})}
    with as_a_node():
        app.send_task("panel.audit.prune", kwargs=captured, task_id="captured-1", queue=PANEL_QUEUE)
    wait_for(lambda: not audit_kept(old_audit_entry), 30, "the panel's own prune to run")
    again = AuditEntry.objects.create(action="node.added", target="old again")
    AuditEntry.objects.filter(pk=again.pk).update(time=timezone.now() - timedelta(days=10_000))
    before = refused("replayed")
    with as_a_node():
        app.send_task("panel.audit.prune", kwargs=captured, task_id="captured-1", queue=PANEL_QUEUE)
    wait_for(lambda: refused("replayed") > before, 30, "the panel worker to refuse the replay")
    assert audit_kept(again)


def test_the_panels_own_sending_is_signed_on_its_way_out_and_runs(celery_worker, old_audit_entry):
    app.send_task("panel.audit.prune", queue=PANEL_QUEUE)  # as beat sends it
    wait_for(lambda: not audit_kept(old_audit_entry), 30, "the panel's own prune to run")
