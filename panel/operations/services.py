"""Use-cases for operations: create (row first, message on commit), ingest agent events, cancel."""

import logging

from django.db import transaction
from django.utils import timezone

from panel.core.choices import OperationStatus
from panel.operations.models import Operation, OperationEvent
from panel.realtime.broadcast import broadcast, node_group, operation_group
from workers.celery_app import app as celery_app
from workers.contracts import EventBatch

log = logging.getLogger(__name__)

# Above this many new events in one batch the browser is told to fetch them over REST instead.
MAX_EVENTS_PER_BROADCAST = 300


def enqueue_agent_task(operation: Operation, task_name: str, **kwargs) -> None:
    # SSH nodes have no agent: the central agent runs their tasks, told in the kwargs how to reach them.
    from panel.nodes.ssh import task_route

    queue, route_kwargs = task_route(operation.node)
    celery_app.send_task(
        task_name,
        kwargs={"operation_id": str(operation.id), **route_kwargs, **kwargs},
        task_id=str(operation.id),
        queue=queue,
    )


def create_operation(
    *, kind: str, node, task_name: str, user=None, target: str = "", params=None, task_kwargs=None
) -> Operation:
    """Save the operation, then (after commit) send its task to the node's queue with task_id = its id."""
    with transaction.atomic():
        operation = Operation.objects.create(
            kind=kind, node=node, target=target or node.name, params=params or {}, created_by=user
        )
        transaction.on_commit(lambda: enqueue_agent_task(operation, task_name, **(task_kwargs or {})))
    return operation


def operation_summary(operation: Operation) -> dict:
    return {
        "type": "operation.status",
        "operation": str(operation.id),
        "status": operation.status,
        "progress": operation.progress,
        "stage": operation.stage,
        "error": operation.error,
        "hint": operation.hint,
        "last_seq": operation.last_seq,
        "final_seq": operation.final_seq,
    }


def _apply(operation: Operation, event: OperationEvent) -> None:
    payload = event.payload
    if event.kind == "progress":
        operation.progress = max(0.0, min(100.0, float(payload.get("percent", operation.progress))))
        operation.stage = str(payload.get("stage", operation.stage))[:255]
    elif event.kind == "state":
        state = payload.get("state")
        if state and operation.can_move_to(state):
            operation.move_to(state)
            if state == OperationStatus.RUNNING and operation.started is None:
                operation.started = event.time
            if operation.is_terminal:
                operation.finished = event.time
                operation.error = payload.get("error", "") or ""
                operation.hint = payload.get("hint", "") or ""
                operation.result = payload.get("result") or {}
                if state == OperationStatus.SUCCEEDED:
                    operation.progress = 100.0


def ingest_events(batch_data: dict) -> list[OperationEvent]:
    """Store a batch of agent events. Replayed and out-of-order batches are safe: duplicates are ignored,
    and only events newer than what the operation has applied change its status."""
    batch = EventBatch.model_validate(batch_data)
    with transaction.atomic():
        operation = Operation.objects.select_for_update().filter(pk=batch.operation_id).first()
        if operation is None:
            log.warning("events for unknown operation %s dropped", batch.operation_id)
            return []
        operation.tracker_was_open = not operation.is_terminal
        seqs = [e.seq for e in batch.events]
        known = set(
            OperationEvent.objects.filter(operation=operation, seq__in=seqs).values_list("seq", flat=True)
        )
        fresh = {}
        for message in batch.events:
            if message.seq not in known and message.seq not in fresh:
                fresh[message.seq] = OperationEvent(
                    operation=operation,
                    seq=message.seq,
                    time=message.time,
                    kind=message.kind,
                    payload=message.payload,
                )
        new_events = [fresh[seq] for seq in sorted(fresh)]
        OperationEvent.objects.bulk_create(new_events, ignore_conflicts=True)
        for event in new_events:
            if event.seq > operation.last_seq:
                _apply(operation, event)
        operation.last_seq = max([operation.last_seq, *fresh.keys()])
        if batch.final_seq is not None:
            operation.final_seq = batch.final_seq
        became_terminal = operation.is_terminal and operation.tracker_was_open
        operation.save()
        if became_terminal:
            on_terminal(operation)
        transaction.on_commit(lambda: _broadcast_events(operation, new_events))
    return new_events


def _broadcast_events(operation: Operation, events: list[OperationEvent]) -> None:
    group = operation_group(operation.id)
    if len(events) > MAX_EVENTS_PER_BROADCAST:
        broadcast(
            group, {"type": "operation.gap", "operation": str(operation.id), "last_seq": events[-1].seq}
        )
    elif events:
        broadcast(
            group,
            {
                "type": "operation.events",
                "operation": str(operation.id),
                "events": [e.as_message() for e in events],
            },
        )
    summary = operation_summary(operation)
    broadcast(group, summary)
    if operation.node_id:
        broadcast(node_group(operation.node.name), summary)


def mark_lost(operation: Operation, error: str, hint: str = "") -> None:
    """End an operation the agent can no longer finish (node removed, task lost)."""
    with transaction.atomic():
        operation = Operation.objects.select_for_update().get(pk=operation.pk)
        if operation.is_terminal:
            return
        operation.move_to(OperationStatus.FAILED)
        operation.error, operation.hint, operation.finished = error, hint, timezone.now()
        operation.save()
        transaction.on_commit(lambda: broadcast(operation_group(operation.id), operation_summary(operation)))


MODEL_OPERATION_KINDS = ("model_inspect", "download", "convert", "model_atc", "model_copy", "model_delete")


def on_terminal(operation: Operation) -> None:
    """Record what a finished operation found (inside the ingest transaction)."""
    if operation.kind in ("preflight", "install"):  # failed and cancelled installs are recorded too
        from panel.provisioning.services import record_outcome

        record_outcome(operation)
        return
    if operation.kind in ("deploy", "stop", "benchmark"):  # failed launches restart with back-off
        from panel.deployments.services import on_operation_terminal

        on_operation_terminal(operation)
        return
    if operation.status != OperationStatus.SUCCEEDED or operation.node_id is None:
        return
    if operation.kind == "inventory":
        from panel.nodes.services import apply_inventory

        apply_inventory(operation.node, operation.result)
    elif operation.kind in MODEL_OPERATION_KINDS:
        from panel.catalog.results import apply_model_operation

        apply_model_operation(operation)
