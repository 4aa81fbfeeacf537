"""Metrics history (one row per minute per NPU / host), alerts, and each node's sampling interval.

Live values and the last hour at full resolution live in Redis (panel.monitoring.store), never here: the
1 Hz path writes no rows."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.choices import COLOUR_ALARM, COLOUR_WARNING, ColouredChoices
from panel.core.models import VisibleQuerySet


class NpuMetricMinute(models.Model):
    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="npu_minutes")
    npu_id = models.PositiveIntegerField()
    chip_id = models.PositiveIntegerField(default=0)
    minute = models.DateTimeField(help_text="Start of the minute the figures cover (UTC).")
    samples = models.PositiveIntegerField(default=0)
    util_mean = models.FloatField(null=True)
    util_max = models.FloatField(null=True)
    hbm_used_mean = models.FloatField(null=True)
    hbm_used_max = models.FloatField(null=True)
    memory_used_mean = models.FloatField(null=True)
    memory_used_max = models.FloatField(null=True)
    power_mean = models.FloatField(null=True)
    power_max = models.FloatField(null=True)
    temp_mean = models.FloatField(null=True)
    temp_max = models.FloatField(null=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["node", "minute", "npu_id", "chip_id"]
        constraints = [
            models.UniqueConstraint(fields=["node", "npu_id", "chip_id", "minute"], name="npu_minute_unique")
        ]
        indexes = [models.Index(fields=["minute"])]

    def __str__(self):
        return f"{self.node_id} NPU {self.npu_id}/{self.chip_id} {self.minute:%Y-%m-%d %H:%M}"


class HostMetricMinute(models.Model):
    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="host_minutes")
    minute = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    cpu_mean = models.FloatField(null=True)
    cpu_max = models.FloatField(null=True)
    memory_used_mean = models.FloatField(null=True)
    memory_used_max = models.FloatField(null=True)
    load1_mean = models.FloatField(null=True)
    load1_max = models.FloatField(null=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["node", "minute"]
        constraints = [models.UniqueConstraint(fields=["node", "minute"], name="host_minute_unique")]
        indexes = [models.Index(fields=["minute"])]

    def __str__(self):
        return f"{self.node_id} host {self.minute:%Y-%m-%d %H:%M}"


class NodeSampling(models.Model):
    """How often the node's agent samples (the per-node setting; ASCEND_PANEL_METRICS_S is the default)."""

    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, related_name="sampling")
    interval_s = models.FloatField(_("metrics interval (s)"), default=1.0)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.node_id} every {self.interval_s:g} s"


class AlertKind(models.TextChoices):
    NPU_HEALTH = "npu_health", _("NPU health")
    NPU_TEMPERATURE = "npu_temperature", _("NPU temperature")
    NPU_HBM = "npu_hbm", _("NPU memory nearly full")
    SAMPLING_ERROR = "sampling_error", _("npu-smi failed")
    AGENT_OFFLINE = "agent_offline", _("Agent offline")


class AlertSeverity(ColouredChoices):
    WARNING = "warning", _("Warning")
    CRITICAL = "critical", _("Critical")


AlertSeverity.COLOURS = {"warning": COLOUR_WARNING, "critical": COLOUR_ALARM}


class AlertQuerySet(VisibleQuerySet):
    def open(self):
        return self.filter(resolved_at__isnull=True)

    def needing_attention(self):
        return self.open().filter(acknowledged_at__isnull=True)


class Alert(models.Model):
    """A condition seen on a node. Open while `resolved_at` is empty; one open alert per node and key."""

    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="alerts")
    key = models.CharField(max_length=64, help_text="kind plus the chip it is about, e.g. npu_health:3:0")
    kind = models.CharField(_("kind"), max_length=32, choices=AlertKind.choices)
    severity = models.CharField(_("severity"), max_length=16, choices=AlertSeverity.choices)
    npu_id = models.PositiveIntegerField(_("NPU id"), null=True, blank=True)
    chip_id = models.PositiveIntegerField(_("chip id"), null=True, blank=True)
    message = models.TextField(_("message"))
    first_seen = models.DateTimeField(_("first seen"))
    last_seen = models.DateTimeField(_("last seen"))
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    acknowledged_at = models.DateTimeField(_("acknowledged"), null=True, blank=True)
    resolved_at = models.DateTimeField(_("resolved"), null=True, blank=True)

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-first_seen"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "key"],
                condition=models.Q(resolved_at__isnull=True),
                name="alert_one_open_per_key",
            )
        ]
        indexes = [models.Index(fields=["resolved_at", "acknowledged_at"])]

    def __str__(self):
        return f"{self.node.name}: {self.message}"

    @property
    def severity_colour(self) -> str:
        return AlertSeverity.colour(self.severity)

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None
