import secrets
from datetime import timedelta
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import NodeStatus, NodeTransport, NpuHealth, NpuHealthState
from panel.core.models import TimestampedModel, VisibleQuerySet
from workers.contracts import HEARTBEAT_MAX_S, HEARTBEAT_MIN_S

SILENT_INTERVALS_BEFORE_OFFLINE = 3


def silent_limit(interval: float | None) -> timedelta:
    """How long a node beating every `interval` seconds may stay silent before it counts as offline. The
    interval is clamped to what a heartbeat may claim (workers.contracts): a row written before that bound
    (1e14 s) overflowed every page and the offline sweep, and kept a frozen node online for ever."""
    interval = interval or settings.PANEL_HEARTBEAT_INTERVAL
    return timedelta(
        seconds=min(max(interval, HEARTBEAT_MIN_S), HEARTBEAT_MAX_S) * SILENT_INTERVALS_BEFORE_OFFLINE
    )


def new_credential_id() -> str:
    return secrets.token_hex(16)


def default_models_roots() -> list[str]:
    return list(settings.PANEL_MODELS_ROOTS)


class NodeQuerySet(VisibleQuerySet):
    def with_live_status(self, now=None):
        """Annotate `live_status`: `Node.effective_status` computed by the database, so pages and the fleet
        summary can filter and count nodes by it (see `live_status_expression`). Once per queryset."""
        if "live_status" in self.query.annotations:
            return self
        return self.annotate(live_status=live_status_expression(now))


def live_status_expression(now=None, prefix: str = "") -> models.Case:
    """`Node.effective_status` as a SQL CASE, for counting and filtering many nodes in one query; `prefix`
    ("node__") reads it through a relation. The heartbeat deadline depends on each node's own interval, and
    date arithmetic with a column differs per database, so it takes one small query first: the distinct
    intervals in use (a handful on a real fleet), one WHEN each."""
    now = now or timezone.now()

    def q(**lookups) -> models.Q:
        return models.Q(**{f"{prefix}{lookup}": value for lookup, value in lookups.items()})

    def deadline(interval: float):
        return now - silent_limit(interval)

    intervals = Node.objects.order_by().values_list("heartbeat_interval", flat=True).distinct()
    heard_lately = [
        models.When(
            q(heartbeat_interval=interval, last_heartbeat__gte=deadline(interval)),
            then=models.Value(NodeStatus.ONLINE),
        )
        for interval in intervals
    ]
    not_watched = ~q(transport=NodeTransport.AGENT) & q(ssh_host_key_fingerprint="")
    return models.Case(
        models.When(not_watched, then=models.F(f"{prefix}status")),
        models.When(
            q(last_heartbeat__isnull=True, status=NodeStatus.UNKNOWN), then=models.Value(NodeStatus.UNKNOWN)
        ),
        models.When(q(last_heartbeat__isnull=True), then=models.Value(NodeStatus.OFFLINE)),
        *heard_lately,
        default=models.Value(NodeStatus.OFFLINE),
        output_field=models.CharField(),
    )


class Node(TimestampedModel):
    name = models.SlugField(
        _("name"),
        max_length=63,
        unique=True,
        help_text=_("Letters, digits, - and _; the agent's queue is node.<name>."),
    )
    address = models.CharField(_("address"), max_length=255, blank=True)
    transport = models.CharField(
        _("transport"), max_length=8, choices=NodeTransport.choices, default=NodeTransport.AGENT
    )
    status = models.CharField(
        _("status"), max_length=8, choices=NodeStatus.choices, default=NodeStatus.UNKNOWN
    )
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    facts = models.JSONField(_("facts"), default=dict, blank=True)
    versions = models.JSONField(_("installed versions"), default=dict, blank=True)
    inventory_changes = models.JSONField(default=dict, blank=True)
    npu_smi_info = models.TextField(_("raw npu-smi info"), blank=True)
    inventoried_at = models.DateTimeField(null=True, blank=True)
    cordoned = models.BooleanField(_("cordoned"), default=False)
    # Names of the deployments a drain stopped, to start again once the work it made room for is done.
    drained = models.JSONField(default=list, blank=True)
    # Engines the failover moved off this node while it was silent ({name, runtime_kind, moved_to, at}), which
    # may still run here (a node cut off, not powered off): stopped when it heartbeats again
    # (panel/deployments/failover/fence.py).
    left_engines = models.JSONField(default=list, blank=True)
    last_heartbeat = models.DateTimeField(_("last heartbeat"), null=True, blank=True)
    heartbeat_interval = models.FloatField(default=5.0)
    agent_version = models.CharField(max_length=32, blank=True)
    # The node's credential is derived from the panel's secrets key and this id (panel.nodes.agents.trust): a
    # new id rotates it (re-join), deleting the node revokes it. Not secret on its own.
    credential_id = models.CharField(max_length=32, default=new_credential_id, editable=False)
    # What the agent's newest heartbeat said it runs and finished lately (operation ids), for the reaper.
    agent_running = models.JSONField(default=list, blank=True)
    agent_done = models.JSONField(default=list, blank=True)
    # When that heartbeat came. Not last_heartbeat: metrics batches keep that fresh too, and lists older than
    # it (heartbeats dropped while the inbox lagged) would make the reaper re-send operations that still run.
    agent_reported_at = models.DateTimeField(null=True, blank=True)
    # SSH transport
    ssh_port = models.PositiveIntegerField(default=22)
    ssh_username = models.CharField(max_length=64, blank=True)
    ssh_secret = models.TextField(
        blank=True, help_text="Encrypted key or password (panel.core.infra.secrets)."
    )
    ssh_host_key_fingerprint = models.CharField(max_length=128, blank=True)
    ssh_env = models.JSONField(
        _("environment for SSH commands"),
        default=dict,
        blank=True,
        help_text=_("Added to every command run over SSH, e.g. PATH when npu-smi is outside the login PATH."),
    )
    ssh_host_root = models.CharField(_("host root"), max_length=255, default="/")
    ssh_ascend_root = models.CharField(_("Ascend root"), max_length=255, default="/usr/local/Ascend")
    # Where model work on this node may read and write (panel.nodes.models_roots); the agent enforces its
    # own ASCEND_PANEL_MODELS_ROOT as well.
    models_roots = models.JSONField(
        _("models roots"),
        default=default_models_roots,
        help_text=_("Folders on the node that model folders, copies and deployments must lie in."),
    )

    # ClassVar: mypy takes a plain reassignment of the base's manager for an instance variable (mypy#4715).
    objects: ClassVar = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def is_watched(self) -> bool:
        """Whether the panel expects heartbeats from this node: from its agent, or its SSH probes."""
        return self.transport == NodeTransport.AGENT or bool(self.ssh_host_key_fingerprint)

    @property
    def effective_status(self) -> str:
        """Offline as soon as the node missed three heartbeats, without waiting for the sweeper. An SSH
        node's heartbeats are its metric samples, taken once its host key is confirmed (see
        panel.monitoring.metrics.ssh_probes); before that nothing reaches it and its stored status stands."""
        if not self.is_watched:
            return self.status
        if self.last_heartbeat is None:
            return NodeStatus.UNKNOWN if self.status == NodeStatus.UNKNOWN else NodeStatus.OFFLINE
        if timezone.now() - self.last_heartbeat > silent_limit(self.heartbeat_interval):
            return NodeStatus.OFFLINE
        return NodeStatus.ONLINE


