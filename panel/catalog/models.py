from django.db import models
from django.utils.translation import gettext_lazy as _

from panel.core.domain.choices import ArtifactFormat, ModelSource
from panel.core.models import TimestampedModel

# What vLLM serves: HuggingFace folders and their W8A8 copies; ONNX files and ATC's .om outputs are not.
SERVABLE_FORMATS = (ArtifactFormat.HF, ArtifactFormat.W8A8_DYNAMIC)


class FactsSource(models.TextChoices):
    CATALOG = "catalog", _("Starter catalog")
    HUB = "hub", _("Hub config")
    INSPECT = "inspect", _("Inspected on a node")


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
    facts_source = models.CharField(
        _("facts from"), max_length=16, choices=FactsSource.choices, blank=True, default=""
    )
    facts_updated = models.DateTimeField(_("facts updated"), null=True, blank=True)
    catalog_id = models.CharField(
        _("starter catalog id"),
        max_length=100,
        blank=True,
        db_index=True,
        help_text=_("Set for models loaded from the starter catalog (workers/models/catalog.yaml)."),
    )

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
    facts = models.JSONField(
        _("facts"),
        default=dict,
        blank=True,
        help_text=_("inspect_model() of this copy (quantization changes them)."),
    )
    made_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="derived"
    )
    made_by = models.ForeignKey(
        "operations.Operation", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    verification = models.JSONField(_("verification"), default=dict, blank=True)

    class Meta:
        ordering = ["model", "node"]
        constraints = [models.UniqueConstraint(fields=["node", "path"], name="artifact_unique_path")]

    def __str__(self):
        return f"{self.model} on {self.node} ({self.format})"

    @property
    def shown_facts(self) -> dict:
        """This copy's own facts (a W8A8 copy's facts name its quantization), else those of its model."""
        return self.facts or self.model.facts or {}
