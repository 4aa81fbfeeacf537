"""The NPU network (HCCL fabric) as the panel knows it: checks across nodes, and each node's last result."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import COLOUR_ALARM, COLOUR_OK, COLOUR_RUNNING, COLOUR_WARNING, ColouredChoices
from panel.core.models import TimestampedModel


class FabricStatus(ColouredChoices):
    RUNNING = "running", _("Checking")
    PASS = "pass", _("OK")
    WARN = "warn", _("Warning")
    FAIL = "fail", _("Failed")


FabricStatus.COLOURS = {
    "running": COLOUR_RUNNING,
    "pass": COLOUR_OK,
    "warn": COLOUR_WARNING,
    "fail": COLOUR_ALARM,
}


class FabricCheck(TimestampedModel):
    """One check of the NPU network of some nodes: an agent operation per node and round, then one verdict
    over all their reports (workers.steps.fabric_verdict). A check that gates a deployment's launch names it;
    the launch goes out when the check passes and is stopped with the fix when it fails."""

    node_names = models.JSONField(_("nodes"), default=list)
    deployment = models.CharField(_("deployment"), max_length=63, blank=True, db_index=True)
    # Round 1 pings with the NPU addresses the panel knew; round 2 runs when they turned out to differ, and
    # only pings: round 1's reads wait in verdict["read"] until the verdict replaces them.
    round = models.PositiveSmallIntegerField(default=1)
    # {node: request sent to its agent this round}
    requests = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        _("status"), max_length=8, choices=FabricStatus.choices, default=FabricStatus.RUNNING
    )
    verdict = models.JSONField(default=dict, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"fabric check {self.pk} of {', '.join(self.node_names)} ({self.status})"

    @property
    def status_colour(self) -> str:
        return FabricStatus.colour(self.status)


class NodeFabric(TimestampedModel):
    """A node's NPU network as its last finished check saw it: a row per NPU (address, link, health, TLS,
    pings to the other nodes) and the checklist lines about this node."""

    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, related_name="fabric")
    fabric_check = models.ForeignKey(
        FabricCheck, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    status = models.CharField(_("status"), max_length=8, choices=FabricStatus.choices, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    peers = models.JSONField(default=list, blank=True)  # the nodes it was checked with
    npus = models.JSONField(default=list, blank=True)
    interface = models.JSONField(null=True, blank=True)
    checklist = models.JSONField(default=list, blank=True)
    report = models.JSONField(default=dict, blank=True)  # the agent's report, as the panel read it

    def __str__(self):
        return f"{self.node} NPU network ({self.status})"

    @property
    def status_colour(self) -> str:
        return FabricStatus.colour(self.status)

    def npu_ips(self) -> dict[int, str | None]:
        """{logic id: address or None} as last read."""
        return {row["device"]: row.get("ip") for row in self.npus if row.get("device") is not None}
