"""Which model and copy a spec serves: a model by id, name or hub id; a copy by id or by its folder; a
folder not registered yet is registered on apply and inspected on its node.

Planning needs the model's facts (its inspection) on NPU nodes: while the inspection of a folder that an
apply registered is under way, apply answers `waiting` with that operation instead of refusing, and
`ascend-panel apply --wait` waits for it and applies again (docs/deployment-spec.md).
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext as _

from panel.catalog.models import Model, ModelArtifact
from panel.catalog.paths import check_agent_node
from panel.catalog.services import register_model
from panel.core.domain.choices import ModelSource, OperationKind, OperationStatus
from panel.core.domain.errors import InvalidInput
from panel.nodes.models import Node
from panel.nodes.models_roots import path_under_roots
from panel.operations.models import Operation
from panel.operations.texts import agent_text

HUB_ID = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def _fail(field_name: str, message: str):
    raise InvalidInput({field_name: [message]})


def find_model(reference: str, user) -> Model | None:
    """A model by id, name or hub id (owner/name)."""
    models = Model.objects.visible_to(user)
    if reference.isdigit():
        return models.filter(pk=int(reference)).first()
    found = models.filter(name=reference).first()
    if found is None and HUB_ID.fullmatch(reference):
        matches = list(models.filter(repo_id__iexact=reference)[:2])
        if len(matches) > 1:
            _fail("model", _("Several models come from {hub}: name one of them.").format(hub=reference))
        found = matches[0] if matches else None
    return found


def _spec_node(spec: dict[str, Any]) -> str:
    if spec.get("nodes"):
        return spec["nodes"][0]["node"]
    return (spec.get("placement") or {}).get("node") or ""


def resolve_model(spec: dict[str, Any], user, *, dry_run: bool) -> tuple[Model | None, ModelArtifact | None]:
    """The model and the copy to serve; with only a `path`, the folder is registered on the node (not on
    a dry run: then the model is None and the plan says so)."""
    artifact = None
    if spec["artifact"] is not None:
        artifact = ModelArtifact.objects.visible_to(user).filter(pk=spec["artifact"]).first()
        if artifact is None:
            _fail("artifact", _("No model copy with id {id}.").format(id=spec["artifact"]))
    model = find_model(spec["model"], user) if spec["model"] else None
    if spec["model"] and model is None:
        _fail(
            "model",
            _("No model called {name}; register it first (PUT /api/v1/models/{name}/).").format(
                name=spec["model"]
            ),
        )
    if artifact is not None:
        if model is not None and artifact.model_id != model.pk:
            _fail("artifact", _("This copy is of another model."))
        return artifact.model, artifact
    if spec["path"]:
        return _by_folder(spec, model, user, dry_run=dry_run)
    return model, None


def _by_folder(spec: dict[str, Any], model: Model | None, user, *, dry_run: bool):
    node_name = _spec_node(spec)
    copies = ModelArtifact.objects.visible_to(user).filter(path=spec["path"])
    if node_name:
        copies = copies.filter(node__name=node_name)
    elif copies.count() != 1:
        _fail("path", _("Name the node the folder is on (placement.node)."))
    artifact = copies.first()
    if artifact is not None:
        if model is not None and artifact.model_id != model.pk:
            _fail(
                "path",
                _("This folder is registered as another model, {model}.").format(model=artifact.model.name),
            )
        return artifact.model, artifact
    if model is None and dry_run:
        _check_folder(spec, node_name, user)  # what registering it would refuse, a dry run refuses
    elif model is None:
        model = _register_folder(spec, node_name, user)
        return model, model.artifacts.first()
    return model, None


def _folder_node(node_name: str, user) -> Node:
    node = Node.objects.visible_to(user).filter(name=node_name).first()
    if node is None:
        _fail("placement", _("No node named {name}.").format(name=node_name))
    return node


def _check_folder(spec: dict[str, Any], node_name: str, user) -> None:
    """The checks register_model makes of a folder (a node whose agent inspects, a path under its models
    roots), without registering it."""
    node = _folder_node(node_name, user)
    try:
        check_agent_node(node)
        path_under_roots(node, spec["path"])
    except DjangoValidationError as error:
        raise InvalidInput(error.message_dict) from None


def _register_folder(spec: dict[str, Any], node_name: str, user) -> Model:
    node = _folder_node(node_name, user)
    try:
        model, _operation = register_model(source=ModelSource.LOCAL, node=node, path=spec["path"], user=user)
    except DjangoValidationError as error:
        raise InvalidInput(error.message_dict) from None
    return model


def inspection_under_way(model: Model) -> Operation | None:
    """The inspection of a model that has no facts yet, while it runs (planning waits for it)."""
    if model.facts:
        return None
    return (
        Operation.objects.filter(
            kind=OperationKind.INSPECT_MODEL,
            params__model=model.pk,
            status__in=(OperationStatus.PENDING, OperationStatus.RUNNING),
        )
        .order_by("-created")
        .first()
    )


def refuse_failed_inspection(model: Model, spec: dict[str, Any]) -> None:
    """A model without facts because its inspection failed: the apply is refused with that inspection's own
    error and hint, each time it is applied again (it was lost: the plan then failed for want of facts)."""
    if model.facts:
        return
    failed = (
        Operation.objects.filter(kind=OperationKind.INSPECT_MODEL, params__model=model.pk)
        .order_by("-created")
        .first()
    )
    if failed is None or failed.status != OperationStatus.FAILED:
        return
    error = agent_text(failed.error, (failed.texts or {}).get("error")) or _("no error given")
    hint = agent_text(failed.hint, (failed.texts or {}).get("hint"))
    message = _(
        "The inspection of {model} on {node} failed (operation {id}): {error} Fix the folder, inspect it "
        "again (POST /api/v1/model-artifacts/{artifact}/inspect/), then apply."
    ).format(
        model=model.name,
        node=failed.node.name if failed.node else "-",
        id=failed.pk,
        error=error.rstrip(".") + ".",
        artifact=(failed.params or {}).get("artifact", "-"),
    )
    _fail("path" if spec.get("path") else "model", f"{message} {hint}".strip())
