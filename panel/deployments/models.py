from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.choices import DeploymentState, DesiredState
from panel.core.models import InvalidTransition, TimestampedModel

ALLOWED_OBSERVED_TRANSITIONS = {
    DeploymentState.PENDING: {DeploymentState.STARTING, DeploymentState.STOPPED, DeploymentState.FAILED},
    DeploymentState.STARTING: {
        DeploymentState.RUNNING,
        DeploymentState.UNHEALTHY,
        DeploymentState.STOPPING,
        DeploymentState.FAILED,
    },
    DeploymentState.RUNNING: {
        DeploymentState.UNHEALTHY,
        DeploymentState.STOPPING,
        DeploymentState.STARTING,
        DeploymentState.FAILED,
    },
    DeploymentState.UNHEALTHY: {
        DeploymentState.RUNNING,
        DeploymentState.STARTING,
        DeploymentState.STOPPING,
        DeploymentState.FAILED,
    },
    DeploymentState.STOPPING: {DeploymentState.STOPPED, DeploymentState.FAILED},
    DeploymentState.STOPPED: {DeploymentState.STARTING},
    DeploymentState.FAILED: {DeploymentState.STARTING, DeploymentState.STOPPING, DeploymentState.STOPPED},
}


class Deployment(TimestampedModel):
    """Desired state (what the admin asked for) next to observed state (what the reconcile loop saw)."""

    name = models.SlugField(_("name"), max_length=63, unique=True)
    model = models.ForeignKey("catalog.Model", on_delete=models.PROTECT, related_name="deployments")
    artifact = models.ForeignKey(
        "catalog.ModelArtifact", on_delete=models.PROTECT, null=True, blank=True, related_name="deployments"
    )
    nodes = models.ManyToManyField("nodes.Node", related_name="deployments")
    npus = models.ManyToManyField("nodes.Npu", related_name="deployments", blank=True)
    spec = models.JSONField(_("engine settings"), default=dict)
    desired_state = models.CharField(
        max_length=16, choices=DesiredState.choices, default=DesiredState.RUNNING
    )
    observed_state = models.CharField(
        max_length=16, choices=DeploymentState.choices, default=DeploymentState.PENDING
    )
    reason = models.TextField(_("reason"), blank=True)
    endpoint = models.CharField(max_length=255, blank=True)
    runtime = models.JSONField(default=dict, blank=True, help_text="pid, port, log file per node")
    restart_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def state_colour(self) -> str:
        return DeploymentState.colour(self.observed_state)

    def move_to(self, state: str, reason: str = "") -> None:
        if state != self.observed_state and state not in ALLOWED_OBSERVED_TRANSITIONS[self.observed_state]:
            raise InvalidTransition(f"deployment {self.name}: {self.observed_state} → {state} is not allowed")
        self.observed_state = state
        self.reason = reason
