"""Declarative apply: make the deployment called `name` look like a spec (panel/deployments/spec.py).

The spec becomes the wizard's request and is planned exactly as the wizard's review plans it. Whether
anything changes is decided on the planned launch per node (model path, NPUs, every engine flag and the
environment they give), so a setting the planner fills (TP, max-model-len) or forces (eager mode) is not
a change unless its outcome is. A change stops the engine and starts it with the new launch; new NPUs are
held at once, the old ones are free once it stopped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from rest_framework import serializers

from panel.audit import actions as audit
from panel.audit.services import record
from panel.catalog.models import Model, ModelArtifact
from panel.core.choices import DesiredState, ModelSource
from panel.deployments import placement, reasons, services
from panel.deployments.models import Deployment
from panel.deployments.planning import ENGINE_SETTINGS, DeploymentPlan, plan_request
from panel.deployments.spec import engine_settings_of, nodes_of

# Engine settings the planner fills when a spec leaves them out; the rest have fixed defaults.
PLANNER_FILLS = ("tensor_parallel_size", "data_parallel_size", "max_model_len")
# Settings a spec that leaves them out keeps as they are (a new port would break every client).
KEPT_WHEN_LEFT_OUT = ("port", "served_model_name")
HUB_ID = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


@dataclass
class Outcome:
    result: str  # created | unchanged | changed
    effect: str  # none | create | restart | move_npus | start | stop
    changes: list[dict[str, Any]] = field(default_factory=list)
    planned: DeploymentPlan | None = None
    deployment: Deployment | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list)


def _fail(field_name: str, message: str):
    raise serializers.ValidationError({field_name: [message]})


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
                    _("This folder is registered as another model, {model}.").format(
                        model=artifact.model.name
                    ),
                )
            return artifact.model, artifact
        if model is None and not dry_run:
            model = _register_folder(spec, node_name, user)
            return model, model.artifacts.first()
    return model, None


def _register_folder(spec: dict[str, Any], node_name: str, user) -> Model:
    from django.core.exceptions import ValidationError as DjangoValidationError

    from panel.catalog.services import register_model
    from panel.nodes.models import Node

    node = Node.objects.visible_to(user).filter(name=node_name).first()
    if node is None:
        _fail("placement", _("No node named {name}.").format(name=node_name))
    try:
        model, _operation = register_model(source=ModelSource.LOCAL, node=node, path=spec["path"], user=user)
    except DjangoValidationError as error:
        raise serializers.ValidationError(error.message_dict) from None
    return model


def build_request(
    spec: dict[str, Any], model: Model, artifact: ModelArtifact | None, user, current: Deployment | None
) -> dict[str, Any]:
    """The wizard's request for this spec; a changed deployment keeps what the spec leaves to it."""
    engine = dict(spec["engine"])
    given = set(spec["engine_given"])
    if spec.get("nodes"):
        nodes = spec["nodes"]
    elif current is not None and _placement_kept(spec, current):
        nodes = nodes_of(current)
    else:
        model_nodes = list(model.artifacts.values_list("node_id", flat=True)) if model else []
        nodes = placement.resolve(
            spec.get("placement") or {},
            user=user,
            facts=dict(model.facts or {}) if model else {},
            model_node_ids=[artifact.node_id] if artifact else model_nodes,
            replacing=current,
        )
    if current is not None:
        now = engine_settings_of(current)
        for key in KEPT_WHEN_LEFT_OUT:
            if key not in given:
                engine[key] = now[key]
        if nodes == nodes_of(current) and model.pk == current.model_id:
            for key in PLANNER_FILLS:
                if key not in given:
                    engine[key] = now[key]
    request = {key: engine.get(key) for key in ENGINE_SETTINGS}
    request.update(
        name=spec["name"],
        model=model.pk,
        artifact=artifact.pk if artifact else None,
        path="" if artifact else spec["path"],
        nodes=nodes,
        runtime=spec["runtime"],
        image=spec.get("image") or "",
    )
    return {key: value for key, value in request.items() if value is not None}


def _placement_kept(spec: dict[str, Any], current: Deployment) -> bool:
    """Does the spec's placement describe where the deployment runs now? ("auto" always does.)"""
    wanted = spec.get("placement") or {}
    now = nodes_of(current)
    if wanted.get("node") and [part["node"] for part in now] != [wanted["node"]]:
        return False
    npus = wanted.get("npus", "auto")
    if npus == "auto":
        return True
    held = sum(len(part["npus"]) for part in now)
    if isinstance(npus, int):
        return held == npus
    return len(now) == 1 and sorted(now[0]["npus"]) == npus


