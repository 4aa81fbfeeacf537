"""Metrics history (one row per minute per NPU / host), alerts, and each node's sampling interval.

Live values and the last hour at full resolution live in Redis (panel.monitoring.metrics.store), never here:
the
1 Hz path writes no rows."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import COLOUR_ALARM, COLOUR_WARNING, ColouredChoices
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
    # A deployment's: raised from its observed state (panel.monitoring.alerting.deployment_alerts), no node.
    DEPLOYMENT_UNHEALTHY = "deployment_unhealthy", _("Deployment unhealthy")
    DEPLOYMENT_FAILED = "deployment_failed", _("Deployment failed")
    DEPLOYMENT_CRASH_LOOP = "deployment_crash_loop", _("Deployment crash loop")
    ROLLOUT_FAILED = "rollout_failed", _("Rollout failed")
    REPLICAS_BELOW_WANTED = "replicas_below_wanted", _("Replicas below wanted")


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
    """A condition seen on a node, or on a deployment (`deployment` its name; no foreign key, since
    deployments sit above monitoring). Open while `resolved_at` is empty; one open alert per subject and
    key."""

    node = models.ForeignKey(
        "nodes.Node", on_delete=models.CASCADE, related_name="alerts", null=True, blank=True
    )
    deployment = models.CharField(_("deployment"), max_length=63, blank=True, db_index=True)
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
            ),
            models.UniqueConstraint(
                fields=["deployment", "key"],
                condition=models.Q(resolved_at__isnull=True, node__isnull=True),
                name="alert_one_open_per_deployment_key",
            ),
        ]
        indexes = [models.Index(fields=["resolved_at", "acknowledged_at"])]

    def __str__(self):
        return f"{self.subject}: {self.message}"

    @property
    def subject(self) -> str:
        """What the alert is about: its node's name or its deployment's."""
        return self.node.name if self.node is not None else self.deployment

    @property
    def severity_colour(self) -> str:
        return AlertSeverity.colour(self.severity)

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class ChannelKind(models.TextChoices):
    WEBHOOK = "webhook", _("Webhook (JSON)")
    EMAIL = "email", _("E-mail (SMTP)")
    DINGTALK = "dingtalk", _("DingTalk bot")
    FEISHU = "feishu", _("Feishu / Lark bot")
    WECOM = "wecom", _("WeCom group bot")


class SmtpSecurity(models.TextChoices):
    NONE = "none", _("None")
    STARTTLS = "starttls", _("STARTTLS")
    SSL = "ssl", _("TLS (SMTPS)")


class NotificationChannel(models.Model):
    """Where alerts are sent (panel.monitoring.notifications.channels builds each kind's request). `secret` is
    sealed
    (panel.core.infra.secrets): a bot's signing secret, the SMTP password or a webhook's bearer token."""

    name = models.SlugField(_("name"), max_length=63, unique=True)
    kind = models.CharField(_("kind"), max_length=16, choices=ChannelKind.choices)
    url = models.URLField(_("URL"), max_length=500, blank=True)
    secret = models.TextField(blank=True, editable=False)
    smtp_host = models.CharField(_("SMTP host"), max_length=255, blank=True)
    smtp_port = models.PositiveIntegerField(_("SMTP port"), default=25)
    smtp_security = models.CharField(
        _("SMTP security"), max_length=16, choices=SmtpSecurity.choices, default=SmtpSecurity.STARTTLS
    )
    smtp_user = models.CharField(_("SMTP user"), max_length=255, blank=True)
    email_from = models.EmailField(_("from"), blank=True)
    email_to = models.CharField(_("to"), max_length=1000, blank=True, help_text="Addresses, comma-separated.")
    enabled = models.BooleanField(_("enabled"), default=True)
    created = models.DateTimeField(auto_now_add=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def has_secret(self) -> bool:
        return bool(self.secret)

    def recipients(self) -> list[str]:
        return [address.strip() for address in self.email_to.split(",") if address.strip()]

    def missing(self) -> dict[str, str]:
        """{field: why} for what this kind of channel needs and lacks (the page's form and the API ask)."""
        if self.kind == ChannelKind.EMAIL:
            if not self.smtp_host:
                return {"smtp_host": str(_("An e-mail channel needs its SMTP host."))}
            if not self.recipients():
                return {"email_to": str(_("An e-mail channel needs an address to send to."))}
            return {}
        return {} if self.url else {"url": str(_("This kind of channel needs its URL."))}


class Route(models.Model):
    """Alerts that match go to `channel`. An empty list matches every severity / kind; `node_label`
    ("key=value") matches alerts of nodes carrying that label (deployment alerts have no node, so a route
    with a node label never sends them)."""

    name = models.SlugField(_("name"), max_length=63, unique=True)
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="routes")
    severities = models.JSONField(_("severities"), default=list, blank=True)
    kinds = models.JSONField(_("kinds"), default=list, blank=True)
    node_label = models.CharField(_("node label"), max_length=127, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    created = models.DateTimeField(auto_now_add=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class SilenceQuerySet(VisibleQuerySet):
    def active(self, now):
        return self.filter(starts_at__lte=now, ends_at__gt=now)


class Silence(models.Model):
    """Holds sends of matching alerts until `ends_at`. Empty matchers match everything."""

    kinds = models.JSONField(_("kinds"), default=list, blank=True)
    node = models.CharField(_("node"), max_length=63, blank=True)
    deployment = models.CharField(_("deployment"), max_length=63, blank=True)
    starts_at = models.DateTimeField(_("starts"))
    ends_at = models.DateTimeField(_("ends"))
    reason = models.CharField(_("reason"), max_length=500)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    objects = SilenceQuerySet.as_manager()

    class Meta:
        ordering = ["-ends_at"]

    def __str__(self):
        return f"silence until {self.ends_at:%Y-%m-%d %H:%M}"


class DeliveryStatus(models.TextChoices):
    SENT = "sent", _("Sent")
    RETRYING = "retrying", _("Retrying")
    FAILED = "failed", _("Failed")
    HELD = "held", _("Held by a silence")


class Delivery(models.Model):
    """One attempt at sending one alert (or a test, `alert` empty) to one channel."""

    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="deliveries")
    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    event = models.CharField(_("event"), max_length=16)
    attempt = models.PositiveSmallIntegerField(_("attempt"), default=1)
    status = models.CharField(_("status"), max_length=16, choices=DeliveryStatus.choices)
    response_code = models.PositiveSmallIntegerField(_("response code"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)
    time = models.DateTimeField(_("time"), auto_now_add=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-time", "-pk"]
        indexes = [models.Index(fields=["channel", "-time"])]

    def __str__(self):
        return f"{self.event} to {self.channel_id}: {self.status}"
