from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import (
    COLOUR_ALARM,
    COLOUR_OFFLINE,
    COLOUR_OK,
    COLOUR_RUNNING,
    COLOUR_WARNING,
    ColouredChoices,
)
from panel.core.models import TimestampedModel, VisibleQuerySet


class PackageKind(models.TextChoices):
    DRIVER = "driver", _("NPU driver")
    FIRMWARE = "firmware", _("NPU firmware")
    TOOLKIT = "toolkit", _("CANN toolkit")
    OPS = "ops", _("CANN operator package (kernels)")
    NNAL = "nnal", _("NNAL (ATB)")
    WHEEL = "wheel", _("Python wheel")
    IMAGE = "image", _("Container image archive")


class StackStatus(ColouredChoices):
    NONE = "none", _("Not installed")
    INSTALLING = "installing", _("Installing")
    INSTALLED = "installed", _("Installed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    WAITING_REBOOT = "reboot", _("Waiting for reboot")


StackStatus.COLOURS = {
    "none": COLOUR_OFFLINE,
    "installing": COLOUR_RUNNING,
    "installed": COLOUR_OK,
    "failed": COLOUR_ALARM,
    "cancelled": COLOUR_WARNING,
    "reboot": COLOUR_WARNING,
}


class PackageFileQuerySet(VisibleQuerySet):
    def installable(self):
        """Packages with a file in use: an operator's upload no admin approved yet has none."""
        return self.exclude(sha256="")


class PackageFile(TimestampedModel):
    """A .run package or a wheel, uploaded once and handed to nodes with its checksum.

    One file per name. Uploading a name again (admins only) leaves a pending replacement: nodes keep getting
    the confirmed file (sha256) until an admin confirms the new one's checksum (pending_sha256). An
    operator's new name has only a pending file (sha256 empty) until an admin approves it the same way."""

    name = models.CharField(_("file name"), max_length=255, unique=True)
    kind = models.CharField(_("kind"), max_length=16, choices=PackageKind.choices)
    version = models.CharField(_("version"), max_length=64)
    sha256 = models.CharField(_("SHA-256"), max_length=64, db_index=True, blank=True)
    size = models.PositiveBigIntegerField(_("size (bytes)"))
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    pending_sha256 = models.CharField(_("pending SHA-256"), max_length=64, blank=True)
    pending_size = models.PositiveBigIntegerField(_("pending size (bytes)"), null=True, blank=True)
    pending_uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    pending_at = models.DateTimeField(_("replacement uploaded"), null=True, blank=True)

    # ClassVar: mypy takes a plain reassignment of the base's manager for an instance variable (mypy#4715).
    objects: ClassVar = PackageFileQuerySet.as_manager()

    class Meta:
        ordering = ["kind", "name"]

    def __str__(self):
        return self.name


class NodeStack(TimestampedModel):
    """What provisioning knows about one node: the last preflight, the last install and the stack it left."""

    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, related_name="stack")
    status = models.CharField(
        _("status"), max_length=16, choices=StackStatus.choices, default=StackStatus.NONE
    )
    profile = models.CharField(_("profile"), max_length=64, blank=True)
    # The last preflight: its checklist [{"check", "status", "detail", "fix"}] and the plan it foresaw.
    preflight_operation = models.ForeignKey(
        "operations.Operation", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    preflight_profile = models.CharField(max_length=64, blank=True)
    preflight = models.JSONField(default=list, blank=True)
    preflight_worst = models.CharField(max_length=8, blank=True)
    preflight_plan = models.JSONField(default=list, blank=True)
    preflight_at = models.DateTimeField(null=True, blank=True)
    # The last install: what it was asked (reused by a resume), its plan and where it stopped.
    install_operation = models.ForeignKey(
        "operations.Operation", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    install_request = models.JSONField(default=dict, blank=True)
    plan = models.JSONField(default=list, blank=True)
    failed_step = models.CharField(max_length=64, blank=True)
    # The installed stack the deploy launch step needs: profile, venv, python, set_env, versions.
    record = models.JSONField(default=dict, blank=True)
    installed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.node} stack ({self.status})"

    @property
    def status_colour(self) -> str:
        return StackStatus.colour(self.status)
