"""Ingest takes data, never work (panel.nodes.agents.ingest_guard, panel.core.infra.panel_tasks): what an
agent's send_task writes passes; every Celery control field a node could add is refused before a request is
built, and the panel's publish hook signs nothing a message asked for."""

from datetime import UTC, datetime, timedelta

import pytest
from celery import signature
from celery._state import _task_stack

from panel.core.infra import panel_tasks
from panel.nodes.agents.ingest_guard import ControlField, check_ingest_message
from workers.celery_app import app
from workers.task_names import INGEST_EVENTS

ENVELOPE = {"node": "n1", "signer": "n1", "body": {}, "stamp": "s", "sig": "x"}


def message(**options):
    """Headers and body exactly as Celery's send_task writes them (protocol 2)."""
    built = app.amqp.as_task_v2("id-1", INGEST_EVENTS, args=[ENVELOPE], **options)
    return built.headers, list(built.body)


def test_what_an_agents_send_task_writes_passes():
    headers, body = message()
    check_ingest_message(INGEST_EVENTS, headers, body)


WEBHOOK = signature("panel.monitoring.send_alert_webhook", args=[{"alert": "forged"}])
IN_AN_HOUR_AND_MORE = datetime.now(UTC) + timedelta(hours=2)


@pytest.mark.parametrize(
    "options",
    [
        {"callbacks": [WEBHOOK]},
        {"errbacks": [WEBHOOK]},
        {"chain": [WEBHOOK]},
        {"chord": WEBHOOK},
        {"eta": datetime.now(UTC) + timedelta(seconds=5)},
        {"countdown": 30},
        {"expires": IN_AN_HOUR_AND_MORE},
        {"group_id": "g-1"},
        {"shadow": "panel.audit.prune"},
        {"retries": 3},
        {"time_limit": 1},
        {"kwargs": {"extra": 1}},
    ],
    ids=lambda options: next(iter(options)),
)
def test_a_control_field_is_refused(options):
    headers, body = message(**options)
    with pytest.raises(ControlField):
        check_ingest_message(INGEST_EVENTS, headers, body)


def test_an_unknown_header_another_task_name_or_protocol_1_is_refused():
    headers, body = message()
    with pytest.raises(ControlField, match="reply"):
        check_ingest_message(INGEST_EVENTS, {**headers, "reply_to": "amq.rabbitmq.reply-to"}, body)
    with pytest.raises(ControlField):
        check_ingest_message("panel.heartbeat", headers, body)
    with pytest.raises(ControlField):  # protocol 1 keeps everything in the body, no task header
        check_ingest_message(INGEST_EVENTS, {}, {"task": INGEST_EVENTS, "args": [ENVELOPE], "callbacks": []})
    with pytest.raises(ControlField):
        check_ingest_message(INGEST_EVENTS, headers, [[ENVELOPE, ENVELOPE], {}, {}])
    with pytest.raises(ControlField, match="bytes"):
        check_ingest_message(INGEST_EVENTS, headers, body, size=64 * 1024 * 1024)


def test_a_message_the_redis_broker_restored_after_a_worker_died_passes():
    # kombu's Redis transport writes headers["redelivered"] = True on the messages it restores; the guard
    # refused them as a control field, so a dead worker's unacknowledged ingest batches were lost.
    headers, body = message()
    check_ingest_message(INGEST_EVENTS, {**headers, "redelivered": True}, body)
    with pytest.raises(ControlField, match="redelivered"):
        check_ingest_message(INGEST_EVENTS, {**headers, "redelivered": "callbacks"}, body)


def test_a_soon_expiry_as_a_sender_may_set_passes():
    headers, body = message(expires=datetime.now(UTC) + timedelta(minutes=5))
    check_ingest_message(INGEST_EVENTS, headers, body)


def test_the_publish_hook_signs_no_canvas():
    assert panel_tasks.asked_for_by_a_message(([], {}, {"callbacks": [dict(WEBHOOK)]}))
    assert panel_tasks.asked_for_by_a_message(([], {}, {"chain": [dict(WEBHOOK)]}))
    assert not panel_tasks.asked_for_by_a_message(([], {}, {"callbacks": None, "chain": None}))


def test_a_panel_task_published_while_running_a_request_with_callbacks_is_not_signed():
    """Celery's trace publishes a request's callbacks while that request is the current one."""
    import panel.monitoring.tasks  # noqa: F401  registers the webhook task

    task = app.tasks["panel.monitoring.send_alert_webhook"]
    body = ([{"alert": "forged"}], {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
    _task_stack.push(task)  # as celery.app.trace does around a request
    task.push_request(callbacks=[dict(WEBHOOK)])
    try:
        panel_tasks._sign_on_the_way_out(sender=task.name, body=body, headers={"id": "x"})
    finally:
        task.pop_request()
        _task_stack.pop()
    assert body[1] == {}
    panel_tasks._sign_on_the_way_out(sender=task.name, body=body, headers={"id": "x"})
    assert body[1]  # outside such a request the panel's own sending is signed
