"""Use-cases for operations: create (row first, message on commit), ingest agent events, cancel."""

import logging
import uuid

from django.db import transaction
from django.db.models import Count, Max
from django.utils import timezone

from panel.core.domain.choices import OperationStatus
from panel.core.models import one_or_none
from panel.nodes.agents.trust import refuse
from panel.nodes.models import Node
from panel.nodes.services import apply_inventory
from panel.operations import texts
from panel.operations.dispatch import dispatch
from panel.operations.models import Operation, OperationEvent
from panel.operations.signals import events_stored, operation_ended
from panel.realtime.broadcast import OPERATIONS, broadcast, broadcast_each, node_group, operation_group
from workers.contracts import EventBatch

log = logging.getLogger(__name__)

# Above this many new events in one batch the browser is told to fetch them over REST instead.
MAX_EVENTS_PER_BROADCAST = 300


def create_operation(
    *, kind: str, node, task_name: str, user=None, target: str = "", params=None, task_kwargs=None
) -> Operation:
    """Save the operation with the task it must send (the outbox), then send it after commit with
    task_id = its id; what the broker does not take then, the sweep re-sends (panel.operations.dispatch)."""
    with transaction.atomic():
        operation = Operation.objects.create(
            kind=kind,
            node=node,
            target=target or node.name,
            params=params or {},
            created_by=user,
            task_name=task_name,
            task_kwargs=task_kwargs or {},
        )
        transaction.on_commit(lambda: dispatch(operation.pk))
        # A watched operation list (`?watch=true`) learns of the new operation here.
        transaction.on_commit(lambda: broadcast(OPERATIONS, operation_summary(operation)))
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
        "texts": operation.texts,
        "last_seq": operation.last_seq,
        "final_seq": operation.final_seq,
    }


def _apply(operation: Operation, event: OperationEvent) -> None:
    payload = event.payload
    if event.kind == "progress":
        operation.progress = max(0.0, min(100.0, float(payload.get("percent", operation.progress))))
        operation.stage = str(payload.get("stage", operation.stage))[:255]
        if "stage" in payload:
            operation.texts = texts.kept(operation.texts, payload, ("stage",))
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
                operation.texts = texts.kept(operation.texts, payload, ("error", "hint"))
                operation.result = payload.get("result") or {}
                if state == OperationStatus.SUCCEEDED:
                    operation.progress = 100.0


# What storing a batch may change on its operation (_apply and the bookkeeping around it): a save of only
# these is a shorter statement for the fleet's most frequent write.
INGEST_CHANGES = [
    "attempt", "last_seq", "final_seq", "progress", "stage", "status", "started", "finished", "error",
    "hint", "texts", "result", "updated",
]  # fmt: skip


def ingest_events(batch_data: dict, *, sender: Node) -> list[OperationEvent]:
    """Store a batch of agent events. Replayed and out-of-order batches are safe: an event is known by its
    (attempt, agent_seq) and stored once; each new one takes the next position (`seq`) in the operation's
    log, so every attempt's lines stay in the log in order. Older attempts' events are kept but never move
    the status: the newest attempt's do, and only while the operation is open: once it ended, no batch (one
    repeating the attempt number included) changes its state, result or error again. `sender` is the node
    whose credential signed the batch (its row as the signature's check read it), always required: a batch
    about another node's operation is refused."""
    batch = EventBatch.model_validate(batch_data)
    with transaction.atomic():
        operation = one_or_none(Operation.objects.select_for_update().filter(pk=batch.operation_id))
        if operation is None:
            log.warning("events for unknown operation %s dropped", batch.operation_id)
            return []
        if operation.node_id != sender.pk:
            refuse("event_batch", sender.name, f"operation {operation.id} belongs to another node", "sender")
            return []
        # The node's row was just read by the check: not read again (nor its facts and npu-smi text decoded
        # again) with every batch of the fleet's most frequent task.
        operation.node = sender
        was_open = not operation.is_terminal
        if batch.attempt > operation.attempt and was_open:
            operation.attempt = batch.attempt
        current = batch.attempt == operation.attempt
        this_attempt = OperationEvent.objects.filter(operation=operation, attempt=batch.attempt)
        # A late batch of this attempt is stored but does not undo what newer events of it already set.
        applied = this_attempt.aggregate(newest=Max("agent_seq"))["newest"] or 0
        seqs = [e.seq for e in batch.events]
        known = set()
        if seqs and min(seqs) <= applied:  # a replay or a late batch; in order, every event is new
            known = set(this_attempt.filter(agent_seq__in=seqs).values_list("agent_seq", flat=True))
        new_events = []
        for message in sorted(batch.events, key=lambda e: e.seq):
            if message.seq in known:
                continue
            known.add(message.seq)
            operation.last_seq += 1
            event = OperationEvent(
                operation=operation,
                seq=operation.last_seq,
                attempt=batch.attempt,
                agent_seq=message.seq,
                time=message.time,
                kind=message.kind,
                payload=message.payload,
            )
            new_events.append(event)
            if current and was_open and message.seq > applied:
                _apply(operation, event)
        OperationEvent.objects.bulk_create(new_events)
        if current and operation.is_terminal and operation.final_seq is None:
            # Complete once every event of the ending attempt is stored: its numbers run 1..its last.
            numbers = this_attempt.aggregate(count=Count("pk"), newest=Max("agent_seq"))
            if numbers["count"] == numbers["newest"]:
                operation.final_seq = operation.last_seq
        became_terminal = operation.is_terminal and was_open
        operation.save(update_fields=INGEST_CHANGES)
        if current and new_events:
            events_stored.send(
                Operation,
                operation=operation,
                events=new_events,
                failed=became_terminal and operation.status == "failed",
            )
        if became_terminal:
            on_terminal(operation)
        transaction.on_commit(lambda: _broadcast_events(operation, new_events))
    return new_events


