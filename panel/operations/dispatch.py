"""The dispatch outbox: an operation's task is recorded with its row and sent until the broker has it.

create_operation saves what must be sent (task name and kwargs) in the same transaction as the operation,
then tries to send it on commit. Whatever the broker did not take (Redis down or restarting, the web
process killed between commit and send) stays unsent (`sent_at` empty) and the reaper's beat sends it again.
A POST therefore answers promptly whatever Redis does: the operation is accepted and goes out later.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from panel.core.domain.choices import OperationStatus
from panel.nodes.agents.trust import send_agent_task
from panel.operations.models import Operation
from workers.identity import DISPATCH_KWARG

log = logging.getLogger(__name__)

# Older unsent operations than this are re-sent by the sweep; younger ones are still in their on_commit send.
RESEND_AFTER_S = 3


def dispatch(operation_id) -> bool:
    """Send the operation's task (signed for its node) with task_id = its id; True once the broker took it."""
    operation = Operation.objects.select_related("node").filter(pk=operation_id).first()
    if operation is None or operation.is_terminal or operation.node is None or not operation.task_name:
        return False
    # Which sending this is, signed with the rest: the agent asks whether it is still the wanted one
    # (panel.operations.services.still_wanted), so an older delivery let go late runs nothing.
    kwargs = {
        "operation_id": str(operation.id),
        **operation.task_kwargs,
        DISPATCH_KWARG: operation.dispatches + 1,
    }
    try:
        send_agent_task(
            operation.node,
            operation.task_name,
            kwargs,
            task_id=str(operation.id),
            expires=settings.PANEL_OPERATION_PICKUP_S,
        )
    except Exception as error:  # the broker is away: the sweep sends it again
        log.warning("operation %s not sent yet: %s", operation.id, error)
        Operation.objects.filter(pk=operation.pk).update(send_error=str(error)[:255])
        return False
    Operation.objects.filter(pk=operation.pk).update(
        sent_at=timezone.now(), dispatches=F("dispatches") + 1, send_error=""
    )
    return True


def send_unsent() -> int:
    """Send every open operation whose task the broker has not taken yet; returns how many went out."""
    cutoff = timezone.now() - timedelta(seconds=RESEND_AFTER_S)
    unsent = Operation.objects.filter(sent_at__isnull=True, node__isnull=False, updated__lt=cutoff).exclude(
        status__in=OperationStatus.TERMINAL
    )
    return sum(dispatch(pk) for pk in unsent.values_list("pk", flat=True))


def resend(operation: Operation) -> None:
    """Mark the operation for another delivery (a new attempt on the agent) and send it now."""
    Operation.objects.filter(pk=operation.pk).update(sent_at=None, updated=timezone.now())
    dispatch(operation.pk)
