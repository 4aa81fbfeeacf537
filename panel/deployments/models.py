from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import DeploymentRole, DeploymentState, DesiredState, RoutingPolicy
from panel.core.models import InvalidTransition, TimestampedModel
from panel.deployments.decision_models import Decision  # noqa: F401  (registered with the app from here)
from panel.deployments.reasons import as_parts, english

ALLOWED_OBSERVED_TRANSITIONS: dict[str, set[str]] = {
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
    # The reason as translatable parts (panel/deployments/reasons.py); `reason` stays the English text.
    reason_parts = models.JSONField(default=list, blank=True)
    endpoint = models.CharField(max_length=255, blank=True)
    # The API key its engines listen with (VLLM_API_KEY), sealed with the panel's secrets key: only the
    # panel and its gateway call engines (panel/deployments/launch/engine_keys.py).
    engine_key = models.TextField(blank=True, editable=False)
    runtime = models.JSONField(default=dict, blank=True, help_text="pid, port, log file per node")
    restart_count = models.PositiveIntegerField(default=0)
    # Launches in a row that did not reach running; past PANEL_DEPLOY_MAX_RESTARTS the deployment fails.
    failed_restarts = models.PositiveIntegerField(default=0)
    probe_failures = models.PositiveIntegerField(default=0)
    next_restart_at = models.DateTimeField(null=True, blank=True)
    # Set while its stop waits for the gateway's requests in flight on it to end (rollouts/drain.py):
    # the stop is sent then, or at this time at the latest.
    drain_until = models.DateTimeField(null=True, blank=True)
    runtime_kind = models.CharField(max_length=16, default="process")
    plan = models.JSONField(default=dict, blank=True, help_text="planner output and warnings at creation")
    metrics = models.JSONField(default=dict, blank=True, help_text="latest scraped engine metrics")
    metrics_at = models.DateTimeField(null=True, blank=True)
    log_seq = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    # Replicas 2..N of a spec are rows named `<name>-r<i>` pointing at the primary (replica 1). SET_NULL,
    # not CASCADE: a replica row must outlive its primary until its own engine has stopped.
    replica_of = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="replicas"
    )
    replicas_wanted = models.PositiveSmallIntegerField(
        default=1, help_text="On the primary: the spec's replicas (the primary counts as one)."
    )
    # On the primary: the spec it had before the last apply that changed it, for a rollback (undo.py).
    previous_spec = models.JSONField(null=True, blank=True, default=None)
    # On the primary: the spec's labels ({key: value}, panel/core/domain/labels.py), what `?labels=` selects
    # by.
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    # On the primary: the spec's `autoscale:` (panel/deployments/autoscale), None when the count is fixed.
    autoscale = models.JSONField(_("autoscale"), null=True, blank=True, default=None)
    # On the primary: how the gateway picks among its instances (the spec's `routing:`,
    # gateway/instances/routing.py).
    routing = models.CharField(
        _("routing"), max_length=24, choices=RoutingPolicy.choices, default=RoutingPolicy.LEAST_OUTSTANDING
    )
    # Its part in a disaggregated deployment (docs/serving-plane.md §1): "" plain, prefill or decode.
    role = models.CharField(_("role"), max_length=8, choices=DeploymentRole.choices, blank=True, default="")
    # On the primary of a disaggregated deployment: the replicas each role wants, {"prefill": P, "decode": D}.
    roles_wanted = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def state_colour(self) -> str:
        return DeploymentState.colour(self.observed_state)

    def move_to(self, state: str, reason: str | list[dict] = "") -> None:
        """`reason`: English text, or parts (panel/deployments/reasons.py) that pages can translate."""
        if state != self.observed_state and state not in ALLOWED_OBSERVED_TRANSITIONS[self.observed_state]:
            raise InvalidTransition(f"deployment {self.name}: {self.observed_state} → {state} is not allowed")
        self.observed_state = state
        self.set_reason(reason)

    def set_reason(self, reason: str | list[dict]) -> None:
        self.reason_parts = as_parts(reason)
        self.reason = english(self.reason_parts)