class Npu(TimestampedModel):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="npus")
    npu_id = models.PositiveIntegerField(_("NPU id"))
    chip_id = models.PositiveIntegerField(_("chip id"), default=0)
    logic_id = models.PositiveIntegerField(_("logic id"), null=True, blank=True)
    device_id = models.PositiveIntegerField(null=True, blank=True)
    name = models.CharField(_("name"), max_length=64, blank=True)
    health = models.CharField(
        _("health"), max_length=16, choices=NpuHealth.choices, default=NpuHealth.UNKNOWN
    )
    # The panel's verdict from the health signals (docs/npu-health.md): set only by
    # panel.nodes.health.npu_health
    # (the policy) or by an admin's override; placement never places on a failed NPU.
    health_state = models.CharField(
        _("health state"), max_length=8, choices=NpuHealthState.choices, default=NpuHealthState.OK
    )
    # Why it is in that state: the signal that moved it, as {"signal", "detail", "at", "by"}.
    health_reason = models.JSONField(default=dict, blank=True)
    health_changed_at = models.DateTimeField(null=True, blank=True)
    hbm_total_mb = models.PositiveIntegerField(_("HBM total (MB)"), null=True, blank=True)
    memory_total_mb = models.PositiveIntegerField(_("memory total (MB)"), null=True, blank=True)
    bus_id = models.CharField(_("bus id"), max_length=32, blank=True)
    numa_node = models.IntegerField(_("NUMA node"), null=True, blank=True)

    class Meta:
        ordering = ["node", "npu_id", "chip_id"]
        constraints = [models.UniqueConstraint(fields=["node", "npu_id", "chip_id"], name="npu_unique_chip")]

    def __str__(self):
        return f"{self.node.name} NPU {self.npu_id}/{self.chip_id}"

    @property
    def health_colour(self) -> str:
        return NpuHealth.colour(self.health)

    @property
    def health_state_colour(self) -> str:
        return NpuHealthState.colour(self.health_state)

    @property
    def device_memory_mb(self) -> int | None:
        """What a model can use: HBM where the chip has it, else its DDR (310P)."""
        return self.hbm_total_mb or self.memory_total_mb

    @property
    def reports_power(self) -> bool:
        """310P chips (Atlas 300I Pro / Duo) show no power per chip in npu-smi: the card's MCU has it."""
        return not (self.name or "").upper().startswith("310P")


class JoinToken(models.Model):
    """Lets one agent register one node: scoped to the node name, expiring, single use, one pending per
    name. Stored hashed. Only a token made with rotates_credential may re-join a node that is joined."""

    node_name = models.SlugField(max_length=63)
    key_hash = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField()
    used = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    rotates_credential = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["node_name"], condition=models.Q(used__isnull=True), name="one_pending_join_token"
            )
        ]

    def __str__(self):
        return f"join token for {self.node_name}"


class NpuHealthChange(models.Model):
    """One change of an NPU's health state (the node's own history of them): by the policy, with the signal
    that moved it, or by an admin. Kept when the NPU row goes (the node's inventory may drop a chip)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="npu_health_changes")
    npu = models.ForeignKey(Npu, on_delete=models.SET_NULL, null=True, related_name="health_changes")
    npu_name = models.CharField(max_length=16)  # "3/0": NPU id / chip id, as pages name NPUs
    time = models.DateTimeField(default=timezone.now, db_index=True)
    old = models.CharField(max_length=8, choices=NpuHealthState.choices)
    new = models.CharField(max_length=8, choices=NpuHealthState.choices)
    signal = models.CharField(max_length=32)  # panel.nodes.health.npu_health.SIGNALS
    detail = models.CharField(max_length=500, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-time", "-pk"]

    def __str__(self):
        return f"{self.node.name} NPU {self.npu_name}: {self.old} -> {self.new} ({self.signal})"

    @property
    def new_colour(self) -> str:
        return NpuHealthState.colour(self.new)
