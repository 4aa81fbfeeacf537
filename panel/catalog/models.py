from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.choices import ArtifactFormat, ModelSource
from panel.core.models import TimestampedModel


class Model(TimestampedModel):
    """A catalog entry: what a model is (facts from its config and weights), not where it lives."""

    name = models.CharField(_("name"), max_length=200, unique=True)
    source = models.CharField(
        _("source"), max_length=16, choices=ModelSource.choices, default=ModelSource.HUGGINGFACE
    )
    repo_id = models.CharField(_("repository id"), max_length=255, blank=True)
    revision = models.CharField(_("revision"), max_length=100, blank=True)
    description = models.TextField(_("description"), blank=True)
    facts = models.JSONField(_("inspected facts"), default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class ModelArtifact(TimestampedModel):
    """A copy of a model on one node, in one format."""

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="artifacts")
    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="artifacts")
    path = models.CharField(_("path"), max_length=1024)
    format = models.CharField(
        _("format"), max_length=16, choices=ArtifactFormat.choices, default=ArtifactFormat.HF
    )
    size_bytes = models.BigIntegerField(_("size"), null=True, blank=True)
    ready = models.BooleanField(default=False)

    class Meta:
        ordering = ["model", "node"]
        constraints = [models.UniqueConstraint(fields=["node", "path"], name="artifact_unique_path")]

    def __str__(self):
        return f"{self.model} on {self.node} ({self.format})"
