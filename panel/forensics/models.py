"""Diagnostics bundles: what every node of a deployment had to say about a (failed) start, in one archive."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import COLOUR_ALARM, COLOUR_OK, COLOUR_RUNNING, COLOUR_WARNING, ColouredChoices
from panel.core.models import TimestampedModel


class BundleStatus(ColouredChoices):
    COLLECTING = "collecting", _("Collecting")
    READY = "ready", _("Ready")
    PARTIAL = "partial", _("Partly collected")
    FAILED = "failed", _("Failed")


BundleStatus.COLOURS = {
    "collecting": COLOUR_RUNNING,
    "ready": COLOUR_OK,
    "partial": COLOUR_WARNING,
    "failed": COLOUR_ALARM,
}


class BundleTrigger(models.TextChoices):
    FAILED_START = "failed_start", _("Failed start")
    ON_DEMAND = "on_demand", _("On demand")


class DiagnosticsBundle(TimestampedModel):
    """One collection from every node of a deployment: an agent operation per node uploads its archive
    (engine log, npu-smi info, versions, environment, kernel log, plog, device logs, manifest); once all
    ended, the panel packs them into one tar.gz with the nodes' clocks lined up and the first failure
    named."""

    deployment = models.CharField(_("deployment"), max_length=63, db_index=True)
    trigger = models.CharField(_("trigger"), max_length=16, choices=BundleTrigger.choices)
    node_names = models.JSONField(_("nodes"), default=list)
    status = models.CharField(
        _("status"), max_length=12, choices=BundleStatus.choices, default=BundleStatus.COLLECTING
    )
    # {node: {"received_at", "size", "manifest", "error"}}
    nodes = models.JSONField(default=dict, blank=True)
    # {"first_failure": {...} | None, "clocks": {node: {...}}, "findings": {node: [...]}}
    summary = models.JSONField(default=dict, blank=True)
    archive = models.CharField(max_length=255, blank=True)  # relative to DATA_DIR
    size = models.PositiveBigIntegerField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"diagnostics of {self.deployment} ({self.status})"

    @property
    def status_colour(self) -> str:
        return BundleStatus.colour(self.status)

    @property
    def file_name(self) -> str:
        return f"diagnostics-{self.deployment}-{self.created:%Y%m%d-%H%M%S}.tar.gz"
