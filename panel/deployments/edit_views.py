"""Changing a deployment from its page: Edit, Scale and Rollback.

Each builds a spec (panel/deployments/spec.py) from the deployment as it is (`spec_of`) with what the
person changed laid over it, and hands it to panel.deployments.apply, the code behind `PUT
/api/v1/deployments/{name}/`: first as a dry run, whose changes, effect and planner warnings the page
shows, then for real once they press Apply. Rollback applies the spec kept before the last change
(panel.deployments.undo). Operators and admins only; the admin-only flags are refused by the planner.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST
from rest_framework import serializers

from panel.accounts.roles import OPERATOR
from panel.catalog.models import SERVABLE_FORMATS, ModelArtifact
from panel.core.views import TRANSITION, role_required
from panel.deployments import services, undo
from panel.deployments.apply import Outcome, apply
from panel.deployments.forms import (
    ALLOWED_FLAG_NAMES,
    EditForm,
    choices_from_nodes,
    env_as_text,
    flags_as_text,
    nodes_from_choices,
)
from panel.deployments.launch_tuning import AdminOnlyEnv
from panel.deployments.models import Deployment
from panel.deployments.request import ENGINE_SETTINGS, AdminOnlyFlag
from panel.deployments.spec import nodes_of, parse_spec, spec_of
from panel.deployments.views import visible_deployment
from panel.deployments.wizard_placement import held_npus
from panel.deployments.wizard_state import flatten
from panel.nodes.models import Node
from workers.engine.flags import CODE_LOADING_FLAGS

EFFECTS = {
    "none": gettext_lazy("Nothing changes."),
    "restart": gettext_lazy(
        "The engine restarts in place with the new settings: it does not serve meanwhile."
    ),
    "move_npus": gettext_lazy(
        "The engine stops and starts again on the new NPUs: it does not serve meanwhile."
    ),
    "rolling": gettext_lazy(
        "Rolling update: the replicas take the new settings one at a time (a surge replica first when NPUs "
        "are free), so the others keep serving."
    ),
    "scale": gettext_lazy("Replicas are added or removed; the running ones are not touched."),
    "start": gettext_lazy("The engine starts."),
    "stop": gettext_lazy("The engine stops; the new settings are kept for its next start."),
    "create": gettext_lazy("The deployment is created."),
}
KEPT_FOR_NEXT_START = gettext_lazy("The engine is stopped: it takes the new settings when it starts again.")
# Where the apply's field names land on the edit form.
SPEC_FIELD_TO_FORM = {
    "nodes": "npus",
    "placement": "npus",
    "placement.npus": "npus",
    "model": "artifact",
    "path": "artifact",
}
# A spec leaves the runtime's image out unless it runs in a container.
FORM_ONLY = ("artifact", "npus", "runtime", "image")


class Refused(Exception):
    """The apply refused the spec: {field: [texts]} (a field may be "" for the whole spec)."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.errors = errors


def run(name: str, raw: dict[str, Any], user, *, dry_run: bool) -> Outcome:
    """apply() of `raw`, its refusals as Refused."""
    try:
        return apply(name, parse_spec(raw, name), user, dry_run=dry_run)
    except AdminOnlyFlag as error:
        raise Refused({"engine.extra_flags": [str(error.detail)]}) from None
    except AdminOnlyEnv as error:
        raise Refused({"engine.env": [str(error.detail)]}) from None
    except serializers.ValidationError as error:
        detail = error.detail if isinstance(error.detail, dict) else {"": error.detail}
        raise Refused(_by_dotted_field(detail)) from None
    except services.DeploymentConflict as error:
        raise Refused({"": [str(error)]}) from None


def _by_dotted_field(detail: dict, prefix: str = "") -> dict[str, list[str]]:
    """{"engine": {"port": [...]}} (the spec's own check) as {"engine.port": [...]} (the planner's)."""
    out: dict[str, list[str]] = {}
    for key, texts in detail.items():
        name = f"{prefix}{key}"
        if isinstance(texts, dict):
            out.update(_by_dotted_field(texts, f"{name}."))
        else:
            out[name] = flatten(texts)
    return out


def outcome_context(outcome: Outcome) -> dict[str, Any]:
    """What the diff box shows: each change, what it does to the engine, and the planner's warnings."""
    text = EFFECTS.get(outcome.effect, outcome.effect)
    if outcome.effect == "none" and outcome.changes:
        text = KEPT_FOR_NEXT_START
    return {
        "changes": outcome.changes,
        "effect": outcome.effect,
        "effect_text": text,
        "warnings": outcome.warnings,
        "unchanged": outcome.result == "unchanged",
    }


def _artifacts(user, deployment: Deployment):
    ready = ModelArtifact.objects.visible_to(user).filter(ready=True, format__in=SERVABLE_FORMATS)
    if deployment.artifact_id:
        ready = ready | ModelArtifact.objects.filter(pk=deployment.artifact_id)
    return ready.select_related("model", "node").order_by("model__name", "node__name")


def _npu_choices(user, deployment: Deployment) -> list[tuple[str, str]]:
    """Every NPU the deployment may take: its own and the free ones (none with replicas: see EditForm)."""
    if deployment.replicas_wanted > 1:
        return []
    holders = held_npus(ignore=deployment)
    choices = []
    for node in Node.objects.visible_to(user).prefetch_related("npus").order_by("name"):
        npus = [npu for npu in node.npus.all() if npu.logic_id is not None]
        if not npus:
            choices.append((f"{node.name}:cpu", f"{node.name} · CPU"))
        for npu in sorted(npus, key=lambda npu: npu.logic_id):
            label = f"{node.name}:{npu.logic_id}"
            if npu.pk in holders:
                label += " · " + _("held by {name}").format(name=holders[npu.pk])
            choices.append((f"{node.name}:{npu.logic_id}", label))
    return choices


