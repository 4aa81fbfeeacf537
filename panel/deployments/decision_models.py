"""A recorded serving decision (docs/serving-plane.md §2): written in the transaction of the change it
records, settled with its outcome after. The functions that write them are panel/deployments/decisions.py."""

from django.conf import settings
from django.db import models

from panel.core.domain.choices import DecisionActor, DecisionKind, DecisionOutcome
from panel.core.models import VisibleQuerySet
from panel.deployments.reasons import english


class Decision(models.Model):
    """One decision about a deployment's serving, by the leader, the gateway or a person.

    `deployment` is the primary row (a replica's decision names the replica in `replica`); the name is kept
    after the deployment is deleted, as `Benchmark` does. `reason_parts` and `outcome_parts` are reason parts
    (panel/deployments/reasons.py), shown in the viewer's language; `reason` is their English text."""

    deployment = models.ForeignKey(
        "deployments.Deployment", on_delete=models.SET_NULL, null=True, blank=True, related_name="decisions"
    )
    deployment_name = models.CharField(max_length=63)
    replica = models.CharField(max_length=63, blank=True, help_text="The engine row it concerns, if one.")
    time = models.DateTimeField()
    # No `choices=`: a kind added to DecisionKind needs no migration (decisions.record checks it).
    kind = models.CharField(
        max_length=24, help_text="A DecisionKind (panel/core/domain/choices.py), checked by decisions.record."
    )
    role = models.CharField(max_length=16, blank=True)
    actor = models.CharField(max_length=16, choices=DecisionActor.choices, default=DecisionActor.LEADER)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    # Kept as text too: the timeline still says who once the user is gone.
    username = models.CharField(max_length=150, blank=True)
    figures = models.JSONField(default=dict, blank=True, help_text="The numbers it was decided on.")
    reason = models.TextField(blank=True)
    reason_parts = models.JSONField(default=list, blank=True)
    outcome = models.CharField(
        max_length=16, choices=DecisionOutcome.choices, default=DecisionOutcome.PENDING
    )
    outcome_parts = models.JSONField(default=list, blank=True)
    settled = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [
            models.Index(fields=["deployment", "-time"], name="decision_by_deployment"),
            models.Index(fields=["deployment", "kind", "role", "-time"], name="decision_last_of_kind"),
        ]

    def __str__(self):
        return f"{self.deployment_name} {self.kind} at {self.time:%Y-%m-%d %H:%M:%S}"

    def get_kind_display(self) -> str:
        return str(DecisionKind(self.kind).label) if self.kind in DecisionKind.values else self.kind

    @property
    def kind_colour(self) -> str:
        return DecisionKind.colour(self.kind)

    @property
    def outcome_colour(self) -> str:
        return DecisionOutcome.colour(self.outcome)

    @property
    def outcome_text(self) -> str:
        return english(self.outcome_parts)