def still_wanted(ask: dict, *, sender: str) -> dict:
    """The panel's answer to an agent asking whether a delivery of an operation is still wanted
    (workers.asking): no once the operation ended (failed, cancelled, force-failed) or a newer delivery was
    sent. `sender` is the node whose credential signed the ask; an ask about another node's operation gets
    no and is refused."""
    operation_id, dispatch = str(ask.get("operation_id", "")), ask.get("dispatch")
    answer = {"ask": str(ask.get("ask", "")), "operation_id": operation_id, "wanted": False, "ended": False}
    operation = Operation.objects.select_related("node").filter(pk=_uuid_or_none(operation_id)).first()
    if operation is None:
        return {**answer, "reason": "the panel knows no such operation"}
    if operation.node is None or operation.node.name != sender:
        refuse("ask", sender, f"operation {operation.id} belongs to another node", "sender")
        return {**answer, "reason": "the operation belongs to another node"}
    if operation.is_terminal:
        return {**answer, "ended": True, "reason": f"the operation ended {operation.status} on the panel"}
    # The dispatch counter moves after the broker took the message, so the newest delivery may ask first.
    if isinstance(dispatch, int) and dispatch < operation.dispatches:
        return {**answer, "reason": f"delivery {dispatch} was replaced by delivery {operation.dispatches}"}
    return {**answer, "wanted": True, "reason": ""}


def _uuid_or_none(text: str):
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _broadcast_events(operation: Operation, events: list[OperationEvent]) -> None:
    """The batch's events, then the operation's summary, in one trip to the channel layer (a fleet's event
    batches are the ingest's most frequent task)."""
    group = operation_group(operation.id)
    sends: list[tuple[str, dict]] = []
    if len(events) > MAX_EVENTS_PER_BROADCAST:
        sends.append(
            (group, {"type": "operation.gap", "operation": str(operation.id), "last_seq": events[-1].seq})
        )
    elif events:
        message = {
            "type": "operation.events",
            "operation": str(operation.id),
            "events": [e.as_message() for e in events],
        }
        sends.append((group, message))
    summary = operation_summary(operation)
    sends += [(group, summary), (OPERATIONS, summary)]
    if operation.node is not None:
        sends.append((node_group(operation.node.name), summary))
    broadcast_each(sends)


def mark_lost(operation: Operation, error: str, hint: str = "") -> bool:
    """End an operation the agent can no longer finish (node removed or offline, task never picked up, an
    admin's force-fail): failed with the reason, and whatever waited on it (a deployment's stop or delete,
    an install) reacts as to any failure. False when it had ended already."""
    with transaction.atomic():
        operation = (
            Operation.objects.select_for_update(of=("self",)).select_related("node").get(pk=operation.pk)
        )
        if operation.is_terminal:
            return False
        operation.move_to(OperationStatus.FAILED)
        operation.error, operation.hint, operation.finished = error, hint, timezone.now()
        operation.save()
        on_terminal(operation)
        transaction.on_commit(lambda: _broadcast_events(operation, []))
    return True


def on_terminal(operation: Operation) -> None:
    """Record what a finished operation found (inside the ingest transaction): the node's own results here,
    everything else by the apps that own the kind (panel.operations.signals.operation_ended)."""
    operation_ended.send(Operation, operation=operation)
    if operation.status != OperationStatus.SUCCEEDED or operation.node_id is None:
        return
    if operation.kind == "inventory":
        apply_inventory(operation.host, operation.result)
