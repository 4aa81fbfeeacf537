"""Bounded waits: no operation waits forever for an agent that is gone.

Every few seconds (beat) the reaper
- sends what the broker has not taken yet (panel.operations.dispatch);
- ends `failed` an open operation whose node went offline (three missed heartbeats), saying so;
- ends `failed` one that no agent picked up within PANEL_OPERATION_PICKUP_S of its sending;
- re-sends, as a new attempt, a running operation its agent no longer knows: the agent's heartbeats list
  the operations it holds a lease for and finished lately (workers.leases), so one missing from both after
  a grace period died with the agent (kill -9). After MAX_DISPATCHES deliveries it fails instead.
Failing goes through mark_lost, so what waited on the operation (a deployment's stop or delete, installs,
the reconcile loop) moves on as after any failure.
"""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from panel.audit import actions as audit
from panel.audit.services import record
from panel.core.domain.choices import NodeStatus, NodeTransport, OperationStatus
from panel.operations.dispatch import resend, send_unsent
from panel.operations.models import Operation
from panel.operations.services import mark_lost

log = logging.getLogger(__name__)

MAX_DISPATCHES = 4
# After a pause of the reaper itself (Redis or the worker was down) heartbeats need a moment to come back
# before silence means anything.
SETTLE_S = 20

_last_run: dict[str, float | None] = {"at": None, "settled_at": 0.0}


def _settled(now_monotonic: float) -> bool:
    last = _last_run["at"]
    if last is None or now_monotonic - last > 3 * settings.PANEL_REAP_S:
        _last_run["settled_at"] = now_monotonic + SETTLE_S
    _last_run["at"] = now_monotonic
    return now_monotonic >= (_last_run["settled_at"] or 0.0)


def _grace(node) -> timedelta:
    return timedelta(seconds=3 * (node.heartbeat_interval or settings.PANEL_HEARTBEAT_INTERVAL) + 5)


def silent_for_good(node, now) -> bool:
    """Offline (three missed heartbeats) and still silent PANEL_OPERATION_OFFLINE_GRACE_S later: an agent
    restarting, or a host rebooting into it, gets that long to come back before its work is failed."""
    if node.effective_status != NodeStatus.OFFLINE:
        return False
    if node.last_heartbeat is None:
        return True
    offline_at = node.last_heartbeat + _grace(node) - timedelta(seconds=5)
    return now - offline_at > timedelta(seconds=settings.PANEL_OPERATION_OFFLINE_GRACE_S)


def lost_by_agent(operation: Operation) -> bool:
    node = operation.host
    reported = node.agent_reported_at  # when the lists came: metrics batches move last_heartbeat too
    if node.transport != NodeTransport.AGENT or reported is None:
        return False
    seen = max(filter(None, (operation.updated, operation.sent_at, operation.started)))
    if reported < seen + _grace(node):
        return False  # no heartbeat late enough to tell yet
    known = set(node.agent_running) | set(node.agent_done)
    return str(operation.id) not in known


def reap() -> dict:
    now = timezone.now()
    failed_ids: list[str] = []
    resent_ids: list[str] = []
    report = {"sent": send_unsent(), "failed": failed_ids, "resent": resent_ids}
    if not _settled(time.monotonic()):
        return report
    pickup = timedelta(seconds=settings.PANEL_OPERATION_PICKUP_S)
    open_operations = (
        Operation.objects.exclude(status__in=OperationStatus.TERMINAL)
        .filter(node__isnull=False)
        .select_related("node")
    )
    for operation in open_operations:
        node = operation.node
        if node.is_watched and silent_for_good(node, now):
            error = gettext_noop(
                "The agent of node %(node)s went offline; the operation cannot finish there."
            )
            hint = gettext_noop(
                "Bring the agent back (systemctl status ascend-panel-agent) and run the operation again."
            )
            failed = mark_lost(operation, error % {"node": node.name}, hint)
        elif (
            operation.status == OperationStatus.PENDING
            and operation.sent_at
            and now - operation.sent_at > pickup
        ):
            error = gettext_noop("No agent picked the operation up within %(seconds)d s.")
            hint = gettext_noop("Check that the node's agent runs and reaches the broker, then try again.")
            failed = mark_lost(operation, error % {"seconds": pickup.total_seconds()}, hint)
        elif operation.status == OperationStatus.RUNNING and lost_by_agent(operation):
            if operation.dispatches < MAX_DISPATCHES:
                log.warning("operation %s was lost by the agent of %s; sending it again", operation.id, node)
                resend(operation)
                resent_ids.append(str(operation.id))
                continue
            error = gettext_noop(
                "The agent lost the operation %(times)d times (it was restarted while running it)."
            )
            failed = mark_lost(operation, error % {"times": operation.dispatches}, "")
        else:
            continue
        if failed:
            failed_ids.append(str(operation.id))
    return report


def force_fail(operation: Operation, user, reason: str = "") -> bool:
    """An admin ends a stuck operation; what waited on it moves on. Recorded in the audit log."""
    error = f"Force-failed by {user.get_username()}" + (f": {reason}" if reason else "")
    ended = mark_lost(operation, error, "")
    if ended:
        log.warning("operation %s force-failed by %s (%s)", operation.id, user, reason)
        node = operation.node.name if operation.node else ""
        record(
            user, audit.OPERATION_FORCE_FAILED, operation.id, kind=operation.kind, node=node, reason=reason
        )
    return ended