def _launches(deployment_spec: dict[str, Any]) -> list[tuple[str, dict]]:
    return [(part["node"], part["launch"]) for part in deployment_spec.get("parts") or []]


def diff(current: Deployment, planned: DeploymentPlan, model: Model, artifact, spec) -> list[dict[str, Any]]:
    """What differs between the running deployment and the planned one, field by field."""
    changes = []

    def note(name, before, after):
        if before != after:
            changes.append({"field": name, "from": before, "to": after})

    note("model", current.model.name, model.name)
    note("artifact", current.artifact_id, artifact.pk if artifact else None)
    old_nodes = nodes_of(current)
    new_nodes = [
        {"node": part.node.name, "npus": [npu.logic_id for npu in part.npus]} for part in planned.parts
    ]
    note("placement", old_nodes, new_nodes)
    old = (current.spec or {}).copy()
    new = planned.parts[0].payload
    for key in ENGINE_SETTINGS:
        note(f"engine.{key}", old.get(key), new.get(key))
    note("path", old.get("model_path"), new.get("model_path"))
    note("runtime", current.runtime_kind, spec["runtime"])
    note("image", (current.spec or {}).get("container", {}).get("image", ""), spec.get("image") or "")
    if not changes and _launches(current.spec or {}) != [(p.node.name, p.payload) for p in planned.parts]:
        changes.append({"field": "launch", "from": None, "to": None})  # e.g. the node's facts moved on
    return changes


def effect_of(changes: list[dict], state: str) -> str:
    """What the change does to the engine: a stopped deployment only keeps its new settings for later."""
    fields = {change["field"] for change in changes}
    if state == DesiredState.STOPPED:
        return "stop" if "state" in fields else "none"
    if "placement" in fields:
        return "move_npus"
    if fields - {"state"}:
        return "restart"
    return "start" if "state" in fields else "none"


def apply(name: str, spec: dict[str, Any], user, *, dry_run: bool = False) -> Outcome:
    """Plan the spec and, unless `dry_run`, make it so. Raises ValidationError (400), AdminOnlyFlag (403)
    and services.DeploymentConflict (409: a start or stop is under way, or the deployment is going)."""
    current = Deployment.objects.visible_to(user).filter(name=name).first()
    if current is not None and current.desired_state == DesiredState.DELETED:
        raise services.DeploymentConflict(_("This deployment is being deleted; apply again once it is gone."))
    model, artifact = resolve_model(spec, user, dry_run=dry_run)
    if model is None:  # a dry run of a folder not registered yet
        return Outcome(
            "created" if current is None else "changed",
            "create",
            warnings=[
                {
                    "code": "model_registered_on_apply",
                    "level": "info",
                    "message": _(
                        "{path} is registered as a model and inspected when the spec is applied."
                    ).format(path=spec["path"]),
                }
            ],
        )
    request = build_request(spec, model, artifact, user, current)
    planned = plan_request(request, user=user, replacing=current)
    if current is None:
        return _create(planned, spec, user, dry_run=dry_run)
    changes = diff(current, planned, model, artifact, spec)
    if current.desired_state != spec["state"]:
        changes.append({"field": "state", "from": current.desired_state, "to": spec["state"]})
    effect = effect_of(changes, spec["state"])
    outcome = Outcome(
        "changed" if changes else "unchanged", effect, changes, planned, current, planned.warnings
    )
    if changes and not dry_run:
        outcome.deployment = _change(current, planned, spec, effect, changes, user)
    return outcome


def _create(planned: DeploymentPlan, spec: dict[str, Any], user, *, dry_run: bool) -> Outcome:
    outcome = Outcome("created", "create", [], planned, None, planned.warnings)
    if not dry_run:
        outcome.deployment = services.create_deployment(
            planned, user=user, start=spec["state"] == DesiredState.RUNNING
        )
    return outcome


def _change(current: Deployment, planned: DeploymentPlan, spec, effect: str, changes, user) -> Deployment:
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=current.pk)
        if effect in ("restart", "move_npus") and services.active_operations(deployment).exists():
            raise services.DeploymentConflict(_("Wait for the current start or stop to finish, then apply."))
        services.take_plan(deployment, planned)
        record(user, audit.DEPLOYMENT_APPLIED, deployment.name, changes=[c["field"] for c in changes])
        why = [reasons.part(gettext_noop("A new spec was applied by {user}"), user=_who(user))]
        if effect in ("restart", "move_npus"):
            services.restart(deployment, user, reason=why)
        elif spec["state"] == DesiredState.STOPPED:
            services.stop(deployment, user)
        elif effect == "start":
            services.start(deployment, user)
    return Deployment.objects.get(pk=current.pk)


def _who(user) -> str:
    return user.get_username() if user is not None else "the panel"