class Rollout(TimestampedModel):
    """A changed spec rolled over a deployment's replicas one at a time by the reconcile tick
    (panel/deployments/rollouts/rollouts.py). Terminal states (succeeded, failed) are final."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STATUSES = [(RUNNING, _("Running")), (SUCCEEDED, _("Succeeded")), (FAILED, _("Failed"))]

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="rollouts")
    spec = models.JSONField(default=dict, help_text="The spec as applied (parsed).")
    status = models.CharField(max_length=16, choices=STATUSES, default=RUNNING)
    phase = models.CharField(max_length=16, blank=True, help_text="surge, replace, cleanup or done")
    todo = models.JSONField(default=list, help_text="Names of the stale replicas, in rolling order.")
    current = models.CharField(max_length=63, blank=True, help_text="The replica being replaced.")
    surge = models.CharField(max_length=63, blank=True, help_text="The extra replica started for it.")
    previous = models.JSONField(
        default=dict, blank=True, help_text="The current replica's launch before it took the new one."
    )
    message = models.TextField(blank=True)
    message_parts = models.JSONField(default=list, blank=True)  # as Deployment.reason_parts
    done = models.PositiveSmallIntegerField(default=0)
    total = models.PositiveSmallIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"rollout of {self.deployment_id} ({self.status})"

    def set_message(self, parts: list[dict]) -> None:
        self.message_parts = parts
        self.message = english(parts)


class Revision(models.Model):
    """One applied spec of a deployment (on its primary), numbered from 1 per deployment: who, when, what
    changed, what it did and how it ended. `spec` is the whole spec (`GET ?format=spec`'s shape) as it was
    once applied, so `rollout undo --to-revision N` applies it again. The number is unique per deployment:
    two changes that raced past every other check cannot both be revision N (panel/deployments/revisions.py).
    """

    IN_PROGRESS = "in_progress"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SUPERSEDED = "superseded"  # a newer change came before this one's outcome was known
    OUTCOMES = [
        (IN_PROGRESS, _("In progress")),
        (SUCCEEDED, _("Succeeded")),
        (FAILED, _("Failed")),
        (SUPERSEDED, _("Superseded")),
    ]

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField(default=dict, help_text="The spec as applied, as GET ?format=spec gives it.")
    changes = models.JSONField(
        default=list, blank=True, help_text="[{field, from, to}] against the one before."
    )
    effect = models.CharField(max_length=16, blank=True, help_text="What applying did: apply's effect.")
    # Where it came from: create, apply, edit (the page), scale, rollback (undo; `restored` says to which).
    cause = models.CharField(max_length=16, default="apply")
    restored = models.PositiveIntegerField(
        null=True, blank=True, help_text="A rollback: the revision it restored."
    )
    outcome = models.CharField(max_length=16, choices=OUTCOMES, default=IN_PROGRESS)
    message = models.TextField(blank=True)
    message_parts = models.JSONField(default=list, blank=True)  # as Deployment.reason_parts
    rollout = models.OneToOneField(
        Rollout, on_delete=models.SET_NULL, null=True, blank=True, related_name="revision"
    )
    created = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    # Kept as text too: the history still says who once the user is gone.
    username = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["deployment", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "number"], name="revision_unique_number")
        ]

    def __str__(self):
        return f"{self.deployment_id} revision {self.number}"


# The engine's access lines for the panel's own probes (GET /health, /ping and /metrics every few seconds):
# hidden by default in the page, the API's logs/ and `ascend-panel logs`, which have a switch to show them.
# One expression both SQLite (Python's re) and PostgreSQL read alike; static/js/deployment.js has its twin.
PROBE_LINE_REGEX = r'"(GET|HEAD) /(health|ping|metrics)([?][^ "]*)? HTTP/[0-9.]+" [0-9]{3}'


class DeploymentLogQuerySet(models.QuerySet):
    def without_probes(self):
        return self.exclude(line__regex=PROBE_LINE_REGEX)


class DeploymentLog(models.Model):
    """Engine log lines of a deployment, numbered per deployment (start-up lines and later ones alike)."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="log_lines")
    seq = models.PositiveIntegerField()
    time = models.DateTimeField()
    node = models.CharField(max_length=63, blank=True)
    line = models.TextField()

    objects = DeploymentLogQuerySet.as_manager()

    class Meta:
        ordering = ["deployment", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "seq"], name="deployment_log_unique_seq")
        ]

    def __str__(self):
        return f"{self.deployment_id} #{self.seq}"

    def as_message(self) -> dict:
        return {"seq": self.seq, "time": self.time.isoformat(), "node": self.node, "line": self.line}


class Benchmark(TimestampedModel):
    """One load run against a deployment; kept (with a copy of its settings) after the deployment goes."""

    deployment = models.ForeignKey(
        Deployment, on_delete=models.SET_NULL, null=True, blank=True, related_name="benchmarks"
    )
    deployment_name = models.CharField(max_length=63)
    model_name = models.CharField(max_length=200, blank=True)
    spec = models.JSONField(_("engine settings"), default=dict, blank=True)
    params = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, default="pending")
    results = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    operation = models.OneToOneField(
        "operations.Operation", on_delete=models.SET_NULL, null=True, blank=True, related_name="benchmark"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"benchmark of {self.deployment_name} ({self.status})"
