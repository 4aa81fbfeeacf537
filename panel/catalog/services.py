"""Use-cases for models: register, load the starter catalog, inspect on the hub, download, record their
results. What happens to a copy once it is on a node lives in panel.catalog.copies.

Every path on a node (a folder registered, a download, conversion or copy target, a copy deleted) must lie
inside one of the node's models roots (panel.nodes.models_roots); the agent checks that again, after
symlinks are resolved, before it reads, writes or deletes anything.
"""

import posixpath
import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from panel.catalog.copies import start_inspection
from panel.catalog.models import FactsSource, Model, ModelArtifact
from panel.catalog.paths import check_agent_node, check_target_path, default_path
from panel.core.domain.choices import ModelSource, OperationKind
from panel.nodes.models_roots import path_under_roots
from panel.operations.models import Operation
from panel.operations.services import create_operation
from workers import task_names
from workers.models.catalog import FACT_KEYS, find_model, load_catalog


def endpoint_for(source: str) -> str:
    return (
        settings.PANEL_HF_ENDPOINT
        if source == ModelSource.HUGGINGFACE
        else settings.PANEL_MODELSCOPE_ENDPOINT
    )


def _unique_name(base: str) -> str:
    name, n = base[:200], 2
    while Model.objects.filter(name=name).exists():
        name, n = f"{base[:190]}-{n}", n + 1
    return name


def catalog_facts(entry: dict) -> dict:
    return {key: entry[key] for key in FACT_KEYS}


def load_starter_catalog() -> tuple[int, int]:
    """Create or refresh one Model per starter catalog entry; facts inspected on a node are kept."""
    created = updated = 0
    with transaction.atomic():
        for entry in load_catalog():
            hub = entry["hub"] or {}
            source = ModelSource.MODELSCOPE if hub.get("modelscope") else ModelSource.HUGGINGFACE
            model = (
                Model.objects.filter(catalog_id=entry["id"]).first()
                or Model.objects.filter(name=entry["id"]).first()
            )
            if model is None:
                model = Model(name=entry["id"], catalog_id=entry["id"])
                created += 1
            else:
                updated += 1
            model.catalog_id = entry["id"]
            model.source = model.source if model.pk else source
            model.repo_id = model.repo_id or hub.get(model.source) or hub.get(source)
            model.description = model.description or entry.get("params_note", "")
            if model.facts_source in ("", FactsSource.CATALOG):
                model.facts, model.facts_source, model.facts_updated = (
                    catalog_facts(entry),
                    FactsSource.CATALOG,
                    timezone.now(),
                )
            model.save()
    return created, updated


def register_model(
    *,
    source: str,
    name: str = "",
    repo_id: str = "",
    revision: str = "",
    node=None,
    path: str = "",
    description: str = "",
    user=None,
) -> tuple[Model, Operation | None]:
    """Add a model to the catalog: from a hub id (facts from the starter catalog and/or the hub through a
    node's agent) or from a folder already on a node (inspected there)."""
    if source not in ModelSource.values:
        raise ValidationError({"source": _("Choose HuggingFace, ModelScope or a path on a node.")})
    if source == ModelSource.LOCAL:
        check_agent_node(node)
        path = path_under_roots(node, path)  # it is inspected there as root: never /etc
        if ModelArtifact.objects.filter(node=node, path=path).exists():
            raise ValidationError(
                {"path": _("%(path)s on %(node)s is already registered.") % {"path": path, "node": node.name}}
            )
        base = name or posixpath.basename(path.rstrip("/")).removesuffix(".onnx")
    else:
        repo_id = repo_id.strip()
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo_id):
            raise ValidationError(
                {"repo_id": _("Give the repository id as owner/name, e.g. Qwen/Qwen2.5-7B-Instruct.")}
            )
        if node is not None:
            check_agent_node(node)
        base = name or repo_id.split("/")[-1]
    if name and Model.objects.filter(name=name).exists():
        raise ValidationError({"name": _("A model named %(name)s exists already.") % {"name": name}})
    with transaction.atomic():
        model = Model.objects.create(
            name=name or _unique_name(base),
            source=source,
            repo_id=repo_id if source != ModelSource.LOCAL else "",
            revision=revision.strip(),
            description=description,
        )
        operation = None
        if source == ModelSource.LOCAL:
            artifact = ModelArtifact.objects.create(model=model, node=node, path=path, ready=False)
            operation = start_inspection(artifact, user)
        else:
            entry = find_model(repo_id)
            if entry:
                model.facts, model.facts_source = catalog_facts(entry), FactsSource.CATALOG
                model.catalog_id, model.facts_updated = entry["id"], timezone.now()
                model.save()
            if node is not None:
                operation = start_hub_inspection(model, node, user)
    return model, operation


class ModelInUse(Exception):
    """A deployment serves this model; the message names it."""


def update_model(model: Model, *, source: str, repo_id="", revision="", node=None, path="", description=""):
    """Bring a registered model up to what PUT /models/{name}/ says; the fields that changed. Where it
    comes from (source, folder) is what it is: changing that is a new model."""
    if source != model.source:
        raise ValidationError(
            {
                "source": _("%(name)s comes from %(source)s; register another name for another source.")
                % {"name": model.name, "source": model.get_source_display()}
            }
        )
    wanted = {"description": description, "revision": revision.strip()}
    if source != ModelSource.LOCAL and repo_id:
        wanted["repo_id"] = repo_id.strip()
    changed = [key for key, value in wanted.items() if getattr(model, key) != value]
    for key in changed:
        setattr(model, key, wanted[key])
    if changed:
        model.save()
    return changed


def delete_model(model: Model) -> list[str]:
    """Remove a model nothing serves; the copies whose records went (their files stay on the nodes)."""
    using = list(model.deployments.values_list("name", flat=True))
    if using:
        raise ModelInUse(
            _("Deployments %(names)s serve this model: delete them first.") % {"names": ", ".join(using)}
        )
    copies = [f"{artifact.node.name}:{artifact.path}" for artifact in model.artifacts.select_related("node")]
    model.delete()
    return copies


def _hub_kwargs(model: Model) -> dict:
    return {
        "source": model.source,
        "repo_id": model.repo_id,
        "revision": model.revision,
        "endpoint": endpoint_for(model.source),
    }


def start_hub_inspection(model: Model, node, user=None) -> Operation:
    check_agent_node(node)
    if model.source == ModelSource.LOCAL:
        raise ValidationError(
            {"source": _("This model has no hub id; inspect one of its artifacts instead.")}
        )
    return create_operation(
        kind=OperationKind.INSPECT_MODEL,
        node=node,
        task_name=task_names.AGENT_INSPECT_MODEL,
        user=user,
        target=model.name,
        params={"model": model.pk, "hub": True},
        task_kwargs={"hub": _hub_kwargs(model)},
    )


def start_download(model: Model, node, user=None, path: str = "") -> Operation:
    check_agent_node(node)
    if model.source == ModelSource.LOCAL:
        raise ValidationError(
            {"node": _("This model has no hub id to download from; copy an artifact instead.")}
        )
    path = check_target_path(node, path or default_path(node, model))
    return create_operation(
        kind=OperationKind.DOWNLOAD,
        node=node,
        task_name=task_names.AGENT_DOWNLOAD_MODEL,
        user=user,
        target=model.name,
        params={"model": model.pk, "path": path},
        task_kwargs={**_hub_kwargs(model), "path": path, "models_root": settings.PANEL_MODELS_ROOT},
    )