def _initial(deployment: Deployment) -> dict[str, Any]:
    spec = spec_of(deployment)
    engine = dict(spec["engine"])
    engine["extra_flags"] = flags_as_text(engine.get("extra_flags") or {})
    engine["env"] = env_as_text(engine.get("env") or {})
    return {
        **engine,
        "artifact": deployment.artifact_id,
        "npus": choices_from_nodes(nodes_of(deployment)),
        "runtime": spec["runtime"],
        "image": spec.get("image", ""),
    }


def spec_from_form(deployment: Deployment, data: dict[str, Any]) -> dict[str, Any]:
    """The deployment's spec with the form's settings laid over it (replicas and state stay)."""
    spec = spec_of(deployment)
    spec.pop("path", None)
    spec["model"] = data["artifact"].model.name
    spec["artifact"] = data["artifact"].pk
    spec["engine"] = {key: data[key] for key in ENGINE_SETTINGS}
    if deployment.replicas_wanted > 1:
        spec["engine"].pop("port")  # each replica has a port of its own
    spec["runtime"] = data["runtime"]
    spec["image"] = data["image"] if data["runtime"] == "container" else ""
    if "npus" in data:
        nodes = nodes_from_choices(data["npus"])
        spec.pop("placement", None)
        spec.pop("nodes", None)
        if len(nodes) == 1:
            spec["placement"] = {"node": nodes[0]["node"], "npus": nodes[0]["npus"]}
        else:
            spec["nodes"] = nodes
    return spec


def _attach(form: EditForm, errors: dict[str, list[str]]) -> None:
    for key, texts in errors.items():
        name = SPEC_FIELD_TO_FORM.get(key, key.removeprefix("engine."))
        for text in texts:
            form.add_error(name if name in form.fields else None, text)


@role_required(OPERATOR)
def deployment_edit(request, name):
    """GET: the form filled from the deployment. POST: the dry run's diff; with `confirm`, the apply."""
    deployment = visible_deployment(request, name)
    if deployment.replica_of_id:
        messages.error(
            request,
            _("Edit the primary, {name}: its replicas follow.").format(name=deployment.replica_of.name),
        )
        return redirect("deployments:detail", name=name)
    form_args = {
        "artifacts": _artifacts(request.user, deployment),
        "npu_choices": _npu_choices(request.user, deployment),
    }
    context: dict[str, Any] = {"deployment": deployment}
    if request.method != "POST":
        form = EditForm(initial=_initial(deployment), **form_args)
    else:
        form = EditForm(request.POST, **form_args)
        if form.is_valid():
            spec = spec_from_form(deployment, form.cleaned_data)
            confirmed = "confirm" in request.POST
            try:
                outcome = run(name, spec, request.user, dry_run=not confirmed)
            except Refused as refused:
                _attach(form, refused.errors)
            else:
                if confirmed:
                    return _applied(request, deployment, outcome)
                context.update(outcome_context(outcome))
                context["previewed"] = True
    context.update(
        form=form,
        allowed_flags=ALLOWED_FLAG_NAMES,
        admin_only_flags=sorted(CODE_LOADING_FLAGS),
        form_errors=[
            (str(form.fields[key].label) if key in form.fields else "", text)
            for key, texts in form.errors.items()
            for text in texts
        ],
    )
    return render(request, "deployments/edit.html", context)


def _applied(request, deployment: Deployment, outcome: Outcome):
    if outcome.result == "unchanged":
        messages.info(
            request,
            _("Nothing to change: {name} already runs with these settings.").format(name=deployment.name),
        )
    else:
        text = _("Applied to {name}: {effect}").format(
            name=deployment.name, effect=outcome_context(outcome)["effect_text"]
        )
        messages.success(request, text, extra_tags=TRANSITION)
    return redirect("deployments:detail", name=deployment.name)


@role_required(OPERATOR)
@require_POST
def deployment_scale(request, name):
    """Set the replica count: the current spec with `replicas` changed, applied at once."""
    deployment = visible_deployment(request, name)
    primary = deployment.replica_of or deployment
    wanted = request.POST.get("replicas", "")
    if not wanted.isdigit():
        messages.error(request, _("Replicas: give a whole number from 1 to 64."))
        return redirect("deployments:detail", name=name)
    spec = spec_of(primary)
    spec["replicas"] = int(wanted)
    if spec["replicas"] > 1 and "placement" in spec:
        # Each replica takes NPUs of its own: as many as the primary holds, on its node, and its own port.
        spec["placement"]["npus"] = len(spec["placement"]["npus"])
        spec["engine"].pop("port", None)
    try:
        outcome = run(primary.name, spec, request.user, dry_run=False)
    except Refused as refused:
        for texts in refused.errors.values():
            for text in texts:
                messages.error(request, text)
        return redirect("deployments:detail", name=name)
    return _applied(request, primary, outcome)


@role_required(OPERATOR)
def deployment_rollback(request, name):
    """GET: what going back to the previous spec changes. POST: go back."""
    deployment = visible_deployment(request, name)
    context: dict[str, Any] = {"deployment": deployment, "errors": []}
    try:
        outcome = undo.undo(deployment, request.user, dry_run=request.method != "POST")
    except (serializers.ValidationError, AdminOnlyFlag, AdminOnlyEnv, services.DeploymentConflict) as error:
        detail = getattr(error, "detail", None) or str(error)
        context["errors"] = flatten(detail)
    else:
        if request.method == "POST":
            return _applied(request, deployment, outcome)
        context.update(outcome_context(outcome))
    return render(request, "deployments/rollback.html", context)
