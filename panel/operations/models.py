import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import OperationKind, OperationStatus
from panel.core.models import InvalidTransition, TimestampedModel
from panel.nodes.models import Node

ALLOWED_TRANSITIONS: dict[str, set[str]] = {
    OperationStatus.PENDING: {
        OperationStatus.RUNNING,
        OperationStatus.SUCCEEDED,
        OperationStatus.FAILED,
        OperationStatus.CANCELLED,
    },
    OperationStatus.RUNNING: {OperationStatus.SUCCEEDED, OperationStatus.FAILED, OperationStatus.CANCELLED},
}


class Operation(TimestampedModel):
    """A unit of work on a node. Its id is also the Celery task id, so a message and its row are one thing."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(_("kind"), max_length=16, choices=OperationKind.choices)
    node = models.ForeignKey(
        "nodes.Node", on_delete=models.SET_NULL, null=True, blank=True, related_name="operations"
    )
    target = models.CharField(
        _("target"),
        max_length=255,
        blank=True,
        help_text=_("What the operation acts on, e.g. a deployment or model name."),
    )
    params = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        _("status"), max_length=16, choices=OperationStatus.choices, default=OperationStatus.PENDING
    )
    progress = models.FloatField(_("progress"), default=0.0)
    stage = models.CharField(_("stage"), max_length=255, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    error = models.TextField(_("error"), blank=True)
    hint = models.TextField(_("hint"), blank=True)
    # stage, error and hint as the agent made them ({name: {"msgid", "params"}}, workers.i18n), for pages to
    # show them translated (panel.operations.texts); {} for texts the panel wrote and rows of older agents.
    texts = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    last_seq = models.PositiveIntegerField(default=0)
    final_seq = models.PositiveIntegerField(null=True, blank=True)
    # The newest delivery of the task an agent started (each delivery is an attempt, numbered by the agent).
    attempt = models.PositiveIntegerField(default=0)
    # The dispatch outbox: what must be sent, saved with the row in one transaction and re-sent until the
    # broker has taken it (panel.operations.dispatch).
    task_name = models.CharField(max_length=64, blank=True)
    task_kwargs = models.JSONField(default=dict, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    dispatches = models.PositiveIntegerField(default=0)
    send_error = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["kind", "-created"]),
            models.Index(fields=["sent_at", "status"], name="operation_outbox"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} {self.target or ''} ({self.status})"

    @property
    def status_colour(self) -> str:
        return OperationStatus.colour(self.status)

    @property
    def host(self) -> Node:
        """The node a node operation runs on (a panel-side operation, a hub inspection, has none)."""
        if self.node is None:
            raise ValueError(f"operation {self.pk} ({self.kind}) runs on no node")
        return self.node

    @property
    def is_terminal(self) -> bool:
        return self.status in OperationStatus.TERMINAL

    def can_move_to(self, status: str) -> bool:
        return status == self.status or status in ALLOWED_TRANSITIONS.get(self.status, set())

    def move_to(self, status: str) -> None:
        if not self.can_move_to(status):
            raise InvalidTransition(f"operation {self.id}: {self.status} → {status} is not allowed")
        self.status = status


class OperationEvent(models.Model):
    """One event of an operation. `seq` is the panel's position in the operation's log, contiguous across
    attempts (what pages and the API page by); (`attempt`, `agent_seq`) is the agent's own numbering, which
    restarts at 1 on every delivery and is what duplicates are recognised by."""

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=1)
    agent_seq = models.PositiveIntegerField(default=0)
    time = models.DateTimeField()
    kind = models.CharField(max_length=16)
    payload = models.JSONField(default=dict)

    class Meta:
        ordering = ["operation", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["operation", "seq"], name="event_unique_seq"),
            models.UniqueConstraint(
                fields=["operation", "attempt", "agent_seq"], name="event_unique_agent_seq"
            ),
        ]

    def __str__(self):
        return f"{self.operation_id} #{self.seq} {self.kind}"

    def as_message(self) -> dict:
        return {
            "operation": str(self.operation_id),
            "seq": self.seq,
            "attempt": self.attempt,
            "agent_seq": self.agent_seq,
            "time": self.time.isoformat(),
            "kind": self.kind,
            "payload": self.payload,
        }
