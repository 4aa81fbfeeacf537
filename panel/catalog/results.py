"""Record what a finished model operation found (on operation_ended, inside the ingest transaction)."""

from typing import TypeVar

from django.db import models
from django.utils import timezone

from panel.catalog.models import FactsSource, Model, ModelArtifact
from panel.core.domain.choices import OperationKind
from panel.nodes.models import Node

# Per-tensor errors stay in the operation's result; the artifact keeps the summary.
VERIFICATION_SUMMARY_KEYS = ("passed", "problems", "max_relative_error", "bound", "dtype")

Row = TypeVar("Row", bound=models.Model)


def _row(model: type[Row], pk: str | int | None) -> Row | None:
    """The row an operation's params name, or None (also when they name none)."""
    return model._default_manager.filter(pk=pk).first() if pk is not None else None


def apply_model_operation(operation) -> None:
    params, result = operation.params or {}, operation.result or {}
    model = _row(Model, params.get("model"))
    if model is None:
        return
    kind = operation.kind
    if kind == OperationKind.INSPECT_MODEL:
        _apply_inspection(model, params, result)
    elif kind in (OperationKind.DOWNLOAD, OperationKind.CONVERT, OperationKind.ATC):
        source = _row(ModelArtifact, params.get("source_artifact"))
        artifact = _record_artifact(model, operation.node, result, made_from=source, operation=operation)
        if artifact.made_from is None:
            _take_facts(model, artifact.facts)
    elif kind == OperationKind.COPY_MODEL:
        source = _row(ModelArtifact, params.get("source_artifact"))
        target = _row(Node, params.get("target_node"))
        if source and target:
            copied = {
                "path": result.get("path") or params["path"],
                "format": source.format,
                "facts": source.facts,
                "size_bytes": result.get("size_bytes") or source.size_bytes,
            }
            _record_artifact(model, target, copied, made_from=source.made_from, operation=operation)
    elif kind == OperationKind.DELETE_MODEL and params.get("artifact") is not None:
        ModelArtifact.objects.filter(pk=params["artifact"], deployments__isnull=True).delete()


def _apply_inspection(model: Model, params: dict, result: dict) -> None:
    if params.get("hub"):
        _take_facts(model, result.get("facts") or {}, FactsSource.HUB)
        return
    artifact = _row(ModelArtifact, params.get("artifact"))
    if artifact is None:
        return
    artifact.facts = result.get("facts") or {}
    artifact.format = result.get("format") or artifact.format
    artifact.size_bytes = result.get("size_bytes")
    artifact.ready = True
    artifact.save()
    if artifact.made_from_id is None:
        _take_facts(model, artifact.facts)


def _take_facts(model: Model, facts: dict, source: str = FactsSource.INSPECT) -> None:
    """A model's facts are those of its original weights; a hub read never replaces an inspection."""
    if not facts or (source == FactsSource.HUB and model.facts_source == FactsSource.INSPECT):
        return
    model.facts, model.facts_source, model.facts_updated = facts, source, timezone.now()
    model.save(update_fields=["facts", "facts_source", "facts_updated", "updated"])


def _record_artifact(model, node, result: dict, *, made_from=None, operation=None) -> ModelArtifact:
    verification = result.get("verification") or {}
    artifact, _ = ModelArtifact.objects.update_or_create(
        node=node,
        path=result["path"],
        defaults={
            "model": model,
            "format": result.get("format") or "hf",
            "size_bytes": result.get("size_bytes"),
            "facts": result.get("facts") or {},
            "ready": True,
            "made_from": made_from,
            "made_by": operation,
            "verification": {k: verification[k] for k in VERIFICATION_SUMMARY_KEYS if k in verification},
        },
    )
    return artifact
